"""SIGTERM as an exception in the commands that write folders, so a scheduler's stop (or `kill`) runs their clean-up
(staging removed, locks released) instead of ending the process where it stands, as Python's default handler does.

    with stop_on_sigterm():
        ...                           # SIGTERM raises Terminated (a SystemExit with code 143) here
"""

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator


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
