"""`hfpolicy record --env.type=xarm`: scripted xArm lift demonstrations as a LeRobot v3.0 dataset.

    hfpolicy record --env.type=xarm --env.task=XarmLift-v0 --policy.type=scripted --n_episodes=50 \\
        --output_dir=data/xarm_lift_scripted [--images=false --environment_state=true]

The dataset has the features of the Hub's lerobot/xarm_lift_medium: observation.image (84x84 video, 15 fps),
observation.state (end-effector position + gripper angle), action (move x, y, z and grip), next.reward (gym-xarm's
reward: TD-MPC learns from it), next.done, plus next.success as the PushT recordings have, and optionally
observation.environment_state (the cube's pose). An episode ends at its first success (gym-xarm's is_success) or after
--max_steps (default 200). Episode i is seeded start_seed + i. Frame t holds the observation before action t and the
reward, success so far and done flag that action t produced.
"""

import dataclasses
from pathlib import Path

import numpy as np

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import DatasetWriter, push_dataset_to_hub
from hfpolicy.datasets.writer import check_dataset_destination
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.envs.xarm import ACTION_NAMES, ENV_STATE_NAMES, STATE_NAMES
from hfpolicy.record import record_episodes, record_frames
from hfpolicy.words import counted


def xarm_features(images: bool = True, environment_state: bool = False, size=(84, 84)) -> dict:
    """The features of a scripted xArm dataset (lerobot/xarm_lift_medium's and next.success, optionally with the
    cube's pose and without the camera)."""
    features = {}
    if images:
        features[OBS_IMAGE] = {"dtype": "video", "shape": [*size, 3], "names": ["height", "width", "channels"]}
    features[OBS_STATE] = {"dtype": "float32", "shape": [len(STATE_NAMES)], "names": list(STATE_NAMES)}
    features[ACTION] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    features[REWARD] = {"dtype": "float32", "shape": [1], "names": None}
    features[SUCCESS] = {"dtype": "bool", "shape": [1], "names": None}
    features[DONE] = {"dtype": "bool", "shape": [1], "names": None}
    if environment_state:
        features[OBS_ENV_STATE] = {"dtype": "float32", "shape": [len(ENV_STATE_NAMES)], "names": list(ENV_STATE_NAMES)}
    return features


def record_xarm(cfg) -> Path:
    """Records `cfg.n_episodes` expert episodes of `cfg.env` (an XarmEnvConfig) into a new dataset at
    `cfg.output_dir` (`cfg` is hfpolicy.record.RecordConfig, already checked); returns its root."""
    from hfpolicy.policies.scripted.xarm_expert import XarmExpert

    if not cfg.images and not cfg.environment_state:
        raise ValueError("--images=false needs --environment_state=true: the policy would see only the gripper")
    output_dir = Path(cfg.output_dir)
    check_dataset_destination(output_dir, cfg.overwrite, cli=True)
    env_cfg: XarmEnvConfig = dataclasses.replace(
        cfg.env,
        obs_type="pixels_agent_pos" if cfg.images else "environment_state_agent_pos",
        episode_length=cfg.max_steps,
    )
    env = env_cfg.make_single()
    expert = XarmExpert()
    features = xarm_features(cfg.images, cfg.environment_state, (env_cfg.observation_height, env_cfg.observation_width))
    writer = DatasetWriter.create(
        output_dir, cfg.repo_id or f"local/{output_dir.name}", env_cfg.fps, features, overwrite=cfg.overwrite
    )
    try:
        task = env_cfg.description
        n_kept = record_episodes(writer, cfg, lambda seed: record_xarm_episode(env, expert, writer, cfg, seed, task))
    finally:
        env.close()
    if cfg.push_to:
        push_dataset_to_hub(
            output_dir,
            cfg.push_to,
            tags=["xarm", env_cfg.task, "scripted-expert", "hfpolicy"],
            description=f"{counted(n_kept, f'{env_cfg.task} demonstration')} by hfpolicy's scripted lift expert "
            f"(seeds from {cfg.start_seed}).",
        )
    return output_dir


def record_xarm_episode(env, expert, writer: DatasetWriter, cfg, seed: int, task: str) -> bool:
    """One expert episode into the writer's current episode (see `record_frames`); returns whether it succeeded."""
    from hfpolicy.policies.scripted.xarm_expert import run_xarm_expert_episode

    def observe(observation) -> dict:
        frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
        if cfg.images:
            frame[OBS_IMAGE] = observation["pixels"]
        if cfg.environment_state:
            frame[OBS_ENV_STATE] = env.unwrapped.environment_state().astype(np.float32)
        return frame

    return record_frames(
        writer, task, observe, lambda **hooks: run_xarm_expert_episode(env, expert, seed, cfg.max_steps, **hooks)
    )
