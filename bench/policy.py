"""Benchmark of Diffusion Policy (issue 5) and ACT (issue 12) on CPU in their papers' PushT image configurations.

    python bench/policy.py                 # everything (a few minutes on 2 cores)
    python bench/policy.py --policy act    # one policy only (diffusion or act)
    python bench/policy.py --threads 1     # torch intra-op threads (default: torch's default, one per core)
    python bench/policy.py --repeats 1     # fewer repetitions
    python bench/policy.py --policy state  # the cpu recipe's state U-Net (examples/train_pusht.py), eager and compiled

Measures, with the default DiffusionConfig (96x96 image + agent position, ResNet18, U-Net 512/1024/2048, 262.7 M
parameters) on synthetic PushT-shaped data:
- train_step_s_b64: one training step at batch 64 (forward, backward, AdamW step; fused AdamW, one pass over the
  weights), median over repeats after a warm-up step; the EMA update (hfpolicy.policies.ema.EMA.step) apart;
- chunk latency: `select_action` at the start of an episode (so it predicts a chunk: one observation encoding and
  N U-Net evaluations) under torch.inference_mode, at batch 1 with DDPM-100 and DDIM-10, and at batch 50 with DDIM-10;
- params_m: parameters in millions;
- the machine: `instruction_sets` (AVX2, AVX-512, AVX512-BF16, AMX from /proc/cpuinfo) and, measured in the same run
  at the same thread count, `memory_read_gb_s` (sum of a 1 GiB float32 tensor, median of 3) and `matvec_gb_s` (a
  1 GiB float32 matrix-vector product); each chunk figure is then also given as a multiple of its weight-bandwidth
  floor, the bytes of weights one chunk reads (the U-Net's once per denoising step, the encoder's once) over the
  read bandwidth: `floor_multiples` and `chunk_weight_bytes` (ACT: its weights once per chunk, `act_floor_multiple`);
- with native bf16 (AVX512-BF16 or AMX), also the DDIM-10 chunk at batch 1 acting in bf16 (`set_acting_dtype`), its
  floor counting the convolutions' weights at 2 bytes.
ACT, with the default ACTConfig (96x96 image + agent position, ResNet18, 512-wide transformer, chunks of 100, 51.6 M
parameters): act_train_step_s_b8, one training step at batch 8 (CVAE forward, backward, AdamW with the backbone's
parameter group), and act_chunk_latency_s_b1, `select_action` at an episode start at batch 1 (one chunk of 100).
Reference, LeRobot 0.6.1's DiffusionPolicy in the same configuration on this 2-core machine: 9.2 s per training step
at batch 64, 17.5 s per chunk at batch 1 with DDPM-100, 1.8 s with DDIM-10. Timings on a shared machine vary with
the other processes' load: compare runs taken side by side. Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import statistics
import time

import torch

LEROBOT_0_6_1 = {"train_step_s_b64": 9.2, "chunk_latency_s_b1_ddpm100": 17.5, "chunk_latency_s_b1_ddim10": 1.8}
# LeRobot 0.6.1's ACTPolicy measured the same way (default ACTConfig for PushT images, its AdamW over get_optim_params,
# pre/post-processors around select_action) on this machine with --threads 1, the setting in which the shared 2-core
# machine gave stable numbers: 1.65-2.31 s per train step at batch 8, 0.042-0.073 s per chunk at batch 1 (best kept).
LEROBOT_0_6_1_ACT = {"act_train_step_s_b8": 1.65, "act_chunk_latency_s_b1": 0.042}


def machine_info(gib: int = 1, repeats: int = 3) -> dict:
    """The CPU's instruction sets and its memory read bandwidth, measured now at torch's thread count (GB/s: summing a
    `gib` GiB float32 tensor, and a matrix-vector product over it; medians of `repeats` after a warm-up)."""
    from hfpolicy.policies.diffusion.cpu_kernels import instruction_sets

    data = torch.ones(gib * 2**28)
    matrix, vector = data.view(2**14, -1), torch.ones(data.numel() // 2**14)
    result: dict = {"instruction_sets": instruction_sets()}
    with torch.inference_mode():
        for name, run in (("memory_read_gb_s", data.sum), ("matvec_gb_s", lambda: matrix @ vector)):
            run()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            result[name] = round(data.numel() * 4 / statistics.median(times) / 1e9, 2)
    return result


def chunk_weight_bytes(policy, steps: int, acting_dtype: str = "float32") -> int:
    """Bytes of weights one Diffusion Policy chunk reads: the U-Net's once per denoising step (its convolutions' at 2
    bytes each when acting in bf16), every other weight once (the observation is encoded once per chunk)."""
    from hfpolicy.policies.diffusion.cpu_kernels import MatmulConv1d, MatmulConvTranspose1d

    def size(parameters) -> int:
        return sum(p.numel() * p.element_size() for p in parameters)

    unet = size(policy.unet.parameters())
    if acting_dtype == "bfloat16":
        convolutions = [m for m in policy.unet.modules() if isinstance(m, MatmulConv1d | MatmulConvTranspose1d)]
        unet -= size(m.weight for m in convolutions) // 2
    return unet * steps + size(policy.parameters()) - size(policy.unet.parameters())


def floor_multiple(seconds: float, weight_bytes: int, machine: dict) -> float:
    """`seconds` as a multiple of the time to read `weight_bytes` once at the measured read bandwidth."""
    return round(seconds / (weight_bytes / (machine["memory_read_gb_s"] * 1e9)), 2)


def make_policy(seed: int = 0):
    from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE
    from hfpolicy.policies import FeatureType, PolicyFeature
    from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy

    config = DiffusionConfig(
        input_features={
            OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    )
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    stats = {
        OBS_IMAGE: {"mean": torch.tensor([0.95, 0.95, 0.93]), "std": torch.tensor([0.15, 0.12, 0.13])},
        OBS_STATE: workspace,
        ACTION: workspace,
    }
    torch.manual_seed(seed)
    return DiffusionPolicy(config, dataset_stats=stats)


def training_batch(config, batch_size: int) -> dict[str, torch.Tensor]:
    from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE, pad_key

    generator = torch.Generator().manual_seed(0)
    return {
        OBS_IMAGE: torch.rand(batch_size, config.n_obs_steps, 3, 96, 96, generator=generator),
        OBS_STATE: torch.rand(batch_size, config.n_obs_steps, 2, generator=generator) * 512,
        ACTION: torch.rand(batch_size, config.horizon, 2, generator=generator) * 512,
        pad_key(ACTION): torch.zeros(batch_size, config.horizon, dtype=torch.bool),
    }


def make_act_policy(seed: int = 0):
    from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE
    from hfpolicy.policies import FeatureType, PolicyFeature
    from hfpolicy.policies.act import ACTConfig, ACTPolicy

    config = ACTConfig(
        input_features={
            OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    )
    workspace = {"mean": torch.full((2,), 256.0), "std": torch.full((2,), 100.0)}
    stats = {
        OBS_IMAGE: {"mean": torch.tensor([0.95, 0.95, 0.93]), "std": torch.tensor([0.15, 0.12, 0.13])},
        OBS_STATE: workspace,
        ACTION: workspace,
    }
    torch.manual_seed(seed)
    return ACTPolicy(config, dataset_stats=stats)


def bench_act(repeats: int, skip_training: bool, machine: dict) -> tuple[dict[str, float], list[tuple[str, ...]]]:
    """ACT's train step at batch 8 and chunk latency at batch 1 (median of `repeats` after a warm-up)."""
    from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE, pad_key
    from hfpolicy.training.setup import make_optimizer

    policy = make_act_policy()
    config = policy.config
    results: dict[str, float] = {"act_params_m": round(sum(p.numel() for p in policy.parameters()) / 1e6, 3)}
    rows = [("ACT parameters (M)", f"{results['act_params_m']:.1f}", "51.6")]
    generator = torch.Generator().manual_seed(0)
    if not skip_training:
        batch_size = 8
        batch = {
            OBS_IMAGE: torch.rand(batch_size, 1, 3, 96, 96, generator=generator),
            OBS_STATE: torch.rand(batch_size, 1, 2, generator=generator) * 512,
            ACTION: torch.rand(batch_size, config.chunk_size, 2, generator=generator) * 512,
            pad_key(ACTION): torch.zeros(batch_size, config.chunk_size, dtype=torch.bool),
        }
        policy.train()
        optimizer = make_optimizer(policy, "cpu")
        times = []
        for i in range(repeats + 1):
            start = time.perf_counter()
            loss = policy(batch)["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if i > 0:
                times.append(time.perf_counter() - start)
        results["act_train_step_s_b8"] = round(statistics.median(times), 3)
        reference = LEROBOT_0_6_1_ACT.get("act_train_step_s_b8", "")
        rows.append(("ACT train step, batch 8 (s)", f"{results['act_train_step_s_b8']:.2f}", f"{reference}"))
    policy.eval()
    observation = {
        OBS_IMAGE: torch.rand(1, 3, 96, 96, generator=generator),
        OBS_STATE: torch.rand(1, 2, generator=generator) * 512,
    }
    times = first_action_seconds(policy, observation, repeats)
    results["act_chunk_latency_s_b1"] = round(statistics.median(times), 4)
    weight_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    floor = floor_multiple(results["act_chunk_latency_s_b1"], weight_bytes, machine)
    results["act_floor_multiple"], results["act_chunk_weight_bytes"] = floor, weight_bytes
    reference = LEROBOT_0_6_1_ACT.get("act_chunk_latency_s_b1", "")
    rows.append(("ACT chunk, batch 1 (s)", f"{results['act_chunk_latency_s_b1']:.3f}", f"{reference}", f"{floor}"))
    return results, rows


def first_action_seconds(policy, observation: dict, repeats: int) -> list[float]:
    """Seconds of `repeats` select_action calls at an episode start (each predicts a chunk), after one warm-up."""
    times = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            policy.reset()
            start = time.perf_counter()
            action = policy.select_action(observation)
            if i > 0:
                times.append(time.perf_counter() - start)
    assert action.shape == (1, 2) and torch.isfinite(action).all()
    return times


def make_state_policy(seed: int = 0):
    """The cpu recipe's Diffusion Policy (examples/train_pusht.py: state + environment state, U-Net 64/128/256)."""
    import dataclasses
    import importlib.util
    from pathlib import Path

    from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
    from hfpolicy.policies import FeatureType, PolicyFeature
    from hfpolicy.policies.diffusion import DiffusionPolicy

    path = Path(__file__).resolve().parents[1] / "examples" / "train_pusht.py"
    spec = importlib.util.spec_from_file_location("train_pusht", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    config = dataclasses.replace(
        example.RECIPES["cpu"].policies["diffusion"].policy,
        input_features={
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
            OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    )
    box = {"min": torch.zeros(16), "max": torch.full((16,), 512.0)}
    stats = {
        OBS_STATE: {k: v[:2] for k, v in box.items()},
        OBS_ENV_STATE: box,
        ACTION: {k: v[:2] for k, v in box.items()},
    }
    torch.manual_seed(seed)
    return DiffusionPolicy(config, dataset_stats=stats), example.RECIPES["cpu"].run.batch_size


def bench_state(repeats: int) -> tuple[dict[str, float], list[tuple[str, ...]]]:
    """The cpu recipe's state U-Net: train step at the recipe's batch, eager and compiled (as the recipe trains),
    and the chunk latency at batch 1 with the recipe's DDIM-10."""
    from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE, pad_key

    policy, batch_size = make_state_policy()
    config = policy.config
    generator = torch.Generator().manual_seed(0)
    batch = {
        OBS_STATE: torch.rand(batch_size, config.n_obs_steps, 2, generator=generator) * 512,
        OBS_ENV_STATE: torch.rand(batch_size, config.n_obs_steps, 16, generator=generator) * 512,
        ACTION: torch.rand(batch_size, config.horizon, 2, generator=generator) * 512,
        pad_key(ACTION): torch.zeros(batch_size, config.horizon, dtype=torch.bool),
    }
    results = {"state_params_m": round(sum(p.numel() for p in policy.parameters()) / 1e6, 3)}
    rows = [("state U-Net parameters (M)", f"{results['state_params_m']:.1f}", "")]
    eager = bench_training(policy, batch_size, repeats, batch=batch)
    results[f"state_train_step_s_b{batch_size}_eager"] = round(eager["step"], 4)
    rows.append((f"state train step, batch {batch_size}, eager (s)", f"{eager['step']:.3f}", ""))
    start = time.perf_counter()
    policy.compile()
    compiled = bench_training(policy, batch_size, repeats, batch=batch, warmup=3)
    results["state_compile_s"] = round(time.perf_counter() - start - compiled["total"], 1)
    results[f"state_train_step_s_b{batch_size}_compiled"] = round(compiled["step"], 4)
    rows.append((f"state train step, batch {batch_size}, compiled (s)", f"{compiled['step']:.3f}", ""))
    rows.append(("  compiling + 3 warm-up steps (s)", f"{results['state_compile_s']:.0f}", ""))
    observation = {
        OBS_STATE: torch.rand(1, 2, generator=generator) * 512,
        OBS_ENV_STATE: torch.rand(1, 16, generator=generator) * 512,
    }
    policy.eval()
    times = first_action_seconds(policy, observation, repeats)
    results["state_chunk_latency_s_b1_ddim10"] = round(statistics.median(times), 4)
    rows.append(("state chunk, batch 1, DDIM-10 (s)", f"{results['state_chunk_latency_s_b1_ddim10']:.3f}", ""))
    return results, rows


def bench_training(policy, batch_size: int, repeats: int, batch=None, warmup: int = 1) -> dict[str, float]:
    from hfpolicy.policies.ema import EMA
    from hfpolicy.training.setup import make_optimizer

    config = policy.config
    policy.train()
    optimizer = make_optimizer(policy, "cpu")  # exactly the trainer's optimizer (fused AdamW)
    ema = EMA(policy, power=config.ema_power, max_decay=config.ema_max_decay)
    batch = training_batch(config, batch_size) if batch is None else batch
    parts: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "step": [], "ema": []}
    measured_start = None
    for i in range(repeats + warmup):  # the first steps warm up (allocations, oneDNN kernel choice, compiling)
        if i == warmup:
            measured_start = time.perf_counter()
        t0 = time.perf_counter()
        loss = policy(batch)["loss"]
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        ema.step(policy)
        t4 = time.perf_counter()
        if i >= warmup:
            for name, value in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t3 - t0, t4 - t3), strict=True):
                parts[name].append(value)
    total = time.perf_counter() - measured_start  # the measured steps' own time (bench_state: compile = rest)
    del optimizer, ema
    return {**{name: statistics.median(values) for name, values in parts.items()}, "total": total}


def bench_chunk(policy, batch_size: int, scheduler: str, steps: int, repeats: int) -> float:
    """Median seconds of the select_action call that predicts a chunk (first step of an episode)."""
    from hfpolicy.constants import OBS_IMAGE, OBS_STATE

    policy.eval()
    policy.set_sampler(scheduler, steps)
    generator = torch.Generator().manual_seed(1)
    observation = {
        OBS_IMAGE: torch.rand(batch_size, 3, 96, 96, generator=generator),
        OBS_STATE: torch.rand(batch_size, 2, generator=generator) * 512,
    }
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            policy.reset()
            start = time.perf_counter()
            action = policy.select_action(observation)
            times.append(time.perf_counter() - start)
    assert action.shape == (batch_size, 2) and torch.isfinite(action).all()
    return statistics.median(times)


def main() -> int:
    from hfpolicy.policies.diffusion.cpu_kernels import native_bf16

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3, help="measured repetitions of each quantity")
    parser.add_argument("--skip_training", action="store_true", help="only the acting latencies")
    parser.add_argument(
        "--policy", choices=["all", "diffusion", "act", "state"], default="all", help="which policy to measure"
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    results: dict[str, float | int | str | dict] = {"torch_threads": torch.get_num_threads()}
    machine = machine_info()
    results.update(machine)
    rows: list[tuple[str, ...]] = []
    if args.policy in ("all", "diffusion"):
        start = time.perf_counter()
        policy = make_policy()
        results["build_s"] = round(time.perf_counter() - start, 2)
        results["params_m"] = round(sum(p.numel() for p in policy.parameters()) / 1e6, 3)
        rows.append(("parameters (M)", f"{results['params_m']:.1f}", "262.7"))
        if not args.skip_training:
            train = bench_training(policy, 64, args.repeats)
            results["train_step_s_b64"] = round(train["step"], 3)
            results["train_parts_s_b64"] = {k: round(v, 3) for k, v in train.items() if k != "total"}
            rows.append(("train step, batch 64 (s)", f"{train['step']:.2f}", "9.2"))
            parts = "{forward:.2f} / {backward:.2f} / {optimizer:.2f}".format(**train)
            rows.append(("  forward / backward / AdamW (s)", parts, ""))
            rows.append(("  EMA update (s, apart)", f"{train['ema']:.2f}", ""))
        chunks = [
            (1, "DDIM", 10, "chunk_latency_s_b1_ddim10", args.repeats, "float32"),
            (1, "DDPM", 100, "chunk_latency_s_b1_ddpm100", max(1, args.repeats - 1), "float32"),
            (50, "DDIM", 10, "chunk_latency_s_b50_ddim10", max(1, args.repeats - 1), "float32"),
        ]
        if native_bf16():
            chunks.append((1, "DDIM", 10, "chunk_latency_s_b1_ddim10_bf16", args.repeats, "bfloat16"))
        floors: dict[str, float] = {}
        weight_bytes: dict[str, int] = {}
        for batch_size, scheduler, steps, key, repeats, dtype in chunks:
            policy.set_acting_dtype(dtype)
            seconds = bench_chunk(policy, batch_size, scheduler, steps, repeats)
            results[key] = round(seconds, 3)
            weight_bytes[key] = chunk_weight_bytes(policy, steps, dtype)
            floors[key] = floor_multiple(seconds, weight_bytes[key], machine)
            reference = LEROBOT_0_6_1.get(key)
            name = f"chunk, batch {batch_size}, {scheduler}-{steps}{', bf16' if dtype == 'bfloat16' else ''} (s)"
            rows.append((name, f"{seconds:.2f}", f"{reference or ''}", f"{floors[key]}"))
        policy.set_acting_dtype("float32")
        results["floor_multiples"], results["chunk_weight_bytes"] = floors, weight_bytes
        results["lerobot_0_6_1"] = LEROBOT_0_6_1
        del policy
    if args.policy in ("all", "act"):
        act_results, act_rows = bench_act(args.repeats, args.skip_training, machine)
        results.update(act_results)
        rows.extend(act_rows)
        results["lerobot_0_6_1_act"] = LEROBOT_0_6_1_ACT
    if args.policy == "state":  # not part of "all": compiling takes a few minutes
        state_results, state_rows = bench_state(args.repeats)
        results.update(state_results)
        rows.extend(state_rows)
    references = {**LEROBOT_0_6_1, **LEROBOT_0_6_1_ACT}
    checked = [results[key] <= value for key, value in references.items() if key in results]
    results["meets_targets"] = all(checked) if checked else None  # None: no LeRobot reference for what ran

    sets = ", ".join(name for name, present in machine["instruction_sets"].items() if present) or "none known"
    print(f"PushT image configs, CPU ({sets}), {results['torch_threads']} torch threads")
    print(f"memory read {machine['memory_read_gb_s']} GB/s, matrix-vector {machine['matvec_gb_s']} GB/s")
    print(f"{'measure':<36} {'hfpolicy':>10} {'LeRobot 0.6.1':>14} {'x floor':>8}")
    for name, value, reference, *floor in rows:
        print(f"{name:<36} {value:>10} {reference:>14} {''.join(floor):>8}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
