"""What appending an episode to a LeRobot v3.0 dataset costs as the dataset grows (online training's data: one
append per round, `DatasetWriter.open`), against writing the whole dataset again (what each round did before).

    python bench/append_cost.py                          # 100 appends of 50-frame PushT-like episodes, 96x96 video
    python bench/append_cost.py --episodes=200 --no-images --rewrite_at=1,100,200

Episode k (k = 1..N) is appended to a dataset holding k - 1 episodes (the 1st creates it), each by a writer of its
own, as an online round does: `open` (reads the committed state, removes what a killed writer left), the frames
(add_frame: H.264 encoding; save_episode: the data rows), `finish` (the new files moved in, meta/ rewritten, info.json
last). The frames are a moving pattern and a random walk, the same for every episode, so the seconds differ only by
what the dataset already holds. Right after each append the same episode is appended to a control dataset that
holds 1 episode (truncated back to it after each, untimed): `ratio` = append / control is the cost against size
with the machine's load (shared dev machines) divided out. `--rewrite_at` also times writing the first n episodes as
a new dataset (the cost of the old whole rewrite at that size). Prints a table, then one JSON line.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from hfpolicy.datasets import DatasetWriter
from hfpolicy.datasets.writer import truncate_dataset

FPS = 10


def features(images: bool) -> dict:
    out = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        "observation.environment_state": {"dtype": "float32", "shape": [16], "names": None},
        "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    if images:
        out["observation.image"] = {"dtype": "video", "shape": [96, 96, 3], "names": ["height", "width", "channels"]}
    return out


def episode_frames(length: int, images: bool) -> list[dict]:
    """One episode's frames (the same for every episode: the timings then differ only by the dataset's size)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:96, 0:96].astype(np.float64)
    state = np.cumsum(rng.normal(size=(length, 2)), axis=0).astype(np.float32)
    frames = []
    for t in range(length):
        frame = {
            "observation.state": state[t],
            "observation.environment_state": rng.normal(size=16).astype(np.float32),
            "action": state[t] + 1,
            "next.reward": np.float32(t / length),
            "next.success": np.array([False]),
            "next.done": np.array([t == length - 1]),
        }
        if images:
            r = 128 + 90 * np.sin((x + 3 * t) / 9)
            g = 128 + 90 * np.cos((y - 2 * t) / 11)
            frame["observation.image"] = np.stack([r, g, np.full_like(x, 40 + t % 200)], -1).astype(np.uint8)
        frames.append(frame)
    return frames


def add(writer: DatasetWriter, frames: list[dict]) -> None:
    for frame in frames:
        writer.add_frame(frame, task="Push the T-shaped block onto the T-shaped target.")
    writer.save_episode()


def folder_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100, help="appends (the dataset's final episodes)")
    parser.add_argument("--length", type=int, default=50, help="frames per episode")
    parser.add_argument("--no-images", dest="images", action="store_false", help="state only (no video feature)")
    parser.add_argument("--rewrite_at", default="1,50,100", help="sizes at which to time a whole rewrite ('' none)")
    args = parser.parse_args()
    frames = episode_frames(args.length, args.images)
    feats = features(args.images)
    rows = []
    with tempfile.TemporaryDirectory(prefix="append_cost_") as work:
        root, control = Path(work) / "online_data", Path(work) / "control"
        with DatasetWriter.create(control, "local/control", FPS, feats) as writer:
            add(writer, frames)
        for k in range(1, args.episodes + 1):
            start = time.perf_counter()
            create = k == 1  # the 1st round writes the dataset, the later ones append
            writer = DatasetWriter.create(root, "local/online_data", FPS, feats) if create else DatasetWriter.open(root)
            opened = time.perf_counter()
            add(writer, frames)
            written = time.perf_counter()
            writer.finish()
            end = time.perf_counter()
            with DatasetWriter.open(control) as writer:
                add(writer, frames)
            control_s = time.perf_counter() - end
            truncate_dataset(control, 1)
            rows.append(
                {
                    "episode": k,
                    "open_s": opened - start,
                    "frames_s": written - opened,
                    "finish_s": end - written,
                    "append_s": end - start,
                    "control_s": control_s,
                    "ratio": (end - start) / control_s,
                    "dataset_mb": folder_mb(root),
                }
            )
        rewrites = {}
        for n in [int(v) for v in args.rewrite_at.split(",") if v.strip()]:
            if not 1 <= n <= args.episodes:
                continue
            start = time.perf_counter()
            with DatasetWriter.create(Path(work) / f"rewrite_{n}", "local/rewrite", FPS, feats) as writer:
                for _ in range(n):
                    add(writer, frames)
            rewrites[n] = time.perf_counter() - start

    shown = sorted({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, args.episodes} & set(range(1, args.episodes + 1)))
    print(
        f"{'episode':>8} {'dataset MB':>11} {'open s':>8} {'frames s':>9} {'finish s':>9} {'append s':>9} "
        f"{'control s':>10} {'ratio':>6}"
    )
    for k in shown:
        r = rows[k - 1]
        print(
            f"{k:>8} {r['dataset_mb']:>11.2f} {r['open_s']:>8.4f} {r['frames_s']:>9.4f} {r['finish_s']:>9.4f} "
            f"{r['append_s']:>9.4f} {r['control_s']:>10.4f} {r['ratio']:>6.2f}"
        )
    for n, seconds in rewrites.items():
        print(f"rewriting {n} episodes as a new dataset (the old round's cost at that size): {seconds:.3f} s")

    tenth = max(args.episodes // 10, 1)
    later = rows[1:]  # appends proper (the 1st creates the dataset)
    first, last = later[:tenth], later[-tenth:]

    def median(part, key):
        return round(statistics.median(r[key] for r in part), 4)

    overhead = {name: [r["open_s"] + r["finish_s"] for r in part] for name, part in (("first", first), ("last", last))}
    slope = np.polyfit([r["episode"] for r in later], [r["append_s"] for r in later], 1)[0] if len(later) > 1 else 0.0
    result = {
        "bench": "append_cost",
        "episodes": args.episodes,
        "frames_per_episode": args.length,
        "images": args.images,
        "append_s_median_first": median(first, "append_s"),  # appends 2..tenth+1
        "append_s_median_last": median(last, "append_s"),  # the last tenth
        "ratio_median_first": median(first, "ratio"),  # append / control (a 1-episode dataset), same moment
        "ratio_median_last": median(last, "ratio"),
        "open_finish_s_median_first": round(statistics.median(overhead["first"]), 4),
        "open_finish_s_median_last": round(statistics.median(overhead["last"]), 4),
        "append_s_slope_per_episode": float(f"{slope:.3g}"),  # least squares over appends 2..N
        "append_s_at": {r["episode"]: round(r["append_s"], 4) for r in rows if r["episode"] in shown},
        "rewrite_s_at": {n: round(s, 3) for n, s in rewrites.items()},
        "dataset_mb": round(rows[-1]["dataset_mb"], 2),
        "load": [round(v, 2) for v in os.getloadavg()],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
