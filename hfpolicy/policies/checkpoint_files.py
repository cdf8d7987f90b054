"""A saved policy's two files, config.json and model.safetensors: written atomically, and read back with their checks
(valid JSON, readable safetensors, a config that agrees with what the weights were trained as, finite weights)."""

import json
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from torch import Tensor

from hfpolicy.constants import CONFIG_FILE, WEIGHTS_FILE
from hfpolicy.io.atomic import save_safetensors_atomically, write_json_atomically
from hfpolicy.policies.config import PolicyConfig
from hfpolicy.policies.errors import PolicyLoadError
from hfpolicy.policies.module import PolicyModule, WeightsOrigin

WEIGHTS_CONFIG_METADATA = "hfpolicy_config"  # model.safetensors metadata: the config the weights were trained as
WEIGHTS_STEP_METADATA = "hfpolicy_training_step"  # ... the optimizer steps the weights were trained for
WEIGHTS_EMA_METADATA = "hfpolicy_ema_weights"  # ... "true" when they are the EMA of the trained weights


def save_policy_files(policy: PolicyModule, folder: str | Path) -> None:
    """config.json and model.safetensors (weights and normalization stats) of `policy` into `folder`; the weights'
    metadata records the config they were trained as and the policy's `weights_origin` where known."""
    folder, config = Path(folder), policy.config.to_dict()
    write_json_atomically(folder / CONFIG_FILE, config)
    state = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    metadata = {"format": "pt", "policy_type": policy.config.type, WEIGHTS_CONFIG_METADATA: json.dumps(config)}
    origin = policy.weights_origin
    if origin.training_step is not None:
        metadata[WEIGHTS_STEP_METADATA] = str(origin.training_step)
    if origin.ema is not None:
        metadata[WEIGHTS_EMA_METADATA] = json.dumps(origin.ema)
    save_safetensors_atomically(state, folder / WEIGHTS_FILE, metadata=metadata)  # honours the umask


def weights_origin(weights_metadata: dict[str, str]) -> WeightsOrigin:
    """The WeightsOrigin that `save_policy_files` recorded (None for what it did not record)."""
    step, ema = weights_metadata.get(WEIGHTS_STEP_METADATA, ""), weights_metadata.get(WEIGHTS_EMA_METADATA)
    return WeightsOrigin(
        training_step=int(step) if step.isdigit() else None, ema={"true": True, "false": False}.get(ema or "")
    )


def read_config_json(config_path: Path) -> dict[str, Any]:
    try:
        return json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise PolicyLoadError(f"{config_path} is not valid JSON ({e}); re-save or re-download the policy") from e


def read_weights(weights_path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """(the tensors, the file's metadata) of a safetensors file; PolicyLoadError for a damaged one."""
    try:
        state_dict = safetensors.torch.load_file(str(weights_path), device="cpu")
        with safetensors.safe_open(str(weights_path), framework="pt") as weights_file:
            return state_dict, weights_file.metadata() or {}
    except (safetensors.SafetensorError, OSError, ValueError) as e:
        raise PolicyLoadError(
            f"{weights_path} is not a readable safetensors file ({e}); it may be truncated or corrupt: "
            "download it again (delete it from the Hub cache; in Python, force_download=True) or re-save the policy"
        ) from e


def check_config_matches_weights(
    config: PolicyConfig, weights_metadata: dict[str, str], config_path: Path, weights_path: Path
) -> None:
    """Refuses a config.json (or config_overrides) that contradicts the config recorded with the weights in a field
    other than `config.acting_fields` (it would give the weights another meaning). Weights without a record pass."""
    saved_json = weights_metadata.get(WEIGHTS_CONFIG_METADATA)
    if saved_json is None:
        return
    try:
        saved = json.loads(saved_json)
    except json.JSONDecodeError as e:
        raise PolicyLoadError(f"{weights_path}: its config metadata is not valid JSON ({e}); re-save the policy") from e
    current = config.to_dict()
    differing = [
        name
        for name in sorted(set(saved) | set(current))
        if name not in config.acting_fields | config.retired_fields and saved.get(name) != current.get(name)
    ]
    if differing:
        changes = "; ".join(f"{name}: {current.get(name)!r} (trained with {saved.get(name)!r})" for name in differing)
        raise PolicyLoadError(
            f"{config_path} contradicts the weights in {weights_path}, which were trained with other settings: "
            f"{changes}. These fields decide what the weights mean; restore them in config.json (only "
            f"{', '.join(sorted(config.acting_fields))} may be changed after training)"
        )


def check_weights_finite(state_dict: dict[str, Tensor], weights_path: Path) -> None:
    """Refuses weights holding NaN or inf, naming them; all-NaN normalizer buffers (no stats yet) pass."""
    bad = {
        name: int((~torch.isfinite(tensor)).sum())
        for name, tensor in state_dict.items()
        if tensor.is_floating_point()
        and not torch.isfinite(tensor).all()
        and not (name.startswith("normalizer.") and torch.isnan(tensor).all())
    }
    if bad:
        listed = ", ".join(f"{name} ({count} values)" for name, count in list(bad.items())[:5])
        more = f" and {len(bad) - 5} more tensors" if len(bad) > 5 else ""
        raise PolicyLoadError(
            f"{weights_path} holds NaN or inf in {listed}{more}: the file is corrupt or the training diverged; "
            "download it again (delete it from the Hub cache; in Python, force_download=True) or load an earlier checkpoint"
        )
