"""`DatasetWriter`: record frames and episodes into a LeRobot v3.0 dataset.

    with DatasetWriter.create("out/pusht", "user/pusht", fps=10, features={
        "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]}, ...
    }) as writer:
        for episode in episodes:
            for frame in episode:
                writer.add_frame({"action": ..., ...}, task="Push the T.")
            writer.save_episode()  # or writer.clear_episode() to drop it

Everything is written into a hidden folder beside `root` that `finish()` renames to `root` (nothing there after an
interrupted write); the writer holds `root` with the run lock until then. `DatasetWriter.open(root)` appends to a
dataset, `truncate_dataset(root, n)` keeps its first n episodes (docs/datasets.md#the-writers-append-mode)."""

import contextlib
import io
import json
import os
import shutil
import weakref
from collections.abc import Callable, Mapping
from copy import deepcopy
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hfpolicy.constants import EPISODE_INDEX, FRAME_INDEX, INDEX, TASK, TASK_INDEX, TIMESTAMP
from hfpolicy.datasets.append import CommittedState, settle, write_tasks
from hfpolicy.datasets.features import (
    IMAGE,
    NUMERIC_DTYPES,
    STRING,
    VIDEO,
    arrow_column,
    arrow_type,
    is_numeric,
    is_scalar,
    with_image_metadata,
)
from hfpolicy.datasets.format import (
    BOOKKEEPING_FEATURES,
    CODEBASE_VERSION,
    DATA_PATH,
    DATASET_TOP_LEVEL,
    DEFAULT_CHUNKS_SIZE,
    DEFAULT_DATA_FILE_SIZE_MB,
    DEFAULT_VIDEO_FILE_SIZE_MB,
    EP_DATA_CHUNK,
    EP_DATA_FILE,
    EP_FROM_INDEX,
    EP_LENGTH,
    EP_META_CHUNK,
    EP_META_FILE,
    EP_TASKS,
    EP_TO_INDEX,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    VIDEO_PATH,
    ep_stats_column,
    ep_video_column,
    next_chunk_file,
)
from hfpolicy.datasets.stats import ImageStatsAccumulator, aggregate_stats, array_stats, stats_to_json
from hfpolicy.io.atomic import replacing, write_json_atomically
from hfpolicy.io.run_lock import LOCK_FILE, LOCK_FILES, RunLock, RunLockedError, is_lock_file
from hfpolicy.io.staging import Staging, remove_stale_staging, staging_path
from hfpolicy.io.termination import raise_if_terminated
from hfpolicy.io.video import VIDEO_PIX_FMT, Mp4Writer, probe_video

MB = 1024**2
_DATASET_SUFFIXES = {"meta": (".json", ".jsonl", ".parquet"), "data": (".parquet",), "videos": (".mp4",)}
STAGING_TAG = "writing"  # .<name>.writing-*: a dataset being written
REPLACED_TAG = "replaced"  # .<name>.replaced-*: the dataset that overwrite=True replaces
APPEND_TAG = "appending"  # .<name>.appending-*: the new files of an append


def _folder_entries(root: Path) -> list[str]:
    """What a folder holds besides the run lock's files (which only say who held the folder last)."""
    return sorted(p.name for p in root.iterdir() if not is_lock_file(p.name)) if root.is_dir() else []


def _not_dataset_layout(root: Path) -> list[str]:
    """Why `root` is not provably a LeRobot dataset: the entries and files a dataset never holds, or a bad info.json."""
    problems = [name for name in _folder_entries(root) if name not in DATASET_TOP_LEVEL]
    try:
        info = json.loads((root / INFO_PATH).read_text())
        if not isinstance(info, dict) or "codebase_version" not in info or not isinstance(info.get("features"), dict):
            problems.append(f"{INFO_PATH} without codebase_version and features")
    except (OSError, ValueError):
        problems.append(f"no valid {INFO_PATH}")
    for top, suffixes in _DATASET_SUFFIXES.items():
        for path in (root / top).rglob("*") if (root / top).is_dir() else []:
            if path.is_symlink() or (path.is_file() and not path.name.endswith(suffixes)):
                problems.append(str(path.relative_to(root)))
    return problems


def check_dataset_destination(root: str | Path, overwrite: bool, *, cli: bool = False) -> None:
    """FileExistsError unless `root` is new or empty (but for a dead writer's lock file) or, with `overwrite`,
    provably a LeRobot dataset (`_not_dataset_layout`). `cli`: messages name --output_dir / --overwrite."""
    root = Path(root)
    where, again = (f"--output_dir={root}", "--overwrite=true") if cli else (str(root), "overwrite=True")
    if root.exists() and not root.is_dir():
        raise FileExistsError(f"{where} is a file, not a folder: choose a new folder for the dataset")
    if not _folder_entries(root):
        return
    if not overwrite:
        raise FileExistsError(
            f"{where} exists; choose a new folder, or add {again} to replace that dataset (it is replaced only once "
            "the new one is complete)"
        )
    problems = _not_dataset_layout(root)
    if problems:
        shown = ", ".join(problems[:5]) + (f" and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise FileExistsError(
            f"{where} is not a LeRobot dataset ({shown}): {again} replaces a dataset, never a folder holding other "
            "files; choose a new folder, or move those files away"
        )


def _release_destination(lock: RunLock, root: Path, created: bool) -> None:
    """Releases the hold on `root`; a folder the writer created and left empty (but for the lock file) is removed."""
    if created and root.is_dir() and not _folder_entries(root):
        for name in LOCK_FILES:
            (root / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()
    lock.release()


def _release_appended(lock: RunLock, root: Path) -> None:
    """Releases a dataset that was appended to, leaving no lock file in it (lockers never block: none waits)."""
    for name in LOCK_FILES:
        (root / name).unlink(missing_ok=True)
    lock.release()


def _discard(staging: Staging | None, release: Callable[[], None]) -> None:
    if staging is not None:
        staging.discard()
    release()


def remove_dead_writers_leftovers(root: str | Path) -> list[Path]:
    """Removes what dead writers of `root` (kill -9, a power cut) left: their staging folders beside it, and `root`
    itself when it holds nothing but their lock files. A live writer's folders stay. Returns what was removed."""
    root = Path(root)
    removed = remove_stale_staging(root, STAGING_TAG)
    if root.is_dir() and not root.is_symlink() and not _folder_entries(root) and (root / LOCK_FILE).exists():
        try:
            lock = RunLock(root).acquire()
        except (RunLockedError, OSError):  # a live writer's (or one we cannot open): not ours to remove
            return removed
        _release_destination(lock, root, created=True)
        if not root.exists():
            removed.append(root)
    return removed


def truncate_dataset(root: str | Path, n_episodes: int | None = None) -> Path:
    """Keeps the first `n_episodes` of the v3.0 dataset at `root` (append.settle); None keeps what info.json commits,
    removing only what a writer killed mid-append left. RunLockedError while a writer holds it."""
    root = Path(root)
    lock = RunLock(root).acquire()
    try:
        remove_stale_staging(root, APPEND_TAG)  # the new files of an append that was killed
        settle(root, n_episodes)
    finally:
        _release_appended(lock, root)
    return root


class DatasetWriter:
    """Writes a LeRobot v3.0 dataset episode by episode. Make one with `DatasetWriter.create(...)` or `.open(root)`."""

    def __init__(
        self,
        root: Path,
        repo_id: str,
        committed: CommittedState,
        *,
        overwrite: bool,
        video_crf: int,
        video_preset: str,
        appending_lock: RunLock | None = None,
    ):
        """Use `create` or `open`. `committed`: what the dataset holds (nothing yet, unless `appending_lock`, the hold
        on root of `open`, is given); its info is the info.json that `finish()` writes with new totals."""
        self.root = root
        self.repo_id = repo_id
        self.info = committed.info
        self.fps = self.info["fps"]
        self.features = self.info["features"]  # user features first, then the bookkeeping columns
        self.chunks_size = int(self.info["chunks_size"])
        self.data_files_size_in_mb = float(self.info.get("data_files_size_in_mb", DEFAULT_DATA_FILE_SIZE_MB))
        self.video_files_size_in_mb = float(self.info.get("video_files_size_in_mb", DEFAULT_VIDEO_FILE_SIZE_MB))
        self.video_crf = video_crf
        self.video_preset = video_preset
        self._appending = appending_lock is not None
        self._hold_root(overwrite, appending_lock)
        self.user_keys = [k for k in self.features if k not in BOOKKEEPING_FEATURES]
        self.video_keys = [k for k in self.user_keys if self.features[k]["dtype"] == VIDEO]
        self.image_keys = [k for k in self.user_keys if self.features[k]["dtype"] == IMAGE]
        self._numeric_keys = [k for k in self.user_keys if is_numeric(self.features[k])]
        self._string_keys = [k for k in self.user_keys if self.features[k]["dtype"] == STRING]
        self._data_keys = [k for k in self.features if self.features[k]["dtype"] != VIDEO]  # of the data parquet
        self._schema = pa.schema([(k, arrow_type(k, self.features[k])) for k in self._data_keys])
        if self.image_keys:  # datasets needs its metadata to know that the {bytes, path} structs are images
            self._schema = with_image_metadata(self._schema, self.image_keys)

        self.tasks = dict(committed.tasks)
        self.num_episodes = int(self.info["total_episodes"])
        self.num_frames = int(self.info["total_frames"])
        self._episode_rows: list[dict[str, Any]] = []
        self._episode_stats = [committed.stats] if committed.stats else []  # they combine with the new episodes'
        self._finished = False
        self._data_chunk, self._data_file = committed.next_data
        self._data_writer: pq.ParquetWriter | None = None
        self._data_path: Path | None = None
        self._data_file_frames = 0
        self._video_chunk_file = dict(committed.next_video)
        self._video_out: dict[str, av.container.OutputContainer] = {}
        self._video_stream: dict[str, Any] = {}
        self._video_path: dict[str, Path] = {}
        self._video_file_frames = dict.fromkeys(self.video_keys, 0)
        self._meta_chunk_file = committed.next_meta  # the meta/episodes file finish() writes
        self._reset_episode()

    def _hold_root(self, overwrite: bool, appending_lock: RunLock | None) -> None:
        """Holds root (its run lock; `appending_lock` when appending) and a staging folder for the new files, both
        let go of on abort, or at exit if never finished."""
        root = self.root
        release: Callable[[], None]
        if appending_lock is None:
            # new, or a dead writer's (only its lock file in it): removed on abort
            created = not root.exists() or (not _folder_entries(root) and (root / LOCK_FILE).exists())
            self._root_lock = RunLock(root).acquire()  # the folder is this writer's until the end
            release = partial(_release_destination, self._root_lock, root, created)
        else:
            self._root_lock = appending_lock
            release = partial(_release_appended, self._root_lock, root)
        staging = None
        try:  # Ctrl-C before the finalizer holds the staging folder leaves nothing either
            if not self._appending:
                check_dataset_destination(root, overwrite)  # again, now that the folder is held
                remove_stale_staging(root, REPLACED_TAG)
            staging = Staging.create(root, APPEND_TAG if self._appending else STAGING_TAG)
            self._cleanup = weakref.finalize(self, _discard, staging, release)  # on GC / exit if never finished
        except BaseException:
            _discard(staging, release)
            raise
        self._staging_folder = staging
        self.tmp_root = staging.path  # the new files (all of them, or an append's) until finish()
        self._staging = self.tmp_root / ".episode"  # the current episode's videos while it is recorded

    @classmethod
    def create(
        cls,
        root: str | Path,
        repo_id: str,
        fps: int | float,
        features: Mapping[str, Mapping[str, Any]],
        robot_type: str | None = None,
        *,
        overwrite: bool = False,
        video_crf: int = 23,
        video_preset: str = "fast",
        chunks_size: int = DEFAULT_CHUNKS_SIZE,
        data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_MB,
        video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_SIZE_MB,
    ) -> "DatasetWriter":
        """Starts a dataset at `root` (new, unless `overwrite`: then `finish()` replaces it). `features`: {key:
        {"dtype", "shape", "names"}}, dtype numeric ("float32", "bool", ...), "video" (H.264 mp4; shape (H, W, 3), even
        H and W; `video_crf`: lower is better), "image" (PNG bytes in the parquet) or "string"."""
        root = Path(root)
        check_dataset_destination(root, overwrite)  # checked again once the folder is held
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        if chunks_size < 1 or data_files_size_in_mb <= 0 or video_files_size_in_mb <= 0:
            raise ValueError("chunks_size and the file size limits must be positive")
        checked = _check_features(features)
        video_keys = [key for key, ft in checked.items() if ft["dtype"] == VIDEO]
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type,
            "total_episodes": 0,
            "total_frames": 0,
            "total_tasks": 0,
            "chunks_size": chunks_size,
            "data_files_size_in_mb": data_files_size_in_mb,
            "video_files_size_in_mb": video_files_size_in_mb,
            "fps": fps,
            "splits": {},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if video_keys else None,
            "features": checked,
        }
        empty = CommittedState(
            info, tasks={}, stats={}, next_data=(0, 0), next_video=dict.fromkeys(video_keys, (0, 0)), next_meta=(0, 0)
        )
        return cls(root, repo_id, empty, overwrite=overwrite, video_crf=video_crf, video_preset=video_preset)

    @classmethod
    def open(
        cls, root: str | Path, repo_id: str | None = None, *, video_crf: int = 23, video_preset: str = "fast"
    ) -> "DatasetWriter":
        """Continues the LeRobot v3.0 dataset at `root`: episodes added as with `create`, and `finish()` appends them
        without touching earlier files. What a killed earlier append left is removed first. RunLockedError while
        another writer holds `root`; DatasetFormatError if it is no v3.0 dataset."""
        root = Path(root)
        lock = RunLock(root).acquire()
        try:
            return cls(
                root,
                repo_id or f"local/{root.name}",
                settle(root),
                overwrite=False,
                video_crf=video_crf,
                video_preset=video_preset,
                appending_lock=lock,
            )
        except BaseException:
            _release_appended(lock, root)
            raise

    # --- episodes -----------------------------------------------------------------------------------------------
    def _reset_episode(self) -> None:
        self._values: dict[str, list[Any]] = {key: [] for key in self._numeric_keys + self._string_keys}
        self._images: dict[str, list[dict[str, Any]]] = {key: [] for key in self.image_keys}
        self._frame_tasks: list[str] = []
        self._image_stats = {key: ImageStatsAccumulator() for key in self.video_keys + self.image_keys}
        self._episode_videos: dict[str, Mp4Writer] = {}

    @property
    def episode_frames(self) -> int:
        """Frames added to the current (unsaved) episode."""
        return len(self._frame_tasks)

    def add_frame(self, frame: Mapping[str, Any], task: str) -> None:
        """Adds one frame to the current episode: every feature of the dataset (images as uint8 (H, W, C) arrays),
        nothing else. timestamp = frame_index / fps."""
        raise_if_terminated()  # a stop request whose exception got lost where it landed: honoured here
        self._check_open()
        missing, extra = sorted(set(self.user_keys) - set(frame)), sorted(set(frame) - set(self.user_keys))
        if missing or extra:
            problems = [f"missing {missing}"] if missing else []
            if extra:
                why = ""
                if set(extra) & set(BOOKKEEPING_FEATURES):
                    why = " (the writer adds the bookkeeping columns itself)"
                elif TASK in extra:
                    why = " (give the task as add_frame(frame, task=...))"
                problems.append(f"unknown {extra}{why}")
            raise ValueError(f"frame {self.episode_frames} of episode {self.num_episodes}: {'; '.join(problems)}")
        if not isinstance(task, str) or not task:
            raise ValueError(f"task must be a non-empty string describing the episode's task, got {task!r}")
        converted = {key: self._convert(key, frame[key]) for key in self.user_keys}
        for key in self.video_keys:
            if key not in self._episode_videos:
                path = self._staging / f"{key}.mp4"
                self._episode_videos[key] = Mp4Writer(path, self.fps, crf=self.video_crf, preset=self.video_preset)
            self._episode_videos[key].add_frame(converted[key])
        for key in self.image_keys:
            self._images[key].append({"bytes": _png_bytes(converted[key]), "path": None})
        for key in self.video_keys + self.image_keys:
            self._image_stats[key].add(converted[key])
        for key in self._numeric_keys + self._string_keys:
            self._values[key].append(converted[key])
        self._frame_tasks.append(task)

    def _convert(self, key: str, value: Any) -> Any:
        feature = self.features[key]
        dtype = feature["dtype"]
        where = f"feature {key!r} (frame {self.episode_frames} of episode {self.num_episodes})"
        if dtype == STRING:
            if not isinstance(value, str):
                raise TypeError(f"{where} is a string feature, got {type(value).__name__}")
            return value
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        array = np.asarray(value)
        shape = tuple(feature["shape"])
        if dtype in (VIDEO, IMAGE):
            if array.dtype != np.uint8 or array.shape != shape:
                raise ValueError(
                    f"{where} must be a uint8 array shaped (H, W, C) = {shape}, got {array.dtype} {array.shape}"
                )
            return np.ascontiguousarray(array)
        target = NUMERIC_DTYPES[dtype]
        if array.dtype.kind == "f" and target.kind in "biu":
            raise TypeError(f"{where} has dtype {dtype}, got floating-point values {array.dtype}")
        if is_scalar(feature):
            if array.size != 1:
                raise ValueError(f"{where} has shape {shape}, got an array of shape {array.shape}")
            return array.reshape(()).astype(target)
        if array.shape != shape:
            raise ValueError(f"{where} has shape {shape}, got {array.shape}")
        return array.astype(target)

    def clear_episode(self) -> None:
        """Drops the frames of the current episode."""
        for writer in self._episode_videos.values():
            writer.abort()
        self._reset_episode()

    def save_episode(self) -> int:
        """Writes the current episode (data rows, video segments, its row in meta/episodes); returns its index."""
        self._check_open()
        n = self.episode_frames
        if n == 0:
            raise ValueError("the current episode has no frames: add_frame(...) before save_episode()")
        episode_index = self.num_episodes
        for task in self._frame_tasks:
            self.tasks.setdefault(task, len(self.tasks))
        frame_index = np.arange(n, dtype=np.int64)
        columns: dict[str, Any] = {key: np.stack(self._values[key]) for key in self._numeric_keys}
        columns.update({key: self._values[key] for key in self._string_keys})
        columns.update({key: self._images[key] for key in self.image_keys})
        columns[TIMESTAMP] = (frame_index / self.fps).astype(np.float32)
        columns[FRAME_INDEX] = frame_index
        columns[EPISODE_INDEX] = np.full(n, episode_index, dtype=np.int64)
        columns[INDEX] = np.arange(self.num_frames, self.num_frames + n, dtype=np.int64)
        columns[TASK_INDEX] = np.array([self.tasks[t] for t in self._frame_tasks], dtype=np.int64)

        stats = {key: array_stats(columns[key]) for key in self.features if is_numeric(self.features[key])}
        stats.update({key: acc.stats() for key, acc in self._image_stats.items()})

        row: dict[str, Any] = {
            EPISODE_INDEX: episode_index,
            EP_TASKS: list(dict.fromkeys(self._frame_tasks)),
            EP_LENGTH: n,
        }
        row.update(self._write_data(columns, n))
        for key in self.video_keys:
            row.update(self._append_video(key, n))
        for key, key_stats in stats.items():
            for stat, value in key_stats.items():
                row[ep_stats_column(key, stat)] = np.asarray(value).tolist()
        self._episode_rows.append(row)
        self._episode_stats.append(stats)
        self.num_episodes += 1
        self.num_frames += n
        self._reset_episode()
        shutil.rmtree(self._staging, ignore_errors=True)
        return episode_index

    def _write_data(self, columns: dict[str, Any], n: int) -> dict[str, int]:
        table = pa.table([arrow_column(k, self.features[k], columns[k]) for k in self._data_keys], schema=self._schema)
        if self._data_writer is not None:
            assert self._data_path is not None  # set with _data_writer
            size = self._data_path.stat().st_size
            if size + size / max(self._data_file_frames, 1) * n >= self.data_files_size_in_mb * MB:
                self._close_data_file()
                self._data_chunk, self._data_file = next_chunk_file(self._data_chunk, self._data_file, self.chunks_size)
        if self._data_writer is None:
            self._data_path = self.tmp_root / DATA_PATH.format(chunk_index=self._data_chunk, file_index=self._data_file)
            self._data_path.parent.mkdir(parents=True, exist_ok=True)
            self._data_writer = pq.ParquetWriter(self._data_path, self._schema, compression="snappy")
            self._data_file_frames = 0
        self._data_writer.write_table(table)
        self._data_file_frames += n
        return {
            EP_DATA_CHUNK: self._data_chunk,
            EP_DATA_FILE: self._data_file,
            EP_FROM_INDEX: self.num_frames,
            EP_TO_INDEX: self.num_frames + n,
        }

    def _close_data_file(self) -> None:
        if self._data_writer is not None:
            self._data_writer.close()
            self._data_writer = None

    def _append_video(self, key: str, n: int) -> dict[str, Any]:
        """Appends the current episode's mp4 packets to the key's current video file (no re-encoding)."""
        episode_path = self._episode_videos[key].close()
        if key in self._video_out:
            size = self._video_path[key].stat().st_size
            if size + episode_path.stat().st_size >= self.video_files_size_in_mb * MB:
                self._close_video_file(key)
                self._video_chunk_file[key] = next_chunk_file(*self._video_chunk_file[key], self.chunks_size)
        chunk_index, file_index = self._video_chunk_file[key]
        first_frame = self._video_file_frames[key]
        with av.open(str(episode_path)) as episode:
            in_stream = episode.streams.video[0]
            if key not in self._video_out:
                path = self.tmp_root / VIDEO_PATH.format(video_key=key, chunk_index=chunk_index, file_index=file_index)
                path.parent.mkdir(parents=True, exist_ok=True)
                self._video_path[key] = path
                self._video_out[key] = av.open(str(path), mode="w", options={"movflags": "+faststart"})
                self._video_stream[key] = self._video_out[key].add_stream_from_template(in_stream)
                first_frame = self._video_file_frames[key] = 0
            assert in_stream.time_base is not None  # a demuxed mp4 stream has one
            offset = round(Fraction(first_frame) / Fraction(self.fps).limit_denominator(1001) / in_stream.time_base)
            for packet in episode.demux(in_stream):
                if packet.dts is None:  # the demuxer's end-of-stream marker
                    continue
                if packet.pts is not None:  # (unknown pts stay unknown)
                    packet.pts += offset
                packet.dts += offset
                packet.stream = self._video_stream[key]
                self._video_out[key].mux(packet)
        self._video_file_frames[key] += n
        return {
            ep_video_column(key, "chunk_index"): chunk_index,
            ep_video_column(key, "file_index"): file_index,
            ep_video_column(key, "from_timestamp"): first_frame / self.fps,
            ep_video_column(key, "to_timestamp"): (first_frame + n) / self.fps,
        }

    def _close_video_file(self, key: str) -> None:
        container = self._video_out.pop(key, None)
        if container is not None:
            container.close()
        self._video_stream.pop(key, None)

    def _close_files(self) -> None:
        self._close_data_file()
        for key in list(self._video_out):
            self._close_video_file(key)

    # --- finishing ----------------------------------------------------------------------------------------------
    def finish(self) -> Path:
        """Writes meta/ and renames the dataset into `root`; an appending writer moves the new files into `root`,
        then rewrites meta/, info.json last."""
        self._check_open()
        try:
            if self.episode_frames:
                raise ValueError(
                    f"the current episode has {self.episode_frames} unsaved frames: save_episode() to keep them or "
                    "clear_episode() to drop them before finish()"
                )
            if self.num_episodes == 0:
                raise ValueError("no episode was saved: a dataset needs at least one (add_frame, save_episode)")
            self._close_files()
            shutil.rmtree(self._staging, ignore_errors=True)
            if not self._appending:
                self._write_meta(self.tmp_root)
            elif self._episode_rows:  # until info.json is replaced, last, readers see the dataset as it was
                for path in sorted(self.tmp_root.rglob("*")):
                    if path.is_file() and not is_lock_file(path.name):
                        destination = self.root / path.relative_to(self.tmp_root)
                        destination.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(path, destination)
                self._write_meta(self.root)
        except BaseException:
            self.abort()
            raise
        if self._appending:
            self._cleanup()  # the (now empty) staging folder and the hold on root
        else:  # the held root (new, or the dataset overwrite=True replaces) steps aside for the staging folder
            old = staging_path(self.root, REPLACED_TAG)
            os.rename(self.root, old)
            try:
                self._staging_folder.publish(self.root)
            except OSError as e:
                os.rename(old, self.root)
                self.abort()
                raise FileExistsError(
                    f"{self.root} was created by another process while this dataset was finished"
                ) from e
            shutil.rmtree(old, ignore_errors=True)
            self._root_lock.release()
            self._cleanup.detach()
        self._finished = True
        return self.root

    def _write_meta(self, base: Path) -> None:
        """meta/ into `base`: this writer's episodes as one meta/episodes file, tasks, stats and, last, info.json."""
        for row in self._episode_rows:
            row[EP_META_CHUNK], row[EP_META_FILE] = self._meta_chunk_file
        path = base / EPISODES_PATH.format(chunk_index=self._meta_chunk_file[0], file_index=self._meta_chunk_file[1])
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, suffix=".parquet") as tmp:
            pq.write_table(pa.Table.from_pylist(self._episode_rows), tmp)
        write_tasks(base, self.tasks)
        write_json_atomically(base / STATS_PATH, stats_to_json(aggregate_stats(self._episode_stats)), indent=4)
        info = {
            **self.info,
            "total_episodes": self.num_episodes,
            "total_frames": self.num_frames,
            "total_tasks": len(self.tasks),
            "splits": {"train": f"0:{self.num_episodes}"},
        }
        if not self._appending:  # an appended dataset's info.json keeps the rest as it was
            info["features"] = deepcopy(self.features)
            for key in self.video_keys:  # the "info" LeRobot keeps per video feature, probed from the first file
                probe = probe_video(self.tmp_root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0))
                info["features"][key]["info"] = {
                    "video.height": probe.height,
                    "video.width": probe.width,
                    "video.codec": probe.codec,
                    "video.pix_fmt": probe.pix_fmt or VIDEO_PIX_FMT,
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": int(self.features[key]["shape"][2]),
                    "has_audio": probe.has_audio,
                }
        write_json_atomically(base / INFO_PATH, info, indent=4)

    def abort(self) -> None:
        """Stops writing and removes the temporary folder; `root` is left untouched."""
        if self._finished:
            return
        for writer in self._episode_videos.values():
            writer.abort()
        self._close_files()
        self._cleanup()  # removes the staging folder and releases root (removed if this writer created it)
        self._finished = True

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError(f"the writer of {self.root} is finished (or aborted): create a new one")

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._finished:
            self.finish()


def _check_features(features: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Validated info.json features (shapes as lists, images named [height, width, channels]) + bookkeeping."""
    if not features:
        raise ValueError("features is empty: give at least one feature, e.g. {'action': {'dtype': 'float32', ...}}")
    checked: dict[str, dict[str, Any]] = {}
    for key, feature in features.items():
        if key in BOOKKEEPING_FEATURES or key == TASK:
            raise ValueError(f"feature {key!r} is a bookkeeping column the writer adds itself: leave it out")
        if "/" in key:
            raise ValueError(f"feature names cannot contain '/' (the episode table uses it as a separator): {key!r}")
        if "dtype" not in feature or "shape" not in feature:
            raise ValueError(f"feature {key!r} needs 'dtype' and 'shape' (and optionally 'names'), got {dict(feature)}")
        dtype = feature["dtype"]
        if dtype not in (*NUMERIC_DTYPES, VIDEO, IMAGE, STRING):
            raise ValueError(
                f"feature {key!r} has dtype {dtype!r}; use one of {sorted(NUMERIC_DTYPES)}, 'video', 'image', 'string'"
            )
        shape = [int(n) for n in feature["shape"]]
        if not shape or any(n < 1 for n in shape):
            raise ValueError(f"feature {key!r} has shape {feature['shape']}: give positive sizes, (1,) for a scalar")
        entry = {**deepcopy(dict(feature)), "shape": shape, "names": feature.get("names")}
        if dtype in (VIDEO, IMAGE):
            if len(shape) != 3 or shape[2] not in (1, 3, 4):
                raise ValueError(f"{dtype} feature {key!r} needs shape (height, width, channels), got {shape}")
            if dtype == VIDEO and (shape[2] != 3 or shape[0] % 2 or shape[1] % 2):
                raise ValueError(
                    f"video feature {key!r} needs 3 channels and even height and width ({VIDEO_PIX_FMT}), got {shape}: "
                    "pad or crop the frames, or use dtype 'image'"
                )
            entry["names"] = ["height", "width", "channels"]
        checked[key] = entry
    for key, feature in BOOKKEEPING_FEATURES.items():
        checked[key] = deepcopy(feature)
    return checked


def _png_bytes(frame: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame if frame.shape[2] != 1 else frame[:, :, 0]).save(buffer, format="PNG")
    return buffer.getvalue()
