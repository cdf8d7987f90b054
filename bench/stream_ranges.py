"""Bytes fetched per episode when streamed video is read by byte ranges (issue 22), against the video file's size.

    python bench/stream_ranges.py [--episodes 20] [--zarr PATH] [--block_kb 1024]

Converts the first --episodes PushT demos of the zarr (one video file holds them all), serves the dataset from the
Hub-protocol test server of tests/hub_server.py on 127.0.0.1, and decodes each episode once through
StreamingPolicyDataset(stream_video="range"): the bytes fetched for it (RemoteFiles.range_bytes), the range requests
the server saw for the video file, and the seconds it took, beside the file's size and the episode's share of the
file (its frames / all frames). Then the same with stream_video="download" (the file fetched once, then read from
disk). Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

DEFAULT_ZARR = Path(__file__).resolve().parents[2] / "shared" / "data" / "pusht_cchi_v7_replay.zarr"
REPO_ID = "user/pusht-ranges"
CAMERA = "observation.image"


def decode_each_episode(dataset, server, video: str) -> list[dict]:
    """Decodes the episodes one by one: per episode, its frames, bytes fetched, requests of `video`, seconds."""
    rows = []
    for pos in range(dataset.num_episodes):
        start, end = (int(v) for v in dataset.episode_bounds[pos])
        fetched, seen, began = dataset.files.range_bytes, len(server.requests), time.perf_counter()
        dataset.get_batch(range(start, end))
        gets = sum(1 for method, url in server.requests[seen:] if method == "GET" and url.endswith(video))
        rows.append(
            {"frames": end - start, "bytes": dataset.files.range_bytes - fetched, "gets": gets,
             "seconds": time.perf_counter() - began}
        )  # fmt: skip
    return rows


def measure(args, server) -> dict:
    from hfpolicy.datasets import StreamingPolicyDataset

    kwargs = {"delta_timestamps": {CAMERA: [0.0]}, "range_block_bytes": args.block_kb * 1024}
    ranged = StreamingPolicyDataset(REPO_ID, stream_video="range", **kwargs)
    video = ranged.meta.video_file(ranged.episodes[0], CAMERA)
    size = ranged.files.sizes[video]
    total_frames = ranged.num_frames
    rows = decode_each_episode(ranged, server, video)
    whole = StreamingPolicyDataset(REPO_ID, stream_video="download", **kwargs)
    began, fetches = time.perf_counter(), whole.files.fetches  # the data file was fetched at the start
    whole.get_batch(range(whole.num_frames))
    download_s, video_fetches = time.perf_counter() - began, whole.files.fetches - fetches
    ratios = [r["bytes"] / size for r in rows]
    over_share = [r["bytes"] / (size * r["frames"] / total_frames) for r in rows]
    return {
        "episodes": len(rows), "frames": total_frames, "video_file_bytes": size, "block_kb": args.block_kb,
        "bytes_per_episode_mean": round(statistics.mean(r["bytes"] for r in rows)),
        "bytes_per_episode_max": max(r["bytes"] for r in rows),
        "fetched_over_file_mean": round(statistics.mean(ratios), 4), "fetched_over_file_max": round(max(ratios), 4),
        "fetched_over_episode_share_mean": round(statistics.mean(over_share), 2),
        "gets_per_episode_mean": round(statistics.mean(r["gets"] for r in rows), 2),
        "range_all_episodes_bytes": sum(r["bytes"] for r in rows),
        "range_decode_s": round(sum(r["seconds"] for r in rows), 2),
        "download_video_fetches": video_fetches, "download_then_decode_s": round(download_s, 2),
        "range_disk_bytes": ranged.files.bytes, "download_disk_bytes": whole.files.bytes,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zarr", type=Path, default=DEFAULT_ZARR)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--block_kb", type=int, default=1024, help="bytes per range request, in KiB")
    args = parser.parse_args()
    from local_hub import start_local_hub

    workdir = Path(tempfile.mkdtemp(prefix="bench_ranges_"))
    server = start_local_hub(workdir)  # before huggingface_hub is imported (below)
    try:
        from hfpolicy.datasets import push_dataset_to_hub
        from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr

        root = convert_pusht_zarr(args.zarr, workdir / "pusht", episodes=list(range(args.episodes)), progress=False)
        push_dataset_to_hub(root, REPO_ID)
        result = measure(args, server)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{result['episodes']} PushT episodes ({result['frames']} frames) in one video file of "
          f"{result['video_file_bytes'] / 1024:.0f} KiB, range blocks of {args.block_kb} KiB")  # fmt: skip
    print(f"range: {result['bytes_per_episode_mean'] / 1024:.0f} KiB fetched per episode on average "
          f"({result['fetched_over_file_mean']:.1%} of the file, max {result['fetched_over_file_max']:.1%}; "
          f"{result['fetched_over_episode_share_mean']:.2f}x the episode's share), "
          f"{result['gets_per_episode_mean']} requests per episode, {result['range_decode_s']} s for all")  # fmt: skip
    print(f"download: {result['download_video_fetches']} video fetch(es), {result['download_then_decode_s']} s for all")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
