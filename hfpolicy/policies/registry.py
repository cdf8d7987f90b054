"""The policy registry: which Policy class a config type builds, `make_policy`, and the error a policy that cannot
be found or loaded raises. A Policy subclass registers itself when it is defined (hfpolicy.policies.base)."""

import importlib
from typing import TYPE_CHECKING, Any

from hfpolicy.policies.config import PolicyConfig, known_policy_types

if TYPE_CHECKING:
    from hfpolicy.policies.base import Policy

_POLICY_CLASSES: dict[str, type["Policy"]] = {}  # config type name -> its Policy subclass


def register_policy_class(policy_class: type["Policy"]) -> None:
    """Called for every Policy subclass with its own config class."""
    config_class = policy_class.config_class
    _POLICY_CLASSES[config_class.get_choice_name(config_class)] = policy_class


class PolicyLoadError(RuntimeError):
    """A saved policy (config.json / model.safetensors) cannot be loaded as it is."""


class PolicyPushError(RuntimeError):
    """`push_to_hub` failed on the Hub's side or the network's (the message names the cause and the fix)."""


def get_policy_class(type_name: str) -> type["Policy"]:
    """The Policy subclass registered for a config type, importing `hfpolicy.policies.<type>.modeling` if needed."""
    if type_name not in _POLICY_CLASSES:
        module_name = f"hfpolicy.policies.{type_name}.modeling"
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not module_name.startswith(e.name):
                raise  # a dependency of an existing policy module is missing: show that error
    if type_name not in _POLICY_CLASSES:
        known = sorted(set(known_policy_types()) | set(_POLICY_CLASSES))
        raise PolicyLoadError(f"no policy class for type {type_name!r}; known types: {', '.join(known)}")
    return _POLICY_CLASSES[type_name]


def make_policy(config: PolicyConfig, dataset_stats: dict[str, dict[str, Any]] | None = None) -> "Policy":
    """Builds the policy class registered for `config.type`."""
    return get_policy_class(config.type)(config, dataset_stats=dataset_stats)
