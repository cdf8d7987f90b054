"""ACT, the Action Chunking Transformer (Zhao et al., 2023): `ACTConfig` (policy type "act") and `ACTPolicy`, imported
lazily so that the command line loads the config alone."""

from hfpolicy.policies.act.configuration import ACTConfig

__all__ = ["ACTConfig", "ACTPolicy"]


def __getattr__(name: str):
    if name == "ACTPolicy":
        from hfpolicy.policies.act.modeling import ACTPolicy  # lazy: registry load of a policy type (torch)

        return ACTPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
