"""`DecodeProcess`: a streamed reader's video decoding moved into a child process of its own, the frames written
straight into shared memory that the reader then holds (read-ahead with 0 DataLoader workers, read_ahead.py).

Why a process and not a thread: PyAV releases the GIL inside each FFmpeg call, but takes it back many times per frame
(packets, frames, the RGB conversion), and each time it waits for a CPU-bound main thread to give it up, up to the
interpreter's switch interval (5 ms), so a decoding thread beside a busy loader gains little
(docs/streaming.md#decoding-ahead). A process has its own GIL.

The child is forked from the reader's process when the reader is made (no pickling, no re-import, nothing re-run
from `__main__`), before a training builds its model: a forked child keeps its own copy of every page the parent
changes after the fork (forked at the first read-ahead of a training instead, it came to hold hundreds of MiB of
the trainer's pages privately: docs/streaming.md#decoding-ahead). It starts with empty caches (worker_budget.py: a
process keeps only its own entries); it and the reader each hold at most half the disk budget, since the reader
decodes what it takes back. For each episode the reader makes a memfd of the frames' size (an anonymous file: gone
once nobody holds it, whatever ends how), the child opens it through /proc, decodes into it and answers with its
fetch counters; the reader maps the same pages. The reader reserves the bytes in its memory budget before
(FrameLRU.reserve), as for a decode in a thread. The child dies with the reader's process, however that ends (kill -9
included: hfpolicy.io.termination.die_with_parent), rather than waiting under init for work that never comes.
"""

import mmap
import os
import sys
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from hfpolicy.io.termination import die_with_parent

COUNTERS = ("fetches", "range_reads", "range_bytes", "evictions")  # RemoteFiles counters the child reports back

_dataset = None  # in the child: the StreamingPolicyDataset it decodes for (set in the reader only while it forks)


def decode_process_supported() -> bool:
    """Whether this platform forks and has memfds (Linux): elsewhere read-ahead decodes in a thread."""
    import multiprocessing

    return hasattr(os, "memfd_create") and "fork" in multiprocessing.get_all_start_methods() and sys.platform == "linux"


class DecodeProcessError(RuntimeError):
    """The decoding process of a streamed dataset stopped (killed, out of memory, crashed)."""


def _decode(key: str, episode_pos: int, frames_path: str, shape: tuple[int, ...]) -> dict[str, int]:
    """In the child: camera `key` of the `episode_pos`-th chosen episode decoded into the memfd at `frames_path`;
    returns the growth of its fetch counters and its disk peak."""
    files = _dataset.files
    files.split(2)  # the reader decodes what it steals: each holds at most half the disk budget
    before = {name: getattr(files, name) for name in COUNTERS}
    with open(frames_path, "r+b") as f:
        # not closed here: a failed decode's traceback, sent back, still views it; unmapped once collected
        buffer = mmap.mmap(f.fileno(), int(np.prod(shape)))
    _dataset._decode_episode(key, episode_pos, np.frombuffer(buffer, dtype=np.uint8).reshape(shape))
    grown = {name: getattr(files, name) - before[name] for name in COUNTERS}
    return {**grown, "peak_bytes": files.peak_bytes}


class DecodeProcess:
    """One forked child that decodes the episodes of `dataset` (a StreamingPolicyDataset) into shared memory; the
    reader may take back a decode the child has not begun (`steal`) and do it itself rather than wait."""

    def __init__(self, dataset):
        import multiprocessing

        self._pid = os.getpid()
        self._repo_id = dataset.repo_id
        self._files = dataset.files
        self._queued: dict[tuple[str, int], Future] = {}  # (key, episode_pos) -> the child's task, oldest first
        self._counters: list[dict[str, int]] = []  # what each decode reported, until `collect`
        self.decodes = 0  # episodes (cameras) the child decoded
        self.stolen = 0  # decodes taken back by the reader
        self.disk_peak_bytes = 0  # the most the child held on disk at once (the reader's own: its RemoteFiles)
        self._executor = ProcessPoolExecutor(  # the child dies with the reader's process, even on kill -9
            max_workers=1,
            mp_context=multiprocessing.get_context("fork"),
            initializer=die_with_parent,
            initargs=(self._pid,),
        )
        global _dataset
        _dataset = dataset  # the child's, through the fork (kept here, it would be a reference cycle)
        try:
            self.pid = self._executor.submit(os.getpid).result()  # forks it now (see the module's docstring)
        finally:
            _dataset = None
        weakref.finalize(dataset, self._executor.shutdown, wait=False, cancel_futures=True)

    def owned(self) -> bool:
        """Whether this process started the child (a forked DataLoader worker did not, and does not use it)."""
        return os.getpid() == self._pid

    def submit(self, key: str, episode_pos: int, shape: tuple[int, ...], what: str) -> Future:
        """A future of the (len, C, H, W) uint8 frames of camera `key` of the `episode_pos`-th chosen episode, decoded
        by the child; it raises the decode's own error (StreamingError, DatasetFormatError, ...), DecodeProcessError
        if the child died, or CancelledError once stolen."""
        nbytes = int(np.prod(shape))
        fd = os.memfd_create(f"hfpolicy-frames-{episode_pos}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            decoded = self._executor.submit(_decode, key, episode_pos, f"/proc/{self._pid}/fd/{fd}", shape)
        except BrokenProcessPool as e:  # it died before: every later decode says so
            os.close(fd)
            raise self._died(what, e) from e
        except BaseException:
            os.close(fd)
            raise
        self._queued[(key, episode_pos)] = decoded
        frames: Future = Future()

        def deliver(done: Future) -> None:  # in the executor's thread, or in `steal`'s
            self._queued.pop((key, episode_pos), None)
            try:
                counters = done.result()
                buffer = mmap.mmap(fd, nbytes)  # the child's pages, written
            except BrokenProcessPool as e:
                frames.set_exception(self._died(what, e))
                return
            except BaseException as e:
                frames.set_exception(e)
                return
            finally:
                os.close(fd)  # the mapping keeps the pages; with it gone, they are freed
            self._counters.append(counters)  # counted by the reader's thread (collect)
            frames.set_result(np.frombuffer(buffer, dtype=np.uint8).reshape(shape))

        decoded.add_done_callback(deliver)
        return frames

    def steal(self) -> tuple[str, int] | None:
        """The newest (key, episode_pos) whose decode the child has not begun, cancelled there (its future raises
        CancelledError) for the reader to decode itself; None when every one has begun."""
        for entry in reversed(list(self._queued)):
            task = self._queued.get(entry)
            if task is not None and task.cancel():
                self.stolen += 1
                return entry
        return None

    def collect(self) -> None:
        """Adds the child's fetch counters to the reader's RemoteFiles (they say what was fetched for it)."""
        while self._counters:
            counters = self._counters.pop(0)
            for name in COUNTERS:
                setattr(self._files, name, getattr(self._files, name) + counters[name])
            self.disk_peak_bytes = max(self.disk_peak_bytes, counters["peak_bytes"])
            self.decodes += 1

    def _died(self, what: str, error: BaseException) -> DecodeProcessError:
        return DecodeProcessError(
            f"{what}: the process decoding the videos of {self._repo_id} stopped ({error}): it may have run out of "
            "memory; lower stream_ram_gb= / --dataset.stream_ram_gb, or decode in the reader's own process "
            "(--dataset.stream_read_ahead=0; in Python decode_process=False)"
        )
