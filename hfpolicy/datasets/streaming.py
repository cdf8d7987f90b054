"""`StreamingPolicyDataset`: a Hub dataset read without downloading it whole, with the items `PolicyDataset` gives:
data files fetched one at a time into a bounded disk cache, episodes decoded when first drawn and kept in a bounded
LRU, videos fetched whole or read by byte ranges (docs/streaming.md)."""

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from hfpolicy.constants import EPISODE_INDEX, FRAME_INDEX
from hfpolicy.datasets.dataset import PolicyDataset
from hfpolicy.datasets.features import IMAGE, VIDEO, image_chw
from hfpolicy.datasets.format import DatasetFormatError, ep_video_column, reading_parquet
from hfpolicy.datasets.frame_cache import decode_video_segment
from hfpolicy.datasets.frame_lru import FrameLRU
from hfpolicy.datasets.hub import download_meta
from hfpolicy.datasets.range_reads import RANGE_BLOCK_BYTES, block_for, read_buffer_bytes
from hfpolicy.datasets.remote_files import RemoteFiles
from hfpolicy.datasets.sampler import open_episodes_per_worker

STREAM_RAM_GB = 2.0  # decoded frames in memory, over all DataLoader workers
STREAM_DISK_GB = 10.0  # fetched files on disk, over all DataLoader workers
STREAM_RETRIES = 4  # attempts per file
SHUFFLE_BUFFER_EPISODES = 16  # episodes open at once in the epoch order of a streamed run
STREAM_VIDEO = "auto"  # how video is read: "auto", "range" (byte ranges) or "download" (whole files)
STREAM_VIDEO_CHOICES = ("auto", "range", "download")
GB = 1024**3


class StreamingPolicyDataset(PolicyDataset):
    """Frames of a LeRobot v3.0 (or v2.1) Hub dataset with `delta_timestamps` windows, streamed with bounded memory
    and disk. `frames` (a FrameLRU) and `files` (a RemoteFiles) say what this process holds.

    Args:
        repo_id: the dataset's Hub repo id.
        revision: Hub branch, tag or commit (default: the main branch); every file is read at the commit it resolves to.
        episodes, delta_timestamps, tolerance_s, image_transforms, download_videos: as for PolicyDataset.
        stream_ram_gb: decoded frames kept in memory, over all DataLoader workers (each keeps its share).
        stream_disk_gb: fetched files kept on disk, over all DataLoader workers.
        stream_retries: attempts per file (with exponential backoff) before StreamingError names it.
        stream_video: "range" reads videos by byte ranges of the Hub file (nothing on disk), "download" fetches whole
            files into the disk cache, "auto" downloads when the chosen episodes' files fit the disk budget.
        range_block_bytes: the most bytes per range request (smaller episodes take smaller blocks).
    """

    def __init__(
        self,
        repo_id: str,
        revision: str | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        *,
        tolerance_s: float = 1e-4,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        stream_ram_gb: float = STREAM_RAM_GB,
        stream_disk_gb: float = STREAM_DISK_GB,
        stream_retries: int = STREAM_RETRIES,
        download_videos: bool = True,
        stream_video: str = STREAM_VIDEO,
        range_block_bytes: int = RANGE_BLOCK_BYTES,
    ):
        self.frames = FrameLRU(round(stream_ram_gb * GB), "stream_ram_gb= / --dataset.stream_ram_gb")
        self._in_use: frozenset = frozenset()  # the (camera, episode) entries of the batch being read: evicted last
        if not stream_disk_gb > 0:  # before any download
            raise ValueError(f"stream_disk_gb= / --dataset.stream_disk_gb must be > 0, got {stream_disk_gb}")
        if stream_video not in STREAM_VIDEO_CHOICES:
            raise ValueError(
                f"stream_video= / --dataset.stream_video must be one of {', '.join(STREAM_VIDEO_CHOICES)}, got "
                f"{stream_video!r}"
            )
        self.stream_video = stream_video
        meta_root = download_meta(repo_id, revision)
        commit = meta_root.name  # snapshots/<commit sha>: every later fetch reads this one version
        self.files = RemoteFiles(
            repo_id, commit, round(stream_disk_gb * GB), stream_retries, block_bytes=range_block_bytes
        )
        super().__init__(
            repo_id,
            root=meta_root,
            revision=commit,
            episodes=episodes,
            delta_timestamps=delta_timestamps,
            tolerance_s=tolerance_s,
            image_transforms=image_transforms,
            download_videos=download_videos,
        )

    def _read_data_table(self, keys: list[str]) -> pa.Table:
        """The columns `keys` (but the image ones) of the chosen episodes' rows, one data file after the other."""
        columns = [key for key in keys if self.features[key]["dtype"] != IMAGE]
        parts = []
        for path in sorted({self.meta.data_file(ep) for ep in self.episodes}):
            local = self.files.fetch(path, f"the data of {self.repo_id}")
            parts.append(_episode_rows(local, path, columns, self.episodes, self.repo_id))
        self.files.clear()  # the columns are in memory now; image features fetch their file again per episode
        return pa.concat_tables(parts, promote_options="default")

    def _make_frame_caches(self, storage: str, max_ram_gb: float) -> None:
        self._caches = {}
        self.frame_cache_storage = "stream"
        self._chw = {key: image_chw(key, self.features[key]) for key in self.camera_keys}
        video_keys = [key for key in self.camera_keys if self.features[key]["dtype"] == VIDEO]
        videos = {self.meta.video_file(ep, key) for ep in self.episodes for key in video_keys}
        self._video_bytes = sum(self.files.size_of(path, f"the videos of {self.repo_id}") for path in videos)
        self._video_seconds: dict[str, float] = {}  # video file -> its duration (the last episode's end in it)
        for episode in self.meta.episodes.index:
            for key in video_keys:
                path = self.meta.video_file(int(episode), key)
                end = self.meta.episode_number(episode, ep_video_column(key, "to_timestamp"))
                self._video_seconds[path] = max(self._video_seconds.get(path, 0.0), end)
        has_images = any(self.features[key]["dtype"] == IMAGE for key in self.camera_keys)
        data_files = {self.meta.data_file(ep) for ep in self.episodes} if has_images else set()
        self._largest_data_file = max(
            (self.files.size_of(p, f"the data of {self.repo_id}") for p in data_files), default=0
        )
        self.check_buffer_fits(1)  # the largest episode alone must fit

    def video_by_range(self, num_workers: int | None = None) -> bool:
        """Whether video is read by byte ranges in this process (or, given `num_workers`, in each DataLoader
        worker): with "auto" when `disk_bytes()` do not fit the disk budget's share."""
        if self.stream_video != "auto":
            return self.stream_video == "range"
        share = self.files.budget if num_workers is None else self.files.max_bytes // max(1, num_workers)
        return self.disk_bytes() > share

    def _read_reserve(self, key: str, num_workers: int | None = None) -> int:
        """Memory held by the read buffers while camera `key` of an episode is decoded (reading by range)."""
        if self.features[key]["dtype"] != VIDEO or not self.video_by_range(num_workers):
            return 0
        return read_buffer_bytes(self.files.block_bytes)

    def episode_nbytes(self, episode_pos: int) -> int:
        """The decoded frames of the `episode_pos`-th chosen episode, all cameras, in bytes."""
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        return (end - start) * sum(math.prod(chw) for chw in self._chw.values())

    def open_bytes(self, buffer_episodes: int, num_workers: int = 0, shards: int = 1) -> int:
        """The most memory one process (of `num_workers` DataLoader workers) holds for the open episodes of a buffer
        of `buffer_episodes` split into `shards`: the largest episodes' frames and the read buffers of a range read."""
        return sum(self._open_parts(buffer_episodes, num_workers, shards)[1:])

    def _open_parts(self, buffer_episodes: int, num_workers: int, shards: int) -> tuple[int, int, int]:
        """(episodes open in one process, their largest frames' bytes, the read buffers' bytes)."""
        if not self.camera_keys:
            return 0, 0, 0
        held = open_episodes_per_worker(buffer_episodes, shards, num_workers)
        sizes = sorted((self.episode_nbytes(pos) for pos in range(self.num_episodes)), reverse=True)
        return held, sum(sizes[:held]), max(self._read_reserve(key, max(1, num_workers)) for key in self.camera_keys)

    def disk_bytes(self) -> int:
        """What downloading the chosen episodes' files takes at once: their videos and the largest data file."""
        return self._video_bytes + self._largest_data_file

    def set_budgets(self, ram_bytes: int, disk_bytes: int) -> None:
        """Sets the memory and disk budgets (over all workers) before anything is held (MixtureDataset.split_budgets)."""
        if len(self.frames) or self.files.bytes:
            raise RuntimeError(f"the budgets of {self.repo_id} change only before any frame or file is held")
        if ram_bytes <= 0 or disk_bytes <= 0:
            raise ValueError(f"the budgets of {self.repo_id} must be > 0, got {ram_bytes} and {disk_bytes} bytes")
        self.frames.max_bytes, self.files.max_bytes = int(ram_bytes), int(disk_bytes)

    def check_buffer_fits(self, buffer_episodes: int, num_workers: int = 0, shards: int = 1) -> None:
        """ValueError naming the settings when `open_bytes` do not fit the memory budget (each worker's share of it):
        the open episodes would be decoded again and again."""
        held, frames, reserve = self._open_parts(buffer_episodes, num_workers, shards)
        need = frames + reserve
        budget = self.frames.max_bytes // max(1, num_workers)
        if need > budget:
            shared = f" per DataLoader worker ({num_workers} workers share it)" if num_workers > 1 else ""
            buffers = f" and {reserve / 1024**2:.2f} MiB of read buffers" if reserve else ""
            raise ValueError(
                f"{held} open episode(s) of {self.repo_id} need up to {need / 1024**2:.2f} MiB of decoded frames"
                f"{buffers}, more than the streaming memory budget of {budget / 1024**2:.2f} MiB{shared}: raise "
                "stream_ram_gb= / --dataset.stream_ram_gb, or keep fewer episodes open (buffer_episodes= / "
                "--dataset.shuffle_buffer_episodes)"
                + (", or split them among the workers (--dataset.shuffle_buffer_shards)" if shared else "")
                + (", or use fewer workers (--num_workers)" if shared else "")
            )

    def _camera_frames(self, key: str, rows: np.ndarray, episode_pos: np.ndarray, out=None) -> np.ndarray:
        out = np.empty((*rows.shape, *self._chw[key]), dtype=np.uint8) if out is None else out
        flat = out.reshape(-1, *self._chw[key])
        local = rows.reshape(len(rows), -1) - self.episode_bounds[episode_pos, :1]
        width = local.shape[1]
        for pos in np.unique(episode_pos).tolist():
            frames = self._episode_array(key, pos)  # one episode at a time: the others may be evicted meanwhile
            # frame by frame into the batch: one copy (a fancy-index gather, then a masked assignment, were two, and
            # slower: docs/streaming.md#the-readers-small-costs)
            for item in np.flatnonzero(episode_pos == pos).tolist():
                for j, row in enumerate(local[item].tolist()):
                    flat[item * width + j] = frames[row]
        return out

    def _episode_array(self, key: str, episode_pos: int) -> np.ndarray:
        """The decoded uint8 frames (len, C, H, W) of camera `key` of an episode: from the LRU, or decoded now."""
        frames = self.frames.get((key, episode_pos))
        if frames is not None:
            return frames
        what = f"episode {self.episodes[episode_pos]} of {self.repo_id}, {key}"
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        shape = (end - start, *self._chw[key])
        # before allocating: the bound holds while decoding, the read buffers of a range read included
        self.frames.make_room(math.prod(shape) + self._read_reserve(key), what, self._in_use)
        frames = np.empty(shape, dtype=np.uint8)
        self._decode_episode(key, episode_pos, frames)
        self.frames.put((key, episode_pos), frames, what, self._in_use)
        return frames

    def __getitem__(self, idx):
        """As PolicyDataset's; the episodes of the batch being read are evicted last while it is read."""
        self._in_use = self._entries_of(idx)
        return super().__getitem__(idx)

    def _entries_of(self, positions) -> frozenset:
        """The (camera, episode) entries of the episodes of these dataset positions (an index or a list)."""
        if not self.camera_keys:
            return frozenset()
        rows = np.asarray(positions, dtype=np.int64).reshape(-1)
        rows = np.where(rows < 0, rows + self.num_frames, rows)
        episodes = np.unique(self._row_episode[rows[(rows >= 0) & (rows < self.num_frames)]]).tolist()
        return frozenset((key, pos) for pos in episodes for key in self.camera_keys)

    def _decode_video(
        self, key: str, episode: int, timestamps: np.ndarray, tolerance: float, out: np.ndarray, what: str
    ) -> None:
        path = self.meta.video_file(episode, key)
        if not self.video_by_range():
            decode_video_segment(self.files.fetch(path, what), timestamps, tolerance, out, what)
            return
        self.files.read_by_range(
            path,
            lambda file: decode_video_segment(file, timestamps, tolerance, out, what),
            what,
            block_for(self.files.sizes[path] * self._video_share(episode, key), self.files.block_bytes),
        )

    def _video_share(self, episode: int, key: str) -> float:
        """About which part of its video file camera `key` of `episode` is: its share of the file's duration."""
        start = self.meta.episode_number(episode, ep_video_column(key, "from_timestamp"))
        end = self.meta.episode_number(episode, ep_video_column(key, "to_timestamp"))
        return min(1.0, max(0.0, end - start) / max(self._video_seconds[self.meta.video_file(episode, key)], 1e-9))

    def _image_column(self, key: str, episode_pos: int) -> pa.Array:
        episode = self.episodes[episode_pos]
        path = self.meta.data_file(episode)
        local = self.files.fetch(path, f"episode {episode} of {self.repo_id}, {key}")
        table = pq.read_table(local, columns=[key, FRAME_INDEX], filters=[(EPISODE_INDEX, "==", episode)])
        order = pc.sort_indices(table.column(FRAME_INDEX))
        return table.column(key).take(order).combine_chunks()

    def prefetch_frames(self, progress: bool = True) -> None:
        """Decodes nothing: a streamed episode is decoded when it is first drawn, and kept while the budget allows."""

    def __repr__(self) -> str:
        return "Streaming" + super().__repr__().replace(f", root={str(self.root)!r}", f", revision={self.revision!r}")


def _episode_rows(local: Path, path: str, columns: list[str], episodes: list[int], repo_id: str) -> pa.Table:
    """The `columns` of the rows of `episodes` in one data file (`path` in the repo), read row group by row group."""
    with reading_parquet(local):
        parquet = pq.ParquetFile(local)
    stored = set(parquet.schema_arrow.names)
    absent = [key for key in [*columns, EPISODE_INDEX] if key not in stored]
    if absent:
        raise DatasetFormatError(f"info.json of {repo_id} lists the features {absent} but {path} has no such columns")
    read = list(dict.fromkeys([*columns, EPISODE_INDEX]))
    chosen = pa.array(episodes, type=pa.int64())
    groups = []
    for group in range(parquet.num_row_groups):
        part = parquet.read_row_group(group, columns=read)
        groups.append(part.filter(pc.is_in(part.column(EPISODE_INDEX).cast(pa.int64()), value_set=chosen)))
    return pa.concat_tables(groups) if groups else parquet.schema_arrow.empty_table().select(read)
