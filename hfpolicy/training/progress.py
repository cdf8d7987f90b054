"""A run's progress as it trains: running means of a log entry, the NaN/inf loss guard, the clock that estimates the
time left (evaluations and online rounds included), the warnings kept off the bar's line, and the log entries."""

import contextlib
import logging
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from accelerate import Accelerator

from hfpolicy.envs import EnvConfig, episode_step_limit
from hfpolicy.eval.rollouts import rollout
from hfpolicy.runs.metrics_log import append_metrics
from hfpolicy.runs.run_folder import RunFolder
from hfpolicy.training.checkpoints import latest_good_checkpoint
from hfpolicy.training.config import TrainConfig
from hfpolicy.words import counted


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or inf."""


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
    """Notes the first step whose loss is NaN or inf without a host sync per step. `check` (a collective) raises
    TrainingDivergedError on every process when any saw one, or, given the model (before a checkpoint), when a weight
    is NaN or inf (a huge gradient's update shows in the weights a step before the loss)."""

    def __init__(self, device: torch.device):
        self.first_bad_step = torch.zeros((), dtype=torch.long, device=device)  # 0: none yet

    def add(self, step: int, loss: torch.Tensor) -> None:
        bad = ~torch.isfinite(loss.detach()) & (self.first_bad_step == 0)
        self.first_bad_step = torch.where(bad, step, self.first_bad_step)

    def check(self, accelerator: Accelerator, run: RunFolder, step: int, model: torch.nn.Module | None) -> None:
        weights_bad = model is not None and not all(torch.isfinite(p).all() for p in model.parameters())
        if weights_bad and self.first_bad_step == 0:
            self.first_bad_step.fill_(step)
        steps = accelerator.gather(self.first_bad_step.reshape(1))
        bad = steps[steps > 0]
        if bad.numel() == 0:
            return
        checkpoint = latest_good_checkpoint(run.root)  # its weights read back finite
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
    """{step: episodes} of the evaluations still to come: every eval.freq steps, and the final one."""
    plan = {step: cfg.eval.n_episodes for step in range(start_step + 1, cfg.steps + 1) if step % cfg.eval.freq == 0}
    plan[cfg.steps] = cfg.eval.final_n_episodes or cfg.eval.n_episodes
    return plan


# the bar's text while the first step of a --compile=true run compiles (minutes on a CPU)
COMPILING_NOTE = "compiling the training step (torch.compile: a minute or more on a CPU, once)"


class TrainingClock:
    """The time a run has left (tqdm's ETA ignores evaluations and is off by hours early on): the steps at the median
    of the recent step times (the first SKIPPED_STEPS left out), plus the evaluations and online rounds still planned
    at their measured (or first guessed) seconds per episode."""

    SKIPPED_STEPS = 3  # each process's first steps: compiling, allocating, warming caches
    ANNOUNCE_AFTER_STEPS = 10  # steps after which the run's estimated total time is printed once
    WARN_ABOVE_S = 24 * 3600  # estimates above this get a warning line

    CURRENT_EVERY_S = 0.5  # the bar's loss and lr are read this often (reading a GPU loss waits for the GPU)

    def __init__(
        self,
        total_steps: int,
        eval_plan: dict[int, int],
        compiles: bool = False,
        round_plan: dict[int, int] | None = None,
    ):
        self.total_steps, self.eval_plan = total_steps, eval_plan
        self.round_plan = round_plan or {}  # {step: episodes} of the online rounds still to come
        self.compiles = compiles  # this process's first step compiles the training forward (--compile=true)
        self.step_times: list[float] = []
        self.n_steps_seen = 0
        self.eval_s_per_episode: float | None = None
        self.eval_estimated = False  # eval_s_per_episode is a first guess, not yet a timed evaluation
        self.evaluated_through = 0  # the step of the last evaluation done
        self.round_s_per_episode: float | None = None  # None: until a round is timed, the evaluation's
        self.last_log = ""  # the bar's loss and lr: the current step's, refreshed every CURRENT_EVERY_S
        self._current_read_at = -math.inf

    def note_current(self, loss: torch.Tensor | float, lr: float) -> None:
        """The current step's loss and learning rate for the bar (read at most every CURRENT_EVERY_S)."""
        now = time.monotonic()
        if now - self._current_read_at >= self.CURRENT_EVERY_S:
            self._current_read_at = now
            self.last_log = f"loss={float(loss):.4f}, lr={lr:.2e}"

    def add_step(self, seconds: float) -> None:
        self.n_steps_seen += 1
        if self.n_steps_seen > self.SKIPPED_STEPS:
            self.step_times = [*self.step_times[-99:], seconds]

    def add_eval(self, step: int, n_episodes: int, seconds: float) -> None:
        self.eval_s_per_episode = seconds / max(n_episodes, 1)
        self.eval_estimated = False
        self.evaluated_through = step

    def add_round(self, n_episodes: int, seconds: float) -> None:
        self.round_s_per_episode = seconds / max(n_episodes, 1)

    def estimate_eval(self, seconds_per_episode: float) -> None:
        """A first guess (`timed_eval_episode_s`), until an evaluation is timed."""
        if self.eval_s_per_episode is None:
            self.eval_s_per_episode, self.eval_estimated = seconds_per_episode, True

    def replan(self, total_steps: int, eval_plan: dict[int, int], round_plan: dict[int, int] | None = None) -> None:
        """A new length and plan of evaluations and rounds (--budget.minutes chose them)."""
        self.total_steps, self.eval_plan, self.round_plan = total_steps, eval_plan, round_plan or {}

    def step_s(self) -> float | None:
        """The median of the recent step times (None: none timed yet)."""
        return sorted(self.step_times)[len(self.step_times) // 2] if self.step_times else None

    def remaining_s(self, step: int) -> tuple[float | None, bool]:
        """(seconds left after `step` or None, whether the evaluations and rounds are included)."""
        step_s = self.step_s()
        if step_s is None:
            return None, False
        left = step_s * (self.total_steps - step)
        eval_episodes = self.eval_episodes_left(step)
        round_episodes = sum(n for s, n in self.round_plan.items() if s > step)
        if (eval_episodes or round_episodes) and self.eval_s_per_episode is None:
            return left, False
        round_s = self.round_s_per_episode if self.round_s_per_episode is not None else self.eval_s_per_episode
        return left + eval_episodes * (self.eval_s_per_episode or 0.0) + round_episodes * (round_s or 0.0), True

    def eval_episodes_left(self, step: int) -> int:
        """The episodes of the evaluations still to run after `step` (and of `step`'s own, until it is done)."""
        return sum(n for s, n in self.eval_plan.items() if s >= step and s > self.evaluated_through)

    def postfix(self, step: int) -> str:
        """The bar's text after `step`: COMPILING_NOTE, or the time left and the current loss and lr."""
        if self.compiles and self.n_steps_seen == 0:
            return COMPILING_NOTE
        left, complete = self.remaining_s(step)
        eta = "time left ?" if left is None else f"~{format_duration(left)} left" + ("" if complete else " + evals")
        return ", ".join(part for part in (eta, self.last_log) if part)

    def announcement(self, step: int, device: torch.device) -> str:
        left, complete = self.remaining_s(step)
        total = f"~{format_duration(left or 0.0)}" + ("" if complete else " plus evaluations")
        eval_episodes = self.eval_episodes_left(step)
        rounds = [n for s, n in self.round_plan.items() if s > step]
        parts = [counted(self.total_steps - step, "step") + f" on {device}"]
        if complete and eval_episodes:
            guess = " (their time from a short probe rollout)" if self.eval_estimated else ""
            parts.append(counted(eval_episodes, "evaluation episode") + guess)
        if complete and rounds:
            parts.append(f"{counted(len(rounds), 'online round')} of {counted(sum(rounds), 'episode')}")
        line = f"estimated time left: {total} ({', '.join(parts)})"
        if left is not None and left > self.WARN_ABOVE_S:
            line += (
                f"; that is {left / 86400:.1f} days: fewer --steps, a smaller policy, a GPU, or (examples/train_pusht.py) "
                "--recipe=cpu finish sooner"
            )
        return line


PROBE_CHUNKS = 2  # a probe rollout's length, in the policy's action chunks


@torch.no_grad()
def timed_eval_episode_s(policy: Any, env_cfg: EnvConfig, batch_size: int, parallel: bool = False) -> float:
    """A first estimate of the seconds one evaluation episode takes: a short rollout of `batch_size` envs (PROBE_CHUNKS
    action chunks, after an untimed first step), scaled to a whole episode. The policy's mode and every RNG are left
    as they were, so an exact resume stays exact."""
    env = env_cfg.make(batch_size, parallel=parallel)
    episode_length = episode_step_limit(env) or 1
    steps = min(PROBE_CHUNKS * policy.config.n_action_steps, episode_length)
    was_training = policy.training
    try:
        with torch.random.fork_rng(devices=[]):
            rollout(policy, env, seeds=range(batch_size), max_steps=1)
            start = time.perf_counter()
            rollout(policy, env, seeds=range(batch_size), max_steps=steps)
            seconds = time.perf_counter() - start
    finally:
        env.close()
        policy.reset()
        policy.train(was_training)
    return seconds / steps * episode_length / batch_size


@contextlib.contextmanager
def warnings_above_the_bar(write) -> Iterator[None]:
    """Warnings and stderr log records go through `write` (tqdm.write: above the bar), not into the bar's line."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        write(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"))

    warnings.showwarning = show
    diverted = [(handler, _above_the_bar(handler, write)) for handler in _stderr_log_handlers()]
    for handler, divert in diverted:
        handler.addFilter(divert)
    try:
        yield
    finally:
        warnings.showwarning = shown
        for handler, divert in diverted:
            handler.removeFilter(divert)


@contextlib.contextmanager
def without_torchs_cuda_home_note() -> Iterator[None]:
    """Drops torch's `No CUDA runtime is found, using CUDA_HOME=...` (torch.compile on a CPU beside a CUDA toolkit)."""
    logger = logging.getLogger("torch.utils.cpp_extension")

    def not_the_note(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")

    logger.addFilter(not_the_note)
    try:
        yield
    finally:
        logger.removeFilter(not_the_note)


def _above_the_bar(handler: logging.Handler, write) -> Callable[[logging.LogRecord], bool]:
    """A handler's filter that writes its records through `write` instead (the handler itself writes nothing)."""

    def divert(record: logging.LogRecord) -> bool:
        write(handler.format(record))
        return False

    return divert


def _stderr_log_handlers() -> list[logging.Handler]:
    """The handlers of every logger that write to stderr now (torch's own are no StreamHandler)."""
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    handlers = [handler for logger in loggers for handler in getattr(logger, "handlers", [])]
    return list(dict.fromkeys(handler for handler in handlers if getattr(handler, "stream", None) is sys.stderr))


def format_duration(seconds: float) -> str:
    """A duration as people say it: 45 s, 3 min, 21 h 28 min, 18 d 12 h."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = int(round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60} min"
    hours = int(round(seconds / 3600))
    return f"{hours // 24} d {hours % 24} h"


def log_entry(accelerator: Accelerator, run: RunFolder, step: int, entry: dict[str, Any]) -> None:
    """To the trackers and metrics.jsonl."""
    accelerator.log({k if "/" in k else f"train/{k}": v for k, v in entry.items()}, step=step)
    if accelerator.is_main_process:
        append_metrics(run.metrics_file, step, entry)
