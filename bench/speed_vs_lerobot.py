"""hfpolicy against LeRobot 0.6.1, side by side in one run: the classic image Diffusion Policy's and ACT's CPU speed
(issues 20 and 36).

    python bench/speed_vs_lerobot.py --lerobot-python /work/lerobot-venv/bin/python [--rounds 2] [--repeats 3]
    python bench/speed_vs_lerobot.py ... --state      # also the cpu recipe's state U-Net (hfpolicy alone)
    python bench/speed_vs_lerobot.py ... --profile    # also where hfpolicy's train step and chunk spend their time

Each round runs `bench/policy.py` (this venv) and then `bench/lerobot_speed.py` (LeRobot's side venv, never a
dependency of hfpolicy) as separate processes, one after the other, so that both see the same machine; the figures are
the medians over rounds of each process's own medians, and the ratio is hfpolicy's time over LeRobot's (the issue's
target: <= 0.5 for the train step at batch 64 and for the DDIM-10 and DDPM-100 chunks at batch 1). Each chunk figure
is also given as a multiple of its weight-bandwidth floor (the bytes of weights a chunk reads, from bench/policy.py,
over the memory read bandwidth bench/policy.py measured in the same round, median over rounds; LeRobot's model has
the same weights, read in float32). The JSON line has the CPU's instruction sets and the bandwidths. Both use torch's
default thread count (one per core). Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = (
    "train_step_s_b64",
    "chunk_latency_s_b1_ddim10",
    "chunk_latency_s_b1_ddpm100",
    "chunk_latency_s_b50_ddim10",
    "act_chunk_latency_s_b1",
)
TARGET_KEYS = KEYS[:3]
TARGET_RATIO = 0.5


def last_json(command: list[str]) -> dict:
    """Run a benchmark process; its last stdout line is its JSON result."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def profile_hfpolicy(threads: int | None) -> dict:
    """torch.profiler's top operators (self CPU time) for one hfpolicy train step at batch 64 and one DDIM-10 chunk."""
    sys.path.insert(0, str(HERE))
    import torch
    from policy import bench_chunk, make_policy, training_batch  # bench/policy.py

    from hfpolicy.training.setup import make_optimizer

    if threads is not None:
        torch.set_num_threads(threads)
    policy = make_policy()
    optimizer = make_optimizer(policy, "cpu")
    batch = training_batch(policy.config, 64)
    tables = {}
    for name, step in (
        ("train_step_b64", lambda: (policy(batch)["loss"].backward(), optimizer.step(), optimizer.zero_grad())),
        ("chunk_b1_ddim10", lambda: bench_chunk(policy, 1, "DDIM", 10, 1)),
    ):
        policy.train(name.startswith("train"))
        step()  # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events) or 1
        tables[name] = [
            {
                "op": e.key,
                "self_s": round(e.self_cpu_time_total / 1e6, 3),
                "share": round(e.self_cpu_time_total / total, 3),
            }
            for e in events[:12]
        ]
    return tables


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lerobot-python", default=os.environ.get("HFPOLICY_LEROBOT_PYTHON"), required=False)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--state", action="store_true", help="also time the cpu recipe's state U-Net (hfpolicy)")
    parser.add_argument("--profile", action="store_true", help="also profile hfpolicy's train step and chunk")
    args = parser.parse_args()
    if not args.lerobot_python or not Path(args.lerobot_python).exists():
        sys.exit(
            "--lerobot-python: give the python of a side venv with `pip install lerobot==0.6.1` (or set HFPOLICY_LEROBOT_PYTHON)"
        )
    threads = [] if args.threads is None else ["--threads", str(args.threads)]
    ours = [sys.executable, str(HERE / "policy.py"), "--policy", "all", "--repeats", str(args.repeats), *threads]
    theirs = [args.lerobot_python, str(HERE / "lerobot_speed.py"), "--repeats", str(args.repeats), *threads]
    load_before, start = os.getloadavg()[0], time.perf_counter()
    runs: dict[str, list[dict]] = {"hfpolicy": [], "lerobot": []}
    for round_index in range(args.rounds):
        for name, command in (("hfpolicy", ours), ("lerobot", theirs)):
            runs[name].append(last_json(command))
            print(
                f"round {round_index + 1}, {name}: " + ", ".join(f"{k}={runs[name][-1][k]}" for k in KEYS), flush=True
            )
    first = runs["hfpolicy"][0]
    result: dict = {"rounds": args.rounds, "repeats": args.repeats, "threads": first["torch_threads"]}
    result["instruction_sets"] = first["instruction_sets"]
    for name in ("memory_read_gb_s", "matvec_gb_s"):
        result[name] = statistics.median(run[name] for run in runs["hfpolicy"])
    weight_bytes = {**first["chunk_weight_bytes"], "act_chunk_latency_s_b1": first["act_chunk_weight_bytes"]}
    floor_s = {key: value / (result["memory_read_gb_s"] * 1e9) for key, value in weight_bytes.items()}
    sets = ", ".join(name for name, present in result["instruction_sets"].items() if present) or "none known"
    print(f"\nCPU: {sets}; memory read {result['memory_read_gb_s']} GB/s (median over rounds)")
    print(f"{'measure':<34} {'hfpolicy':>10} {'LeRobot':>10} {'ratio':>7} {'x floor':>15}")
    for key in KEYS:
        ours_s = statistics.median(run[key] for run in runs["hfpolicy"])
        theirs_s = statistics.median(run[key] for run in runs["lerobot"])
        result[key] = {"hfpolicy": ours_s, "lerobot": theirs_s, "ratio": round(ours_s / theirs_s, 3)}
        floors = ""
        if key in floor_s:
            result[key]["floor_s"] = round(floor_s[key], 3)
            result[key]["x_floor"] = [round(ours_s / floor_s[key], 2), round(theirs_s / floor_s[key], 2)]
            floors = " / ".join(f"{x:.1f}" for x in result[key]["x_floor"])
        print(f"{key:<34} {ours_s:>10.3f} {theirs_s:>10.3f} {ours_s / theirs_s:>7.2f} {floors:>15}")
    bf16 = "chunk_latency_s_b1_ddim10_bf16"
    if bf16 in first:
        ours_s = statistics.median(run[bf16] for run in runs["hfpolicy"])
        floor = first["chunk_weight_bytes"][bf16] / (result["memory_read_gb_s"] * 1e9)
        result[bf16] = {"hfpolicy": ours_s, "floor_s": round(floor, 3), "x_floor": round(ours_s / floor, 2)}
        print(f"{bf16:<34} {ours_s:>10.3f} {'':>10} {'':>7} {ours_s / floor:>15.1f}")
    result["meets_target"] = all(result[key]["ratio"] <= TARGET_RATIO for key in TARGET_KEYS)
    result["hfpolicy_runs"], result["lerobot_runs"] = runs["hfpolicy"], runs["lerobot"]
    if args.state:
        state = last_json(
            [sys.executable, str(HERE / "policy.py"), "--policy", "state", "--repeats", str(args.repeats), *threads]
        )
        result["state"] = {k: v for k, v in state.items() if k.startswith("state_")}
        for key, value in result["state"].items():
            print(f"{key:<44} {value:>10}")
    if args.profile:
        result["profile"] = profile_hfpolicy(args.threads)
        for name, table in result["profile"].items():
            print(f"\nhfpolicy {name}: top operators by self CPU time")
            for row in table:
                print(f"  {row['op'][:48]:<48} {row['self_s']:>8.3f} s {100 * row['share']:>5.1f}%")
    result["wall_min"] = round((time.perf_counter() - start) / 60, 2)
    result["load_avg_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
