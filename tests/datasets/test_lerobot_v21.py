"""LeRobot v2.1 datasets: read directly (windows and padding as for v3.0), and converted to v3.0 by the CLI.

The dataset under data/lerobot_v21_tiny was written by LeRobot 0.3.3 itself (data/make_lerobot_v21_tiny.py says
how): 3 episodes of 12, 7 and 15 frames, an AV1 video camera, a PNG image camera, a state whose first two values
are the episode and the frame index, and per-episode parquet / mp4 files with meta/*.jsonl.
"""

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from hfpolicy.cli.commands import main as hfpolicy_main
from hfpolicy.datasets import PolicyDataset
from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.datasets.stats import aggregate_stats

V21_ROOT = Path(__file__).parent / "data" / "lerobot_v21_tiny"
LENGTHS = (12, 7, 15)
VIDEO, IMAGE = "observation.images.top", "observation.images.wrist"
DELTAS = {"action": [-0.1, 0.0, 0.1, 0.2], VIDEO: [-0.2, 0.0], "observation.state": [-0.1, 0.0]}


def decode_mp4(path: Path) -> dict[float, np.ndarray]:
    """timestamp -> (C, H, W) uint8 frame, with plain PyAV."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            round(float(frame.pts * Fraction(stream.time_base)), 4): frame.to_ndarray(format="rgb24").transpose(2, 0, 1)
            for frame in container.decode(stream)
        }


def test_the_fixture_is_the_v21_layout():
    info = json.loads((V21_ROOT / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["total_episodes"] == 3
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    for name in ("episodes.jsonl", "tasks.jsonl", "episodes_stats.jsonl"):
        assert (V21_ROOT / "meta" / name).is_file()
    assert not (V21_ROOT / "meta/episodes").exists() and not (V21_ROOT / "meta/tasks.parquet").exists()


def test_a_v21_dataset_loads_with_windows_and_padding():
    ds = PolicyDataset("local/v21", root=V21_ROOT, delta_timestamps=DELTAS)
    assert (ds.num_episodes, ds.num_frames) == (3, sum(LENGTHS))
    batch = ds.get_batch(range(ds.num_frames))
    starts = np.cumsum((0, *LENGTHS[:-1]))
    for i in range(ds.num_frames):
        ep = int(np.searchsorted(starts, i, side="right") - 1)
        frame, length = i - starts[ep], LENGTHS[ep]
        wanted = frame + np.array([-1, 0, 1, 2])
        assert batch["action_is_pad"][i].tolist() == ((wanted < 0) | (wanted >= length)).tolist()
        # action[0] is episode + frame / 100 in the fixture: the window repeats the edge frame where padded
        assert torch.allclose(
            batch["action"][i, :, 0], torch.tensor(ep + np.clip(wanted, 0, length - 1) / 100.0, dtype=torch.float32)
        )
        assert batch["observation.state"][i, 1, :2].tolist() == [ep, frame]
        assert batch["task"][i] == ("lift the cube" if ep == 1 else "push the block")
    # every column equals a plain read of the episode's own parquet file
    for ep in range(3):
        table = pq.read_table(V21_ROOT / f"data/chunk-000/episode_{ep:06d}.parquet")
        rows = slice(starts[ep], starts[ep] + LENGTHS[ep])
        assert np.array_equal(batch["index"][rows].numpy(), table.column("index").to_numpy())
        assert np.array_equal(batch["action"][rows, 1].numpy(), np.stack(table.column("action").to_numpy()))


def test_v21_video_frames_are_the_episode_files_frames():
    ds = PolicyDataset("local/v21", root=V21_ROOT, delta_timestamps={VIDEO: [-0.1, 0.0]})
    batch = ds.get_batch(range(ds.num_frames))
    images = np.round(batch[VIDEO].numpy() * 255).astype(np.uint8)
    position = 0
    for ep, length in enumerate(LENGTHS):
        frames = decode_mp4(V21_ROOT / f"videos/chunk-000/{VIDEO}/episode_{ep:06d}.mp4")
        assert len(frames) == length
        for frame in range(length):
            assert np.array_equal(images[position, 1], frames[round(frame / 10, 4)])
            assert np.array_equal(images[position, 0], frames[round(max(frame - 1, 0) / 10, 4)])
            position += 1


def test_v21_stats_combine_the_episode_stats():
    ds = PolicyDataset("local/v21", root=V21_ROOT)
    lines = [json.loads(line) for line in (V21_ROOT / "meta/episodes_stats.jsonl").read_text().splitlines()]
    actions = np.concatenate(
        [np.stack(pq.read_table(p).column("action").to_numpy()) for p in sorted(V21_ROOT.glob("data/*/*.parquet"))]
    ).astype(np.float64)
    assert ds.stats["action"]["count"].item() == sum(line["stats"]["action"]["count"][0] for line in lines) == 34
    assert np.allclose(ds.stats["action"]["mean"].numpy(), actions.mean(0), atol=1e-6)
    assert np.allclose(ds.stats["action"]["std"].numpy(), actions.std(0), atol=1e-6)
    assert np.allclose(ds.stats["action"]["min"].numpy(), actions.min(0))
    per_episode = [{k: {s: np.asarray(v) for s, v in st.items()} for k, st in line["stats"].items()} for line in lines]
    assert np.allclose(ds.stats[VIDEO]["std"].numpy(), aggregate_stats(per_episode)[VIDEO]["std"])


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("v30") / "converted"
    assert hfpolicy_main(["convert", "lerobot-v2.1", str(V21_ROOT), f"--output_dir={out}"]) == 0
    return out


def test_convert_writes_v30_with_equal_items(converted):
    info = json.loads((converted / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 34
    assert sorted(p.name for p in (converted / "data").rglob("*.parquet")) == ["file-000.parquet"]
    old = PolicyDataset("local/v21", root=V21_ROOT, delta_timestamps=DELTAS)
    new = PolicyDataset("local/v30", root=converted, delta_timestamps=DELTAS)
    a, b = old.get_batch(range(34)), new.get_batch(range(34))
    for key in ("action", "action_is_pad", "observation.state", "observation.state_is_pad", IMAGE, f"{VIDEO}_is_pad"):
        assert torch.equal(a[key], b[key]), key
    for key in ("index", "episode_index", "frame_index", "task_index", "timestamp"):
        assert torch.equal(a[key], b[key]), key
    assert a["task"] == b["task"] and old.tasks == new.tasks
    diff = (a[VIDEO] - b[VIDEO]).abs() * 255  # re-encoded as H.264 at crf 18: within the codec's tolerance
    assert diff.mean() < 3.0 and diff.max() < 40, (float(diff.mean()), float(diff.max()))
    for key in ("action", "observation.state"):
        assert torch.allclose(old.stats[key]["mean"], new.stats[key]["mean"], atol=1e-6), key
        assert torch.allclose(old.stats[key]["std"], new.stats[key]["std"], atol=1e-6), key


def test_convert_refuses_a_v30_source_and_a_taken_output(converted, tmp_path, capsys):
    assert hfpolicy_main(["convert", "lerobot-v2.1", str(converted), f"--output_dir={tmp_path / 'x'}"]) == 2
    assert "not v2.1" in capsys.readouterr().err
    assert hfpolicy_main(["convert", "lerobot-v2.1", str(V21_ROOT), f"--output_dir={converted}"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_a_v21_dataset_loads_by_repo_id_from_the_hub(hub_server):
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo("user/old-v21", repo_type="dataset")
    api.upload_folder(folder_path=str(V21_ROOT), repo_id="user/old-v21", repo_type="dataset")
    remote = PolicyDataset("user/old-v21", episodes=[1, 2], delta_timestamps=DELTAS)
    local = PolicyDataset("local/v21", root=V21_ROOT, episodes=[1, 2], delta_timestamps=DELTAS)
    assert not (remote.root / "data/chunk-000/episode_000000.parquet").exists()  # only the chosen episodes' files
    a, b = remote.get_batch(range(22)), local.get_batch(range(22))
    for key in ("action", "action_is_pad", VIDEO, IMAGE, "index"):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_ctrl_c_stops_a_conversion_with_130_and_nothing_written(delay, tmp_path):
    """Ctrl-C while the dataset is written (0.2 s in, it landed in a weakref callback: Python ignored it and the
    conversion went on to exit 0): exit 130, one line saying so, no dataset and no staging folder left; never a
    half-written one when the signal comes once the dataset is published (a fast machine)."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "hfpolicy.cli", "convert", "lerobot-v2.1", str(V21_ROOT), f"--output_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180  # a loaded machine: imports alone can take a minute
    while proc.poll() is None and not list(tmp_path.glob(".out.writing-*")) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    wrote, err = proc.communicate(timeout=120)
    # no stop lost inside the work (one landing in an atexit callback, once all is written, Python reports itself)
    assert not [line for line in err.splitlines() if line.startswith("Exception ignored") and "atexit" not in line]
    if proc.returncode == 130:
        assert err.splitlines()[-1] == "hfpolicy convert lerobot-v2.1: stopped by Ctrl-C (SIGINT)"
    else:  # a fast machine: the signal came once the command was done (docs/robustness.md)
        assert proc.returncode in (0, -signal.SIGINT) and wrote.startswith(f"wrote {out}"), err[-2000:]
    # nothing half-written: no dataset, or (the signal came just after it was published) the whole dataset
    assert list(tmp_path.iterdir()) == [] or (
        list(tmp_path.iterdir()) == [out] and DatasetMeta.load(out).total_episodes == 3
    )
