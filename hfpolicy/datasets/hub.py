"""Datasets and the Hub: download only what a PolicyDataset needs, push a dataset with its dataset card."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, DatasetCard, DatasetCardData, HfApi, snapshot_download

from hfpolicy.datasets.format import CODEBASE_VERSION, DATA_FILES_GLOB, INFO_PATH, load_info
from hfpolicy.datasets.metadata import DatasetMeta

REPO_TYPE = "dataset"
CARD_FILE = "README.md"


class DatasetDownloadError(OSError):
    """A Hub dataset cannot be downloaded as a LeRobot dataset (an invalid repo id, a repo without meta/info.json).
    An OSError, as the download's other failures are."""


def download_meta(repo_id: str, revision: str | None = None) -> Path:
    """Downloads meta/ of a Hub dataset into the HF cache; returns its snapshot folder, which is named by the commit
    the download resolved (pass that as the revision of later downloads, so a push in between cannot mix two
    versions). An invalid repo id, or a repo without LeRobot's meta/info.json, raises DatasetDownloadError saying so.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

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
    """Downloads meta/ and then only the data (and video) files of `episodes` into the HF cache; returns the root.

    Both downloads use the commit the first one resolved, so a push in between cannot mix two versions. An invalid
    repo id, or a repo without LeRobot's meta/info.json, raises DatasetDownloadError saying so.
    """
    meta_root = download_meta(repo_id, revision)
    commit = meta_root.name  # snapshots/<commit sha>
    meta = DatasetMeta.load(meta_root, repo_id)  # checks the format version before any data is downloaded
    chosen = [int(e) for e in meta.episodes.index] if episodes is None else sorted({int(e) for e in episodes})
    chosen = [e for e in chosen if e in meta.episodes.index]  # PolicyDataset reports unknown episodes
    files = meta.files_for(chosen, with_videos=download_videos)
    root = snapshot_download(repo_id, repo_type=REPO_TYPE, revision=commit, allow_patterns=["meta/*", *files])
    return Path(root)


def make_dataset_card(
    info: dict[str, Any],
    repo_id: str,
    license: str | None = "apache-2.0",
    tags: Sequence[str] = (),
    description: str | None = None,
) -> DatasetCard:
    """A dataset card whose YAML makes the Hub list it under robotics and lets the viewer and
    `datasets.load_dataset(repo_id)` read the frames (configs -> data/*/*.parquet)."""
    card_data = DatasetCardData(
        license=license,
        task_categories=["robotics"],
        tags=list(dict.fromkeys(["LeRobot", "hfpolicy", *tags])),
        configs=[{"config_name": "default", "data_files": DATA_FILES_GLOB}],
    )
    rows = []
    for key, feature in info["features"].items():
        names = feature.get("names")
        shown = ", ".join(map(str, names)) if isinstance(names, list) else (json.dumps(names) if names else "")
        rows.append(f"| `{key}` | {feature['dtype']} | {list(feature['shape'])} | {shown} |")
    robot = f", robot type `{info['robot_type']}`" if info.get("robot_type") else ""
    body = [
        f"# {repo_id}",
        "",
        description or "A robot-learning dataset in the LeRobot v3.0 format.",
        "",
        f"{info.get('total_episodes', '?')} episodes, {info.get('total_frames', '?')} frames at {info['fps']} fps, "
        f"{info.get('total_tasks', '?')} task(s){robot}.",
        "",
        "## Features",
        "",
        "| key | dtype | shape | names |",
        "|---|---|---|---|",
        *rows,
        "",
        "## Use",
        "",
        "```python",
        "from hfpolicy.datasets import PolicyDataset",
        "",
        f'dataset = PolicyDataset("{repo_id}", delta_timestamps={{"action": [i / {info["fps"]} for i in range(16)]}})',
        "```",
        "",
        f'It loads in LeRobot as `LeRobotDataset("{repo_id}")` (codebase version {info["codebase_version"]}), and '
        f'its frames (without videos) with `datasets.load_dataset("{repo_id}")`.',
        "",
        "## Layout",
        "",
        f"[{INFO_PATH}]({INFO_PATH}):",
        "```json",
        json.dumps(info, indent=4),
        "```",
        "",
        "Written with hfpolicy in the layout of [LeRobot](https://github.com/huggingface/lerobot).",
    ]
    return DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body) + "\n")


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
    """Uploads a finished dataset root and its dataset card in one commit; returns the commit URL.

    With `tag_version` the commit is tagged with the codebase version ("v3.0"), which LeRobot's loader looks for.
    Hidden files (temporary files, caches) are not uploaded.
    """
    root = Path(root)
    info = load_info(root, repo_id)
    meta = DatasetMeta.load(root, repo_id)  # refuses a dataset whose meta is incomplete
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    files = [p for p in files if p.relative_to(root).as_posix() != CARD_FILE]
    card = make_dataset_card(info, repo_id, license=license, tags=tags, description=description)
    operations = [
        CommitOperationAdd(path_in_repo=p.relative_to(root).as_posix(), path_or_fileobj=str(p)) for p in files
    ]
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
        or f"Upload dataset: {meta.total_episodes} episodes, {meta.total_frames} frames ({CODEBASE_VERSION})",
    )
    if tag_version:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        if any(tag.name == CODEBASE_VERSION for tag in refs.tags):
            api.delete_tag(repo_id, tag=CODEBASE_VERSION, repo_type=REPO_TYPE)
        api.create_tag(repo_id, tag=CODEBASE_VERSION, revision=commit.oid, repo_type=REPO_TYPE)
    return commit.commit_url
