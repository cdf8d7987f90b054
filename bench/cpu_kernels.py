"""What the CPU kernel choice, bf16 acting and per-episode padding cost (issues 20 and 36), on this machine.

    python bench/cpu_kernels.py                 # the cpu recipe's state U-Net (4.5 M params): a minute or two
    python bench/cpu_kernels.py --image         # also the paper's image config (262.7 M params): several minutes
    python bench/cpu_kernels.py --image-only --batches 1 --act --repeats 3   # batch-1 acting, with ACT's chunk
    python bench/cpu_kernels.py ... --baseline OLD.py   # also "auto" of an older cpu_kernels.py (e.g. from git show)

Measures, interleaved (each repeat runs every variant once, medians reported), under torch.inference_mode:
- chunk latency (DDIM-10, one `predict_action_chunk`) at batch 1, 5 and 50 (--batches) with each kernel choice
  ("torch", "matmul", "onednn", "auto": see hfpolicy.policies.diffusion.cpu_kernels), with "auto" acting in bf16
  where oneDNN has bf16 kernels ("auto+bf16", a second copy of the policy, so that neither repacks its weights), and
  with --baseline, "auto" of another cpu_kernels.py (the same policy, its convolutions' classes swapped);
- per-episode acting: the "auto" chunk through `predict_per_episode` (batches padded to PER_EPISODE_ROW_BLOCK rows, so
  rows round alike whatever the batch) against the unpadded chunk;
- with --act, ACT's chunk at batch 1 (default ACTConfig for PushT images, 51.6 M parameters), in the same rounds;
- each batch-1 figure as a multiple of its weight-bandwidth floor (bench/policy.py: the bytes of weights a chunk
  reads over the memory read bandwidth measured at the start of the run), and the action error of bf16 acting
  against float32 from the same noise (pixels of PushT's 512);
- row-block invariance: for blocks of 1, 2, 4, 8 and 16 rows, whether a U-Net row is bitwise the same when the row
  is evaluated in padded batches of 1, 3, 5 and 20 (what per-episode acting needs; the smallest block that holds here
  would be the cheapest padding on this CPU kind; others may need more).
Prints a table; the LAST line is one JSON object.
"""

import argparse
import importlib.util
import json
import os
import statistics
import time
from collections.abc import Callable

import torch

CHOICES = ("torch", "matmul", "onednn", "auto")
BATCHES = (1, 5, 50)


def state_policy():
    from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
    from hfpolicy.policies import FeatureType, PolicyFeature
    from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy

    config = DiffusionConfig(  # the cpu recipe's (examples/train_pusht.py)
        input_features={
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
            OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
        down_dims=(64, 128, 256),
        crop_shape=None,
        n_action_steps=4,
        noise_scheduler_type="DDIM",
        num_inference_steps=10,
    )
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    stats = {OBS_STATE: workspace, ACTION: workspace, OBS_ENV_STATE: {"min": torch.zeros(16), "max": torch.ones(16)}}
    torch.manual_seed(0)
    return DiffusionPolicy(config, dataset_stats=stats).eval()


def image_policy():
    from bench.policy import make_policy

    policy = make_policy().eval()
    policy.set_sampler("DDIM", 10)
    return policy


def observation(policy, batch: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch)
    n_obs = policy.config.n_obs_steps
    return {
        key: torch.rand(batch, n_obs, *f.shape, generator=generator) * (1 if len(f.shape) == 3 else 512)
        for key, f in policy.config.input_features.items()
    }


def timed_variants(variants: dict[str, Callable], repeats: int) -> dict[str, float]:
    """Median seconds of each variant, run interleaved after one warm-up each."""
    for run in variants.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def load_baseline(path: str):
    """Another version of hfpolicy/policies/diffusion/cpu_kernels.py, imported as a module of its own."""
    spec = importlib.util.spec_from_file_location("baseline_cpu_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def swapped(policy, classes: dict[type, type]) -> None:
    for module in policy.unet.modules():
        if type(module) in classes:
            module.__class__ = classes[type(module)]


def chunk_variants(policy, batch: int, choices, bf16_policy=None, baseline=None) -> dict[str, Callable]:
    from hfpolicy.policies.action_selection import predict_per_episode
    from hfpolicy.policies.diffusion import cpu_kernels

    obs = observation(policy, batch)
    variants = {}
    for choice in choices:

        def chunk(choice=choice):
            policy.set_cpu_kernels(choice)
            return policy.predict_action_chunk(obs)

        variants[f"{choice} b{batch}"] = chunk
    if baseline is not None:
        ours = {
            cpu_kernels.MatmulConv1d: baseline.MatmulConv1d,
            cpu_kernels.MatmulConvTranspose1d: baseline.MatmulConvTranspose1d,
        }

        def baseline_chunk():
            policy.set_cpu_kernels("auto")  # also the encoder's layout, as the baseline's "auto" had it
            swapped(policy, ours)
            baseline.set_cpu_kernels(policy.unet, "auto")
            try:
                return policy.predict_action_chunk(obs)
            finally:
                swapped(policy, {new: old for old, new in ours.items()})

        variants[f"baseline auto b{batch}"] = baseline_chunk
    if bf16_policy is not None:
        variants[f"auto+bf16 b{batch}"] = lambda: bf16_policy.predict_action_chunk(obs)

    def per_episode():
        policy.set_cpu_kernels("auto")
        generators = [torch.Generator().manual_seed(i) for i in range(batch)]
        return predict_per_episode(policy.predict_action_chunk, obs, generators, policy.config.n_action_steps)

    variants[f"auto b{batch} per-episode"] = per_episode
    return variants


def act_variant() -> tuple[dict[str, Callable], int]:
    """ACT's chunk at batch 1 (`select_action` after `reset()`), and the bytes of its weights."""
    from bench.policy import make_act_policy
    from hfpolicy.constants import OBS_IMAGE, OBS_STATE

    policy = make_act_policy().eval()
    generator = torch.Generator().manual_seed(0)
    obs = {OBS_IMAGE: torch.rand(1, 3, 96, 96, generator=generator), OBS_STATE: torch.rand(1, 2, generator=generator)}

    def chunk():
        policy.reset()
        return policy.select_action(obs)

    return {"act b1": chunk}, sum(p.numel() * p.element_size() for p in policy.parameters())


@torch.inference_mode()
def row_block_invariance(policy, choice: str) -> dict[int, bool]:
    """{block: whether rows are bitwise equal across padded batch sizes 1, 3, 5, 20}."""
    policy.set_cpu_kernels(choice)
    generator = torch.Generator().manual_seed(0)
    n = 20
    sample = torch.randn(n, policy.config.horizon, 2, generator=generator)
    steps = torch.randint(0, 100, (n,), generator=generator)
    cond = torch.randn(n, policy.global_cond_dim, generator=generator)

    def rows(count: int, block: int) -> torch.Tensor:
        pad = -count % block
        index = torch.cat([torch.arange(count), torch.full((pad,), count - 1)])
        return policy.unet(sample[index], steps[index], cond[index])[:count]

    result = {}
    for block in (1, 2, 4, 8, 16):
        together = rows(n, block)
        result[block] = all(torch.equal(rows(count, block), together[:count]) for count in (1, 3, 5))
    return result


@torch.inference_mode()
def bf16_error(policy, bf16_policy) -> float:
    """Largest action difference (dataset units) of bf16 acting against float32 from the same noise, batch 4."""
    obs = observation(policy, 4)
    noise = torch.randn(4, policy.config.horizon, 2, generator=torch.Generator().manual_seed(0))
    policy.set_cpu_kernels("auto")
    return (
        (bf16_policy.predict_action_chunk(obs, noise=noise) - policy.predict_action_chunk(obs, noise=noise))
        .abs()
        .max()
        .item()
    )


def bench(name: str, make: Callable, args, machine: dict) -> dict:
    from bench.policy import chunk_weight_bytes, floor_multiple
    from hfpolicy.policies.diffusion.cpu_kernels import onednn_available

    policy = make()
    results: dict = {"params_m": round(sum(p.numel() for p in policy.parameters()) / 1e6, 1)}
    bf16_policy = None
    if not args.no_bf16 and onednn_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        bf16_policy = make()
        bf16_policy.set_acting_dtype("bfloat16", force=True)
        results["bf16_action_error"] = round(bf16_error(policy, bf16_policy), 3)
    baseline = load_baseline(args.baseline) if args.baseline else None
    steps = policy.config.num_inference_steps
    with torch.inference_mode():
        for batch in args.batches:
            variants = chunk_variants(policy, batch, args.choices, bf16_policy, baseline)
            weights = {
                name: chunk_weight_bytes(policy, steps, "bfloat16" if "bf16" in name else "float32")
                for name in variants
            }
            if args.act and batch == 1:
                act, weights["act b1"] = act_variant()
                variants.update(act)
            results["load_before_b" + str(batch)] = os.getloadavg()[0]
            for variant, seconds in timed_variants(variants, args.repeats).items():
                results[variant] = round(seconds, 4)
                if batch == 1 and "per-episode" not in variant:
                    results[f"{variant} x floor"] = floor_multiple(seconds, weights[variant], machine)
    if not args.no_invariance:
        results["row_block_invariant"] = {c: row_block_invariance(policy, c) for c in ("matmul", "onednn", "torch")}
    print(f"\n{name} ({results['params_m']} M params), DDIM-10 chunk latency, median s of {args.repeats}:")
    for key, value in results.items():
        if isinstance(value, float) and not key.endswith("x floor"):
            floor = results.get(f"{key} x floor")
            print(f"  {key:<28} {value:>9.4f}" + (f"  {floor:>6.2f}x floor" if floor is not None else ""))
    for choice, blocks in results.get("row_block_invariant", {}).items():
        print(f"row blocks that round alike ({choice}): {[b for b, ok in blocks.items() if ok]}")
    return results


def main() -> None:
    from bench.policy import machine_info

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--image", action="store_true", help="also the paper's image config (slow on 2 cores)")
    parser.add_argument("--image-only", action="store_true", help="the paper's image config alone")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--choices", nargs="+", choices=CHOICES, default=list(CHOICES))
    parser.add_argument("--baseline", help="also time 'auto' of this other cpu_kernels.py (e.g. from git show)")
    parser.add_argument("--act", action="store_true", help="also ACT's chunk at batch 1, in the same rounds")
    parser.add_argument("--no-bf16", action="store_true", help="skip bf16 acting")
    parser.add_argument("--no-invariance", action="store_true", help="skip the row-block invariance check")
    args = parser.parse_args()
    machine = machine_info()
    out = {"threads": torch.get_num_threads(), "load_before": os.getloadavg()[0], **machine}
    sets = ", ".join(name for name, present in machine["instruction_sets"].items() if present) or "none known"
    print(f"CPU: {sets}; memory read {machine['memory_read_gb_s']} GB/s, matrix-vector {machine['matvec_gb_s']} GB/s")
    if not args.image_only:
        out["state"] = bench("cpu recipe state U-Net", state_policy, args, machine)
    if args.image or args.image_only:
        out["image"] = bench("paper image config", image_policy, args, machine)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
