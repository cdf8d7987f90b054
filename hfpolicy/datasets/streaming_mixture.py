"""Several streamed Hub datasets as one: `StreamingMixtureDataset` (the union of StreamingPolicyDatasets within one
memory and one disk budget) and `MixtureShuffleSampler` (one shuffle buffer per dataset, each sample drawn from a
dataset at its sampling weight).

The union, its features (mapped or refused), its pooled stats and its items are MixtureDataset's (mixture.py); what
streaming adds is where the budgets go and an epoch order that keeps few episodes open. Budgets are split, not
shared: each dataset keeps its own frame LRU and disk cache, with a share of --dataset.stream_ram_gb in proportion to
the bytes its open episodes need and a share of --dataset.stream_disk_gb in proportion to its files (what
stream_video="auto" downloads), so the shares add up to the budget and each dataset's own checks (the open episodes
fit, read-ahead leaves them room) hold unchanged; one shared LRU would let one dataset's reads evict another's open
episodes, decoding them again and again.

Order: each sample picks a dataset with probability weights[d] (a seeded generator), then the next draw of that
dataset's own shuffle buffer (shuffle_buffer.buffer_order): at most `buffer_episodes` of each dataset are open. Batch
k draws from shard k mod `shards` of every dataset, so a DataLoader worker reads only its own shards as for one
streamed dataset. A dataset drawn more often than it has frames starts a fresh pass of its buffer. The order is a
pure function of (seed, epoch, shards, batch_size, num_replicas): a resumed run reads what the uninterrupted one would.
"""

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from hfpolicy.datasets.mixture import MixtureDataset, sampling_weights
from hfpolicy.datasets.sampler import rank_share
from hfpolicy.datasets.shuffle_buffer import buffer_order, shard_capacities


class StreamingMixtureDataset(MixtureDataset):
    """MixtureDataset of StreamingPolicyDatasets whose batches also decode ahead (`BatchIndices.ahead`) in each
    dataset, and whose budgets are split among them (`split_budgets`)."""

    def __getitem__(self, idx):
        batch = super().__getitem__(idx)
        ahead = getattr(idx, "ahead", None)
        if ahead is not None and len(ahead):
            positions = np.asarray(ahead, dtype=np.int64)
            which = self.dataset_of(positions)
            for d in np.unique(which).tolist():
                self.datasets[d].decode_ahead(positions[which == d] - self.offsets[d])
        return batch

    def split_budgets(
        self, ram_bytes: int, disk_bytes: int, buffer_episodes: int, num_workers: int = 0, shards: int = 1
    ) -> list[tuple[int, int]]:
        """Gives each dataset its share of the memory and disk budgets (over all DataLoader workers) and checks
        that its open episodes fit it; ValueError naming each dataset's need when they do not fit together.
        Returns the (memory, disk) bytes of each."""
        files = [ds.disk_bytes() for ds in self.datasets]  # all of them fit their shares when they fit the budget
        disk = _shares(disk_bytes, files, floors=files if sum(files) <= disk_bytes else None)
        for ds, share in zip(self.datasets, disk, strict=True):
            ds.set_budgets(ds.frames.max_bytes, share)  # the disk first: it decides range reads, whose buffers count
        needs = [ds.open_bytes(buffer_episodes, num_workers, shards) for ds in self.datasets]
        workers = max(1, num_workers)
        if sum(needs) > ram_bytes // workers:
            each = ", ".join(f"{name} {need / 1024**2:.2f} MiB" for name, need in zip(self.names, needs, strict=True))
            per_worker = f" per DataLoader worker ({num_workers} workers share it)" if workers > 1 else ""
            raise ValueError(
                f"the open episodes of the {len(needs)} streamed datasets need {sum(needs) / 1024**2:.2f} MiB of "
                f"decoded frames together ({each}), more than the streaming memory budget of "
                f"{ram_bytes // workers / 1024**2:.2f} MiB{per_worker}: raise stream_ram_gb= / --dataset.stream_ram_gb, "
                "or keep fewer episodes open (buffer_episodes= / --dataset.shuffle_buffer_episodes)"
            )
        ram = _shares(ram_bytes, needs, floors=[need * workers for need in needs])
        for ds, memory, share in zip(self.datasets, ram, disk, strict=True):
            ds.set_budgets(memory, share)
            ds.check_buffer_fits(buffer_episodes, num_workers, shards)
        return list(zip(ram, disk, strict=True))


def _shares(total: int, needs: Sequence[int], floors: Sequence[int] | None = None) -> list[int]:
    """`total` split in proportion to `needs` (evenly when none needs any), each share at least its floor (their
    sum fits `total`) and 1 byte."""
    floors = list(floors or [0] * len(needs))
    weights = np.asarray(needs, dtype=np.float64)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(needs), 1 / len(needs))
    rest = total - sum(floors)
    return [max(1, floor + int(rest * w)) for floor, w in zip(floors, weights, strict=True)]


class MixtureShuffleSampler(torch.utils.data.Sampler[int]):
    """Positions of a mixture's epoch: each sample from dataset d with probability weights[d], drawn by d's own
    shuffle buffer of `buffer_episodes` (split into `shards`).

    Args:
        dataset: a MixtureDataset (its datasets' `episode_bounds` and `offsets`).
        buffer_episodes: episodes of each dataset open at once.
        weights: each dataset's share of the samples (default: its share of the eligible frames).
        drop_last_frames: frames left out at the end of every episode.
        seed: the base seed; epoch `e` draws with (seed, e).
        num_samples: samples per epoch (default: the eligible frames of all datasets).
        num_replicas, rank: sharding, every num_replicas-th position of the epoch's order to each rank.
        shards, batch_size: as for ShuffleBufferSampler: batch k draws from shard k mod shards of each dataset.
    """

    def __init__(
        self,
        dataset: MixtureDataset,
        buffer_episodes: int,
        weights: Sequence[float] | None = None,
        drop_last_frames: int = 0,
        seed: int = 0,
        *,
        num_samples: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
        shards: int = 1,
        batch_size: int = 1,
    ):
        if not 1 <= shards <= buffer_episodes:
            raise ValueError(f"shards must be in [1, buffer_episodes={buffer_episodes}], got {shards}")
        if batch_size < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"batch_size must be >= 1 and rank in [0, {num_replicas}), got {batch_size}, {rank}")
        self.episodes = []  # per dataset: each episode's eligible positions in the mixture
        for ds, offset in zip(dataset.datasets, dataset.offsets, strict=True):
            ranges = [
                np.arange(int(s), int(e) - drop_last_frames, dtype=np.int64) + offset for s, e in ds.episode_bounds
            ]
            ranges = [frames for frames in ranges if len(frames)]
            if not ranges:
                raise ValueError(f"{ds.repo_id}: no frame is left after dropping {drop_last_frames} per episode")
            self.episodes.append(ranges)
        sizes = [sum(len(frames) for frames in ranges) for ranges in self.episodes]
        self.weights = sampling_weights(weights, sizes)
        self.num_samples = int(num_samples or sum(sizes))
        self.capacities = shard_capacities(buffer_episodes, shards)
        self.buffer_episodes, self.shards, self.batch_size = buffer_episodes, shards, batch_size
        self.seed, self.epoch, self.num_replicas, self.rank = seed, 0, num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> np.ndarray:
        """The epoch's positions (all processes'): the dataset of each sample, then each dataset's buffer draws."""
        which = np.random.default_rng([self.seed, self.epoch]).choice(
            len(self.episodes), self.num_samples, p=self.weights
        )
        run = self.batch_size * self.num_replicas  # global positions of one batch of every process
        shard_of = (np.arange(self.num_samples) // run) % self.shards
        out = np.empty(self.num_samples, dtype=np.int64)
        for d, episodes in enumerate(self.episodes):
            slots = np.flatnonzero(which == d)
            if len(slots):
                rng = np.random.default_rng([self.seed, self.epoch, d + 1])  # each dataset's buffer its own stream
                out[slots] = buffer_order(episodes, self.capacities, shard_of[slots], rng)
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self.order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-self.num_samples // self.num_replicas)
