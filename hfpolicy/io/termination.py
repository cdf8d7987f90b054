"""Ctrl-C (SIGINT) and SIGTERM as an exception in every `hfpolicy` command (the CLI runner installs it), so a user's
Ctrl-C or a scheduler's stop (or `kill`) runs the commands' clean-up (staging removed, locks released) and ends them
with the shell's exit status (130, 143), never lost where it landed; and helper processes that end with their parent.

    with stop_on_signals():
        ...                           # SIGINT / SIGTERM raise Terminated (a SystemExit, code 130 / 143) here
    raise_if_terminated()             # a safe point of a long loop: raises Terminated if a stop arrived
    stop_when_launcher_dies()         # training: a killed launcher does not leave its trainer running
    die_with_parent(parent_pid)       # in a forked helper process: it ends when the process that forked it does

Python ignores an exception raised where it cannot pass it on (a weakref callback, a __del__, a cffi callback), only
printing "Exception ignored in ..."; a signal landing there would be lost (a conversion once finished with exit 0
so: docs/robustness.md#ctrl-c-is-never-swallowed). Such a stop is
delivered again (`deliver_again`), and noted for `raise_if_terminated`. Training's StopControl (hfpolicy.training.
stopping) answers the same signals with a checkpoint, and delivers its swallowed stops again the same way.
"""

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

# the stop signals, as said to users
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
    """A safe point for long loops (DatasetWriter.add_frame, each evaluated episode): raises Terminated if a stop
    signal arrived, in case its exception was swallowed where it landed (a cffi callback, a finalizer)."""
    if _requested:
        raise Terminated(128 + _requested[0])


def deliver_again(signum: int, handler: Callable) -> None:
    """Raises signal `signum` again a moment later from another thread, so that the main thread handles it at its
    next bytecode, outside the finalizer or callback that swallowed the first one (raised from within an unraisable
    hook, it would be swallowed again); only while `handler` is still the signal's handler (after the block that
    installed it, the default handler would kill the process)."""

    def again() -> None:
        if signal.getsignal(signum) == handler:
            signal.raise_signal(signum)

    threading.Timer(0.01, again).start()


def _redeliver_if_swallowed(previous_hook):
    """An unraisable hook: a Terminated raised while a finalizer ran (a __del__, a weakref callback: Python ignores
    exceptions there) is delivered again, so that the stop is never lost."""

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            deliver_again(unraisable.exc_value.signum, _raise_terminated)
            return
        previous_hook(unraisable)

    return hook


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Terminated` (exit code 130 / 143), again if a finalizer swallowed
    it; the previous handlers are restored after it. A SIGINT the process was started ignoring (a background job of
    a script) stays ignored, as Python does. Outside the main thread (where signals cannot be handled) it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [s for s in SIGNAL_NAMES if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)]
    previous = {s: signal.signal(s, _raise_terminated) for s in handled}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redeliver_if_swallowed(previous_hook)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = previous_hook
        _requested.clear()


def ignore_sigterm(worker_id: int = 0) -> None:
    """A DataLoader worker's `worker_init_fn`: SIGTERM is ignored there, so that a stop sent to the whole process tree
    (accelerate >= 1.16's launcher terminates its child's tree) reaches the trainer, which finishes its step with its
    workers and saves, instead of failing on a worker killed mid-step. The workers end with the trainer, as always."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _is_accelerate_launcher(pid: int) -> bool:
    """Whether process `pid` is `accelerate launch` (its command line, from /proc)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return any(Path(word).name == "accelerate" or "accelerate.commands.launch" in word for word in words[:3])


def _request_signal_at_parent_death(signum: int) -> bool:
    """Asks the kernel for `signum` when this process's parent dies (Linux; whether it was set up)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """In a child right after its fork (a ProcessPoolExecutor's `initializer`, a Popen's `preexec_fn`, which carries
    over the exec): the child gets `signum` when its parent dies, however that dies (kill -9 included), instead of
    living on under init; a parent already gone (it died between the fork and this call) signals it at once.
    SIGKILL for a helper that holds nothing to clean up, SIGTERM for one that stops cleanly (`accelerate launch`,
    whose trainers then stop as `stop_when_launcher_dies` says). The kernel sends it when the
    *thread* that forked the child ends: fork from a thread that lives as long as the process (the main thread)."""
    _request_signal_at_parent_death(signum)
    if os.getppid() != parent_pid:  # the parent died before the request: nothing will signal us
        os.kill(os.getpid(), signum)


def stop_when_launcher_dies() -> bool:
    """When this process was started by `accelerate launch`, asks the kernel for SIGTERM when the launcher dies
    (PR_SET_PDEATHSIG): a scheduler's SIGTERM to the launcher ends it at once without forwarding the signal, and its
    trainer would otherwise train on, holding the run folder. The trainer then stops as a SIGTERM to it would. Whether
    it was set up (Linux only; a process with another parent is left alone: its shell's exit must not stop it)."""
    parent = os.getppid()
    if not _is_accelerate_launcher(parent) or not _request_signal_at_parent_death(signal.SIGTERM):
        return False
    if os.getppid() != parent:  # the launcher died before the request: nothing will signal us
        os.kill(os.getpid(), signal.SIGTERM)
    return True
