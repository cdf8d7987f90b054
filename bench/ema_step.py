"""hfpolicy's EMA step against diffusers' EMAModel.step on Diffusion Policy U-Nets (issue 13: why ema.py is kept).

    python bench/ema_step.py                                  # CPU, 1 thread, the CPU recipe's and a larger U-Net
    python bench/ema_step.py --device cuda --down_dims 512,1024,2048

Both implement the same average (decay = min(max_decay, 1 - (1 + n) ** -power), trainable parameters averaged);
tests/policies/diffusion/test_ema.py checks that they agree. This times one update after each optimizer step
(min over repeats). Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import time

import torch


def time_per_call(fn, device: str, repeats: int = 5, calls: int = 20) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    parser.add_argument("--down_dims", action="append", help="U-Net widths, e.g. 64,128,256 (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from diffusers.training_utils import EMAModel

    from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
    from hfpolicy.policies import FeatureType, PolicyFeature
    from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy
    from hfpolicy.policies.ema import EMA

    rows = []
    for dims in args.down_dims or ["64,128,256", "256,512,1024"]:
        config = DiffusionConfig(
            input_features={
                OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
                OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
            },
            output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
            down_dims=tuple(int(d) for d in dims.split(",")),
        )
        policy = DiffusionPolicy(config).to(args.device)
        ours = EMA(policy, power=config.ema_power, max_decay=config.ema_max_decay)
        reference = EMAModel(
            policy.parameters(), decay=config.ema_max_decay, use_ema_warmup=True, power=config.ema_power, foreach=True
        )
        ours_s = time_per_call(lambda ema=ours, model=policy: ema.step(model), args.device)
        diffusers_s = time_per_call(lambda ema=reference, model=policy: ema.step(model.parameters()), args.device)
        rows.append(
            {
                "down_dims": dims,
                "params_m": round(sum(p.numel() for p in policy.parameters()) / 1e6, 1),
                "hfpolicy_ms": round(1e3 * ours_s, 2),
                "diffusers_ms": round(1e3 * diffusers_s, 2),
            }
        )
    print(f"{'down_dims':>16} {'params (M)':>10} {'hfpolicy ms':>12} {'diffusers ms':>13}")
    for r in rows:
        print(f"{r['down_dims']:>16} {r['params_m']:>10} {r['hfpolicy_ms']:>12} {r['diffusers_ms']:>13}")
    print(json.dumps({"bench": "ema_step", "device": args.device, "threads": args.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
