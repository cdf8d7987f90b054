"""Online training (`--online.every=N`): rounds of the policy's own rollouts (EMA weights, evaluation's rollout code)
join its training data as `<output_dir>/online_data/`, a LeRobot v3.0 dataset each round appends to, labelled by
`--online.labels` (expert, policy, recovery, reward); every batch then takes `--online.ratio` of its rows from it.
A checkpoint records the schedule and the episodes seen, so a resume truncates the data to them and stays exact.
Labels, seeds, cadence and pure online (`--online.seed_episodes`): docs/training.md and docs/online_rl.md.
"""

import contextlib
import functools
import json
import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from tqdm.auto import tqdm

from hfpolicy.constants import ACTION
from hfpolicy.datasets import PolicyDataset
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.mixture import DATASET_INDEX, MixtureDataset
from hfpolicy.datasets.writer import truncate_dataset
from hfpolicy.envs import EnvConfig
from hfpolicy.envs.observations import OBSERVATION_KEYS
from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.eval.episode_data import (
    ONLINE_META_PATH,
    STEP_FEATURES,
    EpisodeCollector,
    RolloutEpisode,
    write_episodes_dataset,
)
from hfpolicy.eval.rollouts import EpisodeRecord, RandomActions, rollout
from hfpolicy.experts import PushTExpert
from hfpolicy.io.atomic import free_bytes, is_disk_full, temporary_path, write_json_atomically
from hfpolicy.policies.base import Policy
from hfpolicy.runs.run_folder import RunFolder
from hfpolicy.ticker import ticking
from hfpolicy.training.config import OnlineConfig, TrainConfigError

ONLINE_DATA_DIR = "online_data"
ONLINE_STATE_KEY = "online_episodes"  # in a checkpoint's step.json: online episodes the run had seen
ONLINE_LAST_ROUND_KEY = "online_last_round"  # the step of its last round (0: none yet)
ONLINE_NEXT_ROUND_KEY = "online_next_round"  # the step of its next round
ONLINE_ROUNDS_KEY = "online_rounds"  # the rounds it had collected (the seed round not counted)
ONLINE_ENV_STEPS_KEY = "online_env_steps"  # the online env steps it had played (the seed round's too)


def online_features(dataset_features: dict[str, Any], policy_inputs: list[str]) -> dict[str, Any]:
    """The online dataset's features: the offline data's entries for the policy's inputs, action and next.*."""
    keys = [*policy_inputs, *STEP_FEATURES]
    missing = [key for key in keys if key not in dataset_features]
    if missing:
        raise TrainConfigError(
            f"online training writes the offline data's features, but the dataset has no {missing}; "
            "train on a dataset recorded with next.reward / next.success / next.done (hfpolicy record, convert)"
        )
    return {key: {k: v for k, v in dataset_features[key].items() if k != "info"} for key in keys}


class OnlineDataError(RuntimeError):
    """The round's online data could not be written (a full disk)."""


class OnlineTraining:
    """The online data of one run: collecting rounds, the dataset on disk, and mixing it into training batches."""

    def __init__(
        self,
        cfg: OnlineConfig,
        output_dir: Path,
        env_cfg: EnvConfig,
        features: dict[str, Any],
        fps: float,
        delta_timestamps: dict[str, list[float]] | None,
        drop_n_last_frames: int,
        seed: int,
        member_index: int | None = None,
        batch_size: int | None = None,
    ):
        self.cfg, self.env_cfg, self.features, self.fps = cfg, env_cfg, features, fps
        self.root = Path(output_dir) / ONLINE_DATA_DIR
        self.delta_timestamps, self.drop_n_last_frames, self.seed = delta_timestamps, drop_n_last_frames, seed
        self.member_index = member_index  # offline data of several datasets: the online rows' dataset_index
        self.batch_size = batch_size  # the rows of a batch made of online data alone (pure online)
        self.first_step = cfg.start_step if cfg.start_step is not None else cfg.every
        self.rounds: list[dict[str, Any]] = []  # {step, seeds, kept, ...}: what meta/hfpolicy_online.json lists
        self.last_round = 0  # the step of the last round collected (kept episodes or not)
        self.next_round = self.first_step  # the step after which the next round runs
        self.n_rounds = 0  # rounds collected (the pure-online seed round not counted): the next round's seeds
        self.env_steps = 0  # online env steps played (the seed round's too): the exploration schedule
        self.dataset: MixtureDataset | None = None  # the online data read so far: one member per reload
        self._parts: list[PolicyDataset] = []
        self._valid: np.ndarray = np.zeros(0, dtype=np.int64)  # dataset positions a training sample may start at
        self._starts: np.ndarray = np.zeros(0, dtype=np.int64)  # each episode's first position, in order
        self._window_first = 0  # --online.capacity: the first frame of the newest whole episodes that fit it ...
        self._sampled_from = 0  # ... and the first of `_valid` there

    def is_due(self, step: int) -> bool:
        return step == self.next_round

    def planned_rounds(self, step: int, steps: int) -> dict[int, int]:
        """{step: episodes} of the rounds after `step` in a run of `steps`: the next one, then every --online.every."""
        first = max(self.next_round, step + 1)
        return {s: self.cfg.n_episodes for s in range(first, steps, max(self.cfg.every, 1))}

    def round_seeds(self) -> list[int]:
        base = self.cfg.start_seed + self.cfg.seed_episodes + self.n_rounds * self.cfg.n_episodes
        return list(range(base, base + self.cfg.n_episodes))

    @property
    def n_episodes(self) -> int:
        return sum(len(r["kept"]) for r in self.rounds)

    @property
    def n_frames(self) -> int:
        return 0 if self.dataset is None else self.dataset.num_frames

    def state(self) -> dict[str, int]:
        """What a checkpoint records in its step.json."""
        return {
            ONLINE_STATE_KEY: self.n_episodes,
            ONLINE_LAST_ROUND_KEY: self.last_round,
            ONLINE_NEXT_ROUND_KEY: self.next_round,
            ONLINE_ROUNDS_KEY: self.n_rounds,
            ONLINE_ENV_STEPS_KEY: self.env_steps,
        }

    def round_skipped(self, step: int, steps: int) -> bool:
        """Whether a run resumed at `step` first collects the round due there (a run that ended there skipped it)."""
        return 0 < step < steps and self.is_due(step) and self.last_round < step

    def restore(self, accelerator: Accelerator, step: int, checkpoint_state: dict[str, Any]) -> None:
        """Resuming at checkpoint `step`: the data truncated to the episodes its `state()` recorded; the schedule."""
        seen_episodes = int(checkpoint_state.get(ONLINE_STATE_KEY, 0))
        self.last_round = int(checkpoint_state.get(ONLINE_LAST_ROUND_KEY, step))  # older checkpoints: no catching up
        if ONLINE_NEXT_ROUND_KEY in checkpoint_state:
            self.next_round = int(checkpoint_state[ONLINE_NEXT_ROUND_KEY])
            self.n_rounds = int(checkpoint_state[ONLINE_ROUNDS_KEY])
            self.env_steps = int(checkpoint_state[ONLINE_ENV_STEPS_KEY])
        elif self.last_round >= self.first_step:  # an older checkpoint: the schedule from its last round's step
            self.n_rounds = (self.last_round - self.first_step) // self.cfg.every + 1
            self.next_round = self.last_round + self.cfg.every
        meta = self.root / ONLINE_META_PATH
        if seen_episodes == 0 and not meta.is_file():
            return
        if not meta.is_file():
            raise TrainConfigError(
                f"the checkpoint at step {step} had seen {seen_episodes} online episodes, but {self.root} holds no "
                "online data: the run folder was changed; start a new run"
            )
        rounds = [r for r in json.loads(meta.read_text())["rounds"] if r["step"] <= step]
        kept = sum(len(r["kept"]) for r in rounds)
        if kept != seen_episodes:
            raise TrainConfigError(
                f"{self.root} holds {kept} online episodes up to step {step}, the checkpoint recorded "
                f"{seen_episodes}: the online data does not belong to this checkpoint; start a new run"
            )
        self.rounds = rounds
        if accelerator.is_main_process:
            if kept:
                truncate_dataset(self.root, kept)
                write_json_atomically(self.root / ONLINE_META_PATH, self._online_meta())
            else:  # the checkpoint came before every round: none of the data on disk may be trained on
                discard_online_data(self.root)
        accelerator.wait_for_everyone()
        self._reload()

    def collect(
        self, accelerator: Accelerator, policy: torch.nn.Module, ema: Any, step: int, progress: bool = False
    ) -> dict[str, float]:
        """One round (every process calls it) with the EMA weights (exploring, with reward labels); its stats."""
        model = accelerator.unwrap_model(policy)
        exploration = self.cfg.exploration_at(self.env_steps) if self.cfg.labels == "reward" else None
        note = {} if exploration is None else {"exploration_std": exploration}
        with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
            episodes = self._round(accelerator, step, self.round_seeds(), note, model, exploration, progress)
        round_steps = sum(e.length for e in episodes)
        self.last_round, self.n_rounds = step, self.n_rounds + 1
        self.next_round = step + max(self.cfg.every, math.ceil(self.cfg.updates_per_env_step * round_steps))
        stats = {
            "online/round_success": sum(e.success for e in episodes) / len(episodes),  # the policy's, on new seeds
            "online/round_return": sum(e.total_reward for e in episodes) / len(episodes),
            "online/episodes": float(self.n_episodes),
            "online/frames": float(self.n_frames),
            "online/sampled_frames": float(self.n_frames - self._window_first),
            "online/env_steps": float(self.env_steps),
            "online/replans_per_step": sum(e.n_replans for e in episodes) / max(round_steps, 1),
        }
        if exploration is not None:
            stats["online/exploration_std"] = exploration
        return stats

    def collect_seed_round(self, accelerator: Accelerator) -> None:
        """Pure online's first round, at step 0: --online.seed_episodes episodes of seeded random actions (reward
        labels: all kept)."""
        seeds = list(range(self.cfg.start_seed, self.cfg.start_seed + self.cfg.seed_episodes))
        self._round(accelerator, 0, seeds, {"random": True}, policy=None)

    def _round(
        self,
        accelerator: Accelerator,
        step: int,
        seeds: list[int],
        note: dict[str, Any],
        policy: Policy | None,
        exploration: float | None = None,
        progress: bool = False,
    ) -> list[RolloutEpisode]:
        """Plays this process's share of `seeds` (`collect_episodes`), gathers every process's, records and appends the
        kept ones; the episodes played."""
        share = seeds[accelerator.process_index :: accelerator.num_processes]
        local: tuple[list, list] = ([], [])
        if share:
            local = collect_episodes(policy, self.env_cfg, share, self.cfg, self.features, exploration, progress)
        gathered = gather_object([local])  # [(played, data)] of every process
        episodes = sorted((e for played, _ in gathered for e in played), key=lambda e: e.seed)
        kept = sorted((e for _, data in gathered for e in data), key=lambda e: e.seed)
        round_steps = sum(e.length for e in episodes)
        self.env_steps += round_steps
        self.rounds.append(
            {"step": step, "seeds": seeds, "kept": [e.seed for e in kept], "env_steps": round_steps, **note}
        )
        if accelerator.is_main_process and kept:
            self._append(kept)
        accelerator.wait_for_everyone()
        if kept:
            self._reload()
        return episodes

    def _online_meta(self) -> dict[str, Any]:
        """meta/hfpolicy_online.json."""
        return {"labels": self.cfg.labels, "config": asdict(self.cfg), "rounds": self.rounds}

    def _append(self, episodes: list[RolloutEpisode]) -> None:
        try:
            write_episodes_dataset(
                self.root, f"local/{ONLINE_DATA_DIR}", self.fps, self.features, episodes, task_sentence(self.env_cfg),
                append=True, extra_meta=self._online_meta(),
            )  # fmt: skip
        except OSError as e:
            if not is_disk_full(e):
                raise
            raise OnlineDataError(disk_full_message(self.root)) from e

    def _reload(self) -> None:
        """Reads the episodes added since the last reload as one more member of the online data's mixture."""
        read = sum(part.num_episodes for part in self._parts)
        if not (self.root / INFO_PATH).is_file() or read >= self.n_episodes:
            return
        part = PolicyDataset(
            f"local/{ONLINE_DATA_DIR}", root=self.root, episodes=range(read, self.n_episodes),
            delta_timestamps=self.delta_timestamps,
            download_videos=any(f["dtype"] == "video" for f in self.features.values()),
        )  # fmt: skip
        offset = self.n_frames
        self._parts.append(part)
        self.dataset = MixtureDataset(self._parts, [f"{ONLINE_DATA_DIR}[{i}]" for i in range(len(self._parts))])
        ranges = [np.arange(start, end - self.drop_n_last_frames) + offset for start, end in part.episode_bounds]
        self._valid = np.concatenate([self._valid, *ranges]).astype(np.int64)
        self._starts = np.concatenate([self._starts, part.episode_bounds[:, 0] + offset]).astype(np.int64)
        if self.cfg.capacity > 0:  # the newest whole episodes whose frames fit the capacity
            fits = self._starts[self.n_frames - self._starts <= self.cfg.capacity]
            self._window_first = int(fits[0]) if len(fits) else self.n_frames
            self._sampled_from = int(np.searchsorted(self._valid, self._window_first))

    def mix(self, batch: dict[str, Any] | None, step: int, rank: int, part: int = 0) -> dict[str, Any]:
        """The offline `batch` with its last `ratio` share of rows replaced by online samples (none yet: unchanged);
        `batch` None (pure online): online samples alone. The rows are drawn here, from (seed, step, rank, `part`),
        not by the sampler whose workers read ahead of the rounds: resume stays exact."""
        pool = self._valid[self._sampled_from :]
        if self.dataset is None or len(pool) == 0:
            if batch is None:
                raise RuntimeError("pure online training has no online data yet: collect the seed round first")
            return batch
        n = len(batch[ACTION]) if batch is not None else self.batch_size
        if n is None:
            raise ValueError("a batch of online data alone needs the batch size: OnlineTraining(batch_size=...)")
        ratio = 1.0 if batch is None else self.cfg.batch_ratio
        k = int(round(ratio * n))
        k = min(max(k, 1), n - 1) if 0 < ratio < 1 else k
        if k == 0:
            return cast(dict[str, Any], batch)
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([self.seed, step, rank, *([part] if part else [])]).generate_state(1)[0])
        )
        picks = torch.randint(len(pool), (k,), generator=generator).numpy()
        uint8_images = batch is None or any(
            batch[key].dtype == torch.uint8 for key in self.dataset.camera_keys if key in batch
        )
        online = self.dataset.get_batch(pool[picks], uint8_images=uint8_images)  # frames as the batch's
        del online[DATASET_INDEX]  # which reload read them: nothing the training data knows of
        if batch is None:
            return online
        if DATASET_INDEX in batch and self.member_index is not None:  # the member after the offline datasets
            online[DATASET_INDEX] = torch.full((k,), self.member_index, dtype=batch[DATASET_INDEX].dtype)
        mixed: dict[str, Any] = {}
        for key, value in batch.items():
            if key not in online:
                continue
            if isinstance(value, torch.Tensor):
                mixed[key] = torch.cat([value[: n - k], online[key].to(value.dtype)])
            else:
                mixed[key] = [*value[: n - k], *online[key]]
        return mixed


def task_sentence(env_cfg: EnvConfig) -> str:
    """The task sentence the online episodes carry: the env's own (ALOHA, xArm), PushT's otherwise."""
    description = getattr(env_cfg, "description", None)
    if isinstance(description, str):
        return description
    from hfpolicy.datasets.pusht_zarr import PUSHT_TASK  # lazy: optional heavy dependency (zarr, gym-pusht)

    return PUSHT_TASK


def collect_episodes(
    policy: Policy | None,
    env_cfg: EnvConfig,
    seeds: list[int],
    cfg: OnlineConfig,
    features: dict[str, Any],
    exploration: float | None = None,
    progress: bool = False,
) -> tuple[list[RolloutEpisode], list[RolloutEpisode]]:
    """(the policy's episodes on `seeds`, played in one lockstep batch of envs with noise `exploration`; those of them
    that join the data as `cfg.labels` says). No policy: random actions."""
    labeller = PushTExpert if cfg.labels == "expert" else None
    collector = EpisodeCollector(features, labeller=labeller, expert_drive_prob=cfg.expert_drive_prob)
    env = env_cfg.make(len(seeds), parallel=False)
    was_training = policy is not None and policy.training
    exploring = contextlib.nullcontext() if policy is None or exploration is None else policy.exploring(exploration)
    bar = tqdm(total=len(seeds), desc="online round", unit="episode", leave=False, disable=not progress)

    def episode_ended(slot: int, record: EpisodeRecord) -> None:
        bar.update(1)

    try:
        if policy is not None:
            policy.eval()
        with exploring, bar, ticking(bar):
            actor = RandomActions(env.single_action_space) if policy is None else policy
            rollout(actor, env, seeds=seeds, step_hook=collector, on_episode_end=episode_ended)
        collector.flush()
    finally:
        env.close()
        if policy is not None:
            policy.reset()
            policy.train(was_training)
    episodes = sorted(collector.episodes(), key=lambda e: e.seed)
    if cfg.labels in ("expert", "reward"):
        return episodes, episodes
    if cfg.labels == "policy":
        return episodes, [e for e in episodes if e.success]
    failed = [e for e in episodes if not e.success and e.final_state is not None]
    recovering = tqdm(failed, desc="online round: recovery demos", unit="demo", leave=False, disable=not progress)
    with recovering, ticking(recovering):
        demos = [expert_recovery(env_cfg, e, features) for e in recovering]
    return episodes, [demo for demo in demos if demo is not None]


def expert_recovery(env_cfg: EnvConfig, failed: RolloutEpisode, features: dict[str, Any]) -> RolloutEpisode | None:
    """The scripted expert's episode from where a failed policy episode ended; None if it fails from there too."""
    assert failed.final_state is not None  # collect_episodes passes the episodes that ended with a state only
    env = env_cfg.make_single()
    try:
        observation, _ = env.reset(seed=failed.seed, options={"reset_to_state": reset_argument(failed.final_state)})
        expert = PushTExpert()
        expert.reset(env)
        demo = RolloutEpisode(seed=failed.seed)
        keys = {env_key: key for env_key, key in OBSERVATION_KEYS.items() if key in features}
        for _ in range(env_cfg.episode_length):
            for env_key, key in keys.items():
                demo.frames.setdefault(key, []).append(np.array(observation[env_key], copy=True))
            action = expert.act(env)
            observation, reward, terminated, truncated, info = env.step(action)
            demo.success = demo.success or bool(info.get("is_success", False))
            demo.frames.setdefault(ACTION, []).append(action)
            demo.frames.setdefault("next.reward", []).append(np.float32(reward))
            demo.frames.setdefault("next.success", []).append(np.bool_(demo.success))
            demo.frames.setdefault("next.done", []).append(np.bool_(terminated or truncated))
            demo.n_expert_steps += 1
            if terminated or truncated:
                break
    finally:
        env.close()
    return demo if demo.success else None


def reset_argument(state: np.ndarray) -> np.ndarray:
    """gym-pusht's reset_to_state argument for a pose read from the env (it sets the angle after the position)."""
    return _pusht_scorer().reset_state(state)


@functools.cache
def _pusht_scorer() -> PushTScorer:
    return PushTScorer()


def disk_full_message(root: Path) -> str:
    """The one line for a full disk while the online data at `root` was written."""
    mb = 1024**2
    held = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0
    free = free_bytes(root.parent)
    needs = f"the round writes the online data anew beside its old copy ({held / mb:.1f} MB now), and "
    space = f"{free / mb:.1f} MB are free there" if free is not None else "its disk is full"
    return (
        f"disk full while writing the online data into {root}: {needs}{space}; free some space, then "
        f"{RunFolder(root.parent).how_to_continue()}"
    )


def discard_online_data(root: Path) -> None:
    """Removes an online dataset: renamed aside first (atomic: a run killed meanwhile leaves it whole or none)."""
    aside = temporary_path(root)
    os.replace(root, aside)
    shutil.rmtree(aside)
