"""What `hfpolicy record` is told (`RecordConfig`), and what one env's recorder gives the recording loop
(`EnvRecorder`)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs import EnvConfig, PushTEnvConfig

DEMONSTRATORS = ("scripted",)  # --policy.type values `hfpolicy record` knows


@dataclass
class DemonstratorConfig:
    """Who acts while recording."""

    type: str = "scripted"
    """"scripted": the env's expert planning on the simulator's state (PushT, ALOHA, xArm)"""


@dataclass
class RecordConfig:
    """`hfpolicy record` flags."""

    env: EnvConfig = field(default_factory=PushTEnvConfig)  # the simulator (--env.type=pusht)
    policy: DemonstratorConfig = field(default_factory=DemonstratorConfig)  # the demonstrator (--policy.type=scripted)
    n_episodes: int = 50  # episodes to record
    start_seed: int = 0  # episode i is seeded start_seed + i
    max_steps: int | None = None  # steps after which an episode is cut (default: PushT 300, ALOHA 400, xArm 200)
    output_dir: str | None = None  # where the dataset is written (must not exist, unless --overwrite=true); required
    overwrite: bool = False  # replace the dataset at output_dir, once the new one is complete (a re-run of a recipe)
    repo_id: str | None = None  # the dataset's name in its metadata (default: local/<output_dir name>)
    push_to: str | None = None  # Hub dataset repo id to upload the finished dataset to
    environment_state: bool = False  # also record observation.environment_state (PushT keypoints; ALOHA, xArm poses)
    images: bool = True  # record the camera (PushT 96x96, ALOHA 480x640, xArm 84x84 video); false: state-only
    discard_failures: bool = False  # leave out episodes that did not succeed within max_steps
    progress: bool = True  # show a progress bar


@dataclass
class EnvRecorder:
    """One env's expert, ready to record (made by hfpolicy.record.pusht, .aloha or .xarm from a checked RecordConfig):
    `run_episode(seed, on_reset=, on_step=)` plays an episode (hooks as in `hfpolicy.experts.run_episode`)."""

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


def video_feature(height: int, width: int) -> dict:
    """A camera's feature in a recording: an RGB video of height x width frames."""
    return {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]}


def scalar_feature(dtype: str) -> dict:
    """A one-number feature of a recording (next.reward, next.success, next.done)."""
    return {"dtype": dtype, "shape": [1], "names": None}


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
