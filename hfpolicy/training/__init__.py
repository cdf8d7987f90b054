"""Training a policy: `train(cfg)` and `hfpolicy train` (docs/design.md lists the modules). The names below are
imported on first use, so `hfpolicy train --help` does not import torch."""

import importlib

_EXPORTS = {
    "train": "loop",
    "TrainResult": "loop",
    "main": "cli",
    "build_training": "setup",
    "make_optimizer": "setup",
    "record_scripted_dataset": "data",
    "TrainingClock": "progress",
    "TrainingDivergedError": "progress",
    "format_duration": "progress",
    "TrainConfig": "config",
    "TrainConfigError": "config",
    "DatasetConfig": "config",
    "HubConfig": "config",
    "TrainEvalConfig": "config",
    "describe_dataset": "config",
    "parse_train_config": "config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
