"""Rollout episodes as LeRobot v3.0 dataset frames (frame t: the observation before step t, its action, and what the
step gave). With a `labeller` (DAgger: an expert with `reset(env)`, `label(env, last_target)`) the stored action is the
expert's label, and the expert drives a seeded `expert_drive_prob` of the steps (a serial vector env only)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from hfpolicy.constants import ACTION, DONE, REWARD, SUCCESS
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.writer import DatasetWriter
from hfpolicy.envs import SUCCESS_INFO_KEY
from hfpolicy.envs.observations import OBSERVATION_KEYS
from hfpolicy.io.atomic import write_json_atomically

STEP_FEATURES = (ACTION, REWARD, SUCCESS, DONE)  # besides the observations, what every collected frame holds
ONLINE_META_PATH = "meta/hfpolicy_online.json"  # rounds of online collection: steps, seeds, labels


@dataclass
class RolloutEpisode:
    """One collected episode: its seed and its frames, column by column (each a list of per-frame arrays)."""

    seed: int
    frames: dict[str, list[np.ndarray | np.generic]] = field(default_factory=dict)  # (next.* are numpy scalars)
    applied: list[np.ndarray] = field(default_factory=list)  # the actions that drove the env (not written out)
    success: bool = False  # the env reported success at some step
    n_expert_steps: int = 0  # steps the expert's action drove (expert_drive_prob)
    n_replans: int = 0  # times the labelling expert re-planned because the driver left its plan
    final_state: np.ndarray | None = None  # PushT: (agent x, y, block x, y, angle) after the last step

    @property
    def length(self) -> int:
        return len(self.frames.get(ACTION, []))

    @property
    def total_reward(self) -> float:
        return float(sum(np.sum(r) for r in self.frames.get(REWARD, [])))


class EpisodeCollector:
    """A rollout `StepHook` that collects each episode's frames of `features` (info.json style)."""

    def __init__(
        self,
        features: Mapping[str, Mapping[str, Any]],
        labeller: Callable[[], Any] | None = None,
        expert_drive_prob: float = 0.0,
        on_episode_end: Callable[[RolloutEpisode], None] | None = None,
    ):
        if not 0.0 <= expert_drive_prob <= 1.0:
            raise ValueError(f"expert_drive_prob must be in [0, 1], got {expert_drive_prob}")
        if expert_drive_prob > 0 and labeller is None:
            raise ValueError("expert_drive_prob > 0 needs an expert (a labeller) to drive")
        self.observation_keys = {env_key: key for env_key, key in OBSERVATION_KEYS.items() if key in features}
        missing = [key for key in features if key not in STEP_FEATURES and key not in self.observation_keys.values()]
        if missing:
            raise ValueError(f"the env's observations give no {missing}: collected frames cannot hold them")
        self.labeller, self.expert_drive_prob = labeller, expert_drive_prob
        self.on_episode_end = on_episode_end
        self._done: list[RolloutEpisode] = []
        self._slots: list[RolloutEpisode | None] = []

    def episodes(self) -> list[RolloutEpisode]:
        """The episodes kept so far, in the order they ended."""
        return list(self._done)

    def flush(self) -> None:
        """Ends the episodes still running (cut at the rollout's max_steps): call after each `rollout`."""
        for slot, episode in enumerate(self._slots):
            if episode is not None and episode.length:
                self._end(slot, episode)

    def _end(self, slot: int, episode: RolloutEpisode) -> None:
        self._slots[slot] = None
        if self.on_episode_end is not None:
            self.on_episode_end(episode)
        else:
            self._done.append(episode)

    # --- StepHook --------------------------------------------------------------------------------------------------
    def after_reset(self, env: VectorEnv, observation: Any, seeds: Sequence[int]) -> None:
        self.flush()
        self._slots = [RolloutEpisode(seed=int(seed)) for seed in seeds]
        self._rngs = [np.random.default_rng([int(seed), 1]) for seed in seeds]
        self._experts, self._last_target = [], []
        if self.labeller is None:
            return
        for slot in range(len(seeds)):
            sub_env = self._sub_env(env, slot)
            expert = self.labeller()
            expert.reset(sub_env)
            self._experts.append(expert)
            self._last_target.append(np.array(sub_env.unwrapped.agent.position, dtype=np.float64))

    def before_step(self, env: VectorEnv, observation: Any, action: np.ndarray, running: np.ndarray) -> np.ndarray:
        action = np.array(action, copy=True)
        for slot, episode in enumerate(self._slots):
            if not running[slot] or episode is None:
                continue
            for env_key, key in self.observation_keys.items():
                episode.frames.setdefault(key, []).append(np.array(observation[env_key][slot], copy=True))
            label = action[slot]
            if self.labeller is not None:
                expert = self._experts[slot]
                label = np.asarray(expert.label(self._sub_env(env, slot), self._last_target[slot]), action.dtype)
                if self.expert_drive_prob > 0 and self._rngs[slot].random() < self.expert_drive_prob:
                    action[slot] = label
                    episode.n_expert_steps += 1
                self._last_target[slot] = action[slot].astype(np.float64)
                episode.n_replans = expert.n_replans
            episode.frames.setdefault(ACTION, []).append(np.array(label, dtype=np.float32))
            episode.applied.append(np.array(action[slot], dtype=np.float32))
        return action

    def after_step(self, env: VectorEnv, reward, terminated, truncated, info, running) -> None:
        envs = getattr(env, "envs", None)
        success = np.asarray(info.get(SUCCESS_INFO_KEY, np.zeros(len(running), bool)), dtype=bool)
        for slot, episode in enumerate(self._slots):
            if not running[slot] or episode is None:
                continue
            episode.success = episode.success or bool(success[slot])
            done = bool(terminated[slot] or truncated[slot])
            episode.frames.setdefault(REWARD, []).append(np.float32(reward[slot]))
            episode.frames.setdefault(SUCCESS, []).append(np.bool_(episode.success))
            episode.frames.setdefault(DONE, []).append(np.bool_(done))
            if envs is not None and hasattr(envs[slot].unwrapped, "block"):  # PushT: where recovery would start
                pusht = envs[slot].unwrapped
                episode.final_state = np.array([*pusht.agent.position, *pusht.block.position, pusht.block.angle])
            if done:
                self._end(slot, episode)

    @staticmethod
    def _sub_env(env: VectorEnv, slot: int):
        envs = getattr(env, "envs", None)
        if envs is None:
            raise ValueError("expert labels read each env's simulator state: use a serial vector env (parallel=False)")
        return envs[slot]


def rollout_features(policy_inputs: Mapping[str, Any], action_shape: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Dataset features (info.json style) for a policy's input features and an action shape, plus next.*."""
    features: dict[str, dict[str, Any]] = {}
    for key, feature in policy_inputs.items():
        shape = [int(n) for n in feature.shape]
        if len(shape) == 3:  # (C, H, W) -> a video of (H, W, C) frames
            features[key] = {"dtype": "video", "shape": [shape[1], shape[2], shape[0]],
                             "names": ["height", "width", "channels"]}  # fmt: skip
        else:
            features[key] = {"dtype": "float32", "shape": shape, "names": None}
    features[ACTION] = {"dtype": "float32", "shape": [int(n) for n in action_shape], "names": None}
    features[REWARD] = {"dtype": "float32", "shape": [1], "names": None}
    features[SUCCESS] = {"dtype": "bool", "shape": [1], "names": None}
    features[DONE] = {"dtype": "bool", "shape": [1], "names": None}
    return features


def write_episode(writer: DatasetWriter, episode: RolloutEpisode, task: str) -> None:
    """Adds one collected episode to an open DatasetWriter (its last frame marked done)."""
    for t in range(episode.length):
        frame = {key: episode.frames[key][t] for key in writer.user_keys}
        for key in (REWARD, SUCCESS, DONE):
            if key in frame:
                frame[key] = np.asarray(frame[key]).reshape(1)
        if t == episode.length - 1 and DONE in frame:
            frame[DONE] = np.array([True])  # an episode cut at max_steps ends there too
        writer.add_frame(frame, task=task)
    writer.save_episode()


def write_episodes_dataset(
    root: str | Path,
    repo_id: str,
    fps: float,
    features: Mapping[str, Mapping[str, Any]],
    episodes: Iterable[RolloutEpisode],
    task: str,
    *,
    overwrite: bool = False,
    append: bool = False,
    extra_meta: Mapping[str, Any] | None = None,
) -> Path:
    """Writes the episodes as a LeRobot v3.0 dataset at `root`, atomically, or with `append` adds them to the dataset
    there, if any. `extra_meta` goes to meta/hfpolicy_online.json."""
    if append and (Path(root) / INFO_PATH).is_file():
        writer = DatasetWriter.open(root, repo_id)
    else:
        writer = DatasetWriter.create(root, repo_id, fps, features, overwrite=overwrite)
    with writer:
        for episode in episodes:
            write_episode(writer, episode, task)
        if extra_meta is not None:
            write_json_atomically(writer.tmp_root / ONLINE_META_PATH, dict(extra_meta))
    return writer.root
