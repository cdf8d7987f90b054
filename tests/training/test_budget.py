"""`--budget.minutes` (hfpolicy.training.budget): the steps that fit the budget, chosen once from the measured step
time, spread over the evaluations, checkpoints and lr schedule; recorded in train_config.json so that a resume and
`--config_path` train the same schedule and the same losses without measuring again; a floor for a machine measured
too slow, said in one line; bad values refused in one line.

The runs are the tiny state-only Diffusion Policy of test_train_faults.py (~0.05 s a step here): the choice they make
depends on the machine's speed, so they are given a budget too small for any machine and take the floor, whose
number of steps is known; the choice itself is tested on given measurements (`choose_steps`)."""

import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from training.test_stop_and_resume import TINY

from hfpolicy.constants import METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.eval.config import TrainEvalConfig
from hfpolicy.training import main
from hfpolicy.training.budget import MARGIN_S, MARGIN_SHARE, SKIPPED_STEPS, TIMED_STEPS, choose_steps, with_steps
from hfpolicy.training.checkpoints import list_checkpoints
from hfpolicy.training.config import BudgetConfig, TrainConfig
from hfpolicy.training.progress import planned_evaluations

ROOT = Path(__file__).resolve().parents[2]
CHOSEN_AT = SKIPPED_STEPS + TIMED_STEPS


def cpu_like(minutes: float = 57) -> TrainConfig:
    """The cpu recipe's schedule: 5000 steps, a 50-episode evaluation every 1000, 500 episodes at the end."""
    evaluation = TrainEvalConfig(freq=1000, n_episodes=50, final_n_episodes=500)
    return TrainConfig(steps=5000, save_freq=1000, eval=evaluation, budget=BudgetConfig(minutes=minutes))


def planned_s(cfg: TrainConfig, steps: int, step_s: float, eval_s: float) -> float:
    """The seconds the steps after CHOSEN_AT and their evaluations take, at the measured speeds."""
    episodes = sum(planned_evaluations(with_steps(cfg, steps, cfg.steps), CHOSEN_AT).values())
    return (steps - CHOSEN_AT) * step_s + episodes * eval_s


@pytest.mark.parametrize("step_s", [0.2, 0.4, 0.6])
def test_the_chosen_steps_and_their_evaluations_fill_the_budget(step_s):
    cfg, spent_s, eval_s = cpu_like(), 300.0, 0.8
    choice = choose_steps(cfg, CHOSEN_AT, spent_s, step_s, eval_s, None)
    room = 57 * 60 * (1 - MARGIN_SHARE) - MARGIN_S - spent_s
    assert planned_s(cfg, choice.steps, step_s, eval_s) <= room < planned_s(cfg, choice.steps + 2, step_s, eval_s)
    assert choice.budget.chosen_steps == choice.steps and choice.budget.planned_steps == 5000
    assert (choice.budget.chosen_at_step, choice.budget.step_s, choice.budget.spent_s) == (CHOSEN_AT, step_s, 300.0)
    assert choice.line.startswith(f"budget: {choice.steps} steps fit --budget.minutes=57 (--steps=5000 planned)")
    # as many evaluations and checkpoints as planned, the last at the chosen end
    chosen = with_steps(cfg, choice.steps, cfg.steps)
    plan = planned_evaluations(chosen, 0)
    assert sorted(plan.values()) == [50, 50, 50, 50, 500] and max(plan) == choice.steps
    assert len(range(chosen.save_freq, choice.steps + 1, chosen.save_freq)) in (4, 5)  # + the final one


def test_online_rounds_count_against_the_budget():
    cfg = cpu_like()
    offline = choose_steps(cfg, CHOSEN_AT, 300.0, 0.4, 0.8, None)
    cfg.online = dataclasses.replace(cfg.online, every=400, n_episodes=50)  # 50 episodes per 400 steps
    online = choose_steps(cfg, CHOSEN_AT, 300.0, 0.4, 0.8, round_s_per_episode=2.0)
    assert online.steps < offline.steps  # 0.25 s of rounds per step on top of the 0.4 s step
    assert abs((online.steps - CHOSEN_AT) * (0.4 + 0.25) - (offline.steps - CHOSEN_AT) * 0.4) < 2


def test_a_machine_too_slow_for_the_floor_trains_the_floor_and_says_so_in_one_line():
    choice = choose_steps(cpu_like(), CHOSEN_AT, 300.0, step_s=6.0, eval_s_per_episode=0.8, round_s_per_episode=None)
    assert choice.steps == 2000  # 40% of --steps=5000; ~440 steps would have fit
    assert "\n" not in choice.line and choice.line.startswith("budget: only 4")
    assert "busy or slow" in choice.line and "the floor of 2000 steps" in choice.line
    assert "--budget.min_steps" in choice.line
    own_floor = dataclasses.replace(cpu_like(), budget=BudgetConfig(minutes=57, min_steps=300))
    assert choose_steps(own_floor, CHOSEN_AT, 300.0, 6.0, 0.8, None).steps == 435  # above that floor: as measured
    assert choose_steps(own_floor, CHOSEN_AT, 300.0, 20.0, 0.8, None).steps == 300


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "--budget.minutes must be a number of minutes > 0, got 0"),
        ("-5", "--budget.minutes must be a number of minutes > 0, got -5"),
        ("nan", "--budget.minutes must be a number of minutes > 0, got nan"),
        ("abc", "--budget.minutes: Couldn't parse 'abc' into a float, or null;"),
    ],
)
def test_bad_budgets_are_one_line_before_anything_starts(value, says, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([f"--dataset.root={tmp_path}", f"--output_dir={out}", *TINY, f"--budget.minutes={value}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hfpolicy train: error: ") and says in err, err
    assert not out.exists()


def test_the_cpu_recipe_is_budgeted_unless_the_user_says_how_many_steps():
    spec = importlib.util.spec_from_file_location("train_pusht", ROOT / "examples" / "train_pusht.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert "--budget.minutes=57" in example.recipe_flags("cpu", [])
    assert not any(flag.startswith("--budget") for flag in example.recipe_flags("cpu", ["--steps=800"]))
    assert not any(flag.startswith("--budget") for flag in example.recipe_flags("cpu", ["--policy.type=act"]))


# --- a budgeted run, its --config_path rerun and its resumes -------------------------------------------------------
BUDGETED = [
    "--steps=48",
    "--budget.minutes=0.001",  # 0.06 s: no machine fits more than the floor
    "--budget.min_steps=40",
    "--save_freq=16",
    "--keep_last_checkpoints=0",
    "--policy.scheduler_name=cosine",
    "--eval.freq=16",
    "--eval.n_episodes=1",
    "--eval.batch_size=1",
    "--eval.n_videos=0",
    "--env.episode_length=8",
]


def losses(run: Path) -> list[float]:
    return [e["loss"] for e in map(json.loads, (run / METRICS_FILE).open()) if "loss" in e]


def logged(run: Path, key: str) -> dict[int, float]:
    return {e["step"]: e[key] for e in map(json.loads, (run / METRICS_FILE).open()) if key in e}


def test_a_budgeted_run_records_its_choice_and_reruns_and_resumes_reproduce_it(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY, *BUDGETED]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("budget:")]
    assert len(said) == 1 and "the floor of 40 steps" in said[0], said

    saved = json.loads((out / TRAIN_CONFIG_FILE).read_text())
    assert saved["steps"] == 40 and saved["budget"]["chosen_steps"] == 40
    assert saved["budget"]["planned_steps"] == 48 and saved["budget"]["chosen_at_step"] == CHOSEN_AT
    assert saved["budget"]["step_s"] > 0 and saved["budget"]["spent_s"] > 0
    assert (saved["eval"]["freq"], saved["save_freq"]) == (14, 14)  # 3 of each over 48 steps, so over 40: 14, 28, 40
    assert [c.name for c in list_checkpoints(out)] == ["step_000016", "step_000028", "step_000040"]  # 16: before it
    assert sorted(int(p.name.removeprefix("step_")) for p in (out / "eval").iterdir()) == [16, 28, 40]
    assert len(losses(out)) == 40
    lr = logged(out, "lr")
    assert lr[40] == 0.0 and lr[CHOSEN_AT + 1] < lr[CHOSEN_AT]  # the cosine schedule now ends at step 40

    rerun = tmp_path / "rerun"  # the recorded choice, run again from its train_config.json: nothing measured
    assert main([f"--config_path={out / TRAIN_CONFIG_FILE}", f"--output_dir={rerun}"]) == 0
    assert not any(line.startswith("budget:") for line in capsys.readouterr().out.splitlines())
    assert json.loads((rerun / TRAIN_CONFIG_FILE).read_text())["budget"] == saved["budget"]
    assert losses(rerun) == losses(out) and logged(rerun, "lr") == lr

    for resumed_from in (16, 28):  # a checkpoint before the choice, and one after it
        resumed = tmp_path / f"resumed_{resumed_from}"
        shutil.copytree(out, resumed, symlinks=True)
        for checkpoint in list_checkpoints(resumed):
            if int(checkpoint.name.removeprefix("step_")) > resumed_from:
                shutil.rmtree(checkpoint)
        assert main([f"--output_dir={resumed}", "--resume=true"]) == 0
        printed = capsys.readouterr().out
        assert f"resuming at step {resumed_from}" in printed and "budget:" not in printed
        assert losses(resumed) == losses(out) and logged(resumed, "lr") == lr
