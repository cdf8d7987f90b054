"""Fixtures of the Diffusion Policy tests."""

from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tests' networks are small: on a 2-core machine shared with other processes, two intra-op threads make
    each small op wait for a descheduled thread (5-10x slower); one thread is faster and just as exact."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def pusht_dataset_root(pusht_zarr_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first two episodes of the real PushT zarr (279 frames), converted with hfpolicy's converter, with
    observation.environment_state for the state-only variant."""
    from hfpolicy.datasets import convert_pusht_zarr

    root = tmp_path_factory.mktemp("pusht") / "pusht"
    return convert_pusht_zarr(pusht_zarr_path, root, episodes=[0, 1], environment_state=True, progress=False)
