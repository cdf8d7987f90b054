"""Benchmark of the scripted PushT expert (issue 7): success, episode length, planning time, motion quality.

    python bench/scripted_expert.py                 # seeds 0..499, one process
    python bench/scripted_expert.py --episodes 50   # seeds 0..49
    python bench/scripted_expert.py --workers 2     # a process pool; times are still per episode, in its worker

Targets (issue 7): success (coverage > 0.95, gym-pusht's own criterion) in >= 99% of episodes within 300 steps; median
episode length <= 120 steps; <= 1.5 s of planning per episode on one core; the commanded target moves <= 20 px per
step; no jitter. Planning time is measured inside the expert (`time.process_time` for CPU, `time.perf_counter` for
wall), excluding the env's own stepping; on a loaded machine wall time exceeds CPU time.

ALOHA (issue 21): `--env.type=aloha --env.task=AlohaTransferCube-v0|AlohaInsertion-v0` runs the scripted bimanual
expert (hfpolicy.experts.aloha_expert) state-only for 400 steps per seed and reports success (gym-aloha's
reward 4, LeRobot's rule), the step of the first success, and seconds per episode (planning in the mocap scene plus
the joint-space episode, which ends at its first success as in LeRobot's evaluation). `--images` renders the top camera
at every step (480x640) of full 400-step episodes, as `hfpolicy record` does: seconds per episode and per step are
then the recording speed (encoding aside). Targets: transfer cube >= 98%, insertion
>= 90% over 200 seeds.

xArm (issue 34): `--env.type=xarm` runs the scripted lift expert (hfpolicy.experts.xarm_expert) state-only
for up to 200 steps per seed (LeRobot's xArm episode length) and reports success (gym-xarm's is_success, which ends
the episode), episode length and seconds per episode. Target: >= 95% over 200 seeds.

Jitter (see `target_motion_stats`): a reversal is a move of the target that turns more than 120 degrees from the
previous move (moves under 2 px skipped); jitter counts the reversals that are not at a phase change (a newly planned
push) plus those that follow another reversal within two moves. Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

_WORKER: dict = {}  # per process: one env and one expert, reused across episodes as a recorder would


def run_seed(seed: int, max_steps: int) -> dict:
    import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
    import gymnasium as gym

    from hfpolicy.experts.pusht_expert import PushTExpert, run_expert_episode, target_motion_stats

    if _WORKER.get("max_steps") != max_steps:
        _WORKER.update(
            env=gym.make("gym_pusht/PushT-v0", obs_type="state", max_episode_steps=max_steps),
            expert=PushTExpert(),
            max_steps=max_steps,
        )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    episode = run_expert_episode(_WORKER["env"], _WORKER["expert"], seed=seed, max_steps=max_steps)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    motion = target_motion_stats(episode.actions, episode.agent_start, episode.phase_starts)
    return {
        "seed": seed,
        "success": episode.success,
        "length": episode.n_steps,
        "max_coverage": float(np.max(episode.coverages)) if len(episode.coverages) else 0.0,
        "planning_cpu_s": episode.planning_cpu_s,
        "planning_wall_s": episode.planning_wall_s,
        "episode_cpu_s": cpu,
        "episode_wall_s": wall,
        "pushes": episode.n_plans,
        **motion,
    }


def run_aloha_seed(seed: int, task: str, images: bool, shadows: bool) -> dict:
    from hfpolicy.envs.aloha import AlohaEnv
    from hfpolicy.experts.aloha_expert import AlohaExpert, run_aloha_expert_episode

    key = (task, images, shadows)
    if _WORKER.get("aloha") != key:
        obs_type = "pixels_agent_pos" if images else "environment_state_agent_pos"
        # With images: full 400-step episodes, as `hfpolicy record` makes them (the recording speed); state-only:
        # episodes end at their first success, as in LeRobot's evaluation (the success rate is the same).
        env = AlohaEnv(task, obs_type, shadows=shadows, terminate_on_success=not images)
        _WORKER.update(aloha=key, env=env, expert=AlohaExpert())
    wall0, cpu0 = time.perf_counter(), time.process_time()
    episode = run_aloha_expert_episode(_WORKER["env"], _WORKER["expert"], seed)
    return {
        "seed": seed,
        "success": episode.success,
        "first_success_step": episode.first_success_step,
        "max_reward": float(episode.rewards.max()),
        "length": episode.n_steps,
        "episode_wall_s": time.perf_counter() - wall0,
        "episode_cpu_s": time.process_time() - cpu0,
    }


def aloha_main(args) -> int:
    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    started = time.perf_counter()
    work = [seeds, [args.task] * len(seeds), [args.images] * len(seeds), [args.shadows] * len(seeds)]
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(run_aloha_seed, *work))
    else:
        rows = []
        for i, seed in enumerate(seeds):
            rows.append(run_aloha_seed(seed, args.task, args.images, args.shadows))
            if (i + 1) % 10 == 0 or i + 1 == len(seeds):
                done = sum(r["success"] for r in rows)
                print(f"  {i + 1}/{len(seeds)} episodes, {done} successes", file=sys.stderr, flush=True)
    success = np.array([r["success"] for r in rows])
    firsts = [r["first_success_step"] for r in rows if r["success"]]
    wall = float(np.mean([r["episode_wall_s"] for r in rows]))
    target = {"AlohaTransferCube-v0": 0.98, "AlohaInsertion-v0": 0.90}[args.task]
    result = {
        "task": args.task,
        "episodes": len(rows),
        "success_rate": float(success.mean()),
        "target": target,
        "median_first_success_step": float(np.median(firsts)) if firsts else None,
        "mean_max_reward": float(np.mean([r["max_reward"] for r in rows])),
        "mean_episode_steps": float(np.mean([r["length"] for r in rows])),
        "episode_wall_s": wall,
        "episode_cpu_s": float(np.mean([r["episode_cpu_s"] for r in rows])),
        "images": args.images,
        "shadows": args.shadows,
        "s_per_step": float(np.sum([r["episode_wall_s"] for r in rows]) / np.sum([r["length"] for r in rows])),
        "failed_seeds": [r["seed"] for r in rows if not r["success"]],
        "workers": args.workers,
        "total_wall_s": time.perf_counter() - started,
    }
    print(f"scripted ALOHA expert, {args.task}, seeds {seeds[0]}..{seeds[-1]} ({len(rows)} episodes)")
    mark = "ok" if result["success_rate"] >= target else "MISSED"
    print(f"{'success rate':<28} {result['success_rate']:>10.3f} {'>= ' + str(target):>8}  {mark}")
    print(f"{'median first success step':<28} {result['median_first_success_step']!s:>10}")
    print(f"{'s/episode (wall)':<28} {wall:>10.2f}   ({'with' if args.images else 'without'} images)")
    if result["failed_seeds"]:
        print(f"failed seeds: {result['failed_seeds']}")
    print(json.dumps(result))
    return 0


def run_xarm_seed(seed: int) -> dict:
    from hfpolicy.envs import XarmEnvConfig
    from hfpolicy.experts.xarm_expert import XarmExpert, run_xarm_expert_episode

    if "xarm" not in _WORKER:
        env = XarmEnvConfig(obs_type="environment_state_agent_pos").make_single()
        _WORKER.update(xarm=True, env=env, expert=XarmExpert())
    wall0, cpu0 = time.perf_counter(), time.process_time()
    episode = run_xarm_expert_episode(_WORKER["env"], _WORKER["expert"], seed)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"seed": seed, "success": episode.success, "length": episode.n_steps, "wall_s": wall, "cpu_s": cpu}


def xarm_main(args) -> int:
    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    started = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(run_xarm_seed, seeds))
    else:
        rows = [run_xarm_seed(seed) for seed in seeds]
    success = np.array([r["success"] for r in rows])
    lengths = [r["length"] for r in rows if r["success"]] or [0]
    result = {
        "env": "xarm",
        "episodes": len(rows),
        "success_rate": float(success.mean()),
        "target": 0.95,
        "median_length_successes": float(np.median(lengths)),
        "max_length_successes": int(np.max(lengths)),
        "episode_wall_s": float(np.mean([r["wall_s"] for r in rows])),
        "episode_cpu_s": float(np.mean([r["cpu_s"] for r in rows])),
        "failed_seeds": [r["seed"] for r in rows if not r["success"]],
        "workers": args.workers,
        "total_wall_s": time.perf_counter() - started,
    }
    print(f"scripted xArm lift expert, seeds {seeds[0]}..{seeds[-1]} ({len(rows)} episodes)")
    mark = "ok" if result["success_rate"] >= 0.95 else "MISSED"
    print(f"{'success rate':<28} {result['success_rate']:>10.3f} {'>= 0.95':>8}  {mark}")
    print(f"{'median length (successes)':<28} {result['median_length_successes']:>10.0f}")
    print(f"{'s/episode (wall)':<28} {result['episode_wall_s']:>10.2f}")
    if result["failed_seeds"]:
        print(f"failed seeds: {result['failed_seeds']}")
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env.type", dest="env_type", default="pusht", choices=["pusht", "aloha", "xarm"], help="the env"
    )
    parser.add_argument("--env.task", dest="task", default="AlohaTransferCube-v0", help="ALOHA task")
    parser.add_argument("--images", action="store_true", help="ALOHA: render the top camera every step")
    parser.add_argument("--no-shadows", dest="shadows", action="store_false", help="ALOHA: render without shadows")
    parser.add_argument("--episodes", type=int, default=500, help="run seeds first_seed .. first_seed+episodes-1")
    parser.add_argument("--first-seed", type=int, default=0, help="first env seed")
    parser.add_argument("--max-steps", type=int, default=300, help="step limit per episode (gym-pusht's is 300)")
    parser.add_argument("--workers", type=int, default=1, help="processes (times stay per episode, per process)")
    parser.add_argument("--per-episode", action="store_true", help="also print one row per episode")
    args = parser.parse_args(argv)
    if args.env_type == "aloha":
        return aloha_main(args)
    if args.env_type == "xarm":
        return xarm_main(args)

    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    started = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(run_seed, seeds, [args.max_steps] * len(seeds)))
    else:
        rows = []
        for i, seed in enumerate(seeds):
            rows.append(run_seed(seed, args.max_steps))
            if (i + 1) % 25 == 0 or i + 1 == len(seeds):
                done = sum(r["success"] for r in rows)
                print(f"  {i + 1}/{len(seeds)} episodes, {done} successes", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started

    if args.per_episode:
        print(
            f"{'seed':>5} {'ok':>3} {'len':>4} {'cov':>6} {'pushes':>6} {'plan_cpu_s':>10} {'max_step':>8} {'rev':>4} {'jit':>4}"
        )
        for r in rows:
            print(
                f"{r['seed']:>5} {'y' if r['success'] else 'n':>3} {r['length']:>4} {r['max_coverage']:>6.3f} "
                f"{r['pushes']:>6} {r['planning_cpu_s']:>10.3f} {r['max_step_px']:>8.2f} {r['reversals']:>4.0f} "
                f"{r['jitter']:>4.0f}"
            )

    lengths = np.array([r["length"] for r in rows])
    success = np.array([r["success"] for r in rows])
    ok_lengths = lengths[success] if success.any() else lengths
    result = {
        "episodes": len(rows),
        "success_rate": float(success.mean()),
        "median_length": float(np.median(lengths)),
        "p90_length": float(np.percentile(lengths, 90)),
        "mean_length": float(lengths.mean()),
        "max_length": int(lengths.max()),
        "median_length_successes": float(np.median(ok_lengths)),
        "s_per_episode": float(np.mean([r["planning_wall_s"] for r in rows])),
        "cpu_s_per_episode": float(np.mean([r["planning_cpu_s"] for r in rows])),
        "max_cpu_s_episode": float(np.max([r["planning_cpu_s"] for r in rows])),
        "episode_wall_s": float(np.mean([r["episode_wall_s"] for r in rows])),
        "max_target_step_px": float(np.max([r["max_step_px"] for r in rows])),
        "pushes_per_episode": float(np.mean([r["pushes"] for r in rows])),
        "reversals_per_episode": float(np.mean([r["reversals"] for r in rows])),
        "jitter_per_episode": float(np.mean([r["jitter"] for r in rows])),
        "episodes_with_jitter": int(sum(r["jitter"] > 0 for r in rows)),
        "failed_seeds": [r["seed"] for r in rows if not r["success"]],
        "workers": args.workers,
        "total_wall_s": elapsed,
    }
    checks = [
        ("success rate", f"{result['success_rate']:.3f}", ">= 0.99", result["success_rate"] >= 0.99),
        ("median length (steps)", f"{result['median_length']:.0f}", "<= 120", result["median_length"] <= 120),
        ("p90 length (steps)", f"{result['p90_length']:.0f}", "", None),
        ("planning s/episode (wall)", f"{result['s_per_episode']:.3f}", "", None),
        (
            "planning s/episode (CPU)",
            f"{result['cpu_s_per_episode']:.3f}",
            "<= 1.5",
            result["cpu_s_per_episode"] <= 1.5,
        ),
        (
            "max target step (px)",
            f"{result['max_target_step_px']:.2f}",
            "<= 20",
            result["max_target_step_px"] <= 20.0 + 1e-3,
        ),
        ("reversals/episode", f"{result['reversals_per_episode']:.2f}", "", None),
        ("jitter/episode", f"{result['jitter_per_episode']:.3f}", "0", result["jitter_per_episode"] == 0),
        ("pushes/episode", f"{result['pushes_per_episode']:.1f}", "", None),
    ]
    print(f"scripted PushT expert, seeds {seeds[0]}..{seeds[-1]} ({len(rows)} episodes, {args.workers} worker(s))")
    print(f"{'metric':<28} {'value':>10} {'target':>8}  ")
    for name, value, target, passed in checks:
        mark = "" if passed is None else ("ok" if passed else "MISSED")
        print(f"{name:<28} {value:>10} {target:>8}  {mark}")
    if result["failed_seeds"]:
        print(f"failed seeds: {result['failed_seeds']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
