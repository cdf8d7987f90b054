"""Which online labels help? The same tiny, fully seeded run as tests/training/test_online.py's learning test (a
state ACT, 4 scripted demos, 600 steps, 16 evaluation seeds) trained offline and with three online rounds under
each `--online.labels`: `recovery` (the expert's demonstration from where a failed episode ended), `expert`
(DAgger: every visited state relabelled by the expert), `policy` (self-imitation: successful episodes only).

    python bench/online_labels.py                 # training seed 1000 (the default, as the test)
    python bench/online_labels.py --seed=1000 --seed=1 --seed=0

Every part is seeded (training, online seeds, per-episode evaluation seeds), so the rewards do not depend on the
machine's load; the seconds do. Prints a table and, last, one JSON line: per (labels, seed) the final avg max
reward, success rate, online episodes kept and frames, and the rounds' seconds.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

LABELS = ("offline", "recovery", "expert", "policy")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from training.tiny_online_run import FLAGS, ONLINE_FLAGS  # noqa: E402  (the learning test's run)


def run_one(labels: str, seed: int, work: Path) -> dict:
    """Trains the tiny run with these labels (or offline) and returns its row."""
    from hfpolicy.training import parse_train_config, train

    out = work / f"{labels}_seed{seed}"
    online = [*ONLINE_FLAGS, f"--online.labels={labels}"] if labels != "offline" else []
    start = time.perf_counter()
    result = train(parse_train_config([*FLAGS, *online, f"--seed={seed}", f"--output_dir={out}"]))
    wall_s = time.perf_counter() - start
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "online/round_s" in line]
    return {
        "labels": labels,
        "seed": seed,
        "avg_max_reward": round(result.eval_summary["avg_max_reward"], 4),
        "success_rate": round(result.eval_summary["pc_success"] / 100, 4),
        "online_episodes": int(rounds[-1]["online/episodes"]) if rounds else 0,
        "online_frames": int(rounds[-1]["online/frames"]) if rounds else 0,
        "rounds_s": round(sum(r["online/round_s"] for r in rounds), 1),
        "wall_s": round(wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--seed", type=int, action="append", help="training seed (repeatable; default 1000, --seed's default)"
    )
    parser.add_argument("--labels", action="append", choices=LABELS, help="only these (repeatable; default all)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hfpolicy-online-labels-"))
    os.environ["HFPOLICY_CACHE"] = str(work / "cache")  # the 4 demos are recorded once, for every run
    load_before = os.getloadavg()[0]
    rows = [run_one(labels, seed, work) for seed in args.seed or [1000] for labels in args.labels or LABELS]
    print(f"| {'labels':<9} | seed | avg max reward | success | online episodes (frames) | rounds s | wall s |")
    print(f"|{'-' * 11}|------|----------------|---------|--------------------------|----------|--------|")
    for r in rows:
        episodes = f"{r['online_episodes']} ({r['online_frames']})"
        print(
            f"| {r['labels']:<9} | {r['seed']:>4} | {r['avg_max_reward']:>14.3f} | {100 * r['success_rate']:>6.1f}% "
            f"| {episodes:>24} | {r['rounds_s']:>8.1f} | {r['wall_s']:>6.1f} |"
        )
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps({"rows": rows, "load_avg_before_after": load, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
