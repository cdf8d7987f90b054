"""A dataset's info.json path templates name files inside the dataset, or the dataset is refused: the in-memory
reader, the v2.1 reader, the Hub download and the streaming reader all open files through DatasetMeta's checked
data_file / video_file (hfpolicy.io.paths.contained_path). Before that check, a template naming a file elsewhere
(`../x.mp4`, an absolute path) was read as if it were the dataset's own."""

import json
import shutil
from pathlib import Path

import pytest
from dataset_helpers import write_tiny_dataset
from huggingface_hub import HfApi

from hfpolicy.datasets import PolicyDataset, StreamingPolicyDataset, push_dataset_to_hub
from hfpolicy.io.paths import OutsideFolderError

V21_ROOT = Path(__file__).parent / "data" / "lerobot_v21_tiny"


def retemplate(root: Path, **templates: str) -> Path:
    """Rewrites info.json's path templates (data_path=..., video_path=...)."""
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    info.update(templates)
    path.write_text(json.dumps(info, indent=4))
    return root


@pytest.fixture
def outside_copy(tiny_dataset, tmp_path):
    """(a copy of the tiny dataset whose templates point at a sibling folder, that folder): the files there are the
    dataset's own, so a reader that follows the templates reads them without complaint."""
    root = tmp_path / "crafted"
    shutil.copytree(tiny_dataset.root, root)
    shutil.copytree(root / "data", tmp_path / "elsewhere" / "data")
    shutil.copytree(root / "videos", tmp_path / "elsewhere" / "videos")
    return root, tmp_path / "elsewhere"


def test_a_video_template_leading_out_is_refused(outside_copy):
    root, elsewhere = outside_copy
    retemplate(root, video_path="../elsewhere/videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
    dataset = PolicyDataset("user/crafted", root=root)
    with pytest.raises(OutsideFolderError, match="meta/info.json video_path names '../elsewhere/videos/"):
        dataset[0]


def test_a_data_template_naming_an_absolute_path_is_refused(outside_copy):
    root, elsewhere = outside_copy
    retemplate(root, data_path=str(elsewhere / "data" / "chunk-{chunk_index:03d}" / "file-{file_index:03d}.parquet"))
    with pytest.raises(OutsideFolderError, match="meta/info.json data_path"):
        PolicyDataset("user/crafted", root=root)


def test_a_linked_video_file_leading_out_is_refused(outside_copy):
    root, elsewhere = outside_copy
    video = next((root / "videos").rglob("*.mp4"))
    video.unlink()
    video.symlink_to(elsewhere / video.relative_to(root))
    with pytest.raises(OutsideFolderError, match="which resolves to"):
        PolicyDataset("user/crafted", root=root)[0]


def test_the_v21_reader_refuses_a_template_leading_out(tmp_path):
    root = tmp_path / "v21"
    shutil.copytree(V21_ROOT, root)
    shutil.copytree(root / "videos", tmp_path / "elsewhere")
    retemplate(root, video_path="../elsewhere/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    dataset = PolicyDataset("local/v21", root=root)
    with pytest.raises(OutsideFolderError, match="video_path"):
        dataset[0]


def test_hub_download_and_streaming_refuse_a_template_leading_out(hub_server, tmp_path):
    root = write_tiny_dataset(tmp_path / "crafted", [4, 3], repo_id="user/crafted-paths").root
    retemplate(root, video_path="../../../{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
    with pytest.raises(OutsideFolderError, match="video_path"):
        push_dataset_to_hub(root, "user/crafted-paths")  # hfpolicy's push refuses it before creating the repo
    # a crafted dataset from elsewhere: uploaded as it is
    api = HfApi()
    api.create_repo("user/crafted-paths", repo_type="dataset")
    api.upload_folder(folder_path=root, repo_id="user/crafted-paths", repo_type="dataset")
    with pytest.raises(OutsideFolderError, match="video_path"):
        PolicyDataset("user/crafted-paths")  # before any data file is downloaded
    with pytest.raises(OutsideFolderError, match="video_path"):
        StreamingPolicyDataset("user/crafted-paths")
