"""`FrameLRU`: the streaming reader's decoded episodes, kept in memory up to a byte budget (per process)."""

from collections import OrderedDict
from collections.abc import Hashable, Set

import numpy as np

from hfpolicy.datasets.per_process_budget import PerProcessBudget


class FrameLRU(PerProcessBudget):
    """uint8 arrays by key, bounded by `max_bytes` (over all DataLoader workers), the least recently used evicted
    first, but after those the caller says are in use (`keep`: the episodes of the batch being read)."""

    def __init__(self, max_bytes: int, budget_words: str):
        if max_bytes <= 0:
            raise ValueError(f"{budget_words} must be > 0")
        self.max_bytes = int(max_bytes)
        self.budget_words = budget_words  # how the budget is set, in errors: "stream_ram_gb= / --dataset.stream_ram_gb"
        self._reset(share=1)

    def _clear(self) -> None:
        self._entries: OrderedDict[Hashable, np.ndarray] = OrderedDict()  # least recently used first
        self.loads = 0  # arrays put (a decode each)

    def get(self, key: Hashable) -> np.ndarray | None:
        self._reset_if_forked()
        array = self._entries.get(key)
        if array is not None:
            self._entries.move_to_end(key)
        return array

    def make_room(self, nbytes: int, what: str, keep: Set[Hashable] = frozenset()) -> None:
        """Evicts arrays until `nbytes` more fit (ValueError when they never can); call it before allocating the
        array, so that the bound holds while it is filled."""
        budget = self.budget
        if nbytes > budget:
            raise ValueError(
                f"{what} needs {nbytes / 1024**2:.2f} MiB of decoded frames, more than the streaming memory budget "
                f"of {budget / 1024**2:.2f} MiB{self.share_words()}: raise {self.budget_words}, or use fewer workers"
            )
        while self._entries and self.bytes + nbytes > budget:
            victim = next((k for k in self._entries if k not in keep), next(iter(self._entries)))
            self.bytes -= self._entries.pop(victim).nbytes
            self.evictions += 1
        self.peak_bytes = max(self.peak_bytes, self.bytes + nbytes)

    def put(self, key: Hashable, array: np.ndarray, what: str, keep: Set[Hashable] = frozenset()) -> None:
        """Keeps `array` as the most recently used, making room for it."""
        self._reset_if_forked()
        if key in self._entries:
            self.bytes -= self._entries.pop(key).nbytes
        self.make_room(array.nbytes, what, keep)
        self._entries[key] = array
        self.bytes += array.nbytes
        self.loads += 1

    def __len__(self) -> int:
        self._reset_if_forked()
        return len(self._entries)

    def __getstate__(self) -> dict:
        return {"max_bytes": self.max_bytes, "budget_words": self.budget_words}
