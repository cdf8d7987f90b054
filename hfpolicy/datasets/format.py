"""The LeRobot dataset format, codebase version v3.0: file layout (docs/datasets.md#the-on-disk-layout), path
templates, and the errors for bad datasets."""

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from hfpolicy.constants import EPISODE_INDEX, FRAME_INDEX, INDEX, TASK_INDEX, TIMESTAMP
from hfpolicy.io.paths import contained_path

CODEBASE_VERSION = "v3.0"

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE_PATTERN + ".parquet"
DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
DATASET_TOP_LEVEL = {"meta", "data", "videos", "images", "README.md", ".gitattributes"}  # what a dataset folder holds
DATA_FILES_GLOB = "data/*/*.parquet"  # what the dataset card's `configs` point at (datasets.load_dataset, Hub viewer)

DEFAULT_CHUNKS_SIZE = 1000  # files per chunk folder
DEFAULT_DATA_FILE_SIZE_MB = 100  # a data parquet file is closed once it reaches this size
DEFAULT_VIDEO_FILE_SIZE_MB = 500  # a video file is closed once it reaches this size

# Columns of every frame, added by the writer (the caller never gives them).
BOOKKEEPING_FEATURES: dict[str, dict[str, Any]] = {
    TIMESTAMP: {"dtype": "float32", "shape": [1], "names": None},
    FRAME_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    EPISODE_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    INDEX: {"dtype": "int64", "shape": [1], "names": None},
    TASK_INDEX: {"dtype": "int64", "shape": [1], "names": None},
}

# Columns of meta/episodes/*.parquet.
EP_TASKS = "tasks"
EP_LENGTH = "length"
EP_DATA_CHUNK = "data/chunk_index"
EP_DATA_FILE = "data/file_index"
EP_FROM_INDEX = "dataset_from_index"
EP_TO_INDEX = "dataset_to_index"
EP_META_CHUNK = "meta/episodes/chunk_index"
EP_META_FILE = "meta/episodes/file_index"
EP_STATS_PREFIX = "stats/"


def ep_video_column(video_key: str, field: str) -> str:
    """Episode-table column of a video key: field is chunk_index, file_index, from_timestamp or to_timestamp."""
    return f"videos/{video_key}/{field}"


def ep_stats_column(key: str, stat: str) -> str:
    return f"{EP_STATS_PREFIX}{key}/{stat}"


class DatasetFormatError(ValueError):
    """A dataset on disk or on the Hub is not a valid LeRobot v3.0 dataset (the message says what and how to fix)."""


class UnsupportedVersionError(DatasetFormatError):
    """The dataset's codebase_version is neither v3.x nor v2.1."""


class TimestampError(DatasetFormatError):
    """Frame timestamps do not advance by 1/fps inside an episode, or a video lacks a frame the data refers to."""


@contextmanager
def reading_parquet(path: str | Path) -> Iterator[None]:
    """Turns pyarrow's error for a damaged parquet file (truncated, not parquet at all) into a DatasetFormatError
    that names the file."""
    try:
        yield
    except pa.ArrowInvalid as e:
        raise DatasetFormatError(
            f"{path} is not a readable parquet file ({str(e).splitlines()[0]}): an incomplete download or copy? "
            "Download the dataset again (or write it again)"
        ) from None


def next_chunk_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) indices of the file that follows (chunk_index, file_index)."""
    if file_index + 1 >= chunks_size:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def check_codebase_version(version: str | None, where: str, repo_id: str | None = None) -> None:
    """Raises UnsupportedVersionError, naming the version and the way to convert, unless `version` is v3.x or v2.1."""
    if version is None:
        raise UnsupportedVersionError(
            f"{where} has no codebase_version: it predates LeRobot's v2 format, which hfpolicy cannot read. "
            "Convert it with LeRobot's conversion scripts to v3.0 first."
        )
    parts = str(version).strip().lstrip("vV").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise DatasetFormatError(f"codebase_version {version!r} in {INFO_PATH} is not a version like 'v3.0'") from None
    if major == 3 or (major, minor) == (2, 1):  # v2.1 is read through legacy_v21.py
        return
    name = repo_id or "<repo_id>"
    if major < 3:
        raise UnsupportedVersionError(
            f"{where} is a LeRobot {version} dataset; hfpolicy reads the {CODEBASE_VERSION} and v2.1 formats. "
            f"Convert it to v2.1 with LeRobot 0.3.x (`pip install lerobot==0.3.3`, then `python -m "
            f"lerobot.datasets.v21.convert_dataset_v20_to_v21 --repo-id={name}`); hfpolicy then reads it, and "
            f"`hfpolicy convert lerobot-v2.1 {name} --output_dir=DIR` writes it as {CODEBASE_VERSION}. Or, if the "
            "Hub repo already has a v3.0 revision, load it with revision='v3.0'."
        )
    raise UnsupportedVersionError(
        f"{where} is a LeRobot {version} dataset, newer than the {CODEBASE_VERSION} format this hfpolicy reads: "
        "upgrade hfpolicy (`pip install -U hfpolicy`), or load an older revision of the dataset."
    )


REQUIRED_INFO_FIELDS = ("codebase_version", "fps", "features", "data_path")


def load_info(root: str | Path, repo_id: str | None = None) -> dict[str, Any]:
    """Reads and checks meta/info.json of a local dataset root; feature shapes become tuples."""
    root = Path(root)
    path = contained_path(root, INFO_PATH, what=INFO_PATH)
    if not root.is_dir():
        raise DatasetFormatError(f"dataset root {root} does not exist (or is not a directory)")
    if not path.is_file():
        nested = next(root.glob(f"*/{INFO_PATH}"), None)
        hint = f" (its subfolder {nested.parents[1]} is one: pass that folder)" if nested is not None else ""
        raise DatasetFormatError(
            f"{root} has no {INFO_PATH}, so it is not a LeRobot dataset root{hint}. Pass the folder that contains "
            "meta/, data/ and videos/, or pass root=None to download the dataset by repo id from the Hub; to make a "
            "dataset from other data use hfpolicy.datasets.DatasetWriter or `hfpolicy convert`."
        )
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DatasetFormatError(f"{path} is not valid JSON: {e}") from None
    check_codebase_version(info.get("codebase_version"), f"dataset {repo_id or root}", repo_id)
    missing = [name for name in REQUIRED_INFO_FIELDS if name not in info]
    if missing:
        raise DatasetFormatError(f"{path} lacks the fields {missing} that every {CODEBASE_VERSION} info.json has")
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) or fps <= 0:
        raise DatasetFormatError(f"{path}: fps must be a positive number of frames per second, got {json.dumps(fps)}")
    if not isinstance(info["features"], dict):
        raise DatasetFormatError(
            f"{path}: features must be an object mapping each feature name to its dtype and shape, got a "
            f"{type(info['features']).__name__}"
        )
    for key, feature in info["features"].items():
        if not isinstance(feature, dict):
            raise DatasetFormatError(f"feature {key!r} in {path} must be an object with 'dtype' and 'shape'")
        if not isinstance(feature.get("shape", []), list | tuple):
            raise DatasetFormatError(
                f"feature {key!r} in {path}: shape must be a list, got {json.dumps(feature['shape'])}"
            )
        if "dtype" not in feature or "shape" not in feature:
            raise DatasetFormatError(f"feature {key!r} in {path} needs 'dtype' and 'shape', got {sorted(feature)}")
        feature["shape"] = tuple(feature["shape"])
    return info
