"""What an evaluation evaluated, kept in its eval_info.json ("provenance"; docs/evaluation.md)."""

from pathlib import Path
from typing import Any

import hfpolicy
from hfpolicy.cli.commands import command_line
from hfpolicy.constants import CONFIG_FILE
from hfpolicy.policies.base import Policy
from hfpolicy.policies.loading import resolve_file, saved_policy_folder


def eval_provenance(
    policy: Policy,
    source: str,
    env_type: str,
    *,
    revision: str | None = None,
    training_step: int | None = None,
    ema: bool | None = None,
    folder: Path | None = None,
) -> dict[str, Any]:
    """The provenance of `policy`, loaded from `source` (a local folder or a Hub repo id at `revision`);
    `training_step`, `ema` and `folder` describe weights in memory (default: what the loaded weights recorded)."""
    origin = policy.weights_origin
    local = Path(source).expanduser()
    provenance: dict[str, Any] = {"policy": source, "policy_type": policy.config.type}
    if folder is not None or (local.is_dir() and training_step is None):
        provenance["folder"] = str(Path(folder or saved_policy_folder(local, say=False)).resolve())
    elif not local.is_dir():  # a Hub repo id: the files were downloaded, so the commit they came from is in the cache
        provenance["revision"] = revision or "main"
        provenance["commit"] = resolve_file(source, CONFIG_FILE, revision=revision).parent.name
    provenance |= {
        "checkpoint_step": origin.training_step if training_step is None else training_step,
        "ema_weights": origin.ema if ema is None else ema,
        "env": env_type,
        "command": command_line(),
        "hfpolicy_version": hfpolicy.__version__,
    }
    return provenance
