"""The paper recipe on one GPU, in one short run (issue 20): fits 8 minutes on one GPU, needs no network and no data.

    python bench/gpu.py                       # on a CUDA machine: the paper's image config (262.7 M params), batch 64
    python bench/gpu.py --budget-s 300        # a tighter wall-clock budget (the loss curve stops at it)
    python bench/gpu.py --tiny --device cpu   # CI: a tiny config on the CPU, a few seconds (tests/bench/test_gpu.py)

Data: synthesized PushT-shaped windows (96x96 image + agent position -> a 16-step action horizon), so the working
tree alone runs it: the image shows the agent as a bright disc, the actions continue its motion; a policy that
learns drives the loss down. Served by a DataLoader (worker processes, pinned memory) as training data would be.

Measures:
- train steps per second (forward, backward, fused AdamW, EMA update) at the recipe's batch in fp32 and bf16
  (torch.autocast), each eager and under torch.compile (a compile failure is reported, not fatal), with the peak
  GPU memory of each and the data-loader wait per step (time blocked on the next batch);
- eval throughput: DDIM-10 action chunks at batch 50 (chunks/s and actions/s: n_action_steps per chunk and env);
- a loss curve of `--curve-steps` (default 2000) steps with the fastest eager variant, falling from its start;
- frames_to_float_exact: a training run's uint8 frames made float32 on the device equal the CPU's values.
Prints a table; the LAST line is one JSON object with the same numbers.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE, pad_key  # noqa: E402
from hfpolicy.datasets.batch_images import by_table, frames_to_float  # noqa: E402
from hfpolicy.policies import FeatureType, PolicyFeature  # noqa: E402
from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy  # noqa: E402
from hfpolicy.policies.ema import EMA  # noqa: E402


class SyntheticPushT(Dataset):
    """Training windows whose actions follow from the images: a disc at the agent's position moving with a constant
    velocity that the two observed frames show; the actions continue the motion. Deterministic per index."""

    def __init__(self, config: DiffusionConfig, size: int, length: int = 4096):
        self.config, self.size, self.length = config, size, length
        ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        self.grid = torch.stack([xs, ys]).float()  # (2, H, W) pixel coordinates

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        start = torch.rand(2, generator=generator) * 300 + 100  # agent position in PushT's 512 x 512 units
        velocity = (torch.rand(2, generator=generator) - 0.5) * 16
        cfg = self.config
        times = torch.arange(1 - cfg.n_obs_steps, 1 - cfg.n_obs_steps + cfg.horizon).float()[:, None]
        positions = (start + times * velocity).clamp(0, 512)  # (horizon, 2)
        observed = positions[: cfg.n_obs_steps]
        pixels = observed / 512 * self.size
        distance = (self.grid[None] - pixels[:, :, None, None]).square().sum(1).sqrt()  # (T, H, W)
        image = (distance < self.size / 12).float()[:, None].expand(-1, 3, -1, -1)
        return {
            OBS_IMAGE: image.contiguous(),
            OBS_STATE: observed,
            ACTION: positions,
            pad_key(ACTION): torch.zeros(cfg.horizon, dtype=torch.bool),
        }


def make_policy(tiny: bool) -> tuple[DiffusionPolicy, int]:
    """The paper's PushT image config (DiffusionConfig defaults), or a tiny one for CI; and its image size."""
    size = 16 if tiny else 96
    features = {
        "input_features": {
            OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, size, size)),
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        "output_features": {ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    }
    small = dict(down_dims=(16, 32), diffusion_step_embed_dim=16, spatial_softmax_num_keypoints=4, crop_shape=(14, 14))
    config = DiffusionConfig(**features, **(small if tiny else {}))
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    stats = {OBS_IMAGE: {"mean": torch.full((3,), 0.05), "std": torch.full((3,), 0.2)}}
    stats |= {OBS_STATE: workspace, ACTION: workspace}
    torch.manual_seed(0)
    return DiffusionPolicy(config, dataset_stats=stats), size


class Trainer:
    """One variant: a fresh policy (same initial weights), fused AdamW, EMA; autocast dtype; compiled or not."""

    def __init__(self, args, device: torch.device, dtype: torch.dtype, compiled: bool):
        self.policy, size = make_policy(args.tiny)
        self.policy.to(device).train()
        self.device, self.dtype = device, dtype
        cfg = self.policy.config
        self.optimizer = torch.optim.AdamW(
            self.policy.get_optim_params(),
            lr=cfg.optimizer_lr,
            betas=cfg.optimizer_betas,
            eps=cfg.optimizer_eps,
            weight_decay=cfg.optimizer_weight_decay,
            fused=device.type in ("cpu", "cuda"),
        )
        self.ema = EMA(self.policy, power=cfg.ema_power, max_decay=cfg.ema_max_decay)
        self.forward = torch.compile(self.policy) if compiled else self.policy
        workers = 0 if args.tiny else min(8, os.cpu_count() or 1)
        self.loader = DataLoader(
            SyntheticPushT(cfg, size),
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=workers,
            pin_memory=device.type == "cuda",
            drop_last=True,
            persistent_workers=workers > 0,
            generator=torch.Generator().manual_seed(0),
        )
        self.batches = self._endless()

    def _endless(self):
        while True:
            yield from self.loader

    def step(self) -> tuple[float, float]:
        """(loss, seconds waited for the batch)."""
        start = time.perf_counter()
        batch = {k: v.to(self.device, non_blocking=True) for k, v in next(self.batches).items()}
        waited = time.perf_counter() - start
        autocast = torch.autocast(self.device.type, dtype=self.dtype) if self.dtype != torch.float32 else None
        with autocast or contextlib.nullcontext():
            loss = self.forward(batch)["loss"]
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.ema.step(self.policy)
        return loss.item(), waited


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure_variant(args, device: torch.device, dtype: torch.dtype, compiled: bool) -> dict:
    """Steps per second (after warm-up steps, which include compiling), data wait per step, peak memory."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(args, device, dtype, compiled)
    start = time.perf_counter()
    for _ in range(args.warmup_steps):
        trainer.step()
    synchronize(device)
    warmup_s = time.perf_counter() - start
    waits, start = [], time.perf_counter()
    for _ in range(args.timing_steps):
        waits.append(trainer.step()[1])
    synchronize(device)
    seconds = time.perf_counter() - start
    memory = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {
        "steps_per_s": round(args.timing_steps / seconds, 3),
        "data_wait_ms_per_step": round(1000 * statistics.mean(waits), 2),
        "peak_memory_gib": None if memory is None else round(memory, 2),
        "warmup_s": round(warmup_s, 1),
    }


def eval_throughput(args, device: torch.device) -> dict:
    """DDIM-10 chunks at batch `args.eval_batch` from the trained-shape policy under inference_mode."""
    policy, size = make_policy(args.tiny)
    policy.set_sampler("DDIM", 10)
    policy.to(device).eval()
    n_obs = policy.config.n_obs_steps
    observation = {
        OBS_IMAGE: torch.rand(args.eval_batch, n_obs, 3, size, size, device=device),
        OBS_STATE: torch.rand(args.eval_batch, n_obs, 2, device=device) * 512,
    }
    with torch.inference_mode():
        policy.predict_action_chunk(observation)  # warm-up
        synchronize(device)
        start = time.perf_counter()
        for _ in range(args.eval_chunks):
            policy.predict_action_chunk(observation)
        synchronize(device)
    chunks_per_s = args.eval_chunks / (time.perf_counter() - start)
    return {
        "eval_chunks_per_s_b50_ddim10": round(chunks_per_s, 3),
        "eval_actions_per_s_b50_ddim10": round(chunks_per_s * args.eval_batch * policy.config.n_action_steps, 1),
    }


def loss_curve(args, device: torch.device, dtype: torch.dtype, deadline: float) -> list[list[float]]:
    """[[step, mean loss of the steps since the previous point]] every curve_steps / 20 steps, until the deadline."""
    trainer = Trainer(args, device, dtype, compiled=False)
    every = max(1, args.curve_steps // 20)
    curve, losses = [], []
    for step in range(1, args.curve_steps + 1):
        losses.append(trainer.step()[0])
        if step % every == 0:
            curve.append([step, round(statistics.mean(losses), 5)])
            losses = []
            if time.perf_counter() > deadline and len(curve) >= 2:
                break
    return curve


def frames_to_float_exact(device: torch.device) -> bool:
    """Whether a run's uint8 frames become on `device` the very float32 values the CPU gives (batch_images.py)."""
    frames = torch.arange(256, dtype=torch.uint8).repeat(3, 1)
    on_device = frames_to_float(frames.to(device)).cpu()
    return torch.equal(on_device, frames_to_float(frames)) and torch.equal(on_device, by_table(frames))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny config (CI on the CPU)")
    parser.add_argument("--batch-size", type=int, default=64, help="the paper's batch")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps per variant (compiling included)")
    parser.add_argument("--timing-steps", type=int, default=30)
    parser.add_argument("--curve-steps", type=int, default=2000)
    parser.add_argument("--eval-batch", type=int, default=50)
    parser.add_argument("--eval-chunks", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled variants")
    parser.add_argument("--budget-s", type=float, default=450, help="the loss curve stops when this much has passed")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    started = time.perf_counter()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        torch.backends.cudnn.benchmark = True
    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "variants": {}}
    result["params_m"] = round(sum(p.numel() for p in make_policy(args.tiny)[0].parameters()) / 1e6, 1)
    variants = [("fp32", torch.float32, False), ("bf16", torch.bfloat16, False)]
    if not args.no_compile:
        variants += [("fp32+compile", torch.float32, True), ("bf16+compile", torch.bfloat16, True)]
    for name, dtype, compiled in variants:
        try:
            result["variants"][name] = measure_variant(args, device, dtype, compiled)
        except Exception as e:  # e.g. a compiler missing on the machine: reported, the others still run
            result["variants"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    result |= eval_throughput(args, device)
    result["frames_to_float_exact"] = frames_to_float_exact(device)
    eager = {n: v for n, v in result["variants"].items() if "+" not in n and "steps_per_s" in v}
    fastest = max(eager, key=lambda n: eager[n]["steps_per_s"])
    curve = loss_curve(args, device, dict(fp32=torch.float32, bf16=torch.bfloat16)[fastest], started + args.budget_s)
    result |= {"curve_variant": fastest, "loss_curve": curve, "wall_s": round(time.perf_counter() - started, 1)}
    result["loss_falls"] = len(curve) >= 2 and curve[-1][1] < 0.5 * curve[0][1] and math.isfinite(curve[-1][1])
    print_table(result)
    print(json.dumps(result))
    return result


def print_table(result: dict) -> None:
    print(f"\nDiffusion Policy, paper image config ({result['params_m']} M params) on {result['device']}")
    print(f"{'variant':<14} {'steps/s':>8} {'data wait ms':>13} {'peak GiB':>9} {'warm-up s':>10}")
    for name, v in result["variants"].items():
        if "error" in v:
            print(f"{name:<14} failed: {v['error']}")
            continue
        memory = "-" if v["peak_memory_gib"] is None else f"{v['peak_memory_gib']:.2f}"
        print(
            f"{name:<14} {v['steps_per_s']:>8.2f} {v['data_wait_ms_per_step']:>13.2f} {memory:>9} {v['warmup_s']:>10.1f}"
        )
    print(
        f"eval DDIM-10 at batch 50: {result['eval_chunks_per_s_b50_ddim10']:.2f} chunks/s "
        f"({result['eval_actions_per_s_b50_ddim10']:.0f} actions/s)"
    )
    curve = result["loss_curve"]
    if curve:
        print(
            f"loss curve ({result['curve_variant']}, {curve[-1][0]} steps): {curve[0][1]:.4f} -> {curve[-1][1]:.4f} "
            f"({'falls' if result['loss_falls'] else 'does NOT fall by half'}); wall {result['wall_s']:.0f} s"
        )
    print(f"uint8 frames made float32 on the device: {'exact' if result['frames_to_float_exact'] else 'NOT exact'}")


if __name__ == "__main__":
    main()
