"""`hfpolicy record`: demonstrations from a scripted expert (hfpolicy.experts), written as a LeRobot v3.0 dataset:
`record(RecordConfig(n_episodes=10, output_dir="data/pusht_scripted_10"))`. The names below are imported on first use,
so that `hfpolicy record --help` and `hfpolicy train --help` do not wait for the recording's dependencies."""

import importlib

_EXPORTS = {
    "RecordConfig": "config",
    "DemonstratorConfig": "config",
    "record": "recording",
    "record_command": "recording",
    "RecordWriteError": "recording",
    "main": "recording",
    "scripted_recording": "recording",
    "scripted_dataset_root": "scripted_cache",
    "scripted_task_label": "scripted_cache",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
