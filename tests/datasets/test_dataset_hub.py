"""Push a dataset to the Hub-protocol test server, then load it by repo id (hfpolicy and 🤗 datasets)."""

from pathlib import Path

import datasets
import numpy as np
import torch
from dataset_helpers import write_tiny_dataset
from huggingface_hub import DatasetCard, HfApi

from hfpolicy.datasets import PolicyDataset, push_dataset_to_hub


def test_push_then_load_by_repo_id(hub_server, tiny_dataset):
    url = push_dataset_to_hub(tiny_dataset.root, "user/tiny-pushed", tags=["test"], license="mit")
    assert "user/tiny-pushed" in url
    api = HfApi()
    files = set(api.list_repo_files("user/tiny-pushed", repo_type="dataset"))
    assert {
        "README.md",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        "videos/observation.image/chunk-000/file-000.mp4",
    } <= files
    assert "v3.0" in [tag.name for tag in api.list_repo_refs("user/tiny-pushed", repo_type="dataset").tags]

    card = DatasetCard.load("user/tiny-pushed")
    assert card.data.license == "mit" and card.data.task_categories == ["robotics"]
    assert {"LeRobot", "hfpolicy", "test"} <= set(card.data.tags)
    assert card.data.configs == [{"config_name": "default", "data_files": "data/*/*.parquet"}]

    remote = PolicyDataset("user/tiny-pushed", delta_timestamps={"action": [0.0, 0.1]})
    local = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"action": [0.0, 0.1]})
    assert remote.num_frames == 37 and remote.root != local.root
    a, b = remote.get_batch(range(37)), local.get_batch(range(37))
    for key in ("action", "action_is_pad", "observation.state", "observation.image", "index"):
        assert torch.equal(a[key], b[key]), key

    rows = datasets.load_dataset("user/tiny-pushed", split="train")
    assert rows.num_rows == 37
    assert {"observation.state", "action", "next.reward", "timestamp", "episode_index", "index"} <= set(
        rows.column_names
    )
    np.testing.assert_array_equal(np.asarray(rows["action"], dtype=np.float32), np.stack(tiny_dataset.actions))


def test_only_the_files_of_the_chosen_episodes_are_downloaded(hub_server, tmp_path):
    # One data file and one video file per episode, so choosing episodes chooses files.
    write_tiny_dataset(tmp_path / "split", [4, 6, 5], data_files_size_in_mb=1e-4, video_files_size_in_mb=1e-4)
    push_dataset_to_hub(tmp_path / "split", "user/tiny-split")
    ds = PolicyDataset("user/tiny-split", episodes=[1])
    assert ds.num_frames == 6 and ds.get_batch([0])["index"].tolist() == [4]
    assert ds[5]["observation.image"].shape == (3, 32, 32)
    downloaded = {p.relative_to(ds.root).as_posix() for p in Path(ds.root).rglob("*") if p.is_file()}
    assert {p for p in downloaded if not p.startswith("meta/")} == {
        "data/chunk-000/file-001.parquet",
        "videos/observation.image/chunk-000/file-001.mp4",
    }
