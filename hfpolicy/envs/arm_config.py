"""The configs of the MuJoCo arm envs, `--env.type=aloha` (AlohaEnvConfig) and `--env.type=xarm` (XarmEnvConfig), and
what they share (ArmEnvConfig): the same obs types, size fields and their checks, and the gymnasium env made from them.
Each declares its own fields (their defaults and --help lines differ)."""

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_IMAGE, OBS_IMAGES_PREFIX
from hfpolicy.envs import aloha, xarm
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.field_errors import ConfigFieldError


@dataclass
class ArmEnvConfig(EnvConfig):
    """The shared part of AlohaEnvConfig and XarmEnvConfig (not an env of its own)."""

    sim: ClassVar[ModuleType]  # the env's module: OBS_TYPES, GYM_ID, TASK_DESCRIPTIONS
    env_class: ClassVar[Callable[..., gym.Env]]  # registered as sim.GYM_ID

    task: str
    obs_type: str | None
    episode_length: int
    observation_height: int
    observation_width: int
    render_height: int
    render_width: int

    def __post_init__(self):
        self.check_task()
        self._check_obs_type(self.obs_type)
        if self.episode_length < 1:
            raise ConfigFieldError(self, "{episode_length} must be >= 1")
        if self.render_height % 2 or self.render_width % 2:
            raise ConfigFieldError(self, "{render_height} and {render_width} must be even (yuv420p video)")

    def check_task(self) -> None:  # ConfigFieldError naming the valid tasks
        raise NotImplementedError

    def gym_kwargs(self) -> dict[str, Any]:  # the env's own options beyond the shared ones, for `gym.make`
        return {}

    def image_size(self) -> tuple[int, int]:
        return self.observation_height, self.observation_width

    @property
    def description(self) -> str:  # the task sentence recordings carry (LeRobot's datasets')
        return self.sim.TASK_DESCRIPTIONS.get(self.task, self.task)

    def make_single(self) -> gym.Env:
        if self.sim.GYM_ID not in gym.registry:
            gym.register(self.sim.GYM_ID, entry_point=self.env_class)
        return gym.make(
            self.sim.GYM_ID,
            max_episode_steps=self.episode_length,
            task=self.task,
            obs_type=self.obs_type or self.obs_types[0],
            observation_height=self.observation_height,
            observation_width=self.observation_width,
            visualization_height=self.render_height,
            visualization_width=self.render_width,
            **self.gym_kwargs(),
        )


@EnvConfig.register_subclass("aloha")
@dataclass
class AlohaEnvConfig(ArmEnvConfig):
    """ALOHA bimanual simulation (hfpolicy.envs.aloha): two ViperX arms transfer a cube from the right gripper to the
    left, or insert a peg into a socket held in the air; LeRobot's observations and evaluation (docs/aloha.md)."""

    obs_types: ClassVar[tuple[str, ...]] = aloha.OBS_TYPES
    sim: ClassVar[ModuleType] = aloha
    env_class: ClassVar[Callable[..., gym.Env]] = aloha.AlohaEnv
    image_key: ClassVar[str] = f"{OBS_IMAGES_PREFIX}{aloha.CAMERA}"
    state_size: ClassVar[int] = 14
    action_size: ClassVar[int] = 14
    fps: ClassVar[float] = float(aloha.FPS)

    task: str = "AlohaTransferCube-v0"  # AlohaTransferCube-v0 / AlohaInsertion-v0
    obs_type: str | None = None  # pixels_agent_pos / environment_state_agent_pos / pixels_environment_state_agent_pos
    episode_length: int = 400  # steps before truncation (LeRobot's ALOHA eval: 400)
    observation_height: int = 480  # height of the top camera's frames the policy sees
    observation_width: int = 640  # ... and their width
    render_height: int = 480  # height of rendered (video) frames; even (yuv420p mp4)
    render_width: int = 640  # ... and their width
    shadows: bool = True  # render shadows as gym-aloha does; false: ~3x faster frames on a CPU renderer
    terminate_on_success: bool = True  # end an episode at its first success (gym-aloha, LeRobot eval)

    def check_task(self) -> None:
        if self.task not in aloha.TASK_NAMES:
            raise ConfigFieldError(
                self, "unknown ALOHA {task}; valid tasks: {valid}", valid=", ".join(aloha.TASK_NAMES)
            )

    def env_state_size(self) -> int:
        return aloha.ENV_STATE_SIZES[self.task]

    def gym_kwargs(self) -> dict[str, Any]:
        return {"shadows": self.shadows, "terminate_on_success": self.terminate_on_success}


@EnvConfig.register_subclass("xarm")
@dataclass
class XarmEnvConfig(ArmEnvConfig):
    """xArm simulation (hfpolicy.envs.xarm): a 7-DoF xArm with a parallel gripper lifts a cube from a table; LeRobot's
    observations and episodes (docs/xarm.md)."""

    obs_types: ClassVar[tuple[str, ...]] = xarm.OBS_TYPES
    sim: ClassVar[ModuleType] = xarm
    env_class: ClassVar[Callable[..., gym.Env]] = xarm.XarmEnv
    image_key: ClassVar[str] = OBS_IMAGE
    state_size: ClassVar[int] = len(xarm.STATE_NAMES)
    action_size: ClassVar[int] = len(xarm.ACTION_NAMES)
    fps: ClassVar[float] = float(xarm.FPS)

    task: str = "XarmLift-v0"  # a task gym-xarm registers (gym-xarm 0.1.1: XarmLift-v0)
    obs_type: str | None = None  # pixels_agent_pos / environment_state_agent_pos / pixels_environment_state_agent_pos
    episode_length: int = 200  # steps before truncation (LeRobot's xArm eval: 200)
    observation_height: int = 84  # height of camera0's frames the policy sees (LeRobot's xArm data: 84)
    observation_width: int = 84  # ... and their width
    render_height: int = 384  # height of rendered (video) frames; even (yuv420p mp4)
    render_width: int = 384  # ... and their width

    def check_task(self) -> None:
        try:
            tasks = xarm.registered_tasks()
        except ImportError as e:
            raise ConfigFieldError(self, "{task} needs gym-xarm, which is not installed: " + xarm.INSTALL) from e
        if self.task not in tasks:
            raise ConfigFieldError(self, "unknown xArm {task}; gym-xarm has: {valid}", valid=", ".join(tasks))

    def env_state_size(self) -> int:
        return len(xarm.ENV_STATE_NAMES)
