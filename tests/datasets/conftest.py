"""Fixtures of the dataset tests (helpers in dataset_helpers.py)."""

import pytest
from dataset_helpers import TinyDataset, write_streamed_dataset, write_tiny_dataset

from hfpolicy.datasets import push_dataset_to_hub


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> TinyDataset:
    """3 episodes (12, 5 and 20 frames), 2 tasks, a 32x32 video: read-only, shared by the tests."""
    return write_tiny_dataset(tmp_path_factory.mktemp("tiny") / "tiny", [12, 5, 20])


@pytest.fixture(scope="session")
def streamed(hub_server, tmp_path_factory: pytest.TempPathFactory):
    """(local root, repo id, the written video frames, the written PNG camera frames; in dataset order) of a
    4-episode dataset on the test server (dataset_helpers.write_streamed_dataset): read-only, shared by the tests."""
    root = tmp_path_factory.mktemp("streamed") / "tiny"
    images, wrists = write_streamed_dataset(root, "user/stream-tiny")
    push_dataset_to_hub(root, "user/stream-tiny")
    return root, "user/stream-tiny", images, wrists
