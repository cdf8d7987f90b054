"""What the configs of the MuJoCo arm envs (ALOHA, xArm) share: an obs type chosen among the same three, an episode
length, the camera frames' size the policy sees and the rendered (video) frames' size, checked the same way, and
the gymnasium env made from them. Each subclass declares its fields (their defaults and --help lines differ) and
names its simulator module (`sim`: hfpolicy.envs.aloha or .xarm)."""

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.field_errors import ConfigFieldError


@dataclass
class ArmEnvConfig(EnvConfig):
    """The shared part of AlohaEnvConfig and XarmEnvConfig (not an env of its own)."""

    sim: ClassVar[ModuleType]  # the env's module: OBS_TYPES, FPS, GYM_ID, register()
    image_key: ClassVar[str]  # the camera frames' feature key
    state_size: ClassVar[int]  # observation.state's size (joint positions, or end-effector and gripper)
    action_size: ClassVar[int]

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

    def check_task(self) -> None:
        """ConfigFieldError naming the valid tasks for a task the env does not have."""
        raise NotImplementedError

    def env_state_size(self) -> int:
        """observation.environment_state's size (the objects' poses) for this config's task."""
        raise NotImplementedError

    def gym_kwargs(self) -> dict[str, Any]:
        """The env's own options beyond the shared ones, for `gym.make`."""
        return {}

    @property
    def fps(self) -> float:
        return float(self.sim.FPS)

    def observation_features(self, obs_type: str | None = None) -> dict[str, PolicyFeature]:
        obs_type = obs_type or self.obs_type or self.obs_types[0]
        self._check_obs_type(obs_type)
        features = {}
        if obs_type.startswith("pixels"):
            shape = (3, self.observation_height, self.observation_width)
            features[self.image_key] = PolicyFeature(FeatureType.IMAGE, shape)
        if "environment_state" in obs_type:
            features[OBS_ENV_STATE] = PolicyFeature(FeatureType.STATE, (self.env_state_size(),))
        features[OBS_STATE] = PolicyFeature(FeatureType.STATE, (self.state_size,))
        return features

    @property
    def action_feature(self) -> PolicyFeature:
        return PolicyFeature(FeatureType.ACTION, (self.action_size,))

    def make_single(self) -> gym.Env:
        self.sim.register()
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
