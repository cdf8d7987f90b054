"""LeRobot's v2.1 layout (docs/datasets.md#the-on-disk-layout) read into the shape of a v3.0 dataset's meta/: the
episode table (one data file and one video per episode, from_timestamp 0), tasks and stats."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hfpolicy.constants import EPISODE_INDEX, TASK, TASK_INDEX
from hfpolicy.datasets.format import (
    EP_DATA_CHUNK,
    EP_DATA_FILE,
    EP_FROM_INDEX,
    EP_LENGTH,
    EP_TASKS,
    EP_TO_INDEX,
    DatasetFormatError,
    ep_video_column,
)
from hfpolicy.datasets.stats import aggregate_stats

EPISODES_JSONL = "meta/episodes.jsonl"
TASKS_JSONL = "meta/tasks.jsonl"
EPISODES_STATS_JSONL = "meta/episodes_stats.jsonl"
DEFAULT_V21_CHUNKS_SIZE = 1000


def is_v21(info: dict[str, Any]) -> bool:
    return str(info.get("codebase_version", "")).lstrip("vV").startswith("2.")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file (blank lines skipped); a bad line is named with its number."""
    if not path.is_file():
        raise DatasetFormatError(f"{path} is missing: every LeRobot v2.1 dataset has it (an incomplete download?)")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DatasetFormatError(f"{path} line {number} is not JSON: {e}") from None
    return rows


def load_episode_table(root: Path, info: dict[str, Any]) -> pd.DataFrame:
    """meta/episodes.jsonl as a v3.0-style episode table (sorted by episode_index, indexed by it)."""
    rows = read_jsonl(root / EPISODES_JSONL)
    missing = [name for name in (EPISODE_INDEX, EP_LENGTH) if any(name not in row for row in rows)]
    if missing or not rows:
        raise DatasetFormatError(f"{root / EPISODES_JSONL} has no episodes, or episodes without {missing}")
    table = pd.DataFrame(
        {
            EPISODE_INDEX: [int(row[EPISODE_INDEX]) for row in rows],
            EP_TASKS: [list(row.get(EP_TASKS, [])) for row in rows],
            EP_LENGTH: [int(row[EP_LENGTH]) for row in rows],
        }
    )
    table = table.sort_values(EPISODE_INDEX).set_index(EPISODE_INDEX, drop=False)
    if table.index.has_duplicates:
        raise DatasetFormatError(f"{root / EPISODES_JSONL} lists some episode twice")
    chunks_size = int(info.get("chunks_size") or DEFAULT_V21_CHUNKS_SIZE)
    table[EP_DATA_CHUNK] = table[EPISODE_INDEX] // chunks_size
    table[EP_DATA_FILE] = table[EPISODE_INDEX]  # one file per episode
    ends = np.cumsum(table[EP_LENGTH].to_numpy())
    table[EP_FROM_INDEX] = ends - table[EP_LENGTH].to_numpy()
    table[EP_TO_INDEX] = ends
    for key, feature in info["features"].items():
        if feature["dtype"] == "video":
            table[ep_video_column(key, "chunk_index")] = table[EP_DATA_CHUNK]
            table[ep_video_column(key, "file_index")] = table[EPISODE_INDEX]
            table[ep_video_column(key, "from_timestamp")] = 0.0
            table[ep_video_column(key, "to_timestamp")] = table[EP_LENGTH] / float(info["fps"])
    return table


def load_tasks(root: Path) -> dict[int, str]:
    """task_index -> task, from meta/tasks.jsonl."""
    rows = read_jsonl(root / TASKS_JSONL)
    bad = [row for row in rows if TASK_INDEX not in row or TASK not in row]
    if bad:
        raise DatasetFormatError(f"{root / TASKS_JSONL} has lines without 'task_index' and 'task': {bad[0]}")
    return {int(row[TASK_INDEX]): str(row[TASK]) for row in rows}


def load_stats(root: Path) -> dict[str, dict[str, np.ndarray]] | None:
    """The dataset stats combined from meta/episodes_stats.jsonl (None when the file is absent)."""
    path = root / EPISODES_STATS_JSONL
    if not path.is_file():
        return None
    per_episode = [
        {key: {stat: np.asarray(value) for stat, value in stats.items()} for key, stats in row["stats"].items()}
        for row in read_jsonl(path)
    ]
    return aggregate_stats(per_episode) if per_episode else None
