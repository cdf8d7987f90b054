"""The run folder (docs/training.md#the-run-folder): the one place that knows its layout (train_config.json,
resume_history.json, metrics.jsonl, training_curve.png, checkpoints/step_<n>/ and last, eval/step_<n>/); its lock."""

import os
import shutil
from pathlib import Path

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE, TRAINING_CURVE_FILE
from hfpolicy.io.atomic import replacing
from hfpolicy.io.run_lock import LOCK_FILES, RunLock
from hfpolicy.runs.metrics_log import truncate_metrics

CHECKPOINTS_DIR = "checkpoints"
EVAL_DIR = "eval"
LAST_LINK = "last"
PRETRAINED_DIR = "pretrained_model"
RESUME_HISTORY_FILE = "resume_history.json"
_PREFIX = "step_"


class RunFolderError(ValueError):
    """The run folder cannot hold this run as asked (unwritable, another run's, nothing to resume)."""


def checkpoint_name(step: int) -> str:
    """step_000500: the name of a step's checkpoint folder and of its evaluation folder."""
    return f"{_PREFIX}{step:06d}"


def step_folders(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of the `step_<n>` folders (not links) in `folder`, oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        number = path.name.removeprefix(_PREFIX)
        if path.name.startswith(_PREFIX) and number.isdigit() and path.is_dir() and not path.is_symlink():
            found.append((int(number), path))
    return sorted(found)


class RunFolder:
    """A training run's folder; the main process holds its lock between `lock()` and `unlock()`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config_file = self.root / TRAIN_CONFIG_FILE
        self.resume_history_file = self.root / RESUME_HISTORY_FILE
        self.metrics_file = self.root / METRICS_FILE
        self.curve_file = self.root / TRAINING_CURVE_FILE
        self.checkpoints_dir = self.root / CHECKPOINTS_DIR
        self._lock: RunLock | None = None
        self._found: list[str] | None = None  # what the folder held before `lock()` (None: it did not exist)
        self._created: list[Path] = []  # the folder and the parents `lock()` created, innermost first

    # --- layout -------------------------------------------------------------------------------------------------
    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / checkpoint_name(step)

    def eval_dir(self, step: int) -> Path:
        return self.root / EVAL_DIR / checkpoint_name(step)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        return [path for _, path in step_folders(self.checkpoints_dir)]

    def latest_checkpoint(self) -> Path | None:
        checkpoints = self.checkpoints()
        return checkpoints[-1] if checkpoints else None

    def latest_eval_dir(self, up_to_step: int | None = None) -> Path | None:
        """The latest `eval/step_<n>` holding an eval_info.json (at or before `up_to_step`)."""
        found = [
            path
            for step, path in step_folders(self.root / EVAL_DIR)
            if (path / EVAL_INFO_FILE).is_file() and (up_to_step is None or step <= up_to_step)
        ]
        return found[-1] if found else None

    def point_last_link(self, checkpoint: Path) -> None:
        """Repoints checkpoints/last at `checkpoint` atomically."""
        with replacing(self.checkpoints_dir / LAST_LINK) as tmp_link:
            tmp_link.unlink(missing_ok=True)  # a dead process's with this pid
            tmp_link.symlink_to(checkpoint.name)

    def drop_old_checkpoints(self, keep_last: int) -> None:
        """Deletes all but the last `keep_last` checkpoints (0 keeps all)."""
        if keep_last > 0:
            for old in self.checkpoints()[:-keep_last]:
                shutil.rmtree(old)

    # --- the run's life -----------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Takes the folder's exclusive lock (creating the folder); RunLockedError names the run holding it."""
        self._found = sorted(os.listdir(self.root)) if self.root.is_dir() else None
        self._created = [path for path in [self.root, *self.root.absolute().parents] if not path.exists()]
        try:
            self._lock = RunLock(self.root).acquire()
        except OSError as e:  # RunLockedError is not an OSError: it passes through, naming the other run
            raise RunFolderError(f"cannot create --output_dir={self.root} ({e}): choose a writable folder") from e

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def undo_start(self) -> None:
        """After a failed or stopped start (the lock held): removes what `lock()` created (folder or lock files)."""
        if self._lock is None:
            return
        if self._found is None:
            shutil.rmtree(self.root, ignore_errors=True)
            for parent in self._created[1:]:  # e.g. outputs/ of the default outputs/train/<date>: gone if still empty
                try:
                    parent.rmdir()
                except OSError:
                    break
            return
        for name in LOCK_FILES:
            if name not in self._found:
                (self.root / name).unlink(missing_ok=True)

    def checkpoint_to_resume(self) -> Path:
        """The last checkpoint, which a resume continues from; RunFolderError when there is none."""
        checkpoint = self.latest_checkpoint()
        if checkpoint is not None:
            return checkpoint
        if self.config_file.exists():
            raise RunFolderError(
                f"--output_dir={self.root} holds no checkpoint to resume from: its run stopped before the first "
                "one (--save_freq); start it again in place by dropping --resume"
            )
        raise RunFolderError(
            f"--resume=true but --output_dir={self.root} holds no checkpoint to resume from; drop --resume to "
            "start a new run there"
        )

    def check_for(self, resume: bool) -> None:
        """A new run needs a folder without checkpoints, a resumed run one with a checkpoint (else RunFolderError)."""
        if resume:
            self.checkpoint_to_resume()
            return
        checkpoint = self.latest_checkpoint()
        if checkpoint is not None:
            raise RunFolderError(
                f"--output_dir={self.root} holds another run (checkpoints up to {checkpoint.name}): pass "
                "--resume=true to continue it, or choose another --output_dir"
            )

    def how_to_continue(self) -> str:
        """What continues this run after a failure (a full disk), in words."""
        checkpoint = self.latest_checkpoint()
        if checkpoint is not None:
            return f"resume with --resume=true (it continues from {checkpoint.name}, which is intact)"
        return "run the same command again (no checkpoint was kept yet: the run starts again in place)"

    def forget_after(self, step: int) -> None:
        """Drops what a stopped run logged and evaluated after `step`, the checkpoint it continues from."""
        truncate_metrics(self.metrics_file, after_step=step)
        for evaluated_step, folder in step_folders(self.root / EVAL_DIR):
            if evaluated_step > step:
                shutil.rmtree(folder)


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints of the run in `output_dir`, oldest first."""
    return RunFolder(output_dir).checkpoints()


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    return RunFolder(output_dir).latest_checkpoint()
