"""Small real inputs for the viewer's tests: evaluations run by `hfpolicy.eval.evaluate` (written as `hfpolicy eval`
writes them) and datasets recorded by `hfpolicy.record`."""

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
from envs.toy_env import ScriptedEpisodesEnv
from policies.toy_policy import make_toy_policy

from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.envs import make_env, make_vector_env
from hfpolicy.eval import EvalResult, evaluate
from hfpolicy.eval.cli import EPISODES_FILE
from hfpolicy.record import RecordConfig, record

START_SEED = 100_000


def save_eval(result: EvalResult, eval_dir: Path) -> Path:
    """eval_info.json and episodes.jsonl, as the eval CLI writes them."""
    lines = "".join(json.dumps(record.to_dict()) + "\n" for record in result.episodes)
    (eval_dir / EPISODES_FILE).write_text(lines)
    result.save(eval_dir / EVAL_INFO_FILE)
    return eval_dir


class BoundedEpisodesEnv(ScriptedEpisodesEnv):
    """The toy env with actions bounded to [-ACTION_BOUND, ACTION_BOUND]: the toy policy's actions leave it at some
    steps and stay inside at others."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-ACTION_BOUND, ACTION_BOUND, (2,), np.float32)


ACTION_BOUND = 60.0


def toy_eval(eval_dir: Path, n_episodes: int = 10, n_videos: int = 3, max_steps: int = 25) -> EvalResult:
    """The toy env's scripted episodes (successes and failures, lengths 1..30, 32x32 grey frames), with a bounded
    action space that the toy policy leaves at some steps."""
    env = make_vector_env([BoundedEpisodesEnv] * 4)
    try:
        result = evaluate(
            make_toy_policy(low=-50.0, high=150.0), env, n_episodes, START_SEED, max_steps=max_steps,
            n_videos=n_videos, videos_dir=eval_dir / "videos", progress=False,
        )  # fmt: skip
    finally:
        env.close()
    save_eval(result, eval_dir)
    return result


def pusht_eval(eval_dir: Path, n_episodes: int = 5, n_videos: int = 2, episode_length: int = 20) -> EvalResult:
    """A toy policy pushing in gym-pusht: real PushT frames in the videos, real coverage rewards."""
    env = make_env("pusht", 3, obs_type="environment_state_agent_pos", episode_length=episode_length, render_size=96)
    try:
        result = evaluate(
            make_toy_policy("environment_state_agent_pos", initial_gain=0.8), env, n_episodes, START_SEED,
            n_videos=n_videos, videos_dir=eval_dir / "videos", progress=False,
        )  # fmt: skip
    finally:
        env.close()
    save_eval(result, eval_dir)
    return result


def recorded_dataset(root: Path, n_episodes: int = 3, max_steps: int = 25) -> Path:
    """Scripted-expert PushT demos with a camera video and the block keypoints."""
    return record(
        RecordConfig(
            n_episodes=n_episodes, max_steps=max_steps, output_dir=str(root), environment_state=True, progress=False
        )
    )
