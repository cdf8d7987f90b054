"""Writer -> reader round trips, and the v3.0 layout the writer produces."""

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from dataset_helpers import FPS, IMAGE_SIZE, TINY_FEATURES, smooth_image, write_tiny_dataset

from hfpolicy.datasets import DatasetWriter, PolicyDataset

# H.264 (crf 23) in yuv420p is lossy, chroma at half resolution: on the 32x32 test frames the mean absolute error
# is ~3 levels of 255. Neighbouring frames differ by ~13 levels, so the bound also catches an off-by-one frame.
VIDEO_MAE_TOLERANCE = 5.0 / 255


def test_round_trip_values_exact_and_video_within_tolerance(tiny_dataset):
    ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root)
    assert (ds.num_frames, ds.num_episodes, ds.fps) == (37, 3, FPS)
    assert ds.episodes == [0, 1, 2]
    batch = ds.get_batch(range(len(ds)))
    assert torch.equal(batch["observation.state"], torch.from_numpy(np.stack(tiny_dataset.states)))
    assert torch.equal(batch["action"], torch.from_numpy(np.stack(tiny_dataset.actions)))
    assert torch.equal(batch["next.reward"], torch.tensor(tiny_dataset.rewards, dtype=torch.float32))
    assert torch.equal(batch["next.done"], torch.tensor(tiny_dataset.dones))
    frame_index = np.concatenate([np.arange(n) for n in tiny_dataset.lengths])
    assert torch.equal(batch["frame_index"], torch.from_numpy(frame_index))
    assert torch.equal(batch["timestamp"], torch.from_numpy((frame_index / FPS).astype(np.float32)))
    assert torch.equal(batch["index"], torch.arange(37))
    assert batch["episode_index"].tolist() == tiny_dataset.episode_of_frame
    assert batch["task"] == tiny_dataset.tasks

    item = ds[13]  # one item: the same values, images float32 CHW in [0, 1]
    assert item["observation.image"].shape == (3, IMAGE_SIZE, IMAGE_SIZE)
    assert item["observation.image"].dtype == torch.float32
    assert item["next.reward"].shape == () and item["task"] == tiny_dataset.tasks[13]
    written = torch.from_numpy(np.stack(tiny_dataset.images)).permute(0, 3, 1, 2).float() / 255
    errors = (batch["observation.image"] - written).abs().mean(dim=(1, 2, 3))
    assert errors.mean() < VIDEO_MAE_TOLERANCE, f"mean abs error {errors.mean() * 255:.2f}/255"
    assert errors.max() < 2 * VIDEO_MAE_TOLERANCE
    # Each decoded frame is closest to the frame written at its position (not a neighbour, not another episode's).
    distances = (batch["observation.image"][:, None] - written[None]).abs().mean(dim=(2, 3, 4))
    assert torch.equal(distances.argmin(dim=1), torch.arange(37))


def test_layout_is_lerobot_v30(tiny_dataset):
    root = tiny_dataset.root
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["fps"]) == (3, 37, 2, FPS)
    assert info["splits"] == {"train": "0:3"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (1000, 100, 500)
    assert info["robot_type"] == "test_arm"
    assert list(info["features"])[:5] == list(TINY_FEATURES)
    assert set(info["features"]) - set(TINY_FEATURES) == {
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    }
    video = info["features"]["observation.image"]
    assert video["names"] == ["height", "width", "channels"]
    assert video["info"]["video.codec"] == "h264" and video["info"]["video.pix_fmt"] == "yuv420p"
    assert (video["info"]["video.height"], video["info"]["video.width"], video["info"]["video.fps"]) == (32, 32, FPS)

    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert "observation.image" not in data.column_names  # videos live in videos/
    assert data.num_rows == 37

    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    assert episodes["episode_index"].tolist() == [0, 1, 2]
    assert episodes["length"].tolist() == [12, 5, 20]
    assert episodes["dataset_from_index"].tolist() == [0, 12, 17]
    assert episodes["dataset_to_index"].tolist() == [12, 17, 37]
    assert [list(t) for t in episodes["tasks"]] == [["push the block"], ["pull the block"], ["push the block"]]
    assert episodes["data/chunk_index"].tolist() == [0, 0, 0] and episodes["data/file_index"].tolist() == [0, 0, 0]
    video_prefix = "videos/observation.image/"
    assert episodes[video_prefix + "from_timestamp"].tolist() == pytest.approx([0.0, 1.2, 1.7])
    assert episodes[video_prefix + "to_timestamp"].tolist() == pytest.approx([1.2, 1.7, 3.7])
    assert episodes[video_prefix + "file_index"].tolist() == [0, 0, 0]
    assert {"meta/episodes/chunk_index", "meta/episodes/file_index"} <= set(episodes.columns)
    state_mean = np.stack(episodes["stats/observation.state/mean"].map(np.stack))
    starts = np.cumsum([0, 12, 5])
    for ep, (start, n) in enumerate(zip(starts, [12, 5, 20], strict=True)):
        np.testing.assert_allclose(state_mean[ep], np.mean(tiny_dataset.states[start : start + n], axis=0), rtol=1e-6)
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert np.asarray(rows[0]["stats/observation.image/mean"]).shape == (3, 1, 1)
    assert rows[2]["stats/observation.image/count"] == [20]

    tasks = pd.read_parquet(root / "meta/tasks.parquet")  # LeRobot keeps the task strings as the index
    assert tasks.index.name == "task"
    assert dict(zip(tasks.index, tasks["task_index"], strict=True)) == {"push the block": 0, "pull the block": 1}

    stats = json.loads((root / "meta/stats.json").read_text())
    states = np.stack(tiny_dataset.states).astype(np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], states.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], states.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["min"], states.min(0))
    assert stats["observation.state"]["count"] == [37]
    images = np.stack(tiny_dataset.images).astype(np.float64) / 255
    assert np.asarray(stats["observation.image"]["mean"]).shape == (3, 1, 1)
    np.testing.assert_allclose(
        np.asarray(stats["observation.image"]["mean"]).ravel(), images.mean((0, 1, 2)), rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(stats["observation.image"]["std"]).ravel(), images.std((0, 1, 2)), rtol=1e-6)

    ds = PolicyDataset(tiny_dataset.repo_id, root=root)  # stats as policies take them
    assert ds.stats["observation.image"]["mean"].shape == (3, 1, 1)
    assert ds.stats["action"]["max"].dtype == torch.float32


def test_files_roll_over_into_new_files_and_chunks(tmp_path):
    # Limits this small make every episode start a new data and video file, and chunks hold 2 files.
    data = write_tiny_dataset(
        tmp_path / "rolled", [6, 4, 8, 3], chunks_size=2, data_files_size_in_mb=1e-4, video_files_size_in_mb=1e-4
    )
    episodes = pq.read_table(tmp_path / "rolled/meta/episodes/chunk-000/file-000.parquet").to_pandas()
    assert episodes["data/chunk_index"].tolist() == [0, 0, 1, 1]
    assert episodes["data/file_index"].tolist() == [0, 1, 0, 1]
    assert episodes["videos/observation.image/chunk_index"].tolist() == [0, 0, 1, 1]
    assert episodes["videos/observation.image/from_timestamp"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert (tmp_path / "rolled/videos/observation.image/chunk-001/file-001.mp4").is_file()
    assert (tmp_path / "rolled/data/chunk-001/file-001.parquet").is_file()

    ds = PolicyDataset("user/rolled", root=tmp_path / "rolled", episodes=[2, 3])
    batch = ds.get_batch(range(len(ds)))
    assert torch.equal(batch["action"], torch.from_numpy(np.stack(data.actions[10:])))
    written = torch.from_numpy(np.stack(data.images[10:])).permute(0, 3, 1, 2).float() / 255
    assert (batch["observation.image"] - written).abs().mean() < VIDEO_MAE_TOLERANCE


def test_interrupted_write_leaves_nothing(tmp_path):
    root = tmp_path / "interrupted"
    with (
        pytest.raises(RuntimeError, match="robot fell over"),
        DatasetWriter.create(root, "user/x", FPS, TINY_FEATURES) as writer,
    ):
        for episode in range(2):
            for i in range(5):
                writer.add_frame(_frame(episode, i), task="t")
            writer.save_episode()
        writer.add_frame(_frame(2, 0), task="t")
        raise RuntimeError("robot fell over")
    assert not root.exists()
    assert os.listdir(tmp_path) == []  # no temporary folder left behind either


def test_clear_episode_and_unsaved_frames(tmp_path):
    writer = DatasetWriter.create(tmp_path / "ds", "user/x", FPS, TINY_FEATURES)
    for i in range(4):
        writer.add_frame(_frame(0, i), task="t")
    writer.clear_episode()  # dropped: the next saved episode is episode 0
    for i in range(3):
        writer.add_frame(_frame(1, i), task="t")
    assert writer.save_episode() == 0
    writer.add_frame(_frame(2, 0), task="t")
    with pytest.raises(ValueError, match="1 unsaved frames"):
        writer.finish()
    assert not (tmp_path / "ds").exists()

    writer = DatasetWriter.create(tmp_path / "ds", "user/x", FPS, TINY_FEATURES)
    for i in range(3):
        writer.add_frame(_frame(1, i), task="t")
    writer.save_episode()
    root = writer.finish()
    ds = PolicyDataset("user/x", root=root)
    assert ds.num_frames == 3 and ds.num_episodes == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.pop("action"), r"missing \['action'\]"),
        (lambda f: f.update(timestamp=0.0), r"unknown \['timestamp'\] \(the writer adds the bookkeeping"),
        (lambda f: f.update(action=np.zeros(3, np.float32)), r"'action'.*shape \(2,\), got \(3,\)"),
        (lambda f: f.update({"observation.image": np.zeros((32, 32, 3), np.float32)}), "must be a uint8 array"),
        (lambda f: f.update({"observation.image": np.zeros((3, 32, 32), np.uint8)}), r"\(H, W, C\) = \(32, 32, 3\)"),
    ],
)
def test_bad_frames_are_refused_with_the_reason(tmp_path, change, message):
    writer = DatasetWriter.create(tmp_path / "ds", "user/x", FPS, TINY_FEATURES)
    frame = _frame(0, 0)
    change(frame)
    with pytest.raises(ValueError, match=message):
        writer.add_frame(frame, task="t")
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_bad_features_and_existing_root_are_refused(tmp_path):
    with pytest.raises(ValueError, match="even height and width"):
        DatasetWriter.create(tmp_path / "a", "user/x", FPS, {"cam": {"dtype": "video", "shape": [31, 32, 3]}})
    with pytest.raises(ValueError, match="bookkeeping column"):
        DatasetWriter.create(tmp_path / "a", "user/x", FPS, {"index": {"dtype": "int64", "shape": [1]}})
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "notes.txt").write_text("mine")  # an empty folder is taken; one holding files is not
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter.create(tmp_path / "exists", "user/x", FPS, TINY_FEATURES)


def test_overwrite_replaces_the_old_dataset_only_at_finish(tmp_path):
    root = tmp_path / "ds"
    write_tiny_dataset(root, [4])
    writer = DatasetWriter.create(root, "user/x", FPS, TINY_FEATURES, overwrite=True)
    for i in range(6):
        writer.add_frame(_frame(0, i), task="t")
    writer.save_episode()
    assert PolicyDataset("user/x", root=root).num_frames == 4  # the old one is intact until finish()
    writer.finish()
    assert PolicyDataset("user/x", root=root).num_frames == 6
    assert sorted(os.listdir(tmp_path)) == ["ds"]


def _frame(episode: int, i: int) -> dict:
    return {
        "observation.image": smooth_image(episode, i),
        "observation.state": np.array([episode, i], dtype=np.float32),
        "action": np.array([i, episode], dtype=np.float32),
        "next.reward": 0.5,
        "next.done": False,
    }
