"""Each env's scripted expert, ready for `hfpolicy record`'s episode loop (`EnvRecorder`), with the features of the Hub
dataset it imitates: lerobot/pusht (pusht_recorder), lerobot/aloha_sim_*_scripted (aloha_recorder) and
lerobot/xarm_lift_medium plus next.success (xarm_recorder); --environment_state adds the objects' poses."""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_IMAGES_PREFIX, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets.pusht_zarr import PUSHT_TASK, pusht_features
from hfpolicy.envs import AlohaEnvConfig, PushTEnvConfig, XarmEnvConfig
from hfpolicy.envs.aloha import CAMERA, ENV_STATE_SIZES, MOTOR_NAMES
from hfpolicy.envs.arm_config import ArmEnvConfig
from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.envs.xarm import ACTION_NAMES, ENV_STATE_NAMES, STATE_NAMES
from hfpolicy.experts import PushTExpert, run_expert_episode
from hfpolicy.experts.aloha_expert import AlohaExpert, run_aloha_expert_episode
from hfpolicy.experts.xarm_expert import XarmExpert, run_xarm_expert_episode
from hfpolicy.record.config import RecordConfig


@dataclass
class EnvRecorder:
    """One env's expert, ready to record: `run_episode(seed, on_reset=, on_step=)` plays an episode (hooks as in
    `hfpolicy.experts.run_episode`)."""

    env: gym.Env
    fps: float
    features: dict  # the dataset's features
    task: str  # the task sentence of every frame
    observe: Callable[[Any], dict]  # an observation -> the frame's observation features
    run_episode: Callable[..., Any]
    rewards: bool  # frames carry next.reward and next.success (lerobot/pusht, xarm_lift_medium; not the ALOHA data)
    tags: list[str]  # the Hub dataset's tags, before "scripted-expert", "hfpolicy"
    demonstration: str  # what one episode of the Hub dataset is, singular: "PushT demonstration"
    expert: str  # who demonstrated: "hfpolicy's scripted expert"
    close: Callable[[], None]


def scalar_feature(dtype: str) -> dict:
    return {"dtype": dtype, "shape": [1], "names": None}


def vector_feature(names: list[str], group: str | None = None) -> dict:
    """A float32 feature named `names` (under `group`, as lerobot/aloha_sim_* names its "motors")."""
    return {"dtype": "float32", "shape": [len(names)], "names": list(names) if group is None else {group: list(names)}}


def arm_features(
    cfg: RecordConfig, env_cfg: ArmEnvConfig, image_key: str, state: dict, action: dict, env_state: dict, rewards: bool
) -> dict:
    """The features of a MuJoCo arm recording (`state`, `action`, `env_state`: vector features)."""
    features = {}
    if cfg.images:
        shape = [env_cfg.observation_height, env_cfg.observation_width, 3]
        features[image_key] = {"dtype": "video", "shape": shape, "names": ["height", "width", "channels"]}
    features |= {OBS_STATE: state, ACTION: action}
    if rewards:
        features |= {REWARD: scalar_feature("float32"), SUCCESS: scalar_feature("bool")}
    features[DONE] = scalar_feature("bool")
    if cfg.environment_state:
        features[OBS_ENV_STATE] = env_state
    return features


def arm_observer(env: gym.Env, cfg: RecordConfig, image_key: str, camera: str | None = None) -> Callable[[Any], dict]:
    """`EnvRecorder.observe` of the MuJoCo arm envs (ALOHA, xArm): observation.state, the camera's frame (`camera`:
    its name when the env gives several) and the objects' poses, as `cfg` asks."""
    arm: Any = env.unwrapped  # an AlohaEnv or XarmEnv

    def observe(observation) -> dict:
        frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
        if cfg.images:
            frame[image_key] = observation["pixels"] if camera is None else observation["pixels"][camera]
        if cfg.environment_state:
            frame[OBS_ENV_STATE] = arm.environment_state().astype(np.float32)
        return frame

    return observe


def pusht_recorder(cfg: RecordConfig, env_cfg: PushTEnvConfig) -> EnvRecorder:
    """The PushT expert in the env `env_cfg` makes (`cfg`: the checked flags)."""
    env = env_cfg.make_single()
    pusht: Any = env.unwrapped  # gym-pusht's PushTEnv (untyped): its T block's pose is the environment state
    expert = PushTExpert()
    scorer = PushTScorer() if cfg.environment_state else None

    def observe(observation) -> dict:
        frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
        if cfg.images:
            frame[OBS_IMAGE] = observation["pixels"]
        if scorer is not None:
            block = pusht.block
            frame[OBS_ENV_STATE] = scorer.keypoints(np.array([[*block.position, block.angle]]))[0].astype(np.float32)
        return frame

    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=pusht_features(env_cfg.observation_size, cfg.environment_state, images=cfg.images),
        task=PUSHT_TASK,
        observe=observe,
        run_episode=lambda seed, **hooks: run_expert_episode(env, expert, seed, env_cfg.episode_length, **hooks),
        rewards=True,
        tags=["pusht"],
        demonstration="PushT demonstration",
        expert="hfpolicy's scripted expert",
        close=env.close,
    )


def aloha_recorder(cfg: RecordConfig, env_cfg: AlohaEnvConfig) -> EnvRecorder:
    """The bimanual expert, for full-length episodes as in the Hub's data (its plan lasts 400 steps and holds the object
    after a success; a longer episode holds the last targets)."""
    env_cfg = dataclasses.replace(env_cfg, terminate_on_success=False)
    env = env_cfg.make_single()
    expert = AlohaExpert()
    objects = ["cube"] if ENV_STATE_SIZES[env_cfg.task] == 7 else ["peg", "socket"]
    poses = vector_feature([f"{o}_{c}" for o in objects for c in ("x", "y", "z", "qw", "qx", "qy", "qz")])
    motors = vector_feature(MOTOR_NAMES, group="motors")
    image_key = f"{OBS_IMAGES_PREFIX}{CAMERA}"

    def close() -> None:
        env.close()
        expert.close()

    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=arm_features(cfg, env_cfg, image_key, motors, motors, poses, rewards=False),
        task=env_cfg.description,
        observe=arm_observer(env, cfg, image_key, camera=CAMERA),
        run_episode=lambda seed, **hooks: run_aloha_expert_episode(env, expert, seed, cfg.max_steps, **hooks),
        rewards=False,
        tags=["aloha", env_cfg.task],
        demonstration=f"{env_cfg.task} demonstration",
        expert="hfpolicy's scripted bimanual expert",
        close=close,
    )


def xarm_recorder(cfg: RecordConfig, env_cfg: XarmEnvConfig) -> EnvRecorder:
    """The lift expert, for episodes that end at their first success or after --max_steps."""
    env = env_cfg.make_single()
    expert = XarmExpert()
    state, action, env_state = (vector_feature(names) for names in (STATE_NAMES, ACTION_NAMES, ENV_STATE_NAMES))
    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=arm_features(cfg, env_cfg, OBS_IMAGE, state, action, env_state, rewards=True),
        task=env_cfg.description,
        observe=arm_observer(env, cfg, OBS_IMAGE),
        run_episode=lambda seed, **hooks: run_xarm_expert_episode(env, expert, seed, cfg.max_steps, **hooks),
        rewards=True,
        tags=["xarm", env_cfg.task],
        demonstration=f"{env_cfg.task} demonstration",
        expert="hfpolicy's scripted lift expert",
        close=env.close,
    )
