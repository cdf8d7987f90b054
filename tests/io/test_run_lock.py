"""The run-folder lock: one live run per folder; a crashed run's lock does not block a resume."""

import os
import signal
import subprocess
import sys
import time

import pytest

from hfpolicy.io.run_lock import RunLock, RunLockedError

HOLDER = """
import sys, time
from hfpolicy.io.run_lock import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(60)
"""


def hold_in_subprocess(folder):
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_live_run_holds_the_folder_and_a_killed_one_does_not(tmp_path):
    folder = tmp_path / "run"
    holder = hold_in_subprocess(folder)
    try:
        with pytest.raises(RunLockedError, match=rf"in use by another run \(pid {holder.pid} on .*choose another"):
            RunLock(folder).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no clean-up code runs
        holder.wait()
    deadline = time.monotonic() + 10
    while True:  # the kernel releases the lock with the process
        try:
            lock = RunLock(folder).acquire()
            break
        except RunLockedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    lock.release()


def test_the_lock_is_exclusive_within_one_process_and_released_on_exit(tmp_path):
    with RunLock(tmp_path / "run"), pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path / "run").acquire()
    with RunLock(tmp_path / "run"):  # free again after the block
        pass
