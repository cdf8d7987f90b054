"""Folders that appear whole or not at all: built in a hidden staging folder beside their destination, then renamed;
held with the run lock while its writer lives, so the next writer removes only the staging of dead processes."""

import glob
import os
import shutil
import uuid
from pathlib import Path

from hfpolicy.io.run_lock import LOCK_FILES, RunLock, RunLockedError


def staging_path(destination: str | Path, tag: str) -> Path:
    """A new hidden folder name beside `destination`: `.<name>.<tag>-<pid>-<random>`."""
    destination = Path(destination)
    return destination.parent / f".{destination.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale_staging(destination: str | Path, tag: str) -> list[Path]:
    """Removes (and returns) the `tag` staging folders beside `destination` whose writer is gone (lock free)."""
    destination = Path(destination)
    removed = []
    for path in destination.parent.glob(f".{glob.escape(destination.name)}.{tag}-*"):
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


def shared_staging_path(destination: str | Path, tag: str) -> Path:
    """`.<name>.<tag>` beside `destination`: the staging folder every rank of a launch finds without being told.
    The caller holds the run lock, so one found before a save starts is a killed save's."""
    destination = Path(destination)
    return destination.parent / f".{destination.name}.{tag}"


def shared_staging_pattern(tag: str) -> str:
    """The glob of `shared_staging_path`'s names for any destination and `tag`."""
    return f".*.{glob.escape(tag)}"


def shared_staging_destination(name: str, tag: str) -> str:
    """The destination's name of a `shared_staging_path` name (`.step_000500.saving` → `step_000500`), else `name`."""
    suffix = f".{tag}"
    if name.startswith(".") and name.endswith(suffix) and len(name) > len(suffix) + 1:
        return name[1 : -len(suffix)]
    return name


class Staging:
    """A locked staging folder beside a destination; `publish` renames it into place, `discard` removes it."""

    def __init__(self, path: Path, lock: RunLock):
        self.path, self._lock = path, lock

    @classmethod
    def create(cls, destination: str | Path, tag: str) -> "Staging":
        destination = Path(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(destination, tag)
        path = staging_path(destination, tag)
        try:
            return cls(path, RunLock(path).acquire())
        except BaseException:  # Ctrl-C (or a full disk) between the folder's mkdir and the caller's hands
            shutil.rmtree(path, ignore_errors=True)
            raise

    def publish(self, destination: str | Path) -> Path:
        """Renames the staging folder to `destination` (absent or empty, else OSError), without its lock files."""
        destination = Path(destination)
        os.rename(self.path, destination)
        for name in LOCK_FILES:  # safe while held: lockers never block, so none waits on it
            (destination / name).unlink(missing_ok=True)
        self._lock.release()
        return destination

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release()
