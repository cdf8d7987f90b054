"""Evaluation inside a multi-process (accelerate / DDP) training run: the episodes are split across processes and
their records gathered (episode i is seeded start_seed + i wherever it runs: the result ignores the world size)."""

import contextlib
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.envs import EnvConfig
from hfpolicy.eval.config import TrainEvalConfig
from hfpolicy.eval.evaluation import EvalResult, evaluate, write_eval_info
from hfpolicy.eval.provenance import eval_provenance
from hfpolicy.eval.rollouts import EpisodeRecord
from hfpolicy.io.episode_videos import episode_videos
from hfpolicy.runs.run_folder import PRETRAINED_DIR, RunFolder


def evaluate_on_all_processes(
    accelerator: Accelerator,
    policy: torch.nn.Module,
    ema: Any,
    env_cfg: EnvConfig,
    eval_cfg: "TrainEvalConfig",
    eval_dir: Path,
    n_episodes: int,
    progress: bool = True,
    *,
    run_dir: Path | None = None,
    step: int | None = None,
) -> EvalResult:
    """Each process runs episodes rank, rank + world, ... (with the EMA weights when `ema` is given); the main process
    writes eval_info.json with the records of all (and the rank that ran each). Every process must call this."""
    rank, world = accelerator.process_index, accelerator.num_processes
    indices = list(range(rank, n_episodes, world))
    model = accelerator.unwrap_model(policy)
    local_records, local_videos, local_s, action_space = [], [], 0.0, None
    if indices:
        env = env_cfg.make(min(eval_cfg.batch_size, len(indices)), parallel=eval_cfg.parallel)
        try:
            with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
                result = evaluate(
                    model,
                    env,
                    episode_indices=indices,
                    start_seed=eval_cfg.start_seed,
                    n_videos=eval_cfg.n_videos,
                    videos_dir=eval_dir / "videos",
                    fps=env_cfg.fps,
                    progress=progress and accelerator.is_main_process,
                )
        finally:
            env.close()
            model.reset()
        local_records = [{**r.to_dict(), "rank": rank} for r in result.episodes]
        local_videos, local_s, action_space = [str(p) for p in result.video_paths], result.eval_s, result.action_space
    records = gather_object(local_records)
    videos = gather_object(local_videos)
    eval_s = max(gather_object([local_s]))
    episodes = sorted(
        (EpisodeRecord(**{k: v for k, v in r.items() if k != "rank"}) for r in records), key=lambda e: e.index
    )
    merged = EvalResult(episodes, eval_s, episode_videos(videos), action_space)  # (the main process ran episode 0)
    if accelerator.is_main_process:
        if run_dir is not None and step is not None:
            saved = RunFolder(run_dir).checkpoint_dir(step) / PRETRAINED_DIR  # this step's checkpoint, if it has one
            merged.provenance = eval_provenance(
                model, str(run_dir), env_cfg.type, training_step=step, ema=ema is not None,
                folder=saved if saved.is_dir() else None,
            )  # fmt: skip
        info = merged.to_dict()
        info["per_episode"] = sorted(records, key=lambda r: r["index"])  # with the rank that ran each episode
        write_eval_info(eval_dir / EVAL_INFO_FILE, info)
    return merged
