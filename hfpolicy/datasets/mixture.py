"""Several datasets as one: `MixtureDataset` (their union, with pooled stats) and `MixtureSampler` (each dataset
drawn at its sampling weight).

Positions are concatenated: dataset d's frame i is position offsets[d] + i. `renames` maps source feature keys to
the mixture's (a camera called differently in one dataset). Features are those every dataset has
with the same dtype and shape; a feature only some datasets have is left out (`dropped_features` names them, and
asking for one is refused by the caller), a shared feature whose dtype or shape differs, or a different fps, is
refused naming the datasets. Stats are pooled exactly from each dataset's count, mean and std (the variance of the
union, not an average of stds), min of mins and max of maxes.
"""

from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from hfpolicy.datasets.dataset import PolicyDataset
from hfpolicy.datasets.format import DatasetFormatError
from hfpolicy.datasets.sampler import rank_share
from hfpolicy.datasets.stats import STAT_KEYS, aggregate_stats, stats_to_torch
from hfpolicy.datasets.worker_batch import loader_batch

DATASET_INDEX = "dataset_index"  # items of a mixture say which dataset they come from


def parse_renames(pairs: Sequence[str] | None) -> dict[str, str]:
    """['old=new', ...] (--dataset.rename_features) -> {old: new}."""
    renames = {}
    for pair in pairs or []:
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"--dataset.rename_features entries are OLD=NEW feature names, got {pair!r}")
        renames[old.strip()] = new.strip()
    return renames


def renamed_key(key: str, renames: Mapping[str, str]) -> str:
    """A feature key, or a `{key}_is_pad` key, under `renames`."""
    if key.endswith("_is_pad") and key[: -len("_is_pad")] in renames:
        return renames[key[: -len("_is_pad")]] + "_is_pad"
    return renames.get(key, key)


def renamed_view(dataset: Any, renames: Mapping[str, str]) -> SimpleNamespace:
    """A dataset's (or DatasetMeta's) features and fps under `renames`; two sources renamed to one key is refused."""
    features = {}
    for key, feature in dataset.features.items():
        new = renames.get(key, key)
        if new in features:
            raise DatasetFormatError(f"renaming features makes two features {new!r} in {dataset.repo_id}")
        features[new] = feature
    return SimpleNamespace(features=features, fps=dataset.fps)


def common_features(datasets: Sequence[Any], names: Sequence[str]) -> tuple[dict[str, dict], list[str]]:
    """(the features every dataset has alike, the features left out). `datasets` have `.features` and `.fps`."""
    fps = {name: ds.fps for ds, name in zip(datasets, names, strict=True)}
    if len(set(fps.values())) > 1:
        raise DatasetFormatError(f"the datasets have different fps ({fps}): a mixture needs one frame rate")
    first = datasets[0].features
    shared, dropped, conflicts = {}, [], []
    for key in sorted({key for ds in datasets for key in ds.features}):
        present = [(ds.features[key], name) for ds, name in zip(datasets, names, strict=True) if key in ds.features]
        if len(present) < len(datasets):
            dropped.append(key)
            continue
        kinds = {name: (ft["dtype"], tuple(ft["shape"])) for ft, name in present}
        if len(set(kinds.values())) > 1:
            conflicts.append(f"{key!r}: " + ", ".join(f"{name} has {d} {list(s)}" for name, (d, s) in kinds.items()))
        shared[key] = first[key]
    if conflicts:
        raise DatasetFormatError(
            "the datasets disagree on features: " + "; ".join(conflicts) + ". Train on datasets whose shared "
            "features have one dtype and shape (convert or resize one of them), or leave one dataset out"
        )
    return {key: first[key] for key in first if key in shared}, dropped


def pooled_stats(parts: Sequence[dict[str, dict[str, np.ndarray]]], names: Sequence[str], keys) -> dict:
    """Stats of the union of the datasets, per key in `keys`, from each dataset's count/mean/std/min/max."""
    for part, name in zip(parts, names, strict=True):
        lacking = [
            key for key in sorted(keys) if any(key in p for p in parts) and not set(STAT_KEYS) <= set(part.get(key, {}))
        ]
        if lacking:
            raise DatasetFormatError(
                f"the stats of {name} lack {list(STAT_KEYS)} for {lacking}: without counts they cannot be pooled; "
                "recompute them (delete meta/stats.json to have them computed from the frames)"
            )
    return aggregate_stats([{key: value for key, value in part.items() if key in keys} for part in parts])


class MixtureDataset(torch.utils.data.Dataset):
    """The union of several PolicyDatasets (same fps, delta_timestamps built for the shared features).

    `dataset[[i, j, ...]]` gives the collated batch of those positions, as a PolicyDataset does, with a
    `dataset_index` entry; `episode_bounds` are the episodes of all datasets in concatenated positions.
    `uint8_images` as for PolicyDataset.
    """

    uint8_images = False

    def __init__(
        self,
        datasets: Sequence[PolicyDataset],
        names: Sequence[str] | None = None,
        renames: Mapping[str, str] | None = None,
    ):
        if len(datasets) < 1:
            raise ValueError("a mixture needs at least one dataset")
        self.datasets = list(datasets)
        self.names = list(names or [ds.repo_id for ds in datasets])
        self.repo_id = "[" + ",".join(self.names) + "]"
        self.renames = dict(renames or {})  # source feature key -> the mixture's, in every dataset that has it
        views = [renamed_view(ds, self.renames) for ds in self.datasets]
        self.features, self.dropped_features = common_features(views, self.names)
        self.fps = self.datasets[0].fps
        self.camera_keys = [renamed_key(k, self.renames) for k in self.datasets[0].camera_keys]
        self.camera_keys = [key for key in self.camera_keys if key in self.features]
        sizes = [ds.num_frames for ds in self.datasets]
        self.offsets = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        self.num_frames = int(sum(sizes))
        self.num_episodes = sum(ds.num_episodes for ds in self.datasets)
        self.episode_bounds = np.concatenate(
            [ds.episode_bounds + offset for ds, offset in zip(self.datasets, self.offsets, strict=True)]
        )
        numpy_stats = [
            {renamed_key(k, self.renames): {s: v.numpy() for s, v in st.items()} for k, st in ds.stats.items()}
            for ds in datasets
        ]
        self.stats = stats_to_torch(pooled_stats(numpy_stats, self.names, set(self.features)))
        self.tasks = {i: t for ds in self.datasets for i, t in ds.tasks.items()}  # per dataset in items' `task`

    def __len__(self) -> int:
        return self.num_frames

    def dataset_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, positions, side="right") - 1

    def prefetch_frames(self, progress: bool = True) -> None:
        for ds in self.datasets:
            ds.prefetch_frames(progress=progress)

    def get_batch(self, indices: Sequence[int], uint8_images: bool = False) -> dict[str, Any]:
        """The collated batch of mixture positions: each dataset fetches its own, then the rows are put back in
        the order asked for (`uint8_images` as for PolicyDataset.get_batch)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_frames):
            raise IndexError(f"positions must be in [0, {self.num_frames}), got {idx.min()}..{idx.max()}")
        which = self.dataset_of(idx)
        order = np.argsort(which, kind="stable")
        parts = []
        for d in np.unique(which).tolist():
            local = idx[order][which[order] == d] - self.offsets[d]
            part = {renamed_key(k, self.renames): v for k, v in self.datasets[d].get_batch(local, uint8_images).items()}
            part[DATASET_INDEX] = torch.full((len(local),), d, dtype=torch.int64)
            parts.append(part)
        keys = [key for key in parts[0] if all(key in part for part in parts) and _kept(key, self.features)]
        back = np.argsort(order, kind="stable")  # row r of the concatenation is asked-for row order[r]
        batch: dict[str, Any] = {}
        for key in keys:
            values = [part[key] for part in parts]
            if isinstance(values[0], torch.Tensor):
                batch[key] = torch.cat(values)[torch.from_numpy(back)]
            else:
                joined = [v for value in values for v in value]
                batch[key] = [joined[i] for i in back.tolist()]
        return batch

    def __getitem__(self, idx):
        if isinstance(idx, (list, tuple, np.ndarray, torch.Tensor)) and np.ndim(idx) == 1:
            # a DataLoader worker sends it in one buffer (worker_batch.py)
            return loader_batch(self.get_batch, np.asarray(idx), self.camera_keys, self.uint8_images)
        batch = self.get_batch([int(idx)])
        return {key: value[0] for key, value in batch.items()}

    def __repr__(self) -> str:
        return f"MixtureDataset({self.names}, frames={self.num_frames}, dropped_features={self.dropped_features})"


def _kept(key: str, features: dict) -> bool:
    """Batch keys of the shared features (and their *_is_pad), the task and the dataset index."""
    base = key[: -len("_is_pad")] if key.endswith("_is_pad") else key
    return base in features or key in ("task", DATASET_INDEX)


def sampling_weights(weights: Sequence[float] | None, sizes: Sequence[int]) -> np.ndarray:
    """The datasets' sampling probabilities: `weights` normalized (default: each dataset's share of `sizes`, its
    eligible frames); ValueError unless one non-negative number per dataset, not all 0."""
    sizes = np.asarray(sizes, dtype=np.float64)
    weights = np.asarray(sizes if weights is None else weights, dtype=np.float64)
    if weights.shape != sizes.shape or not np.all(np.isfinite(weights)) or weights.min() < 0 or weights.sum() <= 0:
        raise ValueError(
            f"the sampling weights must be {len(sizes)} non-negative numbers (one per dataset), not all 0; got "
            f"{weights.tolist()}"
        )
    return weights / weights.sum()


class MixtureSampler(torch.utils.data.Sampler[int]):
    """Mixture positions for one epoch: each sample picks dataset d with probability weights[d], then a frame of d
    (cycling through a fresh permutation of d's eligible frames, so frames repeat only once all were drawn).

    The order is a pure function of (seed, epoch), sharded over `num_replicas` like EpisodeAwareSampler. An epoch
    has as many samples as the datasets' eligible frames together (`num_samples` to change it). Default weights:
    each dataset's share of the eligible frames (the plain union).
    """

    def __init__(
        self,
        dataset: MixtureDataset,
        weights: Sequence[float] | None = None,
        drop_last_frames: int = 0,
        seed: int = 0,
        *,
        num_samples: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.pools = []
        for ds, offset in zip(dataset.datasets, dataset.offsets, strict=True):
            ranges = [np.arange(int(s), int(e) - drop_last_frames) for s, e in ds.episode_bounds]
            pool = np.concatenate(ranges).astype(np.int64) + offset
            if len(pool) == 0:
                raise ValueError(f"{ds.repo_id}: no frame is left after dropping {drop_last_frames} per episode")
            self.pools.append(pool)
        sizes = [len(pool) for pool in self.pools]
        self.weights = sampling_weights(weights, sizes)
        self.num_samples = int(num_samples or sum(sizes))
        self.seed, self.epoch, self.num_replicas, self.rank = seed, 0, num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.epoch])
        which = rng.choice(len(self.pools), size=self.num_samples, p=self.weights)
        order = np.empty(self.num_samples, dtype=np.int64)
        for d, pool in enumerate(self.pools):
            slots = np.flatnonzero(which == d)
            cycles = -(-len(slots) // len(pool))
            drawn = np.concatenate([pool[rng.permutation(len(pool))] for _ in range(cycles)]) if cycles else pool[:0]
            order[slots] = drawn[: len(slots)]
        return order

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self._order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-self.num_samples // self.num_replicas)
