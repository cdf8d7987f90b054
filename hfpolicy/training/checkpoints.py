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

The training state is tensors in safetensors files and everything else in JSON (see `hfpolicy.io.tensor_tree`): loading
a checkpoint never unpickles anything, so a planted file in a run folder cannot run code.
"""

import contextlib
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
from accelerate import Accelerator
from safetensors import SafetensorError

from hfpolicy.constants import TRAIN_CONFIG_FILE
from hfpolicy.io.atomic import is_disk_full, write_json_atomically
from hfpolicy.io.staging import shared_staging_destination, shared_staging_path, shared_staging_pattern
from hfpolicy.io.tensor_tree import load_tree, save_tree
from hfpolicy.policies.ema import EMA
from hfpolicy.runs.run_folder import (  # noqa: F401 (CHECKPOINTS_DIR, list_checkpoints: re-exported)
    CHECKPOINTS_DIR,
    PRETRAINED_DIR,
    RunFolder,
    list_checkpoints,
)
from hfpolicy.training.config import TrainConfig, train_config_to_dict

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


STAGING_TAG = "saving"  # a checkpoint being written: .step_000500.saving/ (io.staging.shared_staging_path)
_LEGACY_STAGING = ".tmp_step_*"  # the staging name before io.staging's: a run killed then, resumed now, may have one


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
    run = RunFolder(output_dir)
    final = run.checkpoint_dir(step)
    folder = final.parent
    staging = shared_staging_path(final, STAGING_TAG)  # one name for every rank (the run lock: no other writer)
    try:
        if accelerator.is_main_process:
            for stale in [*folder.glob(shared_staging_pattern(STAGING_TAG)), *folder.glob(_LEGACY_STAGING)]:
                shutil.rmtree(stale, ignore_errors=True)  # a killed save's
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
    except BaseException as e:  # a full disk (OSError; safetensors' errors arrive as OSError too), an interrupt
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, OSError | SafetensorError):
            raise CheckpointError(describe_save_error(e, final, run)) from e
        raise
    if accelerator.is_main_process:
        run.point_last_link(final)
        run.drop_old_checkpoints(keep_last)
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
    try:
        if not step_file.is_file():
            raise CheckpointError(f"{checkpoint} is not a complete checkpoint (no {TRAINING_STATE_DIR}/{STEP_FILE})")
        try:
            step = int(json.loads(step_file.read_text())["step"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{step_file} is damaged ({e})") from e
        load_training_state(
            accelerator, state_dir, model=model, optimizer=optimizer, lr_scheduler=lr_scheduler, ema=ema
        )
    except CheckpointError as e:
        raise CheckpointError(f"{e}; {_earlier_checkpoint_hint(Path(checkpoint))}") from e
    return step


def _earlier_checkpoint_hint(checkpoint: Path) -> str:
    """What to do about a checkpoint that cannot be resumed from: the newest earlier one that is intact, if any."""
    earlier = [c for c in list_checkpoints(checkpoint.parent.parent) if c.name < checkpoint.name]
    good = next((c for c in reversed(earlier) if checkpoint_problem(c) is None), None)
    if good is None:
        return "no earlier intact checkpoint is left: start the run again without --resume (in a new --output_dir)"
    return (
        f"the previous checkpoint {good.name} is intact: move {checkpoint.name} (and any later one) out of "
        f"{checkpoint.parent} and resume again with --resume=true"
    )


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from or shared (files missing or unreadable, weights NaN or inf), or None
    when its weights read back finite. Reads the tensors, not the optimizer's JSON: cheap enough for an error path."""
    checkpoint = Path(checkpoint)
    files = [
        checkpoint / TRAINING_STATE_DIR / f"{MODEL_STATE}.safetensors",
        checkpoint / PRETRAINED_DIR / "model.safetensors",
    ]
    for path in files:
        try:
            tensors = safetensors.torch.load_file(str(path))
        except (SafetensorError, OSError) as e:
            return f"{path} cannot be read ({e})"
        bad = [name for name, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
        if bad and not all(n.startswith("normalizer.") and torch.isnan(tensors[n]).all() for n in bad):
            return f"{path} holds NaN or inf (in {bad[0]})"
    return None


def latest_good_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint whose weights read back finite (see `checkpoint_problem`)."""
    return next((c for c in reversed(list_checkpoints(output_dir)) if checkpoint_problem(c) is None), None)


def checkpoint_extra_state(checkpoint: Path) -> dict[str, Any]:
    """What `save_checkpoint(..., extra_state=...)` recorded in the checkpoint's step.json (without the step)."""
    state = json.loads((Path(checkpoint) / TRAINING_STATE_DIR / STEP_FILE).read_text())
    return {key: value for key, value in state.items() if key != "step"}


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
    device = _device_of(unwrapped)
    model_state = _restore(folder, MODEL_STATE, lambda state: unwrapped.load_state_dict(state, strict=True), device)
    bad = [k for k, t in model_state.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad and not all(k.startswith("normalizer.") and torch.isnan(model_state[k]).all() for k in bad):
        raise CheckpointError(f"{folder / MODEL_STATE}.safetensors holds NaN or inf weights (in {bad[0]})")
    _restore(folder, OPTIMIZER_STATE, optimizer.load_state_dict)
    _restore(folder, SCHEDULER_STATE, lr_scheduler.load_state_dict)
    if ema is not None:
        _restore(folder, EMA_STATE, ema.load_state_dict, device)
    if accelerator.scaler is not None and (folder / f"{SCALER_STATE}.json").is_file():
        _restore(folder, SCALER_STATE, accelerator.scaler.load_state_dict)
    _restore(folder, rng_state_name(accelerator.process_index), set_rng_states)


def _restore(folder: Path, name: str, apply: Callable[[Any], Any], device: Any = "cpu") -> Any:
    """Reads `<name>.safetensors` + `.json` and hands the object to `apply`; a damaged file (unreadable, invalid
    JSON, a structure that does not fit) raises CheckpointError naming it. Returns the object read."""
    try:
        state = load_tree(folder, name, device=device)
        apply(state)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        raise CheckpointError(f"{folder / name}.safetensors/.json is damaged ({type(e).__name__}: {e})") from e
    return state


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


def describe_save_error(error: OSError | SafetensorError, where: Path, run: RunFolder) -> str:
    """A one-line cause for a failed checkpoint write of `run`: a full disk is said as such, with the way to continue
    that exists (a resume only when a checkpoint was kept)."""
    if is_disk_full(error):
        lower = " (or lower --keep_last_checkpoints)" if run.latest_checkpoint() is not None else ""
        return f"disk full while writing the checkpoint {where}: free some space{lower} and {run.how_to_continue()}"
    return f"could not write the checkpoint {where} ({error}); {run.how_to_continue()}"


def save_shareable_policy(
    accelerator: Accelerator, policy: torch.nn.Module, ema: EMA | None, cfg: TrainConfig, folder: Path
) -> None:
    """save_pretrained with the EMA weights (when EMA is on) and the train_config.json beside them."""
    model = accelerator.unwrap_model(policy)
    card = {"repo_id": str(published_path(folder))}  # the card loads it from where it ends up, not the staging folder
    with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
        model.save_pretrained(folder, model_card_kwargs=card)
    write_json_atomically(folder / TRAIN_CONFIG_FILE, train_config_to_dict(cfg))


def published_path(path: Path) -> Path:
    """Where `path`, inside a checkpoint being assembled (.step_N.saving/...), will be once it is renamed into place."""
    return Path(*(shared_staging_destination(part, STAGING_TAG) for part in Path(path).parts))
