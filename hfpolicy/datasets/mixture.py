"""The training data: `MixtureDataset`, the union of N >= 1 datasets, each held in memory (PolicyDataset) or
streamed (StreamingPolicyDataset); dataset d's frame i is position offsets[d] + i. Features, stats and budgets:
docs/datasets.md#several-datasets."""

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from hfpolicy.constants import PAD_SUFFIX, TASK, pad_key
from hfpolicy.datasets.dataset import PolicyDataset
from hfpolicy.datasets.format import DatasetFormatError
from hfpolicy.datasets.loader_transfer import batch_for_loader
from hfpolicy.datasets.stats import STAT_KEYS, aggregate_stats, stats_to_torch
from hfpolicy.datasets.streaming import StreamingPolicyDataset

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
    base = key.removesuffix(PAD_SUFFIX)
    if base != key and base in renames:
        return pad_key(renames[base])
    return renames.get(key, key)


def renamed_view(dataset: Any, renames: Mapping[str, str]) -> SimpleNamespace:
    """A dataset's (or DatasetMeta's) features and fps under `renames`; two features renamed to one is refused."""
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
    """The union of N >= 1 datasets of one fps. `dataset[[i, j, ...]]` is the collated batch of those positions, as
    for a PolicyDataset, with a `dataset_index` entry; `episode_bounds` are all members' episodes, concatenated."""

    uint8_images = False

    def __init__(
        self,
        datasets: Sequence[PolicyDataset],
        names: Sequence[str] | None = None,
        renames: Mapping[str, str] | None = None,
    ):
        if not datasets:
            raise ValueError("a mixture needs at least one dataset")
        self.datasets = list(datasets)
        self.names = list(names or [ds.repo_id for ds in datasets])
        self.repo_id = self.names[0] if len(self.names) == 1 else "[" + ",".join(self.names) + "]"
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
        if len(self.datasets) == 1:  # its own stats, bit for bit (pooling one recomputes the std)
            self.stats = {renamed_key(k, self.renames): v for k, v in datasets[0].stats.items()}
        else:
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
        """The collated batch of mixture positions: each dataset fetches its own, then the rows go back in order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_frames):
            raise IndexError(f"positions must be in [0, {self.num_frames}), got {idx.min()}..{idx.max()}")
        which = self.dataset_of(idx)
        parts = []
        for d in np.unique(which).tolist():
            local = idx[which == d] - self.offsets[d]
            part = {renamed_key(k, self.renames): v for k, v in self.datasets[d].get_batch(local, uint8_images).items()}
            part[DATASET_INDEX] = torch.full((len(local),), d, dtype=torch.int64)
            parts.append(part)
        keys = [key for key in parts[0] if all(key in part for part in parts) and _kept(key, self.features)]
        order = np.argsort(which, kind="stable")  # the parts' rows, concatenated, are the asked-for rows `order`
        back = np.argsort(order, kind="stable")
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
            # a DataLoader worker sends it in one buffer (loader_transfer.py)
            return batch_for_loader(self.get_batch, np.asarray(idx), self.camera_keys, self.uint8_images)
        batch = self.get_batch([int(idx)])
        return {key: value[0] for key, value in batch.items()}

    def split_budgets(
        self, ram_bytes: int, disk_bytes: int, buffer_episodes: int, num_workers: int = 0, shards: int = 1
    ) -> list[tuple[int, int]]:
        """Gives each streamed member its (memory, disk) share of the budgets (over all DataLoader workers), in
        proportion to its open episodes' bytes and its files, and returns them; ValueError naming each member's need
        when they do not fit together."""
        streamed = [ds for ds in self.datasets if isinstance(ds, StreamingPolicyDataset)]
        if len(streamed) != len(self.datasets):
            raise TypeError("split_budgets shares the streaming budgets: every member must be a StreamingPolicyDataset")
        files = [ds.disk_bytes() for ds in streamed]  # all of them fit their shares when they fit the budget
        disk = _shares(disk_bytes, files, floors=files if sum(files) <= disk_bytes else None)
        for ds, share in zip(streamed, disk, strict=True):
            ds.set_budgets(ds.frames.max_bytes, share)  # the disk first: it decides range reads, whose buffers count
        needs = [ds.open_bytes(buffer_episodes, num_workers, shards) for ds in streamed]
        workers = max(1, num_workers)
        if len(needs) > 1 and sum(needs) > ram_bytes // workers:  # one member: its own check says it
            each = ", ".join(f"{name} {need / 1024**2:.2f} MiB" for name, need in zip(self.names, needs, strict=True))
            per_worker = f" per DataLoader worker ({num_workers} workers share it)" if workers > 1 else ""
            raise ValueError(
                f"the open episodes of the {len(needs)} streamed datasets need {sum(needs) / 1024**2:.2f} MiB of "
                f"decoded frames together ({each}), more than the streaming memory budget of "
                f"{ram_bytes // workers / 1024**2:.2f} MiB{per_worker}: raise stream_ram_gb= / --dataset.stream_ram_gb, "
                "or keep fewer episodes open (buffer_episodes= / --dataset.shuffle_buffer_episodes)"
            )
        ram = _shares(ram_bytes, needs, floors=[need * workers for need in needs])
        for ds, memory, share in zip(streamed, ram, disk, strict=True):
            ds.set_budgets(memory, share)
            ds.check_buffer_fits(buffer_episodes, num_workers, shards)
        return list(zip(ram, disk, strict=True))

    def __repr__(self) -> str:
        return f"MixtureDataset({self.names}, frames={self.num_frames}, dropped_features={self.dropped_features})"


def _kept(key: str, features: dict) -> bool:
    """Whether a batch key is a shared feature (or its *_is_pad), the task or the dataset index."""
    return key.removesuffix(PAD_SUFFIX) in features or key in (TASK, DATASET_INDEX)


def _shares(total: int, needs: Sequence[int], floors: Sequence[int] | None = None) -> list[int]:
    """`total` split in proportion to `needs` (evenly when none needs any), each share at least its floor and 1."""
    floors = list(floors or [0] * len(needs))
    weights = np.asarray(needs, dtype=np.float64)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(needs), 1 / len(needs))
    rest = total - sum(floors)
    return [max(1, floor + int(rest * w)) for floor, w in zip(floors, weights, strict=True)]
