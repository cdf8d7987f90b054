"""The xArm env config (`--env.type=xarm --env.task=XarmLift-v0`)."""

from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym

from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.envs import xarm
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.field_errors import ConfigFieldError

TASK_DESCRIPTIONS = {"XarmLift-v0": "Pick up the cube and lift it."}  # the task sentence of recordings


@EnvConfig.register_subclass("xarm")
@dataclass
class XarmEnvConfig(EnvConfig):
    """xArm simulation (gym-xarm's MuJoCo scene, see hfpolicy.envs.xarm): a 7-DoF xArm with a parallel gripper lifts
    a cube from a table.

    Actions are 4 numbers in [-1, 1] (end-effector move x, y, z and the grip); observations are LeRobot's
    (observation.image 84x84, observation.state = end-effector position + gripper angle) plus, for state recipes,
    observation.environment_state (the cube's pose). Episodes follow LeRobot 0.6.1's xArm config: 200 steps at 15 fps;
    success = gym-xarm's `is_success` (the cube lifted 0.15 m), which ends the episode.
    """

    obs_types: ClassVar[tuple[str, ...]] = xarm.OBS_TYPES

    task: str = "XarmLift-v0"  # a task gym-xarm registers (gym-xarm 0.1.1: XarmLift-v0)
    obs_type: str | None = None  # pixels_agent_pos / environment_state_agent_pos / pixels_environment_state_agent_pos
    episode_length: int = 200  # steps before truncation (LeRobot's xArm eval: 200)
    observation_height: int = 84  # height of camera0's frames the policy sees (LeRobot's xArm data: 84)
    observation_width: int = 84  # ... and their width
    render_height: int = 384  # height of rendered (video) frames; even (yuv420p mp4)
    render_width: int = 384  # ... and their width

    def __post_init__(self):
        try:
            tasks = xarm.registered_tasks()
        except ImportError as e:
            raise ConfigFieldError(self, "{task} needs gym-xarm, which is not installed: " + xarm.INSTALL) from e
        if self.task not in tasks:
            raise ConfigFieldError(self, "unknown xArm {task}; gym-xarm has: {valid}", valid=", ".join(tasks))
        self._check_obs_type(self.obs_type)
        if self.episode_length < 1:
            raise ConfigFieldError(self, "{episode_length} must be >= 1")
        if self.render_height % 2 or self.render_width % 2:
            raise ConfigFieldError(self, "{render_height} and {render_width} must be even (yuv420p video)")

    @property
    def fps(self) -> float:
        return float(xarm.FPS)

    @property
    def max_episode_steps(self) -> int:
        return self.episode_length

    @property
    def description(self) -> str:
        """The task sentence recordings carry."""
        return TASK_DESCRIPTIONS.get(self.task, self.task)

    def observation_features(self, obs_type: str | None = None) -> dict[str, PolicyFeature]:
        obs_type = obs_type or self.obs_type or self.obs_types[0]
        self._check_obs_type(obs_type)
        features = {}
        if obs_type.startswith("pixels"):
            shape = (3, self.observation_height, self.observation_width)
            features[OBS_IMAGE] = PolicyFeature(FeatureType.IMAGE, shape)
        if "environment_state" in obs_type:
            features[OBS_ENV_STATE] = PolicyFeature(FeatureType.STATE, (len(xarm.ENV_STATE_NAMES),))
        features[OBS_STATE] = PolicyFeature(FeatureType.STATE, (len(xarm.STATE_NAMES),))
        return features

    @property
    def action_feature(self) -> PolicyFeature:
        return PolicyFeature(FeatureType.ACTION, (len(xarm.ACTION_NAMES),))

    def make_single(self) -> gym.Env:
        xarm.register()
        return gym.make(
            xarm.GYM_ID,
            max_episode_steps=self.episode_length,
            task=self.task,
            obs_type=self.obs_type or self.obs_types[0],
            observation_height=self.observation_height,
            observation_width=self.observation_width,
            visualization_height=self.render_height,
            visualization_width=self.render_width,
        )
