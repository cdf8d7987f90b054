"""`hfpolicy record`: demonstrations from a scripted expert (hfpolicy.experts), written as a LeRobot v3.0 dataset.

    config.py          RecordConfig (the flags) and EnvRecorder, what one env's recorder gives the loop
    recording.py       the one episode loop, the writer and the push; `record`, `hfpolicy record`, and the
                       recording `--dataset.scripted_episodes` trains on (`scripted_recording`)
    pusht.py, aloha.py, xarm.py   each env's recorder: its expert, features, task and what a frame observes
    scripted_cache.py  where those training recordings live ($HFPOLICY_CACHE) and the check that one is what is asked

    from hfpolicy.record import RecordConfig, record
    record(RecordConfig(n_episodes=10, output_dir="data/pusht_scripted_10"))

The names below are imported on first use, so that reading the flags (`hfpolicy record --help`, `hfpolicy train
--help`) does not wait for the recording's dependencies.
"""

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
