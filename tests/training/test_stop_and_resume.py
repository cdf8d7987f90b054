"""Starting and stopping a run (issues 16 and 18): flags a resume may change (recorded) and may not (refused), Ctrl-C
and SIGTERM keeping the current step, SIGTERM to `accelerate launch` stopping its trainer, the final checkpoint before
the final evaluation, the wall-clock checkpoint timer, and failed starts that leave nothing behind.

The runs are the tiny state-only Diffusion Policy of test_train_faults.py, for a few steps (~1 s in this process); the
signal tests run real subprocesses (`hfpolicy train`, `accelerate launch examples/train_pusht.py`).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch
from training.test_train_faults import TINY as FAULT_TEST_FLAGS

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.io.run_lock import LOCK_FILE, RunLock, RunLockedError
from hfpolicy.io.tensor_tree import save_tree
from hfpolicy.policies import Policy
from hfpolicy.policies.module import WeightsOrigin
from hfpolicy.runs.run_folder import RESUME_HISTORY_FILE
from hfpolicy.training import main
from hfpolicy.training.checkpoints import list_checkpoints

ROOT = Path(__file__).resolve().parents[2]
TINY = [*FAULT_TEST_FLAGS, "--num_threads=1", "--compile=false"]  # the fault tests' tiny run, one thread


def flags(dataset, out, *more: str) -> list[str]:
    return [f"--dataset.root={dataset}", f"--output_dir={out}", *TINY, *more]


def run_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}


def logged_steps(out: Path, running: bool = False) -> list[int]:
    """The steps in metrics.jsonl (of a run still `running`: the last line may be half-written)."""
    if not (out / METRICS_FILE).is_file():
        return []
    lines = (out / METRICS_FILE).read_text().splitlines()
    return [e["step"] for e in map(json.loads, lines[:-1] if running else lines) if "loss" in e]


def wait_for_steps(process: subprocess.Popen, out: Path, n: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while len(logged_steps(out, running=True)) < n:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run did not reach its first steps in time"
        time.sleep(0.05)


# --- resume with changed flags ------------------------------------------------------------------------------------
def test_a_resume_refuses_flags_that_would_change_the_run_and_records_those_that_may(
    pusht_state_dataset, tmp_path, capsys
):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--save_freq=2")) == 0
    saved = (out / TRAIN_CONFIG_FILE).read_text()
    capsys.readouterr()

    refused = ["--batch_size=4", "--seed=3", "--policy.optimizer_lr=0.5", "--dataset.episodes=[0,1]"]
    assert main([f"--output_dir={out}", "--resume=true", "--steps=4", *refused]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hfpolicy train: error: --resume=true")
    for named in (
        "--batch_size=4 (the run has 8)",
        "--seed=3 (the run has 1000)",
        "--policy.optimizer_lr=0.5 (the run",
    ):
        assert named in err
    assert "--dataset.episodes=[0,1] (the run has null)" in err and "--steps" not in err  # steps may change
    assert "another --output_dir" in err
    assert (out / TRAIN_CONFIG_FILE).read_text() == saved and [c.name for c in list_checkpoints(out)] == ["step_000002"]

    assert main([f"--output_dir={out}", "--resume=true", "--steps=4", "--log_freq=2"]) == 0  # these may change
    assert "resuming at step 2 with --steps=4 (was 2), --log_freq=2 (was 1)" in capsys.readouterr().out
    history = json.loads((out / RESUME_HISTORY_FILE).read_text())
    assert len(history) == 1 and history[0]["step"] == 2
    assert history[0]["changed"] == {"steps": {"was": 2, "now": 4}, "log_freq": {"was": 1, "now": 2}}
    assert history[0]["lr"]["was"] == 0.0 and history[0]["lr"]["now"] > 0  # the cosine schedule spans 4 steps now
    assert json.loads((out / TRAIN_CONFIG_FILE).read_text())["steps"] == 4

    assert main([f"--output_dir={out}", "--resume=true", "--steps=5"]) == 0  # a resume without changes is recorded
    history = json.loads((out / RESUME_HISTORY_FILE).read_text())
    assert [h["step"] for h in history] == [2, 4] and history[1]["changed"] == {"steps": {"was": 4, "now": 5}}


# --- failed starts ------------------------------------------------------------------------------------------------
def test_a_failed_start_leaves_nothing_behind(pusht_state_dataset, tmp_path, capsys):
    new = tmp_path / "new" / "run"
    assert main(flags(pusht_state_dataset, new, "--steps=2", "--dataset.input_features=[observation.velocity]")) == 2
    assert not new.exists()  # before: a folder holding only .hfpolicy.lock(.holder)
    assert not new.parent.exists()  # nor an empty parent it made (outputs/ of the default outputs/train/<date>)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(flags(pusht_state_dataset, empty, "--steps=2", "--batch_size=100000")) == 2
    assert list(empty.iterdir()) == []  # the user's folder stays, as it was
    assert main(flags(pusht_state_dataset, new, "--steps=1")) == 0 and (new / LOCK_FILE).exists()  # a run keeps it


# --- checkpoints: before the final evaluation, and by wall time ----------------------------------------------------
def test_the_final_checkpoint_comes_before_the_final_evaluation(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    evaluation = ["--eval.freq=2", "--eval.n_episodes=1", "--eval.batch_size=1", "--eval.n_videos=0"]
    assert main(flags(pusht_state_dataset, out, "--steps=2", *evaluation, "--env.episode_length=8")) == 0
    checkpoint = out / "checkpoints" / "step_000002" / "training_state"
    assert checkpoint.stat().st_mtime_ns < (out / "eval" / "step_000002" / EVAL_INFO_FILE).stat().st_mtime_ns
    # The evaluation says what it evaluated: this run's EMA weights of step 2, kept in that step's checkpoint.
    provenance = json.loads((out / "eval" / "step_000002" / EVAL_INFO_FILE).read_text())["provenance"]
    policy_dir = checkpoint.parent / "pretrained_model"
    assert provenance["policy"] == str(out) and provenance["folder"] == str(policy_dir.resolve())
    assert (provenance["checkpoint_step"], provenance["ema_weights"], provenance["policy_type"]) == (
        2,
        True,
        "diffusion",
    )
    assert Policy.from_pretrained(policy_dir).weights_origin == WeightsOrigin(training_step=2, ema=True)


def test_a_resume_is_exact_across_an_evaluation_that_came_after_its_checkpoint(pusht_state_dataset, tmp_path):
    """The checkpoint of step 2 now comes before step 2's evaluation: the evaluation must not touch what the training
    continues from (RNG states, weights), or the resumed run would differ from the uninterrupted one."""
    run = ["--eval.freq=2", "--eval.n_episodes=2", "--eval.batch_size=2", "--eval.n_videos=0", "--env.episode_length=8"]
    run += ["--save_freq=2", "--policy.scheduler_name=constant"]  # the LR of a step does not depend on --steps
    assert main(flags(pusht_state_dataset, tmp_path / "reference", "--steps=4", *run)) == 0
    assert main(flags(pusht_state_dataset, tmp_path / "resumed", "--steps=2", *run)) == 0
    assert main([f"--output_dir={tmp_path / 'resumed'}", "--resume=true", "--steps=4"]) == 0
    losses = [
        [e["loss"] for e in map(json.loads, (tmp_path / name / METRICS_FILE).open()) if "loss" in e]
        for name in ("reference", "resumed")
    ]
    assert len(losses[0]) == 4 and losses[0] == losses[1]


def test_a_checkpoint_of_an_older_hfpolicy_resumes_exactly_and_the_first_save_says_its_size(
    pusht_state_dataset, tmp_path, capsys
):
    """Checkpoints now keep the EMA weights once (pretrained_model/, referenced by training_state/ema.json); those of
    older versions (a copy in training_state/ema.safetensors) resume as exactly as before."""
    run = ["--save_freq=2", "--policy.scheduler_name=constant"]
    assert main(flags(pusht_state_dataset, tmp_path / "reference", "--steps=4", *run)) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("checkpoint: ")]
    first = tmp_path / "reference" / "checkpoints" / "step_000002"
    size = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    assert len(lines) == 1 and lines[0].endswith("for the 3 kept (--keep_last_checkpoints)"), lines
    said = float(lines[0].split()[1]) * {"kB": 1e3, "MB": 1e6}[lines[0].split()[2]]
    assert said == pytest.approx(size, rel=0.01)
    assert not (first / "training_state" / "ema.safetensors").exists()

    assert main(flags(pusht_state_dataset, tmp_path / "resumed", "--steps=2", *run)) == 0
    state = tmp_path / "resumed" / "checkpoints" / "step_000002" / "training_state"
    counters = json.loads((state / "ema.json").read_text())
    shadow = safetensors.torch.load_file(state.parent / "pretrained_model" / "model.safetensors")
    (state / "ema.json").unlink()
    ema = {key: counters[key] for key in ("num_updates", "power", "max_decay")}
    save_tree({**ema, "shadow": shadow}, state, "ema")  # as hfpolicy wrote a checkpoint's EMA before
    assert main([f"--output_dir={tmp_path / 'resumed'}", "--resume=true", "--steps=4"]) == 0
    losses = [
        [e["loss"] for e in map(json.loads, (tmp_path / name / METRICS_FILE).open()) if "loss" in e]
        for name in ("reference", "resumed")
    ]
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    last = [tmp_path / name / "checkpoints" / "step_000004" / "pretrained_model" for name in ("reference", "resumed")]
    weights = [safetensors.torch.load_file(folder / "model.safetensors") for folder in last]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # the EMA continued exactly


def test_save_every_minutes_checkpoints_by_wall_time(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    timer = ["--save_freq=0", "--save_every_minutes=0.000001", "--keep_last_checkpoints=0"]  # due after every step
    assert main(flags(pusht_state_dataset, out, "--steps=3", *timer)) == 0
    assert [c.name for c in list_checkpoints(out)] == ["step_000001", "step_000002", "step_000003"]
    assert main(flags(pusht_state_dataset, tmp_path / "off", "--steps=3", "--save_freq=0")) == 0  # default: 10 min
    assert [c.name for c in list_checkpoints(tmp_path / "off")] == ["step_000003"]


# --- Ctrl-C and SIGTERM ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_saves_the_current_step_says_how_to_resume_and_exits_130(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "hfpolicy.cli", "train", *flags(pusht_state_dataset, out)]
    process = subprocess.Popen(
        [*command, "--steps=100000", "--save_freq=0"],
        env=run_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_steps(process, out, 3)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err[-3000:]
    stopped_at = [int(c.name.removeprefix("step_")) for c in list_checkpoints(out)]
    assert len(stopped_at) == 1 and stopped_at[0] >= 3
    assert logged_steps(out) == list(range(1, stopped_at[0] + 1))  # the checkpoint is of the step it stopped after
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith(f"stopped by Ctrl-C (SIGINT): after step {stopped_at[0]}, saved the checkpoint")
    resume = last_line.split("continue with `")[1].rstrip("`")
    assert resume == f"hfpolicy train --output_dir={out} --resume=true"
    with RunLock(out):  # the lock was released
        pass

    assert main([*resume.split()[2:], f"--steps={stopped_at[0] + 1}"]) == 0  # the command it gave, one step more
    assert f"resuming at step {stopped_at[0]}" in capsys.readouterr().out
    assert logged_steps(out) == list(range(1, stopped_at[0] + 2))


@pytest.mark.slow
def test_ctrl_c_during_an_evaluation_keeps_the_step_it_evaluated(pusht_state_dataset, tmp_path):
    """Issue 18: a Ctrl-C during an evaluation lost everything since the last checkpoint. Now the evaluation ends at
    once, its partial folder goes, and the step it evaluated is saved (here no checkpoint was due at it)."""
    out = tmp_path / "run"
    long_eval = ["--eval.freq=2", "--eval.n_episodes=200", "--eval.batch_size=10", "--env.episode_length=300"]
    command = [sys.executable, "-m", "hfpolicy.cli", "train", *flags(pusht_state_dataset, out, "--steps=4")]
    process = subprocess.Popen(
        [*command, *long_eval, "--save_freq=0", "--save_every_minutes=0"],
        env=run_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_steps(process, out, 1)  # step 2 is logged (the line after it is the evaluation's)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert [c.name for c in list_checkpoints(out)] == ["step_000002"] and not (out / "eval" / "step_000002").exists()
    assert err.strip().splitlines()[-1].startswith("stopped by Ctrl-C (SIGINT): after step 2, saved the checkpoint")


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_sigterm_to_accelerate_launch_stops_its_trainer_with_a_checkpoint(pusht_state_dataset, tmp_path, num_workers):
    """A scheduler's SIGTERM to `accelerate launch` ends the trainer at a step boundary with a checkpoint, whichever
    way the launcher treats it: accelerate <= 1.15 dies of it without forwarding it (the trainer's parent-death signal
    stops it), >= 1.16 terminates its child's process tree, DataLoader workers included, and exits 143 (the workers
    ignore SIGTERM, so the trainer finishes its step with them; the launcher kills what still runs after 5 s)."""
    out = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", str(ROOT / "examples" / "train_pusht.py")]
    more = ("--steps=100000", "--save_freq=0", f"--num_workers={num_workers}")
    process = subprocess.Popen(
        [*launch, *flags(pusht_state_dataset, out, *more)], env=run_env(), stderr=subprocess.PIPE, text=True
    )
    wait_for_steps(process, out, 3)
    process.send_signal(signal.SIGTERM)  # to the launcher only, as a scheduler's stop
    _, err = process.communicate(timeout=120)  # returns once the trainer, which shares the pipe, has ended too
    assert process.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), err[-3000:]  # <= 1.15 / >= 1.16
    deadline = time.monotonic() + 60
    while True:  # the trainer released the run folder: it stopped (before: it trained on, holding the lock)
        try:
            with RunLock(out):
                break
        except RunLockedError:
            assert time.monotonic() < deadline, "the trainer still holds the run folder"
            time.sleep(0.2)
    assert "stopped by SIGTERM: after step" in err and "Traceback" not in err.split("stopped by SIGTERM")[1], err[
        -3000:
    ]
    assert len(list_checkpoints(out)) == 1


# --- the example's launch path -------------------------------------------------------------------------------------
def example(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "examples" / "train_pusht.py"), *args]
    return subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=timeout)


def test_the_launch_path_checks_flags_before_launching_anything(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    result = example("--num_processes=2", *flags(pusht_state_dataset, out, "--stepz=3"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("train_pusht.py: error: unrecognized")
    assert "accelerate" not in result.stdout + result.stderr and not out.exists()  # nothing was launched


@pytest.mark.slow
def test_a_launched_run_that_fails_to_start_ends_with_its_own_line_and_status(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    result = example("--num_processes=2", *flags(pusht_state_dataset, out, "--steps=2", "--batch_size=100000"))
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stderr[-3000:]  # the training's status (bad input), not accelerate's 1
    assert last.startswith("train_pusht.py: error: dataset") and "batch_size=100000" in last  # after torchrun's report
    assert not out.exists()  # the failed start left nothing (before: a folder holding only .hfpolicy.lock)


@pytest.mark.slow
def test_kill_9_of_the_launching_script_stops_its_launcher_and_trainers(pusht_state_dataset, tmp_path):
    """`examples/train_pusht.py --num_processes=2` killed with SIGKILL: its `accelerate launch` gets SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and its trainers stop with a checkpoint (before: they trained on under init, holding
    the run folder)."""
    out = tmp_path / "run"
    command = [sys.executable, str(ROOT / "examples" / "train_pusht.py"), "--num_processes=2"]
    command += flags(pusht_state_dataset, out, "--steps=100000", "--save_freq=0")
    process = subprocess.Popen(command, env=run_env(), stderr=subprocess.PIPE, text=True)
    wait_for_steps(process, out, 3)
    process.kill()
    process.wait(30)
    deadline = time.monotonic() + 120
    while True:  # the trainers released the run folder
        try:
            with RunLock(out):
                break
        except RunLockedError:
            assert time.monotonic() < deadline, "the launcher's trainers still hold the run folder"
            time.sleep(0.2)
    assert len(list_checkpoints(out)) == 1  # they stopped as on SIGTERM: with a checkpoint of their last step
    process.stderr.close()


def test_a_stop_swallowed_where_python_cannot_raise_it_is_delivered_again():
    """A Ctrl-C that lands in a cffi callback (pymunk drawing a PushT frame) or a finalizer raises Interrupted where
    Python only prints it ("Exception ignored ...") and goes on: the evaluation then ran to its end. It is delivered
    again instead, and ends the interruptible block at once, without a printed traceback."""
    from hfpolicy.training.stopping import Interrupted, StopControl

    class SwallowsIt:  # an exception raised in __del__ is unraisable, as one in a cffi callback is
        def __del__(self):
            raise Interrupted(signal.SIGINT)

    stops = StopControl(0)
    with stops.installed(), pytest.raises(Interrupted), stops.interruptible():
        stops.signum = signal.SIGINT  # what the handler records before it raises
        SwallowsIt()
        time.sleep(1.0)  # never reached to its end: the stop comes at the next bytecode
        pytest.fail("the swallowed stop was not delivered again")
