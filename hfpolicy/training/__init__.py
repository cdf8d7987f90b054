"""Training a policy, one module a job:

    loop.py         `train(cfg)` and the loop itself, top to bottom
    setup.py        `build_training`: accelerator, data, policy, optimizer, resume (bad input fails here)
    data.py         `load_training_data`: the run's datasets (one or several, in memory or streamed) as one, its
                    sampler and DataLoader
    progress.py     running means, the NaN/inf guard, the time-left clock, log entries
    budget.py       --budget.minutes: the steps that fit, chosen once from the measured step time, recorded
    config.py       TrainConfig and its parts, validation, train_config.json
    checkpoints.py  atomic, pickle-free checkpoints and exact resume
    stopping.py     Ctrl-C / SIGTERM: a checkpoint of the current step; the --save_every_minutes timer
    resume_flags.py which flags a resume may change (refused or recorded in resume_history.json)
    launch.py       `--num_processes=N` of examples/train_pusht.py: flags checked, then accelerate launch
    recipes.py      typed presets of `hfpolicy train` flags and the run of examples/train_pusht.py, train_aloha.py
    cli.py          `hfpolicy train`

The run folder's layout and lock, its metrics.jsonl and the training curve are hfpolicy.runs (hub and the viewer
read runs too).

The names below are imported on first use, so `hfpolicy train --help` does not import torch.
"""

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
