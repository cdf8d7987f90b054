"""Simulated environments (PushT, ALOHA, xArm) as vector envs, serial or parallel (`make_env`), and their observations
as policy batches (`observations_to_batch`)."""

from hfpolicy.envs.arm_config import AlohaEnvConfig, XarmEnvConfig  # registers --env.type=aloha and xarm
from hfpolicy.envs.configs import EnvConfig, PushTEnvConfig, known_env_types, make_env, make_env_config
from hfpolicy.envs.vector import PARK_OPTION, LockstepEnv, LockstepVectorEnv, episode_step_limit, make_vector_env

SUCCESS_INFO_KEY = "is_success"  # the step info entry that says an episode succeeded (gymnasium convention)

__all__ = [
    "PARK_OPTION",
    "AlohaEnvConfig",
    "SUCCESS_INFO_KEY",
    "XarmEnvConfig",
    "EnvConfig",
    "LockstepEnv",
    "LockstepVectorEnv",
    "PushTEnvConfig",
    "episode_step_limit",
    "known_env_types",
    "make_env",
    "make_env_config",
    "make_vector_env",
    "observations_to_batch",
]


def __getattr__(name: str):
    if name == "observations_to_batch":
        from hfpolicy.envs.observations import observations_to_batch  # lazy: torch, not imported by --help

        return observations_to_batch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
