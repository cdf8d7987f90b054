"""`ShuffleBufferSampler`: an epoch order that keeps at most `buffer_episodes` episodes open at a time, split into
`shards` whose episodes are read by separate DataLoader workers.

The epoch order of streamed training (StreamingPolicyDataset, `--dataset.streaming=true`): a reader that holds only
a few decoded episodes can serve it, as each episode enters the buffer once, its frames are drawn in random order
while it is there, and it leaves for good when its last frame was drawn. Each draw picks uniformly among the frames
of the open episodes of one shard.

Shards (`--dataset.shuffle_buffer_shards`): the open episodes are split into `shards` groups of about
buffer_episodes / shards, an episode entering the group whose place came free. The order is made of runs of
`batch_size` draws (per process), run k from shard k mod shards, so batch k draws only from shard k mod shards. A
DataLoader with N workers hands batch k to worker k mod N: when N divides `shards`, each worker reads only the
episodes of its own shards and decodes each of them once. Only at the end of an epoch, once no episode is left to
enter and a shard has run dry, the dry shard takes over an open episode of another shard: one not drawn from yet if
there is one (nothing is decoded twice), else the one with the most frames left (which its new worker decodes
again; at most the buffer's episodes per epoch).

The order is a pure function of (seed, epoch, shards, batch_size, num_replicas), not of the number of workers, so
`EpochBatchSampler`'s mid-epoch resume stays exact with any --num_workers; with shards=1 it is the order of the
unsharded buffer. Shards as EpisodeAwareSampler across processes. `buffer_order` is that order for any sequence of
shards and number of draws (a streamed mixture draws each dataset's samples from it, streaming_mixture.py).
"""

import math
from collections.abc import Iterator

import numpy as np
import torch

from hfpolicy.datasets.sampler import rank_share


def shard_capacities(buffer_episodes: int, shards: int) -> list[int]:
    """How many episodes each shard keeps open: `buffer_episodes` split as evenly as they go."""
    return [buffer_episodes // shards + (1 if s < buffer_episodes % shards else 0) for s in range(shards)]


def open_episodes_per_worker(buffer_episodes: int, shards: int = 1, num_workers: int = 0) -> int:
    """The most episodes one process keeps open: with N workers, worker w reads the shards s with s = w (mod
    gcd(N, shards)) (all of them in a single process)."""
    capacities = shard_capacities(buffer_episodes, max(1, min(shards, buffer_episodes)))
    step = math.gcd(max(1, num_workers), len(capacities))
    return max(sum(capacities[w::step]) for w in range(step))


class _Shard:
    """The open episodes of one shard: their frames in drawing order and how many of each were drawn."""

    def __init__(self, capacity: int):
        self.capacity, self.frames, self.used = capacity, [], []

    def refill(self, queue: list[np.ndarray]) -> None:
        while queue and len(self.frames) < self.capacity:
            self.frames.append(queue.pop())
            self.used.append(0)

    def take_over(self, shards: list["_Shard"]) -> None:
        """Moves in an episode of another shard: one not drawn from yet if any, else the one with the most frames
        left."""
        left = [(o, i) for o in shards if o is not self for i in range(len(o.frames))]
        if not left:
            raise AssertionError("drew more frames than are open")  # buffer_order starts a new pass first
        other, slot = max(left, key=lambda c: (c[0].used[c[1]] == 0, len(c[0].frames[c[1]]) - c[0].used[c[1]]))
        self.frames.append(other.frames.pop(slot))
        self.used.append(other.used.pop(slot))

    def frames_left(self) -> int:
        return sum(len(frames) - n for frames, n in zip(self.frames, self.used, strict=True))

    def draw(self, u: float) -> int:
        """The frame that `u` in [0, 1) picks among the frames not drawn yet (uniformly); the episode leaves when
        its last frame was drawn."""
        left = np.array([len(frames) - n for frames, n in zip(self.frames, self.used, strict=True)])
        slot = int(np.searchsorted(np.cumsum(left), u * left.sum(), side="right"))
        frame = int(self.frames[slot][self.used[slot]])
        self.used[slot] += 1
        if self.used[slot] == len(self.frames[slot]):
            del self.frames[slot], self.used[slot]
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

    Episodes enter in a random order; while draws are left and the frames open cannot serve them all, a shard that
    runs dry once every episode has entered starts a fresh pass (a new random order); else it takes over an episode
    of another shard. So as many draws as frames give every frame exactly once, and more draws cycle through
    passes (a mixture drawing one dataset more often than its frames, streaming_mixture.py)."""
    queue = _shuffled_pass(episodes, rng)
    shards = [_Shard(capacity) for capacity in capacities]
    total = len(shard_of)
    out = np.empty(total, dtype=np.int64)
    draws = rng.random(total)
    for n, s in enumerate(shard_of.tolist()):
        shard = shards[s]
        shard.refill(queue)
        if not shard.frames:  # the queue is empty too
            if total - n > sum(o.frames_left() for o in shards):
                queue = _shuffled_pass(episodes, rng)
                shard.refill(queue)
            else:
                shard.take_over(shards)
        out[n] = shard.draw(draws[n])
    return out


class ShuffleBufferSampler(torch.utils.data.Sampler[int]):
    """Dataset positions of every frame but the last `drop_last_frames` of each episode, episodes entering a buffer
    of `buffer_episodes` (split into `shards`) in a random order and leaving once drawn.

    Args:
        dataset: a PolicyDataset (its `episode_bounds`), or a sequence of (start, end) position ranges.
        buffer_episodes: how many episodes may be open at once (1: episode by episode, frames shuffled inside).
        drop_last_frames: frames left out at the end of every episode.
        seed: the base seed; epoch `e` draws with (seed, e).
        num_replicas, rank: sharding, every num_replicas-th position of the epoch's order to each rank.
        shards: groups of open episodes, batch k drawn from group k mod shards (see the module docstring); at most
            `buffer_episodes`.
        batch_size: the batch size of each process (the runs of one shard are batches); matters with shards > 1.
    """

    def __init__(
        self,
        dataset,
        buffer_episodes: int,
        drop_last_frames: int = 0,
        seed: int = 0,
        *,
        num_replicas=1,
        rank=0,
        shards: int = 1,
        batch_size: int = 1,
    ):
        if buffer_episodes < 1:
            raise ValueError(f"buffer_episodes must be >= 1, got {buffer_episodes}")
        if not 1 <= shards <= buffer_episodes:
            raise ValueError(f"shards must be in [1, buffer_episodes={buffer_episodes}], got {shards}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank {rank} of {num_replicas}")
        bounds = getattr(dataset, "episode_bounds", dataset)
        self.episodes = [np.arange(int(s), int(e) - drop_last_frames, dtype=np.int64) for s, e in bounds]
        self.episodes = [frames for frames in self.episodes if len(frames)]
        if not self.episodes:
            raise ValueError(f"no frame is left after dropping {drop_last_frames} last frames of each episode")
        self.buffer_episodes, self.seed, self.epoch = buffer_episodes, seed, 0
        self.shards, self.batch_size = shards, batch_size
        self.num_replicas, self.rank = num_replicas, rank
        self.num_frames = sum(len(frames) for frames in self.episodes)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> np.ndarray:
        """The epoch's positions; every eligible frame exactly once."""
        run = self.batch_size * self.num_replicas  # global positions of one batch of every process
        shard_of = (np.arange(self.num_frames) // run) % self.shards
        capacities = shard_capacities(self.buffer_episodes, self.shards)
        return buffer_order(self.episodes, capacities, shard_of, np.random.default_rng([self.seed, self.epoch]))

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self.order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-self.num_frames // self.num_replicas)
