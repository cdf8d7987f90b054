"""Fixtures of the dataset tests (helpers in dataset_helpers.py)."""

import pytest
from dataset_helpers import TinyDataset, write_tiny_dataset


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> TinyDataset:
    """3 episodes (12, 5 and 20 frames), 2 tasks, a 32x32 video: read-only, shared by the tests."""
    return write_tiny_dataset(tmp_path_factory.mktemp("tiny") / "tiny", [12, 5, 20])
