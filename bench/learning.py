"""Does the main job produce a policy that works? Runs README's main command with the cpu recipe end to end, as a new
user would (record the scripted demonstrations, train, evaluate on 500 seeds), and measures success and minutes.
With --env aloha the same for ALOHA's cpu recipe (examples/train_aloha.py: 100 scripted demos, a state-input ACT,
200 evaluation seeds).

    python bench/learning.py                          # accelerate launch examples/train_pusht.py --recipe=cpu
    python bench/learning.py --reuse-recording        # keep the recorded demos between runs (record_min ~ 0)
    python bench/learning.py -- --dataset.root=data/pusht_human --dataset.scripted_episodes=0   # other data
    python bench/learning.py --online                 # the cpu recipe with online training (ONLINE_FLAGS below)
    python bench/learning.py --human                  # the 206 human demos: ../shared/data zarr, converted first
    python bench/learning.py --env aloha              # accelerate launch examples/train_aloha.py --recipe=cpu
    python bench/learning.py --env aloha --env.task=AlohaInsertion-v0    # the insertion task
    python bench/learning.py --env xarm               # accelerate launch examples/train_xarm.py --recipe=cpu (TD-MPC)
    python bench/learning.py --env xarm -- --policy.type=act --steps=1800   # another policy on the same recording
    python bench/learning.py --env xarm --online      # ... --online_rl: offline, then online RL (FOWM)
    python bench/learning.py --env xarm --pure-online # ... --pure_online: online RL without demonstrations

With --human the zarr (--zarr, default ../shared/data/pusht_cchi_v7_replay.zarr beside the repo) is converted with
`hfpolicy convert pusht-zarr --environment_state=true` into the run's work folder (record_min is then the conversion)
and trained with examples/train_pusht.py's human-demo preset (chosen because the data are not a scripted recording).
The JSON line then also has the paper's statistics over the periodic 50-episode evaluations of the same run:
paper_best_success / paper_best_avg_max_reward (the best evaluation) and paper_last10_success /
paper_last10_avg_max_reward (the mean of the last 10), as the diffusion_policy paper reports them (0.95 / 0.91).

Flags after `--` go to examples/train_pusht.py (examples/train_<env>.py with --env aloha / xarm). The recording goes to a
fresh cache folder (so its time counts) unless --reuse-recording. Prints a table and, last, one JSON line:
success_rate, avg_max_reward, ci95, n_episodes, wall_min, record_min, train_min, eval_min, train_steps, budget (the
--budget.minutes choice recorded in train_config.json: minutes, planned_steps, chosen_steps, step_s, ...), params_m,
curve ([minutes, success_rate] per evaluation), recipe, policy, dataset, env (pusht, xarm, or aloha/<task>), and with
--online also online_episodes, online_frames, online_env_steps, online_min, labels and online_curve ([minutes,
success rate of the round's policy episodes] per round: the policy measured on fresh seeds while it trains). With
--env xarm, --online and --pure-online run examples/train_xarm.py's own online settings (its --online_rl and
--pure_online; PushT's ONLINE_FLAGS below are PushT's).
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL_LINE = re.compile(r"step (\d+): eval success ([\d.]+)%, avg max reward (-?[\d.]+) \((\d+) episodes\)")
PARAMS = re.compile(r"policy, ([\d.]+) M params")
ONLINE_LINE = re.compile(r"step (\d+): online round (\d+): success (\d+)%, (\d+) online episodes \((\d+) frames\)")
# The online preset measured by --online: 3000 steps (the offline recipe's 5000 do not fit 30 minutes), and from
# step 1400 on, every 400 steps, 50 episodes of the policy; each failed one is replaced by the expert's demonstration
# from where it ended (recovery demos: ~5 ms of expert per step, against ~15-40 ms for DAgger labels of every state);
# 30% of every batch from the online data.
ONLINE_FLAGS = [
    "--steps=3000",
    "--eval.freq=3000",  # the final 500-episode evaluation only: the rounds' success rates are the curve
    "--online.every=400",
    "--online.start_step=1400",
    "--online.n_episodes=50",
    "--online.labels=recovery",
    "--online.ratio=0.3",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default=None, help="run folder (default: a fresh temporary folder)")
    parser.add_argument("--reuse-recording", action="store_true", help="record into ~/.cache/hfpolicy (kept)")
    parser.add_argument("--plot", default=None, help="also draw success over minutes into this PNG (docs/results.md's)")
    parser.add_argument("--online", action="store_true", help="the cpu recipe with online training (ONLINE_FLAGS)")
    parser.add_argument("--compare", default=None, help="a JSON line of another run, drawn beside this one")
    parser.add_argument("--human", action="store_true", help="the 206 human demos (converted from --zarr)")
    parser.add_argument("--zarr", default=str(ROOT.parent / "shared" / "data" / "pusht_cchi_v7_replay.zarr"))
    parser.add_argument("--pure-online", action="store_true", help="with --env xarm: online RL, no demonstrations")
    parser.add_argument("--env", choices=("pusht", "aloha", "xarm"), default="pusht", help="the task family's example")
    parser.add_argument("--env.task", dest="env_task", default=None, help="with --env aloha: AlohaInsertion-v0, ...")
    parser.add_argument("train_flags", nargs="*", help="flags for the example (after --)")
    args = parser.parse_args()
    if args.env == "aloha" and (args.online or args.human):
        parser.error("--online and --human are PushT's (its expert, its human demos); leave them out with --env aloha")
    if args.env == "xarm" and args.human:
        parser.error("--human is PushT's (its human demos); leave it out with --env xarm")
    if args.pure_online and (args.env != "xarm" or args.online):
        parser.error("--pure-online is examples/train_xarm.py's (TD-MPC without demonstrations): use it with --env xarm "
                     "and without --online")  # fmt: skip
    if args.env_task is not None and args.env != "aloha":
        parser.error("--env.task names an ALOHA task: add --env aloha")

    work = Path(tempfile.mkdtemp(prefix="hfpolicy-learning-"))
    output_dir = Path(args.output_dir) if args.output_dir else work / "run"
    env = dict(os.environ)
    if not args.reuse_recording:
        env["HFPOLICY_CACHE"] = str(work / "cache")
    data_flags = convert_human_demos(Path(args.zarr), work) if args.human else []
    script = ROOT / "examples" / f"train_{args.env}.py"
    task_flags = [f"--env.task={args.env_task}"] if args.env_task else []
    command = [
        sys.executable, "-m", "accelerate.commands.launch", str(script),
        "--recipe=cpu", f"--output_dir={output_dir}", "--progress=false", *online_flags(args),
        *data_flags, *task_flags, *args.train_flags,
    ]  # fmt: skip
    print("running:", " ".join(command), flush=True)
    load_before = os.getloadavg()
    start = time.perf_counter()
    marks: dict[str, float] = {}
    curve: list[list[float]] = []
    online_curve: list[list[float]] = []
    params_m = None
    with open(work / "stderr.log", "w") as stderr:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1)
        for line in process.stdout:
            now = (time.perf_counter() - start) / 60
            print(f"[{now:6.2f} min] {line}", end="", flush=True)
            if line.startswith("recording ") and "record_start" not in marks:
                marks["record_start"] = now
            if line.startswith("hfpolicy train:"):
                marks["train_start"] = now
                found = PARAMS.search(line)
                params_m = float(found.group(1)) if found else None
            found = EVAL_LINE.search(line)
            if found:
                curve.append([round(now, 2), float(found.group(2)) / 100])
            found = ONLINE_LINE.search(line)
            if found:
                online_curve.append([round(now, 2), float(found.group(3)) / 100])
        returncode = process.wait()
    wall_min = (time.perf_counter() - start) / 60
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_min = (children.ru_utime + children.ru_stime) / 60
    if returncode != 0:
        sys.exit(f"the run failed (exit {returncode}); see {work / 'stderr.log'}")

    metrics = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line]
    evals = [m for m in metrics if "eval/pc_success" in m]
    eval_min = sum(m["eval/eval_s"] for m in evals) / 60
    rounds = [m for m in metrics if "online/round_s" in m]
    online_min = sum(m["online/round_s"] for m in rounds) / 60
    final_step = evals[-1]["step"]
    final = json.loads((output_dir / "eval" / f"step_{final_step:06d}" / "eval_info.json").read_text())["aggregated"]
    train_config = json.loads((output_dir / "train_config.json").read_text())
    record_min = marks.get("train_start", 0.0) - marks["record_start"] if "record_start" in marks else 0.0
    if args.human:
        record_min = CONVERSION_MIN[0]
        wall_min += record_min
    result = {
        "success_rate": final["pc_success"] / 100,
        "avg_max_reward": final["avg_max_reward"],
        "ci95": [round(x / 100, 4) for x in final["pc_success_ci95"]],
        "n_episodes": final["n_episodes"],
        "wall_min": round(wall_min, 2),
        "cpu_min": round(cpu_min, 2),  # CPU time of the command: its wall time on an otherwise idle machine
        "record_min": round(record_min, 2),
        "train_min": round(wall_min - record_min - eval_min - online_min, 2),  # includes start-up and compiling
        "eval_min": round(eval_min, 2),
        "train_steps": train_config["steps"],
        # --budget.minutes' choice: the minutes, the planned and chosen steps, the measured step and eval episode time
        "budget": {k: v for k, v in train_config.get("budget", {}).items() if v is not None} or None,
        "params_m": params_m,
        "curve": curve,
        "recipe": train_config.get("recipe"),
        "policy": train_config["policy"]["type"],
        "dataset": dataset_name(train_config),
        "env": env_name(train_config["env"]),
        **online_result(train_config, rounds, online_min, online_curve),
        **paper_statistics(evals),
        "load_avg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "output_dir": str(output_dir),
    }
    print()
    print(f"| {'measure':<28} | {'value':<40} |")
    print(f"|{'-' * 30}|{'-' * 42}|")
    reward_name = {"aloha": "avg max reward (0..4)", "xarm": "avg max reward"}.get(args.env, "avg max overlap")
    rows = [
        (f"success ({result['n_episodes']} seeds)", f"{100 * result['success_rate']:.1f}% (95% CI {result['ci95']})"),
        (reward_name, f"{result['avg_max_reward']:.3f}"),
        ("wall time, whole command", f"{wall_min:.1f} min ({cpu_min:.1f} CPU min)"),
        ("  recording", f"{record_min:.1f} min"),
        ("  training (+ start-up)", f"{result['train_min']:.1f} min, {result['train_steps']} steps"),
        ("  evaluations", f"{eval_min:.1f} min"),
        (
            "  online rounds",
            f"{online_min:.1f} min, {result.get('online_episodes', 0)} episodes ({result.get('labels')})",
        ),
        ("policy size", f"{params_m} M parameters"),
        ("curve [min, success]", " ".join(f"[{m:.0f}, {s:.2f}]" for m, s in curve)),
    ]
    if "paper_best_avg_max_reward" in result:
        rows.append(
            (
                "paper stats (50-ep evals)",
                f"best {result['paper_best_avg_max_reward']:.3f} / last-10 mean {result['paper_last10_avg_max_reward']:.3f}"
                f" overlap; success {result['paper_best_success']:.2f} / {result['paper_last10_success']:.2f}",
            )
        )
    for name, value in rows:
        print(f"| {name:<28} | {value:<40} |")
    if args.plot:
        others = [json.loads(Path(args.compare).read_text().splitlines()[-1])] if args.compare else []
        plot_curve([result, *others], Path(args.plot))
    print(json.dumps(result))


def dataset_name(train_config: dict) -> str:
    """The JSON line's `dataset`: the local folder, the Hub repo id, or none (pure online)."""
    online = train_config.get("online", {})
    if online.get("every") and online.get("seed_episodes"):
        return f"none (pure online: {online['seed_episodes']} random-action episodes first)"
    return train_config["dataset"].get("root") or train_config["dataset"]["repo_id"]


def online_flags(args: argparse.Namespace) -> list[str]:
    """The example's flags for --online / --pure-online: PushT's ONLINE_FLAGS, or examples/train_xarm.py's own
    online settings (its --online_rl / --pure_online run its cpu recipe)."""
    if args.env == "xarm":
        return ["--online_rl"] if args.online else ["--pure_online"] if args.pure_online else []
    return ONLINE_FLAGS if args.online else []


def env_name(env: dict) -> str:
    """The JSON line's `env`: "pusht", or "aloha/<task>" (from train_config.json's env)."""
    return f"{env['type']}/{env['task']}" if env.get("task") else env["type"]


POLICY_NAMES = {"diffusion": "Diffusion Policy", "act": "ACT", "tdmpc": "TD-MPC"}
CONVERSION_MIN = [0.0]  # minutes the --human conversion took (counted in wall_min and reported as record_min)


def convert_human_demos(zarr: Path, work: Path) -> list[str]:
    """Converts the diffusion_policy PushT zarr (state inputs: agent position + the block's keypoints) into `work`
    and returns the flags that train on it."""
    if not zarr.is_dir():
        sys.exit(f"--human: {zarr} is not a folder; pass --zarr=PATH to the pusht_cchi_v7_replay.zarr folder")
    out = work / "pusht_human"
    start = time.perf_counter()
    command = [sys.executable, "-m", "hfpolicy.cli", "convert", "pusht-zarr", str(zarr), f"--output_dir={out}"]
    subprocess.run([*command, "--environment_state=true"], check=True)
    CONVERSION_MIN[0] = (time.perf_counter() - start) / 60
    return [f"--dataset.root={out}"]


def paper_statistics(evals: list[dict]) -> dict:
    """The diffusion_policy paper's statistics over the periodic evaluations (all but the final one): the best,
    and the mean of the last 10, of the success rate and of the average max overlap."""
    periodic = evals[:-1]
    if not periodic:
        return {}
    success = [m["eval/pc_success"] / 100 for m in periodic]
    overlap = [m["eval/avg_max_reward"] for m in periodic]
    return {
        "paper_n_evals": len(periodic),
        "paper_best_success": round(max(success), 4),
        "paper_last10_success": round(sum(success[-10:]) / len(success[-10:]), 4),
        "paper_best_avg_max_reward": round(max(overlap), 4),
        "paper_last10_avg_max_reward": round(sum(overlap[-10:]) / len(overlap[-10:]), 4),
    }


def online_result(train_config: dict, rounds: list[dict], online_min: float, online_curve: list) -> dict:
    """The online keys of the JSON line (empty for an offline run)."""
    online = train_config.get("online", {})
    if not online.get("every"):
        return {}
    return {
        "labels": online["labels"],
        "online_episodes": int(rounds[-1]["online/episodes"]) if rounds else 0,
        "online_frames": int(rounds[-1]["online/frames"]) if rounds else 0,
        "online_env_steps": int(rounds[-1].get("online/env_steps", 0)) if rounds else 0,
        "online_min": round(online_min, 2),
        "online_curve": online_curve,
    }


def plot_curve(results: list[dict], path: Path) -> None:
    """Success rate over wall-clock minutes, one colour per run: the periodic evaluations (solid), the online rounds'
    policy episodes (dashed), and the final evaluation with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=80)
    for result, color in zip(results, ("tab:green", "tab:blue", "tab:orange"), strict=False):
        name = result.get("name") or (f"online ({result['labels']})" if result.get("labels") else "offline")
        minutes, success = zip(*result["curve"], strict=True)
        if len(minutes) > 1:
            ax.plot(minutes[:-1], [100 * s for s in success[:-1]], "o-", color=color, label=f"{name}: evals")
        if result.get("online_curve"):
            m, s = zip(*result["online_curve"], strict=True)
            ax.plot(m, [100 * v for v in s], "x--", color=color, label=f"{name}: online rounds")
        low, high = (100 * x for x in result["ci95"])
        final = 100 * success[-1]
        ax.errorbar([minutes[-1]], [final], yerr=[[final - low], [high - final]], fmt="s", color=color, capsize=4)
        ax.annotate(f"{final:.1f}%", (minutes[-1], final), textcoords="offset points", xytext=(-36, 8), color=color)
    ax.set_xlabel("minutes since the command started (record + train + eval)")
    env = results[0].get("env", "pusht")
    ax.set_ylabel(f"{'PushT' if env == 'pusht' else env} success (%)")
    ax.set_ylim(0, 100)
    ax.set_xlim(0, max(65, max(r["wall_min"] for r in results) + 5))
    for minutes in (30, 60):
        ax.axvline(minutes, color="grey", linestyle=":", linewidth=1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(
        f"cpu recipe, {results[0]['params_m']} M-parameter {POLICY_NAMES.get(results[0].get('policy', 'diffusion'), 'policy')}, "
        f"{results[0]['cpus']} CPU cores",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
