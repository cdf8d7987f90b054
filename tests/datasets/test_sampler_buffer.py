"""The shuffle-buffer order: every frame once per epoch, never more than `buffer_episodes` episodes open, exact
resume through EpochBatchSampler, and shards that give batch k the episodes of shard k mod shards."""

import numpy as np
import pytest

from hfpolicy.datasets.sampler import EpisodeAwareSampler, EpochBatchSampler, open_episodes_per_worker

LENGTHS = [30, 5, 17, 40, 8, 22, 13, 9]
BOUNDS = np.stack([np.cumsum([0, *LENGTHS[:-1]]), np.cumsum(LENGTHS)], axis=1)


def open_episodes_over_time(order: np.ndarray) -> int:
    """The most episodes that had started but not finished at any point of `order`."""
    episode = np.searchsorted(BOUNDS[:, 1], order, side="right")
    first = {e: i for i, e in reversed(list(enumerate(episode)))}
    last = {e: i for i, e in enumerate(episode)}
    return max(sum(first[e] <= t <= last[e] for e in first) for t in range(len(order)))


@pytest.mark.parametrize("buffer", [1, 3, 8])
def test_every_frame_once_and_the_buffer_bound_holds(buffer):
    sampler = EpisodeAwareSampler(BOUNDS, buffer_episodes=buffer, drop_last_frames=2, seed=7)
    order = np.array(list(sampler))
    eligible = sorted(p for s, e in BOUNDS for p in range(s, e - 2))
    assert sorted(order.tolist()) == eligible
    assert open_episodes_over_time(order) <= buffer
    if buffer > 1:
        assert open_episodes_over_time(order) == buffer  # the buffer is used, not just bounded
    assert not np.array_equal(order, np.sort(order))  # shuffled inside episodes too


def test_the_order_is_a_function_of_seed_and_epoch_and_resumes_exactly():
    a = EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1)
    b = EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
    full = list(EpochBatchSampler(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1), 16))
    resumed = EpochBatchSampler(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1), 16)
    resumed.set_epoch(0, start_batch=4)
    assert list(resumed) == full[4:]
    shards = [list(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1, num_replicas=2, rank=r)) for r in (0, 1)]
    assert sorted(shards[0] + shards[1]) == sorted(list(a))
    with pytest.raises(ValueError, match="buffer_episodes must be >= 1"):
        EpisodeAwareSampler(BOUNDS, buffer_episodes=0)


MANY = np.random.default_rng(0).integers(5, 30, size=24)  # 24 episodes of 5..29 frames
MANY_BOUNDS = np.stack([np.cumsum([0, *MANY[:-1]]), np.cumsum(MANY)], axis=1)


def episodes_of_batches(order: np.ndarray, batch: int, groups: int) -> list[set[int]]:
    """The episodes drawn by the batches k with k mod groups == g, for each g."""
    episode = np.searchsorted(MANY_BOUNDS[:, 1], order, side="right")
    sets = [set() for _ in range(groups)]
    for k in range(-(-len(order) // batch)):
        sets[k % groups] |= set(episode[k * batch : (k + 1) * batch].tolist())
    return sets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shards_give_batch_k_the_episodes_of_shard_k_mod_shards(seed):
    buffer, batch = 6, 5
    sharded = EpisodeAwareSampler(
        MANY_BOUNDS, buffer_episodes=buffer, drop_last_frames=1, seed=seed, shards=3, batch_size=batch
    )
    order = np.array(list(sharded))
    assert sorted(order.tolist()) == sorted(p for s, e in MANY_BOUNDS for p in range(s, e - 1))  # every frame once
    groups = episodes_of_batches(order, batch, 3)
    in_several = [e for e in range(len(MANY)) if sum(e in g for g in groups) > 1]
    assert len(in_several) <= buffer  # only episodes still open when the last one entered, at the epoch's end
    plain = EpisodeAwareSampler(MANY_BOUNDS, buffer_episodes=buffer, drop_last_frames=1, seed=seed)
    plain_groups = episodes_of_batches(np.array(list(plain)), batch, 3)
    assert sum(sum(e in g for g in plain_groups) > 1 for e in range(len(MANY))) > 2 * buffer  # unsharded: mixed


def test_one_shard_is_the_unsharded_order_and_shards_resume_exactly():
    plain = list(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1))
    assert list(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1, shards=1, batch_size=7)) == plain
    sharded = EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1, shards=2, batch_size=4)
    assert list(sharded) != plain and sorted(sharded) == sorted(plain)
    full = list(EpochBatchSampler(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1, shards=2, batch_size=4), 4))
    resumed = EpochBatchSampler(EpisodeAwareSampler(BOUNDS, buffer_episodes=3, seed=1, shards=2, batch_size=4), 4)
    resumed.set_epoch(0, start_batch=5)
    assert list(resumed) == full[5:]
    with pytest.raises(ValueError, match=r"shards must be in \[1, buffer_episodes=3\]"):
        EpisodeAwareSampler(BOUNDS, buffer_episodes=3, shards=4)


@pytest.mark.parametrize(
    ("buffer", "shards", "workers", "held"),
    [(16, 1, 0, 16), (16, 1, 2, 16), (16, 2, 2, 8), (16, 4, 2, 8), (16, 3, 2, 16), (5, 2, 2, 3), (5, 2, 0, 5)],
)
def test_the_episodes_one_worker_keeps_open(buffer, shards, workers, held):
    assert open_episodes_per_worker(buffer, shards, workers) == held
