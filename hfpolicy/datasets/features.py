"""Features as info.json describes them ({"dtype", "shape", "names", ...}), and what policies make of them."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from hfpolicy.constants import ACTION, OBS_PREFIX
from hfpolicy.datasets.format import DatasetFormatError
from hfpolicy.features import FeatureType, PolicyFeature

VIDEO = "video"  # frames in mp4 files under videos/
IMAGE = "image"  # frames as encoded image bytes inside the data parquet (datasets.Image)
STRING = "string"
VISUAL_DTYPES = (VIDEO, IMAGE)
CHANNEL_NAMES = ("channel", "channels", "c", "rgb")

_INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC_DTYPES = {name: np.dtype(name) for name in ("bool", *_INTEGER_DTYPES, "float16", "float32", "float64")}


def is_visual(feature: Mapping[str, Any]) -> bool:
    return feature["dtype"] in VISUAL_DTYPES


def is_numeric(feature: Mapping[str, Any]) -> bool:
    return feature["dtype"] in NUMERIC_DTYPES


def numpy_dtype(key: str, feature: Mapping[str, Any]) -> np.dtype:
    if feature["dtype"] not in NUMERIC_DTYPES:
        raise DatasetFormatError(
            f"feature {key!r} has dtype {feature['dtype']!r}; numeric dtypes are {sorted(NUMERIC_DTYPES)}, "
            f"visual ones {list(VISUAL_DTYPES)}, and {STRING!r}"
        )
    return NUMERIC_DTYPES[feature["dtype"]]


def is_scalar(feature: Mapping[str, Any]) -> bool:
    """Shape (1,) features are stored as plain parquet values and come out of the dataset as 0-d tensors."""
    return tuple(feature["shape"]) in ((1,), ())


def image_chw(key: str, feature: Mapping[str, Any]) -> tuple[int, int, int]:
    """(C, H, W) of an image/video feature, declared (H, W, C) as LeRobot writes it or (C, H, W) (told by the names,
    else by the short axis)."""
    shape = tuple(int(n) for n in feature["shape"])
    if len(shape) != 3:
        raise DatasetFormatError(f"visual feature {key!r} must have a 3-dim shape, got {shape}")
    names = feature.get("names")
    if isinstance(names, (list, tuple)) and len(names) == 3 and all(isinstance(n, str) for n in names):
        lowered = [n.lower() for n in names]
        if lowered[0] in CHANNEL_NAMES:
            return shape
        if lowered[2] in CHANNEL_NAMES:
            return (shape[2], shape[0], shape[1])
    # No usable names: the channel axis is the short one; HWC when both ends could be (LeRobot's default).
    if shape[2] in (1, 3, 4):
        return (shape[2], shape[0], shape[1])
    if shape[0] in (1, 3, 4):
        return shape
    raise DatasetFormatError(f"cannot tell the channel axis of visual feature {key!r} with shape {shape}")


def dataset_to_policy_features(
    features: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, PolicyFeature], dict[str, PolicyFeature]]:
    """(inputs, outputs) of a policy: images and videos as IMAGE inputs (C, H, W), other `observation.*` float
    vectors as STATE inputs (not point clouds or other multi-dim arrays), `action` as the ACTION output."""
    inputs: dict[str, PolicyFeature] = {}
    outputs: dict[str, PolicyFeature] = {}
    for key, feature in features.items():
        if is_visual(feature):
            inputs[key] = PolicyFeature(type=FeatureType.IMAGE, shape=image_chw(key, feature))
        elif key == ACTION and is_numeric(feature):
            outputs[key] = PolicyFeature(type=FeatureType.ACTION, shape=tuple(feature["shape"]))
        elif key.startswith(OBS_PREFIX) and feature["dtype"].startswith("float") and len(feature["shape"]) == 1:
            inputs[key] = PolicyFeature(type=FeatureType.STATE, shape=tuple(feature["shape"]))
    return inputs, outputs


def arrow_type(key: str, feature: Mapping[str, Any]) -> pa.DataType:
    """The parquet column type LeRobot uses for a non-video feature: values for shape (1,), (nested) fixed-size lists
    for arrays, a {bytes, path} struct for images."""
    if feature["dtype"] == IMAGE:
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if feature["dtype"] == STRING:
        return pa.string()
    arrow = pa.from_numpy_dtype(numpy_dtype(key, feature))
    if is_scalar(feature):
        return arrow
    for n in reversed(tuple(feature["shape"])):
        arrow = pa.list_(pa.field("item", arrow), int(n))  # the child name 🤗 datasets writes
    return arrow


def arrow_column(key: str, feature: Mapping[str, Any], values: np.ndarray | list) -> pa.Array:
    """One column of a data parquet from an array shaped (N, *shape) (or (N,) for scalars)."""
    if feature["dtype"] in (IMAGE, STRING) or is_scalar(feature):
        if not isinstance(values, list) and is_scalar(feature):
            values = np.asarray(values).reshape(-1)
        return pa.array(values, type=arrow_type(key, feature))
    values = np.ascontiguousarray(values, dtype=numpy_dtype(key, feature))
    array: pa.Array = pa.array(values.reshape(-1), type=pa.from_numpy_dtype(values.dtype))
    for n in reversed(tuple(feature["shape"])):
        array = pa.FixedSizeListArray.from_arrays(array, type=pa.list_(pa.field("item", array.type), int(n)))
    return array


def column_to_numpy(key: str, feature: Mapping[str, Any], column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A parquet column back to a numpy array shaped (N, *shape), or (N,) for shape-(1,) features."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    dtype = numpy_dtype(key, feature)
    n = len(column)
    if _is_list(column.type):
        flat = column
        while _is_list(flat.type):
            flat = flat.flatten()
        values = flat.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        shape = tuple(int(s) for s in feature["shape"])
        if values.size != n * int(np.prod(shape)):
            raise DatasetFormatError(
                f"column {key!r} holds {values.size} values for {n} frames, but info.json says shape {shape}"
            )
        array = values.reshape((n, *shape))
        return array.reshape(n) if is_scalar(feature) else array
    values = column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    if not is_scalar(feature):
        raise DatasetFormatError(f"column {key!r} holds plain values but info.json says shape {feature['shape']}")
    return values


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)


def with_image_metadata(schema: pa.Schema, image_keys: list[str]) -> pa.Schema:
    """The schema with 🤗 datasets' metadata marking the image columns, so load_dataset decodes them as images."""
    import datasets

    hf_features = datasets.Features.from_arrow_schema(schema)
    for key in image_keys:
        hf_features[key] = datasets.Image()
    return schema.with_metadata(hf_features.arrow_schema.metadata)
