"""Folders that appear whole or not at all: built in a hidden staging folder beside their destination, then renamed.

    staging = Staging.create(destination, "writing")   # built in .<name>.writing-<pid>-<random>/, locked
    ... write into staging.path ...; staging.publish(destination)   # renamed into place (or staging.discard())
    shared_staging_path(destination, "saving")   # a folder all ranks of a launch write into, under the run lock

A staging folder is held with the run lock (`hfpolicy.io.run_lock.RunLock`) while its writer lives, so the next writer
of the same destination removes the staging of dead processes (SIGKILL, a power cut), never that of a live one. Files
are written whole by `hfpolicy.io.atomic`.
"""

import glob
import os
import shutil
import uuid
from pathlib import Path

from hfpolicy.io.run_lock import LOCK_FILES, RunLock, RunLockedError


def staging_path(destination: str | Path, tag: str) -> Path:
    """A new hidden folder name beside `destination`: `.<name>.<tag>-<pid>-<random>` (a staging folder, or the old
    folder a replacement moves aside)."""
    destination = Path(destination)
    return destination.parent / f".{destination.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def staging_pattern(destination: Path, tag: str) -> str:
    """The glob of `staging_path`'s names for `destination` and `tag`."""
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


def shared_staging_path(destination: str | Path, tag: str) -> Path:
    """The staging folder of a writer that several processes share: `.<name>.<tag>` beside `destination`.

    Deterministic, with no pid and no random part, unlike `staging_path`: every rank of one launch writes its part
    (its RNG state, say) into the same folder and must find it without being told its name. No lock of its own is
    needed because the caller holds the run lock (`hfpolicy.io.run_lock`), which already excludes every other writer
    of the run folder; so a folder of this name that is there before a save starts is a killed save's, stale."""
    destination = Path(destination)
    return destination.parent / f".{destination.name}.{tag}"


def shared_staging_pattern(tag: str) -> str:
    """The glob of `shared_staging_path`'s names for any destination and `tag`."""
    return f".*.{glob.escape(tag)}"


def shared_staging_destination(name: str, tag: str) -> str:
    """The destination's name of a `shared_staging_path` name (`.step_000500.saving` → `step_000500`); any other
    name unchanged."""
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
