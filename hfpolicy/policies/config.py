"""The configuration every policy shares. A policy type is a dataclass registered under a name
(`@PolicyConfig.register_subclass("diffusion")`), saved as config.json's `type` and chosen by `--policy.type`."""

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

import draccus
from draccus.utils import DecodingError, ParsingError

from hfpolicy.constants import ACTION, REWARD
from hfpolicy.features import FeatureType, NormMode, PolicyFeature  # noqa: F401 (re-exported)
from hfpolicy.field_errors import ConfigFieldError


@dataclass
class PolicyConfig(draccus.ChoiceRegistry):
    """Fields every policy has. Subclasses add their architecture and override the defaults they care about."""

    n_obs_steps: int = 1  # observations per prediction: the current one and n_obs_steps - 1 before it
    n_action_steps: int = 1  # actions executed from each predicted chunk before the policy predicts again
    input_features: dict[str, PolicyFeature] = field(default_factory=dict)  # filled from the dataset when empty
    output_features: dict[str, PolicyFeature] = field(default_factory=dict)  # filled from the dataset when empty
    normalization_mapping: dict[str, NormMode] = field(
        default_factory=lambda: {"image": NormMode.MEAN_STD, "state": NormMode.MIN_MAX, "action": NormMode.MIN_MAX}
    )  # feature type ("image", "state", "action") or feature key -> normalization mode; a key's entry wins over its type's
    optimizer_lr: float = 1e-4  # AdamW learning rate
    optimizer_betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    optimizer_eps: float = 1e-8  # AdamW epsilon
    optimizer_weight_decay: float = 0.0  # AdamW weight decay
    scheduler_name: str = "constant"  # diffusers get_scheduler name: constant, cosine, linear, ...
    scheduler_warmup_steps: int = 0  # learning-rate warmup steps
    use_ema: bool = False  # keep an exponential moving average of the weights; evaluate and save with it
    ema_power: float = 0.75  # EMA warmup power: decay = 1 - (1 + step) ** -power
    ema_max_decay: float = 0.9999  # EMA decay never exceeds this
    converted_from: str | None = None
    """where the weights came from when converted (e.g. a LeRobot checkpoint); on the card"""
    pretrained_path: str | None = None
    """training starts from this saved policy's weights and stats (a directory or Hub repo id, hfpolicy's or
    LeRobot's; `--policy.path=...` sets it and takes its config as the base)"""
    device: str | None = None  # torch device to train on (cpu, cuda, mps); default: what accelerate chooses

    window_fields: ClassVar[tuple[str, ...]] = ("n_action_steps",)  # the fields that set the training window
    retired_fields: ClassVar[frozenset[str]] = frozenset()  # fields of older configs, ignored when loading
    # Fields a saved config.json may change after training: they steer acting or training, not what the weights mean.
    acting_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "n_action_steps",
            "optimizer_lr",
            "optimizer_betas",
            "optimizer_eps",
            "optimizer_weight_decay",
            "scheduler_name",
            "scheduler_warmup_steps",
            "use_ema",
            "ema_power",
            "ema_max_decay",
            "pretrained_path",
            "device",
        }
    )

    @classmethod
    def default_choice_name(cls) -> str:
        """The policy type the command line assumes when flags set policy fields without `--policy.type`."""
        return "diffusion"

    @property
    def type(self) -> str:
        return self.get_choice_name(type(self))

    @property
    def image_features(self) -> dict[str, PolicyFeature]:
        return {k: f for k, f in self.input_features.items() if f.type == FeatureType.IMAGE}

    @property
    def state_features(self) -> dict[str, PolicyFeature]:
        return {k: f for k, f in self.input_features.items() if f.type == FeatureType.STATE}

    @property
    def action_feature(self) -> PolicyFeature:
        if ACTION not in self.output_features:
            raise ValueError(
                f"the policy config has no {ACTION!r} output feature; output features: {list(self.output_features)}"
            )
        return self.output_features[ACTION]

    def __post_init__(self):
        self.validate_settings()

    def validate_settings(self) -> None:
        """ConfigFieldError naming the field and the fix for settings that do not fit, the features aside."""

    def validate_features(self) -> None:
        """ConfigFieldError naming what is wrong when the features cannot drive this policy. Subclasses extend it."""
        if not self.input_features:
            raise ConfigFieldError(
                self, "the policy config has no input features: set them, or build the config from a dataset"
            )
        self.action_feature  # noqa: B018 (raises with a clear message)
        for key, feature in {**self.input_features, **self.output_features}.items():
            expected_ndim = 3 if feature.type == FeatureType.IMAGE else 1
            if len(feature.shape) != expected_ndim:
                raise ConfigFieldError(
                    self,
                    "feature {key} of type {kind} needs {ndim} dims, got {shape}",
                    key=repr(key),
                    kind=feature.type.value,
                    ndim=expected_ndim,
                    shape=feature.shape,
                )
        if self.n_obs_steps < 1 or self.n_action_steps < 1:
            raise ConfigFieldError(self, "{n_obs_steps} and {n_action_steps} must be >= 1")
        known = {t.value for t in FeatureType} | set(self.input_features) | set(self.output_features)
        unknown = sorted(set(self.normalization_mapping) - known)
        if unknown:
            raise ConfigFieldError(
                self,
                "normalization_mapping has entries {unknown} that are neither a feature type ({types}) nor a feature "
                "of the policy",
                unknown=unknown,
                types=", ".join(t.value for t in FeatureType),
            )
        self.validate_settings()  # again: fields may have changed since __post_init__

    def norm_mode(self, feature: PolicyFeature, key: str | None = None) -> NormMode:
        """The feature's normalization mode: its key's entry in normalization_mapping, else its type's, else identity."""
        return feature_norm_mode(self.normalization_mapping, key, feature)

    @property
    def observation_delta_indices(self) -> list[int]:
        """Frame offsets (relative to the current frame) of the observations one training sample needs."""
        return list(range(1 - self.n_obs_steps, 1))

    @property
    def action_delta_indices(self) -> list[int]:
        """Frame offsets of the actions one training sample needs."""
        return list(range(self.n_action_steps))

    @property
    def reward_delta_indices(self) -> list[int] | None:
        """Frame offsets of the rewards (`next.reward`) one training sample needs; None: the policy trains without."""
        return None

    @property
    def drop_n_last_frames(self) -> int:
        """Frames at each episode's end that start no training sample: an action window may run past the end by at
        most n_action_steps - 1 padded steps."""
        return max(0, max(self.action_delta_indices) - (self.n_action_steps - 1))

    def check_window_fits(self, episode_lengths: Sequence[int]) -> None:
        """ValueError naming the training window's flags when no episode is long enough for it."""
        longest = max(int(n) for n in episode_lengths)
        offsets = [*self.observation_delta_indices, *self.action_delta_indices, *(self.reward_delta_indices or [])]
        reach = max(abs(i) for i in offsets)
        if reach <= longest and self.drop_n_last_frames < longest:
            return
        values = {name: getattr(self, name) for name in self.window_fields}
        flags = ", ".join(f"--policy.{name}={value}" for name, value in values.items() if value is not None)
        raise ValueError(
            f"the {self.type} policy's training window ({flags}) reaches {reach} frames from a sample and drops the "
            f"last {self.drop_n_last_frames} of each episode, but the longest episode has {longest} frames: lower "
            "those flags, or train on longer episodes"
        )

    def delta_timestamps(self, fps: float) -> dict[str, list[float]]:
        """The dataset's `delta_timestamps` for training this policy at `fps`."""
        windows = {key: [i / fps for i in self.observation_delta_indices] for key in self.input_features}
        windows[ACTION] = [i / fps for i in self.action_delta_indices]
        if self.reward_delta_indices is not None:
            windows[REWARD] = [i / fps for i in self.reward_delta_indices]
        return windows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with `type` first; enums become their values and tuples lists."""
        encoded = json.loads(json.dumps(draccus.encode(self), default=_json_default))
        return {"type": self.type, **encoded}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PolicyConfig":
        """The registered config class named by data["type"], built from `data`; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a policy config is a JSON object with a 'type' field, got a {type(data).__name__}")
        data = dict(data)
        type_name = data.pop("type", None)
        known = ", ".join(known_policy_types())
        if type_name is None:
            raise ValueError(f"a policy config needs a 'type' field; known types: {known}")
        if not isinstance(type_name, str):
            raise ValueError(
                f"'type' must be a policy type name (a string such as 'diffusion'), got {json.dumps(type_name)}; "
                f"known types: {known}"
            )
        try:
            config_class = PolicyConfig.get_choice_class(type_name)
        except (KeyError, ValueError):
            raise ValueError(f"unknown policy type {type_name!r}; known types: {known}") from None
        if not issubclass(config_class, cls):
            raise ValueError(f"config type {type_name!r} ({config_class.__name__}) is not a {cls.__name__}")
        data = {name: value for name, value in data.items() if name not in config_class.retired_fields}
        known_fields = {f.name for f in dataclasses.fields(config_class)}
        unknown = sorted(set(data) - known_fields)
        if unknown:
            raise ValueError(f"config for policy type {type_name!r} has unknown fields {unknown}")
        try:
            return draccus.decode(config_class, data)
        except DecodingError as e:  # a field of the wrong type, e.g. "horizon": "abc"
            raise ValueError(f"{' '.join(str(e).split())} (field types: see {config_class.__name__})") from e
        except ParsingError as e:  # __post_init__ refused the combination of settings: its message says why
            if isinstance(e.__cause__, ConfigFieldError):  # kept with its fields, so a caller can say them as flags
                raise ConfigFieldError(e.__cause__.config, e.__cause__.template, **e.__cause__.text) from e
            raise ValueError(str(e.__cause__ or e)) from e
        except TypeError as e:
            raise ValueError(f"a field has a value of the wrong type: {e}") from e


def feature_norm_mode(mapping: dict[str, NormMode], key: str | None, feature: PolicyFeature) -> NormMode:
    """A feature's mode under `mapping` (feature key or type -> mode): its key's, else its type's, else identity."""
    if key is not None and key in mapping:
        return NormMode(mapping[key])
    return NormMode(mapping.get(feature.type.value, NormMode.IDENTITY))


def known_policy_types() -> list[str]:
    return sorted(PolicyConfig.get_known_choices())


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot serialize {type(value).__name__} in a policy config")
