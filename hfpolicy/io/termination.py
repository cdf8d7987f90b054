"""Ctrl-C and SIGTERM as an exception (`Terminated`, exit status 130 / 143) that runs the commands' clean-up, never lost
where Python ignores exceptions (docs/robustness.md#ctrl-c-is-never-swallowed); helpers that die with their parent."""

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

SIGNAL_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


class Terminated(SystemExit):
    """The process received a stop signal (SIGINT: Ctrl-C, or SIGTERM); the exit code is 128 + its number."""

    code: int  # 128 + the signal number (SystemExit's code may be any object)

    @property
    def signum(self) -> int:
        return self.code - 128


_requested: list[int] = []  # the signal number once a stop signal arrived inside a `stop_on_signals` block


def _raise_terminated(signum, frame) -> None:
    _requested[:] = [signum]
    raise Terminated(128 + signum)


def raise_if_terminated() -> None:
    """A long loop's safe point: raises Terminated if a stop signal arrived (even if its exception was swallowed)."""
    if _requested:
        raise Terminated(128 + _requested[0])


def deliver_again(signum: int, handler: Callable) -> None:
    """Raises `signum` again soon from another thread, outside the finalizer that swallowed it (if `handler` holds)."""

    def again() -> None:
        if signal.getsignal(signum) == handler:
            signal.raise_signal(signum)

    threading.Timer(0.01, again).start()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Terminated` (main thread only; an ignored SIGINT stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [s for s in SIGNAL_NAMES if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)]
    previous = {s: signal.signal(s, _raise_terminated) for s in handled}
    previous_hook = sys.unraisablehook

    def redeliver_if_swallowed(unraisable) -> None:  # a Terminated raised in a finalizer is delivered again
        if isinstance(unraisable.exc_value, Terminated):
            deliver_again(unraisable.exc_value.signum, _raise_terminated)
        else:
            previous_hook(unraisable)

    sys.unraisablehook = redeliver_if_swallowed
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = previous_hook
        _requested.clear()


def ignore_sigterm(worker_id: int = 0) -> None:
    """A DataLoader worker's `worker_init_fn`: a SIGTERM sent to the whole process tree (accelerate >= 1.16) is left
    to the trainer, which finishes its step with its workers and saves."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _is_accelerate_launcher(pid: int) -> bool:
    """Whether process `pid` is `accelerate launch` (its command line, from /proc)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return any(Path(word).name == "accelerate" or "accelerate.commands.launch" in word for word in words[:3])


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
    """In a child right after its fork: asks the kernel (Linux) for `signum` when the parent dies (sent now if it is
    gone); whether the kernel took it. The kernel sends it when the forking *thread* ends: fork from the main thread."""
    requested = False
    if sys.platform.startswith("linux"):
        requested = ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    if os.getppid() != parent_pid:  # the parent died before the request: nothing will signal us
        os.kill(os.getpid(), signum)
    return requested


def stop_when_launcher_dies() -> bool:
    """A trainer started by `accelerate launch` gets SIGTERM when the launcher dies (a scheduler's SIGTERM ends the
    launcher without forwarding it); whether that was set up. A process with another parent is left alone."""
    parent = os.getppid()
    return _is_accelerate_launcher(parent) and die_with_parent(parent, signal.SIGTERM)
