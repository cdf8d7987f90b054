"""`hfpolicy record --env.type=aloha`: scripted bimanual ALOHA demonstrations as a LeRobot v3.0 dataset.

    hfpolicy record --env.type=aloha --env.task=AlohaTransferCube-v0 --policy.type=scripted --n_episodes=50 \\
        --output_dir=data/aloha_transfer_cube_scripted [--images=false --environment_state=true]

The dataset has the features of the Hub's lerobot/aloha_sim_transfer_cube_scripted / aloha_sim_insertion_scripted:
observation.images.top (480x640 video, 50 fps), observation.state (14 joint positions), action (14 joint targets),
next.done, and their task sentence; optionally observation.environment_state (the object poses). As there, every
episode runs the full episode length (400 steps) whether or not it succeeded earlier: the expert's plan carries on
holding the object. Episode i is seeded start_seed + i (the object pose gym-aloha gives that seed). Frame t holds the
observation before action t, and next.done is true on an episode's last frame.
"""

import dataclasses
from pathlib import Path

import numpy as np

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGES_PREFIX, OBS_STATE
from hfpolicy.datasets import DatasetWriter, push_dataset_to_hub
from hfpolicy.datasets.writer import check_dataset_destination
from hfpolicy.envs import AlohaEnvConfig
from hfpolicy.envs.aloha import CAMERA, ENV_STATE_SIZES, MOTOR_NAMES
from hfpolicy.record import record_episodes
from hfpolicy.words import counted

OBS_IMAGE_TOP = f"{OBS_IMAGES_PREFIX}{CAMERA}"


def aloha_features(task: str, images: bool = True, environment_state: bool = False, size=(480, 640)) -> dict:
    """The features of a scripted ALOHA dataset (those of lerobot/aloha_sim_*_scripted, optionally with the object
    poses and without the camera)."""
    features = {}
    if images:
        features[OBS_IMAGE_TOP] = {"dtype": "video", "shape": [*size, 3], "names": ["height", "width", "channels"]}
    features[OBS_STATE] = {"dtype": "float32", "shape": [14], "names": {"motors": list(MOTOR_NAMES)}}
    features[ACTION] = {"dtype": "float32", "shape": [14], "names": {"motors": list(MOTOR_NAMES)}}
    features[DONE] = {"dtype": "bool", "shape": [1], "names": None}
    if environment_state:
        objects = ["cube"] if ENV_STATE_SIZES[task] == 7 else ["peg", "socket"]
        names = [f"{o}_{c}" for o in objects for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
        features[OBS_ENV_STATE] = {"dtype": "float32", "shape": [ENV_STATE_SIZES[task]], "names": names}
    return features


def record_aloha(cfg) -> Path:
    """Records `cfg.n_episodes` expert episodes of `cfg.env` (an AlohaEnvConfig) into a new dataset at
    `cfg.output_dir` (`cfg` is hfpolicy.record.RecordConfig, already checked); returns its root."""
    from hfpolicy.policies.scripted.aloha_expert import AlohaExpert

    if not cfg.images and not cfg.environment_state:
        raise ValueError("--images=false needs --environment_state=true: the policy would see only the joints")
    output_dir = Path(cfg.output_dir)
    check_dataset_destination(output_dir, cfg.overwrite, cli=True)
    env_cfg: AlohaEnvConfig = dataclasses.replace(
        cfg.env,
        obs_type="pixels_agent_pos" if cfg.images else "environment_state_agent_pos",
        episode_length=cfg.max_steps,
        terminate_on_success=False,  # full-length episodes, as the Hub's scripted datasets have
    )
    env = env_cfg.make_single()
    expert = AlohaExpert()  # its plan lasts 400 steps; a longer episode holds the last targets
    size = (env_cfg.observation_height, env_cfg.observation_width)
    features = aloha_features(env_cfg.task, cfg.images, cfg.environment_state, size)
    writer = DatasetWriter.create(
        output_dir, cfg.repo_id or f"local/{output_dir.name}", env_cfg.fps, features, overwrite=cfg.overwrite
    )
    try:
        task = env_cfg.description
        n_kept = record_episodes(writer, cfg, lambda seed: record_aloha_episode(env, expert, writer, cfg, seed, task))
    finally:
        env.close()
        expert.close()
    if cfg.push_to:
        push_dataset_to_hub(
            output_dir,
            cfg.push_to,
            tags=["aloha", env_cfg.task, "scripted-expert", "hfpolicy"],
            description=f"{counted(n_kept, f'{env_cfg.task} demonstration')} by hfpolicy's scripted bimanual expert "
            f"(seeds from {cfg.start_seed}).",
        )
    return output_dir


def record_aloha_episode(env, expert, writer: DatasetWriter, cfg, seed: int, task: str) -> bool:
    """One expert episode into the writer's current episode; returns whether it succeeded (reward 4 reached)."""
    from hfpolicy.policies.scripted.aloha_expert import run_aloha_expert_episode

    before: dict = {}

    def observe(observation) -> None:
        before.clear()
        before[OBS_STATE] = observation["agent_pos"].astype(np.float32)
        if cfg.images:
            before[OBS_IMAGE_TOP] = observation["pixels"][CAMERA]
        if cfg.environment_state:
            before[OBS_ENV_STATE] = env.unwrapped.environment_state().astype(np.float32)

    def on_step(t, action, observation, reward, terminated, truncated, info) -> None:
        done = terminated or truncated or t + 1 == cfg.max_steps
        writer.add_frame({**before, ACTION: np.asarray(action, dtype=np.float32), DONE: done}, task=task)
        observe(observation)

    episode = run_aloha_expert_episode(
        env, expert, seed, cfg.max_steps, on_reset=lambda obs, info: observe(obs), on_step=on_step
    )
    return episode.success
