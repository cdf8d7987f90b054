"""`PackedBatch`: a batch gathered in a DataLoader worker travels to the main process as one shared-memory buffer of
its small tensors plus its uint8 frames, made float32 in [0, 1] on arrival unless a run wants them uint8
(docs/streaming.md#workers)."""

import math
from typing import Any

import numpy as np
import torch

from hfpolicy.datasets.batch_images import uint8_to_float

PACK_MAX_BYTES = 1 << 20  # tensors up to this size are packed; larger ones (images) travel as they are
_ALIGN = 64


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized tensor, in shared memory in a DataLoader worker (sending it then passes a handle, no copy)."""
    if torch.utils.data.get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(math.prod(shape))
    return torch.empty(0, dtype=dtype).new(storage).view(shape)


def _unpack(buffer: torch.Tensor, layout: list[tuple], rest: dict[str, Any], keys: list[str], to_float) -> dict:
    """The batch again: the packed tensors as views of `buffer` (layout: key, dtype, shape, byte offset), the
    `to_float` frames as float32."""
    packed = {}
    for key, dtype, shape, offset in layout:
        size = math.prod(shape) * dtype.itemsize
        packed[key] = buffer[offset : offset + size].view(dtype).view(shape)
    for key in to_float:
        rest[key] = uint8_to_float(rest[key].numpy(), torch.empty(rest[key].shape))
    return {key: packed[key] if key in packed else rest[key] for key in keys}


class PackedBatch(dict):
    """A batch dict that pickles (worker -> main process) as one buffer of its small tensors plus the rest; the
    uint8 tensors of `to_float` (the camera frames) arrive as float32 in [0, 1]."""

    def __init__(self, batch: dict[str, Any], to_float=()):
        super().__init__(batch)
        self.to_float = [key for key in to_float if key in batch]

    def __copy__(self) -> "PackedBatch":  # torch's default_convert copies mappings: keep the class (and packing)
        return PackedBatch(self, self.to_float)

    def __reduce__(self):
        small = {
            k: v
            for k, v in self.items()
            if isinstance(v, torch.Tensor) and v.nbytes <= PACK_MAX_BYTES and v.numel() and k not in self.to_float
        }
        layout, offset = [], 0
        for key, value in small.items():
            layout.append((key, value.dtype, tuple(value.shape), offset))
            offset += -(-value.nbytes // _ALIGN) * _ALIGN
        buffer = torch.empty(offset, dtype=torch.uint8)
        for value, (_, dtype, shape, start) in zip(small.values(), layout, strict=True):
            buffer[start : start + value.nbytes].view(dtype).view(shape).copy_(value)
        rest = {k: v for k, v in self.items() if k not in small}
        return _unpack, (buffer, layout, rest, list(self), self.to_float)


def batch_for_loader(get_batch, indices: np.ndarray, camera_keys, uint8_images: bool) -> dict[str, Any]:
    """The batch of `indices` as a DataLoader carries it: gathered by `get_batch(indices, uint8_images=...)`; in a
    worker, as a PackedBatch whose frames become float32 on arrival, or stay uint8 with `uint8_images`."""
    if torch.utils.data.get_worker_info() is None:
        return get_batch(indices, uint8_images=uint8_images)
    return PackedBatch(get_batch(indices, uint8_images=True), to_float=() if uint8_images else camera_keys)


def identity_collate(batch: dict[str, Any]) -> dict[str, Any]:
    """The `collate_fn` of a DataLoader that fetches whole batches (`batch_size=None`): torch's default walks every
    item for numpy arrays there are none of (docs/streaming.md#the-readers-small-costs)."""
    return batch
