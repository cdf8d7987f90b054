"""Training checkpoints: written atomically, the last K kept, and loaded back for an exact resume.

    <output_dir>/checkpoints/
        step_000500/
            pretrained_model/   config.json, model.safetensors (EMA weights when EMA is on), train_config.json
            training_state/     accelerate state (model, optimizer, LR scheduler, EMA, RNG states of every process)
                                and step.json
        step_001000/ ...
        last -> step_001000

A checkpoint is assembled in a hidden temporary folder and renamed into place when complete, so a run killed while
saving leaves the previous checkpoints intact and no half-written one that `--resume` could pick up.
"""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from accelerate import Accelerator

CHECKPOINTS_DIR = "checkpoints"
LAST_LINK = "last"
PRETRAINED_DIR = "pretrained_model"
TRAINING_STATE_DIR = "training_state"
STEP_FILE = "step.json"
_PREFIX = "step_"


def checkpoint_name(step: int) -> str:
    return f"{_PREFIX}{step:06d}"


def list_checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    folder = Path(output_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and p.name.startswith(_PREFIX)]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX) :]))


def latest_checkpoint(output_dir: Path) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def save_checkpoint(
    accelerator: Accelerator,
    output_dir: Path,
    step: int,
    save_policy: Callable[[Path], None],
    keep_last: int,
) -> Path:
    """Saves the training state of every process and (on the main process) the policy, atomically.

    `save_policy(directory)` writes the shareable policy (save_pretrained with EMA weights, train_config.json). Every
    process must call this function: each saves its own RNG state.
    """
    folder = Path(output_dir) / CHECKPOINTS_DIR
    final = folder / checkpoint_name(step)
    staging = folder / f".tmp_{checkpoint_name(step)}"
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging / TRAINING_STATE_DIR), safe_serialization=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (staging / TRAINING_STATE_DIR / STEP_FILE).write_text(json.dumps({"step": step}))
        save_policy(staging / PRETRAINED_DIR)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        _point_last_link(folder, final.name)
        if keep_last > 0:
            for old in list_checkpoints(output_dir)[:-keep_last]:
                shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Accelerator, checkpoint: Path) -> int:
    """Restores model, optimizer, registered objects (LR scheduler, EMA) and this process's RNG; returns the step."""
    state_dir = Path(checkpoint) / TRAINING_STATE_DIR
    step_file = state_dir / STEP_FILE
    if not step_file.is_file():
        raise FileNotFoundError(f"{checkpoint} is not a complete checkpoint (no {TRAINING_STATE_DIR}/{STEP_FILE})")
    accelerator.load_state(str(state_dir))
    return int(json.loads(step_file.read_text())["step"])


def _point_last_link(folder: Path, target_name: str) -> None:
    """Repoints checkpoints/last at `target_name` atomically (a new link renamed over the old one)."""
    tmp_link = folder / f".{LAST_LINK}.tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(target_name)
    os.replace(tmp_link, folder / LAST_LINK)
