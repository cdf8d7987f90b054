"""Evaluation in batched simulation: lockstep rollouts with exact per-episode metrics, videos, and `hfpolicy eval`.

from hfpolicy.envs import make_env
from hfpolicy.eval import evaluate

env = make_env("pusht", n_envs=50)                  # serial; parallel=True for one process per env
result = evaluate(policy, env, n_episodes=50, n_videos=4, videos_dir="outputs/videos")
result.aggregated["pc_success"], result.save("outputs/eval_info.json")
"""

from hfpolicy.eval.cli import EvalConfig, EvalPipelineConfig, PolicyLoadConfig, main, run_eval
from hfpolicy.eval.evaluation import (
    DEFAULT_START_SEED,
    EvalResult,
    evaluate,
    summarize_episodes,
    wilson_interval,
)
from hfpolicy.eval.rollouts import EpisodeRecord, InvalidActionError, policy_device, rollout
from hfpolicy.eval.videos import VideoRecorder

__all__ = [
    "DEFAULT_START_SEED",
    "EpisodeRecord",
    "EvalConfig",
    "EvalPipelineConfig",
    "EvalResult",
    "InvalidActionError",
    "PolicyLoadConfig",
    "VideoRecorder",
    "evaluate",
    "main",
    "policy_device",
    "rollout",
    "run_eval",
    "summarize_episodes",
    "wilson_interval",
]
