"""Dump every item of a dataset as hfpolicy's `PolicyDataset` reads it, into one .npz, for lerobot_dataset_check.py.

Run with hfpolicy's venv:

    python bench/hfpolicy_dataset_dump.py FOLDER OUT.npz [--delta KEY=T0,T1,...] ...

Every feature of every frame (images as uint8 (N, [T,] C, H, W), i.e. round(255 * x) of hfpolicy's float [0, 1]),
`{key}_is_pad` for windowed keys, and the delta_timestamps used (as `__delta__.{key}` float64 arrays). np.savez,
no pickle: the reader loads with allow_pickle=False.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hfpolicy.datasets import PolicyDataset


def parse_delta(specs: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for spec in specs:
        key, _, values = spec.partition("=")
        out[key] = [float(v) for v in values.split(",")]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--repo_id", default=None)
    parser.add_argument("--delta", action="append", default=[], help="KEY=T0,T1,... (seconds)")
    args = parser.parse_args()
    folder = Path(args.folder)
    repo_id = args.repo_id or f"local/{folder.name}"
    delta = parse_delta(args.delta)
    ds = PolicyDataset(repo_id, root=folder, delta_timestamps=delta or None)
    batch = ds.get_batch(np.arange(len(ds)))
    arrays: dict[str, np.ndarray] = {}
    for key, value in batch.items():
        if isinstance(value, list):
            continue  # task strings: written to the JSON sidecar
        array = value.numpy()
        if key in ds.camera_keys:
            array = np.round(array * 255.0).astype(np.uint8)
        arrays[key] = array
    for key, offsets in delta.items():
        arrays[f"__delta__.{key}"] = np.asarray(offsets, dtype=np.float64)
    tmp = Path(args.out + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.rename(args.out)
    sidecar = {
        "repo_id": repo_id,
        "num_frames": len(ds),
        "num_episodes": ds.num_episodes,
        "fps": ds.fps,
        "camera_keys": list(ds.camera_keys),
        "tasks": batch["task"],
        "keys": sorted(arrays),
    }
    Path(args.out + ".json").write_text(json.dumps(sidecar))
    print(f"{repo_id}: {len(ds)} frames, {ds.num_episodes} episodes, keys {sorted(arrays)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
