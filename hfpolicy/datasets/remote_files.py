"""`RemoteFiles`: the files of one commit of a Hub dataset repo, fetched one at a time into a local cache bounded in
bytes (one folder per process under `$HF_HOME/hfpolicy/stream_cache/`, least recently used evicted first), or read
by byte ranges (range_reads.py). A failure is retried with exponential backoff, then StreamingError names the file,
the commit and the flags that help: it is never skipped."""

import multiprocessing.util
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import httpx  # huggingface_hub's HTTP client (httpx2): its network errors are not OSErrors
from tqdm.auto import tqdm

from hfpolicy.datasets.per_process_budget import PerProcessBudget
from hfpolicy.datasets.range_reads import RANGE_BLOCK_BYTES, RangeFile

REPO_TYPE = "dataset"
RETRY_BASE_WAIT_S = 0.5  # waits 0.5, 1, 2, ... s between the attempts at one file
RETRY_MAX_WAIT_S = 8.0
RETRIED_ERRORS = (OSError, httpx.HTTPError)  # HfHubHTTPError and the other huggingface_hub errors are OSErrors
T = TypeVar("T")


class QuietBar(tqdm):
    """A streamed file is fetched without a progress bar of its own (hf_hub_download's `tqdm_class`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "disable": True})


class StreamingError(OSError):
    """A file of a streamed dataset cannot be fetched (after the retries), or can never fit the disk budget."""


def _wait(seconds: float) -> None:
    time.sleep(seconds)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


class RemoteFiles(PerProcessBudget):
    """Local copies of files of `repo_id` at `commit` (40 hex digits: one version of the dataset), at most
    `max_bytes` of them at once over all DataLoader workers. `sizes`: {path in the repo: bytes}, or None to list the
    repo now; `retries`: attempts per file; `block_bytes`: bytes per request of a range read."""

    def __init__(
        self,
        repo_id: str,
        commit: str,
        max_bytes: int,
        retries: int,
        sizes: dict[str, int] | None = None,
        block_bytes: int = RANGE_BLOCK_BYTES,
    ):
        if max_bytes <= 0:
            raise ValueError("stream_disk_gb= / --dataset.stream_disk_gb must be > 0")
        if retries < 1:
            raise ValueError(f"stream_retries= / --dataset.stream_retries must be >= 1, got {retries}")
        if block_bytes < 1:
            raise ValueError(f"range_block_bytes= must be >= 1, got {block_bytes}")
        self.repo_id, self.commit, self.max_bytes, self.retries = repo_id, commit, int(max_bytes), retries
        self.block_bytes = int(block_bytes)
        self.sizes = sizes if sizes is not None else self._with_retries(self._list_sizes, "the file list")
        self._reset(share=1)

    def _clear(self) -> None:
        self._folder: Path | None = None  # made at the first fetch
        self._files: OrderedDict[str, int] = OrderedDict()  # path -> bytes, least recently used first
        self.fetches = 0  # downloads (a file evicted and needed again is fetched again)
        self.range_reads = 0  # attempts at reading a file by byte ranges
        self.range_bytes = 0  # bytes those fetched

    @property
    def folder(self) -> Path:
        self._reset_if_forked()
        if self._folder is None:
            root = Path(constants.HF_HOME) / "hfpolicy" / "stream_cache"  # beside the HF hub cache
            root.mkdir(parents=True, exist_ok=True)
            self._folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
            # runs when this object is collected or this process exits (DataLoader workers too); not in another process
            self._finalizer = multiprocessing.util.Finalize(
                self, shutil.rmtree, args=(str(self._folder),), kwargs={"ignore_errors": True}, exitpriority=0
            )
        return self._folder

    def _list_sizes(self) -> dict[str, int]:
        entries = HfApi().list_repo_tree(self.repo_id, repo_type=REPO_TYPE, revision=self.commit, recursive=True)
        return {entry.path: int(entry.size) for entry in entries if isinstance(entry, RepoFile)}

    def fetch(self, path: str, what: str) -> Path:
        """The local copy of `path` (in the repo), fetched now unless cached, evicting first so the budget holds."""
        self._reset_if_forked()
        if path in self._files:
            self._files.move_to_end(path)
            return self.folder / path
        size = self.size_of(path, what)
        self._make_room(size, path, what)
        local = self._with_retries(lambda: self._download(path), f"{path} ({what})")
        self._files[path] = size
        self.bytes += size
        self.fetches += 1
        return local

    def size_of(self, path: str, what: str) -> int:
        """The bytes of `path`; StreamingError when the commit has no such file."""
        size = self.sizes.get(path)
        if size is None:
            raise StreamingError(
                f"{what}: {path} is not a file of the Hub dataset {self.repo_id} at commit {self.commit[:8]}, "
                "though its meta/ points to it: the dataset is incomplete there"
            )
        return size

    def read_by_range(self, path: str, use: Callable[[RangeFile], T], what: str, block_bytes: int | None = None) -> T:
        """`use(file)` with `path` open as a RangeFile (blocks of at most `self.block_bytes`). A failed read runs the
        whole of `use` again (it must be repeatable), with the retries of a fetch."""
        self._reset_if_forked()
        size = self.size_of(path, what)
        block = min(self.block_bytes, block_bytes or self.block_bytes)
        return self._with_retries(
            lambda: self._range_attempt(path, size, block, use), f"{path} ({what}, read by range)"
        )

    def _range_attempt(self, path: str, size: int, block: int, use: Callable[[RangeFile], T]) -> T:
        self.range_reads += 1
        with RangeFile(self.repo_id, self.commit, path, size, block) as file:
            try:
                result = use(file)
            except Exception as e:
                if file.error is None or e is file.error:
                    raise  # the file itself (not the network): not retried; or the read's own error, as PyAV passed it on
                raise file.error from e  # the decoder's view of a failed read: the read's own error is retried
            finally:
                self.range_bytes += file.fetched_bytes
            if file.error is not None:  # a failed read the decoder took for the end of the file
                raise file.error
            return result

    def _make_room(self, size: int, path: str, what: str) -> None:
        budget = self.budget
        if size > budget:
            by_range = ", or read videos by byte range (stream_video= / --dataset.stream_video=range)"
            raise StreamingError(
                f"{what}: {path} of {self.repo_id} is {size / 1024**2:.2f} MiB, more than the streaming disk budget "
                f"of {budget / 1024**2:.2f} MiB{self.share_words()}: raise stream_disk_gb= / --dataset.stream_disk_gb, or "
                f"use fewer workers{by_range if path.endswith('.mp4') else ''}"
            )
        while self._files and self.bytes + size > budget:
            self._evict(next(iter(self._files)))
        self.peak_bytes = max(self.peak_bytes, self.bytes + size)

    def _evict(self, path: str) -> None:
        self.bytes -= self._files.pop(path)
        (self.folder / path).unlink(missing_ok=True)
        self.evictions += 1

    def clear(self) -> None:
        self._reset_if_forked()
        while self._files:
            self._evict(next(iter(self._files)))

    def _download(self, path: str) -> Path:
        local = hf_hub_download(
            self.repo_id, path, repo_type=REPO_TYPE, revision=self.commit, local_dir=self.folder, tqdm_class=QuietBar
        )
        return Path(local)

    def _with_retries(self, call: Callable[[], T], what: str) -> T:
        """`call()`, tried `self.retries` times with exponential backoff; StreamingError naming `what` after that."""
        error: BaseException | None = None
        for attempt in range(self.retries):
            if attempt:
                _wait(min(RETRY_MAX_WAIT_S, RETRY_BASE_WAIT_S * 2 ** (attempt - 1)))
            try:
                return call()
            except RETRIED_ERRORS as e:
                error = e
        assert error is not None  # retries >= 1 (checked by __init__)
        raise StreamingError(
            f"could not fetch {what} of the Hub dataset {self.repo_id} at commit {self.commit[:8]} after "
            f"{self.retries} attempts ({first_line(error)}): check the network and HF_ENDPOINT, raise "
            "stream_retries= / --dataset.stream_retries, or download the dataset whole (streaming=False / "
            "--dataset.streaming=false)"
        ) from error

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in ("repo_id", "commit", "max_bytes", "retries", "sizes", "block_bytes")}
