"""The run's set-up pieces that every step uses: batches moved to the device, frames made float there; and the
run's first line."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hfpolicy.datasets.batch_images import uint8_to_float
from hfpolicy.training.config import DatasetConfig, TrainConfig
from hfpolicy.training.setup import announce_training, move_to_device


def test_move_to_device_makes_the_uint8_frames_of_the_image_keys_float():
    frames = torch.randint(0, 256, (4, 2, 3, 8, 8), dtype=torch.uint8)
    other = torch.randint(0, 256, (4, 3), dtype=torch.uint8)  # a uint8 feature that is not a camera stays uint8
    batch = {"observation.image": frames, "mask": other, "action": torch.ones(4, 2), "task": ["t"] * 4}
    moved = move_to_device(batch, torch.device("cpu"), image_keys=("observation.image", "observation.missing"))
    assert torch.equal(moved["observation.image"], uint8_to_float(frames.numpy(), torch.empty(frames.shape)))
    assert moved["mask"].dtype == torch.uint8 and torch.equal(moved["mask"], other)
    assert moved["task"] == ["t"] * 4 and torch.equal(moved["action"], batch["action"])
    assert list(moved) == list(batch)
    unchanged = move_to_device(
        {"observation.image": moved["observation.image"]}, torch.device("cpu"), ("observation.image",)
    )
    assert torch.equal(unchanged["observation.image"], moved["observation.image"])  # float frames stay as they are


@pytest.mark.parametrize("streaming", [False, True])
def test_the_first_line_says_where_the_data_comes_from_in_words(streaming, capsys):
    """A streamed dataset says that it streams; counts are singular or plural as they should be."""
    cfg = TrainConfig(dataset=DatasetConfig(repo_id="user/data", streaming=streaming))
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    training = SimpleNamespace(
        cfg=cfg, accelerator=accelerator, start_step=0, policy=torch.nn.Linear(2, 2), threads=1, samples_per_step=8,
        run=SimpleNamespace(root=Path("outputs/run")),
    )  # fmt: skip
    data = SimpleNamespace(name="user/data", dataset=SimpleNamespace(num_episodes=1), sampler=range(10))
    announce_training(training, data)
    line = capsys.readouterr().out.splitlines()[0]
    source = "user/data, streamed from the Hub as training reads it" if streaming else "user/data"
    assert f"; {source}: 1 episode, 10 samples per epoch; " in line, line
