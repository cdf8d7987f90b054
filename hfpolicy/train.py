"""Training with 🤗 accelerate: the same code on a CPU, one GPU, or many GPUs with DDP.

    accelerate launch examples/train_pusht.py --steps=1000 --output_dir=outputs/train/pusht
    hfpolicy train --policy.type=diffusion --dataset.repo_id=lerobot/pusht --steps=200000

`train(config)` reads top to bottom: set up (errors for bad input come first), then the loop: one optimizer step
(with gradient accumulation and clipping), the EMA update, and every N steps logging, evaluation and a checkpoint.
`--resume=true` continues the run in `--output_dir` from its last checkpoint, exactly: the data order, the random
crops and noise, the optimizer, LR schedule and EMA all continue as if the run had never stopped.

The run's main process holds the run folder's lock (hfpolicy.run_lock) from before the first check to the end, so two
trainings never write into one folder. A NaN or inf loss stops the run before anything computed from it is logged,
evaluated or saved. The configuration lives in hfpolicy.train_config, evaluation across processes in
hfpolicy.eval.distributed, the training curve and the Hub push in hfpolicy.training_curve and hfpolicy.push.
"""

import contextlib
import dataclasses
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import ProjectConfiguration, set_seed
from diffusers.optimization import get_scheduler
from draccus.utils import ParsingError
from tqdm.auto import tqdm

from hfpolicy.atomic_files import write_json_atomically
from hfpolicy.checkpoints import (
    PRETRAINED_DIR,
    CheckpointError,
    checkpoint_extra_state,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from hfpolicy.constants import METRICS_FILE, OBS_ENV_STATE, TRAIN_CONFIG_FILE, TRAINING_CURVE_FILE
from hfpolicy.datasets import (
    DatasetMeta,
    EpisodeAwareSampler,
    EpochBatchSampler,
    PolicyDataset,
    dataset_to_policy_features,
)
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.envs import EnvConfig
from hfpolicy.eval.distributed import evaluate_on_all_processes
from hfpolicy.flags import FlagError, cli_message
from hfpolicy.metrics_log import append_metrics, truncate_metrics
from hfpolicy.policies import Policy, PolicyConfig, make_policy
from hfpolicy.policies.ema import EMA
from hfpolicy.push import PushError, check_push_access, push_run
from hfpolicy.run_lock import RunLock, RunLockedError
from hfpolicy.train_config import (  # noqa: F401 (re-exported: `from hfpolicy.train import TrainConfig, ...`)
    TRACKERS,
    DatasetConfig,
    HubConfig,
    TrainConfig,
    TrainConfigError,
    TrainEvalConfig,
    dataset_label,
    describe_dataset,
    flat_hparams,
    parse_train_config,
    scripted_dataset_root,
    train_config_to_dict,
    validate_train_config,
)
from hfpolicy.training_curve import draw_training_curve  # noqa: F401 (re-exported)

__all__ = [
    "METRICS_FILE",
    "TRAINING_CURVE_FILE",
    "DatasetConfig",
    "HubConfig",
    "TrainConfig",
    "TrainConfigError",
    "TrainEvalConfig",
    "TrainResult",
    "TrainingDivergedError",
    "describe_dataset",
    "main",
    "parse_train_config",
    "train",
]


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or inf."""


@dataclasses.dataclass
class TrainResult:
    """What `train` returns (on every process)."""

    policy: Policy  # the trained policy (raw weights, unwrapped; EMA weights are in the checkpoint)
    output_dir: Path  # the run folder
    last_checkpoint: Path  # checkpoints/step_<steps>
    eval_summary: dict[str, Any] | None  # aggregates of the last evaluation, if any
    hub_commit: str | None  # URL of the Hub commit, if pushed


def train(cfg: TrainConfig) -> TrainResult:
    """Runs (or resumes) a training run; see the module docstring."""
    validate_train_config(cfg)
    output_dir = Path(cfg.output_dir) if cfg.output_dir else default_output_dir(cfg)
    if cfg.hub.repo_id:
        try:
            check_push_access(cfg.hub.repo_id)  # a missing or read-only token is found now, not after training
        except PushError as e:
            raise TrainConfigError(str(e)) from e
    with lock_run_folder(output_dir):
        check_output_dir(output_dir, cfg.resume)
        return run_training(cfg, output_dir)


def run_training(cfg: TrainConfig, output_dir: Path) -> TrainResult:
    """The run itself, in a checked and locked `output_dir`."""
    # --- set-up: everything that can fail on bad input fails here, before any training -------------------------
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        mixed_precision=cfg.mixed_precision,
        log_with=None if cfg.tracker == "none" else cfg.tracker,
        project_config=ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(output_dir / "logs")),
    )
    is_main = accelerator.is_main_process
    threads = choose_cpu_threads(cfg.num_threads, accelerator.num_processes)
    set_seed(cfg.seed, device_specific=True)  # seed + rank: different crops and noise on each process

    with accelerator.main_process_first():  # one process downloads or records, the others then read it
        dataset_root = resolve_dataset_root(cfg.dataset, recipe=cfg.recipe, progress=is_main and cfg.progress)
    if cfg.dataset.scripted_episodes > 0:  # train_config.json and the card name the recording's folder
        cfg = dataclasses.replace(cfg, dataset=dataclasses.replace(cfg.dataset, root=str(dataset_root)))
    dataset_name = dataset_label(cfg.dataset)  # the Hub repo id, or the local folder: what the run really read
    with dataset_errors_as_config_errors(cfg.dataset):
        meta = DatasetMeta.load(dataset_root, dataset_name)
    policy_cfg = configure_policy_features(cfg.policy, meta.features, cfg.dataset.input_features)
    env_cfg = configure_eval_env(cfg.env, policy_cfg) if cfg.eval.freq > 0 else None
    online = make_online_training(cfg, output_dir, policy_cfg, meta) if cfg.online.every > 0 else None
    with dataset_errors_as_config_errors(cfg.dataset):
        dataset = PolicyDataset(
            dataset_name,
            root=dataset_root,
            episodes=cfg.dataset.episodes,
            delta_timestamps=policy_cfg.delta_timestamps(meta.fps),
            download_videos=bool(policy_cfg.image_features),  # a state-only policy never decodes a frame
        )
        sampler = EpisodeAwareSampler(
            dataset,
            drop_last_frames=policy_cfg.drop_n_last_frames,
            shuffle=True,
            seed=cfg.seed,
            num_replicas=accelerator.num_processes,
            rank=accelerator.process_index,
        )  # each process reads its own shard of one shared (seed, epoch) permutation
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size)  # a resumed run starts mid-epoch
    dataset.prefetch_frames(progress=is_main and cfg.progress)  # decode the videos once, up front, not mid-epoch
    policy = make_policy(policy_cfg, dataset_stats=dataset.stats)
    if cfg.compile:
        policy.compile()  # in place: forward (training) is compiled; acting and the state dict stay as they are
    optimizer = make_optimizer(policy, accelerator.device)
    lr_scheduler = get_scheduler(
        policy_cfg.scheduler_name,
        optimizer,
        num_warmup_steps=policy_cfg.scheduler_warmup_steps,
        num_training_steps=cfg.steps,
    )
    policy, optimizer = accelerator.prepare(policy, optimizer)
    ema = EMA(policy, power=policy_cfg.ema_power, max_decay=policy_cfg.ema_max_decay) if policy_cfg.use_ema else None
    training_state = {"model": policy, "optimizer": optimizer, "lr_scheduler": lr_scheduler, "ema": ema}

    dataloader = torch.utils.data.DataLoader(
        dataset,
        sampler=batch_sampler,
        batch_size=None,  # the dataset fetches whole batches (one index list per item)
        num_workers=cfg.num_workers,
        pin_memory=accelerator.device.type == "cuda",
        persistent_workers=cfg.num_workers > 0,
        generator=torch.Generator(),  # its own: starting an epoch must not draw from the global RNG (exact resume)
    )

    start_step = 0
    if cfg.resume:
        checkpoint = latest_checkpoint(output_dir)
        start_step = load_checkpoint(accelerator, checkpoint, **training_state)
        if online is not None:
            online.restore(accelerator, start_step, checkpoint_extra_state(checkpoint))
    cfg = dataclasses.replace(cfg, policy=policy_cfg, output_dir=str(output_dir))
    if is_main:
        forget_after(output_dir, start_step)  # what a stopped run logged or evaluated after its last checkpoint
        write_json_atomically(output_dir / TRAIN_CONFIG_FILE, train_config_to_dict(cfg))
    accelerator.init_trackers("hfpolicy", config=flat_hparams(train_config_to_dict(cfg)))
    batches = endless_batches(
        dataloader, batch_sampler, start_batch=start_step * cfg.gradient_accumulation_steps, seed=cfg.seed
    )

    samples_per_step = cfg.batch_size * cfg.gradient_accumulation_steps * accelerator.num_processes
    if is_main:
        print(
            f"hfpolicy train: {policy_cfg.type} policy, {sum(p.numel() for p in policy.parameters()) / 1e6:.1f} M "
            f"params; {dataset_name}: {dataset.num_episodes} episodes, "
            f"{len(sampler) * accelerator.num_processes} samples per epoch; "
            f"{accelerator.num_processes} process(es) on {accelerator.device}"
            + (f" ({threads} thread(s) each)" if accelerator.device.type == "cpu" else "")
            + f", {samples_per_step} samples per step; "
            f"output {output_dir}" + (f"; resuming at step {start_step}" if start_step else "")
        )
        if start_step >= cfg.steps:
            print(
                f"the run already reached --steps={cfg.steps}: nothing to train (pass a larger --steps to train "
                f"longer; `hfpolicy push --run={output_dir}` pushes it to the Hub)"
            )
    eval_plan = planned_evaluations(cfg, start_step) if env_cfg is not None else {}
    clock = TrainingClock(cfg.steps, eval_plan)
    bar = tqdm(
        total=cfg.steps,
        initial=start_step,
        desc="train",
        unit="step",
        disable=not (is_main and cfg.progress),
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",  # our ETA (with evals), not tqdm's
    )

    # --- the training loop ----------------------------------------------------------------------------------------
    policy.train()
    eval_summary, hub_commit = None, None
    window = RunningMeans()  # losses and timings since the last log entry
    loss_guard = NonFiniteLossGuard(accelerator.device)
    for step in range(start_step + 1, cfg.steps + 1):
        step_start = time.perf_counter()
        loss_sum, data_s, grad_norm = 0.0, 0.0, None
        for _ in range(cfg.gradient_accumulation_steps):
            data_start = time.perf_counter()
            batch = next(batches) if online is None else online.mix(next(batches), step, accelerator.process_index)
            batch = move_to_device(batch, accelerator.device)
            data_s += time.perf_counter() - data_start
            with accelerator.accumulate(policy), accelerator.autocast():
                loss = policy(batch)["loss"]
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.grad_clip_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(policy.parameters(), cfg.grad_clip_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
        lr_scheduler.step()
        if ema is not None:
            ema.step(policy)
        loss_guard.add(step, loss_sum)
        step_s = time.perf_counter() - step_start
        window.add(loss=loss_sum / cfg.gradient_accumulation_steps, grad_norm=grad_norm, step_s=step_s, data_s=data_s)
        clock.add_step(step_s)
        bar.set_postfix_str(clock.postfix(step), refresh=False)
        bar.update(1)
        if is_main and step == start_step + TrainingClock.ANNOUNCE_AFTER_STEPS:
            bar.write(clock.announcement(step, accelerator.device))
        if online is not None and online.is_due(step) and step < cfg.steps:  # rollouts join the data, before a save
            round_start = time.perf_counter()
            online_stats = online.collect(accelerator, policy, ema, step)
            online_stats["online/round_s"] = time.perf_counter() - round_start
            log_entry(accelerator, output_dir, step, online_stats)
            if is_main:
                bar.write(
                    f"step {step}: online round {online.round_index(step)}: success "
                    f"{100 * online_stats['online/round_success']:.0f}%, {online.n_episodes} online episodes "
                    f"({online.n_frames} frames), {online_stats['online/round_s']:.0f} s"
                )

        is_last = step == cfg.steps
        logged = step % cfg.log_freq == 0 or is_last
        evaluated = env_cfg is not None and (step % cfg.eval.freq == 0 or is_last)
        saved = (cfg.save_freq > 0 and step % cfg.save_freq == 0) or is_last
        if logged or evaluated or saved:
            loss_guard.check(accelerator, output_dir, step, policy if saved else None)  # before a NaN is logged/saved

        if logged:
            entry = window.pop(accelerator)  # averages the loss over processes (one collective per log entry)
            entry.update(lr=lr_scheduler.get_last_lr()[0], samples_per_s=samples_per_step / entry["step_s"])
            log_entry(accelerator, output_dir, step, entry)
            clock.last_log = f"loss={entry['loss']:.4f}, lr={entry['lr']:.2e}"

        if evaluated:
            eval_dir = output_dir / "eval" / f"step_{step:06d}"
            eval_start = time.perf_counter()
            result = evaluate_on_all_processes(accelerator, policy, ema, env_cfg, cfg.eval, eval_dir, eval_plan[step])
            clock.add_eval(eval_plan[step], time.perf_counter() - eval_start)
            if is_main:
                eval_summary = result.aggregated
                log_entry(
                    accelerator,
                    output_dir,
                    step,
                    {f"eval/{k}": v for k, v in eval_summary.items() if k != "pc_success_ci95"},
                )
                bar.write(
                    f"step {step}: eval success {eval_summary['pc_success']:.1f}%, "
                    f"avg max reward {eval_summary['avg_max_reward']:.3f} ({eval_summary['n_episodes']} episodes)"
                )

        if saved:
            save_checkpoint(
                accelerator,
                output_dir,
                step,
                save_policy=lambda folder: save_shareable_policy(accelerator, policy, ema, cfg, folder),
                keep_last=cfg.keep_last_checkpoints,
                extra_state=online.state() if online is not None else None,
                **training_state,
            )

        if cfg.hub.repo_id and (is_last or (evaluated and cfg.hub.push_after_eval)) and is_main:
            hub_commit = push_trained_policy(accelerator, policy, ema, cfg, output_dir, step)
            bar.write(f"pushed to the Hub: {hub_commit}")

    bar.close()
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return TrainResult(
        policy=accelerator.unwrap_model(policy),
        output_dir=output_dir,
        last_checkpoint=latest_checkpoint(output_dir),
        eval_summary=eval_summary,
        hub_commit=hub_commit,
    )


# --- set-up helpers -----------------------------------------------------------------------------------------------
def default_output_dir(cfg: TrainConfig) -> Path:
    return Path("outputs/train") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{cfg.policy.type}"


def choose_cpu_threads(num_threads: int | None, num_processes: int) -> int:
    """torch's intra-op threads for this process: `num_threads`, else the cores this process may use divided among
    the run's processes (at least 1). accelerate launch gives a CPU process 1 thread; a lone process on a 2-core
    machine then leaves a core idle."""
    if num_threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        num_threads = max(1, cores // max(num_processes, 1))
    torch.set_num_threads(num_threads)
    return num_threads


def is_launch_main_process() -> bool:
    """Whether this is the main process of the launch (rank 0), asked before the Accelerator exists. (Creating
    accelerate's PartialState for this would fix the distributed setup before the Accelerator could: on CPU, each
    process of `accelerate launch --num_processes 2` would then train alone.)"""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def lock_run_folder(output_dir: Path):
    """The run folder's exclusive lock, held by the main process for the block (see hfpolicy.run_lock)."""
    if not is_launch_main_process():
        yield
        return
    try:
        lock = RunLock(output_dir).acquire()
    except OSError as e:  # RunLockedError is not an OSError: it passes through, naming the other run
        raise TrainConfigError(f"cannot create --output_dir={output_dir} ({e}): choose a writable folder") from e
    try:
        yield
    finally:
        lock.release()


def check_output_dir(output_dir: Path, resume: bool) -> None:
    """A new run needs a folder without checkpoints: a fresh one, or one whose run stopped before its first
    checkpoint (that run is started again in place). A resumed run needs a folder holding a checkpoint."""
    checkpoint = latest_checkpoint(output_dir)
    if resume and checkpoint is None:
        if (output_dir / TRAIN_CONFIG_FILE).exists():
            raise TrainConfigError(
                f"--output_dir={output_dir} holds no checkpoint to resume from: its run stopped before the first one "
                "(--save_freq); start it again in place by dropping --resume"
            )
        raise TrainConfigError(
            f"--resume=true but --output_dir={output_dir} holds no checkpoint to resume from; drop --resume to start "
            "a new run there"
        )
    if not resume and checkpoint is not None:
        raise TrainConfigError(
            f"--output_dir={output_dir} holds another run (checkpoints up to {checkpoint.name}): pass --resume=true "
            "to continue it, or choose another --output_dir"
        )


def forget_after(output_dir: Path, step: int) -> None:
    """Drops what a stopped run logged and evaluated after `step`, the checkpoint the run continues from (0: a run
    started again in place): those steps are trained, logged and evaluated again."""
    truncate_metrics(output_dir / METRICS_FILE, after_step=step)
    for folder in (output_dir / "eval").glob("step_*"):
        if folder.name.removeprefix("step_").isdigit() and int(folder.name.removeprefix("step_")) > step:
            shutil.rmtree(folder)


def resolve_dataset_root(dataset: DatasetConfig, recipe: str | None = None, progress: bool = True) -> Path:
    """The local folder of the dataset: `--dataset.root`, the scripted recording (made now if it does not exist yet),
    or the Hub dataset downloaded into the HF cache."""
    if dataset.scripted_episodes > 0:
        return record_scripted_dataset(dataset, progress)
    if dataset.root is not None:
        root = Path(dataset.root)
        if not root.is_dir():
            raise TrainConfigError(
                f"--dataset.root={root} is not a directory (a LeRobot v3.0 dataset: meta/, data/, videos/)"
            )
        if not (root / INFO_PATH).is_file():
            nested = next(root.glob(f"*/{INFO_PATH}"), None)
            hint = f"; its subfolder is one: --dataset.root={nested.parents[1]}" if nested is not None else ""
            raise TrainConfigError(
                f"--dataset.root={root} has no {INFO_PATH}, so it is not a LeRobot v3.0 dataset{hint}; or drop "
                "--dataset.root to download --dataset.repo_id from the Hub (`hfpolicy convert` and `hfpolicy record` "
                "write local datasets)"
            )
        return root
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    from hfpolicy.datasets import download_dataset

    try:
        return download_dataset(dataset.repo_id, revision=dataset.revision, episodes=dataset.episodes)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
        offline = " or --recipe=cpu, which trains offline on recorded scripted demonstrations" if recipe else ""
        raise TrainConfigError(
            f"could not download the dataset {dataset.repo_id!r} from the Hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0]}); check the repo id and the network, or train on a local copy with "
            f"--dataset.root=DIR (`hfpolicy convert` and `hfpolicy record` write one){offline}"
        ) from e


def record_scripted_dataset(dataset: DatasetConfig, progress: bool) -> Path:
    """The recording of `dataset.scripted_episodes` expert demos (seeds 0..n-1): reused when it exists, else recorded
    (atomically: an interrupted recording leaves nothing behind, and the next run records again)."""
    from hfpolicy.datasets import DatasetMeta
    from hfpolicy.record import RecordConfig, record

    n = dataset.scripted_episodes
    root = Path(dataset.root) if dataset.root is not None else scripted_dataset_root(n)
    if root.exists():
        try:
            meta = DatasetMeta.load(root)
        except (ValueError, OSError) as e:
            raise TrainConfigError(
                f"{root} exists but is not a readable dataset ({e}); delete it to record {n} episodes again"
            ) from e
        if meta.total_episodes != n or OBS_ENV_STATE not in meta.features:
            lacking = "" if OBS_ENV_STATE in meta.features else f" without {OBS_ENV_STATE}"
            raise TrainConfigError(
                f"{root} holds {meta.total_episodes} episodes{lacking}, not the {n} scripted demonstrations "
                f"--dataset.scripted_episodes={n} asks for: choose another --dataset.root, or delete that folder"
            )
        return root
    if PartialState().is_main_process:
        print(f"recording {n} scripted PushT demonstrations into {root} (once; later runs reuse them)")
        record(
            RecordConfig(n_episodes=n, output_dir=str(root), environment_state=True, images=False, progress=progress)
        )
    return root


@contextlib.contextmanager
def dataset_errors_as_config_errors(dataset: DatasetConfig):
    """A dataset that cannot be read or windowed as asked is bad input: one clear line, no traceback."""
    try:
        yield
    except ValueError as e:
        where = dataset.root or dataset.repo_id
        raise TrainConfigError(f"dataset {where}: {e}") from e


def configure_policy_features(
    policy_cfg: PolicyConfig, dataset_features: dict[str, Any], input_keys: list[str] | None
) -> PolicyConfig:
    """The policy config with its input/output features taken from the dataset (unless already set), checked
    against what the dataset holds; ValueError naming the missing feature otherwise."""
    inputs, outputs = dataset_to_policy_features(dataset_features)
    if input_keys is not None:
        missing = [key for key in input_keys if key not in inputs]
        if missing:
            raise TrainConfigError(
                f"--dataset.input_features asks for {missing}, which the dataset does not have as policy inputs; "
                f"it has {sorted(inputs)}"
            )
        inputs = {key: inputs[key] for key in input_keys}
    chosen_inputs = policy_cfg.input_features or inputs
    chosen_outputs = policy_cfg.output_features or outputs
    for key, feature in {**chosen_inputs, **chosen_outputs}.items():
        offered = inputs.get(key) or outputs.get(key)
        if offered is None:
            raise TrainConfigError(
                f"the policy needs feature {key!r}, which the dataset does not have; its features: "
                f"{sorted(dataset_features)}"
            )
        if tuple(offered.shape) != tuple(feature.shape):
            raise TrainConfigError(
                f"the policy expects {key!r} of shape {tuple(feature.shape)}, the dataset has {offered.shape}"
            )
    try:
        configured = dataclasses.replace(
            policy_cfg, input_features=dict(chosen_inputs), output_features=dict(chosen_outputs)
        )
        configured.validate_features()
    except ValueError as e:
        problem = cli_message(str(e), type(policy_cfg), "policy.")
        raise TrainConfigError(f"the {policy_cfg.type} policy cannot be built from this dataset: {problem}") from e
    return configured


def make_optimizer(policy: Policy, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with the policy's presets (fused: one pass over the weights, ~5x faster steps on CPU than foreach)."""
    cfg = policy.config
    return torch.optim.AdamW(
        policy.get_optim_params(),
        lr=cfg.optimizer_lr,
        betas=cfg.optimizer_betas,
        eps=cfg.optimizer_eps,
        weight_decay=cfg.optimizer_weight_decay,
        fused=torch.device(device).type in ("cpu", "cuda"),
    )


def make_online_training(cfg: TrainConfig, output_dir: Path, policy_cfg: PolicyConfig, meta: DatasetMeta):
    """The run's online data (hfpolicy.training.online), for the policy's inputs, in the env the policy acts in."""
    from hfpolicy.training.online import OnlineTraining, online_features

    window = max((max(d) for d in policy_cfg.delta_timestamps(meta.fps).values()), default=0.0)
    episode_length = getattr(cfg.env, "episode_length", None)
    if episode_length is not None and episode_length / meta.fps <= window:
        raise TrainConfigError(
            f"--env.episode_length={episode_length} is shorter than the policy's action window "
            f"({round(window * meta.fps) + 1} steps): online episodes could not fill a training sample; raise it"
        )
    return OnlineTraining(
        cfg.online,
        output_dir,
        configure_eval_env(cfg.env, policy_cfg),
        online_features(meta.features, list(policy_cfg.input_features)),
        meta.fps,
        policy_cfg.delta_timestamps(meta.fps),
        policy_cfg.drop_n_last_frames,
        cfg.seed,
    )


def configure_eval_env(env_cfg: EnvConfig, policy_cfg: PolicyConfig) -> EnvConfig:
    """The eval env with an observation type that gives the policy's inputs, in the policy's shapes."""
    try:
        return env_cfg.for_policy(policy_cfg.input_features)
    except ValueError as e:
        raise TrainConfigError(f"{e} (or set --eval.freq=0 to train without evaluation)") from e


# --- loop helpers --------------------------------------------------------------------------------------------------
def endless_batches(dataloader, batch_sampler: EpochBatchSampler, start_batch: int, seed: int):
    """Batches forever, epoch after epoch, starting at batch `start_batch` counted from the run's start (no data
    is loaded for the skipped batches: the sampler starts mid-epoch). Each epoch's order and worker seeds are
    functions of (seed, epoch) alone, so a resumed run reads exactly what the uninterrupted one would have."""
    epoch, skip = divmod(start_batch, len(batch_sampler))
    while True:
        batch_sampler.set_epoch(epoch, start_batch=skip)
        dataloader.generator.manual_seed(seed * 100_003 + epoch)  # seeds of the worker processes of this epoch
        yield from dataloader
        epoch, skip = epoch + 1, 0


def move_to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class RunningMeans:
    """Sums of per-step values since the last log entry; `pop` averages them (the loss over processes too)."""

    def __init__(self):
        self.sums: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    def add(self, **values: Any) -> None:
        for key, value in values.items():
            if value is None:
                continue
            self.sums[key] = self.sums.get(key, 0.0) + (value.detach() if isinstance(value, torch.Tensor) else value)
            self.counts[key] = self.counts.get(key, 0) + 1

    def pop(self, accelerator: Accelerator) -> dict[str, float]:
        means = {}
        for key, total in self.sums.items():
            value = total / self.counts[key]
            if key == "loss":
                value = accelerator.reduce(
                    torch.as_tensor(value, device=accelerator.device, dtype=torch.float32), "mean"
                )
            means[key] = float(value)
        self.sums, self.counts = {}, {}
        return means


class NonFiniteLossGuard:
    """Notes the first step whose loss is NaN or inf without a host sync per step. `check` (a collective: every
    process calls it at the same steps) raises TrainingDivergedError on every process when any process saw one, or,
    before a checkpoint, when a weight is NaN or inf (an update from a huge gradient shows in the weights one step
    before it shows in the loss)."""

    def __init__(self, device: torch.device):
        self.first_bad_step = torch.zeros((), dtype=torch.long, device=device)  # 0: none yet

    def add(self, step: int, loss: torch.Tensor) -> None:
        bad = ~torch.isfinite(loss.detach()) & (self.first_bad_step == 0)
        self.first_bad_step = torch.where(bad, step, self.first_bad_step)

    def check(self, accelerator: Accelerator, output_dir: Path, step: int, model: torch.nn.Module | None) -> None:
        weights_bad = model is not None and not all(torch.isfinite(p).all() for p in model.parameters())
        if weights_bad and self.first_bad_step == 0:
            self.first_bad_step.fill_(step)
        steps = accelerator.gather(self.first_bad_step.reshape(1))
        bad = steps[steps > 0]
        if bad.numel() == 0:
            return
        checkpoint = latest_checkpoint(output_dir)
        kept = (
            f"the last good checkpoint is {checkpoint}: resume from it with --resume=true"
            if checkpoint is not None
            else "no checkpoint was saved yet: start again"
        )
        raise TrainingDivergedError(
            f"the training loss (or the weights) became NaN or inf at step {int(bad.min())}: the run stopped there, "
            f"before saving, evaluating or logging anything computed from it; {kept}, with a lower "
            "--policy.optimizer_lr or --grad_clip_norm (or check the data)"
        )


def planned_evaluations(cfg: TrainConfig, start_step: int) -> dict[int, int]:
    """{step: episodes} of the evaluations still to come: every eval.freq steps, and the final one after the last step
    with eval.final_n_episodes."""
    plan = {step: cfg.eval.n_episodes for step in range(start_step + 1, cfg.steps + 1) if step % cfg.eval.freq == 0}
    plan[cfg.steps] = cfg.eval.final_n_episodes or cfg.eval.n_episodes
    return plan


class TrainingClock:
    """The time a run has left: steps at the median of the recent step times (the first step, which compiles and
    warms up, is left out) plus the evaluations still planned, at the measured seconds per eval episode. tqdm's own
    ETA smooths over the first steps and ignores evaluations, so early on it is off by hours."""

    ANNOUNCE_AFTER_STEPS = 10  # steps after which the run's estimated total time is printed once
    WARN_ABOVE_S = 24 * 3600  # estimates above this get a warning line

    def __init__(self, total_steps: int, eval_plan: dict[int, int]):
        self.total_steps, self.eval_plan = total_steps, eval_plan
        self.step_times: list[float] = []
        self.n_steps_seen = 0
        self.eval_s_per_episode: float | None = None
        self.last_log = ""

    def add_step(self, seconds: float) -> None:
        self.n_steps_seen += 1
        if self.n_steps_seen > 1:  # the first step of a process compiles / allocates: not representative
            self.step_times = [*self.step_times[-99:], seconds]

    def add_eval(self, n_episodes: int, seconds: float) -> None:
        self.eval_s_per_episode = seconds / max(n_episodes, 1)

    def remaining_s(self, step: int) -> tuple[float | None, bool]:
        """(seconds left after `step`, whether the evaluations are included); None before a step was timed."""
        if not self.step_times:
            return None, False
        steps_s = sorted(self.step_times)[len(self.step_times) // 2] * (self.total_steps - step)
        episodes = sum(n for s, n in self.eval_plan.items() if s > step)
        if episodes and self.eval_s_per_episode is None:
            return steps_s, False
        return steps_s + episodes * (self.eval_s_per_episode or 0.0), True

    def postfix(self, step: int) -> str:
        left, with_evals = self.remaining_s(step)
        eta = "eta ?" if left is None else f"eta {format_duration(left)}" + ("" if with_evals else " + evals")
        return ", ".join(part for part in (eta, self.last_log) if part)

    def announcement(self, step: int, device: torch.device) -> str:
        left, with_evals = self.remaining_s(step)
        total = format_duration(left or 0.0) + ("" if with_evals else " plus evaluations")
        line = f"estimated time left: {total} ({self.total_steps - step} steps on {device})"
        if left is not None and left > self.WARN_ABOVE_S:
            line += (
                f"; that is {left / 86400:.1f} days: fewer --steps, a smaller policy, a GPU, or (examples/train_pusht.py) "
                "--recipe=cpu finish sooner"
            )
        return line


def format_duration(seconds: float) -> str:
    """1d 02:03:04 / 02:03:04 / 03:04."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}" if hours or days else f"{minutes:02d}:{secs:02d}"
    return f"{days}d {clock}" if days else clock


def log_entry(accelerator: Accelerator, output_dir: Path, step: int, entry: dict[str, Any]) -> None:
    """To the trackers and to metrics.jsonl (main process only)."""
    accelerator.log({k if "/" in k else f"train/{k}": v for k, v in entry.items()}, step=step)
    if accelerator.is_main_process:
        append_metrics(output_dir / METRICS_FILE, step, entry)


def save_shareable_policy(
    accelerator: Accelerator, policy: torch.nn.Module, ema: EMA | None, cfg: TrainConfig, folder: Path
) -> None:
    """save_pretrained with the EMA weights (when EMA is on) and the train_config.json beside them."""
    model = accelerator.unwrap_model(policy)
    with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
        model.save_pretrained(folder)
    write_json_atomically(folder / TRAIN_CONFIG_FILE, train_config_to_dict(cfg))


def push_trained_policy(
    accelerator: Accelerator, policy: torch.nn.Module, ema: EMA | None, cfg: TrainConfig, output_dir: Path, step: int
) -> str:
    """Pushes the run (hfpolicy.push) with the policy's EMA weights, its evaluation up to `step` and this command."""
    model = accelerator.unwrap_model(policy)
    with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
        return push_run(
            output_dir,
            cfg.hub.repo_id,
            policy=model,
            private=cfg.hub.private,
            branch=cfg.hub.branch,
            train_command=reproduce_command(),
            up_to_step=step,
            check_access=False,  # checked before step 1
            online_data_repo_id=cfg.hub.online_data_repo_id,
        )


def reproduce_command() -> str:
    """The command line of this run, as `accelerate launch ...` when launched by accelerate."""
    argv = [shlex.quote(a) for a in sys.argv]
    script = argv[0]
    if os.environ.get("ACCELERATE_MIXED_PRECISION") is not None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return " ".join(["accelerate", "launch", script, *argv[1:]])
    if script.endswith(".py"):
        return " ".join(["python", script, *argv[1:]])
    return " ".join(["hfpolicy", "train", *argv[1:]])


def main(
    argv: list[str] | None = None,
    config_class: type[TrainConfig] = TrainConfig,
    announce: Callable[[TrainConfig], str] | None = None,
    prog: str = "hfpolicy train",
) -> int:
    """`hfpolicy train` (and examples/train_pusht.py): parse flags, train; bad input exits 2 with one clear line.
    `announce(cfg)` is the first line the main process prints (examples/train_pusht.py: the recipe and the data)."""
    try:
        cfg = parse_train_config(sys.argv[1:] if argv is None else argv, config_class, prog)
        if announce is not None and is_launch_main_process():
            print(announce(cfg), flush=True)
        result = train(cfg)
    except (FlagError, ParsingError, TrainConfigError, RunLockedError, CheckpointError) as e:
        cause = f" ({e.__cause__})" if isinstance(e, ParsingError) and e.__cause__ else ""
        print(f"hfpolicy train: error: {e}{cause}", file=sys.stderr)
        return 2
    except (TrainingDivergedError, PushError) as e:
        print(f"hfpolicy train: error: {e}", file=sys.stderr)
        return 1
    if PartialState().is_main_process:
        summary = result.eval_summary
        print(
            f"done: {result.last_checkpoint / PRETRAINED_DIR}"
            + (f"; final eval success {summary['pc_success']:.1f}%" if summary else "")
            + (f"; on the Hub: {result.hub_commit}" if result.hub_commit else "")
        )
    return 0
