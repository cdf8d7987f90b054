"""Evaluation in batched simulation: lockstep rollouts with exact per-episode metrics, videos, and `hfpolicy eval`;
`evaluate(policy, make_env("pusht", n_envs=50), n_episodes=50).aggregated["pc_success"]` (README.md)."""

import importlib

# name -> its module, imported on first use (reading the configs does not import torch)
_EXPORTS = {
    "EvalConfig": "config",
    "TrainEvalConfig": "config",
    "EvalPipelineConfig": "cli",
    "PolicyLoadConfig": "cli",
    "main": "cli",
    "run_eval": "cli",
    "DEFAULT_START_SEED": "evaluation",
    "EvalResult": "evaluation",
    "evaluate": "evaluation",
    "summarize_episodes": "evaluation",
    "wilson_interval": "evaluation",
    "EpisodeRecord": "rollouts",
    "InvalidActionError": "rollouts",
    "policy_device": "rollouts",
    "rollout": "rollouts",
    "VideoRecorder": "videos",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
