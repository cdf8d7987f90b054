"""What the configs of the MuJoCo arm envs (ALOHA, xArm) share: the same obs types, size fields and their checks, and
the gymnasium env made from them. Each subclass declares its fields (their defaults and --help lines differ)."""

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym

from hfpolicy.envs.configs import EnvConfig
from hfpolicy.field_errors import ConfigFieldError


@dataclass
class ArmEnvConfig(EnvConfig):
    """The shared part of AlohaEnvConfig and XarmEnvConfig (not an env of its own)."""

    sim: ClassVar[ModuleType]  # the env's module: OBS_TYPES, GYM_ID
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
