"""A mixture of streamed Hub datasets (the 127.0.0.1 test server): the in-memory mixture's items, each dataset drawn
at its weight from its own shuffle buffer, exact resume with DataLoader workers, budgets split among the datasets,
and a feature the datasets disagree on refused naming them."""

import numpy as np
import pytest
import torch
from dataset_helpers import FPS, TINY_FEATURES, assert_same_batch, write_tiny_dataset

from hfpolicy.datasets import (
    DatasetWriter,
    EpochBatchSampler,
    PolicyDataset,
    StreamingPolicyDataset,
    push_dataset_to_hub,
)
from hfpolicy.datasets.mixture import DATASET_INDEX, MixtureDataset
from hfpolicy.datasets.sampler import EpisodeAwareSampler

GB = 1024**3
LENGTHS = {"user/smix-a": [12, 5, 20, 9], "user/smix-b": [7, 15, 10, 6, 11, 8]}
DELTAS = {"observation.image": [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [i / FPS for i in range(4)]}


@pytest.fixture(scope="module")
def served(hub_server, tmp_path_factory) -> dict:
    """{repo id: local root} of two tiny video datasets pushed to the test server."""
    roots = {}
    for seed, (repo_id, lengths) in enumerate(LENGTHS.items()):
        data = write_tiny_dataset(tmp_path_factory.mktemp("smix") / repo_id.split("/")[1], lengths, repo_id, seed)
        push_dataset_to_hub(data.root, repo_id)
        roots[repo_id] = data.root
    return roots


def in_memory(served) -> MixtureDataset:
    return MixtureDataset([PolicyDataset(r, root=root, delta_timestamps=DELTAS) for r, root in served.items()])


def streamed(**budgets) -> MixtureDataset:
    return MixtureDataset([StreamingPolicyDataset(r, delta_timestamps=DELTAS, **budgets) for r in LENGTHS])


def test_streamed_mixture_items_equal_the_in_memory_mixtures(served):
    local, stream = in_memory(served), streamed()
    assert stream.num_frames == local.num_frames == sum(map(sum, LENGTHS.values()))
    assert stream.names == list(LENGTHS) and stream.repo_id == "[user/smix-a,user/smix-b]"
    order = np.random.default_rng(0).permutation(stream.num_frames)
    batch = stream.get_batch(order)
    assert_same_batch(batch, local.get_batch(order))
    assert set(batch[DATASET_INDEX].tolist()) == {0, 1} and batch["action_is_pad"].any()
    for key, stats in local.stats.items():  # pooled the same way from each dataset's count/mean/std
        for name, value in stats.items():
            assert torch.equal(stream.stats[key][name], value), (key, name)


def open_intervals(draws: np.ndarray, bounds: np.ndarray) -> int:
    """The most episodes open at once in `draws` (an episode is open from its first draw to its last)."""
    episode = np.searchsorted(bounds[:, 1], draws, side="right")
    first = {e: i for i, e in reversed(list(enumerate(episode.tolist())))}
    last = {e: i for i, e in enumerate(episode.tolist())}
    return max(sum(first[e] <= n <= last[e] for e in first) for n in range(len(draws)))


def test_each_dataset_is_drawn_at_its_weight_from_its_own_buffer(served):
    mixture = in_memory(served)
    for weights in ([0.8, 0.2], [0.25, 0.75]):
        sampler = EpisodeAwareSampler(
            mixture, buffer_episodes=2, weights=weights, seed=3, num_samples=4000, batch_size=4
        )
        which = mixture.dataset_of(np.array(list(sampler)))
        assert abs((which == 0).mean() - weights[0]) < 0.02, weights  # 3.5 binomial sds
    # a dataset drawn more often than it has frames cycles through its frames: each drawn k or k+1 times
    sampler = EpisodeAwareSampler(mixture, buffer_episodes=2, weights=[0.9, 0.1], seed=4, num_samples=400)
    order = np.array(list(sampler))
    counts = np.bincount(order[mixture.dataset_of(order) == 0], minlength=mixture.datasets[0].num_frames)
    assert counts.min() >= 4 and counts.max() - counts.min() <= 1
    # within a pass each dataset keeps at most the buffer's episodes open; the order is (seed, epoch)'s alone
    sampler = EpisodeAwareSampler(
        mixture, buffer_episodes=2, weights=[0.5, 0.5], seed=5, num_samples=80, drop_last_frames=1
    )
    order = np.array(list(sampler))
    for d, ds in enumerate(mixture.datasets):
        draws = order[mixture.dataset_of(order) == d] - mixture.offsets[d]
        assert len(draws) and len(set(draws.tolist())) == len(draws)  # one pass: no frame twice
        assert not set(draws.tolist()) & set((ds.episode_bounds[:, 1] - 1).tolist())  # the last frames dropped
        assert open_intervals(draws, ds.episode_bounds) <= 2
    assert np.array_equal(order, np.array(list(sampler)))
    sampler.set_epoch(1)
    assert not np.array_equal(order, np.array(list(sampler)))


def batches(workers: int, start_batch: int, count: int) -> list[dict]:
    """`count` batches of training's batch stream from batch `start_batch` of a streamed mixture, fresh caches."""
    from hfpolicy.training.data import endless_batches

    dataset = streamed()
    dataset.split_budgets(GB, GB, buffer_episodes=2, num_workers=workers, shards=2)
    sampler = EpisodeAwareSampler(dataset, buffer_episodes=2, weights=[0.3, 0.7], seed=7, shards=2, batch_size=4)
    batch_sampler = EpochBatchSampler(sampler, 4)
    loader = torch.utils.data.DataLoader(
        dataset, sampler=batch_sampler, batch_size=None, num_workers=workers, generator=torch.Generator()
    )
    stream = endless_batches(loader, batch_sampler, start_batch, seed=7)
    return [next(stream) for _ in range(count)]


def test_a_resumed_streamed_mixture_reads_what_the_uninterrupted_one_would(served):
    per_epoch = sum(map(sum, LENGTHS.values())) // 4  # 30: the runs below cross into the second epoch
    full = batches(workers=0, start_batch=0, count=per_epoch + 3)
    resumed = batches(workers=2, start_batch=per_epoch - 4, count=7)  # mid-epoch, in two worker processes
    for a, b in zip(full[per_epoch - 4 :], resumed, strict=True):
        assert_same_batch(a, b)
    assert {int(d) for b in full for d in b[DATASET_INDEX]} == {0, 1}
    assert not all(torch.equal(a["index"], b["index"]) for a, b in zip(full, full[per_epoch:], strict=False))


def test_the_budgets_are_split_and_hold_for_the_whole_mixture(served):
    frame = 32 * 32 * 3
    needs = [sum(sorted(lengths)[-2:]) * frame for lengths in LENGTHS.values()]  # the 2 largest episodes, one camera
    ram = sum(needs) + 2 * 20 * frame  # room for only 2 more episodes: the LRUs must evict
    stream = streamed(stream_video="download")
    shares = stream.split_budgets(ram, 10**6, buffer_episodes=2)
    assert sum(memory for memory, _ in shares) <= ram and sum(disk for _, disk in shares) <= 10**6
    assert all(memory >= need for (memory, _), need in zip(shares, needs, strict=True))
    sampler = EpisodeAwareSampler(stream, buffer_episodes=2, seed=1, num_samples=2 * stream.num_frames)
    for batch in torch.utils.data.BatchSampler(sampler, 8, drop_last=False):
        stream.get_batch(batch)
        assert sum(ds.frames.bytes for ds in stream.datasets) <= ram
        assert sum(ds.files.bytes for ds in stream.datasets) <= 10**6
    assert sum(ds.frames.peak_bytes for ds in stream.datasets) <= ram
    assert sum(ds.frames.evictions for ds in stream.datasets) > 0  # the budget was binding
    auto = streamed()  # a disk budget that holds every dataset's files: each gets them all, none reads by range
    auto.split_budgets(GB, sum(ds.disk_bytes() for ds in auto.datasets), buffer_episodes=2)
    assert not any(ds.video_by_range() for ds in auto.datasets)
    with pytest.raises(ValueError, match=r"user/smix-a \d+\.\d+ MiB, user/smix-b .*--dataset\.stream_ram_gb"):
        streamed(stream_video="download").split_budgets(sum(needs) - 1, 10**6, buffer_episodes=2)


def test_a_feature_the_streamed_datasets_disagree_on_is_refused_naming_them(served, tmp_path, capsys):
    from hfpolicy.training import main

    features = {**TINY_FEATURES, "observation.state": {"dtype": "float32", "shape": [3], "names": None}}
    with DatasetWriter.create(tmp_path / "c", "user/smix-c", FPS, features) as writer:
        for i in range(6):
            image = np.zeros((32, 32, 3), dtype=np.uint8)
            frame = {"observation.image": image, "observation.state": np.zeros(3, np.float32), "next.done": i == 5}
            writer.add_frame({**frame, "action": np.zeros(2, np.float32), "next.reward": np.float32(0)}, task="t")
        writer.save_episode()
    push_dataset_to_hub(tmp_path / "c", "user/smix-c")
    flags = ["--dataset.streaming=true", "--dataset.repo_id=[user/smix-a,user/smix-c]", "--policy.type=diffusion"]
    assert main([*flags, f"--output_dir={tmp_path / 'run'}", "--tracker=none", "--eval.freq=0"]) == 2
    err = capsys.readouterr().err
    assert "'observation.state': user/smix-a has float32 [2], user/smix-c has float32 [3]" in err
