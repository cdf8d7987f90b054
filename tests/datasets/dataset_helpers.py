"""Small datasets written with the real writer (real parquet, real H.264 mp4s) for the dataset tests.

A module with its own name (not conftest), so test modules import it unambiguously.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from hfpolicy.datasets import DatasetWriter

FPS = 10
IMAGE_SIZE = 32
TINY_FEATURES = {
    "observation.image": {
        "dtype": "video",
        "shape": [IMAGE_SIZE, IMAGE_SIZE, 3],
        "names": ["height", "width", "channels"],
    },
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
}
TASKS = ("push the block", "pull the block")
STREAMED_LENGTHS = [12, 5, 20, 9]  # the `streamed` dataset (conftest.py): its episodes' lengths
STREAMED_DELTAS = {
    "observation.image": [-0.1, 0.0],
    "observation.state": [-0.1, 0.0],
    "action": [i / FPS for i in range(6)],
}
WRIST = {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]}  # a PNG camera


def smooth_image(episode: int, frame: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """A smooth, moving colour pattern (what cameras see; noise would not survive H.264 and prove nothing)."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    r = 128 + 90 * np.sin((x + 3 * frame) / 9 + episode)
    g = 128 + 90 * np.cos((y - 2 * frame) / 11 + 2 * episode)
    b = np.full_like(x, 40 + (10 * frame) % 200)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


@dataclass
class TinyDataset:
    """A written dataset and what was written into it, frame by frame in dataset order."""

    root: Path
    repo_id: str
    lengths: list[int]
    images: list[np.ndarray] = field(default_factory=list)
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    dones: list[bool] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    episode_of_frame: list[int] = field(default_factory=list)


def write_tiny_dataset(
    root: Path, lengths: list[int], repo_id: str = "user/tiny", seed: int = 0, **writer_kwargs
) -> TinyDataset:
    rng = np.random.default_rng(seed)
    data = TinyDataset(root=root, repo_id=repo_id, lengths=list(lengths))
    writer = DatasetWriter.create(root, repo_id, FPS, TINY_FEATURES, robot_type="test_arm", **writer_kwargs)
    with writer:
        for episode, n in enumerate(lengths):
            task = TASKS[episode % 2]
            for i in range(n):
                frame = {
                    "observation.image": smooth_image(episode, i),
                    "observation.state": rng.normal(size=2).astype(np.float32),
                    "action": rng.normal(size=2).astype(np.float32),
                    "next.reward": np.float32(rng.uniform()),
                    "next.done": i == n - 1,
                }
                writer.add_frame(frame, task=task)
                data.images.append(frame["observation.image"])
                data.states.append(frame["observation.state"])
                data.actions.append(frame["action"])
                data.rewards.append(float(frame["next.reward"]))
                data.dones.append(frame["next.done"])
                data.tasks.append(task)
                data.episode_of_frame.append(episode)
            writer.save_episode()
    return data


def assert_same_batch(a: dict, b: dict) -> None:
    """Two items or batches are equal: the same keys, tensors equal in dtype and value, other values equal."""
    assert set(a) == set(b)
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert value.dtype == b[key].dtype and torch.equal(value, b[key]), key
        else:
            assert value == b[key], key


def episode_rows(dataset, episode_pos: int) -> list[int]:
    """The dataset's row indices of its `episode_pos`-th episode."""
    start, end = dataset.episode_bounds[episode_pos]
    return list(range(int(start), int(end)))


def write_streamed_dataset(root: Path, repo_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Writes the `streamed` dataset (conftest.py) at `root`: STREAMED_LENGTHS episodes with a 32x32 video camera
    and an 8x8 PNG camera, one data file and one video file per episode; returns (the written video frames, the
    written PNG camera frames), in dataset order."""
    features = {**TINY_FEATURES, "observation.wrist": WRIST}
    writer = DatasetWriter.create(root, repo_id, FPS, features, data_files_size_in_mb=1e-4, video_files_size_in_mb=1e-4)
    rng, images, wrists = np.random.default_rng(0), [], []
    with writer:
        for episode, n in enumerate(STREAMED_LENGTHS):
            for i in range(n):
                image, wrist = smooth_image(episode, i), smooth_image(episode + 5, i, size=8)
                writer.add_frame(
                    {
                        "observation.image": image,
                        "observation.wrist": wrist,
                        "observation.state": rng.normal(size=2).astype(np.float32),
                        "action": rng.normal(size=2).astype(np.float32),
                        "next.reward": np.float32(rng.uniform()),
                        "next.done": i == n - 1,
                    },
                    task=TASKS[episode % 2],
                )
                images.append(image)
                wrists.append(wrist)
            writer.save_episode()
    return np.stack(images), np.stack(wrists)
