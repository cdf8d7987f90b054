"""`hfpolicy record`: demonstrations from a scripted expert, written as a LeRobot v3.0 dataset.

    hfpolicy record --env.type=pusht --policy.type=scripted --n_episodes=200 --output_dir=data/pusht_scripted \\
        [--push_to=user/pusht_scripted]

The dataset has the features of the converted lerobot/pusht (observation.image as a 96x96 video, observation.state =
agent x, y, action = target agent x, y, next.reward / next.success / next.done), optionally the block keypoints as
observation.environment_state, so every policy config that trains on lerobot/pusht trains on it unchanged. Episode i
is seeded start_seed + i. Frame t holds the observation before action t and the reward, success and done flag that
action t produced, as in lerobot/pusht.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from draccus.utils import ParsingError
from tqdm.auto import tqdm

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import DatasetWriter, push_dataset_to_hub
from hfpolicy.datasets.pusht_zarr import PUSHT_TASK, PushTGeometry, pusht_features
from hfpolicy.datasets.writer import check_dataset_destination
from hfpolicy.envs import SUCCESS_INFO_KEY, EnvConfig, PushTEnvConfig
from hfpolicy.flags import parse_flags
from hfpolicy.run_lock import RunLockedError
from hfpolicy.termination import stop_on_sigterm

DEMONSTRATORS = ("scripted",)  # --policy.type values `hfpolicy record` knows


@dataclass
class DemonstratorConfig:
    """Who acts while recording."""

    type: str = (
        "scripted"  # "scripted": the PushT expert planning on the simulator's state (hfpolicy.policies.scripted)
    )


@dataclass
class RecordConfig:
    """`hfpolicy record` flags."""

    env: EnvConfig = field(default_factory=PushTEnvConfig)  # the simulator (--env.type=pusht)
    policy: DemonstratorConfig = field(default_factory=DemonstratorConfig)  # the demonstrator (--policy.type=scripted)
    n_episodes: int = 50  # episodes to record
    start_seed: int = 0  # episode i is seeded start_seed + i
    max_steps: int = 300  # steps after which an episode is cut (gym-pusht's time limit)
    output_dir: str | None = None  # where the dataset is written (must not exist, unless --overwrite=true); required
    overwrite: bool = False  # replace the dataset at output_dir, once the new one is complete (a re-run of a recipe)
    repo_id: str | None = None  # the dataset's name in its metadata (default: local/<output_dir name>)
    push_to: str | None = None  # Hub dataset repo id to upload the finished dataset to
    environment_state: bool = False  # also record observation.environment_state (the block's 8 keypoints)
    images: bool = True  # record observation.image (96x96 video); false: state-only, ~3x faster to record
    discard_failures: bool = False  # leave out episodes that did not succeed within max_steps
    progress: bool = True  # show a progress bar


def record(cfg: RecordConfig) -> Path:
    """Records `cfg.n_episodes` expert episodes into a new dataset at `cfg.output_dir`; returns its root."""
    if cfg.policy.type not in DEMONSTRATORS:
        raise ValueError(f"unknown demonstrator --policy.type={cfg.policy.type!r}; valid: {', '.join(DEMONSTRATORS)}")
    if not isinstance(cfg.env, PushTEnvConfig):
        raise ValueError(f"the scripted expert plays PushT only; got --env.type={cfg.env.type}")
    if cfg.output_dir is None:
        raise ValueError("--output_dir is required: the folder the dataset is written to")
    if cfg.n_episodes < 1 or cfg.max_steps < 1:
        raise ValueError("--n_episodes and --max_steps must be >= 1")
    output_dir = Path(cfg.output_dir)
    check_dataset_destination(output_dir, cfg.overwrite, cli=True)  # before the env starts; again once held
    from hfpolicy.policies.scripted import PushTExpert

    if not cfg.images and not cfg.environment_state:
        raise ValueError("--images=false needs --environment_state=true: the policy would see only the agent")
    env_cfg = PushTEnvConfig(
        obs_type="pixels_agent_pos" if cfg.images else "environment_state_agent_pos",
        episode_length=cfg.max_steps,
        observation_size=cfg.env.observation_size,
        render_size=cfg.env.render_size,
    )
    env = env_cfg.make_single()
    expert = PushTExpert()
    geometry = PushTGeometry() if cfg.environment_state else None
    features = pusht_features(env_cfg.observation_size, cfg.environment_state, images=cfg.images)
    writer = DatasetWriter.create(
        output_dir, cfg.repo_id or f"local/{output_dir.name}", env_cfg.fps, features, overwrite=cfg.overwrite
    )
    n_kept = n_successes = 0
    try:
        with writer:
            bar = tqdm(range(cfg.n_episodes), desc="recording", unit="episode", disable=not cfg.progress)
            for episode in bar:
                observation, _ = env.reset(seed=cfg.start_seed + episode)
                expert.reset(env)
                success = False
                for _ in range(cfg.max_steps):
                    frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
                    if cfg.images:
                        frame[OBS_IMAGE] = observation["pixels"]
                    if geometry is not None:
                        block = env.unwrapped.block
                        pose = np.array([[*block.position, block.angle]])
                        frame[OBS_ENV_STATE] = geometry.keypoints(pose)[0].astype(np.float32)
                    action = np.asarray(expert.act(env), dtype=np.float32)
                    observation, reward, terminated, truncated, info = env.step(action)
                    success = success or bool(info.get(SUCCESS_INFO_KEY, False))
                    done = terminated or truncated
                    frame.update({ACTION: action, REWARD: np.float32(reward), SUCCESS: success, DONE: done})
                    writer.add_frame(frame, task=PUSHT_TASK)
                    if done:
                        break
                n_successes += success
                if success or not cfg.discard_failures:
                    writer.save_episode()
                    n_kept += 1
                else:
                    writer.clear_episode()
                bar.set_postfix_str(f"success {100 * n_successes / (episode + 1):.1f}%", refresh=False)
            if n_kept == 0:
                raise RuntimeError("no episode was kept (every one failed and --discard_failures=true)")
    finally:
        env.close()
    if cfg.push_to:
        push_dataset_to_hub(
            output_dir,
            cfg.push_to,
            tags=["pusht", "scripted-expert", "hfpolicy"],
            description=f"{n_kept} PushT demonstrations by hfpolicy's scripted expert (seeds from {cfg.start_seed}).",
        )
    return output_dir


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_flags(RecordConfig, sys.argv[1:] if argv is None else argv, prog="hfpolicy record")
        with stop_on_sigterm():  # a stopped recording removes its staging folder
            root = record(cfg)
    except (ParsingError, ValueError, FileExistsError, RunLockedError) as e:
        print(f"hfpolicy record: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"hfpolicy record: error: cannot write --output_dir={cfg.output_dir}: {e}", file=sys.stderr)
        return 1
    print(f"recorded {cfg.n_episodes} episodes into {root}" + (f"; pushed to {cfg.push_to}" if cfg.push_to else ""))
    return 0
