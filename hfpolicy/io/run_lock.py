"""An exclusive lock on a run folder for the lifetime of a run, so two trainings never write into one folder.

    with RunLock(output_dir):          # raises RunLockedError naming the holder if another live process has it
        train ...

The lock is `fcntl.flock` on `<output_dir>/.hfpolicy.lock`: the kernel releases it when the holding process exits,
however it exits (a crash, kill -9, a power cut), so a stale lock never blocks a resume; the file itself stays and
only records who held it last (pid, host, time) for the error message.
"""

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

LOCK_FILE = ".hfpolicy.lock"


class RunLockedError(RuntimeError):
    """Another live process holds the run folder."""


class RunLock:
    """Exclusive, non-blocking lock on a run folder (created if missing); release() or leave the `with` block."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._file: IO[str] | None = None

    def acquire(self) -> "RunLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK_FILE
        lock_file = open(path, "a+")  # noqa: SIM115 (held open for the run's lifetime)
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip()
            lock_file.close()
            raise RunLockedError(
                f"{self.folder} is in use by another run ({_describe(holder)}): wait for it to end, stop it, or "
                "choose another --output_dir"
            ) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        lock_file.flush()
        self._file = lock_file
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return f"pid {info['pid']} on {info['host']}, since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(info['since']))}"
    except (ValueError, KeyError, TypeError):
        return "a process that did not record itself"
