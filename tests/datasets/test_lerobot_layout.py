"""A dataset laid out by hand the way LeRobot publishes lerobot/pusht (v3.0) reads as it is.

Nothing here goes through hfpolicy's writer: the info.json copies the published one's fields (names as
{"motors": [...]}, per-feature "fps", the video "info" block), the data and episode parquets are written by 🤗
datasets as LeRobot does, tasks.parquet keeps the task as an unnamed pandas index (as LeRobot's v2.1 -> v3.0
conversion writes it), and the video is AV1 (like the Hub's) with both episodes in one continuous encode, so the
second episode does not start on a keyframe.
"""

import json
from fractions import Fraction

import av
import datasets
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from hfpolicy.datasets import DatasetMeta, PolicyDataset, dataset_to_policy_features
from hfpolicy.policies.config import FeatureType

LENGTHS = [8, 6]
FPS = 10
TASK = "Push the T-shaped block onto the T-shaped target."


def _frame(i: int) -> np.ndarray:
    y, x = np.mgrid[0:96, 0:96].astype(np.float64)
    r = 128 + 80 * np.sin((x + 4 * i) / 15)
    g = 128 + 80 * np.cos((y - 3 * i) / 17)
    return np.clip(np.stack([r, g, np.full_like(x, 60 + 12 * i)], axis=-1), 0, 255).astype(np.uint8)


def _encode_av1(frames: list[np.ndarray], path) -> None:
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libsvtav1", rate=Fraction(FPS))
        stream.width, stream.height, stream.pix_fmt = 96, 96, "yuv420p"
        stream.options = {"crf": "25", "preset": "10"}
        for i, frame in enumerate(frames):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video_frame.pts = i
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode(None))


def _stats(values: np.ndarray) -> dict:
    values = values.astype(np.float64).reshape(len(values), -1)
    return {
        "min": values.min(0).tolist(),
        "max": values.max(0).tolist(),
        "mean": values.mean(0).tolist(),
        "std": values.std(0).tolist(),
        "count": [len(values)],
        "q01": values.min(0).tolist(),
    }


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "pusht"
    n = sum(LENGTHS)
    rng = np.random.default_rng(1)
    episode_index = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    frame_index = np.concatenate([np.arange(k) for k in LENGTHS])
    columns = {
        "observation.state": rng.uniform(0, 512, size=(n, 2)).astype(np.float32),
        "action": rng.uniform(0, 512, size=(n, 2)).astype(np.float32),
        "episode_index": episode_index,
        "frame_index": frame_index,
        "timestamp": (frame_index / FPS).astype(np.float32),
        "next.reward": rng.uniform(size=n).astype(np.float32),
        "next.done": frame_index == np.repeat(np.array(LENGTHS) - 1, LENGTHS),
        "next.success": np.zeros(n, dtype=bool),
        "index": np.arange(n),
        "task_index": np.zeros(n, dtype=np.int64),
    }
    vector = datasets.Sequence(length=2, feature=datasets.Value("float32"))
    hf_features = datasets.Features(
        {
            "observation.state": vector,
            "action": vector,
            "episode_index": datasets.Value("int64"),
            "frame_index": datasets.Value("int64"),
            "timestamp": datasets.Value("float32"),
            "next.reward": datasets.Value("float32"),
            "next.done": datasets.Value("bool"),
            "next.success": datasets.Value("bool"),
            "index": datasets.Value("int64"),
            "task_index": datasets.Value("int64"),
        }
    )
    (root / "data/chunk-000").mkdir(parents=True)
    datasets.Dataset.from_dict({k: list(v) for k, v in columns.items()}, features=hf_features).to_parquet(
        root / "data/chunk-000/file-000.parquet"
    )
    (root / "videos/observation.image/chunk-000").mkdir(parents=True)
    frames = [_frame(i) for i in range(n)]
    _encode_av1(frames, root / "videos/observation.image/chunk-000/file-000.mp4")

    motors = {"motors": ["motor_0", "motor_1"]}
    scalar = {"shape": [1], "names": None, "fps": FPS}
    info = {
        "codebase_version": "v3.0",
        "robot_type": "unknown",
        "total_episodes": 2,
        "total_frames": n,
        "total_tasks": 1,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": FPS,
        "splits": {"train": "0:2"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.image": {
                "dtype": "video",
                "shape": [96, 96, 3],
                "names": ["height", "width", "channel"],
                "info": {
                    "video.height": 96,
                    "video.width": 96,
                    "video.codec": "av1",
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": FPS,
                    "video.channels": 3,
                    "has_audio": False,
                },
            },
            "observation.state": {"dtype": "float32", "shape": [2], "names": motors, "fps": FPS},
            "action": {"dtype": "float32", "shape": [2], "names": motors, "fps": FPS},
            "episode_index": {"dtype": "int64", **scalar},
            "frame_index": {"dtype": "int64", **scalar},
            "timestamp": {"dtype": "float32", **scalar},
            "next.reward": {"dtype": "float32", **scalar},
            "next.done": {"dtype": "bool", **scalar},
            "next.success": {"dtype": "bool", **scalar},
            "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar},
        },
    }
    (root / "meta").mkdir()
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    images = np.stack(frames).transpose(0, 3, 1, 2).astype(np.float64) / 255
    image_stats = {
        name: [[[float(v)]] for v in fn(images, axis=(0, 2, 3))]
        for name, fn in (("min", np.min), ("max", np.max), ("mean", np.mean), ("std", np.std))
    }
    stats = {key: _stats(np.asarray(value)) for key, value in columns.items()}
    stats["observation.image"] = {**image_stats, "count": [n]}
    (root / "meta/stats.json").write_text(json.dumps(stats, indent=4))
    pd.DataFrame({"task_index": [0]}, index=[TASK]).to_parquet(root / "meta/tasks.parquet")
    rows, start = [], 0
    for episode, length in enumerate(LENGTHS):
        rows.append(
            {
                "episode_index": episode,
                "tasks": [TASK],
                "length": length,
                "data/chunk_index": 0,
                "data/file_index": 0,
                "dataset_from_index": start,
                "dataset_to_index": start + length,
                "videos/observation.image/chunk_index": 0,
                "videos/observation.image/file_index": 0,
                "videos/observation.image/from_timestamp": start / FPS,
                "videos/observation.image/to_timestamp": (start + length) / FPS,
                **{
                    f"stats/action/{name}": value
                    for name, value in _stats(columns["action"][start : start + length]).items()
                },
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
            }
        )
        start += length
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(root / "meta/episodes/chunk-000/file-000.parquet")
    return root, columns, frames


def test_reads_the_published_layout_as_it_is(published):
    root, columns, frames = published
    meta = DatasetMeta.load(root, "lerobot/pusht")
    assert meta.tasks == {0: TASK}
    assert meta.video_file(1, "observation.image") == "videos/observation.image/chunk-000/file-000.mp4"

    ds = PolicyDataset(
        "lerobot/pusht", root=root, delta_timestamps={"observation.image": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
    )
    assert (ds.num_frames, ds.num_episodes, ds.fps) == (14, 2, 10)
    assert ds.stats["observation.image"]["mean"].shape == (3, 1, 1)
    assert ds.stats["observation.state"]["max"].shape == (2,)
    torch.testing.assert_close(ds.stats["action"]["mean"], torch.from_numpy(columns["action"].mean(0)))

    batch = ds.get_batch(range(14))
    assert torch.equal(batch["action"][:, 0], torch.from_numpy(columns["action"]))
    assert torch.equal(batch["observation.state"], torch.from_numpy(columns["observation.state"]))
    assert batch["action_is_pad"][7].tolist() == [False, True, True]  # last frame of episode 0
    assert batch["observation.image_is_pad"][8].tolist() == [True, False]  # first frame of episode 1
    assert batch["task"] == [TASK] * 14
    # AV1, and episode 1 starts mid-GOP at 0.8 s in the file: its frames decode from the keyframe before.
    written = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float() / 255
    errors = (batch["observation.image"][:, 1] - written).abs().mean(dim=(1, 2, 3))
    assert errors.max() < 4 / 255, f"max frame error {errors.max() * 255:.2f}/255"
    distances = (batch["observation.image"][:, 1][:, None] - written[None]).abs().mean(dim=(2, 3, 4))
    assert torch.equal(distances.argmin(dim=1), torch.arange(14))

    inputs, outputs = dataset_to_policy_features(ds.features)
    assert inputs["observation.image"].type == FeatureType.IMAGE and inputs["observation.image"].shape == (3, 96, 96)
    assert inputs["observation.state"].shape == (2,) and set(inputs) == {"observation.image", "observation.state"}
    assert set(outputs) == {"action"}


def test_stats_come_from_the_episode_table_when_stats_json_is_absent(published, tmp_path):
    import shutil

    root = tmp_path / "nostats"
    shutil.copytree(published[0], root)
    (root / "meta/stats.json").unlink()
    ds = PolicyDataset("lerobot/pusht", root=root)
    torch.testing.assert_close(ds.stats["action"]["mean"], torch.from_numpy(published[1]["action"].mean(0)))
    assert "observation.state" not in ds.stats  # the episode table has action stats only

    episodes = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(episodes)
    pq.write_table(table.select([c for c in table.column_names if not c.startswith("stats/")]), episodes)
    ds = PolicyDataset("lerobot/pusht", root=root)  # no stats anywhere: computed from the frames
    torch.testing.assert_close(
        ds.stats["observation.state"]["max"], torch.from_numpy(published[1]["observation.state"].max(0))
    )
    assert "observation.image" not in ds.stats


def test_channels_first_declarations_are_understood():
    features = {
        "observation.images.top": {"dtype": "video", "shape": [3, 480, 640], "names": ["channels", "height", "width"]},
        "observation.images.wrist": {"dtype": "image", "shape": [128, 96, 3], "names": None},
        "observation.environment_state": {"dtype": "float32", "shape": [16], "names": None},
        "observation.pointcloud": {"dtype": "float32", "shape": [2048, 3], "names": None},
        "action": {"dtype": "float32", "shape": [7], "names": None},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "language_instruction": {"dtype": "string", "shape": [1], "names": None},
    }
    inputs, outputs = dataset_to_policy_features(features)
    assert {k: (f.type, f.shape) for k, f in inputs.items()} == {
        "observation.images.top": (FeatureType.IMAGE, (3, 480, 640)),
        "observation.images.wrist": (FeatureType.IMAGE, (3, 128, 96)),
        "observation.environment_state": (FeatureType.STATE, (16,)),
    }
    assert {k: (f.type, f.shape) for k, f in outputs.items()} == {"action": (FeatureType.ACTION, (7,))}
