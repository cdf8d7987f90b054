"""What a dataset's page holds: the episode list, each episode's camera videos and state / action / reward series,
the features, fps and stats."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hfpolicy.constants import DONE, EPISODE_INDEX, FRAME_INDEX, INDEX, REWARD, SUCCESS, TASK_INDEX, TIMESTAMP
from hfpolicy.datasets import DatasetMeta, PolicyDataset
from hfpolicy.datasets.features import STRING, is_visual
from hfpolicy.datasets.format import EP_LENGTH, EP_TASKS, DatasetFormatError, ep_video_column
from hfpolicy.io.video import probe_video
from hfpolicy.viewer.page import MAX_SERIES_VALUES, rounded, rounded_list

BOOKKEEPING = (INDEX, EPISODE_INDEX, FRAME_INDEX, TIMESTAMP, TASK_INDEX, DONE)  # columns not worth a plot
STAT_NAMES = ("mean", "std", "min", "max")


def plotted_keys(meta: DatasetMeta) -> list[str]:
    """The numeric per-frame features, in the dataset's order (state, action, reward, ...)."""
    return [
        key
        for key, feature in meta.features.items()
        if key not in BOOKKEEPING and not is_visual(feature) and feature["dtype"] != STRING
    ]


def dimension_names(feature: dict[str, Any]) -> list[str]:
    """One name per dimension: the feature's own names when it has a flat list of them, else 0, 1, ..."""
    size = int(np.prod(feature["shape"]))
    names = feature.get("names")
    if isinstance(names, dict):  # {"motors": [...]}, as some LeRobot datasets write
        names = next(iter(names.values()), None)
    if isinstance(names, list) and len(names) == size and all(isinstance(n, str) for n in names):
        return names
    return [str(i) for i in range(size)]


def feature_table(meta: DatasetMeta) -> list[dict[str, Any]]:
    rows = []
    for key, feature in meta.features.items():
        stats = (meta.stats or {}).get(key)
        row = {"key": key, "dtype": feature["dtype"], "shape": list(feature["shape"])}
        if not is_visual(feature):
            row["names"] = dimension_names(feature)
            if stats is not None:
                row["stats"] = {s: rounded_list(np.ravel(stats[s])) for s in STAT_NAMES if s in stats}
        rows.append(row)
    return rows


def episode_series(batch: dict[str, Any], keys: list[str]) -> dict[str, list[list[float | None]]]:
    """Per feature: one list per dimension (frames in order), with 4 significant digits."""
    values = {key: batch[key].numpy().reshape(len(batch[key]), -1).astype(np.float64) for key in keys}
    return {key: [rounded_list(column) for column in table.T] for key, table in values.items()}


def camera_spans(meta: DatasetMeta, episode: int, file_ids: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Per camera: the episode's video file (its number in the page's list) and its [from, to) seconds there."""
    row, spans = meta.episode_row(episode), {}
    for key in meta.video_keys:
        spans[key] = {
            "file": file_ids.setdefault(meta.video_file(episode, key), len(file_ids)),
            "from": float(row[ep_video_column(key, "from_timestamp")]),
            "to": float(row[ep_video_column(key, "to_timestamp")]),
        }
    return spans


def episode_record(meta: DatasetMeta, episode: int, batch: dict[str, Any], file_ids: dict[str, int]) -> dict[str, Any]:
    """One row of the episode table (its series added by the caller, within the page's budget)."""
    row = meta.episode_row(episode)
    tasks = row.get(EP_TASKS)
    return {
        "index": episode,
        "length": int(row[EP_LENGTH]),
        "task": " / ".join(tasks) if tasks is not None and len(tasks) else sorted(set(batch["task"]))[0],
        "success": bool(batch[SUCCESS].any()) if SUCCESS in batch else None,
        "max_reward": rounded(float(batch[REWARD].max())) if REWARD in batch else None,
        "sum_reward": rounded(float(batch[REWARD].sum())) if REWARD in batch else None,
        "cameras": camera_spans(meta, episode, file_ids),
        "series": None,
    }


def dataset_page_data(
    root: str | Path,
    link_video: Callable[[Path], str],
    repo_id: str | None = None,
    *,
    episodes: list[int] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The page data of the dataset at `root` (its `episodes`, default all); `link_video(mp4)` gives a video's URL."""
    root = Path(root)
    dataset = PolicyDataset(repo_id or root.resolve().name, root=root, episodes=episodes, download_videos=False)
    meta = dataset.meta
    keys = plotted_keys(meta)
    file_ids: dict[str, int] = {}
    shown, budget = [], MAX_SERIES_VALUES
    values_per_frame = sum(int(np.prod(meta.features[k]["shape"])) for k in keys)
    for position, episode in enumerate(dataset.episodes):
        start, end = (int(i) for i in dataset.episode_bounds[position])
        batch = dataset.get_batch(range(start, end))
        record = episode_record(meta, episode, batch, file_ids)
        if budget >= (end - start) * values_per_frame:
            record["series"] = episode_series(batch, keys)
            budget -= (end - start) * values_per_frame
        shown.append(record)
    missing = [path for path in file_ids if not (root / path).is_file()]
    if missing:
        raise DatasetFormatError(
            f"{root} lacks the video files {missing[:3]}{' ...' if len(missing) > 3 else ''} that meta/episodes points "
            "to (a copy or download without videos/?): copy them in, or view the complete dataset"
        )
    for path in file_ids:  # a cut-short or damaged file is named here, not left to the page's player
        probe_video(root / path, whole=True)
    return {
        "kind": "dataset",
        "title": f"dataset: {meta.repo_id}",
        "source": source or str(root),
        "repo_id": meta.repo_id,
        "fps": meta.fps,
        "n_episodes": meta.total_episodes,
        "n_shown": len(shown),
        "n_frames": meta.total_frames,
        "codebase_version": meta.info.get("codebase_version"),
        "robot_type": meta.info.get("robot_type"),
        "tasks": sorted(meta.tasks.values()),
        "cameras": meta.video_keys,
        "series_keys": [{"key": k, "names": dimension_names(meta.features[k])} for k in keys],
        "features": feature_table(meta),
        "video_files": [link_video(root / path) for path, _ in sorted(file_ids.items(), key=lambda kv: kv[1])],
        "episodes": shown,
    }
