"""TD-MPC, FOWM variant (Hansen et al., 2022; Feng et al., 2023): `TDMPCConfig` (registered as policy type "tdmpc")
and `TDMPCPolicy`, imported lazily so that the command line loads the config alone."""

from hfpolicy.policies.tdmpc.configuration import TDMPCConfig

__all__ = ["TDMPCConfig", "TDMPCPolicy"]


def __getattr__(name: str):
    if name == "TDMPCPolicy":
        from hfpolicy.policies.tdmpc.modeling import TDMPCPolicy  # lazy: registry load of a policy type (torch)

        return TDMPCPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
