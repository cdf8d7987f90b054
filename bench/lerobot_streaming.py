"""LeRobot 0.6.1's StreamingLeRobotDataset timed on a dataset served over the Hub protocol (issue 22), run in LeRobot's
side venv; bench/dataloader.py --streaming runs it beside hfpolicy's streamed and in-memory paths on the same data:

    python bench/dataloader.py --streaming --lerobot_python=/work/lerobot-venv/bin/python \
        --lerobot_lib_path=/tmp/ffmpeg5/usr/lib/x86_64-linux-gnu [--episodes N] [--batches 100]

Alone, against a server that already serves the dataset (HF_ENDPOINT, HF_TOKEN and a fresh HF_HOME in the environment):

    /work/lerobot-venv/bin/python bench/lerobot_streaming.py --repo_id bench/pusht --workers 0 [--batches 100]
    /work/lerobot-venv/bin/python bench/lerobot_streaming.py --repo_id bench/pusht --hfpolicy_npz DUMP.npz

The second times nothing: it streams one epoch and compares every item, key by key and exactly (images as uint8),
with hfpolicy's PolicyDataset items of the served dataset's folder, dumped with the same windows by
`python bench/hfpolicy_dataset_dump.py FOLDER DUMP.npz --delta observation.image=-0.1,0 --delta
observation.state=-0.1,0 --delta action=0,0.1,...,1.5` (hfpolicy's venv; the dump holds every frame's window, so
keep FOLDER small).

One run per process: `StreamingLeRobotDataset(repo_id, delta_timestamps=DP windows, buffer_size=1000,
return_uint8=True)` in a `DataLoader(batch_size=64, num_workers=N)` built as lerobot-train builds it for a streamed
dataset (no sampler, drop_last=False; with workers: persistent, prefetch_factor 4, "spawn"). The DP windows are
observation.image and observation.state at [-0.1, 0.0], action at 16 steps 0.0..1.5 s (fps 10). first_batch_s counts
from the dataset's construction (meta download, the parquet files' resolution by `datasets`) to the first batch;
samples_per_s is over --batches batches after the first --warmup (the loader is iterated again at an epoch's end);
peak_rss_mb is this process's VmHWM, peak_worker_rss_mb the largest among the DataLoader workers'. Prints a table; the
LAST line is one JSON object.

What LeRobot 0.6.1's streaming dataset does differently (lerobot/datasets/streaming_dataset.py and factory.py):
- Workers split the dataset by parquet file only: `self.num_shards = min(self.hf_dataset.num_shards,
  max_num_shards)` (l. 382) and `datasets` stops the workers beyond the shard count ("Too many dataloader workers",
  datasets/iterable_dataset.py `_iter_pytorch`). A dataset in one parquet file (PushT) streams from ONE worker
  whatever num_workers is. lerobot-train passes `max_num_shards=cfg.num_workers` (factory.py l. 118), so with
  --num_workers=0 it streams nothing at all (0 shards); this script passes max(num_workers, 1).
- No sampler: every frame of every episode is drawn (no drop_n_last_frames), and the first item comes only once the
  1000-frame shuffle buffer is full (l. 442), or at the shard's end for a smaller dataset.
- A frame's video timestamp is taken as its global index / fps (`current_ts = item["index"] / self.fps`, l. 540),
  which holds while each camera's episodes share one video file from index 0, as here.
- Video frames are always decoded with torchcodec (l. 650), there is no video_backend option; torchcodec needs FFmpeg's
  shared libraries. Where the machine has none, unpack Debian's (FFmpeg 5.1) without installing them:
      mkdir -p /tmp/ffdebs/partial && apt-get install --download-only -o Dir::Cache::archives=/tmp/ffdebs \
          libavcodec59 libavformat59 libavutil57 libavdevice59 libavfilter8 libswscale6 libswresample4
      for d in /tmp/ffdebs/*.deb; do dpkg -x "$d" /tmp/ffmpeg5; done
  then pass bench/dataloader.py --lerobot_lib_path=/tmp/ffmpeg5/usr/lib/x86_64-linux-gnu (it adds that folder's blas/
  and lapack/, which the libraries need, to the LD_LIBRARY_PATH of this script only), or run this script alone with
  LD_LIBRARY_PATH=$L:$L/blas:$L/lapack for that folder L.
"""

import argparse
import gc
import json
import os
import re
import sys
import time
from pathlib import Path

from dataloader import peak_rss_mb  # standard library only, so it imports in the side venv

FPS = 10
BURST_NOTE = (
    "note: the dataset has fewer frames than LeRobot's shuffle buffer, so each epoch comes all at once at its end and "
    "its samples/s measures nothing; use a dataset of several buffers (--buffer_size frames)"
)
DELTA_TIMESTAMPS = {
    "observation.image": [-0.1, 0.0],
    "observation.state": [-0.1, 0.0],
    "action": [i / FPS for i in range(16)],
}


def check_torchcodec() -> None:
    """Exit naming the fix when torchcodec, which the streaming dataset always decodes with, cannot load FFmpeg."""
    try:
        import torchcodec.decoders  # noqa: F401
    except (RuntimeError, OSError) as error:
        missing = sorted(set(re.findall(r"(\S+\.so[.\d]*): cannot open shared object file", str(error))))
        raise SystemExit(
            f"torchcodec cannot load FFmpeg's shared libraries (missing: {', '.join(missing) or error}); "
            "StreamingLeRobotDataset decodes video only with torchcodec. Put FFmpeg 4-8 libraries on LD_LIBRARY_PATH "
            "(bench/dataloader.py: --lerobot_lib_path); this script's docstring shows how to unpack Debian's "
            "without installing them."
        ) from None


def make_loader(args):
    """(dataset, loader) as lerobot-train builds them for a streamed dataset (lerobot/scripts/lerobot_train.py)."""
    import torch
    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

    dataset = StreamingLeRobotDataset(
        args.repo_id, delta_timestamps=DELTA_TIMESTAMPS, buffer_size=args.buffer_size,
        max_num_shards=max(args.workers, 1), seed=args.seed, return_uint8=not args.float_images,
    )  # fmt: skip
    workers = args.workers > 0
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.workers, drop_last=False,
        prefetch_factor=4 if workers else None, persistent_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    )  # fmt: skip
    return dataset, loader


def check_items(args) -> dict:
    """One whole epoch of LeRobot's streamed items against hfpolicy's dump of the same dataset (every item, in index
    order, with its delta_timestamps: bench/hfpolicy_dataset_dump.py): item by item, every key of the dump."""
    import numpy as np
    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

    with np.load(args.hfpolicy_npz, allow_pickle=False) as dump:
        ref = {k: dump[k] for k in dump.files}
    delta = {k[len("__delta__.") :]: ref.pop(k).tolist() for k in list(ref) if k.startswith("__delta__.")}
    dataset = StreamingLeRobotDataset(args.repo_id, delta_timestamps=delta or None, return_uint8=True)
    row = {int(index): i for i, index in enumerate(ref["index"])}
    seen, scalars = set(), set()
    bad = dict.fromkeys(sorted(ref), 0)
    for item in dataset:
        index = int(item["index"])
        seen.add(index)
        for key in bad:
            got = item.get(key)
            if got is not None and not hasattr(got, "numpy"):  # a Python number: only its value can be compared
                scalars.add(key)
                got = np.asarray(got, dtype=ref[key].dtype)
            got = got.numpy() if hasattr(got, "numpy") else got
            bad[key] += got is None or got.dtype != ref[key].dtype or not np.array_equal(got, ref[key][row[index]])
    missing = len(row) - len(seen)
    return {
        "path": "lerobot_streaming_items", "items": len(seen), "items_missing": missing, "mismatches": sum(bad.values()),
        "mismatching_items_by_key": bad, "python_numbers": sorted(scalars), "delta_timestamps": delta,
        "frames": dataset.num_frames,
    }  # fmt: skip


def measure(args) -> dict:
    """Build the dataset and its loader, time the first batch and the warm ones."""
    import lerobot
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    start = time.perf_counter()
    dataset, loader = make_loader(args)
    first_batch_s, timed, samples, batches, epochs, epoch_samples = None, None, 0, 0, 0, []
    while samples < args.batches * args.batch_size:
        seen = 0
        for batch in loader:
            seen += len(batch["index"])
            if first_batch_s is None:
                first_batch_s = time.perf_counter() - start
            if timed is None and batches >= args.warmup:
                timed = time.perf_counter()
            elif timed is not None:
                samples += len(batch["index"])
            batches += 1
            if samples >= args.batches * args.batch_size:
                break
        else:
            epoch_samples.append(seen)
            if seen == 0:
                raise SystemExit(f"{args.repo_id}: the streaming dataset yielded no sample")
        epochs += 1
    seconds = time.perf_counter() - timed
    live = loader._iterator._workers if args.workers else []  # the persistent workers, still running
    worker_rss = max((peak_rss_mb(w.pid) for w in live), default=0.0)
    own = peak_rss_mb()
    del loader, batch
    gc.collect()
    return {
        "path": "lerobot_streaming", "workers": args.workers, "samples_per_s": round(samples / seconds, 1),
        "first_batch_s": round(first_batch_s, 2), "peak_rss_mb": round(own), "peak_worker_rss_mb": round(worker_rss),
        "frames": dataset.num_frames, "episodes": dataset.num_episodes, "parquet_shards": dataset.hf_dataset.num_shards,
        "num_shards": dataset.num_shards, "streaming_processes": min(max(args.workers, 1), dataset.num_shards),
        "epoch_samples": epoch_samples[0] if epoch_samples else None, "buffer_size": args.buffer_size,
        "return_uint8": not args.float_images, "batch_size": args.batch_size, "batches": args.batches,
        "torch_threads": torch.get_num_threads(), "lerobot": lerobot.__version__,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo_id", default="bench/pusht", help="the dataset on the server at HF_ENDPOINT")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=100, help="timed batches")
    parser.add_argument("--warmup", type=int, default=4, help="batches before the timing starts")
    parser.add_argument(
        "--buffer_size", type=int, default=1000, help="the shuffle buffer in frames (LeRobot's default)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--float_images", action="store_true", help="float32 images (lerobot-train asks for uint8)")
    parser.add_argument("--torch_threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--hfpolicy_npz", type=Path, default=None, help="no timing: compare one epoch's items with "
                        "this dump of hfpolicy's (bench/hfpolicy_dataset_dump.py)")  # fmt: skip
    args = parser.parse_args()
    if "HF_ENDPOINT" not in os.environ:
        print("HF_ENDPOINT is not set: point it at the server that serves --repo_id", file=sys.stderr)
        return 2
    check_torchcodec()
    if args.hfpolicy_npz is not None:
        r = check_items(args)
        print(f"{r['items']} items of {args.repo_id}, {r['items_missing']} missing; mismatching items by key:")
        for key, count in r["mismatching_items_by_key"].items():
            print(f"  {key:<40} {count}")
        print(json.dumps(r))
        return 0
    r = measure(args)
    title = f"LeRobot {r['lerobot']} streaming, batch {r['batch_size']}"
    print(f"{title:<44} samples/s  first batch  peak RSS (worker)")
    readers = r["streaming_processes"]
    row = f"{r['workers']} workers ({readers} reader{'s' * (readers != 1)})"
    print(
        f"{row:<44} {r['samples_per_s']:>9.0f}  {r['first_batch_s']:>9.2f} s  {r['peak_rss_mb']:>5} MiB "
        f"({r['peak_worker_rss_mb']} MiB)"
    )
    if r["frames"] < r["buffer_size"]:
        print(BURST_NOTE)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
