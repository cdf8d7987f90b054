"""SIGTERM as an exception in the commands that write folders, so a scheduler's stop (or `kill`) runs their clean-up
(staging removed, locks released) instead of ending the process where it stands, as Python's default handler does;
and, for a process started by `accelerate launch`, SIGTERM when that launcher dies.

    with stop_on_sigterm():
        ...                           # SIGTERM raises Terminated (a SystemExit with code 143) here
    stop_when_launcher_dies()         # training: a killed launcher does not leave its trainer running
    die_with_parent(parent_pid)       # in a forked helper process: it ends when the process that forked it does
"""

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path


class Terminated(SystemExit):
    """The process received SIGTERM."""


_requested: list[int] = []  # the signal number once SIGTERM arrived inside a `stop_on_sigterm` block


def _raise_terminated(signum, frame) -> None:
    _requested[:] = [signum]
    raise Terminated(128 + signum)


def raise_if_terminated() -> None:
    """A safe point for long loops (DatasetWriter.add_frame, each evaluated episode): raises Terminated if SIGTERM
    arrived, in case its exception was swallowed where it landed (a cffi callback, a finalizer)."""
    if _requested:
        raise Terminated(128 + _requested[0])


def _redeliver_if_swallowed(previous_hook):
    """An unraisable hook: a Terminated raised while a finalizer ran (a __del__, a weakref callback: Python ignores
    exceptions there) is delivered again, so that the stop is never lost."""

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            signal.raise_signal(signal.SIGTERM)  # handled again at the next bytecode, outside the finalizer
            return
        previous_hook(unraisable)

    return hook


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (exit code 143), again if a finalizer swallowed it; the previous
    handler is restored after it. Outside the main thread (where signals cannot be handled) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redeliver_if_swallowed(previous_hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook
        _requested.clear()


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
    SIGKILL for a helper that holds nothing to clean up (decode_process.py), SIGTERM for one that stops cleanly
    (`accelerate launch`, whose trainers then stop as `stop_when_launcher_dies` says). The kernel sends it when the
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
