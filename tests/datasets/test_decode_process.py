"""The decoding process of a streamed reader with 0 DataLoader workers (decode_process.py): its items are the
in-memory reader's, it decodes the episodes read ahead in a child process, the reader takes back decodes the child
has not begun instead of waiting, a child that dies is named, workers keep decoding in their own thread, and the
child dies with its reader."""

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from dataset_helpers import STREAMED_DELTAS, STREAMED_LENGTHS, assert_same_batch, episode_rows

from hfpolicy.datasets import (
    BatchIndices,
    EpisodeAwareSampler,
    EpochBatchSampler,
    PolicyDataset,
    StreamingError,
    StreamingPolicyDataset,
    remote_files,
)
from hfpolicy.datasets.decode_process import DecodeProcessError, decode_process_supported
from hfpolicy.datasets.streaming import StreamingPolicyDataset as Streaming

pytestmark = pytest.mark.skipif(
    not decode_process_supported(), reason="a decoding process needs fork and memfd (Linux)"
)
GB = 1024**3
CAMERAS = 2  # the streamed dataset's video camera and PNG camera


def child_pids(dataset) -> list[int]:
    return list(dataset._decoder._executor._processes)


def slow_child(monkeypatch, seconds: float) -> None:
    """Makes every decode in a child process (forked after this) take `seconds` longer; the reader's are unchanged."""
    parent, decode = os.getpid(), Streaming._decode_episode

    def slow(self, key, episode_pos, out):
        if os.getpid() != parent:
            time.sleep(seconds)
        decode(self, key, episode_pos, out)

    monkeypatch.setattr(Streaming, "_decode_episode", slow)


def test_the_child_is_forked_when_the_reader_is_made(streamed):
    dataset = StreamingPolicyDataset(streamed[1], delta_timestamps=STREAMED_DELTAS, decode_process=True)
    assert child_pids(dataset) == [dataset._decoder.pid] and dataset._decoder.pid != os.getpid()
    assert dataset.files.budget == dataset.files.max_bytes // 2  # the reader's half of the disk budget
    assert StreamingPolicyDataset(streamed[1], delta_timestamps=STREAMED_DELTAS)._decoder is None  # by default


def test_read_ahead_without_workers_decodes_in_a_child_process_and_changes_no_item(streamed):
    root, repo_id = streamed[:2]
    local = PolicyDataset(repo_id, root=root, delta_timestamps=STREAMED_DELTAS)
    dataset = StreamingPolicyDataset(
        repo_id, delta_timestamps=STREAMED_DELTAS, stream_video="download", decode_process=True
    )
    sampler = EpisodeAwareSampler(dataset, buffer_episodes=1, drop_last_frames=2, seed=3)
    for epoch in range(2):
        for batch_indices in EpochBatchSampler(sampler, 4, read_ahead=2):
            assert_same_batch(dataset[batch_indices], local.get_batch(batch_indices))
        if epoch == 0:
            decoder = dataset._decoder
            assert decoder is not None and child_pids(dataset) and os.getpid() not in child_pids(dataset)
            # every episode but the first was read ahead; the child decoded those the reader did not take back
            assert dataset.read_ahead.decoded_ahead == CAMERAS * (len(STREAMED_LENGTHS) - 1)
            assert decoder.decodes + decoder.stolen == dataset.read_ahead.decoded_ahead and decoder.decodes > 0
            assert dataset.frames.loads == CAMERAS * len(STREAMED_LENGTHS)
    # the child's fetches are counted in the reader's RemoteFiles: one file per decode (an episode's video file or
    # its data file, for the PNG camera), in whichever process decoded it, and the data files read at the start
    assert dataset.files.fetches == len(STREAMED_LENGTHS) + CAMERAS * len(STREAMED_LENGTHS)
    assert dataset.frames.reserved == 0
    # the reader pickles without its child (a DataLoader worker started with spawn gets none)
    assert pickle.loads(pickle.dumps(dataset))._decoder is None


def test_the_reader_decodes_what_the_child_has_not_begun_instead_of_waiting(streamed, monkeypatch):
    root, repo_id = streamed[:2]
    slow_child(monkeypatch, 0.5)
    local = PolicyDataset(repo_id, root=root, delta_timestamps=STREAMED_DELTAS)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=STREAMED_DELTAS, decode_process=True)
    rest = [row for pos in (1, 2, 3) for row in episode_rows(dataset, pos)]
    dataset[BatchIndices(episode_rows(dataset, 0), ahead=rest)]  # 6 decodes to the child, which is slow
    started = time.perf_counter()
    last = episode_rows(dataset, 3)
    assert_same_batch(dataset[last], local.get_batch(last))  # the newest ones: taken back, not waited for
    assert time.perf_counter() - started < 0.5 and dataset._decoder.stolen >= CAMERAS
    assert_same_batch(dataset[rest], local.get_batch(rest))  # the child's and the reader's decodes together
    decoder = dataset._decoder
    assert decoder.decodes + decoder.stolen == CAMERAS * 3 and decoder.decodes > 0
    assert dataset.frames.reserved == 0 and dataset.frames.loads == CAMERAS * len(STREAMED_LENGTHS)


def test_a_decode_taken_back_that_fails_raises_when_its_episode_is_needed(streamed, hub_server, monkeypatch):
    root, repo_id = streamed[:2]
    slow_child(monkeypatch, 0.5)
    monkeypatch.setattr(remote_files, "_wait", lambda seconds: None)
    dataset = StreamingPolicyDataset(
        repo_id, delta_timestamps=STREAMED_DELTAS, stream_retries=2, stream_video="download", decode_process=True
    )
    later = [row for pos in (1, 3) for row in episode_rows(dataset, pos)]
    dataset[BatchIndices(episode_rows(dataset, 0), ahead=later)]  # the child sleeps on episode 1; 3 waits
    path = "videos/observation.image/chunk-000/file-003.mp4"
    hub_server.fail_reads(path, times=1000)
    try:
        dataset[episode_rows(dataset, 1)]  # while waiting for episode 1, the reader takes back episode 3's: it fails
        assert dataset._decoder.stolen >= 1
        with pytest.raises(StreamingError) as caught:  # ... and says so only when episode 3 is needed
            dataset[episode_rows(dataset, 3)]
    finally:
        hub_server.fail_reads(path, times=0)
    assert path in str(caught.value) and "episode 3 of user/stream-tiny" in str(caught.value)
    local = PolicyDataset(repo_id, root=root, delta_timestamps=STREAMED_DELTAS)
    rows = episode_rows(dataset, 3)
    assert_same_batch(dataset[rows], local.get_batch(rows))  # read again once the file is back
    assert dataset.frames.reserved == 0


def test_a_child_that_dies_is_named_with_the_flags_that_avoid_it(streamed, monkeypatch):
    repo_id = streamed[1]
    slow_child(monkeypatch, 2.0)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=STREAMED_DELTAS, decode_process=True)
    dataset[BatchIndices(episode_rows(dataset, 0), ahead=episode_rows(dataset, 1))]
    time.sleep(0.3)  # the child has begun episode 1
    for pid in child_pids(dataset):
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(DecodeProcessError) as caught:
        dataset[episode_rows(dataset, 1)]
    message = str(caught.value)
    assert "episode 1 of user/stream-tiny" in message and "stopped" in message
    assert "--dataset.stream_read_ahead=0" in message
    with pytest.raises(DecodeProcessError):  # and every later read ahead says the same, rather than hang
        dataset[BatchIndices(episode_rows(dataset, 0), ahead=episode_rows(dataset, 2))]
    # held back: only the bytes of episode 1's PNG camera, still pending (episode 2's refused decode released its own)
    assert dataset.frames.reserved == 8 * 8 * 3 * STREAMED_LENGTHS[1]


def test_dataloader_workers_decode_ahead_in_their_own_thread(streamed):
    root, repo_id = streamed[:2]
    local = PolicyDataset(repo_id, root=root, delta_timestamps=STREAMED_DELTAS)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=STREAMED_DELTAS, decode_process=True)
    sampler = EpisodeAwareSampler(dataset, buffer_episodes=2, drop_last_frames=2, seed=3, shards=2)
    batches = EpochBatchSampler(sampler, 4, read_ahead=2)
    loader = torch.utils.data.DataLoader(dataset, sampler=batches, batch_size=None, num_workers=2)
    for batch_indices, batch in zip(batches, loader, strict=True):
        assert_same_batch(batch, local.get_batch(batch_indices))
    # the workers (forked from this process, child and all) decoded ahead in their threads, not through the child
    assert dataset._decoder.decodes == 0 and not dataset._decoder._queued and dataset.frames.loads == 0


def test_decode_process_false_decodes_ahead_in_a_thread(streamed):
    root, repo_id = streamed[:2]
    local = PolicyDataset(repo_id, root=root, delta_timestamps=STREAMED_DELTAS)
    dataset = StreamingPolicyDataset(repo_id, delta_timestamps=STREAMED_DELTAS, decode_process=False)
    rows, ahead = episode_rows(dataset, 0), episode_rows(dataset, 1)
    assert_same_batch(dataset[BatchIndices(rows, ahead=ahead)], local.get_batch(rows))
    assert_same_batch(dataset[ahead], local.get_batch(ahead))
    assert dataset._decoder is None and dataset.read_ahead.decoded_ahead == CAMERAS
    assert np.array_equal(dataset.frames.get(("observation.image", 1)), local._caches["observation.image"].array[12:17])


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_the_child_dies_with_the_reader_on_kill_9(streamed, tmp_path):
    """kill -9 of the reader's process (a trainer) leaves no decoding process behind under init."""
    script = (
        "import sys, time\n"
        "from hfpolicy.datasets import StreamingPolicyDataset\n"
        f"dataset = StreamingPolicyDataset({streamed[1]!r}, decode_process=True)\n"
        "print(dataset._decoder.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    reader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = int(reader.stdout.readline())
        assert process_alive(child)
    finally:
        reader.kill()
        reader.wait(30)
    deadline = time.monotonic() + 10
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"the decoding process {child} outlived its reader killed with SIGKILL")
