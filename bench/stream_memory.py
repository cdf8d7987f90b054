"""Peak RSS of a real training run that streams a Hub dataset far larger than its memory budget (issue 22).

    python bench/stream_memory.py --data_dir DIR [--video_gb 2.0] [--stream_ram_gb 0.2] [--steps 400]

The defaults are the issue's target: >= 2 GiB of 480x640 video (~5,700 frames, ~119 episodes of 48 frames, 5 video
files of ~490 MiB), B = 0.2 GiB (the video ~10x B, its decoded frames ~25x B), 400 steps of batch 8 (~75 episodes
drawn, each decoded into the LRU and evicted again). Small check (a minute): --height 96 --width 128
--episode_frames 24 --video_gb 0.04 --min_episodes 20 --stream_ram_gb 0.004 --stream_disk_gb 0.01 --steps 60
--resize 48 64 (at that size the RSS noise of training, +-15 MiB, is larger than B: see
tests/datasets/test_streaming_memory.py for the bound without training).

1. An image dataset (LeRobot v3.0, hfpolicy's DatasetWriter): one --height x --width camera of uniform noise (which
   H.264 keeps large, so few frames make many bytes: --video_crf / --video_preset are the writer's encoder options),
   a 2-d state and action, episodes of --episode_frames frames until the videos hold --video_gb GiB (and at least
   --min_episodes episodes). Plus a tiny dataset of the same features (2 episodes) for the baseline. Both are cached
   in --data_dir (each written under a temporary name and renamed by the writer), so a re-run skips generating.
2. The big dataset is pushed to the Hub-protocol test server of tests/hub_server.py on 127.0.0.1 (its storage in a
   temporary --workdir), then two trainings run, each a fresh process (`hfpolicy.training.main`, the code of
   `hfpolicy train`) with the same Diffusion Policy (resnet18 on images resized to --resize, a small U-Net), batch,
   steps and threads, 0 DataLoader workers:
   - streamed: --dataset.streaming=true --dataset.stream_ram_gb=B --dataset.stream_disk_gb=D (D smaller than a video
     file: the video is read by byte range), --dataset.shuffle_buffer_episodes=K;
   - baseline: the tiny dataset from its local folder, not streamed (frames decoded up front into RAM).
   Each child reads its own peak RSS (VmHWM of /proc/self/status) after training, samples its RSS every 0.25 s
   while it runs, and counts the decodes and evictions of the streamed dataset.

The model's own memory is the baseline's peak minus the tiny dataset's decoded frames (which it holds in RAM: the
same model, optimizer, EMA, batch tensors and activations, without a streamed dataset). The claim checked is
    streamed peak RSS <= model's own memory + B,
i.e. `over_baseline_mb` (streamed peak - model's own) <= `budget_mb`. Not in B (so in the difference): the numeric
columns of every frame in memory (`columns_mb`), meta/ (the episodes table in memory, `meta_mb`; its files in the HF
cache), the read buffers beyond the reserve, PyAV's decoder state, and whatever the allocator keeps after freeing.

Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ID = "bench/stream-memory"
CAMERA = "observation.image"
FPS = 10
GIB = 1024**3
MIB = 1024**2


# --- the datasets ---------------------------------------------------------------------------------------------------
def features(height: int, width: int) -> dict:
    return {
        CAMERA: {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    }


def dataset_name(args, tiny: bool) -> str:
    size = "tiny" if tiny else f"{args.video_gb:g}gib_min{args.min_episodes}"
    return f"noise_{args.height}x{args.width}_f{args.episode_frames}_crf{args.video_crf}_{args.video_preset}_{size}"


def write_dataset(root: Path, args, video_bytes: float, min_episodes: int, max_episodes: int | None) -> float:
    """Writes episodes of noise until the videos hold `video_bytes` and there are `min_episodes` (or `max_episodes`
    were written); returns the seconds it took. The writer renames its temporary folder into `root` at the end."""
    import numpy as np

    from hfpolicy.datasets import DatasetWriter

    rng, start, episodes = np.random.default_rng(0), time.perf_counter(), 0
    shape = (args.height, args.width, 3)
    writer = DatasetWriter.create(
        root, REPO_ID, FPS, features(args.height, args.width), video_crf=args.video_crf,
        video_preset=args.video_preset,
    )  # fmt: skip
    with writer:
        while max_episodes is None or episodes < max_episodes:
            for _ in range(args.episode_frames):
                frame = {
                    CAMERA: rng.integers(0, 256, shape, dtype=np.uint8),
                    "observation.state": rng.normal(size=2).astype(np.float32),
                    "action": rng.normal(size=2).astype(np.float32),
                }
                writer.add_frame(frame, task="move")
            writer.save_episode()
            episodes += 1
            written = sum(p.stat().st_size for p in (writer.tmp_root / "videos").rglob("*.mp4"))
            if episodes % 10 == 0:
                print(f"  {episodes} episodes, {written / GIB:.2f} GiB of video", flush=True)
            if max_episodes is None and episodes >= min_episodes and written >= video_bytes:
                break
    return time.perf_counter() - start


def ensure_datasets(args) -> tuple[Path, Path, float | None]:
    """(big dataset, tiny dataset, seconds spent generating now; None when both were cached)."""
    args.data_dir.mkdir(parents=True, exist_ok=True)
    big, tiny = args.data_dir / dataset_name(args, False), args.data_dir / dataset_name(args, True)
    spent = None
    for root, is_tiny in ((big, False), (tiny, True)):
        if (root / "meta" / "info.json").is_file():
            continue
        print(f"generating {root} ...", flush=True)
        seconds = write_dataset(
            root, args, 0 if is_tiny else args.video_gb * GIB, 2 if is_tiny else args.min_episodes,
            2 if is_tiny else None,
        )  # fmt: skip
        print(f"  done in {seconds:.1f} s", flush=True)
        spent = (spent or 0.0) + seconds
    return big, tiny, spent


def dataset_sizes(root: Path) -> dict:
    """Bytes of video, of decoded frames (uint8) and of the data files; frames and episodes."""
    info = json.loads((root / "meta" / "info.json").read_text())
    height, width, channels = info["features"][CAMERA]["shape"]
    video_files = list((root / "videos").rglob("*.mp4"))
    return {
        "frames": info["total_frames"],
        "episodes": info["total_episodes"],
        "video_bytes": sum(p.stat().st_size for p in video_files),
        "video_files": len(video_files),
        "largest_video_file_bytes": max(p.stat().st_size for p in video_files),
        "decoded_bytes": info["total_frames"] * height * width * channels,
        "data_bytes": sum(p.stat().st_size for p in (root / "data").rglob("*.parquet")),
    }


# --- one training, in its own process ---------------------------------------------------------------------------------
def status_kb(field: str, pid: int | str = "self") -> int:
    """A field of /proc/PID/status in KiB (VmHWM: the peak RSS so far, VmRSS: now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class RssSampler(threading.Thread):
    """Samples this process's RSS every `every_s` seconds: (seconds since start, MiB)."""

    def __init__(self, every_s: float = 0.25):
        super().__init__(daemon=True)
        self.every_s, self.samples, self.start_s = every_s, [], time.perf_counter()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            self.samples.append((time.perf_counter() - self.start_s, status_kb("VmRSS") / 1024))

    def stop(self) -> list[tuple[float, float]]:
        self._halt.set()
        self.join()
        return self.samples


def watch_datasets() -> tuple[list, list]:
    """Records every PolicyDataset made from now on (the run's dataset, streamed or not) and the episode positions
    the streamed one decodes (an instrumented copy of the bench's own process: the training code is unchanged)."""
    from hfpolicy.datasets.dataset import PolicyDataset
    from hfpolicy.datasets.streaming import StreamingPolicyDataset

    made, decoded = [], []
    init, decode = PolicyDataset.__init__, StreamingPolicyDataset._decode_episode

    def recording_init(self, *a, **kw):
        made.append(self)
        init(self, *a, **kw)

    def recording_decode(self, key, episode_pos, *a, **kw):
        decoded.append(int(episode_pos))
        return decode(self, key, episode_pos, *a, **kw)

    PolicyDataset.__init__ = recording_init
    StreamingPolicyDataset._decode_episode = recording_decode
    return made, decoded


def dataset_counters(dataset, decoded: list[int]) -> dict:
    """What the run's dataset held: its decoded-frame cache or LRU, its numeric columns, meta/'s episode table."""
    columns = sum(v.nbytes for v in dataset._columns.values()) + dataset._row_episode.nbytes
    out = {
        "columns_mb": round(columns / MIB, 3),
        "meta_mb": round(float(dataset.meta.episodes.memory_usage(deep=True).sum()) / MIB, 3),
        "episodes": dataset.num_episodes,
        "frames": dataset.num_frames,
    }
    if hasattr(dataset, "frames") and hasattr(dataset.frames, "loads"):  # streamed: FrameLRU + RemoteFiles
        files = dataset.files
        out |= {
            "decodes": dataset.frames.loads, "distinct_episodes_decoded": len(set(decoded)),
            "evictions": dataset.frames.evictions, "lru_peak_mb": round(dataset.frames.peak_bytes / MIB, 2),
            "lru_budget_mb": round(dataset.frames.max_bytes / MIB, 2), "video_by_range": dataset.video_by_range(),
            "range_reads": getattr(files, "range_reads", 0), "range_mb": round(getattr(files, "range_bytes", 0) / MIB, 1),
            "disk_peak_mb": round(files.peak_bytes / MIB, 2),
        }  # fmt: skip
    else:
        out["frame_cache_mb"] = round(sum(c.nbytes for c in dataset._caches.values()) / MIB, 2)
    return out


def child_main(flags: list[str]) -> int:
    """Trains with `flags` (as `hfpolicy train` would) and prints one JSON line: peak RSS, RSS samples, counters."""
    made, decoded = watch_datasets()
    from hfpolicy.training import main

    sampler = RssSampler()
    sampler.start()
    start = time.perf_counter()
    code = main(flags)
    wall = time.perf_counter() - start
    peak_mb = status_kb("VmHWM") / 1024  # the process's peak RSS over its whole life, read just before it ends
    samples = sampler.stop() or [(0.0, status_kb("VmRSS") / 1024)]
    if code != 0 or not made:
        print(json.dumps({"error": f"training exited {code}"}))
        return 1
    result = {"peak_rss_mb": round(peak_mb, 1), "train_wall_s": round(wall, 1)}
    result["rss_at_mb"] = {  # RSS over the run: at a quarter, half, ... of its time (a plateau, not a climb)
        f"{q}%": round(next((mb for t, mb in samples if t >= wall * q / 100), samples[-1][1]), 1)
        for q in (10, 25, 50, 75, 100)
    }
    dataset = max(made, key=lambda d: getattr(d, "num_frames", 0))
    result |= dataset_counters(dataset, decoded)
    print(json.dumps(result))
    return 0


# --- the two runs and the report -------------------------------------------------------------------------------------
def policy_flags(args) -> list[str]:
    """The same small image Diffusion Policy, batch, steps and threads for both runs."""
    height, width = args.resize
    flags = [
        "--policy.type=diffusion", f"--policy.resize_shape=[{height},{width}]", "--policy.crop_shape=null",
        "--policy.down_dims=[32,64]", "--policy.diffusion_step_embed_dim=32", "--policy.spatial_softmax_num_keypoints=16",
        "--policy.noise_scheduler_type=DDIM", "--policy.num_inference_steps=2",
        f"--dataset.input_features=[{CAMERA},observation.state]", f"--batch_size={args.batch_size}",
        "--num_workers=0", "--tracker=none", "--progress=false", "--eval.freq=0", "--save_freq=0",
        "--save_every_minutes=0", f"--log_freq={max(1, args.steps // 10)}",
    ]  # fmt: skip
    return flags + ([f"--num_threads={args.num_threads}"] if args.num_threads else [])


def run_child(name: str, flags: list[str], workdir: Path) -> dict:
    """One training in a fresh process with its own empty HF cache; its JSON line, plus the wall time."""
    env = {**os.environ, "HF_HOME": str(workdir / f"hf_home_{name}")}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", *flags]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {name} run failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result | {"process_wall_s": round(time.perf_counter() - start, 1)}


def measure(args, big: Path, tiny: Path, workdir: Path) -> dict:
    """Pushes the big dataset to the local Hub (already started), then the streamed run and the baseline run."""
    from hfpolicy.datasets import push_dataset_to_hub

    start = time.perf_counter()
    push_dataset_to_hub(big, REPO_ID)
    push_s = time.perf_counter() - start
    common = policy_flags(args)
    streamed = [
        f"--dataset.repo_id={REPO_ID}", "--dataset.streaming=true", f"--dataset.stream_ram_gb={args.stream_ram_gb}",
        f"--dataset.stream_disk_gb={args.stream_disk_gb}",
        f"--dataset.shuffle_buffer_episodes={args.shuffle_buffer_episodes}", f"--steps={args.steps}",
        f"--output_dir={workdir / 'run_streamed'}",
    ]  # fmt: skip
    baseline = [f"--dataset.root={tiny}", f"--steps={args.baseline_steps or args.steps}"]
    baseline.append(f"--output_dir={workdir / 'run_baseline'}")
    runs = {"streamed": run_child("streamed", common + streamed, workdir)}
    runs["baseline"] = run_child("baseline", common + baseline, workdir)
    return {"push_s": round(push_s, 1), "runs": runs}


def summarize(args, sizes: dict, measured: dict, generate_s: float | None) -> dict:
    streamed, baseline = measured["runs"]["streamed"], measured["runs"]["baseline"]
    budget_mb = args.stream_ram_gb * GIB / MIB
    model_mb = baseline["peak_rss_mb"] - baseline["frame_cache_mb"]  # the baseline without its decoded frames
    over_mb = streamed["peak_rss_mb"] - model_mb
    return {
        "peak_rss_mb": streamed["peak_rss_mb"], "model_mb": round(model_mb, 1),
        "baseline_peak_rss_mb": baseline["peak_rss_mb"], "baseline_frame_cache_mb": baseline["frame_cache_mb"],
        "over_baseline_mb": round(over_mb, 1), "budget_mb": round(budget_mb, 1),
        "bound_holds": over_mb <= budget_mb, "headroom_mb": round(budget_mb - over_mb, 1),
        "video_gib": round(sizes["video_bytes"] / GIB, 3), "decoded_gib": round(sizes["decoded_bytes"] / GIB, 3),
        "video_over_budget": round(sizes["video_bytes"] / (budget_mb * MIB), 1),
        "decoded_over_budget": round(sizes["decoded_bytes"] / (budget_mb * MIB), 1),
        "frames": sizes["frames"], "episodes": sizes["episodes"], "video_files": sizes["video_files"],
        "largest_video_file_mb": round(sizes["largest_video_file_bytes"] / MIB, 1),
        "episode_decoded_mb": round(sizes["decoded_bytes"] / sizes["frames"] * args.episode_frames / MIB, 2),
        "steps": args.steps, "baseline_steps": args.baseline_steps or args.steps, "batch_size": args.batch_size,
        "stream_ram_gb": args.stream_ram_gb, "stream_disk_gb": args.stream_disk_gb,
        "shuffle_buffer_episodes": args.shuffle_buffer_episodes,
        **{k: streamed[k] for k in ("decodes", "distinct_episodes_decoded", "evictions", "lru_peak_mb", "lru_budget_mb",
                                    "video_by_range", "range_reads", "range_mb", "disk_peak_mb", "columns_mb",
                                    "meta_mb")},
        "rss_at_mb": streamed["rss_at_mb"], "baseline_rss_at_mb": baseline["rss_at_mb"],
        "train_wall_s": streamed["train_wall_s"], "baseline_train_wall_s": baseline["train_wall_s"],
        "generate_s": None if generate_s is None else round(generate_s, 1), "push_s": measured["push_s"],
    }  # fmt: skip


def print_report(r: dict) -> None:
    rows = [
        ("dataset", f"{r['episodes']} episodes, {r['frames']} frames; video {r['video_gib']:.2f} GiB in "
                    f"{r['video_files']} files (largest {r['largest_video_file_mb']:.0f} MiB), decoded "
                    f"{r['decoded_gib']:.2f} GiB ({r['episode_decoded_mb']:.1f} MiB an episode)"),
        ("memory budget B", f"{r['budget_mb']:.0f} MiB (--dataset.stream_ram_gb={r['stream_ram_gb']}): video "
                            f"{r['video_over_budget']}x B, decoded {r['decoded_over_budget']}x B"),
        ("streamed run, peak RSS", f"{r['peak_rss_mb']:.0f} MiB ({r['steps']} steps, batch {r['batch_size']}, "
                                   f"{r['train_wall_s']:.0f} s); RSS over the run {r['rss_at_mb']}"),
        ("baseline, peak RSS", f"{r['baseline_peak_rss_mb']:.0f} MiB ({r['baseline_steps']} steps on 2 tiny episodes, "
                               f"{r['baseline_train_wall_s']:.0f} s), of which {r['baseline_frame_cache_mb']:.0f} MiB "
                               "decoded frames"),
        ("model's own memory", f"{r['model_mb']:.0f} MiB"),
        ("streamed - model's own", f"{r['over_baseline_mb']:.0f} MiB vs B = {r['budget_mb']:.0f} MiB: "
                                   f"{'within' if r['bound_holds'] else 'OVER'} (headroom {r['headroom_mb']:.0f} MiB)"),
        ("streaming counters", f"{r['decodes']} decodes of {r['distinct_episodes_decoded']} episodes, "
                               f"{r['evictions']} evictions, LRU peak {r['lru_peak_mb']:.0f} of "
                               f"{r['lru_budget_mb']:.0f} MiB; by range: {r['video_by_range']} ({r['range_reads']} "
                               f"reads, {r['range_mb']:.0f} MiB); disk peak {r['disk_peak_mb']:.1f} MiB"),
        ("not in B", f"numeric columns {r['columns_mb']:.2f} MiB, meta episodes table {r['meta_mb']:.2f} MiB"),
        ("time", f"generate {r['generate_s']} s (None: cached), push {r['push_s']} s"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    print(f"{'peak RSS of a streamed training':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps(r))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", type=Path, required=True, help="where the generated datasets are cached")
    parser.add_argument("--workdir", type=Path, default=None, help="server storage and runs (default: a temp dir)")
    parser.add_argument("--video_gb", type=float, default=2.0, help="GiB of video in the big dataset")
    parser.add_argument("--min_episodes", type=int, default=50)
    parser.add_argument("--episode_frames", type=int, default=48)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--video_crf", type=int, default=8, help="the writer's x264 quality (lower: larger files)")
    parser.add_argument("--video_preset", default="ultrafast", help="the writer's x264 preset")
    parser.add_argument("--stream_ram_gb", type=float, default=0.2, help="B: --dataset.stream_ram_gb")
    parser.add_argument("--stream_disk_gb", type=float, default=0.05, help="--dataset.stream_disk_gb")
    parser.add_argument(
        "--shuffle_buffer_episodes",
        type=int,
        default=2,
        help="2: B (4 episodes of 42 MiB, less the read buffers) holds them, the one entering and the ones just "
        "drawn out, so the LRU seldom evicts an open episode (which would be decoded again)",
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--baseline_steps", type=int, default=None, help="default: --steps")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--resize", type=int, nargs=2, default=[96, 128], metavar=("H", "W"))
    parser.add_argument("--num_threads", type=int, default=None, help="--num_threads of both runs")
    args = parser.parse_args()
    from local_hub import start_local_hub

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_stream_memory_"))
    server = start_local_hub(workdir)  # before huggingface_hub is imported (by hfpolicy.datasets)
    try:
        big, tiny, generate_s = ensure_datasets(args)
        sizes = dataset_sizes(big)
        budget = args.stream_ram_gb * GIB
        if min(sizes["video_bytes"], sizes["decoded_bytes"]) < 10 * budget:
            print(f"note: video {sizes['video_bytes'] / budget:.1f}x and decoded frames "
                  f"{sizes['decoded_bytes'] / budget:.1f}x the budget (the target is >= 10x)", file=sys.stderr)  # fmt: skip
        measured = measure(args, big, tiny, workdir)
    finally:
        server.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_report(summarize(args, sizes, measured, generate_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
