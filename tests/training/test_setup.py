"""The run's set-up pieces that every step uses: batches moved to the device, frames made float there."""

import torch

from hfpolicy.datasets.batch_images import uint8_to_float
from hfpolicy.training.setup import move_to_device


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
