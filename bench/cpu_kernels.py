"""What the CPU kernel choice and per-episode padding cost (issue 20), on this machine.

    python bench/cpu_kernels.py                 # the cpu recipe's state U-Net (4.5 M params): a minute or two
    python bench/cpu_kernels.py --image         # also the paper's image config (262.7 M params): several minutes
    python bench/cpu_kernels.py --repeats 5

Measures, interleaved (each repeat runs every variant once, medians reported), under torch.inference_mode:
- chunk latency (DDIM-10, one `predict_action_chunk`) at batch 1, 5 and 50 with each kernel choice
  ("matmul", "torch", "auto": see hfpolicy.policies.diffusion.cpu_kernels);
- per-episode acting: the same chunk through `predict_per_episode` (batches padded to PER_EPISODE_ROW_BLOCK rows, so
  rows round alike whatever the batch) against the unpadded chunk, at batch 1, 5 and 50;
- row-block invariance: for blocks of 1, 2, 4, 8 and 16 rows, whether a U-Net row is bitwise the same when the row
  is evaluated in padded batches of 1, 3, 5 and 20 (what per-episode acting needs; the smallest block that holds here
  would be the cheapest padding on this CPU kind; others may need more).
Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import os
import statistics
import time

import torch

CHOICES = ("matmul", "torch", "auto")
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


def timed_variants(variants: dict[str, callable], repeats: int) -> dict[str, float]:
    """Median seconds of each variant, run interleaved after one warm-up each."""
    for run in variants.values():
        run()
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def chunk_variants(policy, batch: int) -> dict[str, callable]:
    from hfpolicy.policies.action_selection import predict_per_episode

    obs = observation(policy, batch)
    variants = {}
    for choice in CHOICES:

        def chunk(choice=choice):
            policy.set_cpu_kernels(choice)
            return policy.predict_action_chunk(obs)

        def per_episode(choice=choice):
            policy.set_cpu_kernels(choice)
            generators = [torch.Generator().manual_seed(i) for i in range(batch)]
            return predict_per_episode(policy.predict_action_chunk, obs, generators, policy.config.n_action_steps)

        variants[f"{choice} b{batch}"] = chunk
        variants[f"{choice} b{batch} per-episode"] = per_episode
    return variants


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


def bench(name: str, policy, repeats: int) -> dict:
    results = {"params_m": round(sum(p.numel() for p in policy.parameters()) / 1e6, 1)}
    with torch.inference_mode():
        for batch in BATCHES:
            for variant, seconds in timed_variants(chunk_variants(policy, batch), repeats).items():
                results[f"{variant}"] = round(seconds, 4)
    results["row_block_invariant"] = {choice: row_block_invariance(policy, choice) for choice in ("matmul", "torch")}
    print(f"\n{name} ({results['params_m']} M params), DDIM-10 chunk latency, median s of {repeats}:")
    print(f"{'kernels':<8} " + " ".join(f"{f'b{b}':>9} {f'b{b} p-e':>9} {'x':>5}" for b in BATCHES))
    for choice in CHOICES:
        cells = []
        for b in BATCHES:
            plain, padded = results[f"{choice} b{b}"], results[f"{choice} b{b} per-episode"]
            cells.append(f"{plain:>9.4f} {padded:>9.4f} {padded / plain:>5.2f}")
        print(f"{choice:<8} " + " ".join(cells))
    for choice, blocks in results["row_block_invariant"].items():
        print(f"row blocks that round alike ({choice}): {[b for b, ok in blocks.items() if ok]}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--image", action="store_true", help="also the paper's image config (slow on 2 cores)")
    args = parser.parse_args()
    out = {"threads": torch.get_num_threads(), "load_before": os.getloadavg()[0], "state": {}}
    out["state"] = bench("cpu recipe state U-Net", state_policy(), args.repeats)
    if args.image:
        out["image"] = bench("paper image config", image_policy(), args.repeats)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
