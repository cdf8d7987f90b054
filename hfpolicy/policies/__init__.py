"""Policies: the base class and config, and one folder per policy type. The configurations are imported here, so that
every type is known to the command line; the base class and the models (torch) are imported when first used."""

import importlib

from hfpolicy.policies.act.configuration import ACTConfig
from hfpolicy.policies.config import FeatureType, NormMode, PolicyConfig, PolicyFeature, known_policy_types
from hfpolicy.policies.diffusion.configuration import DiffusionConfig
from hfpolicy.policies.errors import MissingStatsError, PolicyLoadError, PolicyPushError
from hfpolicy.policies.tdmpc.configuration import TDMPCConfig

_LAZY = {
    "Policy": "hfpolicy.policies.base",
    "get_policy_class": "hfpolicy.policies.registry",
    "make_policy": "hfpolicy.policies.registry",
}

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
    "PolicyPushError",
    "TDMPCConfig",
    "get_policy_class",
    "known_policy_types",
    "make_policy",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
