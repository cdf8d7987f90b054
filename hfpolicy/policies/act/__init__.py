"""ACT, the Action Chunking Transformer (Zhao et al., 2023): `ACTConfig` (registered as policy type "act") and
`ACTPolicy`.

The model is imported lazily (`from hfpolicy.policies.act import ACTPolicy` works) so that importing the config, which
the command line needs, does not load torchvision.
"""

from hfpolicy.policies.act.configuration import ACTConfig

__all__ = ["ACTConfig", "ACTPolicy"]


def __getattr__(name: str):
    if name == "ACTPolicy":
        from hfpolicy.policies.act.modeling import ACTPolicy  # lazy: registry load of a policy type (torch)

        return ACTPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
