"""Signs of life while training (hfpolicy.training.progress): the first estimate counts the evaluations, the bar
shows the current loss and lr, and warnings do not land inside the bar's line."""

import io
import logging
import sys
import warnings

import torch
from policies.toy_policy import make_toy_policy
from tqdm import tqdm

from hfpolicy.training.progress import TrainingClock, timed_eval_episode_s, warnings_above_the_bar


def test_the_first_estimate_counts_the_evaluation_episodes():
    policy = make_toy_policy()
    rng_before = torch.get_rng_state()
    per_episode = timed_eval_episode_s(policy, episode_length=300, device=torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), rng_before) and policy.training  # RNG and mode as they were
    assert 300 / 500 <= per_episode < 30  # the simulator steps at least
    clock = TrainingClock(total_steps=110, eval_plan={50: 10, 110: 100})
    clock.estimate_eval(per_episode)
    for _ in range(11):
        clock.add_step(2.0)
    left, with_evals = clock.remaining_s(10)
    assert with_evals and left == 200.0 + 110 * per_episode
    line = clock.announcement(10, torch.device("cpu"))
    assert "110 evaluation episodes" in line and "plus evaluations" not in line
    clock.add_eval(10, 30.0)  # a timed evaluation replaces the guess
    assert clock.remaining_s(50) == (120.0 + 300.0, True) and not clock.eval_estimated


def test_the_bar_shows_the_current_loss_and_lr():
    clock = TrainingClock(total_steps=10, eval_plan={})
    clock.add_step(1.0)
    clock.note_current(torch.tensor(0.25), 1e-3)
    assert "loss=0.2500, lr=1.00e-03" in clock.postfix(1)
    clock._current_read_at = float("-inf")  # as when CURRENT_EVERY_S has passed
    clock.note_current(torch.tensor(0.125), 5e-4)
    assert "loss=0.1250, lr=5.00e-04" in clock.postfix(2)


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
