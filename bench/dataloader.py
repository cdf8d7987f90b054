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

    python bench/dataloader.py --streaming [--root DIR | --episodes N] [--batches N]

--streaming (issue 22) compares the streamed path (StreamingPolicyDataset from the Hub-protocol test server of
tests/hub_server.py on 127.0.0.1, in EpisodeAwareSampler's shuffle-buffer order, within --stream_ram_gb / --stream_disk_gb) with the
in-memory one (PolicyDataset from the same local files, frames decoded up front, EpisodeAwareSampler), batched, with 0
and 2 workers (the streamed order split into one shard per worker: each worker decodes its own episodes; video read
as --stream_video says). Each of the four runs is a fresh process with an empty HF cache: first_batch_s counts from the start
of its dataset's construction (meta, data columns, and for the in-memory path all decoding) to its first batch;
samples_per_s is over the --batches batches (default: the rest of the epoch) after the first --warmup of the first epoch (every streamed episode is
decoded as it is first drawn), warm_samples_per_s over the first --batches of the second epoch (the episodes that
--stream_ram_gb kept are not decoded again: all of PushT's 709 MB at the default 2 GB); peak_rss_mb is the process's own peak (VmHWM),
and peak_worker_rss_mb the largest peak among its DataLoader workers (pages shared with the parent count in both).
With --lerobot_python (LeRobot 0.6.1's side venv), two more runs, 0 and 2 workers, time LeRobot's
StreamingLeRobotDataset on the same served dataset (bench/lerobot_streaming.py says how, and what it does
differently); their rows and `*_lerobot_streaming_w*` keys are added, the other keys stay as they are.
--step_ms waits after each batch with the CPU free, as a GPU step does; --uint8_images has the batches carry uint8
frames, as a training run's do (a run makes them float on its device: on a GPU one kernel, left out here; on a CPU
the same division the float rows time).
"""

import argparse
import gc
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
    parser.add_argument("--streaming", action="store_true", help="streamed vs in-memory (see above)")
    parser.add_argument("--episodes", type=int, default=None, help="convert only the first N episodes of the zarr")
    parser.add_argument("--batches", type=int, default=0, help="--streaming: timed batches per epoch (0: all of it; "
                        "100 batches of the in-memory path last ~0.2 s, too short for a steady figure)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=4, help="--streaming: batches before the timing starts")
    parser.add_argument("--shuffle_buffer_episodes", type=int, default=16)
    parser.add_argument("--stream_ram_gb", type=float, default=2.0)
    parser.add_argument("--stream_disk_gb", type=float, default=10.0)
    parser.add_argument("--stream_video", choices=["auto", "range", "download"], default="auto")
    parser.add_argument("--step_ms", type=float, default=0.0, help="--streaming: a wait after each batch that leaves "
                        "the CPU free, as a GPU training step does (time.sleep releases the GIL)")  # fmt: skip
    parser.add_argument("--uint8_images", action="store_true", help="--streaming: batches carry uint8 frames, as "
                        "a training run's do (made float on the device: on a GPU a kernel, not timed here)")  # fmt: skip
    parser.add_argument("--lerobot_python", type=Path, default=None, help="--streaming: also time LeRobot's streaming "
                        "dataset with this python (LeRobot 0.6.1's side venv)")  # fmt: skip
    parser.add_argument("--lerobot_lib_path", default="", help="--lerobot_python: FFmpeg library folders for "
                        "torchcodec (':'-separated; see bench/lerobot_streaming.py)")  # fmt: skip
    parser.add_argument("--measure", choices=["memory", "streaming"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--repo_id", default="bench/pusht", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:  # one run of --streaming, in its own process
        print(json.dumps(measure_one(args)))
        return 0
    if args.lerobot_python is not None and not args.streaming:
        parser.error("--lerobot_python needs --streaming")
    if args.lerobot_python is not None and not args.lerobot_python.is_file():
        parser.error(f"--lerobot_python={args.lerobot_python} is not a file: pass the side venv's bin/python")
    if args.streaming:
        return streaming_main(args)

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
            sampler = EpisodeAwareSampler(dataset, drop_last_frames=args.drop_last_frames, seed=0)
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


def peak_rss_mb(pid: int | str = "self") -> float:
    """A live process's peak RSS (VmHWM of /proc/PID/status) in MiB. (getrusage's ru_maxrss would carry the
    parent's peak across fork + exec.)"""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_one(args) -> dict:
    """One --streaming run: build the dataset and its loader, time the first batch and the warm ones."""
    import torch

    from hfpolicy.datasets import EpisodeAwareSampler, EpochBatchSampler, PolicyDataset, StreamingPolicyDataset
    from hfpolicy.datasets.loader_transfer import identity_collate

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    start = time.perf_counter()
    if args.measure == "streaming":
        dataset = StreamingPolicyDataset(
            args.repo_id, delta_timestamps=DELTA_TIMESTAMPS, stream_ram_gb=args.stream_ram_gb,
            stream_disk_gb=args.stream_disk_gb, stream_video=args.stream_video,
        )  # fmt: skip
        shards = max(1, args.workers)  # each worker decodes only its own shard's episodes
        sampler = EpisodeAwareSampler(
            dataset, args.drop_last_frames, seed=0, buffer_episodes=args.shuffle_buffer_episodes, shards=shards,
            batch_size=args.batch_size,
        )  # fmt: skip
    else:
        dataset = PolicyDataset(args.repo_id, root=args.root, delta_timestamps=DELTA_TIMESTAMPS)
        dataset.prefetch_frames(progress=False)  # as training does
        sampler = EpisodeAwareSampler(dataset, drop_last_frames=args.drop_last_frames, seed=0)
    dataset.uint8_images = args.uint8_images
    if args.measure == "streaming":  # as training builds it
        batches = EpochBatchSampler(sampler, args.batch_size)
    else:
        batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=True)
    if len(batches) == 0:
        raise SystemExit(f"an epoch has fewer than --batch_size={args.batch_size} samples: use more --episodes")
    loader = torch.utils.data.DataLoader(
        dataset,
        sampler=batches,
        batch_size=None,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        collate_fn=identity_collate,
    )  # fmt: skip (as training builds it)
    clock = {"first_batch_s": None}

    def rate(loader, epoch: int, skip: int, count: int, whole: bool) -> float:
        """Samples/s over batches [skip, skip + count) of `epoch` (fewer if the epoch is shorter); reads the rest of
        the epoch too when `whole`."""
        sampler.set_epoch(epoch)
        samples, begun, seconds = 0, None, None
        for i, batch in enumerate(loader):
            if clock["first_batch_s"] is None:
                clock["first_batch_s"] = time.perf_counter() - start
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
            if i == skip:
                begun = time.perf_counter()
            elif begun is not None and seconds is None:
                samples += len(batch["index"])
                if i == skip + count:
                    seconds = time.perf_counter() - begun
                    if not whole:
                        break
        seconds = time.perf_counter() - begun if seconds is None else seconds
        return samples / seconds if samples else float("nan")

    count = args.batches or len(batches)
    cold = rate(loader, 0, args.warmup, count, whole=True)  # the first epoch: streamed episodes are decoded now
    warm = rate(loader, 1, 0, count, whole=False)  # the second: those the memory budget kept are not decoded again
    first_batch_s = clock["first_batch_s"]
    live = loader._iterator._workers if args.workers else []  # the persistent workers, still running
    workers = max((peak_rss_mb(w.pid) for w in live), default=0.0)
    own = peak_rss_mb()
    del loader
    gc.collect()
    return {
        "path": args.measure, "workers": args.workers, "samples_per_s": round(cold, 1), "warm_samples_per_s": round(warm, 1),
        "first_batch_s": round(first_batch_s, 2), "peak_rss_mb": round(own), "peak_worker_rss_mb": round(workers),
        "frames": dataset.num_frames, "episodes": dataset.num_episodes,
    }  # fmt: skip


def streaming_main(args) -> int:
    """--streaming: the dataset on a 127.0.0.1 Hub-protocol server, then four measured runs in fresh processes."""
    import os
    import subprocess

    from local_hub import start_local_hub

    workdir = Path(tempfile.mkdtemp(prefix="bench_streaming_"))
    server = start_local_hub(workdir)  # before huggingface_hub is imported (below)
    try:
        from hfpolicy.datasets import push_dataset_to_hub

        root = args.root
        if root is None:
            from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr

            episodes = None if args.episodes is None else list(range(args.episodes))
            root = convert_pusht_zarr(args.zarr, workdir / "pusht", episodes=episodes, progress=False)
        push_dataset_to_hub(root, args.repo_id)
        pushed_mb = sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file()) / 1024**2
        runs = []
        for path, workers in [("memory", 0), ("memory", 2), ("streaming", 0), ("streaming", 2)]:
            env = {**os.environ, "HF_HOME": str(workdir / f"hf_home_{path}_{workers}")}
            command = [sys.executable, __file__, f"--measure={path}", f"--workers={workers}", f"--root={root}"]
            command += [f"--{k}={getattr(args, k)}" for k in ("repo_id", "batch_size", "drop_last_frames", "batches")]
            command += [f"--{k}={getattr(args, k)}" for k in ("warmup", "shuffle_buffer_episodes", "stream_ram_gb")]
            command += [f"--stream_disk_gb={args.stream_disk_gb}", f"--stream_video={args.stream_video}"]
            command += [f"--step_ms={args.step_ms}"]
            command += (["--uint8_images"] if args.uint8_images else []) + (
                [f"--torch_threads={args.torch_threads}"] if args.torch_threads else []
            )
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        for workers in (0, 2) if args.lerobot_python is not None else ():
            done = run_lerobot(args, workers, workdir)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
        if server.unhandled:  # routes the test server lacks: what its clients got was a 404, not the Hub's answer
            print(f"tests/hub_server.py answered 404 to routes it does not serve: {server.unhandled}", file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
    print_streaming_table(runs, args, pushed_mb)
    return 0


def lerobot_library_path(dirs: str) -> str:
    """LD_LIBRARY_PATH entries for the FFmpeg library folders `dirs` (':'-separated), each followed by its blas/ and
    lapack/ folders (where Debian's libblas.so.3 and liblapack.so.3, which its FFmpeg needs, are unpacked)."""
    found = []
    for folder in filter(None, dirs.split(":")):
        found += [folder] + [str(Path(folder) / sub) for sub in ("blas", "lapack") if (Path(folder) / sub).is_dir()]
    return ":".join(found)


def run_lerobot(args, workers: int, workdir: Path):
    """One run of bench/lerobot_streaming.py in the side venv, against the server of this process's environment."""
    import os
    import subprocess

    env = {**os.environ, "HF_HOME": str(workdir / f"hf_home_lerobot_{workers}")}
    lib_path = ":".join(filter(None, [lerobot_library_path(args.lerobot_lib_path), env.get("LD_LIBRARY_PATH")]))
    if lib_path:
        env["LD_LIBRARY_PATH"] = lib_path
    env.pop("PYTHONPATH", None)  # the project's packages are not the side venv's
    command = [str(args.lerobot_python), str(Path(__file__).with_name("lerobot_streaming.py")), f"--workers={workers}"]
    command += [f"--{k}={getattr(args, k)}" for k in ("repo_id", "batch_size", "warmup")]
    command += [f"--batches={args.batches or 100}"]  # LeRobot's ~200 samples/s: a whole epoch would take 2 minutes
    command += [f"--torch_threads={args.torch_threads}"] if args.torch_threads else []
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def print_streaming_table(runs: list[dict], args, pushed_mb: float) -> None:
    nan = float("nan")  # LeRobot's runs time one stretch of batches, not two epochs
    by = {(r["path"], r["workers"]): r for r in runs}
    keys = ("samples_per_s", "warm_samples_per_s", "first_batch_s", "peak_rss_mb", "peak_worker_rss_mb")
    result = {
        f"{key}_{path}_w{workers}": by[path, workers][key]
        for path in ("memory", "streaming")
        for workers in (0, 2)
        for key in keys
    }
    for workers in (0, 2):
        for kind in ("", "warm_"):
            ratio = by["streaming", workers][f"{kind}samples_per_s"] / by["memory", workers][f"{kind}samples_per_s"]
            result[f"{kind}streaming_vs_memory_w{workers}"] = round(ratio, 3)
    for workers in (0, 2) if ("lerobot_streaming", 0) in by else ():
        lerobot = by["lerobot_streaming", workers]
        for key in ("samples_per_s", "first_batch_s", "peak_rss_mb", "peak_worker_rss_mb", "streaming_processes"):
            result[f"{key}_lerobot_streaming_w{workers}"] = lerobot[key]
        ratio = by["streaming", workers]["samples_per_s"] / lerobot["samples_per_s"]
        result[f"streaming_vs_lerobot_w{workers}"] = round(ratio, 3)
        result["lerobot"] = lerobot["lerobot"]
    result |= {
        "frames": runs[0]["frames"], "episodes": runs[0]["episodes"], "dataset_mb": round(pushed_mb, 1),
        "batch_size": args.batch_size, "batches": args.batches, "shuffle_buffer_episodes": args.shuffle_buffer_episodes,
        "stream_ram_gb": args.stream_ram_gb, "stream_disk_gb": args.stream_disk_gb,
        "step_ms": getattr(args, "step_ms", 0.0), "uint8_images": getattr(args, "uint8_images", False),
    }  # fmt: skip
    print(
        f"{'dataloader (PushT DP windows), batch ' + str(args.batch_size):<32} samples/s: 1st epoch  2nd epoch"
        "  first batch  peak RSS (worker)"
    )
    for (path, workers), r in by.items():
        if path == "lerobot_streaming":
            readers = r["streaming_processes"]
            path = f"lerobot {r['lerobot']} ({readers} reader{'s' * (readers != 1)})"
        print(
            f"{path + f', {workers} workers':<32} {r['samples_per_s']:>20.0f} {r.get('warm_samples_per_s', nan):>10.0f}"
            f"  {r['first_batch_s']:>9.2f} s  {r['peak_rss_mb']:>5} MiB ({r['peak_worker_rss_mb']} MiB)"
        )
    for kind, words in (
        ("", "1st epoch (streamed episodes decoded)"),
        ("warm_", "2nd epoch (kept episodes not decoded again)"),
    ):
        print(
            f"streaming / in-memory, {words}: {result[f'{kind}streaming_vs_memory_w0']:.2f} (0 workers), "
            f"{result[f'{kind}streaming_vs_memory_w2']:.2f} (2 workers)"
        )
    if any(r["frames"] < r["buffer_size"] for r in runs if r["path"] == "lerobot_streaming"):
        from lerobot_streaming import BURST_NOTE

        print(BURST_NOTE)
    if "streaming_vs_lerobot_w0" in result:
        print(
            f"streaming / LeRobot streaming: {result['streaming_vs_lerobot_w0']:.2f} (0 workers), "
            f"{result['streaming_vs_lerobot_w2']:.2f} (2)"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
