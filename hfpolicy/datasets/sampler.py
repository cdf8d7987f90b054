"""Which frames a training epoch visits: an episode-aware sampler and an episode-level train/val split."""

from collections.abc import Iterator, Sequence

import numpy as np
import torch


def rank_share(order: np.ndarray, num_replicas: int, rank: int) -> np.ndarray:
    """Process `rank`'s share of an epoch's order: every num_replicas-th index, the order wrapped around so that
    every process gets as many (as torch's DistributedSampler pads)."""
    if num_replicas <= 1:
        return order
    per_rank = -(-len(order) // num_replicas)
    return np.resize(order, per_rank * num_replicas)[rank::num_replicas]


class EpisodeAwareSampler(torch.utils.data.Sampler[int]):
    """Dataset positions of every frame except the first/last few of each episode, optionally shuffled.

    Diffusion Policy drops the last 7 frames of each episode (`drop_last_frames=7`): samples starting there would
    be mostly padded action chunks. The order is a pure function of (seed, epoch), so every process of a DDP run
    draws the same permutation; `set_epoch(epoch)` gives a new one each epoch. To shard without accelerate, pass
    `num_replicas` and `rank`: each rank takes every num_replicas-th index (the permutation is padded by wrapping
    so all ranks get the same count).

    Args:
        dataset: a PolicyDataset (its `episode_bounds`), or a sequence of (start, end) position ranges.
        drop_last_frames: frames left out at the end of every episode.
        drop_first_frames: frames left out at the start of every episode.
        shuffle: a new random order each epoch (else dataset order).
        seed: the base seed of the shuffles.
        num_replicas: the number of shards (processes).
        rank: this process's shard.
    """

    def __init__(
        self,
        dataset,
        drop_last_frames: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        *,
        drop_first_frames: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        bounds = getattr(dataset, "episode_bounds", dataset)
        if drop_last_frames < 0 or drop_first_frames < 0:
            raise ValueError("drop_last_frames and drop_first_frames must be >= 0")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank {rank} of {num_replicas}")
        ranges = [np.arange(int(start) + drop_first_frames, int(end) - drop_last_frames) for start, end in bounds]
        self.indices = np.concatenate(ranges).astype(np.int64) if ranges else np.zeros(0, dtype=np.int64)
        if len(self.indices) == 0:
            raise ValueError(
                f"no frame is left after dropping {drop_first_frames} first and {drop_last_frames} last frames of "
                "each episode: the episodes are too short"
            )
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.num_replicas, self.rank = num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return self.indices
        rng = np.random.default_rng([self.seed, self.epoch])
        return self.indices[rng.permutation(len(self.indices))]

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self._order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-len(self.indices) // self.num_replicas)


class BatchIndices(list):
    """A batch's dataset positions, and `ahead`: the positions of the batches that come next to the same reader (a
    streamed reader decodes their episodes ahead, read_ahead.py). A list, so any dataset takes it as a batch."""

    def __init__(self, positions, ahead=()):
        super().__init__(positions)
        self.ahead = list(ahead)


class EpochBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Full batches of one epoch of a sampler, optionally starting at batch `start_batch` of that epoch.

    A resumed training run starts mid-epoch without loading the batches it skips: `set_epoch(epoch, start_batch)`
    forwards the epoch to the wrapped sampler (which derives its order from it) and skips index batches, not data.
    The last incomplete batch of an epoch is dropped, so every batch has `batch_size` samples.

    With `read_ahead` = L > 0 each batch is a `BatchIndices` whose `ahead` holds the positions of the next L
    batches of its shard (batches k + S, ..., k + L*S for a sampler with S `shards`, which DataLoader workers dividing
    S read apart): a streamed reader decodes their episodes while this batch trains. The batches are the same.
    """

    def __init__(self, sampler: EpisodeAwareSampler, batch_size: int, read_ahead: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if read_ahead < 0:
            raise ValueError(f"read_ahead must be >= 0, got {read_ahead}")
        if len(sampler) < batch_size:
            raise ValueError(
                f"an epoch has {len(sampler)} samples per process, fewer than batch_size={batch_size}: "
                "use a smaller batch size or more episodes"
            )
        self.sampler, self.batch_size, self.start_batch = sampler, batch_size, 0
        self.read_ahead = read_ahead

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        if not 0 <= start_batch < len(self):
            raise ValueError(f"start_batch must be in [0, {len(self)}), got {start_batch}")
        self.sampler.set_epoch(epoch)
        self.start_batch = start_batch

    def __iter__(self) -> Iterator[list[int]]:
        indices, size, count = list(self.sampler), self.batch_size, len(self)
        stride = getattr(self.sampler, "shards", 1)
        for k in range(self.start_batch, count):
            batch = indices[k * size : (k + 1) * size]
            if not self.read_ahead:
                yield batch
                continue
            later = range(k + stride, min(count, k + stride * self.read_ahead + 1), stride)
            yield BatchIndices(batch, [i for c in later for i in indices[c * size : (c + 1) * size]])

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size


def split_episodes(
    num_episodes: int | Sequence[int], val_fraction: float, seed: int = 0
) -> tuple[list[int], list[int]]:
    """A random episode-level split: (train episodes, val episodes), sorted and disjoint.

    `num_episodes` is a count (episodes 0..n-1) or the episode indices to split. The validation set gets
    round(n * val_fraction) episodes, at least one when val_fraction > 0, and training keeps at least one.
    """
    episodes = list(range(num_episodes)) if isinstance(num_episodes, int) else sorted({int(e) for e in num_episodes})
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n = len(episodes)
    if n == 0:
        raise ValueError("no episodes to split")
    n_val = round(n * val_fraction)
    if val_fraction > 0:
        n_val = max(n_val, 1)
    if n_val >= n:
        raise ValueError(f"cannot keep a validation split of {val_fraction:.0%} and a training split of {n} episodes")
    chosen = np.random.default_rng(seed).permutation(n)[:n_val]
    val = sorted(episodes[i] for i in chosen)
    held = set(val)
    return [e for e in episodes if e not in held], val
