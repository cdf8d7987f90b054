"""The training loop, with 🤗 accelerate (a CPU, one GPU, or many with DDP): `train(cfg)` locks the run folder, sets
the run up (hfpolicy.training.setup), then `run_loop` trains, logging, evaluating, saving and pushing at their
frequencies (docs/training.md)."""

import dataclasses
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hfpolicy.cli.commands import command_line
from hfpolicy.eval.distributed import evaluate_on_all_processes
from hfpolicy.hub.push import PushError, check_push_access, push_run
from hfpolicy.policies import Policy
from hfpolicy.record.scripted_cache import scripted_dataset_root
from hfpolicy.runs.curve import draw_training_curve
from hfpolicy.runs.run_folder import PRETRAINED_DIR, RunFolder
from hfpolicy.ticker import ticking
from hfpolicy.training.budget import SKIPPED_STEPS, TIMED_STEPS, StepBudget
from hfpolicy.training.checkpoints import checkpoint_size_line, save_checkpoint, save_shareable_policy, shareable_policy
from hfpolicy.training.config import TrainConfig, TrainConfigError, validate_train_config
from hfpolicy.training.launch import is_launch_main_process
from hfpolicy.training.progress import (
    NonFiniteLossGuard,
    RunningMeans,
    TrainingClock,
    log_entry,
    timed_eval_episode_s,
    warnings_above_the_bar,
    without_torchs_cuda_home_note,
)
from hfpolicy.training.resume_flags import check_resume_flags, record_resume
from hfpolicy.training.setup import Training, build_training, default_output_dir, move_to_device
from hfpolicy.training.stopping import Interrupted, RunStopped, StopControl, resume_command
from hfpolicy.words import counted


@dataclasses.dataclass
class TrainResult:
    """What `train` returns (on every process)."""

    policy: Policy  # the trained policy (raw weights, unwrapped; EMA weights are in the checkpoint)
    output_dir: Path  # the run folder
    last_checkpoint: Path | None  # checkpoints/step_<steps>; None where the run folder is out of sight (another node)
    eval_summary: dict[str, Any] | None  # aggregates of the last evaluation, if any
    hub_commit: str | None  # URL of the Hub commit, if pushed


def train(cfg: TrainConfig) -> TrainResult:
    """Runs (or resumes) a training run; see the module docstring."""
    started_at = time.monotonic()  # a --budget.minutes run counts from here: recording and set-up included
    validate_train_config(cfg)
    run = RunFolder(cfg.output_dir if cfg.output_dir else default_output_dir(cfg))
    if cfg.hub.repo_id:
        try:
            check_push_access(cfg.hub.repo_id)  # a missing or read-only token is found now, not after training
        except PushError as e:
            raise TrainConfigError(str(e)) from e
    holds_lock = is_launch_main_process()  # asked before the Accelerator exists (see is_launch_main_process)
    stops = StopControl(cfg.save_every_minutes)
    with stops.installed():
        if holds_lock:
            run.lock()
        try:
            with (
                warnings_above_the_bar(lambda line: tqdm.write(line, file=sys.stderr)),  # not spliced into the bar
                without_torchs_cuda_home_note(),
            ):
                return run_loop(start_training(cfg, run, stops, started_at), stops)
        except BaseException as e:
            if holds_lock and not stops.trained_a_step:
                run.undo_start()  # a failed or stopped start leaves nothing behind in a folder it created
            if isinstance(e, Interrupted):
                raise stops.stopped(interrupted_message(e, run, cfg)) from None
            raise
        finally:
            if holds_lock:
                run.unlock()


def start_training(cfg: TrainConfig, run: RunFolder, stops: StopControl, started_at: float) -> Training:
    """The checked and built run, its changed flags refused or recorded on a resume."""
    run.check_for(resume=cfg.resume)
    changes = check_resume_flags(cfg, run.config_file) if cfg.resume else {}
    t = build_training(cfg, run)
    t.started_at = started_at
    if t.accelerator.is_main_process and cfg.resume:
        record_resume(t, run.resume_history_file, changes)
    stops.training(t.accelerator)
    return t


def interrupted_message(e: Interrupted, run: RunFolder, cfg: TrainConfig) -> str:
    """What a stop that ended the run at once kept, and how to continue."""
    command = f"continue with `{resume_command(run.root)}`"
    if e.again:
        return (
            f"at once (a second Ctrl-C), without a checkpoint of the current step; the latest checkpoint is "
            f"{run.latest_checkpoint()}: {command}"
        )
    if cfg.resume:
        return f"before the first step; the run's checkpoints are as they were: {command}"
    recording = finished_scripted_recording(cfg)
    if recording is not None:  # recorded before the stop (a stopped recording leaves nothing)
        return (
            f"before the first step; nothing was trained; the scripted demonstrations recorded into {recording} "
            "are kept, and the next run reuses them"
        )
    return "before the first step; nothing was trained, nothing is kept"


def finished_scripted_recording(cfg: TrainConfig) -> Path | None:
    """The folder of the scripted demonstrations a `--dataset.scripted_episodes` run records, if it exists now."""
    if cfg.dataset.scripted_episodes <= 0:
        return None
    try:
        root = Path(cfg.dataset.root or scripted_dataset_root(cfg.dataset.scripted_episodes, cfg.env))
    except ValueError:  # $HFPOLICY_CACHE is a file: nothing was recorded
        return None
    return root if root.is_dir() else None


def run_loop(t: Training, stops: StopControl) -> TrainResult:
    """The steps from `t.start_step + 1` to `cfg.steps`; a stop request ends the run after its step's checkpoint."""
    cfg, accelerator, policy, run = t.cfg, t.accelerator, t.policy, t.run
    is_main = accelerator.is_main_process
    rounds = t.online.planned_rounds(t.start_step, cfg.steps) if t.online is not None else None
    clock = TrainingClock(cfg.steps, t.eval_plan, compiles=cfg.compile, round_plan=rounds)
    budget = StepBudget(cfg, t.start_step, t.started_at)
    bar = tqdm(
        total=cfg.steps,
        initial=t.start_step,
        desc="train",
        unit="step",
        disable=not (is_main and cfg.progress),
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",  # our ETA (with evals), not tqdm's
    )
    if is_main and t.eval_plan and t.env_cfg is not None:  # the first estimate counts the evaluations (a guess)
        envs = max(1, min(cfg.eval.batch_size, -(-cfg.eval.n_episodes // accelerator.num_processes)))
        model = accelerator.unwrap_model(policy)
        clock.estimate_eval(timed_eval_episode_s(model, t.env_cfg, envs, parallel=cfg.eval.parallel))
    if is_main and budget.too_short:
        timed = SKIPPED_STEPS + TIMED_STEPS
        print(f"--budget.minutes: the run ends before its speed is measured (after {timed} steps): it trains --steps")
    if t.start_step < cfg.steps:  # while the bar sits at its start: "compiling ..." (--compile=true), else "?"
        bar.set_postfix_str(clock.postfix(t.start_step))
    policy.train()
    if t.online is not None and t.online.round_skipped(t.start_step, cfg.steps):
        online_round(t, t.start_step, bar, clock)  # a finished run extended (a larger --steps): the round it skipped
    eval_summary, hub_commit = None, None
    window = RunningMeans()  # losses and timings since the last log entry
    loss_guard = NonFiniteLossGuard(accelerator.device)
    saved_before = False  # the first save of this process says what a checkpoint takes
    step = t.start_step
    with ticking(bar):  # the bar's elapsed time moves through compiling, checkpoint writes and online rounds
        while step < cfg.steps:
            step += 1
            step_start = time.perf_counter()
            loss_sum, data_s, grad_norm = 0.0, 0.0, None
            for part in range(cfg.gradient_accumulation_steps):
                data_start = time.perf_counter()
                offline = next(t.batches) if t.batches is not None else None  # None: pure online
                batch = offline if t.online is None else t.online.mix(offline, step, accelerator.process_index, part)
                assert batch is not None  # a run without offline data is an online one
                batch = move_to_device(batch, accelerator.device, t.image_keys)
                data_s += time.perf_counter() - data_start
                with accelerator.accumulate(policy), accelerator.autocast():
                    loss = policy(batch)["loss"]
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and cfg.grad_clip_norm > 0:
                        grad_norm = accelerator.clip_grad_norm_(policy.parameters(), cfg.grad_clip_norm)
                    t.optimizer.step()
                    t.optimizer.zero_grad(set_to_none=True)
                loss_sum += loss.detach()
            t.lr_scheduler.step()
            accelerator.unwrap_model(policy).after_optimizer_step()  # TD-MPC's target network
            if t.ema is not None:
                t.ema.step(policy)
            step_s = time.perf_counter() - step_start
            clock.add_step(step_s)
            budget.add_step(step, step_s)
            if step == budget.at:  # --budget.minutes: the steps that fit, chosen now, once
                line = budget.choose(t, step, clock)
                cfg = t.cfg
                bar.total = cfg.steps
                if is_main:
                    bar.write(line)
                    bar.write(clock.announcement(step, accelerator.device))  # the time left of the chosen steps
            if t.online is not None and t.online.is_due(step) and step < cfg.steps:
                online_round(t, step, bar, clock)  # the policy's rollouts join its data (before this step's checkpoint)
            loss_guard.add(step, torch.as_tensor(loss_sum))  # (a tensor: the sum of the passes' losses)
            loss = loss_sum / cfg.gradient_accumulation_steps
            window.add(loss=loss, grad_norm=grad_norm, step_s=step_s, data_s=data_s)
            clock.note_current(loss, t.lr_scheduler.get_last_lr()[0])
            bar.set_postfix_str(clock.postfix(step), refresh=False)
            bar.update(1)
            if is_main and step == t.start_step + TrainingClock.ANNOUNCE_AFTER_STEPS and budget.at is None:
                bar.write(clock.announcement(step, accelerator.device))

            is_last = step == cfg.steps
            stop, save_due = stops.poll(step)  # a stop signal (Ctrl-C, SIGTERM), the --save_every_minutes timer
            logged = step % cfg.log_freq == 0 or is_last or stop
            evaluated = t.env_cfg is not None and (step % cfg.eval.freq == 0 or is_last) and not stop
            saved = (cfg.save_freq > 0 and step % cfg.save_freq == 0) or is_last or save_due or stop
            if logged or evaluated or saved:
                loss_guard.check(accelerator, run, step, policy if saved else None)  # before a NaN is logged/saved

            if logged:
                entry = window.pop(accelerator)  # averages the loss over processes (one collective per log entry)
                entry.update(lr=t.lr_scheduler.get_last_lr()[0], samples_per_s=t.samples_per_step / entry["step_s"])
                log_entry(accelerator, run, step, entry)

            if saved:  # before the evaluation: a stop during it keeps this step
                bar.set_postfix_str(f"saving the checkpoint of step {step}", refresh=False)  # shown if it takes long
                checkpoint = save_training_checkpoint(t, step)
                bar.set_postfix_str(clock.postfix(step), refresh=False)
                stops.saved()
                if is_main and not saved_before:
                    bar.write(checkpoint_size_line(checkpoint, cfg.keep_last_checkpoints))
                saved_before = True

            if evaluated and t.env_cfg is not None:
                eval_start = time.perf_counter()
                try:
                    with stops.interruptible():  # nothing is lost by ending an evaluation at once
                        result = evaluate_on_all_processes(
                            accelerator, policy, t.ema, t.env_cfg, cfg.eval, run.eval_dir(step), t.eval_plan[step],
                            progress=cfg.progress, run_dir=run.root, step=step,
                        )  # fmt: skip
                except Interrupted:
                    bar.close()
                    raise stopped_during_evaluation(t, stops, step, saved, loss_guard) from None
                clock.add_eval(step, t.eval_plan[step], time.perf_counter() - eval_start)
                if is_main:
                    eval_summary = result.aggregated
                    aggregated = {f"eval/{k}": v for k, v in eval_summary.items() if k != "pc_success_ci95"}
                    log_entry(accelerator, run, step, aggregated)
                    draw_training_curve(run.metrics_file, run.curve_file)  # the run folder's curve, up to date
                    bar.write(
                        f"step {step}: eval success {eval_summary['pc_success']:.1f}%, "
                        f"avg max reward {eval_summary['avg_max_reward']:.3f} "
                        f"({counted(eval_summary['n_episodes'], 'episode')})"
                    )
                    bar.set_postfix_str(clock.postfix(step), refresh=False)  # the time left with this evaluation's

            if stop:
                bar.close()
                raise stopped_after(t, stops, step)

            if cfg.hub.repo_id and (is_last or (evaluated and cfg.hub.push_after_eval)) and is_main:
                hub_commit = push_trained_policy(t, step)
                bar.write(f"pushed to the Hub: {hub_commit}")

    bar.close()
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return TrainResult(
        policy=accelerator.unwrap_model(policy),
        output_dir=run.root,
        last_checkpoint=run.latest_checkpoint(),
        eval_summary=eval_summary,
        hub_commit=hub_commit,
    )


def online_round(t: Training, step: int, bar: tqdm, clock: TrainingClock) -> None:
    """One round of online rollouts (hfpolicy.training.online), timed, logged and announced."""
    online, accelerator = t.online, t.accelerator
    start = time.perf_counter()
    bar.set_postfix_str(f"online round {online.n_rounds}", refresh=False)
    stats = online.collect(accelerator, t.policy, t.ema, step, progress=accelerator.is_main_process and t.cfg.progress)
    stats["online/round_s"] = time.perf_counter() - start
    clock.add_round(online.cfg.n_episodes, stats["online/round_s"])
    clock.round_plan = online.planned_rounds(step, t.cfg.steps)  # the next round's step depends on this one
    log_entry(accelerator, t.run, step, stats)
    if accelerator.is_main_process:
        bar.write(
            f"step {step}: online round {online.n_rounds - 1}: success {100 * stats['online/round_success']:.0f}%, "
            f"{counted(online.n_episodes, 'online episode')} ({counted(online.n_frames, 'frame')}), "
            f"{stats['online/round_s']:.0f} s; {counted(online.env_steps, 'online env step')}, next round after step "
            f"{online.next_round}"
        )


def save_training_checkpoint(t: Training, step: int) -> Path:
    """checkpoints/step_<step>: the shareable policy and the state an exact resume restores."""
    return save_checkpoint(
        t.accelerator,
        t.run.root,
        step,
        save_policy=lambda folder: save_shareable_policy(t.accelerator, t.policy, t.ema, t.cfg, folder, step),
        keep_last=t.cfg.keep_last_checkpoints,
        extra_state=t.online.state() if t.online is not None else None,
        **t.state,
    )


def stopped_after(t: Training, stops: StopControl, step: int, note: str = "") -> RunStopped:
    """The end of a run stopped after `step`, whose checkpoint is saved: trackers flushed, what was kept said."""
    t.accelerator.end_training()
    return stops.stopped(
        f"after step {step}, saved the checkpoint {t.run.checkpoint_dir(step)}{note}; continue with "
        f"`{resume_command(t.run.root)}`"
    )


def stopped_during_evaluation(
    t: Training, stops: StopControl, step: int, saved: bool, loss_guard: NonFiniteLossGuard
) -> RunStopped:
    """A stop during the evaluation after `step`: its partial folder goes, the step's checkpoint stays (or is saved)."""
    shutil.rmtree(t.run.eval_dir(step), ignore_errors=True)
    if not saved:
        loss_guard.check(t.accelerator, t.run, step, t.policy)
        save_training_checkpoint(t, step)
    policy_dir = t.run.checkpoint_dir(step) / PRETRAINED_DIR
    final = f" (its final evaluation was stopped: `hfpolicy eval --policy.path={policy_dir}` runs it)"
    return stopped_after(t, stops, step, final if step == t.cfg.steps else "")


def push_trained_policy(t: Training, step: int) -> str:
    """Pushes the run (hfpolicy.hub.push) with the EMA weights, its evaluation up to `step` and this command."""
    hub = t.cfg.hub
    with shareable_policy(t.accelerator, t.policy, t.ema, step) as model:
        return push_run(
            t.run.root,
            hub.repo_id,
            policy=model,
            private=hub.private,
            branch=hub.branch,
            train_command=command_line(),
            up_to_step=step,
            check_access=False,  # checked before step 1
            online_data_repo_id=hub.online_data_repo_id,
        )
