"""`RangeFile`: one file of a Hub dataset commit read by byte ranges (huggingface_hub's `HfFileSystem`), as the
binary file object the video decoder reads (docs/streaming.md). A failed read is kept in `error`, so that the caller
retries it rather than take it for a truncated video (PyAV may report it as either)."""

from hfpolicy.io.video import AV_IO_BUFFER_BYTES

RANGE_BLOCK_BYTES = 1024**2  # the most bytes per range request: fewer requests vs less fetched past what is needed
RANGE_MIN_BLOCK_BYTES = 64 * 1024
RANGE_REQUESTS_PER_READ = 8  # a read of n bytes asks for blocks of about n / 8 (within the bounds above)


def block_for(read_bytes: float, most: int = RANGE_BLOCK_BYTES) -> int:
    """Bytes per request for a read of about `read_bytes`: an eighth of them, at least 64 KiB, at most `most`."""
    return int(min(most, max(min(RANGE_MIN_BLOCK_BYTES, most), read_bytes / RANGE_REQUESTS_PER_READ)))


def read_buffer_bytes(block_bytes: int) -> int:
    """The most memory one open RangeFile holds in read buffers: two blocks (each with a read past it) and PyAV's."""
    return 2 * (block_bytes + AV_IO_BUFFER_BYTES) + AV_IO_BUFFER_BYTES


class RangeFile:
    """`path` of the dataset repo `repo_id` at `commit` (`size` bytes), readable and seekable, fetched by range; a
    context manager. `fetched_bytes`: fetched so far; `error`: the first exception a read or a seek raised."""

    def __init__(self, repo_id: str, commit: str, path: str, size: int, block_bytes: int = RANGE_BLOCK_BYTES):
        from huggingface_hub import HfFileSystem

        self.name = f"hf://datasets/{repo_id}@{commit[:8]}/{path}"  # how messages name the file
        self.error: BaseException | None = None
        self._fetched = 0  # what a closed file had fetched (fsspec drops its cache on close)
        self._file = HfFileSystem().open(
            f"datasets/{repo_id}/{path}",
            "rb",
            revision=commit,
            block_size=block_bytes,
            cache_type="readahead",  # one block kept: a decoder reads a segment front to back
            size=size,  # known from the repo listing: no info request per file
        )

    @property
    def fetched_bytes(self) -> int:
        cache = getattr(self._file, "cache", None)
        return self._fetched if cache is None else int(cache.total_requested_bytes)

    def read(self, size: int = -1) -> bytes:
        try:
            return self._file.read(size)
        except Exception as e:
            self.error = self.error or e
            raise

    def seek(self, offset: int, whence: int = 0) -> int:
        try:
            return self._file.seek(offset, whence)
        except Exception as e:
            self.error = self.error or e
            raise

    def tell(self) -> int:
        return self._file.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:  # PyAV closes it when its container closes, the context manager again: both are fine
        if not self._file.closed:
            self._fetched = self.fetched_bytes
            self._file.close()

    def __enter__(self) -> "RangeFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
