"""Eval throughput on PushT (96x96 pixels + agent_pos): batch 1 vs serial batch N vs parallel batch N, against the
env-only floor, with a cheap deterministic policy and (when hfpolicy.policies.diffusion is importable) Diffusion
Policy with DDIM 10 steps.

    python bench/eval_throughput.py [--episodes 50] [--batch_size 50] [--device cpu] [--skip_parallel]
    python bench/eval_throughput.py --env aloha [--task AlohaInsertion-v0] [--no-shadows]   # ALOHA, batch 10

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

ALOHA (`--env aloha`, gym-aloha's scenes; defaults batch 10, 10 episodes of 400 steps): the cheap policy holds the
arms where they are (action = current joints + offsets of 0.01), so no episode ends early and every run steps the
same number of env steps. The floor steps the same envs (a plain env, same seeds) with the hold action (each
episode's start joints), no policy and no vector env.
- state: a state-input policy on `environment_state_agent_pos` envs (nothing rendered): serial batch 10 vs floor.
- images: a policy reading `observation.images.top` too, on `pixels_agent_pos` envs, so every step renders the
  480x640 top camera in the eval and in its floor alike; shorter episodes (`--image_episode_length`, default 10):
  on a CPU a frame costs 0.1-0.5 s. `render_s_per_frame`: `env.render()` of a 480x640 frame, timed directly
  (`--render_frames`, with the chosen shadows), and `render_s_per_frame_in_floor`: the image floor's time per step
  less the state floor's.

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

from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_IMAGES_PREFIX, OBS_STATE  # noqa: E402
from hfpolicy.envs import AlohaEnvConfig, PushTEnvConfig  # noqa: E402
from hfpolicy.eval import evaluate  # noqa: E402
from hfpolicy.policies import FeatureType, Policy, PolicyConfig, PolicyFeature  # noqa: E402

START_SEED = 100_000


@PolicyConfig.register_subclass("bench_cheap")
@dataclass
class CheapConfig(PolicyConfig):
    """A policy that costs next to nothing: chunk = gain * newest state + offsets (normalized units)."""

    n_obs_steps: int = 2  # observations per prediction
    n_action_steps: int = 8  # actions per predicted chunk
    gain: float = 0.8  # chunk = gain * newest state + offsets
    offset_scale: float = 0.3  # amplitude of the offsets (sines and cosines over the chunk)


class CheapPolicy(Policy):
    config_class = CheapConfig

    def __init__(self, config: CheapConfig, dataset_stats=None):
        super().__init__(config, dataset_stats)
        steps = torch.arange(config.n_action_steps, dtype=torch.float32)
        dim = config.output_features[ACTION].shape[0]  # = the state's size (PushT 2, ALOHA 14)
        self.gain = nn.Parameter(torch.full((dim,), config.gain))
        waves = [torch.sin(steps + k // 2) if k % 2 == 0 else torch.cos(steps + k // 2) for k in range(dim)]
        self.register_buffer("offset", config.offset_scale * torch.stack(waves, dim=1))
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


def timed_eval(
    policy: Policy, env_config: PushTEnvConfig, n_envs: int, parallel: bool, episodes: int, warm: bool = False
) -> tuple:
    """(seconds, per-episode records) of `evaluate`, env construction and teardown excluded; `warm` resets the envs
    once before (ALOHA: each env makes its GL context at its first rendered frame, ~0.3 s, a cost of construction)."""
    env = env_config.make(n_envs, parallel=parallel)
    try:
        if warm:
            env.reset(seed=START_SEED)  # `evaluate` seeds every episode again
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
    parser.add_argument("--env", choices=("pusht", "aloha"), default="pusht", help="the simulator")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per measurement (PushT 50, ALOHA 10)")
    parser.add_argument("--batch_size", type=int, default=None, help="envs of the vector envs (PushT 50, ALOHA 10)")
    parser.add_argument("--episode_length", type=int, default=None, help="time limit (PushT 300, ALOHA 400)")
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
    parser.add_argument("--task", default="AlohaTransferCube-v0", help="ALOHA: the task")
    parser.add_argument("--shadows", action=argparse.BooleanOptionalAction, default=True, help="ALOHA: render shadows")
    parser.add_argument("--image_episode_length", type=int, default=10, help="ALOHA: time limit of the image runs")
    parser.add_argument("--render_frames", type=int, default=10, help="ALOHA: frames of the direct render timing")
    parser.add_argument("--skip_images", action="store_true", help="ALOHA: skip the image runs")
    args = parser.parse_args(argv)
    if args.env == "aloha":
        return aloha_main(args)
    args.episodes, args.batch_size = args.episodes or 50, args.batch_size or 50
    args.episode_length = args.episode_length or 300
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


ALOHA_TOP = f"{OBS_IMAGES_PREFIX}top"


def aloha_policy(images: bool, device: str) -> Policy:
    """The cheap policy holding the arms where they are: action = current joints + offsets of 0.01 (state and
    action share their normalization, min -1 / max 1, so normalized and raw values are the same)."""
    inputs = {OBS_STATE: PolicyFeature(FeatureType.STATE, (14,))}
    if images:
        inputs[ALOHA_TOP] = PolicyFeature(FeatureType.IMAGE, (3, 480, 640))
    outputs = {ACTION: PolicyFeature(FeatureType.ACTION, (14,))}
    stats = {key: {"min": [-1.0] * 14, "max": [1.0] * 14} for key in (OBS_STATE, ACTION)}
    stats[ALOHA_TOP] = {"mean": [0.5] * 3, "std": [0.25] * 3}
    config = CheapConfig(input_features=inputs, output_features=outputs, n_obs_steps=1, gain=1.0, offset_scale=0.01)
    return CheapPolicy(config, dataset_stats=stats).to(device)


def aloha_floor(env_config: AlohaEnvConfig, episodes: int) -> tuple[float, int]:
    """(seconds, env steps) to reset and step one plain env through `episodes` episodes (seeds START_SEED..), each
    holding its start joints until the time limit: no policy, no vector env."""
    env = env_config.make_single()
    steps = 0
    try:
        env.reset(seed=START_SEED)  # its GL context is made here, outside the timing, as the eval's (timed_eval)
        start = time.perf_counter()
        for index in range(episodes):
            observation, _ = env.reset(seed=START_SEED + index)
            hold = observation["agent_pos"].astype(np.float32)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(hold)
                steps, done = steps + 1, terminated or truncated
        return time.perf_counter() - start, steps
    finally:
        env.close()


def render_cost(env_config: AlohaEnvConfig, frames: int) -> float:
    """Seconds per `env.render()` frame (480x640 top camera), the first frame (the GL context) left out."""
    env = env_config.make_single()
    try:
        env.reset(seed=START_SEED)
        env.render()
        start = time.perf_counter()
        for _ in range(frames):
            env.render()
        return (time.perf_counter() - start) / frames
    finally:
        env.close()


def aloha_runs(args, images: bool) -> dict:
    """Floor and serial-eval seconds (the best of `--repeats` alternated runs; one run with images) and steps."""
    length = args.image_episode_length if images else args.episode_length
    obs_type = "pixels_agent_pos" if images else "environment_state_agent_pos"
    env_config = AlohaEnvConfig(task=args.task, obs_type=obs_type, episode_length=length, shadows=args.shadows)
    policy = aloha_policy(images, args.device)
    floor_runs, serial_runs, serial_steps = [], [], 0
    for _ in range(1 if images else args.repeats):  # alternated, so that a change in machine load hits both alike
        floor_s, floor_steps = aloha_floor(env_config, args.episodes)
        floor_runs.append(floor_s)
        seconds, records = timed_eval(policy, env_config, args.batch_size, False, args.episodes, warm=True)
        serial_runs.append(seconds)
        serial_steps = sum(r["length"] for r in records)
    if serial_steps != floor_steps:
        raise RuntimeError(
            f"the eval stepped {serial_steps} env steps, the floor {floor_steps}: an episode ended early"
        )
    floor_s, serial_s = min(floor_runs), min(serial_runs)
    return {"steps": floor_steps, "floor_s": floor_s, "serial_s": serial_s, "length": length,
            "floor_runs_s": [round(x, 3) for x in floor_runs], "serial_runs_s": [round(x, 3) for x in serial_runs]}  # fmt: skip


def aloha_main(args) -> int:
    args.episodes, args.batch_size = args.episodes or 10, args.batch_size or 10
    args.episode_length = args.episode_length or 400
    print(
        f"ALOHA eval throughput ({args.task}): {args.episodes} episodes, batch {args.batch_size}, shadows "
        f"{args.shadows}, policy on {args.device}, torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs",
        flush=True,
    )
    state = aloha_runs(args, images=False)
    results = {"env": f"aloha/{args.task}", "episodes": args.episodes, "batch_size": args.batch_size,
               "shadows": args.shadows, "episode_length": state["length"], "env_steps": state["steps"],
               "env_floor_s": round(state["floor_s"], 3), "serial_s": round(state["serial_s"], 3),
               "env_floor_runs_s": state["floor_runs_s"], "serial_runs_s": state["serial_runs_s"],
               "floor_steps_per_s": round(state["steps"] / state["floor_s"], 1),
               "serial_steps_per_s": round(state["steps"] / state["serial_s"], 1),
               "serial_vs_floor": round(state["floor_s"] / state["serial_s"], 3)}  # fmt: skip
    rows = [("state: env only (floor)", state["floor_s"], state["steps"]),
            (f"state: serial batch {args.batch_size}", state["serial_s"], state["steps"])]  # fmt: skip
    if not args.skip_images:
        image = aloha_runs(args, images=True)
        per_frame = image["floor_s"] / image["steps"] - state["floor_s"] / state["steps"]
        render_config = AlohaEnvConfig(task=args.task, shadows=args.shadows)
        results.update(
            {
                "image_episode_length": image["length"],
                "image_env_steps": image["steps"],
                "image_env_floor_s": round(image["floor_s"], 3),
                "image_serial_s": round(image["serial_s"], 3),
                "image_serial_vs_floor": round(image["floor_s"] / image["serial_s"], 3),
                "render_s_per_frame": round(render_cost(render_config, args.render_frames), 4),
                "render_s_per_frame_in_floor": round(per_frame, 4),
            }
        )
        rows += [("images: env only (floor)", image["floor_s"], image["steps"]),
                 (f"images: serial batch {args.batch_size}", image["serial_s"], image["steps"])]  # fmt: skip
    print(f"\n{'run':<34}{'seconds':>10}{'env steps/s':>14}")
    for name, seconds, steps in rows:
        print(f"{name:<34}{seconds:>10.2f}{steps / seconds:>14.1f}")
    print(f"\nstate: serial reaches {100 * results['serial_vs_floor']:.0f}% of the env-only floor (target >= 90%)")
    if not args.skip_images:
        print(
            f"images: serial reaches {100 * results['image_serial_vs_floor']:.0f}% of the floor; a 480x640 frame "
            f"costs {results['render_s_per_frame']:.3f} s (shadows {args.shadows})"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
