"""bench/gpu.py's CPU path with a tiny config, so that the GPU script cannot rot between GPU runs: every variant it
times runs (the compiled ones apart: compiling costs a minute on a CPU), the eval throughput is measured, the loss
curve is recorded, and the last line is the JSON object with the table's numbers."""

import importlib.util
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_bench_runs_on_the_cpu_with_a_tiny_config(capsys):
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "bench" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    flags = ["--tiny", "--device=cpu", "--no-compile", "--batch-size=4", "--warmup-steps=1", "--timing-steps=1"]
    gpu.main([*flags, "--curve-steps=4", "--eval-batch=2", "--eval-chunks=1", "--budget-s=120"])
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result["variants"]) == {"fp32", "bf16"}
    for variant in result["variants"].values():
        assert variant["steps_per_s"] > 0 and variant["data_wait_ms_per_step"] >= 0, variant
    assert result["eval_chunks_per_s_b50_ddim10"] > 0
    assert result["frames_to_float_exact"] is True
    curve = result["loss_curve"]
    assert len(curve) >= 2 and [step for step, _ in curve] == list(range(1, len(curve) + 1))
    assert all(math.isfinite(loss) and loss > 0 for _, loss in curve)
    assert any(line.startswith("fp32 ") for line in lines) and "loss curve" in "\n".join(lines)
