"""Training checkpoints: written atomically, the last K kept, and loaded back for an exact resume.

    <output_dir>/checkpoints/step_000500/
        pretrained_model/   config.json, model.safetensors (EMA weights when EMA is on), train_config.json
        training_state/     model, optimizer, lr_scheduler, rng_state_<rank> (.safetensors + .json); ema.json, step.json
    <output_dir>/checkpoints/last -> step_000500

Tensors go to safetensors, the rest to JSON: loading never unpickles anything. ema.json refers to the EMA weights in
pretrained_model/ (docs/training.md#what-a-checkpoint-takes).
"""

import contextlib
import hashlib
import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
from accelerate import Accelerator
from safetensors import SafetensorError

from hfpolicy.constants import TRAIN_CONFIG_FILE, WEIGHTS_FILE
from hfpolicy.io.atomic import is_disk_full, write_json_atomically
from hfpolicy.io.paths import contained_path
from hfpolicy.io.staging import shared_staging_destination, shared_staging_path, shared_staging_pattern
from hfpolicy.io.tensor_tree import load_tree, save_tree
from hfpolicy.policies.ema import EMA
from hfpolicy.policies.module import WeightsOrigin
from hfpolicy.runs.run_folder import CHECKPOINTS_DIR, PRETRAINED_DIR, RunFolder, list_checkpoints  # noqa: F401 (re-exported)
from hfpolicy.training.config import TrainConfig, train_config_to_dict
from hfpolicy.words import byte_size

TRAINING_STATE_DIR = "training_state"
STEP_FILE = "step.json"
MODEL_STATE = "model"
OPTIMIZER_STATE = "optimizer"
SCHEDULER_STATE = "lr_scheduler"
EMA_STATE = "ema"
SCALER_STATE = "grad_scaler"
EMA_WEIGHTS_FILE = "weights_file"  # ema.json: the file holding the EMA weights, relative to the checkpoint folder
EMA_WEIGHTS_SHA256 = "weights_sha256"  # ema.json: that file's sha256 when the reference was written
POLICY_WEIGHTS = f"{PRETRAINED_DIR}/{WEIGHTS_FILE}"  # where a checkpoint keeps the shareable (EMA) weights


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
    extra_state: dict[str, Any] | None = None,
    **state: Any,
) -> Path:
    """Saves `save_policy(folder)`'s shareable policy, then every process's training state (`state`: the model,
    optimizer, lr_scheduler and ema) and `extra_state` (JSON, into step.json), atomically; every process calls it."""
    run = RunFolder(output_dir)
    final = run.checkpoint_dir(step)
    folder = final.parent
    staging = shared_staging_path(final, STAGING_TAG)  # one name for every rank (the run lock: no other writer)
    try:
        if accelerator.is_main_process:
            for stale in [*folder.glob(shared_staging_pattern(STAGING_TAG)), *folder.glob(_LEGACY_STAGING)]:
                shutil.rmtree(stale, ignore_errors=True)  # a killed save's
            staging.mkdir(parents=True)
            save_policy(staging / PRETRAINED_DIR)  # first: the training state refers to its EMA weights
        accelerator.wait_for_everyone()
        save_training_state(accelerator, staging / TRAINING_STATE_DIR, ema_weights=staging / POLICY_WEIGHTS, **state)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (staging / TRAINING_STATE_DIR / STEP_FILE).write_text(json.dumps({"step": step, **(extra_state or {})}))
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


def load_checkpoint(accelerator: Accelerator, checkpoint: Path, **state: Any) -> int:
    """Restores the training state (`state`: the model, optimizer, lr_scheduler and ema); the checkpoint's step."""
    state_dir = Path(checkpoint) / TRAINING_STATE_DIR
    step_file = state_dir / STEP_FILE
    try:
        if not step_file.is_file():
            raise CheckpointError(f"{checkpoint} is not a complete checkpoint (no {TRAINING_STATE_DIR}/{STEP_FILE})")
        try:
            step = int(json.loads(step_file.read_text())["step"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{step_file} is damaged ({e})") from e
        load_training_state(accelerator, state_dir, **state)
    except CheckpointError as e:
        raise CheckpointError(f"{e}; {_earlier_checkpoint_hint(Path(checkpoint))}") from e
    return step


def _earlier_checkpoint_hint(checkpoint: Path) -> str:
    """What to do about a checkpoint that cannot be resumed from: the newest earlier one that is intact, if any."""
    good = latest_good_checkpoint(checkpoint.parent.parent, before=checkpoint.name)
    if good is None:
        return "no earlier intact checkpoint is left: start the run again without --resume (in a new --output_dir)"
    return (
        f"the previous checkpoint {good.name} is intact: move {checkpoint.name} (and any later one) out of "
        f"{checkpoint.parent} and resume again with --resume=true"
    )


def checkpoint_size_line(checkpoint: Path, keep_last: int) -> str:
    """ "checkpoint: 5.61 MB each, ~16.8 MB for the 3 kept", said at a run's first save."""
    size = sum(path.stat().st_size for path in Path(checkpoint).rglob("*") if path.is_file())
    if keep_last > 0:
        kept = f"~{byte_size(size * keep_last)} for the {keep_last} kept (--keep_last_checkpoints)"
    else:
        kept = "all of them kept (--keep_last_checkpoints=0)"
    return f"checkpoint: {byte_size(size)} each, {kept}"


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from or shared (weights unreadable, NaN or inf), or None."""
    for path in (checkpoint / TRAINING_STATE_DIR / f"{MODEL_STATE}.safetensors", checkpoint / POLICY_WEIGHTS):
        try:
            bad = nonfinite_weight(safetensors.torch.load_file(str(path)))
        except (SafetensorError, OSError) as e:
            return f"{path} cannot be read ({e})"
        if bad is not None:
            return f"{path} holds NaN or inf (in {bad})"
    return None


def nonfinite_weight(tensors: dict[str, torch.Tensor]) -> str | None:
    """The first weight holding NaN or inf, or None (a normalizer's all-NaN "no stats" marker is fine)."""
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad and not all(name.startswith("normalizer.") and torch.isnan(tensors[name]).all() for name in bad):
        return bad[0]
    return None


def latest_good_checkpoint(output_dir: Path, before: str | None = None) -> Path | None:
    """The newest checkpoint (named before `before`, if given) whose weights read back finite."""
    earlier = [c for c in list_checkpoints(output_dir) if before is None or c.name < before]
    return next((c for c in reversed(earlier) if checkpoint_problem(c) is None), None)


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
    ema_weights: Path | None = None,
) -> None:
    """Every process writes its RNG states, the main process the rest; ema.json refers to `ema_weights` (a file of the
    checkpoint) instead of a copy when it holds exactly the EMA's weights."""
    if accelerator.is_main_process:
        folder.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    save_tree(rng_states(), folder, rng_state_name(accelerator.process_index))
    if accelerator.is_main_process:
        save_tree(accelerator.unwrap_model(model).state_dict(), folder, MODEL_STATE)
        save_tree(optimizer.state_dict(), folder, OPTIMIZER_STATE)
        save_tree(lr_scheduler.state_dict(), folder, SCHEDULER_STATE)
        if ema is not None:
            if ema_weights is not None and holds_weights(ema_weights, ema.shadow):
                save_ema_reference(ema, folder, ema_weights)
            else:  # no such file, or other weights in it: the EMA keeps its own copy
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
    names = [MODEL_STATE, OPTIMIZER_STATE, SCHEDULER_STATE, rng_state_name(accelerator.process_index)]
    if ema is not None:
        names.append(EMA_STATE)
    missing = [
        f"{n}.{ext}"
        for n in names
        for ext in ("safetensors", "json")
        if not (folder / f"{n}.{ext}").is_file() and not (n == EMA_STATE and ext == "safetensors" and refers(folder))
    ]
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
    device = next((p.device for p in unwrapped.parameters()), torch.device("cpu"))
    model_state = _restore(folder, MODEL_STATE, lambda state: unwrapped.load_state_dict(state, strict=True), device)
    bad = nonfinite_weight(model_state)
    if bad is not None:
        raise CheckpointError(f"{folder / MODEL_STATE}.safetensors holds NaN or inf weights (in {bad})")
    _restore(folder, OPTIMIZER_STATE, optimizer.load_state_dict)
    _restore(folder, SCHEDULER_STATE, lr_scheduler.load_state_dict)
    if ema is not None:
        if refers(folder):
            load_ema_reference(ema, folder, device)
        else:  # a checkpoint of an older hfpolicy: the EMA weights copied into ema.safetensors
            _restore(folder, EMA_STATE, ema.load_state_dict, device)
    if accelerator.scaler is not None and (folder / f"{SCALER_STATE}.json").is_file():
        _restore(folder, SCALER_STATE, accelerator.scaler.load_state_dict)
    _restore(folder, rng_state_name(accelerator.process_index), set_rng_states)


def _restore(folder: Path, name: str, apply: Callable[[Any], Any], device: Any = "cpu") -> Any:
    """The object in `<name>.safetensors` + `.json`, handed to `apply`; CheckpointError naming a damaged file."""
    try:
        state = load_tree(folder, name, device=device)
        apply(state)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        raise CheckpointError(f"{folder / name}.safetensors/.json is damaged ({type(e).__name__}: {e})") from e
    return state


# --- the EMA weights, stored once ------------------------------------------------------------------------------
def holds_weights(path: Path, weights: dict[str, torch.Tensor]) -> bool:
    """Whether the safetensors file at `path` holds exactly `weights`, bit for bit (so a NaN equals itself)."""
    if not Path(path).is_file():
        return False
    saved = safetensors.torch.load_file(str(path))

    def bits(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)

    return saved.keys() == weights.keys() and all(
        saved[name].dtype == tensor.dtype
        and saved[name].shape == tensor.shape
        and torch.equal(bits(saved[name]), bits(tensor))
        for name, tensor in weights.items()
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def save_ema_reference(ema: EMA, folder: Path, weights: Path) -> None:
    """ema.json: the EMA's counters and settings, and the file that holds its weights, with its sha256."""
    state = {key: value for key, value in ema.state_dict().items() if key != "shadow"}
    state[EMA_WEIGHTS_FILE] = Path(weights).relative_to(Path(folder).parent).as_posix()
    state[EMA_WEIGHTS_SHA256] = file_sha256(weights)
    write_json_atomically(folder / f"{EMA_STATE}.json", state)


def refers(folder: Path) -> bool:
    """Whether the training state in `folder` refers to the policy's weights for its EMA (False: an older copy)."""
    if (folder / f"{EMA_STATE}.safetensors").is_file() or not (folder / f"{EMA_STATE}.json").is_file():
        return False
    try:
        state = json.loads((folder / f"{EMA_STATE}.json").read_text())
    except (OSError, ValueError):
        return True  # load_ema_reference names the damage
    return not isinstance(state, dict) or EMA_WEIGHTS_FILE in state


def load_ema_reference(ema: EMA, folder: Path, device: Any) -> None:
    """Restores the EMA from ema.json and the weights file it names, once the file's sha256 is the one recorded."""
    path = folder / f"{EMA_STATE}.json"
    try:
        state = json.loads(path.read_text())
        weights = contained_path(folder.parent, state.pop(EMA_WEIGHTS_FILE), what=f"{path}'s {EMA_WEIGHTS_FILE}")
        expected = state.pop(EMA_WEIGHTS_SHA256)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path} is damaged ({type(e).__name__}: {e})") from e
    if not weights.is_file() or file_sha256(weights) != expected:
        what = "is missing" if not weights.is_file() else "is not the file it was saved with (its sha256 differs)"
        raise CheckpointError(
            f"{weights}, which holds this checkpoint's EMA weights ({path}), {what}: its EMA cannot be restored"
        )
    try:
        ema.load_state_dict({**state, "shadow": safetensors.torch.load_file(str(weights), device=str(device))})
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"{weights} does not restore the EMA of {path} ({type(e).__name__}: {e})") from e


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


def describe_save_error(error: OSError | SafetensorError, where: Path, run: RunFolder) -> str:
    """A one-line cause for a failed checkpoint write of `run`, with the way to continue that exists."""
    if is_disk_full(error):
        lower = " (or lower --keep_last_checkpoints)" if run.latest_checkpoint() is not None else ""
        return f"disk full while writing the checkpoint {where}: free some space{lower} and {run.how_to_continue()}"
    return f"could not write the checkpoint {where} ({error}); {run.how_to_continue()}"


@contextlib.contextmanager
def shareable_policy(accelerator: Accelerator, policy: torch.nn.Module, ema: EMA | None, step: int) -> Iterator[Any]:
    """The unwrapped policy with the EMA weights (when EMA is on) within the block, recorded as those of `step`."""
    model = accelerator.unwrap_model(policy)
    model.weights_origin = WeightsOrigin(training_step=step, ema=ema is not None)
    with ema.applied_to(model) if ema is not None else contextlib.nullcontext():
        yield model


def save_shareable_policy(
    accelerator: Accelerator, policy: torch.nn.Module, ema: EMA | None, cfg: TrainConfig, folder: Path, step: int
) -> None:
    """save_pretrained of the `shareable_policy`, and the train_config.json beside it."""
    card = {"repo_id": str(published_path(folder))}  # the card loads it from where it ends up, not the staging folder
    with shareable_policy(accelerator, policy, ema, step) as model:
        model.save_pretrained(folder, model_card_kwargs=card)
    write_json_atomically(folder / TRAIN_CONFIG_FILE, train_config_to_dict(cfg))


def published_path(path: Path) -> Path:
    """Where `path`, inside a checkpoint being assembled (.step_N.saving/...), will be once it is renamed into place."""
    return Path(*(shared_staging_destination(part, STAGING_TAG) for part in Path(path).parts))
