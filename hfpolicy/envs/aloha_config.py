"""The ALOHA env config (`--env.type=aloha --env.task=AlohaTransferCube-v0|AlohaInsertion-v0`)."""

from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGES_PREFIX, OBS_STATE
from hfpolicy.envs import aloha
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.field_errors import ConfigFieldError


@EnvConfig.register_subclass("aloha")
@dataclass
class AlohaEnvConfig(EnvConfig):
    """ALOHA bimanual simulation (gym-aloha's MuJoCo scenes, see hfpolicy.envs.aloha): two ViperX arms transfer a
    cube from the right gripper to the left, or insert a peg into a socket held in the air.

    Actions are 14 joint targets; observations are LeRobot's (observation.images.top 480x640, observation.state = 14
    joint positions) plus, for state recipes, observation.environment_state (the object poses). Episodes follow
    LeRobot 0.6.1's ALOHA evaluation: 400 steps at 50 fps, success = gym-aloha's reward 4, which ends the episode.
    """

    obs_types: ClassVar[tuple[str, ...]] = aloha.OBS_TYPES

    task: str = "AlohaTransferCube-v0"  # AlohaTransferCube-v0 / AlohaInsertion-v0
    obs_type: str | None = None  # pixels_agent_pos / environment_state_agent_pos / pixels_environment_state_agent_pos
    episode_length: int = 400  # steps before truncation (LeRobot's ALOHA eval: 400)
    observation_height: int = 480  # height of the top camera's frames the policy sees
    observation_width: int = 640  # ... and their width
    render_height: int = 480  # height of rendered (video) frames; even (yuv420p mp4)
    render_width: int = 640  # ... and their width
    shadows: bool = True  # render shadows as gym-aloha does; false: ~3x faster frames on a CPU renderer
    terminate_on_success: bool = True  # end an episode at its first success (gym-aloha, LeRobot eval)

    def __post_init__(self):
        if self.task not in aloha.TASK_NAMES:
            raise ConfigFieldError(
                self, "unknown ALOHA {task}; valid tasks: {valid}", valid=", ".join(aloha.TASK_NAMES)
            )
        self._check_obs_type(self.obs_type)
        if self.episode_length < 1:
            raise ConfigFieldError(self, "{episode_length} must be >= 1")
        if self.render_height % 2 or self.render_width % 2:
            raise ConfigFieldError(self, "{render_height} and {render_width} must be even (yuv420p video)")

    @property
    def fps(self) -> float:
        return float(aloha.FPS)

    @property
    def max_episode_steps(self) -> int:
        return self.episode_length

    @property
    def description(self) -> str:
        """The task sentence of LeRobot's ALOHA sim datasets."""
        return aloha.TASK_DESCRIPTIONS[self.task]

    def observation_features(self, obs_type: str | None = None) -> dict[str, PolicyFeature]:
        obs_type = obs_type or self.obs_type or self.obs_types[0]
        self._check_obs_type(obs_type)
        features = {}
        if obs_type.startswith("pixels"):
            shape = (3, self.observation_height, self.observation_width)
            features[f"{OBS_IMAGES_PREFIX}{aloha.CAMERA}"] = PolicyFeature(FeatureType.IMAGE, shape)
        if "environment_state" in obs_type:
            features[OBS_ENV_STATE] = PolicyFeature(FeatureType.STATE, (aloha.ENV_STATE_SIZES[self.task],))
        features[OBS_STATE] = PolicyFeature(FeatureType.STATE, (14,))
        return features

    @property
    def action_feature(self) -> PolicyFeature:
        return PolicyFeature(FeatureType.ACTION, (14,))

    def make_single(self) -> gym.Env:
        aloha.register()
        return gym.make(
            aloha.GYM_ID,
            max_episode_steps=self.episode_length,
            task=self.task,
            obs_type=self.obs_type or self.obs_types[0],
            observation_height=self.observation_height,
            observation_width=self.observation_width,
            visualization_height=self.render_height,
            visualization_width=self.render_width,
            shadows=self.shadows,
            terminate_on_success=self.terminate_on_success,
        )
