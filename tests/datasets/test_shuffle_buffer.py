"""The shuffle-buffer order: every frame once per epoch, never more than `buffer_episodes` episodes open, exact
resume through EpochBatchSampler."""

import numpy as np
import pytest

from hfpolicy.datasets.sampler import EpochBatchSampler
from hfpolicy.datasets.shuffle_buffer import ShuffleBufferSampler

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
    sampler = ShuffleBufferSampler(BOUNDS, buffer_episodes=buffer, drop_last_frames=2, seed=7)
    order = np.array(list(sampler))
    eligible = sorted(p for s, e in BOUNDS for p in range(s, e - 2))
    assert sorted(order.tolist()) == eligible
    assert open_episodes_over_time(order) <= buffer
    if buffer > 1:
        assert open_episodes_over_time(order) == buffer  # the buffer is used, not just bounded
    assert not np.array_equal(order, np.sort(order))  # shuffled inside episodes too


def test_the_order_is_a_function_of_seed_and_epoch_and_resumes_exactly():
    a = ShuffleBufferSampler(BOUNDS, buffer_episodes=3, seed=1)
    b = ShuffleBufferSampler(BOUNDS, buffer_episodes=3, seed=1)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
    full = list(EpochBatchSampler(ShuffleBufferSampler(BOUNDS, 3, seed=1), 16))
    resumed = EpochBatchSampler(ShuffleBufferSampler(BOUNDS, 3, seed=1), 16)
    resumed.set_epoch(0, start_batch=4)
    assert list(resumed) == full[4:]
    shards = [list(ShuffleBufferSampler(BOUNDS, 3, seed=1, num_replicas=2, rank=r)) for r in (0, 1)]
    assert sorted(shards[0] + shards[1]) == sorted(list(a))
    with pytest.raises(ValueError, match="buffer_episodes must be >= 1"):
        ShuffleBufferSampler(BOUNDS, buffer_episodes=0)
