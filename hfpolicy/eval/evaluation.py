"""Evaluate a policy over many seeded episodes, in batches of lockstep envs, with metrics and videos."""

import contextlib
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hfpolicy.constants import DEFAULT_EVAL_START_SEED
from hfpolicy.envs import LockstepVectorEnv
from hfpolicy.eval.rollouts import EpisodeRecord, StepHook, action_bounds, rollout
from hfpolicy.eval.videos import VideoRecorder
from hfpolicy.io.atomic import write_atomically
from hfpolicy.io.episode_videos import episode_video_path, episode_videos
from hfpolicy.io.termination import raise_if_terminated
from hfpolicy.policies.base import Policy
from hfpolicy.ticker import ticking

DEFAULT_START_SEED = DEFAULT_EVAL_START_SEED  # episode i is seeded start_seed + i (far from training data seeds)
WILSON_Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclass
class EvalResult:
    """An evaluation's records, wall time, videos, the env's action space, and what it evaluated (`provenance`)."""

    episodes: list[EpisodeRecord]  # one record per episode, sorted by index
    eval_s: float  # wall-clock seconds of the whole evaluation
    video_paths: list[Path] = field(default_factory=list)  # mp4 files, one per recorded episode
    action_space: dict[str, list[float | None]] | None = None  # {"low", "high"} of a Box action space (None: inf)
    provenance: dict[str, Any] | None = None  # the policy, its checkpoint, the command (hfpolicy.eval.provenance)

    @property
    def aggregated(self) -> dict[str, Any]:
        return summarize_episodes(self.episodes, self.eval_s)

    def to_dict(self) -> dict[str, Any]:
        info: dict[str, Any] = {"provenance": self.provenance} if self.provenance is not None else {}
        info |= {
            "aggregated": self.aggregated,
            "per_episode": [episode.to_dict() for episode in self.episodes],
            "video_paths": [str(path) for path in self.video_paths],
        }
        if self.action_space is not None:
            info["action_space"] = self.action_space
        return info

    def save(self, path: str | Path) -> Path:
        """Writes `to_dict()` to `path` (eval_info.json), atomically."""
        return write_eval_info(path, self.to_dict())


def write_eval_info(path: str | Path, info: dict[str, Any]) -> Path:
    """eval_info.json, atomically: the summaries indented for reading, each episode record on one line."""
    entries = []
    for key, value in info.items():
        if key == "per_episode" and value:
            records = ",\n".join(f"    {json.dumps(record, ensure_ascii=False)}" for record in value)
            entries.append(f'  "per_episode": [\n{records}\n  ]')
        else:
            text = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  ")
            entries.append(f"  {json.dumps(key)}: {text}")
    return write_atomically(path, "{\n" + ",\n".join(entries) + "\n}\n")


def evaluate(
    policy: Policy,
    env: LockstepVectorEnv,
    n_episodes: int | None = None,
    start_seed: int = DEFAULT_START_SEED,
    *,
    episode_indices: Sequence[int] | None = None,
    max_steps: int | None = None,
    n_videos: int = 0,
    videos_dir: str | Path | None = None,
    fps: float | None = None,
    progress: bool = True,
    on_episode_end: Callable[[EpisodeRecord], None] | None = None,
    step_hook: StepHook | None = None,
) -> EvalResult:
    """Runs episodes 0..n_episodes-1 (or exactly `episode_indices`), episode i seeded `start_seed + i`, in batches of
    `env.num_envs`, the policy in eval mode; episodes below `n_videos` are filmed into `videos_dir` at `fps` (default:
    the env's render_fps). `on_episode_end(record)` is called as episodes end; `step_hook` sees every step."""
    indices = _episode_indices(n_episodes, episode_indices)
    if n_videos > 0 and videos_dir is None:
        raise ValueError("n_videos > 0 needs a videos_dir to write the mp4 files to")
    if fps is None:
        fps = env.metadata.get("render_fps") or 10
    records: list[EpisodeRecord] = []
    recorder = VideoRecorder(fps) if any(i < n_videos for i in indices) else None
    bar = _SuccessBar(len(indices), progress, on_episode_end)
    was_training = policy.training
    policy.eval()
    start = time.perf_counter()
    try:
        with recorder if recorder is not None else contextlib.nullcontext(), ticking(bar.bar):  # lockstep episodes
            for first in range(0, len(indices), env.num_envs):  # mostly end together: the bar's time moves meanwhile
                batch = indices[first : first + env.num_envs]
                videos = _videos_of(batch, n_videos, videos_dir)
                records += rollout(
                    policy,
                    env,
                    seeds=[start_seed + i for i in batch],
                    max_steps=max_steps,
                    episode_indices=batch,
                    render_slots=sorted(videos),
                    on_frame=None if recorder is None else functools.partial(_add_frame, recorder, videos),
                    on_episode_end=functools.partial(bar.episode_ended, recorder, videos),
                    step_hook=step_hook,
                )
        eval_s = time.perf_counter() - start  # includes waiting for the last videos to be encoded
    finally:
        bar.bar.close()
        policy.train(was_training)
    video_paths = episode_videos(recorder.paths) if recorder is not None else []  # by episode index
    return EvalResult(sorted(records, key=lambda e: e.index), eval_s, video_paths, action_space_of(env))


def action_space_of(env: LockstepVectorEnv) -> dict[str, list[float | None]] | None:
    """A sub-env's Box bounds per dimension (an unbounded side as None); None if unbounded."""
    low, high = action_bounds(env)
    if low is None or high is None:
        return None
    finite = [[float(v) if np.isfinite(v) else None for v in np.ravel(bound)] for bound in (low, high)]
    return {"low": finite[0], "high": finite[1]}


def _videos_of(batch: list[int], n_videos: int, videos_dir: str | Path | None) -> dict[int, Path]:
    """Slot -> the video it films."""
    if videos_dir is None:
        return {}
    return {slot: episode_video_path(videos_dir, i) for slot, i in enumerate(batch) if i < n_videos}


def _add_frame(recorder: VideoRecorder, videos: dict[int, Path], slot: int, frame: np.ndarray) -> None:
    recorder.add_frame(videos[slot], frame)


def _episode_indices(n_episodes: int | None, episode_indices: Sequence[int] | None) -> list[int]:
    if (n_episodes is None) == (episode_indices is None):
        raise ValueError("pass either n_episodes or episode_indices")
    indices = [int(i) for i in episode_indices] if episode_indices is not None else list(range(n_episodes or 0))
    if not indices:
        raise ValueError("nothing to evaluate: n_episodes must be >= 1 (or episode_indices non-empty)")
    if len(set(indices)) != len(indices) or min(indices) < 0:
        raise ValueError("episode_indices must be distinct non-negative integers")
    return indices


class _SuccessBar:
    """The evaluation's progress bar (episodes ended, success so far); hands each record to `on_episode_end`."""

    def __init__(self, total: int, progress: bool, on_episode_end: Callable[[EpisodeRecord], None] | None):
        self.bar = tqdm(total=total, desc="eval", unit="episode", disable=not progress, dynamic_ncols=True)
        self.on_episode_end = on_episode_end
        self.n_ended = self.n_successes = 0

    def episode_ended(self, recorder: VideoRecorder | None, videos: dict[int, Path], slot: int, record: EpisodeRecord):
        raise_if_terminated()
        if recorder is not None and slot in videos:
            recorder.finish(videos[slot])
        self.n_ended += 1
        self.n_successes += record.success
        if self.on_episode_end is not None:
            self.on_episode_end(record)
        self.bar.set_postfix_str(f"success {100 * self.n_successes / self.n_ended:.1f}%", refresh=False)
        self.bar.update(1)


def summarize_episodes(episodes: Sequence[EpisodeRecord], eval_s: float) -> dict[str, Any]:
    """Averages, success rate in % with its 95% Wilson score interval, and throughput."""
    n = len(episodes)
    if n == 0:
        raise ValueError("no episodes to summarize")
    n_successes = sum(e.success for e in episodes)
    low, high = wilson_interval(n_successes, n)
    return {
        "n_episodes": n,
        "avg_sum_reward": sum(e.sum_reward for e in episodes) / n,
        "avg_max_reward": sum(e.max_reward for e in episodes) / n,
        "pc_success": 100 * n_successes / n,
        "pc_success_ci95": [100 * low, 100 * high],
        "avg_length": sum(e.length for e in episodes) / n,
        # steps whose action lay outside the env's declared action space (applied unchanged)
        "n_actions_outside_space": sum(e.n_actions_outside_space for e in episodes),
        "eval_s": eval_s,
        "episodes_per_s": n / eval_s if eval_s > 0 else math.inf,
    }


def wilson_interval(successes: int, n: int, z: float = WILSON_Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (fractions in [0, 1]); well-behaved at 0 and n successes."""
    if n <= 0:
        raise ValueError(f"n must be >= 1, got {n}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half_width = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half_width), min(1.0, centre + half_width)
