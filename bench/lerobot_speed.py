"""LeRobot 0.6.1's DiffusionPolicy timed exactly as bench/policy.py times hfpolicy's (run in LeRobot's side venv,
which needs `pip install "lerobot[diffusion]==0.6.1"`).

    /work/lerobot-venv/bin/python bench/lerobot_speed.py [--repeats 3] [--threads N]

The classic image PushT configuration (LeRobot's DiffusionConfig defaults but for the backbone, set as the paper and
hfpolicy's default: 96x96 image + agent position, ResNet18 with
group norm and no pretrained weights, crop 84, U-Net 512/1024/2048; 262.7 M parameters) on synthetic PushT-shaped
data, through LeRobot's own pre-processor (normalization) as its trainer and evaluator call it:
- train_step_s_b64: pre-processor, forward, backward, its preset optimizer's step (Adam), median after a warm-up;
- chunk latency: `select_action` at an episode start (one chunk) at batch 1 with DDPM-100 and DDIM-10, and at
  batch 50 with DDIM-10, under torch.inference_mode;
- act_chunk_latency_s_b1: LeRobot's ACTPolicy in the PushT image configuration of bench/policy.py's ACT (its defaults
  but no pretrained backbone weights: 96x96 image + agent position, chunks of 100, 51.6 M parameters), `select_action`
  at an episode start at batch 1.
bench/speed_vs_lerobot.py runs this beside bench/policy.py, interleaved, and prints the ratios. The LAST line printed
is one JSON object with the same keys as bench/policy.py's.
"""

import argparse
import json
import statistics
import time

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
from lerobot.policies.factory import make_pre_post_processors

IMAGE, STATE, ACTION = "observation.image", "observation.state", "action"


def make(scheduler: str, steps: int | None, state_dict=None):
    """A policy and its pre-processor; `state_dict` shares weights between the DDPM and DDIM variants."""
    inputs = {IMAGE: PolicyFeature(FeatureType.VISUAL, (3, 96, 96)), STATE: PolicyFeature(FeatureType.STATE, (2,))}
    config = DiffusionConfig(
        input_features=inputs,
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
        pretrained_backbone_weights=None,  # as hfpolicy's default and the paper: random init, GroupNorm
        use_group_norm=True,
        noise_scheduler_type=scheduler,
        num_inference_steps=steps,
        device="cpu",
    )
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    stats = {
        IMAGE: {
            "mean": torch.tensor([0.95, 0.95, 0.93]).view(3, 1, 1),
            "std": torch.tensor([0.15, 0.12, 0.13]).view(3, 1, 1),
        },
        STATE: workspace,
        ACTION: workspace,
    }
    torch.manual_seed(0)
    policy = DiffusionPolicy(config)
    if state_dict is not None:
        policy.load_state_dict(state_dict)
    pre, _ = make_pre_post_processors(config, dataset_stats=stats)
    return policy, pre


def make_act():
    """LeRobot's ACT for PushT images (as bench/policy.py's make_act_policy) and its pre-processor."""
    config = ACTConfig(
        input_features={
            IMAGE: PolicyFeature(FeatureType.VISUAL, (3, 96, 96)),
            STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
        pretrained_backbone_weights=None,
        device="cpu",
    )
    workspace = {"mean": torch.full((2,), 256.0), "std": torch.full((2,), 100.0)}
    stats = {
        IMAGE: {
            "mean": torch.tensor([0.95, 0.95, 0.93]).view(3, 1, 1),
            "std": torch.tensor([0.15, 0.12, 0.13]).view(3, 1, 1),
        },
        STATE: workspace,
        ACTION: workspace,
    }
    torch.manual_seed(0)
    policy = ACTPolicy(config)
    pre, _ = make_pre_post_processors(config, dataset_stats=stats)
    return policy, pre


def train_step(policy, pre, repeats: int) -> float:
    config = policy.config
    generator = torch.Generator().manual_seed(0)
    batch = {
        IMAGE: torch.rand(64, config.n_obs_steps, 3, 96, 96, generator=generator),
        STATE: torch.rand(64, config.n_obs_steps, 2, generator=generator) * 512,
        ACTION: torch.rand(64, config.horizon, 2, generator=generator) * 512,
        "action_is_pad": torch.zeros(64, config.horizon, dtype=torch.bool),
    }
    optimizer = config.get_optimizer_preset().build(policy.get_optim_params())
    policy.train()
    times = []
    for i in range(repeats + 1):  # the first step warms up
        start = time.perf_counter()
        loss, _ = policy.forward(pre(dict(batch)))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def chunk(policy, pre, batch_size: int, repeats: int) -> float:
    generator = torch.Generator().manual_seed(1)
    observation = {
        IMAGE: torch.rand(batch_size, 3, 96, 96, generator=generator),
        STATE: torch.rand(batch_size, 2, generator=generator) * 512,
    }
    policy.eval()
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            policy.reset()
            start = time.perf_counter()
            action = policy.select_action(pre(dict(observation)))
            times.append(time.perf_counter() - start)
    assert action.shape == (batch_size, 2) and torch.isfinite(action).all()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip_training", action="store_true")
    parser.add_argument("--policy", choices=["all", "diffusion", "act"], default="all")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    results: dict[str, float | int] = {"torch_threads": torch.get_num_threads()}
    if args.policy in ("all", "diffusion"):
        results.update(bench_diffusion(args.repeats, args.skip_training))
    if args.policy in ("all", "act"):
        act, pre = make_act()
        results["act_params_m"] = round(sum(p.numel() for p in act.parameters()) / 1e6, 3)
        results["act_chunk_latency_s_b1"] = round(chunk(act, pre, 1, args.repeats), 4)
    print(f"LeRobot 0.6.1, classic PushT image configs, CPU, {results['torch_threads']} torch threads")
    for key, value in results.items():
        print(f"{key:<32} {value:>10}")
    print(json.dumps(results))
    return 0


def bench_diffusion(repeats: int, skip_training: bool) -> dict[str, float]:
    ddpm, pre = make("DDPM", None)
    results = {"params_m": round(sum(p.numel() for p in ddpm.parameters()) / 1e6, 3)}
    if not skip_training:
        results["train_step_s_b64"] = round(train_step(ddpm, pre, repeats), 3)
    ddim, _ = make("DDIM", 10, state_dict=ddpm.state_dict())
    results["chunk_latency_s_b1_ddim10"] = round(chunk(ddim, pre, 1, repeats), 3)
    results["chunk_latency_s_b1_ddpm100"] = round(chunk(ddpm, pre, 1, max(1, repeats - 1)), 3)
    results["chunk_latency_s_b50_ddim10"] = round(chunk(ddim, pre, 50, max(1, repeats - 1)), 3)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
