"""Flags on `--resume=true`: those that only say how long, how often or how fast may change (printed, and kept in
resume_history.json); any other change would give a run that is neither the old one nor a new one, so it is
refused, naming each flag, the run's value and the value given.
"""

import json
import time
from pathlib import Path
from typing import Any

from hfpolicy.cli.flags import value_words
from hfpolicy.io.atomic import write_json_atomically
from hfpolicy.training.config import TrainConfig, TrainConfigError, train_config_to_dict

# Flags that may change on resume (a name, or a prefix ending in "."): how long, how often, how fast, where to push.
MAY_CHANGE = (
    "steps",  # trains longer (or stops sooner); the LR schedule then spans the new --steps (resume_history.json)
    "budget.",  # how long to train too; a choice already made is kept unless --budget.chosen_steps=null
    "save_freq",
    "save_every_minutes",
    "keep_last_checkpoints",
    "log_freq",
    "tracker",
    "progress",
    "num_threads",
    "num_workers",  # the batches are drawn by the sampler in the main process: the same with any number of workers
    "compile",  # the same function, compiled or not
    "dataset.stream_ram_gb",  # streaming: how much is cached, not what is read
    "dataset.stream_disk_gb",
    "dataset.stream_retries",
    "dataset.stream_video",  # streaming: how the video bytes are read, not which frames
    "eval.",  # how the policy is measured, not how it is trained
    "hub.",
    "policy.device",
    "output_dir",  # the run's own folder, however it is written
    "resume",
)
# Descriptive fields that keep the run's first value (examples/train_pusht.py passes its recipe again on a resume).
KEPT = ("recipe", "recipe_reason")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"policy": {"type": "act"}} -> {"policy.type": "act"} (lists stay values)."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and not key.endswith("features"):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def may_change(name: str) -> bool:
    return any(name == allowed or (allowed.endswith(".") and name.startswith(allowed)) for allowed in MAY_CHANGE)


def changed_fields(cfg: TrainConfig, saved_file: Path) -> dict[str, tuple[Any, Any]]:
    """{flag name: (the run's value, the value given)} of every field that differs from the run's train_config.json."""
    saved = flatten(json.loads(saved_file.read_text()))
    now = flatten(json.loads(json.dumps(train_config_to_dict(cfg))))  # tuples as lists, as the saved JSON has them
    # a field newer than the run (absent from its file) is no change while it holds its default
    default = flatten(json.loads(json.dumps(train_config_to_dict(TrainConfig(policy=type(cfg.policy)())))))
    missing = object()
    return {
        name: (saved.get(name), value)
        for name, value in now.items()
        if name not in KEPT
        and saved.get(name, missing) != value
        and not (name not in saved and (value is None or value == default.get(name, missing)))
    }


def check_resume_flags(cfg: TrainConfig, saved_file: Path) -> dict[str, tuple[Any, Any]]:
    """The changes a resume may make ({flag: (old, new)}); TrainConfigError naming every flag that must not change.
    A run without train_config.json (none to compare) gives no changes."""
    if not saved_file.is_file():
        return {}
    changes = changed_fields(cfg, saved_file)
    refused = {name: values for name, values in changes.items() if not may_change(name)}
    if refused:
        listed = ", ".join(
            f"--{name}={value_words(new)} (the run has {value_words(old)})" for name, (old, new) in refused.items()
        )
        raise TrainConfigError(
            f"--resume=true continues the run in {saved_file.parent} exactly as it was set up, and these flags would "
            f"change it: {listed}; drop them to resume (the run's train_config.json sets them), or train with them "
            "as a new run in another --output_dir"
        )
    return {name: values for name, values in changes.items() if name not in ("output_dir", "resume")}


def record_resume(t, history_file: Path, changes: dict[str, tuple[Any, Any]]) -> None:
    """Appends this resume to resume_history.json (the step, the time, the changed flags and, when --steps changed,
    the learning rate the schedule now gives) and prints the changes."""
    entry: dict[str, Any] = {
        "step": t.start_step,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "changed": {name: {"was": old, "now": new} for name, (old, new) in changes.items()},
    }
    if "steps" in changes:
        scheduler = t.lr_scheduler
        entry["lr"] = {
            "was": scheduler.get_last_lr()[0],
            "now": scheduler.base_lrs[0] * scheduler.lr_lambdas[0](t.start_step),
            "note": f"the {t.cfg.policy.scheduler_name} LR schedule now spans --steps={t.cfg.steps}",
        }
    history = json.loads(history_file.read_text()) if history_file.is_file() else []
    write_json_atomically(history_file, [*history, entry])
    if changes:
        said = ", ".join(
            f"--{name}={value_words(new)} (was {value_words(old)})" for name, (old, new) in changes.items()
        )
        print(f"resuming at step {t.start_step} with {said} (kept in {history_file.name})", flush=True)
