"""Nested training state as `<name>.safetensors` + `<name>.json`, never pickle: dicts (str or int keys), lists, tuples,
tensors, numpy arrays and JSON scalars; anything else is refused when saving."""

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch

from hfpolicy.io.atomic import save_safetensors_atomically, write_json_atomically

_TENSOR, _ARRAY, _TUPLE, _DICT, _FLOAT = "__tensor__", "__ndarray__", "__tuple__", "__dict__", "__float__"


def save_tree(obj: Any, folder: str | Path, name: str) -> None:
    folder = Path(folder)
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(obj, tensors, name)
    save_safetensors_atomically(tensors, folder / f"{name}.safetensors")
    write_json_atomically(folder / f"{name}.json", structure, indent=None, allow_nan=False)


def load_tree(folder: str | Path, name: str, device: str | torch.device = "cpu") -> Any:
    """The object `save_tree` wrote, tensors on `device`."""
    folder = Path(folder)
    tensors = safetensors.torch.load_file(str(folder / f"{name}.safetensors"), device=str(device))
    structure = json.loads((folder / f"{name}.json").read_text())
    return _decode(structure, tensors)


def _encode(obj: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(obj, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = obj.detach().to("cpu").contiguous()
        return {_TENSOR: key}
    if isinstance(obj, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(
            np.ascontiguousarray(obj).astype(np.int64 if obj.dtype.kind in "iu" else obj.dtype)
        )
        return {_ARRAY: key, "dtype": obj.dtype.str}
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        value = float(obj)
        return value if math.isfinite(value) else {_FLOAT: repr(value)}
    if isinstance(obj, tuple):
        return {_TUPLE: [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        items = []
        for key, value in obj.items():
            if not isinstance(key, str | int):
                raise TypeError(
                    f"{where}: dict key {key!r} ({type(key).__name__}) cannot be saved; use str or int keys"
                )
            items.append([key, _encode(value, tensors, f"{where}[{key!r}]")])
        return {_DICT: items}
    raise TypeError(f"{where} is a {type(obj).__name__}, which cannot be saved as safetensors + JSON")


def _decode(data: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(data, list):
        return [_decode(v, tensors) for v in data]
    if not isinstance(data, dict):
        return data
    if _TENSOR in data:
        return tensors[data[_TENSOR]]
    if _ARRAY in data:
        return tensors[data[_ARRAY]].cpu().numpy().astype(np.dtype(data["dtype"]))
    if _FLOAT in data:
        return float(data[_FLOAT])
    if _TUPLE in data:
        return tuple(_decode(v, tensors) for v in data[_TUPLE])
    if _DICT in data:
        return {key: _decode(value, tensors) for key, value in data[_DICT]}
    raise ValueError(f"unrecognized entry {sorted(data)} in a saved state: it was not written by save_tree")
