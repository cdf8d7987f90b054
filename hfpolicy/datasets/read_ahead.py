"""`ReadAhead`: a streamed reader's decodes of the episodes its coming batches will draw, done before they are drawn,
so that a batch finds them decoded: in the reader's decoding process (decode_process.py) with 0 DataLoader workers,
in one thread of each worker otherwise.

The batch sampler says what is coming: `EpochBatchSampler(read_ahead=L)` gives each batch (a `BatchIndices`) the
positions of the next L batches of its shard (`ahead`). The reader (streaming.py) hands the episodes among them that
are neither in memory nor decoding to the decoding process (`adopt`: a future made there), or to the thread here
(`submit`), which decodes them one at a time. PyAV releases the GIL inside FFmpeg's calls, so the thread decodes
while the main thread waits (on a GPU step, say), but a CPU-bound main thread starves it (decode_process.py says by
how much). Thread decodes are serial (`lock`): one the main thread needs now waits at most for the one the thread is
doing. A decode ahead reserves its bytes in the frame budget (FrameLRU.reserve) before its array is allocated, so
the memory bound holds. An error of a decode ahead is raised when its episode is needed, where it would have been
raised without read-ahead.

Measured reason for decoding ahead of our own: torch's DataLoader decodes nothing ahead within a process, and with
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

        self.adopt(key, nbytes, self._executor.submit(run))

    def adopt(self, key: Hashable, nbytes: int, future: Future, ahead: bool = True) -> None:
        """Holds `future` (of `key`'s array, decoded elsewhere: decode_process.py) until `take`; counted as a decode
        ahead unless `ahead` is False (one already counted)."""
        self._own()
        self._pending[key] = (future, nbytes)
        self.decoded_ahead += ahead

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
