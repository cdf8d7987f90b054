"""Stopping a run without losing it: Ctrl-C and SIGTERM end it at the next step boundary with a checkpoint of that
step (at once during set-up, the first step and a one-process evaluation, where nothing is lost; a second Ctrl-C
at once too), and a timer asks for a checkpoint every `--save_every_minutes`. The run then ends with `RunStopped`
(exit 130 / 143) after printing what it kept and how to continue.
"""

import contextlib
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from accelerate import Accelerator

from hfpolicy.io.termination import SIGNAL_NAMES, deliver_again, stop_when_launcher_dies
from hfpolicy.training.launch import is_launch_main_process


class Interrupted(BaseException):
    """A stop signal that ends what runs now (set-up, an evaluation) at once (a BaseException, as KeyboardInterrupt)."""

    def __init__(self, signum: int, again: bool = False):
        super().__init__(signum)
        self.signum, self.again = signum, again


class RunStopped(SystemExit):
    """The run stopped on a signal, after saying what it kept; the exit code is 128 + the signal's number."""


def resume_command(root: Path) -> str:
    return f"hfpolicy train --output_dir={shlex.quote(str(root))} --resume=true"


class StopControl:
    """The stop requests and the checkpoint timer of one run (see the module docstring)."""

    SYNC_EVERY = 10  # steps between agreeing on a stop across the processes of a launch (one tiny all-reduce)

    def __init__(self, save_every_minutes: float):
        self.save_every_s = 60.0 * save_every_minutes
        self.accelerator: Accelerator | None = None  # set when training starts
        self.signum: int | None = None  # the first stop signal received
        self.last_save = time.monotonic()
        self._raise_now = True  # set-up and the first step: a signal ends them at once
        self.trained_a_step = False
        self._one_process = True
        self._swallowed = False

    def _unraisable(self, unraisable) -> None:
        """An Interrupted raised where Python cannot pass it on is delivered again (docs/robustness.md)."""
        if isinstance(unraisable.exc_value, Interrupted):
            self._swallowed = True
            deliver_again(unraisable.exc_value.signum, self._handle)  # raised here, it would be swallowed again
            return
        self._previous_hook(unraisable)

    def _handle(self, signum: int, frame) -> None:
        if self._swallowed:  # delivered again by _unraisable: the Interrupted raised first was swallowed
            self._swallowed = False
            if self._raise_now:
                raise Interrupted(signum)
            return
        if self.signum is not None:
            if signum == signal.SIGINT:
                raise Interrupted(signum, again=True)  # the user insists: stop now, without a checkpoint
            return
        self.signum = signum
        if self._raise_now:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator["StopControl"]:
        """SIGINT and SIGTERM handled as stop requests within the block (main thread only), restored after it."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        # a SIGINT this process was started ignoring (a background job of a script) stays ignored, as Python does
        handled = [s for s in SIGNAL_NAMES if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)]
        previous = {s: signal.signal(s, self._handle) for s in handled}
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        stop_when_launcher_dies()
        try:
            yield self
        finally:
            sys.unraisablehook = self._previous_hook
            for s, handler in previous.items():
                signal.signal(s, handler)

    def training(self, accelerator: Accelerator) -> None:
        """Training starts: the timer starts, and after the first step a signal asks the loop to stop."""
        self.accelerator, self._one_process = accelerator, accelerator.num_processes == 1
        self.last_save = time.monotonic()
        if self.signum is not None:  # arrived as set-up ended
            raise Interrupted(self.signum)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A signal within the block raises Interrupted at once (one process only: a launch's stop together)."""
        self._raise_now = self._one_process
        try:
            if self._raise_now and self.signum is not None:
                raise Interrupted(self.signum)
            yield
        finally:
            self._raise_now = False

    def poll(self, step: int) -> tuple[bool, bool]:
        """(stop now, a checkpoint is due by the timer) after `step`: the same on every process."""
        self.trained_a_step, self._raise_now = True, False
        stop = self.signum is not None
        due = self.save_every_s > 0 and time.monotonic() - self.last_save >= self.save_every_s
        if self._one_process or self.accelerator is None:  # (None: one process until training starts)
            return stop, due
        if step % self.SYNC_EVERY:
            return False, False
        flags = torch.tensor([float(stop), float(due)], device=self.accelerator.device)
        flags = self.accelerator.reduce(flags, reduction="sum")
        return bool(flags[0] > 0), bool(flags[1] > 0)

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def stopped(self, message: str) -> RunStopped:
        """The exception that ends the run, after `message` on stderr from the launch's main process."""
        signum = self.signum or signal.SIGINT
        if is_launch_main_process():
            print(f"stopped by {SIGNAL_NAMES[signum]}: {message}", flush=True, file=sys.stderr)
        return RunStopped(128 + signum)
