"""uint8 frames in a run's batches: the dataset sends them as uint8 (0 and 2 workers, one dataset or a mixture),
and the conversion where the model runs gives the very float32 values the float batches have."""

import numpy as np
import pytest
import torch

from hfpolicy.datasets import EpisodeAwareSampler, PolicyDataset
from hfpolicy.datasets.batch_images import by_table, frames_to_float, uint8_to_float
from hfpolicy.datasets.mixture import MixtureDataset

DELTAS = {"observation.image": [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
IMAGE = "observation.image"


def test_every_path_gives_the_correctly_rounded_division():
    values = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    exact = uint8_to_float(values.numpy(), torch.empty(values.shape))
    assert torch.equal(
        exact.double(), torch.from_numpy(np.arange(256) / np.float32(255)).float().double().view_as(exact)
    )
    assert torch.equal(frames_to_float(values), exact) and torch.equal(by_table(values), exact)
    # why the table: a multiplication by the reciprocal (how a device may divide by a scalar) is off in the last bit
    assert not torch.equal(values.float() * (1 / torch.tensor(255.0)), exact)
    with pytest.raises(TypeError, match="uint8"):
        frames_to_float(exact)


def batches(dataset, workers: int) -> list[dict]:
    sampler = torch.utils.data.BatchSampler(EpisodeAwareSampler(dataset, seed=2), 8, drop_last=False)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=workers)
    return list(loader)


@pytest.mark.parametrize("workers", [0, 2])
def test_uint8_batches_hold_the_frames_of_the_float_batches(tiny_dataset, workers):
    plain = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=DELTAS)
    as_uint8 = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=DELTAS)
    as_uint8.uint8_images = True
    expected, got = batches(plain, 0), batches(as_uint8, workers)
    assert len(got) == len(expected) == 5
    for want, batch in zip(expected, got, strict=True):
        assert batch[IMAGE].dtype == torch.uint8 and want[IMAGE].dtype == torch.float32
        assert torch.equal(frames_to_float(batch[IMAGE]), want[IMAGE])
        assert list(batch) == list(want)
        for key in ("action", "action_is_pad", "observation.state", "index"):
            assert torch.equal(batch[key], want[key]), key


def test_a_mixture_sends_uint8_frames_too(tiny_dataset):
    parts = [PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=DELTAS) for _ in range(2)]
    mixture = MixtureDataset(parts, names=["a", "b"])
    positions = [0, 40, 3, 50]
    want = mixture[positions]
    mixture.uint8_images = True
    got = mixture[positions]
    assert got[IMAGE].dtype == torch.uint8 and torch.equal(frames_to_float(got[IMAGE]), want[IMAGE])
    assert torch.equal(got["dataset_index"], torch.tensor([0, 1, 0, 1]))
