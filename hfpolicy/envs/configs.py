"""Environment configs: one dataclass per simulator, registered for the command line (`--env.type=pusht`): it builds
the env (`make_single`, `make`) and says which policy features its observations become (`observation_features`)."""

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import draccus
import gymnasium as gym

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.envs.vector import LockstepVectorEnv, make_vector_env
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.field_errors import ConfigFieldError, python_words


@dataclass
class EnvConfig(draccus.ChoiceRegistry):
    """What every simulated environment config provides. Subclasses register under a name and add their fields."""

    obs_types: ClassVar[tuple[str, ...]] = ()  # observation types this env offers, the default first
    image_key: ClassVar[str] = OBS_IMAGE  # the camera frames' feature key
    state_size: ClassVar[int]  # observation.state's size
    action_size: ClassVar[int]
    fps: ClassVar[float]  # env steps per second of simulated time (also the eval videos' frame rate)
    if TYPE_CHECKING:  # each subclass's field, at its place among that subclass's fields
        obs_type: str | None
        episode_length: int  # steps before truncation (max_episode_steps)

    @classmethod
    def default_choice_name(cls) -> str:  # the env of env options given without `--env.type`
        return "pusht"

    @property
    def type(self) -> str:  # the registered name (`--env.type=<name>`)
        return self.get_choice_name(type(self))

    @property
    def max_episode_steps(self) -> int:
        return self.episode_length

    def image_size(self) -> tuple[int, int]:
        """Height and width of the camera frames the policy sees."""
        raise NotImplementedError

    def env_state_size(self) -> int:
        """observation.environment_state's size (the objects' poses)."""
        raise NotImplementedError

    def observation_features(self, obs_type: str | None = None) -> dict[str, PolicyFeature]:
        """The policy inputs `observations_to_batch` makes from this env's observations of `obs_type`."""
        obs_type = obs_type or self.obs_type or self.obs_types[0]
        self._check_obs_type(obs_type)
        features = {}
        if obs_type.startswith("pixels"):
            features[self.image_key] = PolicyFeature(FeatureType.IMAGE, (3, *self.image_size()))
        if "environment_state" in obs_type:
            features[OBS_ENV_STATE] = PolicyFeature(FeatureType.STATE, (self.env_state_size(),))
        if obs_type.endswith("agent_pos"):
            features[OBS_STATE] = PolicyFeature(FeatureType.STATE, (self.state_size,))
        return features

    @property
    def action_feature(self) -> PolicyFeature:
        return PolicyFeature(FeatureType.ACTION, (self.action_size,))

    def make_single(self) -> gym.Env:
        """One env with its time limit (AsyncVectorEnv workers call this bound method: keep the config picklable)."""
        raise NotImplementedError

    def make(self, n_envs: int, parallel: bool = False) -> LockstepVectorEnv:
        """`n_envs` envs as one vector env with autoreset disabled (`make_vector_env`)."""
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        return make_vector_env([self.make_single] * n_envs, parallel=parallel)

    def obs_type_for(self, input_keys: Collection[str]) -> str:
        """The cheapest obs type whose observations give every key in `input_keys` (no rendering unless images are
        needed, then the fewest unused features); ValueError naming what each obs type offers if none does."""
        candidates = []
        for order, obs_type in enumerate(self.obs_types):
            features = self.observation_features(obs_type)
            if set(input_keys) <= set(features):
                unused = [k for k in features if k not in input_keys]
                unused_images = sum(features[k].type == FeatureType.IMAGE for k in unused)
                candidates.append((unused_images, len(unused), order, obs_type))
        if not candidates:
            offered = {obs_type: sorted(self.observation_features(obs_type)) for obs_type in self.obs_types}
            raise ValueError(
                f"no observation type of env {self.type!r} gives all of {sorted(input_keys)}; it offers {offered}"
            )
        return min(candidates)[-1]

    def for_policy(
        self, input_features: Mapping[str, PolicyFeature], output_features: Mapping[str, PolicyFeature] | None = None
    ) -> "EnvConfig":
        """This config with an obs type that gives the policy's inputs (the cheapest, unless set), checked against the
        policy's shapes and (given `output_features`) its action; ValueError naming what is missing and the fix."""
        if output_features is not None:
            self.check_action(output_features)
        config = self
        if getattr(config, "obs_type", None) is None:
            config = dataclasses.replace(config, obs_type=config.obs_type_for(list(input_features)))
        offered = config.observation_features()
        missing = sorted(set(input_features) - set(offered))
        if missing:
            fits = self.obs_type_for(list(input_features))
            raise ValueError(
                f"the policy needs {missing}, which env {config.type!r} with obs_type={config.obs_type!r} does not "
                f"give (it gives {sorted(offered)}); try --env.obs_type={fits} (in Python: obs_type={fits!r})"
            )
        for key, feature in input_features.items():
            if tuple(feature.shape) != tuple(offered[key].shape):
                raise ValueError(
                    f"the policy expects {key} of shape {tuple(feature.shape)}, env {config.type!r} gives "
                    f"{tuple(offered[key].shape)}: set the env's size options (e.g. --env.observation_size)"
                )
        return config

    def check_action(self, output_features: Mapping[str, PolicyFeature]) -> None:
        """ValueError unless the policy's action has the shape of the env's action space."""
        action = output_features.get(ACTION)
        expected = tuple(self.action_feature.shape)
        if action is None or tuple(action.shape) != expected:
            got = "no action output" if action is None else f"actions of shape {tuple(action.shape)}"
            raise ValueError(
                f"the policy gives {got}, env {self.type!r} takes actions of shape {expected}: it was trained on data "
                f"of another robot or env; evaluate it in its own env (--env.type), or train on {self.type} data"
            )

    def _check_obs_type(self, obs_type: str | None) -> None:
        """ValueError for an obs type this env does not have (a ConfigFieldError when it is the config's own)."""
        if obs_type is None or obs_type in self.obs_types:
            return
        template = "unknown {obs_type} for env {env}; valid obs types: {valid}"
        text = {"env": repr(self.type), "valid": ", ".join(self.obs_types)}
        if obs_type == self.obs_type:
            raise ConfigFieldError(self, template, **text)
        raise ValueError(template.format(obs_type=python_words("obs_type", obs_type), **text))


@EnvConfig.register_subclass("pusht")
@dataclass
class PushTEnvConfig(EnvConfig):
    """PushT (gym-pusht): push a T-shaped block onto a fixed target with a circular agent, 512x512 workspace. Actions
    are target agent positions (x, y) in pixels; an episode succeeds (and ends) at coverage > 95%."""

    obs_types: ClassVar[tuple[str, ...]] = ("pixels_agent_pos", "environment_state_agent_pos", "pixels")
    state_size: ClassVar[int] = 2
    action_size: ClassVar[int] = 2
    fps: ClassVar[float] = 10.0  # gym-pusht's control_hz (metadata render_fps)

    obs_type: str | None = None  # pixels_agent_pos / environment_state_agent_pos / pixels; None: from the policy
    episode_length: int = 300  # steps before truncation (gym-pusht's own limit is 300)
    observation_size: int = 96  # height and width of the pixels the policy sees
    render_size: int = 384  # height and width of rendered (video) frames; even (yuv420p mp4), >= 96

    gym_id: ClassVar[str] = "gym_pusht/PushT-v0"

    def __post_init__(self):
        self._check_obs_type(self.obs_type)
        if self.episode_length < 1:
            raise ConfigFieldError(self, "{episode_length} must be >= 1")
        if self.render_size % 2 or self.render_size < 96:
            raise ConfigFieldError(self, "{render_size} must be even (yuv420p video) and >= 96 (gym-pusht)")

    def image_size(self) -> tuple[int, int]:
        return self.observation_size, self.observation_size

    def env_state_size(self) -> int:
        return 16  # the T's 8 keypoints

    def make_single(self) -> gym.Env:
        import gym_pusht  # noqa: F401 (registers gym_pusht/PushT-v0)

        return gym.make(
            self.gym_id,
            obs_type=self.obs_type or self.obs_types[0],
            max_episode_steps=self.episode_length,
            observation_width=self.observation_size,
            observation_height=self.observation_size,
            visualization_width=self.render_size,
            visualization_height=self.render_size,
        )


def known_env_types() -> list[str]:
    return sorted(EnvConfig.get_known_choices())


def make_env_config(name: str, **fields: Any) -> EnvConfig:
    """The registered config for env `name` with `fields` set; errors list the valid names / fields / obs types."""
    try:
        config_class = EnvConfig.get_choice_class(name)
    except KeyError:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(known_env_types())}") from None
    valid = [f.name for f in dataclasses.fields(config_class)]
    unknown = sorted(set(fields) - set(valid))
    if unknown:
        raise TypeError(f"env {name!r} has no option(s) {unknown}; its options: {', '.join(valid)}")
    return config_class(**fields)


def make_env(name: str, n_envs: int, parallel: bool = False, policy: Any = None, **kwargs: Any) -> LockstepVectorEnv:
    """`n_envs` copies of env `name` in a vector env with autoreset disabled (`make_vector_env`). Given a `policy`, the
    env gives what it reads (`EnvConfig.for_policy`); `kwargs` are the env config's fields, e.g.
    `make_env("pusht", 8, policy=policy, episode_length=100, render_size=256)`."""
    config = make_env_config(name, **kwargs)
    if policy is not None:
        config = config.for_policy(policy.config.input_features, policy.config.output_features)
    return config.make(n_envs, parallel=parallel)
