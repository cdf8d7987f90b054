"""Fault cases of the commands that write folders (record, convert, eval, export): each holds its folder for its
lifetime, refuses a folder in use, replaces only its own kind of output, and leaves no staging behind (the next run
removes that of dead processes)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from policies.toy_policy import make_toy_policy

from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.datasets import DatasetWriter, PolicyDataset
from hfpolicy.eval import main as eval_main
from hfpolicy.io.run_lock import RunLock, RunLockedError
from hfpolicy.io.staging import Staging, remove_stale_staging
from hfpolicy.record import main as record_main

ROOT = Path(__file__).resolve().parents[1]
FEATURES = {"action": {"dtype": "float32", "shape": [2], "names": None}}
RECORD = ["--max_steps=5", "--images=false", "--environment_state=true", "--progress=false"]


def tiny_dataset(root: Path, n_frames: int, **kwargs) -> Path:
    with DatasetWriter.create(root, "user/x", 10, FEATURES, **kwargs) as writer:
        for i in range(n_frames):
            writer.add_frame({"action": np.array([i, 0], np.float32)}, task="t")
        writer.save_episode()
    return root


def env_with_worktree() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_two_writers_of_one_new_folder_the_second_is_refused(tmp_path, capsys):
    root = tmp_path / "ds"
    first = DatasetWriter.create(root, "user/x", 10, FEATURES)  # holds root until finish()
    with pytest.raises(RunLockedError, match="in use"):
        DatasetWriter.create(root, "user/x", 10, FEATURES)
    assert record_main([f"--output_dir={root}", "--n_episodes=1", *RECORD]) == 2  # the CLI: one line, exit 2
    err = capsys.readouterr().err
    assert "is in use by another run" in err and err.count("\n") == 1
    first.add_frame({"action": np.zeros(2, np.float32)}, task="t")
    first.save_episode()
    first.finish()
    assert PolicyDataset("user/x", root=root).num_frames == 1  # the first dataset, not replaced by anyone
    assert sorted(os.listdir(tmp_path)) == ["ds"] and ".hfpolicy.lock" not in os.listdir(root)


def test_overwrite_replaces_only_a_folder_that_is_provably_a_dataset(tmp_path, capsys):
    fake = tmp_path / "fake"
    (fake / "meta").mkdir(parents=True)
    (fake / "meta" / "info.json").write_text("{}")
    (fake / "thesis.tex").write_text("years of work")
    args = [f"--output_dir={fake}", "--n_episodes=1", "--overwrite=true", *RECORD]
    assert record_main(args) == 2
    err = capsys.readouterr().err
    assert "is not a LeRobot dataset (thesis.tex, meta/info.json without codebase_version and features)" in err
    assert (fake / "thesis.tex").read_text() == "years of work"

    inside = tiny_dataset(tmp_path / "ds", 3)
    (inside / "data" / "notes.txt").write_text("mine")  # a user's file inside a real dataset
    with pytest.raises(FileExistsError, match="data/notes.txt"):
        tiny_dataset(inside, 2, overwrite=True)
    (inside / "data" / "notes.txt").unlink()
    tiny_dataset(inside, 2, overwrite=True)  # a dataset, and nothing else: replaced
    assert PolicyDataset("user/x", root=inside).num_frames == 2
    assert sorted(os.listdir(tmp_path)) == ["ds", "fake"]


def test_a_killed_recording_leaves_staging_that_the_next_run_removes(tmp_path, capsys):
    root = tmp_path / "ds"
    argv = [sys.executable, "-m", "hfpolicy.cli", "record", f"--output_dir={root}", "--n_episodes=100000", *RECORD]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(argv, env=env_with_worktree(), stderr=subprocess.PIPE, text=True)
        try:  # a failed assertion must not leave the 100000-episode recording running
            deadline = time.monotonic() + 180  # a loaded machine: imports alone can take a minute
            while not list(tmp_path.glob(".ds.writing-*/data")) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert list(tmp_path.glob(".ds.writing-*/data")), "the recording never started"
            proc.send_signal(sig)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        staging = list(tmp_path.glob(".ds.writing-*"))
        if sig != signal.SIGKILL:  # caught: the recording cleans up after itself, and says why it stopped
            assert proc.returncode == 128 + sig and staging == [] and not root.exists()
            assert proc.stderr.read().splitlines()[-1].startswith("hfpolicy record: stopped by ")
        else:  # cannot be caught: the staging stays, its lock free
            assert proc.returncode == -9 and len(staging) == 1
    capsys.readouterr()
    assert record_main([f"--output_dir={root}", "--n_episodes=1", *RECORD]) == 0  # the folder holding a dead lock
    assert sorted(os.listdir(tmp_path)) == ["ds"]  # the dead recording's staging is gone
    said = [line for line in capsys.readouterr().out.splitlines() if "interrupted recording" in line]
    assert len(said) == 1 and ".ds.writing-" in said[0] and "its writer is gone" in said[0]
    assert PolicyDataset("x", root=root).num_episodes == 1


def test_a_killed_scripted_recording_is_recorded_again_by_the_next_run(tmp_path, capsys):
    """kill -9 while `--dataset.scripted_episodes` records (examples/train_pusht.py --recipe=cpu does): the next run
    removes the dead writer's staging folder and the empty folder it held, says so, and records again."""
    from hfpolicy.datasets import DatasetMeta
    from hfpolicy.training import record_scripted_dataset
    from hfpolicy.training.config import DatasetConfig

    root = tmp_path / "pusht_scripted_2"
    script = f"from hfpolicy.record import scripted_recording; scripted_recording(100000, {str(root)!r}, False)"
    proc = subprocess.Popen([sys.executable, "-c", script], env=env_with_worktree())
    deadline = time.monotonic() + 180  # a loaded machine: imports alone can take a minute
    while not list(tmp_path.glob(".pusht_scripted_2.writing-*/data")) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.kill()
    assert proc.wait(60) == -9
    assert root.is_dir() and len(list(tmp_path.glob(".pusht_scripted_2.writing-*"))) == 1, "it never started"

    capsys.readouterr()
    assert record_scripted_dataset(DatasetConfig(scripted_episodes=2, root=str(root)), progress=False) == root
    assert DatasetMeta.load(root).total_episodes == 2 and sorted(os.listdir(tmp_path)) == [root.name]
    said = [line for line in capsys.readouterr().out.splitlines() if "interrupted recording" in line]
    assert len(said) == 1 and ".pusht_scripted_2.writing-" in said[0] and "pusht_scripted_2)" in said[0]


def test_stale_staging_is_removed_only_when_its_owner_is_dead(tmp_path):
    live = Staging.create(tmp_path / "out", "partial")
    dead = tmp_path / ".out.partial-1-dead"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"x" * 100)
    assert remove_stale_staging(tmp_path / "out", "partial") == [dead]
    assert live.path.is_dir() and not dead.exists()
    live.discard()
    assert os.listdir(tmp_path) == []


def test_two_evals_into_one_folder(tmp_path, capsys):
    policy = make_toy_policy("environment_state_agent_pos", initial_gain=0.8)
    policy.save_pretrained(tmp_path / "policy")
    out = tmp_path / "eval"
    argv = [f"--policy.path={tmp_path / 'policy'}", f"--output_dir={out}", "--env.episode_length=4", "--num_threads=1"]
    argv += ["--progress=false", "--eval.n_episodes=2", "--eval.n_videos=1", "--env.render_size=96"]
    assert eval_main(argv) == 0
    first = (out / EVAL_INFO_FILE).read_text()

    held = RunLock(out).acquire()  # another evaluation running there
    try:
        assert eval_main([*argv, "--overwrite=true"]) == 2
        assert "is in use by another run" in capsys.readouterr().err
    finally:
        held.release()
    assert eval_main(argv) == 2  # a finished evaluation is there: refused, kept whole
    err = capsys.readouterr().err
    assert "holds another evaluation (eval_info.json, episodes.jsonl, videos/ (1 mp4))" in err
    assert "--overwrite=true" in err and (out / EVAL_INFO_FILE).read_text() == first

    (out / ".eval_info.json.99999.tmp").write_text("{")  # a dead eval's temporary file
    assert eval_main([*argv[:-3], "--eval.n_episodes=1", "--eval.n_videos=0", "--overwrite=true"]) == 0
    assert json.loads((out / EVAL_INFO_FILE).read_text())["aggregated"]["n_episodes"] == 1
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 1  # the old run's records are gone, all of them
    assert not (out / "videos" / "eval_episode_0.mp4").exists()  # and its videos
    assert not list(out.glob(".*.tmp"))


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    from hfpolicy.io import atomic as atomic_files

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic_files.write_json_atomically(tmp_path / "eval_info.json", {"a": 1})
    assert os.listdir(tmp_path) == []
