"""`RangeFile`: one file of a Hub dataset commit read by byte ranges through huggingface_hub's `HfFileSystem`, as
the binary file object the video decoder reads; the byte-range side of the streaming reader (remote_files.py opens
it and retries it).

Only the bytes asked for are fetched, `block_bytes` at a time (fsspec's read-ahead cache keeps the last block), so
decoding one episode out of a long multi-episode mp4 fetches the file's header (the moov atom up front, and the first
packets the decoder probes) and that episode's stretch of it, not the whole file, and nothing is written to disk.
`block_for` sizes the blocks to the read: an eighth of the episode's bytes, between 64 KiB and 1 MiB.

Memory: the kept block, the block being fetched (both up to `block_bytes` plus one read) and PyAV's I/O buffer: at
most `read_buffer_bytes(block_bytes)`, which the streaming reader reserves in its frame budget (stream_ram_gb) while
an episode is decoded from a RangeFile.

A read that fails is kept in `error` before it goes back to PyAV, which may report it as a broken file or as an end
of the file: the caller raises `error` instead, so a network failure is retried, never taken for a truncated video.
"""

from hfpolicy.io.video import AV_IO_BUFFER_BYTES

RANGE_BLOCK_BYTES = 1024**2  # the most bytes per range request: fewer requests vs less fetched past what is needed
RANGE_MIN_BLOCK_BYTES = 64 * 1024
RANGE_REQUESTS_PER_READ = 8  # a read of n bytes asks for blocks of about n / 8 (within the bounds above)


def block_for(read_bytes: float, most: int = RANGE_BLOCK_BYTES) -> int:
    """Bytes per request for a read of about `read_bytes`: an eighth of them, at least 64 KiB, at most `most`; small
    episodes fetch little past their end, large ones take few requests."""
    return int(min(most, max(min(RANGE_MIN_BLOCK_BYTES, most), read_bytes / RANGE_REQUESTS_PER_READ)))


def read_buffer_bytes(block_bytes: int) -> int:
    """The most memory one open RangeFile holds in read buffers: two blocks (each with a read past it) and PyAV's."""
    return 2 * (block_bytes + AV_IO_BUFFER_BYTES) + AV_IO_BUFFER_BYTES


class RangeFile:
    """`path` of the dataset repo `repo_id` at `commit` (`size` bytes), readable and seekable, fetched by range.

    Use as a context manager. `fetched_bytes` is what was fetched over the network so far; `error` the first
    exception a read or a seek raised (None when none did).
    """

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
