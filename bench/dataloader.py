"""Benchmark of PolicyDataset loading for the Diffusion Policy PushT windows (issue 4).

    python bench/dataloader.py                    # converts the zarr into a temp dir first (not timed)
    python bench/dataloader.py --root DIR         # a converted dataset (e.g. from bench/convert_pusht.py)

Windows: observation.image and observation.state at [-0.1, 0.0], action at 16 steps [0.0, 0.1, ..., 1.5]; an
EpisodeAwareSampler dropping the last 7 frames of each episode, shuffled; batch 64. Two DataLoader set-ups:

- batched (recommended): `DataLoader(dataset, sampler=BatchSampler(sampler, 64, drop_last=False), batch_size=None)`;
  each fetch is one `dataset[list_of_indices]`, which gathers the whole batch at once.
- default collate: `DataLoader(dataset, batch_size=64, sampler=sampler)`; the DataLoader fetches the batch's items
  through `dataset.__getitems__` and stacks them with torch's default collate.

Reported:
- cold_s: the first epoch (batched, 0 workers) on a fresh dataset whose frame cache starts empty (each episode's
  video is decoded the first time one of its frames is drawn); decode_s is the decoding alone (`prefetch_frames`).
- samples_per_s_w0 / samples_per_s_w2: a later epoch, batched, with 0 / 2 workers (the 2 workers are forked and
  share the warm cache; their start-up, the first 4 batches, is `worker_start_s` and not counted).
- samples_per_s_w0_default_collate / samples_per_s_w2_default_collate: the same with the default collate.

Target: samples_per_s_w0 >= 5,000 (LeRobot 0.6.1 on the dev machine: ~300 with 0 workers, ~510 with 2, decoding
video per item). Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ZARR = Path(__file__).resolve().parents[2] / "shared" / "data" / "pusht_cchi_v7_replay.zarr"
FPS = 10
DELTA_TIMESTAMPS = {
    "observation.image": [-0.1, 0.0],
    "observation.state": [-0.1, 0.0],
    "action": [i / FPS for i in range(16)],
}


def time_epoch(loader, skip_batches: int = 0) -> tuple[float, int, float]:
    """(seconds, samples) of one pass over `loader`, timed after its first `skip_batches` batches, and the time
    those took."""
    samples, start, skipped_s = 0, time.perf_counter(), 0.0
    for i, batch in enumerate(loader):
        if i == skip_batches and skip_batches:
            skipped_s = time.perf_counter() - start
            start, samples = time.perf_counter(), 0
        samples += len(batch["index"])
    return time.perf_counter() - start, samples, skipped_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=None, help="a converted PushT dataset (default: convert now)")
    parser.add_argument("--zarr", type=Path, default=DEFAULT_ZARR, help="the zarr to convert when --root is not given")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--drop_last_frames", type=int, default=7)
    parser.add_argument("--torch_threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from hfpolicy.datasets import EpisodeAwareSampler, PolicyDataset

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    workdir = None
    root = args.root
    convert_s = None
    if root is None:
        from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr

        if not args.zarr.is_dir():
            print(f"{args.zarr} not found: pass --root or --zarr", file=sys.stderr)
            return 2
        workdir = Path(tempfile.mkdtemp(prefix="bench_dataloader_"))
        start = time.perf_counter()
        root = convert_pusht_zarr(args.zarr, workdir / "pusht", progress=False)
        convert_s = time.perf_counter() - start
    try:

        def make_loader(dataset, workers: int, batched: bool, epoch: int):
            sampler = EpisodeAwareSampler(dataset, drop_last_frames=args.drop_last_frames, shuffle=True, seed=0)
            sampler.set_epoch(epoch)
            if batched:
                batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=False)
                return torch.utils.data.DataLoader(dataset, sampler=batches, batch_size=None, num_workers=workers)
            return torch.utils.data.DataLoader(
                dataset, batch_size=args.batch_size, sampler=sampler, num_workers=workers
            )

        start = time.perf_counter()
        dataset = PolicyDataset("local/pusht", root=root, delta_timestamps=DELTA_TIMESTAMPS)
        init_s = time.perf_counter() - start
        cold_s, cold_samples, _ = time_epoch(make_loader(dataset, 0, batched=True, epoch=0))

        decode_probe = PolicyDataset("local/pusht", root=root, delta_timestamps=DELTA_TIMESTAMPS)
        start = time.perf_counter()
        decode_probe.prefetch_frames(progress=False)
        decode_s = time.perf_counter() - start
        del decode_probe

        rates, worker_start_s = {}, 0.0
        for name, workers, batched in [
            ("w0", 0, True),
            ("w2", 2, True),
            ("w0_default_collate", 0, False),
            ("w2_default_collate", 2, False),
        ]:
            loader = make_loader(dataset, workers, batched, epoch=1)
            seconds, samples, started_s = time_epoch(loader, skip_batches=4 if workers else 0)
            rates[name] = round(samples / seconds, 1)
            worker_start_s = max(worker_start_s, started_s)

        result = {
            "samples_per_s_w0": rates["w0"],
            "samples_per_s_w2": rates["w2"],
            "samples_per_s_w0_default_collate": rates["w0_default_collate"],
            "samples_per_s_w2_default_collate": rates["w2_default_collate"],
            "cold_s": round(cold_s, 2),
            "cold_samples_per_s": round(cold_samples / cold_s, 1),
            "decode_s": round(decode_s, 2),
            "init_s": round(init_s, 2),
            "worker_start_s": round(worker_start_s, 2),
            "epoch_samples": cold_samples,
            "frames": dataset.num_frames,
            "batch_size": args.batch_size,
            "frame_cache": dataset.frame_cache_storage,
            "torch_threads": torch.get_num_threads(),
            "convert_s": None if convert_s is None else round(convert_s, 1),
        }
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    rows = [
        ("batched, 0 workers, warm", f"{result['samples_per_s_w0']:.0f} samples/s"),
        ("batched, 2 workers, warm", f"{result['samples_per_s_w2']:.0f} samples/s"),
        ("default collate, 0 workers", f"{result['samples_per_s_w0_default_collate']:.0f} samples/s"),
        ("default collate, 2 workers", f"{result['samples_per_s_w2_default_collate']:.0f} samples/s"),
        ("worker start-up (4 batches)", f"{result['worker_start_s']:.2f} s"),
        ("first epoch, cold cache", f"{result['cold_s']:.2f} s ({result['cold_samples_per_s']:.0f} samples/s)"),
        ("decoding alone", f"{result['decode_s']:.2f} s for {result['frames']} frames"),
        ("dataset init", f"{result['init_s']:.2f} s"),
        (
            "epoch",
            f"{result['epoch_samples']} samples, batch {result['batch_size']}, cache {result['frame_cache']}, "
            f"torch threads {result['torch_threads']}",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'dataloader (PushT DP windows)':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
