"""The xArm env config (`--env.type=xarm --env.task=XarmLift-v0`)."""

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_IMAGE
from hfpolicy.envs import xarm
from hfpolicy.envs.arm_config import ArmEnvConfig
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.field_errors import ConfigFieldError

TASK_DESCRIPTIONS = {"XarmLift-v0": "Pick up the cube and lift it."}  # the task sentence of recordings


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

    @property
    def description(self) -> str:  # the task sentence recordings carry
        return TASK_DESCRIPTIONS.get(self.task, self.task)
