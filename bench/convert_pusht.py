"""Benchmark of the PushT zarr -> LeRobot v3.0 converter on the whole diffusion_policy zarr (issue 4).

    python bench/convert_pusht.py                       # all 206 episodes into a temporary folder
    python bench/convert_pusht.py --output_dir DIR      # keep the dataset (then e.g. bench/dataloader.py --root DIR)
    python bench/convert_pusht.py --episodes 20         # the first 20 episodes only (totals checked against them)

Measures the wall time of `convert_pusht_zarr` (reading the zarr, recomputing rewards with gym-pusht, H.264 encoding,
parquet, stats) and the output size, then checks the totals: episodes and frames in info.json and meta/episodes,
episode lengths against the zarr's episode_ends, and reads the dataset back. Prints a table; the LAST line is one
JSON object.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_ZARR = Path(__file__).resolve().parents[2] / "shared" / "data" / "pusht_cchi_v7_replay.zarr"


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1024**2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zarr", type=Path, default=DEFAULT_ZARR, help="the diffusion_policy PushT zarr")
    parser.add_argument("--output_dir", type=Path, default=None, help="keep the dataset here (default: a temp dir)")
    parser.add_argument("--episodes", type=int, default=None, help="convert only the first N episodes")
    args = parser.parse_args()
    if not args.zarr.is_dir():
        print(f"{args.zarr} not found: pass --zarr", file=sys.stderr)
        return 2

    import zarr

    from hfpolicy.datasets import PolicyDataset
    from hfpolicy.datasets.metadata import DatasetMeta
    from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr

    group = zarr.open_group(str(args.zarr), mode="r")
    ends = np.asarray(group["meta/episode_ends"][:])
    n_episodes = len(ends) if args.episodes is None else min(args.episodes, len(ends))
    expected_lengths = np.diff(np.r_[0, ends[:n_episodes]]).tolist()

    workdir = None
    if args.output_dir is None:
        workdir = Path(tempfile.mkdtemp(prefix="convert_pusht_"))
        output = workdir / "pusht"
    else:
        output = args.output_dir
    try:
        start = time.perf_counter()
        root = convert_pusht_zarr(args.zarr, output, episodes=list(range(n_episodes)), overwrite=True)
        wall_s = time.perf_counter() - start

        info = json.loads((root / "meta/info.json").read_text())
        meta = DatasetMeta.load(root)
        lengths = meta.episodes["length"].tolist()
        read_start = time.perf_counter()
        dataset = PolicyDataset("local/pusht", root=root)
        read_s = time.perf_counter() - read_start
        batch = dataset.get_batch(range(len(dataset)))
        success_episodes = int(sum(batch["next.success"][e - 1] for e in np.cumsum(lengths)))
        min_final_reward = float(min(batch["next.reward"][e - 1] for e in np.cumsum(lengths)))
        totals_ok = (
            info["total_episodes"] == n_episodes
            and info["total_frames"] == sum(expected_lengths)
            and lengths == expected_lengths
            and dataset.num_frames == sum(expected_lengths)
            and meta.episodes["dataset_to_index"].iloc[-1] == sum(expected_lengths)
        )
        result = {
            "episodes": n_episodes,
            "frames": int(info["total_frames"]),
            "wall_s": round(wall_s, 2),
            "frames_per_s": round(info["total_frames"] / wall_s, 1),
            "output_mb": round(folder_mb(root), 2),
            "video_mb": round(folder_mb(root / "videos"), 2),
            "data_mb": round(folder_mb(root / "data"), 2),
            "meta_mb": round(folder_mb(root / "meta"), 2),
            "read_back_s": round(read_s, 2),
            "episodes_ending_in_success": success_episodes,
            "min_final_reward": round(min_final_reward, 4),
            "totals_ok": bool(totals_ok),
        }
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    rows = [
        ("episodes / frames", f"{result['episodes']} / {result['frames']}"),
        ("wall time", f"{result['wall_s']:.1f} s ({result['frames_per_s']:.0f} frames/s)"),
        (
            "output size",
            f"{result['output_mb']:.1f} MB (videos {result['video_mb']:.1f}, data {result['data_mb']:.2f}, "
            f"meta {result['meta_mb']:.2f})",
        ),
        ("read back (PolicyDataset init)", f"{result['read_back_s']:.2f} s"),
        ("episodes ending in success", str(result["episodes_ending_in_success"])),
        ("lowest final reward", f"{result['min_final_reward']:.3f}"),
        ("totals match the zarr", str(result["totals_ok"])),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'convert_pusht':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps(result))
    return 0 if totals_ok else 1


if __name__ == "__main__":
    sys.exit(main())
