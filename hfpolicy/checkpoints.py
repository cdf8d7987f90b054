"""Training checkpoints: written atomically, the last K kept, and loaded back for an exact resume.

    <output_dir>/checkpoints/
        step_000500/
            pretrained_model/   config.json, model.safetensors (EMA weights when EMA is on), train_config.json
            training_state/     model, optimizer, lr_scheduler, ema: <name>.safetensors + <name>.json each;
                                rng_state_<rank>.safetensors + .json for every process; step.json
        step_001000/ ...
        last -> step_001000

A checkpoint is assembled in a hidden temporary folder and renamed into place when complete, so a run killed while
saving leaves the previous checkpoints intact and no half-written one that `--resume` could pick up. A save that
fails (a full disk, say) removes its temporary folder and says what happened.

The training state is tensors in safetensors files and everything else in JSON (see `hfpolicy.tensor_tree`): loading
a checkpoint never unpickles anything, so a planted file in a run folder cannot run code.
"""

import errno
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator

from hfpolicy.tensor_tree import load_tree, save_tree

CHECKPOINTS_DIR = "checkpoints"
LAST_LINK = "last"
PRETRAINED_DIR = "pretrained_model"
TRAINING_STATE_DIR = "training_state"
STEP_FILE = "step.json"
MODEL_STATE, OPTIMIZER_STATE, SCHEDULER_STATE, EMA_STATE, SCALER_STATE = (
    "model",
    "optimizer",
    "lr_scheduler",
    "ema",
    "grad_scaler",
)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read back."""


def rng_state_name(rank: int) -> str:
    return f"rng_state_{rank}"


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
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    ema: Any = None,
    extra_state: dict[str, Any] | None = None,
) -> Path:
    """Saves the training state of every process and (on the main process) the policy, atomically.

    `save_policy(directory)` writes the shareable policy (save_pretrained with EMA weights, train_config.json). Every
    process must call this function: each saves its own RNG state. A failed write (OSError: a full disk, ...) removes
    the temporary folder and raises `CheckpointError` saying what happened; earlier checkpoints are untouched.
    `model` (as prepared by the accelerator), `optimizer`, `lr_scheduler` and `ema` (None without EMA) are saved;
    `extra_state` (JSON values, e.g. how much online data the run had seen) goes into step.json beside the step.
    """
    folder = Path(output_dir) / CHECKPOINTS_DIR
    final = folder / checkpoint_name(step)
    staging = folder / f".tmp_{checkpoint_name(step)}"
    try:
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        accelerator.wait_for_everyone()
        save_training_state(
            accelerator,
            staging / TRAINING_STATE_DIR,
            model=model,
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            ema=ema,
        )
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (staging / TRAINING_STATE_DIR / STEP_FILE).write_text(json.dumps({"step": step, **(extra_state or {})}))
            save_policy(staging / PRETRAINED_DIR)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise CheckpointError(describe_save_error(e, final)) from e
    if accelerator.is_main_process:
        _point_last_link(folder, final.name)
        if keep_last > 0:
            for old in list_checkpoints(output_dir)[:-keep_last]:
                shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(
    accelerator: Accelerator,
    checkpoint: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    ema: Any = None,
) -> int:
    """Restores model, optimizer, LR scheduler, EMA and this process's RNG states; returns the step."""
    state_dir = Path(checkpoint) / TRAINING_STATE_DIR
    step_file = state_dir / STEP_FILE
    if not step_file.is_file():
        raise CheckpointError(f"{checkpoint} is not a complete checkpoint (no {TRAINING_STATE_DIR}/{STEP_FILE})")
    load_training_state(accelerator, state_dir, model=model, optimizer=optimizer, lr_scheduler=lr_scheduler, ema=ema)
    return int(json.loads(step_file.read_text())["step"])


def checkpoint_extra_state(checkpoint: Path) -> dict[str, Any]:
    """What `save_checkpoint(..., extra_state=...)` recorded in the checkpoint's step.json (without the step)."""
    state = json.loads((Path(checkpoint) / TRAINING_STATE_DIR / STEP_FILE).read_text())
    return {key: value for key, value in state.items() if key != "step"}


def _point_last_link(folder: Path, target_name: str) -> None:
    """Repoints checkpoints/last at `target_name` atomically (a new link renamed over the old one)."""
    tmp_link = folder / f".{LAST_LINK}.tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(target_name)
    os.replace(tmp_link, folder / LAST_LINK)


# --- training state: safetensors + JSON -------------------------------------------------------------------------
def save_training_state(
    accelerator: Accelerator,
    folder: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    ema: Any = None,
) -> None:
    """Every process writes its RNG states; the main process also the model (raw weights), the optimizer, the LR
    scheduler, the EMA and the grad scaler (fp16), each as `<name>.safetensors` + `<name>.json`."""
    folder = Path(folder)
    if accelerator.is_main_process:
        folder.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    save_tree(rng_states(), folder, rng_state_name(accelerator.process_index))
    if accelerator.is_main_process:
        save_tree(accelerator.unwrap_model(model).state_dict(), folder, MODEL_STATE)
        save_tree(optimizer.state_dict(), folder, OPTIMIZER_STATE)
        save_tree(lr_scheduler.state_dict(), folder, SCHEDULER_STATE)
        if ema is not None:
            save_tree(ema.state_dict(), folder, EMA_STATE)
        if accelerator.scaler is not None:
            save_tree(accelerator.scaler.state_dict(), folder, SCALER_STATE)


def load_training_state(
    accelerator: Accelerator,
    folder: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: Any,
    ema: Any = None,
) -> None:
    """Restores what `save_training_state` wrote, and this process's RNG states. Reads safetensors and JSON only."""
    folder = Path(folder)
    names = [MODEL_STATE, OPTIMIZER_STATE, SCHEDULER_STATE, rng_state_name(accelerator.process_index)]
    if ema is not None:
        names.append(EMA_STATE)
    missing = [f"{n}.{ext}" for n in names for ext in ("safetensors", "json") if not (folder / f"{n}.{ext}").is_file()]
    if missing:
        legacy = sorted(p.name for p in folder.glob("*") if p.suffix in (".pkl", ".bin", ".pt"))
        hint = (
            f"; it holds {legacy}, the pickle format of older hfpolicy versions, which is never loaded (pickle can "
            "run code): start a new run, or continue from its pretrained_model weights"
            if legacy
            else ""
        )
        raise CheckpointError(f"{folder} lacks {missing}{hint}")
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.load_state_dict(load_tree(folder, MODEL_STATE, device=_device_of(unwrapped)), strict=True)
    optimizer.load_state_dict(load_tree(folder, OPTIMIZER_STATE))
    lr_scheduler.load_state_dict(load_tree(folder, SCHEDULER_STATE))
    if ema is not None:
        ema.load_state_dict(load_tree(folder, EMA_STATE, device=_device_of(unwrapped)))
    if accelerator.scaler is not None and (folder / f"{SCALER_STATE}.json").is_file():
        accelerator.scaler.load_state_dict(load_tree(folder, SCALER_STATE))
    set_rng_states(load_tree(folder, rng_state_name(accelerator.process_index)))


def rng_states() -> dict[str, Any]:
    """This process's random states: Python, numpy, torch CPU and (when present) every CUDA device."""
    version, mt_state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "python": [version, list(mt_state), gauss],
        "numpy": {"kind": kind, "keys": keys, "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    version, mt_state, gauss = states["python"]
    random.setstate((version, tuple(mt_state), gauss))
    n = states["numpy"]
    np.random.set_state((n["kind"], n["keys"], n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(states["torch"].cpu())
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in states["cuda"]])


def _device_of(module: torch.nn.Module) -> torch.device:
    for tensor in module.parameters():
        return tensor.device
    return torch.device("cpu")


def describe_save_error(error: OSError, where: Path) -> str:
    """A one-line cause for a failed checkpoint write: a full disk is said as such."""
    if error.errno == errno.ENOSPC:
        return (
            f"disk full while writing the checkpoint {where}: free some space (or lower --keep_last_checkpoints) and "
            "resume with --resume=true; the previous checkpoints are intact"
        )
    return f"could not write the checkpoint {where} ({error}); the previous checkpoints are intact"
