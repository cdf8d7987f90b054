"""What an appending `DatasetWriter` continues from: the committed state of a LeRobot v3.0 dataset on disk (info.json's
`total_episodes` is the commit; later files are a killed append's orphans, which `settle` removes), and truncation to
its first episodes (docs/datasets.md#the-writers-append-mode)."""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hfpolicy.constants import EPISODE_INDEX, TASK, TASK_INDEX
from hfpolicy.datasets import legacy_v21
from hfpolicy.datasets.format import (
    EP_DATA_CHUNK,
    EP_DATA_FILE,
    EP_STATS_PREFIX,
    EP_TASKS,
    EP_TO_INDEX,
    EPISODES_DIR,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetFormatError,
    ep_video_column,
    load_info,
    next_chunk_file,
)
from hfpolicy.datasets.metadata import load_tasks, row_stats
from hfpolicy.datasets.stats import STAT_KEYS, aggregate_stats, load_stats_json, stats_to_json
from hfpolicy.io.atomic import is_temporary, replacing, write_json_atomically

_CHUNK_FILE = re.compile(r"chunk-(\d+)/file-(\d+)\.(parquet|mp4)$")


@dataclass
class CommittedState:
    """A dataset's committed episodes and where the next append's files go."""

    info: dict[str, Any]  # meta/info.json (its totals those of the committed episodes)
    tasks: dict[str, int]  # task -> task_index
    stats: dict[str, dict[str, np.ndarray]]  # of the committed frames, with counts (they combine with new episodes')
    next_data: tuple[int, int]  # (chunk, file) of the next data file
    next_video: dict[str, tuple[int, int]]  # per video key, of the next mp4
    next_meta: tuple[int, int]  # of the next meta/episodes file


def chunk_file(path: Path) -> tuple[int, int]:
    """(chunk, file) of a .../chunk-XXX/file-YYY.parquet|mp4 path."""
    found = _CHUNK_FILE.search(path.as_posix())
    if found is None:
        raise DatasetFormatError(f"{path} is not named chunk-XXX/file-YYY like the files of a v3.0 dataset")
    return int(found.group(1)), int(found.group(2))


_NUMBERED = re.compile(r"(chunk|file)-(\d+)(\.parquet|\.mp4)?$")


def _numbered(folder: Path, prefix: str, suffix: str = "") -> list[tuple[int, Path]]:
    """The entries of `folder` named {prefix}-NNN{suffix}, by number."""
    found = []
    for name in os.listdir(folder) if folder.is_dir() else []:
        match = _NUMBERED.match(name)
        if match and match.group(1) == prefix and (match.group(3) or "") == suffix:
            found.append((int(match.group(2)), folder / name))
    return sorted(found)


def _files(folder: Path, suffix: str, from_chunk: int = 0) -> list[Path]:
    """The chunk-XXX/file-YYY files under `folder` in chunks >= `from_chunk` (only those listed), in order."""
    return [
        path
        for chunk, folder_path in _numbered(folder, "chunk")
        if chunk >= from_chunk
        for _, path in _numbered(folder_path, "file", suffix)
    ]


def _last_files(folder: Path, suffix: str):
    """The chunk-XXX/file-YYY files under `folder` from the last one back, listing a chunk folder when reached."""
    for _, chunk in reversed(_numbered(folder, "chunk")):
        for _, path in reversed(_numbered(chunk, "file", suffix)):
            yield path


def _kept_episodes(root: Path, n: int) -> tuple[list[dict[str, dict[str, np.ndarray]]], set[str]]:
    """(the per-episode stats (stats/{key}/{stat} columns), the tasks) of the first `n` episodes."""
    parts, tasks = [], set[str]()
    for path in _files(root / EPISODES_DIR, ".parquet"):  # all of them (a truncation, or a foreign dataset)
        columns = [name for name in pq.read_schema(path).names if name.startswith(EP_STATS_PREFIX)]
        for row in pq.read_table(path, columns=[EPISODE_INDEX, EP_TASKS, *columns]).to_pylist():
            if row.pop(EPISODE_INDEX) >= n:
                continue
            tasks.update(row.pop(EP_TASKS) or [])
            parts.append(row_stats(row))
    return parts, tasks


def _countable(stats: dict | None, features: dict[str, Any]) -> bool:
    """Whether stats.json has min/max/mean/std/count of every non-string feature (they then combine exactly)."""
    if not stats:
        return False
    listed = [key for key, feature in features.items() if feature["dtype"] != "string"]
    return all(key in stats and set(STAT_KEYS) <= set(stats[key]) for key in listed)


def _rewrite_parquet(path: Path, n: int) -> None:
    """`path` keeping only the rows of the first `n` episodes (a write and a rename)."""
    table = pq.read_table(path)
    kept = table.filter(pc.less(table.column(EPISODE_INDEX), n))
    with replacing(path, suffix=".parquet") as tmp:
        pq.write_table(kept, tmp)


def _remove_beyond(folder: Path, suffix: str, last: tuple[int, int]) -> None:
    """Unlinks the files under `folder` after (chunk, file) `last` and the chunk folders they leave empty."""
    for path in _files(folder, suffix, from_chunk=last[0]):
        if chunk_file(path) > last:
            path.unlink()
    for chunk, path in _numbered(folder, "chunk"):
        if chunk > last[0] and not any(path.iterdir()):
            path.rmdir()


def _remove_temporary(*folders: Path) -> None:
    """Removes the temporary files that a killed writer left in `folders`."""
    for folder in folders:
        for name in os.listdir(folder) if folder.is_dir() else []:
            if is_temporary(name):
                (folder / name).unlink(missing_ok=True)


def _episode_table_end(root: Path, n: int) -> tuple[Path, np.ndarray, list[Path], dict]:
    """The meta/episodes file holding episode n - 1 (its episode indices), the files after it (wholly beyond n:
    dropped), and episode n - 1's row."""
    beyond: list[Path] = []
    anchor, indices = None, None
    for path in _last_files(root / EPISODES_DIR, ".parquet"):
        indices = pq.read_table(path, columns=[EPISODE_INDEX]).column(EPISODE_INDEX).to_numpy()
        if (indices < n).any():
            anchor = path
            break
        beyond.append(path)
    if anchor is None or indices is None or n - 1 not in indices:
        raise DatasetFormatError(f"{root}: no file of {EPISODES_DIR} lists episode {n - 1}, which info.json counts")
    last = next(row for row in pq.read_table(anchor).to_pylist() if row[EPISODE_INDEX] == n - 1)
    return anchor, indices, beyond, last


def _commit_meta(root: Path, info: dict, n: int, last: dict, tasks: dict, stats) -> dict:
    """info.json (the commit: readers now see n episodes), stats.json and tasks.parquet rewritten for the first n
    episodes; the new info."""
    info = {
        **info, "total_episodes": n, "total_frames": int(last[EP_TO_INDEX]), "total_tasks": len(tasks),
        "splits": {"train": f"0:{n}"},
    }  # fmt: skip
    write_json_atomically(root / INFO_PATH, info, indent=4)
    write_json_atomically(root / STATS_PATH, stats_to_json(stats or {}), indent=4)
    write_tasks(root, tasks)
    return info


def write_tasks(root: Path, tasks: dict[str, int]) -> None:
    """meta/tasks.parquet as LeRobot keeps it: the task strings as its index, named "task"."""
    frame = pd.DataFrame({TASK_INDEX: list(tasks.values())}, index=pd.Index(list(tasks), name=TASK))
    with replacing(root / TASKS_PATH, suffix=".parquet") as tmp:
        frame.to_parquet(tmp)


def _unfinished_append_left_files(root: Path, info: dict, next_data: tuple, next_video: dict) -> bool:
    """Whether an unfinished append left files: the first data or video file it would number exists."""
    return (root / info["data_path"].format(chunk_index=next_data[0], file_index=next_data[1])).exists() or any(
        (root / info["video_path"].format(video_key=key, chunk_index=c, file_index=f)).exists()
        for key, (c, f) in next_video.items()
    )


def settle(root: str | Path, n_episodes: int | None = None) -> CommittedState:
    """The committed state of the v3.0 dataset at `root` (the caller holds its run lock), keeping its first
    `n_episodes` (default: all that info.json commits) and removing the rest and whatever an unfinished append
    left. DatasetFormatError if it is not a v3.0 dataset, ValueError if `n_episodes` is not in 1..total."""
    root = Path(root)
    info = load_info(root)
    if legacy_v21.is_v21(info):
        raise DatasetFormatError(f"{root} is a LeRobot v2.1 dataset: append to v3.0 (`hfpolicy convert lerobot-v2.1`)")
    committed = int(info.get("total_episodes", 0))
    n = committed if n_episodes is None else int(n_episodes)
    if not 1 <= n <= committed:
        raise ValueError(f"{root} holds {committed} episodes: keep between 1 and {committed}, not {n}")

    anchor, indices, beyond, last = _episode_table_end(root, n)
    # episodes to drop: truncated ones, or the rows of a killed append
    rewrites = n != committed or bool(beyond) or bool((indices >= n).any())

    stats, tasks = load_stats_json(root / STATS_PATH), {task: index for index, task in load_tasks(root).items()}
    if rewrites or not _countable(stats, info["features"]):
        episode_stats, used = _kept_episodes(root, n)
        stats = aggregate_stats(episode_stats) or stats
        # Tasks are numbered in order of first use: those after the kept episodes' were first used by dropped ones.
        last_used = max((tasks[task] for task in used if task in tasks), default=len(tasks) - 1)
        tasks = {task: index for task, index in tasks.items() if index <= last_used}
    if rewrites:
        info = _commit_meta(root, info, n, last, tasks, stats)

    chunks_size = int(info["chunks_size"])
    last_data = (int(last[EP_DATA_CHUNK]), int(last[EP_DATA_FILE]))
    last_data_path = root / info["data_path"].format(chunk_index=last_data[0], file_index=last_data[1])
    video_keys = [key for key, feature in info["features"].items() if feature["dtype"] == "video"]
    last_video = {
        key: (int(last[ep_video_column(key, "chunk_index")]), int(last[ep_video_column(key, "file_index")]))
        for key in video_keys
    }
    next_data = next_chunk_file(*last_data, chunks_size)
    next_video = {key: next_chunk_file(*last, chunks_size) for key, last in last_video.items()}
    if rewrites or _unfinished_append_left_files(root, info, next_data, next_video):
        _remove_beyond(root / "data", ".parquet", last_data)
        for key in video_keys:
            _remove_beyond(root / "videos" / key, ".mp4", last_video[key])
    if rewrites:
        if pc.max(pq.read_table(last_data_path, columns=[EPISODE_INDEX]).column(EPISODE_INDEX)).as_py() >= n:
            _rewrite_parquet(last_data_path, n)
        # The episode table's rows beyond n go last: until they are gone the next settle sees them and redoes this.
        if (indices >= n).any():
            _rewrite_parquet(anchor, n)
        for path in beyond:
            path.unlink()
    _remove_temporary(root / "meta", anchor.parent, last_data_path.parent)
    return CommittedState(
        info=info,
        tasks=tasks,
        stats=stats or {},
        next_data=next_data,
        next_video=next_video,
        next_meta=next_chunk_file(*chunk_file(anchor), chunks_size),
    )
