"""Signs of life while training (hfpolicy.training.progress): the first estimate counts the evaluations, the bar
shows the current loss and lr, a compiled run's bar says "compiling" until its first step is done (the clock alone,
then a real tiny compiled run), and warnings do not land inside the bar's line."""

import io
import logging
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
from policies.toy_policy import make_toy_policy
from tqdm import tqdm
from training.test_train_faults import flags

from hfpolicy.envs import PushTEnvConfig
from hfpolicy.ticker import ticking
from hfpolicy.training import main
from hfpolicy.training.progress import (
    COMPILING_NOTE,
    TrainingClock,
    format_duration,
    timed_eval_episode_s,
    warnings_above_the_bar,
    without_torchs_cuda_home_note,
)


def test_the_first_estimate_counts_the_evaluation_episodes():
    policy = make_toy_policy()
    rng_before = torch.get_rng_state()
    env_cfg = PushTEnvConfig(obs_type="pixels_agent_pos", episode_length=300)
    per_episode = timed_eval_episode_s(policy, env_cfg, batch_size=2)
    assert torch.equal(torch.get_rng_state(), rng_before) and policy.training  # RNG and mode as they were
    assert 0 < per_episode < 300  # a real rollout's steps, scaled to 300 steps per env
    clock = TrainingClock(total_steps=110, eval_plan={50: 10, 110: 100})
    clock.estimate_eval(per_episode)
    for _ in range(TrainingClock.SKIPPED_STEPS + 10):
        clock.add_step(2.0)
    left, complete = clock.remaining_s(10)
    assert complete and left == 200.0 + 110 * per_episode
    line = clock.announcement(10, torch.device("cpu"))
    assert "110 evaluation episodes" in line and "plus evaluations" not in line
    clock.add_eval(50, 10, 30.0)  # a timed evaluation replaces the guess
    assert clock.remaining_s(50) == (120.0 + 300.0, True) and not clock.eval_estimated


def test_the_time_left_counts_the_online_rounds_and_leaves_out_the_first_steps():
    clock = TrainingClock(total_steps=100, eval_plan={20: 10, 100: 10}, round_plan={40: 5, 80: 5})
    for seconds in (300.0, 30.0, 9.0):  # compiling, then warming up: left out
        clock.add_step(seconds)
    assert clock.remaining_s(3) == (None, False)
    clock.add_step(1.0)
    assert clock.remaining_s(4) == (96.0, False)  # the evaluations and rounds cannot be estimated yet
    assert clock.postfix(4) == "~2 min left + evals"
    clock.estimate_eval(1.0)  # a guess: 1 s per episode, for the evaluations and the rounds
    assert clock.remaining_s(20) == (80.0 + 20 * 1.0 + 10 * 1.0, True)  # step 20's evaluation runs after step 20
    clock.add_eval(20, 10, 20.0)  # 2 s per episode, measured
    assert clock.remaining_s(20) == (80.0 + 10 * 2.0 + 10 * 2.0, True)  # done: the final one and the rounds left
    clock.add_round(5, 50.0)  # 10 s per online episode
    assert clock.remaining_s(50) == (50.0 + 10 * 2.0 + 5 * 10.0, True)  # the round at step 80 is still to come
    assert "1 online round of 5 episodes" in clock.announcement(50, torch.device("cpu"))


def test_durations_read_as_people_say_them():
    assert format_duration(0) == "0 s" and format_duration(44.6) == "45 s"
    assert format_duration(60) == "1 min" and format_duration(3 * 60 + 20) == "3 min"
    assert format_duration(59 * 60 + 50) == "1 h 0 min"  # 60 minutes, rounded
    assert format_duration(21 * 3600 + 28 * 60) == "21 h 28 min"
    assert format_duration(18.5 * 86400) == "18 d 12 h"
    clock = TrainingClock(total_steps=5000, eval_plan={})
    for _ in range(TrainingClock.SKIPPED_STEPS + 1):
        clock.add_step(15.46)
    assert clock.postfix(1).startswith("~21 h 28 min left")  # not a clock time (21:28:00 read as one)


def test_the_bar_shows_the_current_loss_and_lr():
    clock = TrainingClock(total_steps=10, eval_plan={})
    clock.add_step(1.0)
    clock.note_current(torch.tensor(0.25), 1e-3)
    assert "loss=0.2500, lr=1.00e-03" in clock.postfix(1)
    clock._current_read_at = float("-inf")  # as when CURRENT_EVERY_S has passed
    clock.note_current(torch.tensor(0.125), 5e-4)
    assert "loss=0.1250, lr=5.00e-04" in clock.postfix(2)


def test_a_compiled_run_says_compiling_until_its_first_step_is_done():
    clock = TrainingClock(total_steps=100, eval_plan={}, compiles=True)
    assert clock.postfix(0) == COMPILING_NOTE  # the bar at its start, while the first step compiles
    clock.add_step(240.0)  # the first step: four minutes of compiling
    clock.note_current(torch.tensor(0.5), 1e-3)
    assert clock.postfix(1) == "time left ?, loss=0.5000, lr=1.00e-03"  # done compiling; no estimate from that step
    for _ in range(9):
        clock.add_step(4.0)
    assert clock.postfix(10).startswith("~6 min left, ")  # 90 steps x 4 s: the compiling step is left out
    resumed = TrainingClock(total_steps=100, eval_plan={}, compiles=True)  # a resumed process compiles again
    assert resumed.postfix(50) == COMPILING_NOTE
    assert TrainingClock(total_steps=100, eval_plan={}).postfix(0) == "time left ?"  # not compiled: no note


def test_a_ticking_bar_moves_while_its_owner_waits():
    """The compile ticker: a bar whose count does not move is redrawn (its elapsed time moving) until the wait ends;
    waited for without any assumption on how fast the machine is."""
    out = io.StringIO()
    bar = tqdm(total=3, file=out, desc="train", bar_format="{n_fmt}/{total_fmt} [{elapsed}{postfix}]")
    bar.set_postfix_str(COMPILING_NOTE)
    drawn_before = out.getvalue().count("\r")
    deadline = time.monotonic() + 60
    with ticking(bar, interval=0.01):  # the "compiling" wait: nothing updates the bar
        while "00:01" not in out.getvalue():  # the elapsed time reached a second, drawn by the ticker alone
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
    drawn = out.getvalue().count("\r")
    time.sleep(0.05)
    assert out.getvalue().count("\r") == drawn  # the ticker stopped with the block
    bar.close()
    states = out.getvalue().replace("\r", "\n").splitlines()
    assert drawn > drawn_before and any(line.startswith("0/3 [00:01") and COMPILING_NOTE in line for line in states)
    quiet = tqdm(total=3, disable=True)
    with ticking(quiet, interval=0.01):  # a disabled bar gets no ticker thread
        assert not any(thread.name == "hfpolicy-ticker" for thread in threading.enumerate())


def bar_lines(err: str) -> list[str]:
    """The states of the "train" bar as written to stderr (tqdm redraws its line after a carriage return)."""
    return [line.rstrip() for line in err.replace("\r", "\n").splitlines() if line.startswith("train:")]


@pytest.mark.slow
def test_a_compiled_run_shows_compiling_on_its_bar_until_the_first_step(pusht_state_dataset, tmp_path, capsys):
    """A real --compile=true run of the tiny state Diffusion Policy (torch.compile of its training forward), its U-Net
    cut to one level: inductor's C++ kernels, each a compiler run of a few seconds on a loaded 2-core machine, are most
    of the test's time (two levels: 57 kernels, 109 s with a cold cache at load 2.4; one level: 33 kernels, 76 s)."""
    more = ["--compile=true", "--progress=true", "--steps=3", "--num_threads=1", "--policy.down_dims=[16]"]
    assert main(flags(pusht_state_dataset, tmp_path / "run", *more)) == 0
    lines = bar_lines(capsys.readouterr().err)
    compiling = [i for i, line in enumerate(lines) if COMPILING_NOTE in line]
    assert compiling, lines  # shown while the bar sat at its start
    assert all("0/3" in lines[i] for i in compiling)  # ... and only there
    assert len(set(compiling)) >= 2 and len({lines[i] for i in compiling}) >= 2  # redrawn: the elapsed time moved
    assert "3/3" in lines[-1] and " left" in lines[-1] and "loss=" in lines[-1]  # then the time left and the loss
    assert all(line.endswith("]") for line in lines), lines  # no warning or log record spliced into the bar's line


def test_a_warning_gets_its_own_line_above_the_bar():
    out = io.StringIO()
    bar = tqdm(total=10, file=out, desc="train", mininterval=0, ascii=True)
    bar.update(3)
    with warnings_above_the_bar(lambda line: tqdm.write(line, file=out)), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a torch warning while compiling", UserWarning, stacklevel=1)
    bar.close()
    lines = out.getvalue().replace("\r", "\n").splitlines()
    warned = [line for line in lines if "a torch warning while compiling" in line]
    assert warned and all(line.lstrip().startswith("/") or "UserWarning" in line.split(":")[0] for line in warned)
    assert not any("train:" in line for line in warned)  # not spliced into the bar's line


def test_a_log_record_gets_its_own_line_above_the_bar():
    """torch.compile reports through logging (a handler writing to stderr), not warnings: those lines go above the
    bar too, and the handler writes to stderr again afterwards."""
    out = io.StringIO()
    logger = logging.getLogger("hfpolicy_tests.compile")
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    try:
        bar = tqdm(total=10, file=out, desc="train", mininterval=0, ascii=True)
        bar.update(3)
        with warnings_above_the_bar(lambda line: tqdm.write(line, file=out)):
            logger.warning("No CUDA runtime is found")
            logging.getLogger("torch._dynamo").warning("torch's own handler")  # torch._logging's, no StreamHandler
        bar.close()
        assert handler.stream is sys.stderr
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().replace("\r", "\n").splitlines()
    assert "No CUDA runtime is found" in lines  # a line of its own, not spliced into the bar's
    assert any(line.endswith("] torch's own handler") and "train:" not in line for line in lines)


QUIET_IMPORT = """
import contextlib, sys
from hfpolicy.training.progress import without_torchs_cuda_home_note
with without_torchs_cuda_home_note() if sys.argv[1] == "quiet" else contextlib.nullcontext():
    import torch.utils.cpp_extension  # what torch.compile imports on a CPU
"""


def test_torchs_no_cuda_runtime_note_does_not_reach_the_output(tmp_path):
    """torch.utils.cpp_extension logs `No CUDA runtime is found, using CUDA_HOME=...` on import when a CUDA toolkit
    is found (here: CUDA_HOME) and no GPU is usable (here: none visible); the training drops that note only."""
    env = {**os.environ, "CUDA_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    runs = {
        how: subprocess.run([sys.executable, "-c", QUIET_IMPORT, how], env=env, capture_output=True, text=True)
        for how in ("loud", "quiet")
    }
    assert runs["loud"].returncode == 0 and runs["quiet"].returncode == 0, runs
    if "No CUDA runtime is found" not in runs["loud"].stderr:
        pytest.skip("this torch build has no CUDA: it never looks for a CUDA toolkit")
    assert "No CUDA runtime is found" not in runs["quiet"].stderr


def test_the_cuda_note_filter_lets_the_loggers_other_records_through(caplog):
    logger = logging.getLogger("torch.utils.cpp_extension")
    with caplog.at_level(logging.WARNING, logger=logger.name), without_torchs_cuda_home_note():
        logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local")
        logger.warning("another note")
    assert [record.getMessage() for record in caplog.records] == ["another note"]
    assert not logger.filters  # removed again
