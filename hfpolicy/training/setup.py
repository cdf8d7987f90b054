"""Setting a run up (`build_training`): accelerator, data, policy, optimizer, eval env and the state a resume restores;
everything that can fail on bad input fails here, before the first step."""

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from diffusers.optimization import get_scheduler
from torch.optim.lr_scheduler import LambdaLR

from hfpolicy.datasets import DatasetMeta
from hfpolicy.datasets.batch_images import frames_to_float
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.stats import stats_to_torch
from hfpolicy.envs import EnvConfig
from hfpolicy.eval.episode_data import rollout_features
from hfpolicy.io.atomic import write_json_atomically
from hfpolicy.policies import Policy, PolicyConfig, make_policy
from hfpolicy.policies.device import accelerator_device_options
from hfpolicy.policies.ema import EMA
from hfpolicy.runs.hparams import flat_hparams
from hfpolicy.runs.run_folder import RunFolder
from hfpolicy.training.checkpoints import checkpoint_extra_state, load_checkpoint
from hfpolicy.training.config import TrainConfig, TrainConfigError, train_config_to_dict
from hfpolicy.training.data import TrainingData, configure_policy_features, endless_batches, load_training_data
from hfpolicy.training.finetune import describe_pretrained, load_pretrained_weights
from hfpolicy.training.online import OnlineTraining, online_features
from hfpolicy.training.progress import planned_evaluations
from hfpolicy.words import counted


def default_output_dir(cfg: TrainConfig) -> Path:
    return Path("outputs/train") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{cfg.policy.type}"


def choose_cpu_threads(num_threads: int | None, num_processes: int) -> int:
    """torch's threads for this process: `num_threads`, else its cores divided among the run's processes."""
    if num_threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        num_threads = max(1, cores // max(num_processes, 1))
    torch.set_num_threads(num_threads)
    return num_threads


def make_online_training(
    cfg: TrainConfig, output_dir: Path, features: dict[str, Any], fps: float, member_index: int | None = None
) -> OnlineTraining:
    """The run's online data (hfpolicy.training.online) of `features`, in the env the policy acts in."""
    policy_cfg, deltas = cfg.policy, cfg.policy.delta_timestamps(fps)
    window = max((max(d) for d in deltas.values()), default=0.0)
    episode_length = getattr(cfg.env, "episode_length", None)
    if episode_length is not None and episode_length / fps <= window:
        raise TrainConfigError(
            f"--env.episode_length={episode_length} is shorter than the policy's action window "
            f"({round(window * fps) + 1} steps): online episodes could not fill a training sample; raise it"
        )
    return OnlineTraining(
        cfg.online, output_dir, configure_eval_env(cfg.env, policy_cfg), features, fps,
        deltas, policy_cfg.drop_n_last_frames, cfg.seed, member_index=member_index, batch_size=cfg.batch_size,
    )  # fmt: skip


def make_pure_online_training(
    cfg: TrainConfig, output_dir: Path, accelerator: Accelerator
) -> tuple[TrainConfig, OnlineTraining, dict[str, Any]]:
    """Pure online: (the config with the env's observations as the policy's features, the online data, the stats of
    its seed round of random actions, played now or on disk when resuming)."""
    env, keys = cfg.env, cfg.dataset.input_features
    try:
        obs_type = env.obs_type or (env.obs_type_for(keys) if keys else env.obs_types[0])
    except ValueError as e:
        raise TrainConfigError(f"--dataset.input_features: {e}") from e
    offered = env.observation_features(obs_type)
    missing = [key for key in keys or [] if key not in offered]
    if missing:
        raise TrainConfigError(
            f"--dataset.input_features asks for {missing}, which --env.type={env.type} with --env.obs_type={obs_type} "
            f"does not give (it gives {sorted(offered)}); pure online trains on the env's observations"
        )
    inputs = {key: feature for key, feature in offered.items() if keys is None or key in keys}
    features = rollout_features(inputs, env.action_feature.shape)
    cfg = dataclasses.replace(cfg, policy=configure_policy_features(cfg.policy, features, keys))
    online = make_online_training(cfg, output_dir, features, env.fps)
    if not cfg.resume:
        start = time.perf_counter()
        online.collect_seed_round(accelerator)
        if accelerator.is_main_process:
            print(
                f"hfpolicy train: pure online: {counted(online.n_episodes, 'random-action episode')} "
                f"({counted(online.n_frames, 'frame')}) played in {time.perf_counter() - start:.0f} s: the first "
                "online data and the policy's normalization stats"
            )
    elif not (online.root / INFO_PATH).is_file():
        raise TrainConfigError(
            f"{online.root} (the seed round of this pure-online run) is missing: the run folder was changed; start "
            "a new run"
        )
    meta = DatasetMeta.load(online.root)  # resuming: any stats of the right shapes (the checkpoint's replace them)
    if not meta.stats:
        raise TrainConfigError(f"{online.root} has no meta/stats.json: the run folder was changed; start a new run")
    return cfg, online, stats_to_torch(meta.stats)


def make_optimizer(policy: Policy, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with the policy's presets (fused: ~5x faster steps on CPU than foreach)."""
    cfg = policy.config
    return torch.optim.AdamW(
        policy.get_optim_params(),
        lr=cfg.optimizer_lr,
        betas=cfg.optimizer_betas,
        eps=cfg.optimizer_eps,
        weight_decay=cfg.optimizer_weight_decay,
        fused=torch.device(device).type in ("cpu", "cuda"),
    )


def lr_factor(cfg: TrainConfig) -> Callable[[int], float]:
    """The lr's factor at each step: the policy's schedule over --steps (before a --budget.minutes choice: the
    planned steps' schedule, so a rerun from train_config.json gives every step the same lr)."""

    def schedule(steps: int) -> Callable[[int], float]:
        probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # the factor alone, no real optimizer
        name, warmup = cfg.policy.scheduler_name, cfg.policy.scheduler_warmup_steps
        return get_scheduler(name, probe, num_warmup_steps=warmup, num_training_steps=steps).lr_lambdas[0]

    final, budget = schedule(cfg.steps), cfg.budget
    if budget.chosen_steps is None or budget.chosen_at_step is None or budget.planned_steps is None:
        return final
    planned, chosen_at = schedule(budget.planned_steps), budget.chosen_at_step
    return lambda step: planned(step) if step < chosen_at else final(step)


def make_lr_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer, last_step: int = 0) -> LambdaLR:
    """The run's learning-rate scheduler (`lr_factor`) after `last_step` steps (> 0: the optimizer holds initial_lr)."""
    return LambdaLR(optimizer, lr_factor(cfg), last_epoch=last_step - 1)


def configure_eval_env(env_cfg: EnvConfig, policy_cfg: PolicyConfig) -> EnvConfig:
    """The eval env with an observation type that gives the policy's inputs, in the policy's shapes."""
    try:
        return env_cfg.for_policy(policy_cfg.input_features, policy_cfg.output_features)
    except ValueError as e:
        raise TrainConfigError(f"{e} (or set --eval.freq=0 to train without evaluation)") from e


def move_to_device(batch: dict[str, Any], device: torch.device, image_keys=()) -> dict[str, Any]:
    """The batch's tensors on `device`, the uint8 frames of `image_keys` made float32 in [0, 1] there."""
    moved = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    for key in image_keys:
        if key in moved and moved[key].dtype == torch.uint8:
            moved[key] = frames_to_float(moved[key])
    return moved


@dataclasses.dataclass
class Training:
    """Everything the loop needs, built and checked by `build_training`."""

    cfg: TrainConfig  # as run: the policy's features and the output folder filled in
    run: RunFolder
    accelerator: Accelerator
    policy: torch.nn.Module  # as prepared by the accelerator
    optimizer: torch.optim.Optimizer
    lr_scheduler: Any
    ema: EMA | None
    batches: Iterator[dict[str, Any]] | None  # endless, continuing where a resumed run stopped; None: pure online
    env_cfg: EnvConfig | None  # the eval env; None: no evaluation
    start_step: int  # the step the run resumes from (0: a new run)
    samples_per_step: int  # over all processes and accumulation steps
    eval_plan: dict[int, int]  # {step: episodes} of the evaluations still to come
    online: Any = None  # hfpolicy.training.online.OnlineTraining with --online.every > 0, else None
    image_keys: tuple[str, ...] = ()  # the camera keys of the batches: uint8 until move_to_device
    threads: int = 1  # torch intra-op threads of this process (CPU)
    started_at: float = dataclasses.field(default_factory=time.monotonic)  # --budget.minutes counts from it

    @property
    def state(self) -> dict[str, Any]:
        """What a checkpoint saves and a resume restores."""
        return {"model": self.policy, "optimizer": self.optimizer, "lr_scheduler": self.lr_scheduler, "ema": self.ema}


def build_training(cfg: TrainConfig, run: RunFolder) -> Training:
    """Sets up the run in a checked and locked folder (see the module docstring)."""
    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        mixed_precision=cfg.mixed_precision,
        log_with=None if cfg.tracker == "none" else cfg.tracker,
        project_config=ProjectConfiguration(project_dir=str(run.root), logging_dir=str(run.root / "logs")),
        **accelerator_device_options(cfg.policy.device),  # --policy.device=cpu trains on the CPU beside a GPU
    )
    threads = choose_cpu_threads(cfg.num_threads, accelerator.num_processes)
    set_seed(cfg.seed, device_specific=True)  # seed + rank: different crops and noise on each process
    cfg, data, online, stats = load_data_and_online(cfg, run, accelerator)
    policy = make_policy(cfg.policy, dataset_stats=stats)
    if cfg.policy.pretrained_path and not cfg.resume:  # fine-tuning: the saved weights and stats (a resume: its own)
        load_pretrained_weights(policy, cfg.policy.pretrained_path)
    if cfg.compile:
        policy.compile()  # in place: forward (training) is compiled; acting and the state dict stay as they are
    optimizer = make_optimizer(policy, accelerator.device)
    lr_scheduler = make_lr_scheduler(cfg, optimizer)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    ema = EMA(policy, power=cfg.policy.ema_power, max_decay=cfg.policy.ema_max_decay) if cfg.policy.use_ema else None
    env_cfg = configure_eval_env(cfg.env, cfg.policy) if cfg.eval.freq > 0 else None
    state = {"model": policy, "optimizer": optimizer, "lr_scheduler": lr_scheduler, "ema": ema}
    start_step = 0
    if cfg.resume:
        checkpoint = run.checkpoint_to_resume()
        start_step = load_checkpoint(accelerator, checkpoint, **state)
        if online is not None:  # drops the online rounds collected after the checkpoint
            online.restore(accelerator, start_step, checkpoint_extra_state(checkpoint))
    cfg = dataclasses.replace(cfg, output_dir=str(run.root))
    if accelerator.is_main_process:
        run.forget_after(start_step)  # what a stopped run logged or evaluated after its last checkpoint
        write_json_atomically(run.config_file, train_config_to_dict(cfg))
    accelerator.init_trackers("hfpolicy", config=flat_hparams(train_config_to_dict(cfg)))
    skip = start_step * cfg.gradient_accumulation_steps  # the batches a resumed run already trained on
    training = Training(
        cfg=cfg,
        run=run,
        accelerator=accelerator,
        policy=policy,
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        ema=ema,
        batches=None if data is None else endless_batches(data.dataloader, data.batch_sampler, skip, cfg.seed),
        env_cfg=env_cfg,
        start_step=start_step,
        samples_per_step=cfg.batch_size * cfg.gradient_accumulation_steps * accelerator.num_processes,
        eval_plan=planned_evaluations(cfg, start_step) if env_cfg is not None else {},
        online=online,
        image_keys=tuple(data.dataset.camera_keys if data is not None else cfg.policy.image_features),
        threads=threads,
    )
    announce_training(training, data)
    return training


def load_data_and_online(
    cfg: TrainConfig, run: RunFolder, accelerator: Accelerator
) -> tuple[TrainConfig, TrainingData | None, OnlineTraining | None, dict[str, Any]]:
    """(the config with the policy's features, the offline data, the online data, the policy's stats)."""
    if cfg.online.pure:  # no offline data: the seed round of random actions is the first data
        cfg, pure, stats = make_pure_online_training(cfg, run.root, accelerator)
        return cfg, None, pure, stats
    cfg, data = load_training_data(cfg, accelerator)
    online = None
    if cfg.online.every > 0:  # the offline data's (shared) features; its rows the mixture's next dataset_index
        features = online_features(data.dataset.features, list(cfg.policy.input_features))
        online = make_online_training(cfg, run.root, features, data.dataset.fps, len(data.dataset.datasets))
    return cfg, data, online, data.dataset.stats


def announce_training(training: Training, data: TrainingData | None) -> None:
    """The run's first line (main process): policy, data, processes, folder, and where it resumes."""
    cfg, accelerator, start_step = training.cfg, training.accelerator, training.start_step
    if not accelerator.is_main_process:
        return
    n_params = sum(p.numel() for p in training.policy.parameters()) / 1e6
    pretrained = cfg.policy.pretrained_path if not cfg.resume else None  # a resume starts from its checkpoint
    if data is None:  # pure online
        source = "no offline data (pure online: every batch from the online data)"
    else:
        name = f"{data.name}, streamed from the Hub as training reads it" if cfg.dataset.streaming else data.name
        n_samples = len(data.sampler) * accelerator.num_processes
        source = f"{name}: {counted(data.dataset.num_episodes, 'episode')}, {n_samples} samples per epoch"
    print(
        f"hfpolicy train: {cfg.policy.type} policy, {n_params:.1f} M params; {source}; "
        f"{accelerator.num_processes} process(es) on {accelerator.device}"
        + (f" ({training.threads} thread(s) each)" if accelerator.device.type == "cpu" else "")
        + f", {training.samples_per_step} samples per step; output {training.run.root}"
        + (f"; resuming at step {start_step}" if start_step else "")
        + (f"; {describe_pretrained(pretrained)}" if pretrained else "")
    )
    if start_step >= cfg.steps:
        print(
            f"the run already reached --steps={cfg.steps}: nothing to train (pass a larger --steps to train "
            f"longer; `hfpolicy push --run={training.run.root}` pushes it to the Hub)"
        )
