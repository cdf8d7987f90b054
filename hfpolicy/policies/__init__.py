"""Policies: the shared base class and config, and one folder per policy type (`<type>/configuration.py` beside
`<type>/modeling.py`). Configurations are imported here so that every type is known to the command line and to
config.json loading; the (heavier) models are imported when first used."""

from hfpolicy.policies.act.configuration import ACTConfig
from hfpolicy.policies.base import Policy, PolicyLoadError, get_policy_class, make_policy
from hfpolicy.policies.config import FeatureType, NormMode, PolicyConfig, PolicyFeature, known_policy_types
from hfpolicy.policies.diffusion.configuration import DiffusionConfig
from hfpolicy.policies.normalization import MissingStatsError

__all__ = [
    "ACTConfig",
    "DiffusionConfig",
    "FeatureType",
    "MissingStatsError",
    "NormMode",
    "Policy",
    "PolicyConfig",
    "PolicyFeature",
    "PolicyLoadError",
    "get_policy_class",
    "known_policy_types",
    "make_policy",
]
