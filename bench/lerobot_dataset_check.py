"""Check that LeRobot 0.6.1 loads a LeRobot v3.0 dataset folder (e.g. one hfpolicy wrote) and reads what is stored.

Run with the LeRobot venv (never hfpolicy's):

    HF_HUB_OFFLINE=1 LEROBOT_VENV/bin/python bench/lerobot_dataset_check.py FOLDER [--repo_id local/x]
        [--hfpolicy_npz DUMP.npz ...]

It loads FOLDER with `LeRobotDataset(repo_id, root=FOLDER)` and compares, frame by frame, every non-video feature
of every item with a plain pyarrow read of data/*/*.parquet (exact equality, same dtype); video features: LeRobot
must decode every frame ((C, H, W) float32 in [0, 1], finite) and each decoded frame must equal the frame a plain
PyAV decode of the mp4 gives at the episode's from_timestamp + timestamp. Metadata: episode count, frame count,
fps, features (names, dtypes, shapes), per-episode lengths and index ranges, tasks, stats keys and values
(meta/stats.json). With --hfpolicy_npz (written by hfpolicy_dataset_dump.py in hfpolicy's venv) it also compares
hfpolicy's PolicyDataset items with LeRobot's; a dump made with delta_timestamps (its `__delta__.*` arrays) makes
LeRobot load the dataset with the same delta_timestamps and compares the windows and `{key}_is_pad`.

Prints a table, then one JSON line: {"mismatches": N, ...} (0 is the goal).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import av
import lerobot
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

ROWS: list[tuple[str, str, str, bool]] = []  # (check, lerobot, reference, ok)


def record(check: str, got, want, ok: bool | None = None) -> bool:
    ok = bool(got == want) if ok is None else bool(ok)
    ROWS.append((check, str(got), str(want), ok))
    return ok


# --- plain reads -----------------------------------------------------------------------------------------------
def arrow_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """A parquet column as a numpy array (N, *shape): fixed-size lists are flattened and reshaped."""
    array = column.combine_chunks()
    shape: list[int] = []
    while pa.types.is_fixed_size_list(array.type):
        shape.append(array.type.list_size)
        array = array.flatten()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return np.asarray(column.to_pylist())
    values = array.to_numpy(zero_copy_only=False)
    return values.reshape(len(column), *shape) if shape else values


def png_column_to_chw(column: pa.ChunkedArray) -> np.ndarray:
    """An image feature's {bytes, path} structs decoded with PIL: (N, C, H, W) uint8."""
    import io

    from PIL import Image

    images = [np.asarray(Image.open(io.BytesIO(v["bytes"])).convert("RGB")) for v in column.to_pylist()]
    return np.stack(images).transpose(0, 3, 1, 2)


def read_parquet_frames(root: Path) -> pa.Table:
    files = sorted((root / "data").glob("*/*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    return table.sort_by("index")


def decode_all_frames(path: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every frame of an mp4 with PyAV, in presentation order: (timestamps in s, list of (H, W, 3) uint8)."""
    times, frames = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            times.append(float(frame.pts * stream.time_base))
            frames.append(frame.to_ndarray(format="rgb24"))
    order = np.argsort(times)
    return np.asarray(times)[order], [frames[i] for i in order]


# --- comparisons -----------------------------------------------------------------------------------------------
def as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Exactly equal values (NaN equals NaN), the same number of elements, the same dtype."""
    if a.dtype != b.dtype or a.size != b.size:
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def check_metadata(ds: LeRobotDataset, root: Path, table: pa.Table) -> int:
    bad = 0
    info = json.loads((root / "meta" / "info.json").read_text())
    episode_col = arrow_to_numpy(table.column("episode_index"))
    episodes, lengths = np.unique(episode_col, return_counts=True)
    bad += not record("episodes (LeRobot num_episodes vs info.json)", ds.num_episodes, info["total_episodes"])
    bad += not record("episodes (info.json vs parquet)", info["total_episodes"], len(episodes))
    bad += not record("episodes (meta.episodes rows)", len(ds.meta.episodes), len(episodes))
    bad += not record("frames (len(ds) vs parquet rows)", len(ds), table.num_rows)
    bad += not record("frames (info.json total_frames)", info["total_frames"], table.num_rows)
    bad += not record("frames (LeRobot hf_dataset rows)", len(ds.hf_dataset), table.num_rows)
    bad += not record("fps", ds.fps, info["fps"])
    bad += not record("features (names)", sorted(ds.features), sorted(info["features"]))
    for key, ft in info["features"].items():
        got = ds.features.get(key, {})
        bad += not record(
            f"feature {key} dtype/shape",
            (got.get("dtype"), list(got.get("shape", []))),
            (ft["dtype"], list(ft["shape"])),
        )
    stored = set(table.column_names)
    non_video = sorted(k for k, ft in info["features"].items() if ft["dtype"] != "video")
    bad += not record("parquet columns == non-video features", sorted(stored), non_video)
    index = arrow_to_numpy(table.column("index"))
    bad += not record("index column is 0..N-1", True, bool(np.array_equal(index, np.arange(len(index)))))
    # per-episode metadata as LeRobot reads it
    ep_bad = 0
    start = 0
    for ep, length in zip(episodes.tolist(), lengths.tolist(), strict=True):
        meta_ep = ds.meta.episodes[ep]
        want = (length, start, start + length)
        got = (meta_ep["length"], meta_ep["dataset_from_index"], meta_ep["dataset_to_index"])
        ep_bad += got != want
        start += length
    bad += not record("episode lengths / from..to index (bad episodes)", ep_bad, 0)
    tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pandas()
    bad += not record("tasks", sorted(ds.meta.tasks.index.tolist()), sorted(tasks.index.tolist()))
    stats_path = root / "meta" / "stats.json"
    file_stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    lr_stats = ds.meta.stats or {}
    bad += not record("stats keys (features)", sorted(lr_stats), sorted(file_stats))
    stat_bad = []
    for key, parts in file_stats.items():
        for name, value in parts.items():
            got = lr_stats.get(key, {}).get(name)
            if got is None or not np.allclose(np.asarray(got, dtype=np.float64), np.asarray(value, dtype=np.float64)):
                stat_bad.append(f"{key}.{name}")
    bad += not record("stats values == stats.json (bad entries)", stat_bad, [])
    return bad


def check_frames(ds: LeRobotDataset, root: Path, table: pa.Table) -> tuple[int, dict, dict]:
    """Every item's non-video features vs parquet; video frames vs a plain PyAV decode. Returns
    (mismatches, per-key mismatch counts, LeRobot items stacked per key)."""
    features = ds.features
    video_keys = [k for k, ft in features.items() if ft["dtype"] == "video"]
    image_keys = [k for k, ft in features.items() if ft["dtype"] == "image"]
    columns = {k: arrow_to_numpy(table.column(k)) for k in table.column_names if k not in image_keys}
    columns.update({k: png_column_to_chw(table.column(k)) for k in image_keys})  # vs round(255 * LeRobot's)
    tasks = {int(v): k for k, v in ds.meta.tasks["task_index"].items()}
    per_key = {k: 0 for k in [*columns, *video_keys, "task"]}
    items: dict[str, list] = {}
    t0 = time.perf_counter()
    errors: list[str] = []
    for i in range(max(len(ds), table.num_rows)):
        try:
            item = ds[i]
        except Exception as e:  # noqa: BLE001 -- LeRobot refusing a frame is a finding, not a crash of the check
            errors.append(f"ds[{i}]: {type(e).__name__}: {e}")
            continue
        if i >= table.num_rows:
            errors.append(f"ds[{i}]: an item beyond the {table.num_rows} parquet rows")
            continue
        for key, values in columns.items():
            got = as_numpy(item[key])
            if key in image_keys:
                got = np.round(got * 255).astype(np.uint8)
            if not same(got, values[i]):
                per_key[key] += 1
        if item["task"] != tasks[int(columns["task_index"][i])]:
            per_key["task"] += 1
        for key, value in item.items():
            items.setdefault(key, []).append(value)
    record("LeRobot items read (s)", f"{time.perf_counter() - t0:.1f}", "-", True)
    bad = 0
    bad += not record("items LeRobot failed to give (first error)", f"{len(errors)} {errors[:1]}", "0 []")
    if errors:
        return bad + len(errors), per_key, {}
    for key, n in per_key.items():
        if key in columns or key == "task":
            bad += not record(f"frames with {key} != parquet", n, 0)
    stacked = {k: (torch.stack(v).numpy() if isinstance(v[0], torch.Tensor) else v) for k, v in items.items()}
    for key in video_keys:
        bad += check_video(ds, root, key, stacked[key], columns)
    return bad, per_key, stacked


def check_video(ds: LeRobotDataset, root: Path, key: str, frames: np.ndarray, columns: dict) -> int:
    h, w, c = ds.features[key]["shape"]
    bad = 0
    bad += not record(f"{key}: frames LeRobot decoded", frames.shape[0], len(ds))
    bad += not record(f"{key}: shape per frame", list(frames.shape[1:]), [c, h, w])
    bad += not record(f"{key}: dtype", str(frames.dtype), "float32")
    lo, hi = float(frames.min()), float(frames.max())
    bad += not record(f"{key}: value range", f"[{lo:.4f}, {hi:.4f}]", "within [0, 1]", lo >= 0 and hi <= 1)
    bad += not record(f"{key}: finite", bool(np.isfinite(frames).all()), True)
    as_uint8 = np.round(frames * 255).astype(np.int16)
    decoded: dict[Path, tuple[np.ndarray, list[np.ndarray]]] = {}
    wrong, max_diff, unique_used = 0, 0, set()
    for i in range(len(ds)):
        ep = int(columns["episode_index"][i])
        path = root / ds.meta.get_video_file_path(ep, key)
        if path not in decoded:
            decoded[path] = decode_all_frames(path)
        times, file_frames = decoded[path]
        want_t = ds.meta.episodes[ep][f"videos/{key}/from_timestamp"] + float(columns["timestamp"][i])
        j = int(np.argmin(np.abs(times - want_t)))
        unique_used.add((path, j))
        ref = file_frames[j].transpose(2, 0, 1).astype(np.int16)
        diff = int(np.abs(as_uint8[i] - ref).max())
        max_diff = max(max_diff, diff)
        wrong += diff != 0 or abs(times[j] - want_t) > ds.tolerance_s
    n_in_files = sum(len(t) for t, _ in decoded.values())
    bad += not record(f"{key}: frames != plain PyAV decode at its timestamp", wrong, 0)
    record(f"{key}: max |LeRobot - PyAV| (uint8 levels)", max_diff, 0, max_diff == 0)
    bad += not record(f"{key}: distinct video frames used / frames in mp4s", len(unique_used), n_in_files)
    return bad


def check_stats_from_frames(ds: LeRobotDataset, root: Path, table: pa.Table, stacked: dict) -> int:
    """meta/stats.json (what LeRobot normalizes with) vs min/max/mean/std/count recomputed from the frames: the
    parquet columns, and for videos LeRobot's decoded frames per channel (LeRobot's own stats are np.std, ddof 0)."""
    stats_path = root / "meta" / "stats.json"
    if not stats_path.is_file():
        return not record("stats.json present", False, True)
    file_stats = json.loads(stats_path.read_text())
    wrong, worst, video_diff = [], 0.0, {}
    for key, ft in ds.features.items():
        if ft["dtype"] in ("string", "image") or key not in file_stats:
            continue
        if ft["dtype"] == "video":
            values = stacked[key].astype(np.float64).transpose(1, 0, 2, 3).reshape(stacked[key].shape[1], -1).T
        else:
            values = arrow_to_numpy(table.column(key)).astype(np.float64).reshape(table.num_rows, -1)
        recomputed = {
            "min": values.min(0),
            "max": values.max(0),
            "mean": values.mean(0),
            "std": values.std(0),
            "count": np.asarray([len(values) if ft["dtype"] != "video" else len(stacked[key])]),
        }
        for name, want in recomputed.items():
            if name not in file_stats[key]:
                wrong.append(f"{key}.{name} (absent)")
                continue
            got = np.asarray(file_stats[key][name], dtype=np.float64).reshape(-1)
            # Video stats are computed (by hfpolicy, as by LeRobot's writer) from the raw frames before the lossy
            # H.264 encode, so decoded frames differ a little: mean/std within 0.01, min/max within 0.1.
            atol = (
                (0.1 if name in ("min", "max") else 0.01 if name != "count" else 0) if ft["dtype"] == "video" else 1e-6
            )
            if got.size != want.size or not np.allclose(got, want, rtol=0 if atol != 1e-6 else 1e-5, atol=atol):
                wrong.append(f"{key}.{name}")
            elif got.size:
                diff = float(np.abs(got - want).max())
                if ft["dtype"] == "video":
                    video_diff[f"{key}.{name}"] = round(diff, 5)
                else:
                    worst = max(worst, diff)
    record("stats.json max |stored - recomputed from frames| (non-video)", f"{worst:.2e}", "<= 1e-6 + 1e-5 rel", True)
    if video_diff:
        record(
            "video stats |stored (raw frames) - decoded frames|", video_diff, "mean/std <= 0.01, min/max <= 0.1", True
        )
    return not record("stats.json entries != recomputed from frames", wrong, [])


def check_against_hfpolicy(ds_plain: LeRobotDataset, stacked: dict, npz_path: Path, args) -> int:
    """hfpolicy's PolicyDataset items (dump) vs LeRobot's; with delta_timestamps, LeRobot is reloaded with them."""
    dump = np.load(npz_path, allow_pickle=False)
    delta = {k[len("__delta__.") :]: dump[k].tolist() for k in dump.files if k.startswith("__delta__.")}
    tag = f"hfpolicy {npz_path.name}"
    if delta:
        ds = LeRobotDataset(args.repo_id, root=args.folder, delta_timestamps=delta, video_backend=args.video_backend)
        record(f"{tag}: LeRobot delta_indices", ds.reader.delta_indices, "-", True)
        items: dict[str, list] = {}
        for i in range(len(ds)):
            for key, value in ds[i].items():
                items.setdefault(key, []).append(value)
        lr = {k: (torch.stack(v).numpy() if isinstance(v[0], torch.Tensor) else v) for k, v in items.items()}
    else:
        ds, lr = ds_plain, stacked
    bad = 0
    for key in sorted(k for k in dump.files if not k.startswith("__delta__.")):
        ref = dump[key]
        if key not in lr:
            bad += not record(f"{tag}: {key}", "absent in LeRobot item", "present", False)
            continue
        got = lr[key]
        if key in ds.meta.video_keys or ds.features.get(key, {}).get("dtype") == "image":
            got = np.round(got * 255).astype(np.uint8)
        n_rows = len(ref)
        if got.size != ref.size or got.dtype != ref.dtype:
            bad += not record(
                f"{tag}: {key} dtype/shape", f"{got.dtype}{list(got.shape)}", f"{ref.dtype}{list(ref.shape)}", False
            )
            continue
        rows_bad = int(sum(not same(got[i], ref[i]) for i in range(n_rows)))
        extra = ""
        if key in ds.meta.video_keys and rows_bad:
            extra = f" (max diff {int(np.abs(got.astype(np.int16) - ref.astype(np.int16)).max())})"
        bad += not record(f"{tag}: frames with {key} != hfpolicy{extra}", rows_bad, 0)
        if key.endswith("_is_pad"):
            record(f"{tag}: {key} padded entries (LeRobot / hfpolicy)", int(got.sum()), int(ref.sum()))
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repo_id", default=None)
    parser.add_argument("--hfpolicy_npz", type=Path, action="append", default=[])
    parser.add_argument("--video_backend", default="pyav", help="pyav (torchcodec needs system FFmpeg libs)")
    args = parser.parse_args()
    args.repo_id = args.repo_id or f"local/{args.folder.name}"
    root = args.folder.resolve()
    args.folder = root
    t0 = time.perf_counter()
    ds = LeRobotDataset(args.repo_id, root=root, video_backend=args.video_backend)
    record("LeRobotDataset(...) load (s)", f"{time.perf_counter() - t0:.1f}", "-", True)
    table = read_parquet_frames(root)
    bad_meta = check_metadata(ds, root, table)
    bad_frames, per_key, stacked = check_frames(ds, root, table)
    if stacked:
        bad_frames += check_stats_from_frames(ds, root, table, stacked)
    bad_hf = {str(p): check_against_hfpolicy(ds, stacked, p, args) for p in args.hfpolicy_npz}

    width = max(len(r[0]) for r in ROWS)
    print(f"{'check':<{width}}  {'ok':<4} LeRobot | reference")
    for check, got, want, ok in ROWS:
        print(f"{check:<{width}}  {'ok' if ok else 'BAD':<4} {got} | {want}")
    mismatches = bad_meta + bad_frames + sum(bad_hf.values())
    summary = {
        "dataset": str(root),
        "lerobot": lerobot.__version__,
        "video_backend": args.video_backend,
        "episodes": ds.num_episodes,
        "frames": len(ds),
        "fps": ds.fps,
        "features": sorted(ds.features),
        "video_keys": list(ds.meta.video_keys),
        "mismatches": mismatches,
        "mismatches_metadata": bad_meta,
        "mismatches_frames": bad_frames,
        "frame_mismatches_per_key": per_key,
        "mismatches_vs_hfpolicy": bad_hf,
        "compared": "metadata (episodes, frames, fps, features, episode ranges, tasks, stats keys+values); every "
        "frame's non-video features vs pyarrow; video frames vs PyAV decode; hfpolicy PolicyDataset dumps",
    }
    print(json.dumps(summary))
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
