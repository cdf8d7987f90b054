"""Eval throughput on PushT (96x96 pixels + agent_pos): batch 1 vs serial batch N vs parallel batch N, against the
env-only floor, with a cheap deterministic policy and (when hfpolicy.policies.diffusion is importable) Diffusion
Policy with DDIM 10 steps.

    python bench/eval_throughput.py [--episodes 50] [--batch_size 50] [--device cpu] [--skip_parallel]

- single_s: the episodes one after another in a vector env of 1 (one policy call per env step).
- serial_s / parallel_s: SyncVectorEnv / AsyncVectorEnv of batch_size envs, one batched policy call per step.
- env_floor_s: the same episodes (same seeds, the same actions, replayed) stepped on a plain gym-pusht env with no
  policy and no vector env: what the env alone costs. serial_vs_floor = env_floor_s / serial_s (target >= 0.9).
  The floor and serial runs alternate `--repeats` times and the best of each is kept (robust to a busy machine).
- The cheap policy predicts a chunk of 8 actions every 8 steps from the state by an elementwise rule, so every
  episode's result is independent of the batch size, which the script checks (identical_results). The env renders
  the 96x96 pixels in every run (floor included); `serial_image_policy_s` is the serial run with the same policy
  declaring the image as an input too, so the image is converted and normalized as for a real vision policy.
- Diffusion Policy (random weights, ResNet18 + U-Net, DDIM 10 steps): batch 1 on `--diffusion_single_episodes`
  episodes vs serial `--diffusion_batch_size` on `--diffusion_episodes`, compared per episode (target: serial >= 5x
  faster per episode). On a CPU one batch-1 prediction takes seconds: shorten the episodes there, e.g.
  `--diffusion_episode_length 16 --diffusion_episodes 16`.

Prints a table, then, as its LAST line, one JSON object with the numbers.
"""

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE  # noqa: E402
from hfpolicy.envs import PushTEnvConfig  # noqa: E402
from hfpolicy.eval import evaluate  # noqa: E402
from hfpolicy.policies import FeatureType, Policy, PolicyConfig, PolicyFeature  # noqa: E402

START_SEED = 100_000


@PolicyConfig.register_subclass("bench_cheap")
@dataclass
class CheapConfig(PolicyConfig):
    """A policy that costs next to nothing: chunk = gain * newest state + offsets (normalized units)."""

    n_obs_steps: int = 2  # observations per prediction
    n_action_steps: int = 8  # actions per predicted chunk


class CheapPolicy(Policy):
    config_class = CheapConfig

    def __init__(self, config: CheapConfig, dataset_stats=None):
        super().__init__(config, dataset_stats)
        steps = torch.arange(config.n_action_steps, dtype=torch.float32)
        self.gain = nn.Parameter(torch.tensor([0.8, 0.8]))
        self.register_buffer("offset", 0.3 * torch.stack([torch.sin(steps), torch.cos(steps)], dim=1))
        self.recorded: list[list[np.ndarray]] | None = None  # when a list: the actions of each episode (batch 1)

    def generate_actions(self, observation: dict[str, Tensor], generator=None, noise=None) -> Tensor:
        return observation[OBS_STATE][:, -1, None, :] * self.gain + self.offset

    def reset(self, seeds=None) -> None:
        super().reset(seeds)
        if self.recorded is not None:
            self.recorded.append([])

    def select_action(self, observation: dict[str, Tensor]) -> Tensor:
        action = super().select_action(observation)
        if self.recorded is not None:
            self.recorded[-1].append(action[0].cpu().numpy().copy())
        return action


def pusht_features() -> tuple[dict[str, PolicyFeature], dict[str, PolicyFeature], dict]:
    inputs = {
        OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
        OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
    }
    outputs = {ACTION: PolicyFeature(FeatureType.ACTION, (2,))}
    stats = {
        OBS_IMAGE: {"mean": [0.5] * 3, "std": [0.25] * 3},
        OBS_STATE: {"min": [0.0, 0.0], "max": [512.0, 512.0]},
        ACTION: {"min": [0.0, 0.0], "max": [512.0, 512.0]},
    }
    return inputs, outputs, stats


def timed_eval(policy: Policy, env_config: PushTEnvConfig, n_envs: int, parallel: bool, episodes: int) -> tuple:
    """(seconds, per-episode records) of `evaluate`, env construction and teardown excluded."""
    env = env_config.make(n_envs, parallel=parallel)
    try:
        result = evaluate(policy, env, episodes, START_SEED, progress=False)
    finally:
        env.close()
    return result.eval_s, [e.to_dict() for e in result.episodes]


def same_episodes(records: list[dict], reference: list[dict]) -> bool:
    """Equal lengths / successes, and rewards to 1e-12 (gym-pusht's coverage can differ in the last bit: it
    intersects a set of shapes whose order follows memory addresses)."""
    return len(records) == len(reference) and all(
        (r["index"], r["length"], r["success"]) == (e["index"], e["length"], e["success"])
        and abs(r["sum_reward"] - e["sum_reward"]) <= 1e-12 * max(1.0, abs(e["sum_reward"]))
        for r, e in zip(records, reference, strict=True)
    )


def env_floor(env_config: PushTEnvConfig, recorded: list[list[np.ndarray]]) -> float:
    """Seconds to reset and step one plain env through the recorded episodes (no policy, no vector env)."""
    env = env_config.make_single()
    try:
        start = time.perf_counter()
        for index, actions in enumerate(recorded):
            env.reset(seed=START_SEED + index)
            for action in actions:
                env.step(action)
        return time.perf_counter() - start
    finally:
        env.close()


def diffusion_policy(device: str) -> Policy | None:
    try:
        from hfpolicy.policies.diffusion.configuration import DiffusionConfig
        from hfpolicy.policies.diffusion.modeling import DiffusionPolicy
    except ImportError as e:
        print(f"note: Diffusion Policy part skipped: hfpolicy.policies.diffusion is not importable ({e})")
        return None
    inputs, outputs, stats = pusht_features()
    config = DiffusionConfig(
        input_features=inputs, output_features=outputs, noise_scheduler_type="DDIM", num_inference_steps=10
    )
    policy = DiffusionPolicy(config, dataset_stats=stats).to(device)
    policy.noise_generator = torch.Generator(device).manual_seed(0)
    return policy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=50, help="episodes per measurement")
    parser.add_argument("--batch_size", type=int, default=50, help="envs of the serial and parallel vector envs")
    parser.add_argument("--episode_length", type=int, default=300, help="PushT time limit")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="policy device")
    parser.add_argument("--repeats", type=int, default=2, help="alternated floor / serial runs (the best is kept)")
    parser.add_argument("--skip_parallel", action="store_true", help="skip the AsyncVectorEnv runs")
    parser.add_argument("--skip_diffusion", action="store_true", help="skip the Diffusion Policy part")
    parser.add_argument("--diffusion_episodes", type=int, default=50, help="episodes of the Diffusion serial run")
    parser.add_argument("--diffusion_batch_size", type=int, default=None, help="Diffusion serial batch (batch_size)")
    parser.add_argument(
        "--diffusion_single_episodes", type=int, default=4, help="episodes of the (slow) Diffusion Policy batch-1 run"
    )
    parser.add_argument(
        "--diffusion_episode_length", type=int, default=None, help="time limit of the Diffusion runs (episode_length)"
    )
    args = parser.parse_args(argv)
    env_config = PushTEnvConfig(obs_type="pixels_agent_pos", episode_length=args.episode_length)
    inputs, outputs, stats = pusht_features()
    state_only = {OBS_STATE: inputs[OBS_STATE]}
    cheap = CheapPolicy(CheapConfig(input_features=state_only, output_features=outputs), dataset_stats=stats)
    cheap.to(args.device)
    cheap_image = CheapPolicy(CheapConfig(input_features=inputs, output_features=outputs), dataset_stats=stats)
    cheap_image.to(args.device)
    print(
        f"PushT eval throughput: {args.episodes} episodes, batch {args.batch_size}, policy on {args.device}, "
        f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs",
        flush=True,
    )

    cheap.recorded = []
    single_s, single_records = timed_eval(cheap, env_config, 1, False, args.episodes)
    recorded, cheap.recorded = cheap.recorded, None
    env_steps = sum(len(actions) for actions in recorded)
    floor_runs, serial_runs = [], []
    for _ in range(args.repeats):  # alternated, so that a change in machine load hits both alike
        floor_runs.append(env_floor(env_config, recorded))
        seconds, serial_records = timed_eval(cheap, env_config, args.batch_size, False, args.episodes)
        serial_runs.append(seconds)
    floor_s, serial_s = min(floor_runs), min(serial_runs)
    identical = same_episodes(serial_records, single_records)
    serial_image_s, serial_image_records = timed_eval(cheap_image, env_config, args.batch_size, False, args.episodes)
    identical = identical and same_episodes(serial_image_records, single_records)
    parallel_s = None
    if not args.skip_parallel:
        parallel_s, parallel_records = timed_eval(cheap, env_config, args.batch_size, True, args.episodes)
        identical = identical and same_episodes(parallel_records, single_records)

    results = {
        "episodes": args.episodes,
        "batch_size": args.batch_size,
        "env_steps": env_steps,
        "single_s": round(single_s, 3),
        "serial_s": round(serial_s, 3),
        "serial_image_policy_s": round(serial_image_s, 3),
        "parallel_s": None if parallel_s is None else round(parallel_s, 3),
        "env_floor_s": round(floor_s, 3),
        "env_floor_runs_s": [round(x, 3) for x in floor_runs],
        "serial_runs_s": [round(x, 3) for x in serial_runs],
        "speedup_serial": round(single_s / serial_s, 3),
        "speedup_parallel": None if parallel_s is None else round(single_s / parallel_s, 3),
        "serial_vs_floor": round(floor_s / serial_s, 3),
        "floor_steps_per_s": round(env_steps / floor_s, 1),
        "serial_steps_per_s": round(env_steps / serial_s, 1),
        "identical_results": identical,
    }
    rows = [
        ("env only (floor)", floor_s, env_steps / floor_s),
        ("batch 1", single_s, env_steps / single_s),
        (f"serial batch {args.batch_size}", serial_s, env_steps / serial_s),
        (f"serial batch {args.batch_size}, image policy", serial_image_s, env_steps / serial_image_s),
    ]
    if parallel_s is not None:
        rows.append((f"parallel batch {args.batch_size}", parallel_s, env_steps / parallel_s))

    diffusion = None if args.skip_diffusion else diffusion_policy(args.device)
    if diffusion is not None:
        d_env = PushTEnvConfig(
            obs_type="pixels_agent_pos", episode_length=args.diffusion_episode_length or args.episode_length
        )
        n_single, n_serial = args.diffusion_single_episodes, args.diffusion_episodes
        d_batch = min(args.diffusion_batch_size or args.batch_size, n_serial)
        print(f"diffusion: {n_single} episodes at batch 1, {n_serial} at batch {d_batch}, ", end="")
        print(f"{d_env.episode_length} steps each", flush=True)
        d_single_s, _ = timed_eval(diffusion, d_env, 1, False, n_single)
        d_serial_s, d_records = timed_eval(diffusion, d_env, d_batch, False, n_serial)
        per_single, per_serial = d_single_s / n_single, d_serial_s / n_serial
        results.update(
            {
                "diffusion_episode_length": d_env.episode_length,
                "diffusion_batch_size": d_batch,
                "diffusion_episodes": n_serial,
                "diffusion_single_episodes": n_single,
                "diffusion_single_s_per_episode": round(per_single, 3),
                "diffusion_serial_s": round(d_serial_s, 3),
                "diffusion_serial_s_per_episode": round(per_serial, 3),
                "diffusion_speedup_serial": round(per_single / per_serial, 3),
            }
        )
        d_steps = sum(r["length"] for r in d_records)
        rows.append((f"diffusion batch 1 ({n_single} ep)", d_single_s, float("nan")))
        rows.append((f"diffusion serial batch {d_batch} ({n_serial} ep)", d_serial_s, d_steps / d_serial_s))

    print(f"\n{'run':<34}{'seconds':>10}{'env steps/s':>14}")
    for name, seconds, rate in rows:
        print(f"{name:<34}{seconds:>10.2f}{rate:>14.1f}")
    print(
        f"\nserial reaches {100 * results['serial_vs_floor']:.0f}% of the env-only floor (target >= 90%); "
        f"serial is {results['speedup_serial']:.2f}x batch 1; identical per-episode results: {identical}"
    )
    if diffusion is not None:
        print(f"diffusion: serial is {results['diffusion_speedup_serial']:.2f}x faster per episode than batch 1")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
