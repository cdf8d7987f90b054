"""Streaming with DataLoader workers (the 127.0.0.1 test server, real worker processes): the shuffle buffer's shards
give each worker its own episodes, so an episode is decoded by one worker (but for the end of an epoch, at most
the buffer's episodes), the batches are those of 0 workers, and a resume mid-epoch is exact."""

import numpy as np
import pytest
import torch
from dataset_helpers import FPS, write_tiny_dataset

from hfpolicy.datasets import EpisodeAwareSampler, EpochBatchSampler, StreamingPolicyDataset, push_dataset_to_hub

LENGTHS = [12, 5, 20, 9, 14, 7, 11, 16, 6, 10, 13, 8]
BUFFER, BATCH, SEED = 4, 4, 3
DELTAS = {"observation.image": [-0.1, 0.0], "action": [i / FPS for i in range(4)]}
COUNTS = ("worker", "decodes")  # what CountingStream adds to a batch


class CountingStream(StreamingPolicyDataset):
    """The streaming reader; each batch also says which DataLoader worker made it (-1: the main process) and how
    many episodes that process has decoded so far."""

    def get_batch(self, indices, uint8_images=False):
        batch = super().get_batch(indices, uint8_images)
        info = torch.utils.data.get_worker_info()
        batch["worker"] = torch.tensor(-1 if info is None else info.id)
        batch["decodes"] = torch.tensor(self.frames.loads)
        return batch


@pytest.fixture(scope="module")
def repo_id(hub_server, tmp_path_factory) -> str:
    data = write_tiny_dataset(tmp_path_factory.mktemp("workers") / "tiny", LENGTHS, repo_id="user/stream-workers")
    push_dataset_to_hub(data.root, data.repo_id)
    return data.repo_id


def batches(repo_id: str, workers: int, shards: int, start_batch: int, count: int) -> list[dict]:
    """`count` batches of training's batch stream (endless_batches) from batch `start_batch`, in fresh processes."""
    from hfpolicy.training.data import endless_batches

    dataset = CountingStream(repo_id, delta_timestamps=DELTAS)
    sampler = EpisodeAwareSampler(dataset, buffer_episodes=BUFFER, seed=SEED, shards=shards, batch_size=BATCH)
    dataset.check_buffer_fits(BUFFER, workers, shards)
    batch_sampler = EpochBatchSampler(sampler, BATCH)
    loader = torch.utils.data.DataLoader(
        dataset,
        sampler=batch_sampler,
        batch_size=None,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator(),
    )
    stream = endless_batches(loader, batch_sampler, start_batch, seed=SEED)
    return [next(stream) for _ in range(count)]


def epoch_batches() -> int:
    return sum(LENGTHS) // BATCH


def decodes_by_worker(run: list[dict]) -> dict[int, int]:
    """Episodes each worker decoded over `run` (its last count: each worker's counts only grow)."""
    out: dict[int, int] = {}
    for batch in run:
        worker = int(batch["worker"])
        out[worker] = max(out.get(worker, 0), int(batch["decodes"]))
    return out


def episodes_by_worker(run: list[dict], workers: int) -> list[set[int]]:
    """The episodes in the batches that worker w makes (batch k goes to worker k mod workers)."""
    sets = [set() for _ in range(workers)]
    for k, batch in enumerate(run):
        sets[k % workers] |= set(batch["episode_index"].tolist())
    return sets


def assert_same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert set(x) == set(y)
        for key, value in x.items():
            if key in COUNTS:
                continue
            if isinstance(value, torch.Tensor):
                assert value.dtype == y[key].dtype and torch.equal(value, y[key]), key
            else:
                assert value == y[key], key


def test_with_shards_each_worker_decodes_its_own_episodes_once(repo_id):
    n = epoch_batches()
    sharded = batches(repo_id, workers=2, shards=2, start_batch=0, count=n)
    assert {int(b["worker"]) for b in sharded} == {0, 1}
    mine = episodes_by_worker(sharded, 2)
    decodes = decodes_by_worker(sharded)
    assert decodes == {0: len(mine[0]), 1: len(mine[1])}  # each worker decoded each of its episodes once
    shared = mine[0] & mine[1]  # only episodes still open when the last one entered the buffer
    assert len(shared) <= BUFFER
    assert sum(decodes.values()) == len(mine[0] | mine[1]) + len(shared) <= len(LENGTHS) + BUFFER

    unsharded = batches(repo_id, workers=2, shards=1, start_batch=0, count=n)  # every worker reads every open episode
    both = episodes_by_worker(unsharded, 2)
    assert len(both[0] & both[1]) > BUFFER
    assert sum(decodes_by_worker(unsharded).values()) > sum(decodes.values())


def test_two_workers_give_the_batches_of_none_and_resume_exactly(repo_id):
    n = epoch_batches()
    alone = batches(repo_id, workers=0, shards=2, start_batch=0, count=n + 4)  # into the second epoch
    assert {int(b["worker"]) for b in alone} == {-1}
    assert_same_batches(batches(repo_id, workers=2, shards=2, start_batch=0, count=n + 4), alone)
    assert_same_batches(batches(repo_id, workers=2, shards=2, start_batch=5, count=n - 1), alone[5:])
    drawn = torch.cat([b["index"] for b in alone[:n]]).numpy()
    bounds = np.stack([np.cumsum([0, *LENGTHS[:-1]]), np.cumsum(LENGTHS)], axis=1)
    order = EpisodeAwareSampler(bounds, buffer_episodes=BUFFER, seed=SEED, shards=2, batch_size=BATCH).order()
    assert np.array_equal(drawn, order[: n * BATCH])  # the stream follows the sharded buffer's order
