"""Benchmark of LeRobot checkpoints in hfpolicy (issue 11).

    python bench/lerobot_interop.py               # both fixtures of ../shared/fixtures/lerobot-0.6.1
    python bench/lerobot_interop.py --repeats 3

For each LeRobot 0.6.1 Diffusion Policy fixture (image: ResNet18 + U-Net 64/128, DDIM-10; state: U-Net 32/64/128,
DDIM-20), measures:
- load_s: `Policy.from_pretrained(<LeRobot dir>)` (read config + processors + weights, convert, build), median;
- the same for a native hfpolicy save of the very same policy (`save_pretrained` of the converted one);
- chunk latency (batch 3, the fixture's observations and noise) of the converted policy, which runs PyTorch's own
  kernels (`set_cpu_kernels("torch")`, LeRobot's rounding), and of the same weights with hfpolicy's fast CPU kernels;
- max_abs_error_*: largest |hfpolicy action - LeRobot action| against the chunk LeRobot computed (reference.safetensors),
  with 2 intra-op threads as LeRobot did, and with hfpolicy's fast kernels (float rounding only; action units ~500).
Prints a table; the LAST line is one JSON object.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from hfpolicy.policies import Policy

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "lerobot-0.6.1"
REFERENCE_THREADS = 2  # LeRobot computed reference.safetensors with 2 intra-op threads


def timed(function, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_fixture(name: str, repeats: int) -> dict[str, float]:
    folder = FIXTURES / f"lerobot_dp_{name}_ddim"
    ref = load_file(str(folder / "reference.safetensors"))
    observation = {k.removeprefix("obs."): v for k, v in ref.items() if k.startswith("obs.")}
    load_s, policy = timed(lambda: Policy.from_pretrained(folder / "pretrained_model"), repeats)
    with tempfile.TemporaryDirectory() as tmp:
        policy.save_pretrained(tmp)
        native_load_s, _ = timed(lambda: Policy.from_pretrained(tmp), repeats)
        fast = Policy.from_pretrained(tmp)
        fast.set_cpu_kernels("matmul")
    chunk_s, actions = timed(lambda: policy.predict_action_chunk(observation, noise=ref["noise"]), repeats)
    fast_chunk_s, fast_actions = timed(lambda: fast.predict_action_chunk(observation, noise=ref["noise"]), repeats)
    return {
        "load_s": load_s,
        "native_load_s": native_load_s,
        "chunk_s": chunk_s,
        "fast_chunk_s": fast_chunk_s,
        "max_abs_error": (actions - ref["actions"]).abs().max().item(),
        "max_abs_error_fast_kernels": (fast_actions - ref["actions"]).abs().max().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not FIXTURES.is_dir():
        raise SystemExit(f"the LeRobot fixtures are not at {FIXTURES} (../shared beside the repo)")
    torch.set_num_threads(REFERENCE_THREADS)
    results = {name: bench_fixture(name, args.repeats) for name in ("image", "state")}

    print(
        f"{'fixture':<8} {'load LeRobot s':>15} {'load native s':>14} {'chunk s':>9} {'chunk fast s':>13} "
        f"{'max |err|':>10} {'max |err| fast':>15}"
    )
    for name, r in results.items():
        print(
            f"{name:<8} {r['load_s']:>15.3f} {r['native_load_s']:>14.3f} {r['chunk_s']:>9.3f} {r['fast_chunk_s']:>13.3f} "
            f"{r['max_abs_error']:>10.2e} {r['max_abs_error_fast_kernels']:>15.2e}"
        )
    summary = {
        "max_abs_error_image": results["image"]["max_abs_error"],
        "max_abs_error_state": results["state"]["max_abs_error"],
        "load_s": results["image"]["load_s"],
        "load_s_state": results["state"]["load_s"],
        "native_load_s": results["image"]["native_load_s"],
        "chunk_s_image_b3_ddim10": results["image"]["chunk_s"],
        "chunk_s_image_b3_ddim10_fast_kernels": results["image"]["fast_chunk_s"],
        "chunk_s_state_b3_ddim20": results["state"]["chunk_s"],
        "chunk_s_state_b3_ddim20_fast_kernels": results["state"]["fast_chunk_s"],
        "max_abs_error_image_fast_kernels": results["image"]["max_abs_error_fast_kernels"],
        "max_abs_error_state_fast_kernels": results["state"]["max_abs_error_fast_kernels"],
        "threads": REFERENCE_THREADS,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
