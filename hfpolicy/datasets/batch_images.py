"""Camera frames in batches: uint8 on their way to the model, float32 in [0, 1] on the device where it runs
(docs/streaming.md#uint8-frames-in-training-batches). Every path gives uint8 / 255 correctly rounded, as numpy does."""

import numpy as np
import torch

# x / 255 for every uint8 x, correctly rounded float32: a lookup table keeps other devices to these very values
# (PyTorch's CUDA kernel divides by a CPU scalar as a multiplication by its reciprocal, off by one bit for some x)
_FLOAT_OF_UINT8 = torch.from_numpy(np.arange(256, dtype=np.float32) / np.float32(255))


def uint8_to_float(frames: np.ndarray, out: torch.Tensor) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1] into `out` (numpy, not torch: single-threaded, so it does not stall when
    other processes hold the cores)."""
    np.divide(frames, np.float32(255), out=out.numpy())
    return out


def frames_to_float(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames (on any device) as float32 in [0, 1] on the same device, the values `uint8_to_float` gives."""
    if frames.dtype != torch.uint8:
        raise TypeError(f"frames_to_float takes uint8 frames, got {frames.dtype}")
    if frames.device.type == "cpu":
        return uint8_to_float(frames.numpy(), torch.empty(frames.shape))
    return by_table(frames)


def by_table(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1] by the lookup table, on their device (how a GPU converts them)."""
    return _FLOAT_OF_UINT8.to(frames.device, non_blocking=True)[frames.long()]
