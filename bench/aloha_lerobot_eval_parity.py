"""One ALOHA episode of a LeRobot 0.6.1 ACT checkpoint: LeRobot's own evaluation loop vs hfpolicy's `evaluate`.

    python bench/aloha_lerobot_eval_parity.py                          # hfpolicy's venv; LeRobot's at /work/lerobot-venv
    python bench/aloha_lerobot_eval_parity.py --episode_length 100 --lerobot_python OTHER/bin/python

Everything is made in a temporary folder (or --workdir, kept):
1. LeRobot's venv (`lerobot` step, run as a subprocess): a small ACT with LeRobot's ALOHA features
   (observation.images.top 480x640, observation.state 14, action 14; ResNet18 without pretrained weights, chunk 10),
   action stats centred on the scripted expert's grasp pose for the seed (so the arm touches the cube: rewards) with a
   gripper spread that makes the policy command targets outside gym-aloha's `Box(-1, 1)` and outside the actuators'
   ctrlrange (hfpolicy's declared Box), 2 optimizer steps, saved as lerobot-train saves it; then ONE
   episode of `gym_aloha/<task>` through LeRobot's own loop (`lerobot.scripts.lerobot_eval.rollout`, with the env,
   processors and seeds that `eval_policy(..., start_seed=seed)` gives its first batch), its actions and rewards saved.
2. hfpolicy's venv: `Policy.from_pretrained` of that checkpoint, `evaluate` on hfpolicy's ALOHA env (batch 1, episode
   0 seeded `seed`), the applied actions and exact rewards taken by a step hook; once as hfpolicy acts now (actions
   unchanged), once with the actions clipped into the declared Box as hfpolicy's rollout did before (the hook applies
   the clip), to show what clipping changed.
Both venvs run torch with 1 thread. Prints a table (per 50-step window: largest |action difference| to LeRobot, reward
equality) and then, as the LAST line, one JSON object.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LEROBOT_PYTHON = "/work/lerobot-venv/bin/python"
CHECKPOINT = "pretrained_model"
LEROBOT_EPISODE = "lerobot_episode.safetensors"
DEFAULT_SEED = 100_000  # hfpolicy's episode 0 (DEFAULT_EVAL_START_SEED)
WINDOW = 50  # steps per table row
GRASP_STEP = 150  # the expert's right gripper is around the cube, closing


# --- step 1, in LeRobot's venv -------------------------------------------------------------------------------------
def lerobot_step(workdir: Path, task: str, seed: int, episode_length: int, action_mean: list[float]) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gym_aloha.constants as aloha_constants
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.configs import AlohaEnv
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    torch.manual_seed(0)
    image, state, action = "observation.images.top", "observation.state", "action"
    cfg = ACTConfig(
        input_features={
            image: PolicyFeature(FeatureType.VISUAL, (3, 480, 640)),
            state: PolicyFeature(FeatureType.STATE, (14,)),
        },
        output_features={action: PolicyFeature(FeatureType.ACTION, (14,))},
        chunk_size=10,
        n_action_steps=10,
        pretrained_backbone_weights=None,
        device="cpu",
        dim_model=64,
        n_heads=4,
        dim_feedforward=128,
        n_encoder_layers=2,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
    )
    # State stats centred on the arms' start pose (grippers as normalized positions); action stats centred on
    # `action_mean` (the scripted expert's targets as its right gripper closes on the cube, so that the arm goes
    # there and touches it: rewards), with a wide gripper spread, so that the gripper targets leave [-1, 1] and the
    # actuators' ranges (MuJoCo clamps the controls to those).
    start = list(aloha_constants.START_ARM_POSE)
    normalize = aloha_constants.normalize_puppet_gripper_position
    joints = start[:6] + [normalize(start[6])] + start[8:14] + [normalize(start[14])]
    mean = torch.tensor(action_mean, dtype=torch.float32)
    spread = torch.tensor([0.05] * 6 + [0.8] + [0.05] * 6 + [0.8])
    stats = {
        image: {"mean": torch.full((3, 1, 1), 0.4), "std": torch.full((3, 1, 1), 0.25)},
        state: {"mean": torch.tensor(joints, dtype=torch.float32), "std": torch.full((14,), 0.3)},
        action: {"mean": mean, "std": spread},
    }
    for key in (state, action):
        stats[key] |= {"min": stats[key]["mean"] - 3, "max": stats[key]["mean"] + 3}
    stats[image] |= {"min": torch.zeros(3, 1, 1), "max": torch.ones(3, 1, 1)}
    policy = ACTPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    policy.train()
    for _ in range(2):
        batch = {image: torch.rand(2, 3, 480, 640, generator=g), state: 0.3 * torch.randn(2, 14, generator=g)}
        batch[state] += stats[state]["mean"]
        batch[action] = mean + spread * torch.randn(2, cfg.chunk_size, 14, generator=g)
        batch["action_is_pad"] = torch.zeros(2, cfg.chunk_size, dtype=torch.bool)
        loss, _ = policy.forward(pre(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    folder = workdir / CHECKPOINT
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)

    # LeRobot's evaluation of one episode, as `lerobot-eval` sets it up (eval_main -> eval_policy -> rollout).
    policy = ACTPolicy.from_pretrained(folder)
    policy.eval()
    pre, post = make_pre_post_processors(
        policy.config, pretrained_path=str(folder), preprocessor_overrides={"device_processor": {"device": "cpu"}}
    )
    env_cfg = AlohaEnv(task=task, episode_length=episode_length)
    envs = make_env(env_cfg, n_envs=1)
    env = next(iter(next(iter(envs.values())).values()))
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=policy.config)
    try:
        with torch.no_grad():
            data = rollout(env, policy, env_pre, env_post, pre, post, seeds=[seed])
    finally:
        env.close()
    done = data["done"][0]
    length = int(done.to(torch.int64).argmax()) + 1 if done.any() else done.numel()
    episode = {
        "actions": data[action][0, :length].contiguous(),
        "rewards": data["reward"][0, :length].to(torch.float64).contiguous(),
        "success": data["success"][0, :length].contiguous(),
    }
    save_file(episode, str(workdir / LEROBOT_EPISODE))
    print(json.dumps({"checkpoint": str(folder), "steps": length}))


# --- step 2, in hfpolicy's venv ------------------------------------------------------------------------------------
class ActionLog:
    """A rollout step hook that logs slot 0's action and exact reward; `clip` applies the pre-change clipping."""

    def __init__(self, clip: bool):
        self.clip, self.actions, self.rewards = clip, [], []

    def after_reset(self, env, observation, seeds) -> None:
        pass

    def before_step(self, env, observation, action, running):
        import numpy as np

        self.actions.append(action[0].copy())
        if self.clip:
            space = env.single_action_space
            return np.clip(action, space.low, space.high)
        return action

    def after_step(self, env, reward, terminated, truncated, info, running) -> None:
        self.rewards.append(float(reward[0]))


def hfpolicy_episode(folder: Path, task: str, seed: int, episode_length: int, clip: bool) -> dict:
    import numpy as np

    from hfpolicy.envs import AlohaEnvConfig
    from hfpolicy.eval import evaluate
    from hfpolicy.policies import Policy

    policy = Policy.from_pretrained(folder)
    cfg = AlohaEnvConfig(task=task, episode_length=episode_length).for_policy(policy.config.input_features)
    env = cfg.make(1)
    log = ActionLog(clip)
    try:
        space = env.single_action_space
        result = evaluate(policy, env, episode_indices=[0], start_seed=seed, progress=False, step_hook=log)
    finally:
        env.close()
    actions = np.stack(log.actions)
    return {
        "actions": actions,
        "rewards": np.array(log.rewards),
        "record": result.episodes[0],
        "outside_box": int(((actions < space.low) | (actions > space.high)).any(axis=1).sum()),
        "outside_unit": int((np.abs(actions) > 1).any(axis=1).sum()),
    }


def expert_grasp_targets(task: str, seed: int, step: int = GRASP_STEP) -> list[float]:
    """The scripted expert's 14 joint targets at `step` of the episode seeded `seed` (its right gripper closing on
    the cube), as the centre of the checkpoint's action stats."""
    from hfpolicy.envs.aloha import sample_object_pose
    from hfpolicy.experts.aloha_expert import AlohaExpert

    expert = AlohaExpert()
    try:
        return [float(x) for x in expert.plan(task, sample_object_pose(task, seed))[step]]
    finally:
        expert.close()


def compare(lerobot: dict, ours: dict) -> dict:
    import numpy as np

    n = min(len(lerobot["actions"]), len(ours["actions"]))
    diff = np.abs(lerobot["actions"][:n].astype(np.float64) - ours["actions"][:n].astype(np.float64)).max(axis=1)
    equal = lerobot["rewards"][:n] == ours["rewards"][:n]
    return {
        "steps": n,
        "same_length": len(lerobot["actions"]) == len(ours["actions"]),
        "per_step_max_abs_action_diff": diff,
        "rewards_equal": equal,
        "max_abs_action_diff": float(diff.max()),
        "first_step_with_action_diff_over_1e-3": int(np.argmax(diff > 1e-3)) + 1 if (diff > 1e-3).any() else None,
        "all_rewards_equal": bool(equal.all()) and len(lerobot["rewards"]) == len(ours["rewards"]),
        "n_steps_reward_differs": int((~equal).sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="AlohaTransferCube-v0")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--episode_length", type=int, default=400, help="steps before truncation (LeRobot's: 400)")
    parser.add_argument("--lerobot_python", default=LEROBOT_PYTHON, help="python of a venv with lerobot[aloha]==0.6.1")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the checkpoint and episode here")
    parser.add_argument("--step", choices=["all", "lerobot"], default="all", help=argparse.SUPPRESS)
    parser.add_argument("--action_mean", type=json.loads, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step == "lerobot":
        lerobot_step(args.workdir, args.task, args.seed, args.episode_length, args.action_mean)
        return 0

    import numpy as np
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="aloha_parity_") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        command = [args.lerobot_python, __file__, "--step", "lerobot", "--workdir", str(workdir), "--task", args.task]
        command += ["--seed", str(args.seed), "--episode_length", str(args.episode_length)]
        command += ["--action_mean", json.dumps(expert_grasp_targets(args.task, args.seed))]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        made = subprocess.run(command, env=env, capture_output=True, text=True)  # LeRobot's progress bars: quiet
        if made.returncode != 0:
            sys.exit(f"LeRobot's step failed:\n{made.stdout}{made.stderr}")
        reference = {k: v.numpy() for k, v in load_file(str(workdir / LEROBOT_EPISODE)).items()}
        runs = {
            clip: hfpolicy_episode(workdir / CHECKPOINT, args.task, args.seed, args.episode_length, clip)
            for clip in (False, True)
        }
    now, clipped = compare(reference, runs[False]), compare(reference, runs[True])

    print(f"{args.task}, seed {args.seed}: one episode, LeRobot 0.6.1's rollout vs hfpolicy's evaluate")
    print(f"{'steps':>9} | {'max |a - a_LeRobot|':>20} {'rewards':>8} | {'clipped (old): max |da|':>24} {'rewards':>8}")
    for first in range(0, now["steps"], WINDOW):
        window = slice(first, first + WINDOW)
        row = [
            f"{first + 1:>4}-{min(first + WINDOW, now['steps']):<4}",
            f"{now['per_step_max_abs_action_diff'][window].max():>20.3g}",
            f"{'equal' if now['rewards_equal'][window].all() else 'DIFFER':>8}",
            f"{clipped['per_step_max_abs_action_diff'][window].max():>24.3g}",
            f"{'equal' if clipped['rewards_equal'][window].all() else 'DIFFER':>8}",
        ]
        print(f"{row[0]} | {row[1]} {row[2]} | {row[3]} {row[4]}")
    actions = reference["actions"]
    summary = {
        "task": args.task,
        "seed": args.seed,
        "episode_length": args.episode_length,
        "lerobot_steps": len(actions),
        "lerobot_sum_reward": float(reference["rewards"].sum()),
        "lerobot_max_reward": float(reference["rewards"].max()),
        "lerobot_success": bool(reference["success"].any()),
        "steps_with_action_outside_unit_box": int((np.abs(actions) > 1).any(axis=1).sum()),
        "steps_with_action_outside_declared_box": runs[False]["outside_box"],
        "hfpolicy_n_actions_outside_space": runs[False]["record"].n_actions_outside_space,
        "hfpolicy_sum_reward": runs[False]["record"].sum_reward,
        "hfpolicy_length": runs[False]["record"].length,
    }
    for name, result in (("hfpolicy", now), ("hfpolicy_clipped", clipped)):
        for key in ("max_abs_action_diff", "first_step_with_action_diff_over_1e-3", "all_rewards_equal"):
            summary[f"{name}_{key}"] = result[key]
        summary[f"{name}_n_steps_reward_differs"] = result["n_steps_reward_differs"]
        summary[f"{name}_same_length"] = result["same_length"]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
