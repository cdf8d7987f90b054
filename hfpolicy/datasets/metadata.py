"""The meta/ folder of a dataset, loaded: info.json, stats.json, tasks.parquet and the episode table (v3.0), or
their v2.1 counterparts in the same shape (legacy_v21.py)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from hfpolicy.constants import EPISODE_INDEX, TASK, TASK_INDEX
from hfpolicy.datasets import legacy_v21
from hfpolicy.datasets.features import VIDEO, is_visual
from hfpolicy.datasets.format import (
    EP_DATA_CHUNK,
    EP_DATA_FILE,
    EP_FROM_INDEX,
    EP_LENGTH,
    EP_STATS_PREFIX,
    EP_TO_INDEX,
    EPISODES_DIR,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetFormatError,
    ep_video_column,
    load_info,
    reading_parquet,
)
from hfpolicy.datasets.stats import aggregate_stats, load_stats_json
from hfpolicy.io.paths import contained_path


@dataclass
class DatasetMeta:
    """Everything under meta/: what a dataset holds and where each episode's frames are."""

    root: Path  # the dataset root (holds meta/, data/, videos/)
    repo_id: str  # Hub repo id, or a local name
    info: dict[str, Any]  # meta/info.json, feature shapes as tuples
    stats: dict[str, dict[str, np.ndarray]] | None  # meta/stats.json (None when absent and not derivable)
    tasks: dict[int, str]  # task_index -> task
    episodes: pd.DataFrame  # one row per episode, sorted by episode_index (stats columns left out)
    _inside: set[str] = field(default_factory=set, init=False, repr=False, compare=False)  # checked paths

    @classmethod
    def load(cls, root: str | Path, repo_id: str | None = None) -> "DatasetMeta":
        root = Path(root)
        info = load_info(root, repo_id)
        if legacy_v21.is_v21(info):
            episodes, tasks = legacy_v21.load_episode_table(root, info), legacy_v21.load_tasks(root)
            stats = load_stats_json(root / STATS_PATH) or legacy_v21.load_stats(root)
        else:
            episodes, tasks = load_episode_table(root, info.get("total_episodes")), load_tasks(root)
            stats = load_stats_json(root / STATS_PATH) or stats_from_episode_table(root)
        return cls(root=root, repo_id=repo_id or root.name, info=info, stats=stats, tasks=tasks, episodes=episodes)

    @property
    def codebase_version(self) -> str:
        return str(self.info["codebase_version"])

    @property
    def fps(self) -> float:
        return self.info["fps"]

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == VIDEO]

    @property
    def camera_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if is_visual(ft)]

    @property
    def total_episodes(self) -> int:
        return len(self.episodes)

    @property
    def total_frames(self) -> int:
        return int(self.episodes[EP_LENGTH].sum())

    def episode_row(self, episode_index: int) -> pd.Series:
        return cast(pd.Series, self.episodes.loc[episode_index])  # a row: the index is unique (load_episode_table)

    def episode_number(self, episode_index: int, column: str) -> float:
        """A numeric field of one episode (its length, a video's from/to timestamp)."""
        return float(cast(float, self.episodes.at[episode_index, column]))  # the stubs' cell type allows any scalar

    def data_file(self, episode_index: int) -> str:
        row = self.episode_row(episode_index)
        chunk, file = int(row[EP_DATA_CHUNK]), int(row[EP_DATA_FILE])
        # v3.0 templates name chunk_index / file_index, v2.1 ones episode_chunk / episode_index
        path = self.info["data_path"].format(
            chunk_index=chunk, file_index=file, episode_chunk=chunk, episode_index=episode_index
        )
        return self.checked_file(path, "data_path")

    def video_file(self, episode_index: int, video_key: str) -> str:
        row = self.episode_row(episode_index)
        template = self.info.get("video_path")
        if not template:
            raise DatasetFormatError(f"{INFO_PATH} has video feature {video_key!r} but no video_path template")
        chunk = int(row[ep_video_column(video_key, "chunk_index")])
        path = template.format(
            video_key=video_key,
            chunk_index=chunk,
            file_index=int(row[ep_video_column(video_key, "file_index")]),
            episode_chunk=chunk,
            episode_index=episode_index,
        )
        return self.checked_file(path, "video_path")

    def checked_file(self, path: str, template: str) -> str:
        """`path`, made from info.json's `template`, once `contained_path` found it inside the dataset root (every
        reader, local, streamed or v2.1, opens a dataset's files through data_file / video_file)."""
        if path not in self._inside:
            contained_path(self.root, path, what=f"{INFO_PATH} {template}")
            self._inside.add(path)
        return path

    def files_for(self, episodes: list[int], with_videos: bool = True) -> list[str]:
        """Relative paths of the data (and video) files that hold the given episodes."""
        files = {self.data_file(ep) for ep in episodes}
        if with_videos:
            files |= {self.video_file(ep, key) for ep in episodes for key in self.video_keys}
        return sorted(files)


def load_episode_table(root: Path, total_episodes: int | None = None) -> pd.DataFrame:
    """meta/episodes as one table indexed by episode_index: the first `total_episodes` (info.json's count; rows
    after it belong to an append that was never committed: writer.py)."""
    paths = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not paths:
        raise DatasetFormatError(
            f"{root} has no {EPISODES_DIR}/chunk-XXX/file-XXX.parquet: the episode table of a v3.0 dataset is "
            "missing (an incomplete download or copy?)"
        )
    frames = []
    for path in paths:
        with reading_parquet(path):
            columns = [name for name in pq.read_schema(path).names if not name.startswith(EP_STATS_PREFIX)]
            frames.append(pq.read_table(path, columns=columns).to_pandas())
    table = pd.concat(frames, ignore_index=True)
    required = [EPISODE_INDEX, EP_LENGTH, EP_DATA_CHUNK, EP_DATA_FILE, EP_FROM_INDEX, EP_TO_INDEX]
    missing = [name for name in required if name not in table.columns]
    if missing:
        raise DatasetFormatError(f"the episode table in {root / EPISODES_DIR} lacks the columns {missing}")
    if total_episodes is not None:
        table = table[table[EPISODE_INDEX] < int(total_episodes)]
    table = table.sort_values(EPISODE_INDEX).set_index(EPISODE_INDEX, drop=False)
    if table.index.has_duplicates:
        raise DatasetFormatError(f"the episode table in {root / EPISODES_DIR} lists some episode twice")
    return table


def load_tasks(root: Path) -> dict[int, str]:
    """task_index -> task. LeRobot keeps the task strings as the pandas index of tasks.parquet (named "task", or
    unnamed in datasets converted from v2.1); a plain "task" column is read too."""
    path = root / TASKS_PATH
    if not path.is_file():
        raise DatasetFormatError(f"{root} has no {TASKS_PATH} (every v3.0 dataset lists its tasks there)")
    with reading_parquet(path):
        table = pd.read_parquet(path)
    if TASK_INDEX not in table.columns:
        raise DatasetFormatError(f"{path} has no {TASK_INDEX!r} column; columns: {list(table.columns)}")
    names = table[TASK] if TASK in table.columns else table.index
    return {int(index): str(name) for index, name in zip(table[TASK_INDEX], names, strict=True)}


def stats_from_episode_table(root: Path) -> dict[str, dict[str, np.ndarray]] | None:
    """Dataset stats from the per-episode stats/ columns, for datasets without meta/stats.json."""
    per_episode: list[dict[str, dict[str, np.ndarray]]] = []
    for path in sorted((root / EPISODES_DIR).glob("*/*.parquet")):
        with reading_parquet(path):
            columns = [name for name in pq.read_schema(path).names if name.startswith(EP_STATS_PREFIX)]
            if not columns:
                return None
            per_episode += [row_stats(row) for row in pq.read_table(path, columns=columns).to_pylist()]
    return aggregate_stats(per_episode) if per_episode else None


def row_stats(row: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The stats/{key}/{stat} columns of an episode-table row as {key: {stat: array}}."""
    stats: dict[str, dict[str, np.ndarray]] = {}
    for column, value in row.items():
        key, _, stat = column[len(EP_STATS_PREFIX) :].rpartition("/")
        stats.setdefault(key, {})[stat] = np.asarray(value)
    return stats
