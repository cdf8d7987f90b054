"""Datasets and the Hub: download only what a PolicyDataset needs, push a dataset with its dataset card."""

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, DatasetCard, DatasetCardData, HfApi, snapshot_download
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from hfpolicy.datasets.format import (
    CODEBASE_VERSION,
    DATA_FILES_GLOB,
    DATASET_TOP_LEVEL,
    INFO_PATH,
    DatasetFormatError,
)
from hfpolicy.datasets.metadata import DatasetMeta

REPO_TYPE = "dataset"
CARD_FILE = "README.md"


class DatasetDownloadError(OSError):
    """A Hub dataset cannot be downloaded as a LeRobot dataset (an invalid repo id, a repo without meta/info.json)."""


def download_meta(repo_id: str, revision: str | None = None) -> Path:
    """Downloads meta/ of a Hub dataset into the HF cache; returns its snapshot folder, named by the commit it
    resolved (the revision of later downloads, so a push in between cannot mix two versions)."""
    try:
        validate_repo_id(repo_id)  # before any cache lookup: offline, a bad id would read as "not in the cache"
    except HFValidationError as e:
        raise DatasetDownloadError(f"{repo_id!r} is not a valid Hub dataset repo id (user/name): {e}") from None
    meta_root = Path(snapshot_download(repo_id, repo_type=REPO_TYPE, revision=revision, allow_patterns=["meta/*"]))
    if not (meta_root / INFO_PATH).is_file():
        raise DatasetDownloadError(
            f"the Hub dataset {repo_id!r} has no {INFO_PATH}: it is not a LeRobot v3.0 dataset (convert it with "
            "LeRobot's converter, or `hfpolicy convert`)"
        )
    return meta_root


def download_dataset(
    repo_id: str,
    revision: str | None = None,
    episodes: Sequence[int] | None = None,
    download_videos: bool = True,
) -> Path:
    """Downloads meta/ and then only the data (and video) files of `episodes`, of one commit, into the HF cache;
    returns the root."""
    meta_root = download_meta(repo_id, revision)
    commit = meta_root.name  # snapshots/<commit sha>
    meta = DatasetMeta.load(meta_root, repo_id)  # checks the format version before any data is downloaded
    chosen = [int(e) for e in meta.episodes.index] if episodes is None else sorted({int(e) for e in episodes})
    chosen = [e for e in chosen if e in meta.episodes.index]  # PolicyDataset reports unknown episodes
    files = meta.files_for(chosen, with_videos=download_videos)
    return Path(snapshot_download(repo_id, repo_type=REPO_TYPE, revision=commit, allow_patterns=["meta/*", *files]))


def markdown_text(value: Any) -> str:
    """`value` as plain text inside Markdown: HTML escaped, Markdown's punctuation backslash-escaped, line breaks as
    spaces, so that no string of a dataset becomes a tag, a link or a table cell."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return re.sub(r"([\\`*_{}\[\]()#+!|~>-])", r"\\\1", text)


def markdown_code(value: Any) -> str:
    """`value` as an inline code span (its backticks fenced by a longer run, its `|` escaped for a table cell)."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, language: str = "") -> list[str]:
    """A fenced code block that no line of `text` can close (its fence is longer than any backtick run in it)."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return [f"{fence}{language}", text, fence]


def feature_rows(features: dict[str, Any]) -> list[str]:
    """The card's table rows of the features (key, dtype, shape, names), escaped."""
    rows = []
    for key, feature in features.items():
        names = feature.get("names")
        shown = ", ".join(map(str, names)) if isinstance(names, list) else (json.dumps(names) if names else "")
        rows.append(
            f"| {markdown_code(key)} | {markdown_text(feature['dtype'])} | {markdown_text(list(feature['shape']))} "
            f"| {markdown_text(shown)} |"
        )
    return rows


def make_dataset_card(
    info: dict[str, Any],
    repo_id: str,
    license: str | None = "apache-2.0",
    tags: Sequence[str] = (),
    description: str | None = None,
) -> DatasetCard:
    """A dataset card listed under robotics whose configs let `datasets.load_dataset(repo_id)` read the frames; what
    comes from the dataset is escaped (it reads as text, never as Markdown or HTML)."""
    card_data = DatasetCardData(
        license=license,
        task_categories=["robotics"],
        tags=list(dict.fromkeys(["LeRobot", "hfpolicy", *tags])),
        configs=[{"config_name": "default", "data_files": DATA_FILES_GLOB}],
    )
    version = str(info.get("codebase_version", CODEBASE_VERSION))
    robot = f", robot type {markdown_code(info['robot_type'])}" if info.get("robot_type") else ""
    counts = [markdown_text(info.get(key, "?")) for key in ("total_episodes", "total_frames", "total_tasks")]
    fps = markdown_text(info["fps"])
    body = [
        f"# {repo_id}",
        "",
        description or f"A robot-learning dataset in the LeRobot {markdown_text(version)} format.",
        "",
        f"{counts[0]} episodes, {counts[1]} frames at {fps} fps, {counts[2]} task(s){robot}.",
        "",
        "## Features",
        "",
        "| key | dtype | shape | names |",
        "|---|---|---|---|",
        *feature_rows(info["features"]),
        "",
        "## Use",
        "",
        "```python",
        "from hfpolicy.datasets import PolicyDataset",
        "",
        f'dataset = PolicyDataset("{repo_id}", delta_timestamps={{"action": [i / {float(info["fps"])} for i in range(16)]}})',
        "```",
        "",
        f'It loads in LeRobot as `LeRobotDataset("{repo_id}")` (codebase version {markdown_text(version)}), and '
        f'its frames (without videos) with `datasets.load_dataset("{repo_id}")`; `hfpolicy view {repo_id}` '
        "draws its episodes.",
        "",
        "## Layout",
        "",
        f"[{INFO_PATH}]({INFO_PATH}):",
        *code_block(json.dumps(info, indent=4), "json"),
        "",
        "Written with hfpolicy in the layout of [LeRobot](https://github.com/huggingface/lerobot).",
    ]
    return DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body) + "\n")


def dataset_files(root: Path) -> list[Path]:
    """The files of a dataset folder (under meta/, data/, videos/, images/; README.md), hidden ones left out."""
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file()
        and path.relative_to(root).parts[0] in DATASET_TOP_LEVEL
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def push_dataset_to_hub(
    root: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    license: str | None = "apache-2.0",
    tags: Sequence[str] = (),
    description: str | None = None,
    branch: str | None = None,
    tag_version: bool = True,
    commit_message: str | None = None,
) -> str:
    """Uploads a finished dataset root (LeRobot v3.0 or v2.1) and its card in one commit; returns the commit URL. The
    card is the folder's README.md if it has one (`license`, `tags`, `description` then unused), else
    `make_dataset_card`'s; `tag_version` tags the commit with the codebase version, which LeRobot's loader looks for.
    An incomplete dataset raises DatasetFormatError before anything is created on the Hub."""
    root = Path(root)
    meta = DatasetMeta.load(root, repo_id)  # refuses a dataset whose meta is incomplete
    version = meta.codebase_version
    missing = [path for path in meta.files_for([int(e) for e in meta.episodes.index]) if not (root / path).is_file()]
    if missing:
        raise DatasetFormatError(
            f"{root} lacks {len(missing)} file(s) that its meta/ names ({', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''}): an incomplete copy or download; push the complete dataset"
        )
    operations = [
        CommitOperationAdd(path_in_repo=path.relative_to(root).as_posix(), path_or_fileobj=str(path))
        for path in dataset_files(root)
    ]
    if not (root / CARD_FILE).is_file():
        card = make_dataset_card(meta.info, repo_id, license=license, tags=tags, description=description)
        operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=str(card).encode()))

    api = HfApi()
    api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
    if branch is not None:
        api.create_branch(repo_id, repo_type=REPO_TYPE, branch=branch, exist_ok=True)
    commit = api.create_commit(
        repo_id,
        operations=operations,
        repo_type=REPO_TYPE,
        revision=branch,
        commit_message=commit_message
        or f"Upload dataset: {meta.total_episodes} episodes, {meta.total_frames} frames ({version})",
    )
    if tag_version:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        if any(tag.name == version for tag in refs.tags):
            api.delete_tag(repo_id, tag=version, repo_type=REPO_TYPE)
        api.create_tag(repo_id, tag=version, revision=commit.oid, repo_type=REPO_TYPE)
    return commit.commit_url
