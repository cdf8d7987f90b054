"""An exclusive lock on a run folder while its run lives: an OS lock on `.hfpolicy.lock` (released however the process
exits, so a stale lock never blocks a resume); `.hfpolicy.lock.holder` names the holder for the error message."""

import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

from hfpolicy.io.atomic import is_temporary, write_atomically

LOCK_FILE = ".hfpolicy.lock"
HOLDER_FILE = ".hfpolicy.lock.holder"
LOCK_FILES = (LOCK_FILE, HOLDER_FILE)  # what holding a folder leaves in it (the holder's temporary file aside)


def is_lock_file(name: str) -> bool:
    """Whether a file name belongs to the run lock (its holder record's temporary file included)."""
    return name in LOCK_FILES or (name.startswith(f"{HOLDER_FILE}.") and is_temporary(name))


class RunLockedError(RuntimeError):
    """Another live process holds the run folder."""


class RunLock:
    """Exclusive, non-blocking lock on a run folder (created if missing); release() or leave the `with` block."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._lock: FileLock | None = None

    def acquire(self) -> "RunLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        # an OS lock or none: a soft (file-exists) fallback would outlive a killed run
        lock = FileLock(self.folder / LOCK_FILE, timeout=0, thread_local=False, fallback_to_soft=False)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            raise RunLockedError(
                f"{self.folder} is in use by another run ({_describe(self.folder / HOLDER_FILE)}): wait for it to "
                "end, stop it, or choose another --output_dir"
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        write_atomically(self.folder / HOLDER_FILE, json.dumps(holder))
        self._lock = lock
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _describe(holder_file: Path) -> str:
    try:
        info = json.loads(holder_file.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["since"]))
        return f"pid {info['pid']} on {info['host']}, since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not record itself"
