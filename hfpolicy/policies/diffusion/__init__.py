"""Diffusion Policy (Chi et al., 2023): `DiffusionConfig` (policy type "diffusion") and `DiffusionPolicy`, imported
lazily so that the command line loads the config alone."""

from hfpolicy.policies.diffusion.configuration import DiffusionConfig

__all__ = ["DiffusionConfig", "DiffusionPolicy"]


def __getattr__(name: str):
    if name == "DiffusionPolicy":
        from hfpolicy.policies.diffusion.modeling import DiffusionPolicy  # lazy: registry load of a policy type (torch)

        return DiffusionPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
