"""`PerProcessBudget`: the byte budget that the streaming caches (frames in memory, files on disk) share with the
DataLoader's workers: each worker starts empty and keeps at most budget / num_workers."""

import os

import torch


class PerProcessBudget:
    """Base of a cache bounded by `max_bytes` over all DataLoader workers; a subclass empties its entries in
    `_clear()` and calls `self._reset_if_forked()` before each use."""

    max_bytes: int

    def _reset(self, share: int) -> None:
        self._pid = os.getpid()
        self._share = max(1, share)
        self.bytes = 0  # held now
        self.peak_bytes = 0  # the most ever held (or reserved) at once by this process
        self.evictions = 0
        self._clear()

    def _clear(self) -> None:
        raise NotImplementedError

    def _reset_if_forked(self) -> None:
        """In a new process (a DataLoader worker): start empty, with this worker's share of the budget."""
        if os.getpid() != self._pid:
            info = torch.utils.data.get_worker_info()
            self._reset(share=info.num_workers if info is not None else 1)

    @property
    def budget(self) -> int:
        """This process's bytes: the budget divided among the DataLoader workers."""
        self._reset_if_forked()
        return self.max_bytes // self._share

    def __setstate__(self, state: dict) -> None:
        """Pickled to a DataLoader worker (spawn/forkserver; `__getstate__` says what travels): it starts empty."""
        self.__dict__.update(state)
        self._reset(share=1)
        self._pid = -1  # unpickled before the worker knows its worker info: take the share at first use

    def share_words(self) -> str:
        """How errors name this process's share: "" in a single process."""
        return f" (its share in each of {self._share} DataLoader workers)" if self._share > 1 else ""
