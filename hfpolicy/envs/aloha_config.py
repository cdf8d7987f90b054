"""The ALOHA env config (`--env.type=aloha --env.task=AlohaTransferCube-v0|AlohaInsertion-v0`)."""

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_IMAGES_PREFIX
from hfpolicy.envs import aloha
from hfpolicy.envs.arm_config import ArmEnvConfig
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.field_errors import ConfigFieldError


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

    @property
    def description(self) -> str:  # the task sentence of LeRobot's ALOHA sim datasets
        return aloha.TASK_DESCRIPTIONS[self.task]
