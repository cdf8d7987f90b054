"""Benchmark of training throughput: is data loading ever the bottleneck? (issue 6)

    python bench/train_throughput.py                  # converts 20 zarr episodes into a temp dir first (not timed)
    python bench/train_throughput.py --root DIR       # a converted PushT dataset
    python bench/train_throughput.py --steps 3        # fewer timed steps (each is seconds on a CPU)

Diffusion Policy in the paper's PushT image configuration, batch 64, on this machine's device:
- samples_per_s_w0 / samples_per_s_w2: the real training loop (`hfpolicy.training.train`, its DataLoader with 0 or 2
  workers, its optimizer, EMA and LR schedule), steady state: the mean step time of the last `--steps` steps after
  `--warmup` steps (the videos are decoded into the frame cache before the first step, as `train` always does);
- samples_per_s_model_only: forward + backward + AdamW step + EMA on one batch already in memory, the ceiling the
  loop can reach; data loading is "not the bottleneck" when the loop is within 5% of it.
Prints a table; the LAST line is one JSON object.

For scale: LeRobot 0.6.1's training loop on the 2-core dev machine: 7.0 samples/s.
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

DEFAULT_ZARR = Path(__file__).resolve().parents[2] / "shared" / "data" / "pusht_cchi_v7_replay.zarr"


def loop_samples_per_s(root: Path, num_workers: int, batch_size: int, warmup: int, steps: int, work: Path) -> dict:
    """Runs the real training loop and reads its per-step timings back from metrics.jsonl."""
    from hfpolicy.constants import METRICS_FILE
    from hfpolicy.training import parse_train_config, train

    out = work / f"run_w{num_workers}"
    cfg = parse_train_config(
        [
            f"--dataset.root={root}",
            f"--output_dir={out}",
            f"--steps={warmup + steps}",
            f"--batch_size={batch_size}",
            f"--num_workers={num_workers}",
            "--log_freq=1",
            "--save_freq=0",
            "--keep_last_checkpoints=1",
            "--eval.freq=0",
            "--tracker=none",
            "--progress=false",
        ]
    )
    train(cfg)
    entries = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    timed = [e for e in entries if "step_s" in e][warmup:]
    step_s = sum(e["step_s"] for e in timed) / len(timed)
    data_s = sum(e["data_s"] for e in timed) / len(timed)
    shutil.rmtree(out, ignore_errors=True)
    return {"step_s": step_s, "data_s": data_s, "samples_per_s": batch_size / step_s}


def model_only_samples_per_s(root: Path, batch_size: int, warmup: int, steps: int) -> dict:
    """Forward + backward + optimizer + EMA on one in-memory batch: the loop's ceiling."""
    from hfpolicy.datasets import DatasetMeta, PolicyDataset, dataset_to_policy_features
    from hfpolicy.policies import make_policy
    from hfpolicy.policies.diffusion.configuration import DiffusionConfig
    from hfpolicy.policies.ema import EMA
    from hfpolicy.training.setup import make_optimizer

    meta = DatasetMeta.load(root)
    inputs, outputs = dataset_to_policy_features(meta.features)
    config = DiffusionConfig(input_features=inputs, output_features=outputs)
    dataset = PolicyDataset("bench", root=root, delta_timestamps=config.delta_timestamps(meta.fps))
    batch = dataset[list(range(batch_size))]
    policy = make_policy(config, dataset.stats).train()
    optimizer = make_optimizer(policy, "cpu")  # exactly the trainer's optimizer
    ema = EMA(policy, config.ema_power, config.ema_max_decay)
    times = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        loss = policy(batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ema.step(policy)
        times.append(time.perf_counter() - start)
    step_s = sum(times[warmup:]) / steps
    params_m = sum(p.numel() for p in policy.parameters()) / 1e6
    return {"step_s": step_s, "samples_per_s": batch_size / step_s, "params_m": params_m}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=None, help="a converted PushT dataset (default: convert now)")
    parser.add_argument("--zarr", type=Path, default=DEFAULT_ZARR, help="the zarr to convert when --root is not given")
    parser.add_argument("--episodes", type=int, default=20, help="zarr episodes to convert when --root is not given")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2, help="steps not timed")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per measurement")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hfpolicy-bench-train-"))
    try:
        root = args.root
        if root is None:
            from hfpolicy.datasets import convert_pusht_zarr

            root = convert_pusht_zarr(
                args.zarr, work / "pusht", repo_id="bench/pusht", episodes=list(range(args.episodes))
            )
        model = model_only_samples_per_s(root, args.batch_size, args.warmup, args.steps)
        w0 = loop_samples_per_s(root, 0, args.batch_size, args.warmup, args.steps, work)
        w2 = loop_samples_per_s(root, 2, args.batch_size, args.warmup, args.steps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("model only (one in-memory batch)", model["step_s"], None, model["samples_per_s"]),
        ("training loop, num_workers=0", w0["step_s"], w0["data_s"], w0["samples_per_s"]),
        ("training loop, num_workers=2", w2["step_s"], w2["data_s"], w2["samples_per_s"]),
    ]
    print(f"Diffusion Policy PushT image config ({model['params_m']:.1f} M params), batch {args.batch_size}, "
          f"{torch.get_num_threads()} torch threads, device cpu")  # fmt: skip
    print(f"{'set-up':<36} {'step s':>8} {'data s':>8} {'samples/s':>10} {'vs model':>9}")
    for name, step_s, data_s, sps in rows:
        data = f"{data_s:8.3f}" if data_s is not None else f"{'':>8}"
        print(f"{name:<36} {step_s:8.3f} {data} {sps:10.2f} {100 * sps / model['samples_per_s']:8.1f}%")
    result = {
        "samples_per_s_w0": round(w0["samples_per_s"], 3),
        "samples_per_s_w2": round(w2["samples_per_s"], 3),
        "samples_per_s_model_only": round(model["samples_per_s"], 3),
        "data_s_per_step_w0": round(w0["data_s"], 4),
        "data_s_per_step_w2": round(w2["data_s"], 4),
        "loop_vs_model_w0": round(w0["samples_per_s"] / model["samples_per_s"], 4),
        "loop_vs_model_w2": round(w2["samples_per_s"] / model["samples_per_s"], 4),
        "batch_size": args.batch_size,
        "params_m": round(model["params_m"], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
