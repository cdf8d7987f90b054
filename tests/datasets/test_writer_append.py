"""Appending episodes to a written dataset (`DatasetWriter.open`), truncating it (`truncate_dataset`), and what a
writer killed mid-append leaves (a real SIGKILL of a subprocess at the riskiest points)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from dataset_helpers import smooth_image, write_tiny_dataset

from hfpolicy.datasets import DatasetWriter, PolicyDataset
from hfpolicy.datasets.format import DatasetFormatError
from hfpolicy.datasets.writer import truncate_dataset
from hfpolicy.io.run_lock import RunLockedError

LENGTHS = [6, 4]  # the dataset `create` writes; appends add episodes of 5 frames


def frame(episode: int, i: int) -> dict:
    return {
        "observation.image": smooth_image(episode, i),
        "observation.state": np.array([episode, i], dtype=np.float32),
        "action": np.array([i, -episode], dtype=np.float32),
        "next.reward": np.float32(episode / 10),
        "next.done": i == 4,
    }


def add_episode(writer: DatasetWriter, episode: int) -> None:
    for i in range(5):
        writer.add_frame(frame(episode, i), task="new task" if episode % 2 else "push the block")
    writer.save_episode()


def in_one_go(root: Path, n_appended: int) -> Path:
    """The same episodes as `create` + `n_appended` appends, written by one writer."""
    write_tiny_dataset(root, LENGTHS)  # seeded: the same frames as the appended dataset's first two episodes
    with DatasetWriter.open(root) as writer:
        for episode in range(2, 2 + n_appended):
            add_episode(writer, episode)
    return root


def files(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.read_bytes())
        for top in ("data", "videos")
        for p in sorted((root / top).rglob("*"))
        if p.is_file()
    }


VIDEO_KEYS = ("observation.image",)


def assert_same_dataset(a: Path, b: Path) -> None:
    """The same frames (every column; the video frames decoded), episodes, tasks, totals and stats."""
    da, db = PolicyDataset("a", root=a), PolicyDataset("b", root=b)
    assert (da.num_episodes, da.num_frames, da.tasks) == (db.num_episodes, db.num_frames, db.tasks)
    assert np.array_equal(da.episode_bounds, db.episode_bounds)
    ba, bb = da.get_batch(range(len(da))), db.get_batch(range(len(db)))
    assert set(ba) == set(bb)
    for key, value in ba.items():
        if key in VIDEO_KEYS:  # H.264 is lossy and its encoder's state spans a file: frames equal to a few levels
            difference = (value - bb[key]).abs()
            assert difference.mean() < 2 / 255 and difference.max() < 32 / 255, (
                key,
                difference.mean(),
                difference.max(),
            )
            continue
        assert torch.equal(value, bb[key]) if torch.is_tensor(value) else value == bb[key], key
    info_a, info_b = (json.loads((r / "meta/info.json").read_text()) for r in (a, b))
    assert {k: v for k, v in info_a.items() if k.startswith("total")} == {
        k: v for k, v in info_b.items() if k.startswith("total")
    }
    stats_a, stats_b = (json.loads((r / "meta/stats.json").read_text()) for r in (a, b))
    assert stats_a.keys() == stats_b.keys()
    for key in stats_a:
        for stat, value in stats_a[key].items():
            assert np.allclose(value, stats_b[key][stat], rtol=1e-12, atol=1e-12), (key, stat)


def test_appends_add_files_and_leave_earlier_ones_untouched(tmp_path):
    root = tmp_path / "appended"
    write_tiny_dataset(root, LENGTHS)
    before = files(root)
    for episode in (2, 3):
        with DatasetWriter.open(root) as writer:
            assert writer.num_episodes == episode  # continues the count
            add_episode(writer, episode)
        after = files(root)
        assert {k: v for k, v in after.items() if k in before} == before  # the same inodes, the same bytes
        before = after
    assert sorted(files(root)) == [
        *(f"data/chunk-000/file-00{i}.parquet" for i in range(3)),
        *(f"videos/observation.image/chunk-000/file-00{i}.mp4" for i in range(3)),
    ]
    assert sorted(p.name for p in (root / "meta/episodes/chunk-000").iterdir()) == [
        f"file-00{i}.parquet" for i in range(3)
    ]
    assert sorted(os.listdir(tmp_path)) == ["appended"]  # no staging left, no lock file inside
    assert not [p for p in root.rglob(".*")]
    # Everything as if written at once: frames, a new task, totals, exact stats pooled over the appends.
    assert_same_dataset(root, in_one_go(tmp_path / "one_go", 2))
    dataset = PolicyDataset("a", root=root)
    assert dataset.tasks == {0: "push the block", 1: "pull the block", 2: "new task"}
    assert dataset.get_batch([10])["observation.state"].tolist() == [[2.0, 0.0]]


def test_truncate_keeps_the_first_episodes_and_appends_continue_after_them(tmp_path):
    root = tmp_path / "ds"
    write_tiny_dataset(root, LENGTHS)
    for episode in (2, 3):
        with DatasetWriter.open(root) as writer:
            add_episode(writer, episode)
    truncate_dataset(root, 3)
    assert not (root / "data/chunk-000/file-002.parquet").exists()
    assert not (root / "videos/observation.image/chunk-000/file-002.mp4").exists()
    assert_same_dataset(root, in_one_go(tmp_path / "three", 1))
    with DatasetWriter.open(root) as writer:  # the next append takes the freed file names
        add_episode(writer, 3)
    assert (root / "data/chunk-000/file-002.parquet").exists()
    assert_same_dataset(root, in_one_go(tmp_path / "four", 2))

    # Truncating inside the first writer's file: that file keeps the kept rows only.
    truncate_dataset(root, 1)
    table = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert table.column("episode_index").to_pylist() == [0] * LENGTHS[0]
    assert [p.name for p in (root / "data/chunk-000").iterdir()] == ["file-000.parquet"]
    one = tmp_path / "one"
    write_tiny_dataset(one, LENGTHS[:1])
    assert_same_dataset(root, one)
    with pytest.raises(ValueError, match="keep between 1 and 1, not 2"):
        truncate_dataset(root, 2)


def test_open_refuses_what_it_cannot_append_to(tmp_path):
    with pytest.raises(DatasetFormatError, match="no meta/info.json"):
        DatasetWriter.open(tmp_path)
    root = tmp_path / "ds"
    write_tiny_dataset(root, LENGTHS)
    writer = DatasetWriter.open(root)
    with pytest.raises(RunLockedError):
        DatasetWriter.open(root)  # one writer at a time
    add_episode(writer, 2)
    writer.abort()  # nothing of it is kept
    assert PolicyDataset("a", root=root).num_episodes == 2 and len(files(root)) == 2
    with pytest.raises(ValueError, match="unsaved frames"), DatasetWriter.open(root) as writer:
        writer.add_frame(frame(2, 0), task="t")
    assert PolicyDataset("a", root=root).num_episodes == 2


KILLED_APPEND = """
import os, signal, sys
sys.path.insert(0, {helpers!r})
import hfpolicy.datasets.writer as writer_module
from test_writer_append import add_episode
from hfpolicy.datasets import DatasetWriter

point = {point!r}
if point == "before_meta":  # the new data and video files are in place; no meta/ file names them yet
    real_replacing = writer_module.replacing
    def replacing(path, suffix=""):
        if "episodes" in str(path):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replacing(path, suffix)
    writer_module.replacing = replacing
else:  # "before_info": everything written but info.json, the commit (stats.json already counts the new episode)
    real_write_json = writer_module.write_json_atomically
    def write_json_atomically(path, data, **kwargs):
        if str(path).endswith("info.json"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_write_json(path, data, **kwargs)
    writer_module.write_json_atomically = write_json_atomically
with DatasetWriter.open({root!r}) as writer:
    add_episode(writer, 3)
"""


@pytest.mark.parametrize("point", ["before_meta", "before_info"])
def test_a_writer_killed_mid_append_leaves_the_last_complete_append(tmp_path, point):
    root = tmp_path / "ds"
    write_tiny_dataset(root, LENGTHS)
    with DatasetWriter.open(root) as writer:
        add_episode(writer, 2)
    script = KILLED_APPEND.format(helpers=str(Path(__file__).parent), point=point, root=str(root))
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert (root / "data/chunk-000/file-002.parquet").exists()  # the killed append's data file is in place

    # Readers see the last complete append.
    reference = in_one_go(tmp_path / "three", 1)
    dataset = PolicyDataset("a", root=root)
    assert dataset.num_episodes == 3 and dataset.num_frames == 15
    assert torch.equal(
        dataset.get_batch(range(15))["action"], PolicyDataset("r", root=reference).get_batch(range(15))["action"]
    )

    # Settling it (as a push does) removes what the killed writer left: the files LeRobot, reading all, would see.
    truncate_dataset(root)
    assert not (root / "data/chunk-000/file-002.parquet").exists()
    assert not (root / "videos/observation.image/chunk-000/file-002.mp4").exists()
    assert sorted(p.name for p in (root / "meta/episodes/chunk-000").iterdir()) == [
        "file-000.parquet",
        "file-001.parquet",
    ]
    assert_same_dataset(root, reference)  # the stats too: those of the committed episodes again

    # The next writer appends as if nothing had happened.
    with DatasetWriter.open(root) as writer:
        assert writer.num_episodes == 3
        add_episode(writer, 3)
    assert_same_dataset(root, in_one_go(tmp_path / "four", 2))
    assert sorted(p.name for p in (root / "data/chunk-000").iterdir()) == [f"file-00{i}.parquet" for i in range(3)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the killed writer's staging is gone
