"""`PolicyDataset`: a LeRobot v3.0 or v2.1 dataset (local or from the Hub) as a torch Dataset of training samples,
by index arithmetic on arrays built once (camera frames in a uint8 frame cache); window offsets outside the episode
repeat its edge frame, flagged in `{key}_is_pad`."""

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from hfpolicy.constants import EPISODE_INDEX, FRAME_INDEX, INDEX, TASK, TASK_INDEX, TIMESTAMP, pad_key
from hfpolicy.datasets.batch_images import uint8_to_float
from hfpolicy.datasets.features import IMAGE, STRING, VIDEO, column_to_numpy, image_chw, is_visual
from hfpolicy.datasets.format import (
    EP_LENGTH,
    INFO_PATH,
    DatasetFormatError,
    TimestampError,
    ep_video_column,
    reading_parquet,
)
from hfpolicy.datasets.frame_cache import FRAME_CACHE_RAM_CAP_GB, FrameCache, decode_video_segment
from hfpolicy.datasets.hub import download_dataset
from hfpolicy.datasets.loader_transfer import batch_for_loader, shared_empty
from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.datasets.stats import array_stats, stats_to_torch


class PolicyDataset(torch.utils.data.Dataset):
    """Frames of a LeRobot v3.0 dataset with `delta_timestamps` windows, ready for a policy.

    Args:
        repo_id: the dataset's Hub repo id ("lerobot/pusht"), or a name for a local dataset.
        root: a local dataset root (with meta/, data/, videos/). None downloads `repo_id` from the Hub into the HF
            cache, only the files of the chosen episodes (`revision`: a branch, tag or commit).
        episodes: episode indices to use (default: all).
        delta_timestamps: per feature key, time offsets in seconds relative to each frame, e.g.
            {"observation.image": [-0.1, 0.0], "action": [0.0, 0.1, ..., 1.5]}. Offsets must be multiples of 1/fps.
        tolerance_s: how far timestamps may stray from multiples of 1/fps (and video frames from their time).
        image_transforms: applied to every image tensor, (C, H, W) or (T, C, H, W) float in [0, 1].
        frame_cache: "auto" (RAM up to `frame_cache_max_ram_gb`, else a memory-mapped file), "ram" or "disk".
        download_videos: False leaves camera features out (no video download, no decoding).

    Items are dicts: every feature as a tensor (images float32 [0, 1] (C, H, W); windowed keys with a leading time
    dim and a bool `{key}_is_pad` (T,)), the bookkeeping columns and `task` (the task string). With `uint8_images`
    (a training run sets it), batches fetched by an index list carry their frames as uint8, for `frames_to_float`.
    """

    uint8_images = False

    def __init__(
        self,
        repo_id: str,
        root: str | Path | None = None,
        revision: str | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        *,
        tolerance_s: float = 1e-4,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        frame_cache: str = "auto",
        frame_cache_max_ram_gb: float = FRAME_CACHE_RAM_CAP_GB,
        download_videos: bool = True,
    ):
        super().__init__()
        self.repo_id = repo_id
        self.revision = revision
        self.tolerance_s = tolerance_s
        self.image_transforms = image_transforms
        if root is None:
            root = download_dataset(repo_id, revision=revision, episodes=episodes, download_videos=download_videos)
        self.root = Path(root)
        self.meta = DatasetMeta.load(self.root, repo_id)
        self.info = self.meta.info
        self.fps = self.meta.fps
        self.features = self.meta.features
        self.stats = stats_to_torch(self.meta.stats) if self.meta.stats else {}
        self.tasks = self.meta.tasks

        self.episodes = self._select_episodes(episodes)
        self.camera_keys = [k for k in self.meta.camera_keys if download_videos or self.features[k]["dtype"] != VIDEO]
        self._load_columns()
        self._check_stats_finite()
        if not self.stats:  # no meta/stats.json and no per-episode stats: the numeric features' stats, from the frames
            self.stats = stats_to_torch({key: array_stats(values) for key, values in self._columns.items()})
        self.delta_timestamps = {k: [float(t) for t in v] for k, v in (delta_timestamps or {}).items()}
        self.delta_indices = self._check_delta_timestamps(self.delta_timestamps)
        self._deltas = {key: np.asarray(offsets, dtype=np.int64) for key, offsets in self.delta_indices.items()}
        self._make_frame_caches(frame_cache, frame_cache_max_ram_gb)

    def _select_episodes(self, episodes: Sequence[int] | None) -> list[int]:
        available = [int(e) for e in self.meta.episodes.index]
        if episodes is None:
            return available
        chosen = sorted({int(e) for e in episodes})
        unknown = sorted(set(chosen) - set(available))
        if unknown:
            raise ValueError(
                f"episodes {unknown} are not in {self.repo_id} (it has {len(available)} episodes, indices "
                f"{available[0]}..{available[-1]})"
            )
        if not chosen:
            raise ValueError("episodes is empty: pass None for all episodes, or some episode indices")
        return chosen

    def _load_columns(self) -> None:
        keys = [k for k, ft in self.features.items() if ft["dtype"] != VIDEO]
        table = self._read_data_table(keys)
        for key in (INDEX, EPISODE_INDEX, FRAME_INDEX, TIMESTAMP, TASK_INDEX):
            if key not in table.column_names:
                raise DatasetFormatError(f"the data files of {self.repo_id} have no {key!r} column")
        self._store_columns(table, [key for key in keys if key in table.column_names])  # streamed: no image columns
        self.num_frames = len(table)
        self.num_episodes = len(self.episodes)
        self._find_episode_bounds()
        self._check_timestamps()
        self._check_finite()

    def _read_data_table(self, keys: list[str]) -> pa.Table:
        """The `keys` columns of the chosen episodes' rows of the data files (through 🤗 datasets)."""
        files = sorted({self.meta.data_file(ep) for ep in self.episodes})
        missing = [f for f in files if not (self.root / f).is_file()]
        if missing:
            raise DatasetFormatError(
                f"{self.root} lacks the data files {missing} that meta/episodes points to (an incomplete download or "
                "copy?)"
            )
        for file in files:  # a footer read per file: a damaged one is named here, not deep inside 🤗 datasets
            with reading_parquet(self.root / file):
                stored = set(pq.read_schema(self.root / file).names)
            absent = [k for k in keys if k not in stored]
            if absent:
                raise DatasetFormatError(
                    f"info.json of {self.repo_id} lists the features {absent} but {file} has no such columns"
                )
        filters = [(EPISODE_INDEX, "in", self.episodes)] if len(self.episodes) < self.meta.total_episodes else None
        bars_were_off = datasets.utils.are_progress_bars_disabled()
        datasets.utils.disable_progress_bars()  # "Generating train split" for every dataset says nothing useful
        try:
            hf_dataset = datasets.Dataset.from_parquet(
                [str(self.root / f) for f in files], columns=keys, filters=filters, split="train"
            )
        finally:
            if not bars_were_off:
                datasets.utils.enable_progress_bars()
        return hf_dataset.data.table

    def _store_columns(self, table: pa.Table, keys: list[str]) -> None:
        """Numeric columns as numpy arrays, strings as lists, image bytes as arrow arrays, by (episode, frame)."""
        episode_col = column_to_numpy(EPISODE_INDEX, self.features[EPISODE_INDEX], table.column(EPISODE_INDEX))
        frame_col = column_to_numpy(FRAME_INDEX, self.features[FRAME_INDEX], table.column(FRAME_INDEX))
        lexsorted = np.lexsort((frame_col, episode_col))
        order = None if np.all(lexsorted == np.arange(len(lexsorted))) else lexsorted
        self._columns: dict[str, np.ndarray] = {}
        self._strings: dict[str, list[str]] = {}
        self._image_bytes: dict[str, pa.Array] = {}
        for key in keys:
            feature = self.features[key]
            column = table.column(key)
            if feature["dtype"] == IMAGE:
                column = column.combine_chunks()
                self._image_bytes[key] = column if order is None else column.take(pa.array(order))
            elif feature["dtype"] == STRING:
                values = column.to_pylist()
                self._strings[key] = values if order is None else [values[i] for i in order]
            else:
                values = column_to_numpy(key, feature, column)
                self._columns[key] = values if order is None else values[order]

    def _find_episode_bounds(self) -> None:
        """Each episode's [start, end) row positions, checked against the episode lengths of meta/."""
        episode_col = self._columns[EPISODE_INDEX]
        starts = np.flatnonzero(np.r_[True, episode_col[1:] != episode_col[:-1]])
        ends = np.r_[starts[1:], len(episode_col)]
        found = episode_col[starts].tolist()
        if found != self.episodes:
            absent = sorted(set(self.episodes) - set(found))
            raise DatasetFormatError(f"the data files of {self.repo_id} have no frames of episodes {absent}")
        for ep, start, end in zip(self.episodes, starts, ends, strict=True):
            expected = int(self.meta.episode_number(ep, EP_LENGTH))
            if end - start != expected:
                raise DatasetFormatError(
                    f"episode {ep} has {end - start} frames in {self.meta.data_file(ep)} but meta/episodes says "
                    f"length {expected}"
                )
        self.episode_bounds = np.stack([starts, ends], axis=1).astype(np.int64)  # (E, 2): [start, end) positions
        self._row_episode = np.repeat(np.arange(len(starts)), ends - starts)  # row -> episode position

    def _check_stats_finite(self) -> None:
        bad = [
            f"{key}.{name}"
            for key, part in self.stats.items()
            for name, value in part.items()
            if value.is_floating_point() and not torch.isfinite(value).all()
        ]
        if bad:
            raise DatasetFormatError(
                f"the stats of {self.repo_id} (meta/stats.json or the per-episode stats) hold NaN or inf in {', '.join(bad)}: recompute them "
                "(delete meta/stats.json to have them computed from the frames at load)"
            )

    def _check_finite(self) -> None:
        """NaN or inf in a numeric feature (actions, states) would train silently into NaN: name where they are."""
        problems, bad_episodes = [], set()
        for key, values in self._columns.items():
            if not np.issubdtype(values.dtype, np.floating):
                continue
            bad_rows = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
            if bad_rows.any():
                episodes = sorted({self.episodes[i] for i in self._row_episode[bad_rows]})
                bad_episodes.update(episodes)
                shown = ", ".join(map(str, episodes[:10])) + (
                    f" and {len(episodes) - 10} more" if len(episodes) > 10 else ""
                )
                problems.append(f"{key!r} in {int(bad_rows.sum())} frames of episodes {shown}")
        if problems:
            keep = [e for e in self.episodes if e not in bad_episodes]
            raise DatasetFormatError(
                f"{self.repo_id} holds NaN or inf values: {'; '.join(problems)}. Fix those frames, or leave the "
                f"episodes out (episodes=[...] / --dataset.episodes; {len(keep)} of {len(self.episodes)} are clean)"
            )

    def _check_timestamps(self) -> None:
        """Timestamps must advance by 1/fps inside every episode; a gap means frames are missing."""
        ts = self._columns[TIMESTAMP].astype(np.float64)
        steps = np.diff(ts)
        inside = self._row_episode[1:] == self._row_episode[:-1]
        tolerance = self.tolerance_s + self._timestamp_resolution(ts[1:])
        bad = np.flatnonzero(inside & (np.abs(steps - 1.0 / self.fps) > tolerance))
        if len(bad):
            i = int(bad[0])
            ep = self.episodes[self._row_episode[i]]
            frame = int(self._columns[FRAME_INDEX][i])
            raise TimestampError(
                f"episode {ep} of {self.repo_id}: the timestamp goes from {ts[i]:.4f} s (frame_index {frame}) to "
                f"{ts[i + 1]:.4f} s, a step of {steps[i]:.4f} s where fps {self.fps} needs {1 / self.fps:.4f} s "
                f"(± tolerance_s={self.tolerance_s}): frames are missing or duplicated there. Fix or drop that "
                "episode (episodes=[...]), or raise tolerance_s if the timestamps are only jittered."
                + (f" {len(bad) - 1} more such steps follow." if len(bad) > 1 else "")
            )

    def _timestamp_resolution(self, ts: np.ndarray) -> np.ndarray | float:
        """How finely the stored timestamps resolve time (float32 timestamps of long episodes step by ~1e-5 s)."""
        if self._columns[TIMESTAMP].dtype == np.float32:
            return 2 * np.spacing(np.abs(ts).astype(np.float32)).astype(np.float64)
        return 0.0

    def _check_delta_timestamps(self, delta_timestamps: dict[str, list[float]]) -> dict[str, list[int]]:
        indices: dict[str, list[int]] = {}
        longest_s = int(self.meta.episodes.loc[self.episodes, EP_LENGTH].max()) / self.fps
        for key, offsets in delta_timestamps.items():
            if key not in self.features:
                raise ValueError(
                    f"delta_timestamps has key {key!r}, which is not a feature of {self.repo_id}; its features are "
                    f"{sorted(self.features)}"
                )
            if self.features[key]["dtype"] == STRING:
                raise ValueError(f"delta_timestamps key {key!r} is a string feature: strings cannot be windowed")
            if is_visual(self.features[key]) and key not in self.camera_keys:
                raise ValueError(f"delta_timestamps key {key!r} is a video, but download_videos=False")
            if len(offsets) == 0:
                raise ValueError(f"delta_timestamps[{key!r}] is empty: give at least one offset (0.0 is the frame)")
            absurd = [t for t in offsets if not math.isfinite(t) or abs(t) > longest_s]
            if absurd:
                raise ValueError(
                    f"delta_timestamps[{key!r}] has offsets {absurd} that are not finite or reach beyond the longest "
                    f"episode ({longest_s:.2f} s): offsets are seconds relative to the frame, e.g. [-0.1, 0.0]"
                )
            steps = [t * self.fps for t in offsets]
            off = [t for t, s in zip(offsets, steps, strict=True) if abs(s - round(s)) / self.fps > self.tolerance_s]
            if off:
                raise ValueError(
                    f"delta_timestamps[{key!r}] has offsets {off} that are not multiples of 1/fps = "
                    f"{1 / self.fps:.4f} s (fps {self.fps}, tolerance {self.tolerance_s} s)"
                )
            indices[key] = [round(s) for s in steps]
        return indices

    def _make_frame_caches(self, storage: str, max_ram_gb: float) -> None:
        if storage not in ("auto", "ram", "disk"):
            raise ValueError(f"frame_cache must be 'auto', 'ram' or 'disk', got {storage!r}")
        shapes = {key: image_chw(key, self.features[key]) for key in self.camera_keys}
        total = sum(self.num_frames * math.prod(chw) for chw in shapes.values())
        if storage == "auto":
            storage = "ram" if total <= max_ram_gb * 1024**3 else "disk"
        self.frame_cache_storage = storage if shapes else "none"
        self._caches = {
            key: FrameCache(self.num_frames, chw, self.num_episodes, storage) for key, chw in shapes.items()
        }

    def _fill_episode(self, key: str, episode_pos: int) -> None:
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        self._decode_episode(key, episode_pos, self._caches[key].array[start:end])
        self._caches[key].mark_filled(episode_pos)

    def _decode_episode(self, key: str, episode_pos: int, out: np.ndarray) -> None:
        """Decodes the frames of camera `key` of the `episode_pos`-th chosen episode into `out` (len, C, H, W) uint8."""
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        episode = self.episodes[episode_pos]
        what = f"episode {episode} of {self.repo_id}, {key}"
        if self.features[key]["dtype"] == VIDEO:
            from_ts = self.meta.episode_number(episode, ep_video_column(key, "from_timestamp"))
            episode_ts = self._columns[TIMESTAMP][start:end].astype(np.float64)
            tolerance = self.tolerance_s + float(np.max(self._timestamp_resolution(episode_ts)))
            self._decode_video(key, episode, from_ts + episode_ts, tolerance, out, what)
        else:
            _fill_from_image_bytes(self._image_column(key, episode_pos), out, what)

    def _decode_video(
        self, key: str, episode: int, timestamps: np.ndarray, tolerance: float, out: np.ndarray, what: str
    ) -> None:
        """Decodes the frames of camera `key` of `episode` at `timestamps` (times in its video file) into `out`."""
        path = self.root / self.meta.video_file(episode, key)
        if not path.is_file():
            raise DatasetFormatError(f"{what}: the video file {path} is missing (an incomplete download?)")
        decode_video_segment(path, timestamps, tolerance, out, what)

    def _image_column(self, key: str, episode_pos: int) -> pa.Array:
        """The image bytes of image feature `key` for the `episode_pos`-th chosen episode, in frame order."""
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        return self._image_bytes[key][start:end]

    def prefetch_frames(self, progress: bool = True) -> None:
        """Decodes every episode of every camera into the frame cache now (otherwise it happens on first use)."""
        todo = [(k, e) for k in self.camera_keys for e in range(self.num_episodes) if not self._caches[k].is_filled(e)]
        for key, episode_pos in tqdm(todo, desc=f"decoding {self.repo_id} frames", disable=not progress or not todo):
            self._fill_episode(key, episode_pos)

    def episode_frames(self, episode_pos: int) -> dict[str, Any]:
        """The stored frames of the `episode_pos`-th chosen episode, undecorated: every non-bookkeeping feature as
        numpy (images uint8 (T, H, W, C), as a writer takes them; strings as lists) and `task` per frame."""
        start, end = (int(v) for v in self.episode_bounds[episode_pos])
        frames: dict[str, Any] = {key: values[start:end] for key, values in self._columns.items()}
        frames.update({key: values[start:end] for key, values in self._strings.items()})
        for key in self.camera_keys:
            rows = np.arange(start, end)
            frames[key] = self._camera_frames(key, rows, np.full(len(rows), episode_pos)).transpose(0, 2, 3, 1)
        frames[TASK] = [self.tasks.get(t, "") for t in self._columns[TASK_INDEX][start:end].tolist()]
        return frames

    def __len__(self) -> int:
        return self.num_frames

    def __getitem__(self, idx: int | Sequence[int] | np.ndarray | torch.Tensor) -> dict[str, Any]:
        """`dataset[i]` is one item. `dataset[[i, j, ...]]` (a list, array or 1-d tensor of indices) is the collated
        batch of those items, so `DataLoader(dataset, sampler=BatchSampler(sampler, 64, drop_last=False),
        batch_size=None)` fetches whole batches without building per-item dicts and stacking them again."""
        if isinstance(idx, (list, tuple, np.ndarray, torch.Tensor)) and np.ndim(idx) == 1:
            if self.image_transforms is None:  # a DataLoader worker sends it in one buffer (loader_transfer.py)
                return batch_for_loader(self.get_batch, np.asarray(idx), self.camera_keys, self.uint8_images)
            batch = self.get_batch(np.asarray(idx))
            for key in self.camera_keys:  # image_transforms: per sample, on float frames
                batch[key] = torch.stack([self.image_transforms(image) for image in batch[key]])
            return batch
        return self.__getitems__(np.asarray([idx]))[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Items for many indices at once (the DataLoader calls this with a batch's indices): one `get_batch`, then
        each item gets views of it."""
        batch = self.get_batch(indices)
        keys = list(batch)
        columns = [value.unbind(0) if isinstance(value, torch.Tensor) else value for value in batch.values()]
        items = [dict(zip(keys, values, strict=True)) for values in zip(*columns, strict=True)]
        if self.image_transforms is not None:
            for item in items:
                for key in self.camera_keys:
                    item[key] = self.image_transforms(item[key])
        return items

    def get_batch(self, indices: Sequence[int] | np.ndarray, uint8_images: bool = False) -> dict[str, Any]:
        """The collated batch of `indices` without per-item dicts: tensors with a leading batch dim (images float32
        in [0, 1], not passed through `image_transforms`; with `uint8_images` their uint8 0..255 frames, as a
        DataLoader worker sends them), lists for strings and `task`."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = np.where(idx < 0, idx + self.num_frames, idx)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_frames):
            bad = int(idx[(idx < 0) | (idx >= self.num_frames)][0])
            raise IndexError(f"index {bad} is out of range for a dataset of {self.num_frames} frames")
        episode_pos = self._row_episode[idx]
        start = self.episode_bounds[episode_pos, 0][:, None]
        end = self.episode_bounds[episode_pos, 1][:, None]
        batch: dict[str, Any] = {}
        windows: dict[str, np.ndarray] = {}
        for key, deltas in self._deltas.items():
            wanted = idx[:, None] + deltas[None, :]
            windows[key] = np.minimum(np.maximum(wanted, start), end - 1)  # offsets outside the episode: edge frame
            batch[pad_key(key)] = torch.from_numpy((wanted < start) | (wanted >= end))
        for key, values in self._columns.items():
            batch[key] = torch.from_numpy(values[windows.get(key, idx)])
        for key, strings in self._strings.items():
            batch[key] = [strings[i] for i in windows.get(key, idx)]
        for key in self.camera_keys:
            rows = windows.get(key, idx)
            if uint8_images and torch.utils.data.get_worker_info() is not None:  # into the shared tensor it is sent in
                batch[key] = shared_empty((*rows.shape, *image_chw(key, self.features[key])), torch.uint8)
                self._camera_frames(key, rows, episode_pos, out=batch[key].numpy())
            elif uint8_images:
                batch[key] = torch.from_numpy(self._camera_frames(key, rows, episode_pos))
            else:
                frames = self._camera_frames(key, rows, episode_pos)
                batch[key] = uint8_to_float(frames, torch.empty(frames.shape))
        batch[TASK] = [self.tasks.get(t, "") for t in self._columns[TASK_INDEX][idx].tolist()]
        return batch

    def _camera_frames(self, key: str, rows: np.ndarray, episode_pos: np.ndarray, out=None) -> np.ndarray:
        """uint8 frames (*rows.shape, C, H, W) of camera `key` at dataset positions `rows` (into `out` if given), whose
        first dim belongs to the episodes `episode_pos`; episodes not decoded yet are decoded into the cache first."""
        cache = self._caches[key]
        for episode in np.unique(episode_pos).tolist():
            if not cache.is_filled(episode):
                self._fill_episode(key, episode)
        if out is None:
            return cache.array[rows]
        # frame by frame: faster than a gather then a copy (docs/streaming.md#the-readers-small-costs)
        flat = out.reshape(-1, *out.shape[rows.ndim :])
        for j, row in enumerate(rows.reshape(-1).tolist()):
            flat[j] = cache.array[row]
        return out

    def __repr__(self) -> str:
        return (
            f"PolicyDataset({self.repo_id!r}, root={str(self.root)!r}, episodes={self.num_episodes}, "
            f"frames={self.num_frames}, fps={self.fps}, features={list(self.features)}, "
            f"delta_timestamps={self.delta_timestamps or None})"
        )


def _fill_from_image_bytes(column: pa.Array, out: np.ndarray, what: str) -> None:
    """Decodes image bytes stored in the data parquet (datasets.Image structs) into `out` (len, C, H, W) uint8."""
    import io

    from PIL import Image

    for j, value in enumerate(column.to_pylist()):
        if value is None or value.get("bytes") is None:
            raise DatasetFormatError(f"{what}: frame {j} has no embedded image bytes (images by path are not read)")
        with Image.open(io.BytesIO(value["bytes"])) as image:
            array = np.asarray(image.convert("RGB") if out.shape[1] == 3 else image)
        if array.ndim == 2:
            array = array[:, :, None]
        if array.shape[:2] != tuple(out.shape[2:]):
            raise DatasetFormatError(
                f"{what}: image {j} is {array.shape[1]}x{array.shape[0]} but {INFO_PATH} declares "
                f"{out.shape[3]}x{out.shape[2]}"
            )
        out[j] = array.transpose(2, 0, 1)
