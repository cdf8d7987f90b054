"""Stop signals in every command (hfpolicy.io.termination): Ctrl-C and SIGTERM raise Terminated with the shell's
exit status, even when they land where Python swallows exceptions (a weakref callback), and the CLI runner ends any
command on them with one line and exit 130 / 143."""

import signal
import time
import weakref

import pytest

from hfpolicy.cli.commands import run_command
from hfpolicy.io.termination import Terminated, raise_if_terminated, stop_on_signals


class Thing:
    pass


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_that_lands_in_a_weakref_callback_is_delivered_again(signum, capsys):
    """The signal arrives while a finalizer runs: Python ignores the exception raised there ("Exception ignored in
    ..."); the block must still end with Terminated, at once, not run on to its end."""
    finished, handlers = False, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Terminated) as stopped, stop_on_signals():
        thing = Thing()
        weakref.finalize(thing, signal.raise_signal, signum)  # the handler runs inside the callback
        del thing
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a long computation without safe points
            sum(range(1000))
        finished = True
    assert stopped.value.code == 128 + signum and not finished
    assert "Exception ignored" not in capsys.readouterr().err
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # restored after the block
    raise_if_terminated()  # the block's request ends with it


def test_a_safe_point_raises_a_stop_whose_exception_was_lost():
    with stop_on_signals():
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(Terminated) as again:  # e.g. DatasetWriter.add_frame after a swallowed stop
            raise_if_terminated()
        assert again.value.code == 130


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_every_command_stops_on_ctrl_c_with_one_line_and_the_shells_status(signum, tmp_path, capsys):
    """The runner's handling, for a command with no stop handling of its own (`hfpolicy view`)."""
    status = run_command("view", [str(tmp_path)], before_run=lambda cfg: signal.raise_signal(signum))
    assert status == 128 + signum
    err = capsys.readouterr().err
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"
    assert err == f"hfpolicy view: stopped by {name}\n"
    assert list(tmp_path.iterdir()) == []
