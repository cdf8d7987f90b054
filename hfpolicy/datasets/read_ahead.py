"""`ReadAhead`: a streamed reader's background decoding of the episodes its coming batches will draw, so that a batch
finds them decoded (with 0 DataLoader workers, the streaming reader's only parallelism; with workers, each has its own).

The batch sampler says what is coming: `EpochBatchSampler(read_ahead=L)` gives each batch (a `BatchIndices`) the
positions of the next L batches of its shard (`ahead`). The reader (streaming.py) hands the episodes among them that
are neither in memory nor decoding to one thread here, which decodes them one at a time. PyAV releases the GIL while
it demuxes and decodes, so the thread decodes while the main thread gathers batches and trains. Decodes are serial
(`lock`): one the main thread needs now waits at most for the one the thread is doing. A decode ahead reserves its
bytes in the frame budget (FrameLRU.reserve) before its array is allocated, so the memory bound holds. An error of a
decode ahead is raised when its episode is needed, where it would have been raised without read-ahead.

Measured reason for a thread of our own: torch's DataLoader decodes nothing ahead within a process, and with
workers each batch still waits for the decodes of its own new episodes.
"""

import os
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np


class ReadAhead:
    """Episodes being decoded ahead by one background thread, by key, with the bytes each reserved."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()  # a DataLoader worker starts its own (a fork copies no thread, and maybe a held lock)
        self.lock = threading.Lock()  # held by every decode, ahead or not
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[Hashable, tuple[Future, int]] = {}
        self.decoded_ahead = 0  # episodes (cameras) submitted to the thread

    def _own(self) -> None:
        if os.getpid() != self._pid:
            self._reset()

    def __contains__(self, key: Hashable) -> bool:
        self._own()
        return key in self._pending

    def submit(self, key: Hashable, nbytes: int, decode: Callable[[], np.ndarray]) -> None:
        """Decodes `decode()` in the thread, under `lock`; `nbytes` (already reserved by the caller) is returned
        by `take`."""
        self._own()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hfpolicy-read-ahead")

        def run() -> np.ndarray:
            with self.lock:
                return decode()

        self._pending[key] = (self._executor.submit(run), nbytes)
        self.decoded_ahead += 1

    def take(self, key: Hashable) -> tuple[Future, int] | None:
        """(the future of `key`'s array, the bytes it reserved) and forgets it; None if `key` was not submitted.
        The caller waits on the future (which raises the decode's error) and then releases the bytes."""
        self._own()
        return self._pending.pop(key, None)

    # Pickling (DataLoader workers started with spawn/forkserver): nothing pending travels.
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._reset()
