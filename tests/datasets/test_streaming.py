"""Streaming a Hub dataset (the 127.0.0.1 test server): the same items as the in-memory reader, exact resume through
the training's batch stream, memory and disk within tiny budgets, and a failed fetch retried, then named."""

import numpy as np
import pytest
import torch
from dataset_helpers import STREAMED_DELTAS, STREAMED_LENGTHS, assert_same_batch, episode_rows

from hfpolicy.datasets import (
    EpisodeAwareSampler,
    EpochBatchSampler,
    PolicyDataset,
    StreamingError,
    StreamingPolicyDataset,
    remote_files,
)

GB = 1024**3
LENGTHS, DELTAS = STREAMED_LENGTHS, STREAMED_DELTAS
BOUNDS = np.stack([np.cumsum([0, *LENGTHS[:-1]]), np.cumsum(LENGTHS)], axis=1)


def test_streamed_items_equal_the_in_memory_ones(streamed):
    root, repo_id, written, written_wrist = streamed
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    stream = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS)
    assert stream.num_frames == local.num_frames == sum(LENGTHS)
    assert stream.files.bytes == 0  # the data files were read into memory and deleted
    order = np.random.default_rng(1).permutation(stream.num_frames)
    batch = stream.get_batch(order)
    assert_same_batch(batch, local.get_batch(order))
    assert batch["action_is_pad"].any() and batch["observation.image_is_pad"].any()  # windows past the edges
    assert_same_batch(stream.__getitems__([3, 30])[1], local[30])
    # the decoded video is the written one within the codec's loss (H.264); the PNG camera is exact
    got = np.rint(batch["observation.image"][:, -1].numpy() * 255).transpose(0, 2, 3, 1)
    assert np.abs(got - written[order].astype(np.float64)).mean() < 5  # as test_writer_roundtrip's tolerance
    wrist = np.rint(batch["observation.wrist"].numpy() * 255).astype(np.uint8).transpose(0, 2, 3, 1)
    assert np.array_equal(wrist, written_wrist[order])
    assert stream.frames.loads == 2 * len(LENGTHS)  # each episode of each camera decoded once

    some = StreamingPolicyDataset(repo_id, episodes=[1, 3], delta_timestamps=DELTAS)
    subset = PolicyDataset(repo_id, root=root, episodes=[1, 3], delta_timestamps=DELTAS)
    assert some.num_frames == LENGTHS[1] + LENGTHS[3]
    assert_same_batch(some.get_batch(range(some.num_frames)), subset.get_batch(range(subset.num_frames)))
    assert "StreamingPolicyDataset('user/stream-tiny', revision=" in repr(some)


def test_a_resumed_stream_reads_what_the_uninterrupted_one_would(streamed):
    from hfpolicy.training.data import endless_batches

    repo_id = streamed[1]

    def batches(start_batch: int, workers: int, count: int) -> list[dict]:
        dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS)
        sampler = EpisodeAwareSampler(dataset, buffer_episodes=2, drop_last_frames=2, seed=5)
        batch_sampler = EpochBatchSampler(sampler, 4)
        loader = torch.utils.data.DataLoader(
            dataset, sampler=batch_sampler, batch_size=None, num_workers=workers, generator=torch.Generator()
        )
        stream = endless_batches(loader, batch_sampler, start_batch, seed=5)
        return [next(stream) for _ in range(count)]

    epoch_batches = (sum(LENGTHS) - 2 * len(LENGTHS)) // 4  # 9: the run below crosses into the second epoch
    full = batches(0, workers=0, count=12)
    resumed = batches(5, workers=2, count=7)  # fresh caches, in two worker processes
    for a, b in zip(full[5:], resumed, strict=True):
        assert_same_batch(a, b)
    first_epoch = EpisodeAwareSampler(BOUNDS, buffer_episodes=2, drop_last_frames=2, seed=5)
    drawn = torch.cat([b["index"] for b in full[:epoch_batches]]).tolist()
    assert drawn == list(first_epoch)[: 4 * epoch_batches]  # the stream follows the shuffle buffer's order


def test_memory_and_disk_stay_within_tiny_budgets(streamed):
    root, repo_id = streamed[:2]
    largest_episode = max(LENGTHS) * (32 * 32 * 3 + 8 * 8 * 3)
    streamed_files = [p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] in ("data", "videos")]
    largest_file = max(p.stat().st_size for p in streamed_files)
    ram, disk = 2 * largest_episode, 2 * largest_file
    budgets = {"stream_ram_gb": ram / GB, "stream_disk_gb": disk / GB}
    # whole files (the videos do not all fit the disk budget: "auto" would read them by range, test_streaming_ranges)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_video="download", **budgets)
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    sampler = EpisodeAwareSampler(dataset, buffer_episodes=1, seed=0)
    dataset.check_buffer_fits(1)
    fetches = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch_indices in torch.utils.data.BatchSampler(sampler, 8, drop_last=False):
            assert_same_batch(dataset.get_batch(batch_indices), local.get_batch(batch_indices))
            on_disk = sum(
                p.stat().st_size for p in dataset.files.folder.rglob("*") if p.is_file() and ".cache" not in p.parts
            )
            assert on_disk <= disk and dataset.files.bytes <= disk
            assert dataset.frames.bytes <= ram
        fetches.append(dataset.files.fetches)
    assert dataset.frames.peak_bytes <= ram and dataset.files.peak_bytes <= disk
    assert dataset.frames.evictions > 0 and dataset.files.evictions > 0  # the budgets were binding
    assert fetches[1] > fetches[0]  # evicted files were fetched again in the second epoch


def test_budgets_that_cannot_hold_an_episode_or_a_file_are_refused_naming_the_setting(streamed):
    repo_id = streamed[1]
    with pytest.raises(ValueError, match="stream_ram_gb= / --dataset.stream_ram_gb"):
        StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_ram_gb=1000 / GB)
    with pytest.raises(StreamingError, match=r"data/chunk-000/file-000\.parquet .*--dataset\.stream_disk_gb"):
        StreamingPolicyDataset(repo_id, stream_disk_gb=100 / GB)
    two_episodes = 2 * max(LENGTHS) * (32 * 32 * 3 + 8 * 8 * 3)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_ram_gb=two_episodes / GB)
    dataset.check_buffer_fits(2)
    with pytest.raises(ValueError, match="--dataset.shuffle_buffer_episodes"):
        dataset.check_buffer_fits(3)
    with pytest.raises(ValueError, match="--num_workers"):
        dataset.check_buffer_fits(2, num_workers=2)


def server_object(hub_server, repo_id: str, path: str):
    """Where the test server stores the bytes of `path` of the dataset repo's main branch."""
    hub = hub_server.hub
    commit = hub.resolve(hub.get_repo("dataset", repo_id), "main")
    return hub.object_path(commit.files[path].sha256)


def gets_of(hub_server, path: str, since: int) -> int:
    return sum(
        1
        for method, url in hub_server.requests[since:]
        if method == "GET" and "/resolve/" in url and url.endswith(path)
    )


def test_a_fetch_that_fails_once_is_retried(streamed, hub_server, monkeypatch):
    root, repo_id = streamed[:2]
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_retries=3)
    path = "videos/observation.image/chunk-000/file-002.mp4"
    stored = server_object(hub_server, repo_id, path)
    aside = stored.with_name(stored.name + ".aside")
    waits = []

    def restore_then_wait(seconds):  # the file comes back while the reader waits to try again
        waits.append(seconds)
        if aside.exists():
            aside.rename(stored)

    monkeypatch.setattr(remote_files, "_wait", restore_then_wait)
    since = len(hub_server.requests)
    stored.rename(aside)  # the server answers 501 for its bytes now
    try:
        batch = dataset.get_batch(episode_rows(dataset, 2))
    finally:
        if aside.exists():
            aside.rename(stored)
    assert waits == [remote_files.RETRY_BASE_WAIT_S] and gets_of(hub_server, path, since) == 2
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    assert_same_batch(batch, local.get_batch(episode_rows(local, 2)))


def test_a_fetch_that_keeps_failing_stops_the_epoch_naming_the_file(streamed, hub_server, monkeypatch):
    root, repo_id = streamed[:2]
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_retries=3)
    path = "videos/observation.image/chunk-000/file-003.mp4"
    stored = server_object(hub_server, repo_id, path)
    aside = stored.with_name(stored.name + ".aside")
    waits: list[float] = []
    monkeypatch.setattr(remote_files, "_wait", waits.append)
    loader = torch.utils.data.DataLoader(
        dataset, sampler=torch.utils.data.BatchSampler(range(dataset.num_frames), 8, drop_last=False), batch_size=None
    )
    since, seen = len(hub_server.requests), 0
    stored.rename(aside)
    try:
        with pytest.raises(StreamingError) as caught:
            for batch in loader:
                seen += len(batch["index"])
    finally:
        aside.rename(stored)
    message = str(caught.value)
    assert path in message and "episode 3 of user/stream-tiny" in message and "after 3 attempts" in message
    assert "--dataset.stream_retries" in message and "501" in message  # the server's answer, as it failed
    assert waits == [0.5, 1.0] and gets_of(hub_server, path, since) == 3
    assert seen < dataset.num_frames  # the epoch stopped with the error: it did not go on without episode 3
    # nothing was dropped for good: with the file back, episode 3 reads as it should
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    assert_same_batch(dataset.get_batch(episode_rows(dataset, 3)), local.get_batch(episode_rows(local, 3)))
