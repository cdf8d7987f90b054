"""Streamed video read by byte ranges (`stream_video`, the 127.0.0.1 test server through HfFileSystem): the frames of
the downloaded file exactly, a part of the file fetched per episode, nothing on disk, the read buffers inside the
memory budget, and a read that fails midway retried, then named."""

import numpy as np
import pytest
from dataset_helpers import FPS, TINY_FEATURES, assert_same_batch, episode_rows

from hfpolicy.datasets import (
    DatasetWriter,
    PolicyDataset,
    StreamingError,
    StreamingPolicyDataset,
    push_dataset_to_hub,
    remote_files,
)
from hfpolicy.datasets.range_reads import read_buffer_bytes

GB = 1024**3
SIZE = 96
LENGTHS = [20, 14, 24, 18, 22, 16, 20, 12]  # one video file holds them all
BLOCK = 16 * 1024  # bytes per range request: small, so that reading one episode takes several
VIDEO = "videos/observation.image/chunk-000/file-000.mp4"
FEATURES = {**TINY_FEATURES, "observation.image": {**TINY_FEATURES["observation.image"], "shape": [SIZE, SIZE, 3]}}
DELTAS = {"observation.image": [-0.1, 0.0], "action": [i / FPS for i in range(4)]}


@pytest.fixture(scope="module")
def ranged(hub_server, tmp_path_factory):
    """(local root, repo id) of an 8-episode dataset on the test server whose episodes share one video file (noise
    frames at crf 10: several KB each, so that the file is much larger than an episode's part and a read buffer)."""
    root = tmp_path_factory.mktemp("ranged") / "noise"
    writer = DatasetWriter.create(root, "user/stream-ranges", FPS, FEATURES, video_crf=10)
    rng = np.random.default_rng(0)
    with writer:
        for n in LENGTHS:
            for i in range(n):
                writer.add_frame(
                    {
                        "observation.image": rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8),
                        "observation.state": rng.normal(size=2).astype(np.float32),
                        "action": rng.normal(size=2).astype(np.float32),
                        "next.reward": np.float32(rng.uniform()),
                        "next.done": i == n - 1,
                    },
                    task="push the block",
                )
            writer.save_episode()
    push_dataset_to_hub(root, "user/stream-ranges")
    assert (root / VIDEO).stat().st_size > 4 * read_buffer_bytes(BLOCK)  # the premise of the byte counts below
    return root, "user/stream-ranges"


def small_disk_budget(root) -> float:
    """Room for the data file, not for the video file."""
    data = max(p.stat().st_size for p in (root / "data").rglob("*.parquet"))
    return 2 * data / GB


def gets_of(hub_server, path: str, since: int) -> int:
    return sum(1 for method, url in hub_server.requests[since:] if method == "GET" and url.endswith(path))


def test_range_reads_decode_the_downloaded_frames_fetching_a_part_of_the_file(ranged, hub_server):
    root, repo_id = ranged
    unhandled = len(hub_server.unhandled)
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    dataset = StreamingPolicyDataset(
        repo_id, delta_timestamps=DELTAS, stream_disk_gb=small_disk_budget(root), range_block_bytes=BLOCK
    )
    assert dataset.video_by_range()  # "auto": the video file does not fit the disk budget
    fetches, video_size = dataset.files.fetches, dataset.files.sizes[VIDEO]
    fetched = []
    for pos in range(dataset.num_episodes):
        before = dataset.files.range_bytes
        rows = episode_rows(dataset, pos)
        assert_same_batch(dataset.get_batch(rows), local.get_batch(rows))  # exact: the same decoder, the same bytes
        fetched.append(dataset.files.range_bytes - before)
    assert 0 < max(fetched) < video_size / 2  # the header and the episode's stretch, not the file
    assert dataset.files.range_reads == dataset.num_episodes  # one read per episode, none failed
    # nothing was downloaded for the video, and nothing is on disk
    assert dataset.files.fetches == fetches and dataset.files.bytes == 0
    assert not list(dataset.files.folder.rglob("*.mp4"))
    # the read buffers were reserved in the memory budget while decoding
    smallest = min(dataset.episode_nbytes(pos) for pos in range(dataset.num_episodes))
    assert dataset.frames.peak_bytes >= smallest + read_buffer_bytes(BLOCK)
    assert hub_server.unhandled[unhandled:] == []  # HfFileSystem's requests are all served

    whole = StreamingPolicyDataset(
        repo_id, delta_timestamps=DELTAS, stream_disk_gb=small_disk_budget(root), stream_video="download"
    )
    with pytest.raises(StreamingError, match=r"file-000\.mp4 .*--dataset\.stream_video=range"):
        whole.get_batch(episode_rows(whole, 0))


def test_the_read_buffers_count_in_the_memory_budget(ranged):
    repo_id = ranged[1]
    probe = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_video="download")
    largest = max(probe.episode_nbytes(pos) for pos in range(probe.num_episodes))
    need = largest + read_buffer_bytes(BLOCK)
    kwargs = {"delta_timestamps": DELTAS, "stream_video": "range", "range_block_bytes": BLOCK}
    dataset = StreamingPolicyDataset(repo_id, stream_ram_gb=need / GB, **kwargs)
    dataset.get_batch(range(dataset.num_frames))  # every episode, one at a time, within the budget
    assert dataset.frames.peak_bytes <= need
    with pytest.raises(
        ValueError, match=r"read buffers, more than the streaming memory budget .*--dataset\.stream_ram_gb"
    ):
        StreamingPolicyDataset(repo_id, stream_ram_gb=(need - 1) / GB, **kwargs)
    StreamingPolicyDataset(repo_id, stream_ram_gb=(need - 1) / GB, delta_timestamps=DELTAS, stream_video="download")


def test_a_range_read_that_fails_midway_is_retried(ranged, hub_server, monkeypatch):
    root, repo_id = ranged
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=DELTAS, stream_video="range", range_block_bytes=BLOCK)
    waits: list[float] = []
    monkeypatch.setattr(remote_files, "_wait", waits.append)
    since = len(hub_server.requests)
    hub_server.fail_reads(VIDEO, after=2, times=1)  # the third request of the read fails
    try:
        batch = dataset.get_batch(episode_rows(dataset, 4))
    finally:
        hub_server.fail_reads(VIDEO, times=0)
    assert waits == [remote_files.RETRY_BASE_WAIT_S] and dataset.files.range_reads == 2
    assert gets_of(hub_server, VIDEO, since) > 3 + 1  # 3 in the failed read, then a whole read of several
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)
    assert_same_batch(batch, local.get_batch(episode_rows(local, 4)))


def test_a_range_read_that_keeps_failing_is_named(ranged, hub_server, monkeypatch):
    root, repo_id = ranged
    kwargs = {"delta_timestamps": DELTAS, "stream_video": "range", "range_block_bytes": BLOCK}
    dataset = StreamingPolicyDataset(repo_id, stream_retries=3, **kwargs)
    waits: list[float] = []
    monkeypatch.setattr(remote_files, "_wait", waits.append)
    hub_server.fail_reads(VIDEO, after=1, times=1000)
    try:
        with pytest.raises(StreamingError) as caught:
            dataset.get_batch(episode_rows(dataset, 2))
    finally:
        hub_server.fail_reads(VIDEO, times=0)
    message = str(caught.value)
    assert VIDEO in message and "episode 2 of user/stream-ranges" in message and "read by range" in message
    assert "after 3 attempts" in message and "501" in message and "--dataset.stream_retries" in message
    assert waits == [0.5, 1.0] and dataset.files.range_reads == 3
    local = PolicyDataset(repo_id, root=root, delta_timestamps=DELTAS)  # the file reads once the server serves it
    assert_same_batch(dataset.get_batch(episode_rows(dataset, 2)), local.get_batch(episode_rows(local, 2)))
