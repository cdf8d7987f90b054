"""The policy registry: which Policy class a config type builds. A Policy subclass registers itself when defined; a
type not defined yet is imported from `hfpolicy.policies.<type>.modeling` on first use."""

import importlib
from types import ModuleType
from typing import Any

from hfpolicy.policies.config import PolicyConfig, known_policy_types
from hfpolicy.policies.errors import PolicyLoadError
from hfpolicy.policies.module import PolicyModule

_POLICY_CLASSES: dict[str, type[PolicyModule]] = {}  # config type name -> its Policy subclass


def register_policy_class(policy_class: type[PolicyModule]) -> None:
    config_class = policy_class.config_class
    _POLICY_CLASSES[config_class.get_choice_name(config_class)] = policy_class


def import_type_module(type_name: str, module: str) -> ModuleType | None:
    """`hfpolicy.policies.<type_name>.<module>`, None if there is none (a missing dependency of it raises)."""
    module_name = f"hfpolicy.policies.{type_name}.{module}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise
        return None


def get_policy_class(type_name: str) -> type[PolicyModule]:
    """The Policy subclass registered for a config type, importing `hfpolicy.policies.<type>.modeling` if needed."""
    if type_name not in _POLICY_CLASSES:
        import_type_module(type_name, "modeling")
    if type_name not in _POLICY_CLASSES:
        known = sorted(set(known_policy_types()) | set(_POLICY_CLASSES))
        raise PolicyLoadError(f"no policy class for type {type_name!r}; known types: {', '.join(known)}")
    return _POLICY_CLASSES[type_name]


def make_policy(config: PolicyConfig, dataset_stats: dict[str, dict[str, Any]] | None = None) -> Any:
    return get_policy_class(config.type)(config, dataset_stats=dataset_stats)
