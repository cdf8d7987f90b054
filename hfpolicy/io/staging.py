"""Staging folders: a writer builds its output in a hidden folder beside the destination and renames it into place
when complete. Each staging folder is held with the run lock (`hfpolicy.io.run_lock.RunLock`) while its writer lives, so
the next writer of the same destination removes the staging of dead processes (SIGKILL, a power cut) and never that of
a live one.

    staging = Staging.create(destination, "writing")      # .<name>.writing-<pid>-<random>/, locked, stale ones removed
    ... write into staging.path ...
    staging.publish(destination)                           # rename into place (or staging.discard())
"""

import glob
import os
import shutil
import uuid
from pathlib import Path

from hfpolicy.io.run_lock import LOCK_FILES, RunLock, RunLockedError


def staging_pattern(destination: Path, tag: str) -> str:
    return f".{glob.escape(destination.name)}.{tag}-*"


def remove_stale_staging(destination: str | Path, tag: str) -> list[Path]:
    """Removes the `tag` staging folders beside `destination` whose writer is gone (their lock is free); returns
    them. Staging of a live writer is left alone."""
    destination = Path(destination)
    removed = []
    for path in destination.parent.glob(staging_pattern(destination, tag)):
        if not path.is_dir() or path.is_symlink():
            continue
        try:
            lock = RunLock(path).acquire()
        except (RunLockedError, OSError):  # a live writer's, or one we cannot even open: not ours to remove
            continue
        shutil.rmtree(path, ignore_errors=True)
        lock.release()
        removed.append(path)
    return removed


class Staging:
    """A locked staging folder beside a destination; `publish` renames it into place, `discard` removes it."""

    def __init__(self, path: Path, lock: RunLock):
        self.path, self._lock = path, lock

    @classmethod
    def create(cls, destination: str | Path, tag: str) -> "Staging":
        destination = Path(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(destination, tag)
        path = destination.parent / f".{destination.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        return cls(path, RunLock(path).acquire())

    def publish(self, destination: str | Path) -> Path:
        """Renames the staging folder to `destination` (which must not exist, or be an empty folder): OSError if
        something else appeared there meanwhile. The lock file does not travel with it."""
        destination = Path(destination)
        os.rename(self.path, destination)
        for name in LOCK_FILES:  # safe while held: lockers never block, so none waits on it
            (destination / name).unlink(missing_ok=True)
        self._lock.release()
        return destination

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release()
