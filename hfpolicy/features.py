"""What flows between datasets, envs and policies: a feature's kind, shape and normalization (imports none of them)."""

from dataclasses import dataclass
from enum import Enum


class FeatureType(str, Enum):
    """What a feature is, which decides how it is normalized and which network part consumes it."""

    IMAGE = "image"  # (C, H, W) float in [0, 1]
    STATE = "state"  # (D,) float vector: proprioception or privileged environment state
    ACTION = "action"  # (A,) float vector the policy outputs


class NormMode(str, Enum):
    """How a feature is normalized with its dataset stats before it reaches the network."""

    MEAN_STD = "mean_std"  # (x - mean) / std
    MIN_MAX = "min_max"  # to [-1, 1] using the dataset min and max
    IDENTITY = "identity"  # unchanged


@dataclass
class PolicyFeature:
    """One named tensor a policy consumes or produces."""

    type: FeatureType  # image / state / action
    shape: tuple[int, ...]  # per time step, without batch or time dims: (C, H, W) for images, (D,) for vectors
