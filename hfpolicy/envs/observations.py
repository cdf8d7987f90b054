"""From a vector env's observations to a policy batch."""

from collections.abc import Collection, Mapping

import numpy as np
import torch
from torch import Tensor

from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGE, OBS_IMAGES_PREFIX, OBS_PREFIX, OBS_STATE

# gymnasium observation key -> policy feature key (other keys become f"observation.{key}")
OBSERVATION_KEYS = {"pixels": OBS_IMAGE, "agent_pos": OBS_STATE, "environment_state": OBS_ENV_STATE}


def observations_to_batch(
    observation: Mapping[str, np.ndarray] | np.ndarray,
    device: torch.device | str = "cpu",
    keys: Collection[str] | None = None,
) -> dict[str, Tensor]:
    """A batch of env observations (leading dim = number of envs) as policy inputs on `device`, in new memory (never
    views of the env's buffers). `pixels` (B, H, W, C) uint8, a dict of them per camera, or a bare array, become
    `observation.image` or `observation.images.<camera>` (B, C, H, W) float32 in [0, 1]; other keys are named as
    OBSERVATION_KEYS says, float32. `keys` (e.g. the policy's input features) limits the batch to those entries."""
    if isinstance(observation, np.ndarray):
        observation = {"pixels": observation}
    batch = {}
    for key, value in observation.items():
        if key == "pixels" and isinstance(value, Mapping):
            for camera, pixels in value.items():
                name = f"{OBS_IMAGES_PREFIX}{camera}"
                if keys is None or name in keys:
                    batch[name] = _pixels_to_tensor(pixels, device)
            continue
        name = OBSERVATION_KEYS.get(key, f"{OBS_PREFIX}{key}")
        if keys is not None and name not in keys:
            continue
        if key == "pixels":
            batch[name] = _pixels_to_tensor(value, device)
        else:
            batch[name] = torch.from_numpy(np.asarray(value)).to(device=device, dtype=torch.float32, copy=True)
    return batch


def _pixels_to_tensor(pixels: np.ndarray, device: torch.device | str) -> Tensor:
    if pixels.ndim != 4 or pixels.dtype != np.uint8:
        raise ValueError(
            f"pixel observations must be (n_envs, height, width, channels) uint8, got {pixels.shape} {pixels.dtype}"
        )
    if torch.device(device).type == "cpu":
        # numpy, single-threaded: torch's intra-op threads make this small op 10x slower on a busy machine.
        scaled = np.ascontiguousarray(pixels.transpose(0, 3, 1, 2), dtype=np.float32)
        scaled /= 255
        return torch.from_numpy(scaled)
    # Move uint8 (4x smaller than float) to the accelerator, then lay out channels first and scale there.
    images = torch.from_numpy(pixels).to(device).permute(0, 3, 1, 2).contiguous()
    return images.to(torch.float32).div_(255)
