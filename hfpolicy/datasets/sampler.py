"""Which frames a training epoch visits, in what order: `EpisodeAwareSampler` (the one order of every dataset,
streamed or not, one or a mixture), `EpochBatchSampler` (its batches, resumable mid-epoch), and an episode-level
train/val split.

A streamed member is drawn through a shuffle buffer (`buffer_order`) of `buffer_episodes` open episodes split into
`shards` groups; batch k draws only from shard k mod shards, so DataLoader workers dividing `shards` each decode
only their own episodes, once (docs/datasets.md#one-path-for-training-data).
"""

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch


def rank_share(order: np.ndarray, num_replicas: int, rank: int) -> np.ndarray:
    """Every num_replicas-th index from `rank`, the order wrapped so all get as many (as DistributedSampler pads)."""
    if num_replicas <= 1:
        return order
    per_rank = -(-len(order) // num_replicas)
    return np.resize(order, per_rank * num_replicas)[rank::num_replicas]


def shard_capacities(buffer_episodes: int, shards: int) -> list[int]:
    """`buffer_episodes` split into `shards` as evenly as they go."""
    return [buffer_episodes // shards + (1 if s < buffer_episodes % shards else 0) for s in range(shards)]


def open_episodes_per_worker(buffer_episodes: int, shards: int = 1, num_workers: int = 0) -> int:
    """The most episodes one process keeps open: worker w of N reads the shards s = w (mod gcd(N, shards))."""
    capacities = shard_capacities(buffer_episodes, max(1, min(shards, buffer_episodes)))
    step = math.gcd(max(1, num_workers), len(capacities))
    return max(sum(capacities[w::step]) for w in range(step))


class _Shard:
    """The open episodes of one shard: their frames in drawing order and how many of each are left to draw."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.frames: list[np.ndarray] = []
        self.left: list[int] = []

    def refill(self, queue: list[np.ndarray]) -> None:
        while queue and len(self.frames) < self.capacity:
            self.frames.append(queue.pop())
            self.left.append(len(self.frames[-1]))

    def take_over(self, shards: list["_Shard"]) -> None:
        """Moves in an episode of another shard: one not drawn from yet if any, else the one with most frames left."""
        left = [(o, i) for o in shards if o is not self for i in range(len(o.frames))]
        if not left:
            raise AssertionError("drew more frames than are open")  # buffer_order starts a new pass first
        other, slot = max(left, key=lambda c: (c[0].left[c[1]] == len(c[0].frames[c[1]]), c[0].left[c[1]]))
        self.frames.append(other.frames.pop(slot))
        self.left.append(other.left.pop(slot))

    def draw(self, u: float) -> int:
        """The frame that `u` in [0, 1) picks among the frames not drawn yet; an episode leaves once all are drawn.
        A Python scan: over a few open episodes numpy's cumsum and searchsorted cost more (docs/streaming.md)."""
        target, slot, total = u * sum(self.left), 0, self.left[0]
        while total <= target:
            slot += 1
            total += self.left[slot]
        frames = self.frames[slot]
        frame = int(frames[len(frames) - self.left[slot]])
        self.left[slot] -= 1
        if not self.left[slot]:
            del self.frames[slot], self.left[slot]
        return frame


def _shuffled_pass(episodes: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """The episodes in a random order, each one's frames shuffled, as a queue to pop() from the end."""
    queue = [episodes[i][rng.permutation(len(episodes[i]))] for i in rng.permutation(len(episodes))]
    queue.reverse()  # pop() from the end takes them in the drawn order
    return queue


def buffer_order(
    episodes: list[np.ndarray], capacities: list[int], shard_of: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Positions of len(`shard_of`) draws, draw n from the open episodes of shard shard_of[n] (of `capacities`).

    Episodes enter in a random order. A shard that runs dry once all have entered starts a new pass if the open
    frames cannot serve the draws left, else takes over another shard's episode: as many draws as frames give every
    frame exactly once."""
    queue = _shuffled_pass(episodes, rng)
    shards = [_Shard(capacity) for capacity in capacities]
    total = len(shard_of)
    out = np.empty(total, dtype=np.int64)
    draws = rng.random(total).tolist()
    for n, s in enumerate(shard_of.tolist()):
        shard = shards[s]
        shard.refill(queue)
        if not shard.frames:  # the queue is empty too
            if total - n > sum(sum(o.left) for o in shards):
                queue = _shuffled_pass(episodes, rng)
                shard.refill(queue)
            else:
                shard.take_over(shards)
        out[n] = shard.draw(draws[n])
    return out


def sampling_weights(weights: Sequence[float] | None, sizes: Sequence[int]) -> np.ndarray:
    """`weights` normalized (default: each member's share of `sizes`); ValueError unless one number >= 0 per member."""
    size = np.asarray(sizes, dtype=np.float64)
    weight = np.asarray(size if weights is None else weights, dtype=np.float64)
    if weight.shape != size.shape or not np.all(np.isfinite(weight)) or weight.min() < 0 or weight.sum() <= 0:
        raise ValueError(
            f"the sampling weights must be {len(size)} non-negative numbers (one per dataset), not all 0; got "
            f"{weight.tolist()}"
        )
    return weight / weight.sum()


def _members(dataset) -> list[tuple[Any, Sequence, int]]:
    """(member, its episode bounds, its first position) of a mixture, of one dataset, or of (start, end) ranges."""
    if hasattr(dataset, "datasets"):
        return [(ds, ds.episode_bounds, int(o)) for ds, o in zip(dataset.datasets, dataset.offsets, strict=True)]
    return [(dataset, getattr(dataset, "episode_bounds", dataset), 0)]


class EpisodeAwareSampler(torch.utils.data.Sampler[int]):
    """The one epoch order of training data: the positions of every frame but the last `drop_last_frames` of each
    episode of `dataset` (a PolicyDataset or StreamingPolicyDataset, a MixtureDataset, or (start, end) ranges).

    Per member a fresh permutation of its frames, or with `buffer_episodes` a shuffle buffer of that many episodes
    (`buffer_order`); each of `num_samples` (default: all frames) picks member d with probability weights[d]. Batch k
    (of `batch_size`) of a process draws from shard k mod `shards`; process `rank` takes every num_replicas-th
    position. The order is a pure function of (seed, epoch, shards, batch_size, num_replicas) and the episodes (one
    member draws with the generator (seed, epoch), member d of several with (seed, epoch, d + 1)), so a mid-epoch
    resume is exact with any number of workers.
    """

    def __init__(
        self,
        dataset,
        drop_last_frames: int = 0,
        seed: int = 0,
        *,
        weights: Sequence[float] | None = None,
        buffer_episodes: int | None = None,
        num_samples: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
        shards: int = 1,
        batch_size: int = 1,
    ):
        if drop_last_frames < 0:
            raise ValueError(f"drop_last_frames must be >= 0, got {drop_last_frames}")
        if buffer_episodes is not None and buffer_episodes < 1:
            raise ValueError(f"buffer_episodes must be >= 1, got {buffer_episodes}")
        if buffer_episodes is not None and not 1 <= shards <= buffer_episodes:
            raise ValueError(f"shards must be in [1, buffer_episodes={buffer_episodes}], got {shards}")
        if batch_size < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"batch_size must be >= 1 and rank in [0, {num_replicas}), got {batch_size}, {rank}")
        self.episodes = []  # per member: each episode's eligible positions
        for member, bounds, offset in _members(dataset):
            ranges = [np.arange(int(s), int(e) - drop_last_frames, dtype=np.int64) + offset for s, e in bounds]
            ranges = [frames for frames in ranges if len(frames)]
            if not ranges:
                name = getattr(member, "repo_id", "the dataset")
                raise ValueError(
                    f"{name}: no frame is left after dropping the last {drop_last_frames} frames of each episode: "
                    "the episodes are too short"
                )
            self.episodes.append(ranges)
        sizes = [sum(len(frames) for frames in ranges) for ranges in self.episodes]
        self.weights = sampling_weights(weights, sizes)
        self.num_samples = int(num_samples or sum(sizes))
        self.capacities = shard_capacities(buffer_episodes, shards) if buffer_episodes is not None else []
        self.buffer_episodes, self.shards, self.batch_size = buffer_episodes, shards, batch_size
        self.seed, self.epoch, self.num_replicas, self.rank = seed, 0, num_replicas, rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> np.ndarray:
        """The epoch's positions, all processes': which member each sample draws from, then each member's draws."""
        one = len(self.episodes) == 1
        if one:
            which = np.zeros(self.num_samples, dtype=np.int64)
        else:
            which = np.random.default_rng([self.seed, self.epoch]).choice(
                len(self.episodes), self.num_samples, p=self.weights
            )
        run = self.batch_size * self.num_replicas  # global positions of one batch of every process
        shard_of = (np.arange(self.num_samples) // run) % self.shards
        out = np.empty(self.num_samples, dtype=np.int64)
        for d, episodes in enumerate(self.episodes):
            slots = np.flatnonzero(which == d)
            if not len(slots):
                continue
            rng = np.random.default_rng([self.seed, self.epoch] if one else [self.seed, self.epoch, d + 1])
            if self.buffer_episodes is not None:
                out[slots] = buffer_order(episodes, self.capacities, shard_of[slots], rng)
            else:
                pool = np.concatenate(episodes)
                passes = -(-len(slots) // len(pool))
                out[slots] = np.concatenate([pool[rng.permutation(len(pool))] for _ in range(passes)])[: len(slots)]
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self.order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-self.num_samples // self.num_replicas)


class EpochBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Full batches of one epoch of a sampler (the last incomplete one dropped); `set_epoch(epoch, start_batch)`
    starts mid-epoch, skipping index batches, not data."""

    def __init__(self, sampler: EpisodeAwareSampler, batch_size: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(sampler) < batch_size:
            raise ValueError(
                f"an epoch has {len(sampler)} samples per process, fewer than batch_size={batch_size}: "
                "use a smaller batch size or more episodes"
            )
        self.sampler, self.batch_size, self.start_batch = sampler, batch_size, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        if not 0 <= start_batch < len(self):
            raise ValueError(f"start_batch must be in [0, {len(self)}), got {start_batch}")
        self.sampler.set_epoch(epoch)
        self.start_batch = start_batch

    def __iter__(self) -> Iterator[list[int]]:
        indices, size = list(self.sampler), self.batch_size
        for k in range(self.start_batch, len(self)):
            yield indices[k * size : (k + 1) * size]

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size


def split_episodes(
    num_episodes: int | Sequence[int], val_fraction: float, seed: int = 0
) -> tuple[list[int], list[int]]:
    """A random episode-level split of a count (episodes 0..n-1) or of episode indices: (train, val), sorted and
    disjoint. val gets round(n * val_fraction) episodes, at least one when val_fraction > 0; train at least one."""
    episodes = list(range(num_episodes)) if isinstance(num_episodes, int) else sorted({int(e) for e in num_episodes})
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n = len(episodes)
    if n == 0:
        raise ValueError("no episodes to split")
    n_val = max(round(n * val_fraction), 1 if val_fraction > 0 else 0)
    if n_val >= n:
        raise ValueError(f"cannot keep a validation split of {val_fraction:.0%} and a training split of {n} episodes")
    val = sorted(episodes[i] for i in np.random.default_rng(seed).permutation(n)[:n_val])
    held = set(val)
    return [e for e in episodes if e not in held], val
