"""`ShuffleBufferSampler`: an epoch order that keeps at most `buffer_episodes` episodes open at a time.

The epoch order of streamed training (StreamingPolicyDataset, `--dataset.streaming=true`): a reader that holds only
a few decoded episodes can serve it, as each episode enters the buffer once, its frames are drawn in random order
while it is there, and it leaves for good when its last frame was drawn. Each draw picks uniformly among the frames
of the open episodes. The order is a pure function of (seed, epoch), so `EpochBatchSampler`'s mid-epoch resume stays
exact; shards as EpisodeAwareSampler.
"""

from collections.abc import Iterator

import numpy as np
import torch

from hfpolicy.datasets.sampler import rank_share


class ShuffleBufferSampler(torch.utils.data.Sampler[int]):
    """Dataset positions of every frame but the last `drop_last_frames` of each episode, episodes entering a buffer
    of `buffer_episodes` in a random order and leaving once drawn.

    Args:
        dataset: a PolicyDataset (its `episode_bounds`), or a sequence of (start, end) position ranges.
        buffer_episodes: how many episodes may be open at once (1: episode by episode, frames shuffled inside).
        drop_last_frames: frames left out at the end of every episode.
        seed: the base seed; epoch `e` draws with (seed, e).
        num_replicas, rank: sharding, every num_replicas-th position of the epoch's order to each rank.
    """

    def __init__(
        self, dataset, buffer_episodes: int, drop_last_frames: int = 0, seed: int = 0, *, num_replicas=1, rank=0
    ):
        if buffer_episodes < 1:
            raise ValueError(f"buffer_episodes must be >= 1, got {buffer_episodes}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank {rank} of {num_replicas}")
        bounds = getattr(dataset, "episode_bounds", dataset)
        self.episodes = [np.arange(int(s), int(e) - drop_last_frames, dtype=np.int64) for s, e in bounds]
        self.episodes = [frames for frames in self.episodes if len(frames)]
        if not self.episodes:
            raise ValueError(f"no frame is left after dropping {drop_last_frames} last frames of each episode")
        self.buffer_episodes, self.seed, self.epoch = buffer_episodes, seed, 0
        self.num_replicas, self.rank = num_replicas, rank
        self.num_frames = sum(len(frames) for frames in self.episodes)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> np.ndarray:
        """The epoch's positions; every eligible frame exactly once."""
        rng = np.random.default_rng([self.seed, self.epoch])
        queue = [self.episodes[i][rng.permutation(len(self.episodes[i]))] for i in rng.permutation(len(self.episodes))]
        queue.reverse()  # pop() from the end takes them in the drawn order
        open_frames: list[np.ndarray] = []
        used: list[int] = []
        out = np.empty(self.num_frames, dtype=np.int64)
        draws = rng.random(self.num_frames)
        for n in range(self.num_frames):
            while queue and len(open_frames) < self.buffer_episodes:
                open_frames.append(queue.pop())
                used.append(0)
            left = np.array([len(f) - u for f, u in zip(open_frames, used, strict=True)])
            slot = int(np.searchsorted(np.cumsum(left), draws[n] * left.sum(), side="right"))
            out[n] = open_frames[slot][used[slot]]
            used[slot] += 1
            if used[slot] == len(open_frames[slot]):
                del open_frames[slot], used[slot]
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(rank_share(self.order(), self.num_replicas, self.rank).tolist())

    def __len__(self) -> int:
        return -(-self.num_frames // self.num_replicas)
