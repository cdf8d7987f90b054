"""Dataset statistics as LeRobot stores them: per feature min / max / mean / std / count (a 1-element array).
Vectors get element-wise stats, images per-channel stats shaped (C, 1, 1) of pixels scaled to [0, 1]."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

STAT_KEYS = ("min", "max", "mean", "std", "count")
IMAGE_STATS_MAX_SIDE = 300  # frames with a side this long or longer are strided down to ~150 px for stats


def array_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Stats over the first axis of (N, *shape) values; (N,) scalars give 1-element arrays."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    as_float = values.astype(np.float64)
    return {
        "min": as_float.min(axis=0),
        "max": as_float.max(axis=0),
        "mean": as_float.mean(axis=0),
        "std": as_float.std(axis=0),
        "count": np.array([len(values)], dtype=np.int64),
    }


class ImageStatsAccumulator:
    """Per-channel pixel stats of a stream of uint8 HxWxC frames, exact over all (strided) pixels: a 256-bin
    histogram per channel."""

    def __init__(self):
        self.frames = 0
        self._histogram: np.ndarray | None = None  # (C, 256) pixel counts

    def add(self, frame_hwc: np.ndarray) -> None:
        h, w, c = frame_hwc.shape
        stride = max(1, max(h, w) // 150) if max(h, w) >= IMAGE_STATS_MAX_SIDE else 1
        pixels = frame_hwc[::stride, ::stride].reshape(-1, c).astype(np.int64)
        pixels += np.arange(c, dtype=np.int64) * 256  # channel ch counts in bins [256 ch, 256 ch + 255]
        counts = np.bincount(pixels.ravel(), minlength=256 * c).reshape(c, 256)
        self._histogram = counts if self._histogram is None else self._histogram + counts
        self.frames += 1

    def stats(self) -> dict[str, np.ndarray]:
        if self._histogram is None:
            raise ValueError("no frames were added")
        values = np.arange(256, dtype=np.float64)
        counts = self._histogram.astype(np.float64)
        total = counts.sum(axis=1)
        mean = counts @ values / total
        var = np.maximum(counts @ values**2 / total - mean**2, 0.0)
        present = self._histogram > 0
        low = present.argmax(axis=1).astype(np.float64)
        high = 255.0 - present[:, ::-1].argmax(axis=1)
        per_channel = {"min": low, "max": high, "mean": mean, "std": np.sqrt(var)}
        out = {name: (value / 255.0).reshape(-1, 1, 1) for name, value in per_channel.items()}
        out["count"] = np.array([self.frames], dtype=np.int64)
        return out


def aggregate_stats(stats_list: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Combines stats of disjoint parts (episodes) into the stats of the whole (the parallel mean/variance formula);
    only min / max / mean / std / count combine exactly: other stats (quantiles) are left out."""
    keys = sorted({key for stats in stats_list for key in stats})
    combined: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        parts = [stats[key] for stats in stats_list if key in stats and set(STAT_KEYS) <= set(stats[key])]
        if not parts:
            continue
        counts = np.array([float(np.asarray(part["count"]).reshape(-1)[0]) for part in parts])
        total = counts.sum()
        means = np.stack([np.asarray(part["mean"], dtype=np.float64) for part in parts])
        stds = np.stack([np.asarray(part["std"], dtype=np.float64) for part in parts])
        weights = (counts / total).reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (weights * means).sum(axis=0)
        var = (weights * (stds**2 + (means - mean) ** 2)).sum(axis=0)
        combined[key] = {
            "min": np.min(np.stack([np.asarray(part["min"]) for part in parts]), axis=0),
            "max": np.max(np.stack([np.asarray(part["max"]) for part in parts]), axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": np.array([int(total)], dtype=np.int64),
        }
    return combined


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {key: {name: np.asarray(value).tolist() for name, value in part.items()} for key, part in stats.items()}


def load_stats_json(path: Path) -> dict[str, dict[str, np.ndarray]] | None:
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    return {key: {name: np.asarray(value) for name, value in part.items()} for key, part in raw.items()}


def stats_to_torch(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, torch.Tensor]]:
    """float32 tensors (count stays int64), the form policies take as `dataset_stats`."""
    return {
        key: {
            name: torch.from_numpy(np.asarray(value).astype(np.int64 if name == "count" else np.float32))
            for name, value in part.items()
            if np.asarray(value).dtype.kind in "biuf"
        }
        for key, part in stats.items()
    }
