"""`hfpolicy eval`: evaluate a saved policy (local directory or Hub repo id) in batched simulation, into the held
--output_dir: episodes.jsonl as episodes end, then eval_info.json and videos/ (docs/evaluation.md)."""

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from hfpolicy.cli.commands import run_command
from hfpolicy.cli.flags import error_in_flags
from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.datasets import DatasetWriter
from hfpolicy.envs import EnvConfig, PushTEnvConfig
from hfpolicy.eval.config import EvalConfig
from hfpolicy.eval.episode_data import EpisodeCollector, rollout_features, write_episode
from hfpolicy.eval.evaluation import EvalResult, evaluate
from hfpolicy.eval.provenance import eval_provenance
from hfpolicy.eval.rollouts import EpisodeRecord
from hfpolicy.eval.videos import VideoWriteError
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.io.atomic import is_temporary
from hfpolicy.io.episode_videos import episode_videos
from hfpolicy.io.paths import check_apart
from hfpolicy.io.run_lock import RunLock
from hfpolicy.policies.base import Policy
from hfpolicy.policies.device import check_device
from hfpolicy.policies.errors import PolicyLoadError, UnknownOverrideError
from hfpolicy.words import counted


@dataclass
class PolicyLoadConfig:
    """Which saved policy to evaluate, and where it runs."""

    path: str | None = None  # local directory or Hub repo id of a saved policy (config.json + model.safetensors)
    revision: str | None = None  # Hub branch, tag or commit when `path` is a repo id
    device: str | None = None  # torch device (cpu, cuda, cuda:1, mps); default: cuda when available, else cpu
    n_action_steps: int | None = None  # override the saved number of actions executed per predicted chunk
    use_mpc: bool | None = None  # TD-MPC: override the saved choice (true: plan with MPPI; false: act with pi alone)


@dataclass
class EvalPipelineConfig:
    """`hfpolicy eval` flags: --policy.*, --env.*, --eval.*, --output_dir."""

    policy: PolicyLoadConfig = field(default_factory=PolicyLoadConfig)  # the policy to evaluate
    env: EnvConfig = field(default_factory=PushTEnvConfig)  # the simulator (--env.type=pusht)
    eval: EvalConfig = field(default_factory=EvalConfig)  # episodes, batching, videos
    output_dir: Path | None = None  # eval_info.json and videos/ go here; default outputs/eval/<date>_<time>_<env>
    overwrite: bool = False  # replace the evaluation already in output_dir (eval_info.json, episodes.jsonl, videos)
    progress: bool = True  # show a progress bar
    num_threads: int | None = None  # torch threads for the policy; default: the cores the machine's load leaves idle
    dataset_dir: Path | None = None
    """also write the episodes (what the policy read and did, rewards, success) as a new LeRobot v3.0 dataset here"""


def run_eval(config: EvalPipelineConfig) -> EvalResult:
    """Loads the policy, builds the env to match it, evaluates, and writes eval_info.json and the videos."""
    policy, env_config = load_policy_and_env_config(config)
    return evaluate_and_save(config, policy, env_config)


def evaluate_and_save(config: EvalPipelineConfig, policy: Policy, env_config: EnvConfig) -> EvalResult:
    """Evaluates into `output_dir`, holding its run lock throughout."""
    output_dir = Path(config.output_dir or default_output_dir(env_config))
    check_writable(output_dir)
    with RunLock(output_dir):
        claim_eval_folder(output_dir, config.overwrite)
        if config.eval.n_videos > 0:
            check_writable(output_dir / "videos", f"the videos folder {output_dir / 'videos'}")  # before episode 1
        return _evaluate_into(config, policy, env_config, output_dir)


def claim_eval_folder(output_dir: Path, overwrite: bool) -> None:
    """Refuses a folder holding another evaluation unless `overwrite`, which removes it whole (the folder is held)."""
    for stale in output_dir.glob(".*"):
        if stale.is_file() and is_temporary(stale.name):
            stale.unlink(missing_ok=True)
    found = [name for name in (EVAL_INFO_FILE, EPISODES_FILE) if (output_dir / name).exists()]
    old_videos = episode_videos((output_dir / "videos").glob("*.mp4"))
    if old_videos:
        found.append(f"videos/ ({len(old_videos)} mp4)")
    if not found:
        return
    if not overwrite:
        raise OutputDirError(
            f"--output_dir={output_dir} holds another evaluation ({', '.join(found)}): choose another --output_dir, "
            "or add --overwrite=true to replace it"
        )
    for path in [output_dir / EVAL_INFO_FILE, output_dir / EPISODES_FILE, *old_videos]:
        path.unlink(missing_ok=True)


def _evaluate_into(config: EvalPipelineConfig, policy: Policy, env_config: EnvConfig, output_dir: Path) -> EvalResult:
    batch_size = min(config.eval.batch_size, config.eval.n_episodes)
    env = env_config.make(batch_size, parallel=config.eval.parallel)
    records_file = open(output_dir / EPISODES_FILE, "a")  # noqa: SIM115 (closed in the finally below)

    def save_record(record: EpisodeRecord) -> None:
        records_file.write(json.dumps(record.to_dict()) + "\n")
        records_file.flush()

    episodes_writer, collector = open_episodes_dataset(config, policy, env)
    try:
        result = evaluate(
            policy,
            env,
            n_episodes=config.eval.n_episodes,
            start_seed=config.eval.start_seed,
            n_videos=config.eval.n_videos,
            videos_dir=output_dir / "videos",
            fps=env_config.fps,
            progress=config.progress,
            on_episode_end=save_record,
            step_hook=collector,
        )
        if collector is not None:
            collector.flush()
            episodes_writer.finish()
    finally:
        if episodes_writer is not None:
            episodes_writer.abort()  # nothing half-written: without finish() the dataset folder never appears
        env.close()
        records_file.close()
    if config.policy.path:  # (run_eval in Python may hand a policy without a path)
        result.provenance = eval_provenance(
            policy, config.policy.path, env_config.type, revision=config.policy.revision
        )
    result.save(output_dir / EVAL_INFO_FILE)
    return result


def open_episodes_dataset(config: EvalPipelineConfig, policy: Policy, env) -> tuple[Any, Any]:
    """(DatasetWriter, EpisodeCollector) for --dataset_dir, or (None, None)."""
    if config.dataset_dir is None:
        return None, None
    features = rollout_features(policy.config.input_features, env.single_action_space.shape)
    root = Path(config.dataset_dir)
    try:
        writer = DatasetWriter.create(root, f"local/{root.name}", config.env.fps, features)
    except FileExistsError as e:
        raise ValueError(f"--dataset_dir={root} exists: choose a new folder for the episodes' dataset") from e
    task = f"{config.env.type} evaluation"
    if config.env.type == "pusht":
        from hfpolicy.datasets.pusht_zarr import PUSHT_TASK as task  # lazy: optional heavy dependency (zarr, gym-pusht)
    task = getattr(config.env, "description", task)  # ALOHA: the task sentence of LeRobot's datasets
    return writer, EpisodeCollector(features, on_episode_end=lambda episode: write_episode(writer, episode, task))


EPISODES_FILE = "episodes.jsonl"  # one JSON line per episode, written as episodes end


class OutputDirError(ValueError):
    """--output_dir cannot be written."""


def check_eval_folders(config: EvalPipelineConfig) -> None:
    """--output_dir and --dataset_dir lie apart from a local --policy.path, and from each other."""
    policy_dir = Path(config.policy.path).expanduser() if config.policy.path else None
    source = f"--policy.path={config.policy.path}"
    for flag, folder in (("--output_dir", config.output_dir), ("--dataset_dir", config.dataset_dir)):
        if folder is not None and policy_dir is not None and policy_dir.is_dir():
            check_apart(folder, policy_dir, output_words=f"{flag}={folder}", source_words=source, replaces_output=False)
    if config.output_dir is not None and config.dataset_dir is not None:
        check_apart(
            config.output_dir, config.dataset_dir, output_words=f"--output_dir={config.output_dir}",
            source_words=f"--dataset_dir={config.dataset_dir}", replaces_output=False,
        )  # fmt: skip


def check_writable(output_dir: Path, flag: str | None = None) -> None:
    """Creates `output_dir` and writes a probe file in it, so an unwritable folder fails before any episode runs."""
    probe = output_dir / f".write_probe.{os.getpid()}"
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputDirError(
            f"{flag or f'--output_dir={output_dir}'} cannot be written ({e.strerror or e}): choose another --output_dir"
        ) from e


def set_torch_threads(num_threads: int | None) -> int:
    """torch intra-op threads for acting: `num_threads`, else `default_eval_threads` for this machine now."""
    if num_threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        num_threads = default_eval_threads(cores, os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    if num_threads < 1:
        raise ValueError(f"--num_threads must be >= 1, got {num_threads}")
    torch.set_num_threads(num_threads)
    return num_threads


def default_eval_threads(cores: int, load: float) -> int:
    """The cores the 1-minute load average leaves idle, in [1, cores] (docs/evaluation.md: shared cores are slow)."""
    return max(1, min(cores, round(cores - load)))


def default_output_dir(env_config: EnvConfig) -> Path:
    return Path("outputs/eval") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{env_config.type}"


def load_policy_and_env_config(config: EvalPipelineConfig) -> tuple[Policy, EnvConfig]:
    """The policy on its device, and the env config with an obs type that gives the policy's inputs."""
    if not config.policy.path:
        raise ValueError("--policy.path is required: a local directory or a Hub repo id of a saved policy")
    problems = config.eval.problems()
    if problems:
        raise ValueError("; ".join(problem.flags("eval.") for problem in problems))
    device = check_device(config.policy.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    chosen = {"n_action_steps": config.policy.n_action_steps, "use_mpc": config.policy.use_mpc}
    overrides = {name: value for name, value in chosen.items() if value is not None}
    try:
        policy = Policy.from_pretrained(
            config.policy.path, revision=config.policy.revision, map_location=device, config_overrides=overrides
        )
    except PolicyLoadError as e:
        if isinstance(e.__cause__, ConfigFieldError) and set(overrides) & set(e.__cause__.fields):
            # the flag, not the saved config.json, holds the value that does not fit
            problem = error_in_flags(e.__cause__, PolicyLoadConfig, "policy.")
            raise ValueError(f"{problem} (the policy in {config.policy.path})") from e
        if isinstance(e, UnknownOverrideError):
            flags = " ".join(f"--policy.{name}" for name in e.fields)
            raise ValueError(f"{flags}: {e}; leave the flag out for this policy") from e
        raise
    env_config = config.env.for_policy(policy.config.input_features, policy.config.output_features)
    return policy, env_config


class EvalWriteError(RuntimeError):
    """Writing the evaluation's results failed (a full disk, a folder made unwritable meanwhile)."""


def run(config: EvalPipelineConfig) -> str:
    """`hfpolicy eval`: loads the policy, evaluates it, saves the results; the summary line."""
    check_eval_folders(config)
    set_torch_threads(config.num_threads)
    policy, env_config = load_policy_and_env_config(config)
    config.output_dir = config.output_dir or default_output_dir(env_config)
    if config.dataset_dir is not None and Path(config.dataset_dir).exists():
        raise ValueError(f"--dataset_dir={config.dataset_dir} exists: choose a new folder for the episodes' dataset")
    try:
        result = evaluate_and_save(config, policy, env_config)
    except (FileExistsError, FileNotFoundError):  # bad input, said as it is
        raise
    except OSError as e:  # video errors name the file already
        where = "" if isinstance(e, VideoWriteError) else f"writing into --output_dir={config.output_dir} failed: "
        raise EvalWriteError(f"{where}{e}") from e
    summary = result.aggregated
    low, high = summary["pc_success_ci95"]
    return (
        f"success {summary['pc_success']:.1f}% (95% CI {low:.1f}-{high:.1f}), "
        f"avg max reward {summary['avg_max_reward']:.3f}, avg sum reward {summary['avg_sum_reward']:.2f}; "
        f"{counted(summary['n_episodes'], 'episode')} in {summary['eval_s']:.1f} s ({summary['episodes_per_s']:.2f}/s)"
        + f"\nresults: {config.output_dir / EVAL_INFO_FILE}"
        + (f", videos: {config.output_dir / 'videos'}" if result.video_paths else "")
    )


def main(argv: list[str] | None = None) -> int:
    return run_command("eval", argv)
