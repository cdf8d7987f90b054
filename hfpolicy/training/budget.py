"""`--budget.minutes=M`: a run that times its first steps, then chooses the number of steps that fits M minutes with
its evaluations, online rounds and a margin; the choice is kept in train_config.json (docs/training.md)."""

import dataclasses
import math
import time
from typing import Any

from accelerate.utils import broadcast_object_list

from hfpolicy.io.atomic import write_json_atomically
from hfpolicy.training.config import BudgetConfig, TrainConfig, train_config_to_dict
from hfpolicy.training.progress import TrainingClock, format_duration, planned_evaluations
from hfpolicy.training.setup import Training, make_lr_scheduler

SKIPPED_STEPS = 5  # the first steps of a run are not timed: compiling, allocating, warming caches
TIMED_STEPS = 20  # then this many are, and the choice follows
MIN_SHARE = 0.4  # the default floor: this share of --steps
MARGIN_S, MARGIN_SHARE = 30.0, 0.02  # set aside: 30 s and 2% of the budget (estimates, checkpoints, the process start)


def spread(freq: int, planned_steps: int, steps: int) -> int:
    """A frequency over `steps` that gives as many events as `freq` gave over `planned_steps` (0 stays 0: off)."""
    if freq <= 0:
        return freq
    count = planned_steps // freq
    return steps if count == 0 else max(1, math.ceil(steps / count))


def with_steps(cfg: TrainConfig, steps: int, planned_steps: int) -> TrainConfig:
    """`cfg` made for `steps` steps: --steps, and the evaluations and checkpoints spread over them."""
    return dataclasses.replace(
        cfg,
        steps=steps,
        save_freq=spread(cfg.save_freq, planned_steps, steps),
        eval=dataclasses.replace(cfg.eval, freq=spread(cfg.eval.freq, planned_steps, steps)),
    )


@dataclasses.dataclass
class Choice:
    """What the budget chose, and the line that says so (the main process's, given to every process)."""

    steps: int
    budget: BudgetConfig  # the config's budget with the choice recorded
    line: str


def choose_steps(
    cfg: TrainConfig,
    step: int,
    spent_s: float,
    step_s: float,
    eval_s_per_episode: float | None,
    round_s_per_episode: float | None,
) -> Choice:
    """The steps that fit --budget.minutes after `step`, `spent_s` seconds into the run, at the measured seconds per
    step and per evaluation and online episode (the evaluation's when None), at least the floor."""
    budget_s = 60 * (cfg.budget.minutes or 0.0)
    left_s = budget_s - spent_s - (MARGIN_S + MARGIN_SHARE * budget_s)
    per_episode = eval_s_per_episode or 0.0
    online = cfg.online
    round_s_per_step = (
        online.n_episodes * (round_s_per_episode or per_episode) / online.every if online.every > 0 else 0.0
    )

    def eval_s(steps: int) -> float:
        if cfg.eval.freq <= 0:
            return 0.0
        return per_episode * sum(planned_evaluations(with_steps(cfg, steps, cfg.steps), step).values())

    steps = cfg.steps
    for _ in range(2):  # the evaluations depend on the steps only through rounding: twice settles it
        steps = max(step, step + int((left_s - eval_s(steps)) / (step_s + round_s_per_step)))
    floor = cfg.budget.min_steps if cfg.budget.min_steps is not None else math.ceil(MIN_SHARE * cfg.steps)
    measured = (
        f"{step_s:.3g} s per step (steps {step - TIMED_STEPS + 1}-{step}), {format_duration(spent_s)} spent so far, "
        f"evaluations ~{format_duration(eval_s(max(steps, floor)))}"
    )
    if steps < floor:
        line = (
            f"budget: only {steps} steps fit --budget.minutes={cfg.budget.minutes:g} at the measured {measured}: this "
            f"machine is busy or slow, so the run trains the floor of {floor} steps (--budget.min_steps) and will take "
            f"longer; stop other jobs on it, or lower --budget.min_steps (or --steps) to keep to the budget"
        )
        steps = max(floor, step)
    else:
        line = (
            f"budget: {steps} steps fit --budget.minutes={cfg.budget.minutes:g} (--steps={cfg.steps} planned) at the "
            f"measured {measured}; the lr schedule, evaluations and checkpoints now span {steps} steps "
            "(kept in train_config.json: a resume or --config_path reuses them)"
        )
    recorded = dataclasses.replace(
        cfg.budget,
        chosen_steps=steps,
        planned_steps=cfg.steps,
        chosen_at_step=step,
        step_s=round(step_s, 6),
        eval_s_per_episode=None if eval_s_per_episode is None else round(eval_s_per_episode, 6),
        spent_s=round(spent_s, 3),
    )
    return Choice(steps, recorded, line)


class StepBudget:
    """A run's --budget.minutes: the step at which it chooses (`at`; None: no choice to make) and its timed steps."""

    def __init__(self, cfg: TrainConfig, start_step: int, started_at: float):
        self.started_at = started_at  # time.monotonic()
        self.first_timed = start_step + SKIPPED_STEPS + 1
        decides = cfg.budget.minutes is not None and cfg.budget.chosen_steps is None
        self.at = start_step + SKIPPED_STEPS + TIMED_STEPS if decides else None
        self.too_short = self.at is not None and self.at > cfg.steps  # the run ends before its speed is known
        if self.too_short:
            self.at = None
        self.step_times: list[float] = []

    def add_step(self, step: int, seconds: float) -> None:
        if self.at is not None and self.first_timed <= step <= self.at:
            self.step_times.append(seconds)

    def choose(self, t: Training, step: int, clock: TrainingClock) -> str:
        """Chooses the steps (the main process, for all), applies the choice to `t` and `clock`, writes
        train_config.json; the line that says so."""
        cfg, accelerator = t.cfg, t.accelerator
        choice: list[Any] = [None]
        if accelerator.is_main_process:
            step_s = sum(self.step_times) / len(self.step_times)
            spent_s = time.monotonic() - self.started_at
            choice = [choose_steps(cfg, step, spent_s, step_s, clock.eval_s_per_episode, clock.round_s_per_episode)]
        chosen: Choice = broadcast_object_list(choice)[0]
        cfg = dataclasses.replace(with_steps(cfg, chosen.steps, cfg.steps), budget=chosen.budget)
        t.cfg = cfg
        t.lr_scheduler = make_lr_scheduler(cfg, t.lr_scheduler.optimizer, last_step=step)
        t.eval_plan = planned_evaluations(cfg, step) if t.env_cfg is not None else {}
        clock.replan(cfg.steps, t.eval_plan, t.online.planned_rounds(step, cfg.steps) if t.online else None)
        self.at = None
        if accelerator.is_main_process:
            write_json_atomically(t.run.config_file, train_config_to_dict(cfg))
        return chosen.line
