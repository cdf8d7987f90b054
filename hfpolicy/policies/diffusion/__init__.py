"""Diffusion Policy (Chi et al., 2023): `DiffusionConfig` (registered as policy type "diffusion") and `DiffusionPolicy`.

The model is imported lazily (`from hfpolicy.policies.diffusion import DiffusionPolicy` works) so that importing the
config, which the command line needs, does not load torchvision and diffusers.
"""

from hfpolicy.policies.diffusion.configuration import DiffusionConfig

__all__ = ["DiffusionConfig", "DiffusionPolicy"]


def __getattr__(name: str):
    if name == "DiffusionPolicy":
        from hfpolicy.policies.diffusion.modeling import DiffusionPolicy  # lazy: registry load of a policy type (torch)

        return DiffusionPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
