"""bench/eval_throughput.py's ALOHA part with a tiny budget, so that it cannot rot between measurements: the state
and image runs step exactly the floor's env steps (the holding policy ends no episode early), and every number of
its JSON line is there and positive."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_aloha_eval_throughput_bench_runs_with_a_tiny_budget(capsys):
    spec = importlib.util.spec_from_file_location("eval_throughput_bench", ROOT / "bench" / "eval_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    flags = ["--env=aloha", "--episodes=3", "--batch_size=2", "--episode_length=6", "--repeats=1", "--device=cpu"]
    flags += ["--no-shadows", "--image_episode_length=2", "--render_frames=1"]
    assert bench.main(flags) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["env"] == "aloha/AlohaTransferCube-v0" and result["batch_size"] == 2 and not result["shadows"]
    assert result["env_steps"] == 3 * 6 and result["image_env_steps"] == 3 * 2  # every episode to its time limit
    for key in ("env_floor_s", "serial_s", "serial_vs_floor", "image_env_floor_s", "image_serial_s"):
        assert result[key] > 0, key
    assert 0 < result["render_s_per_frame"] < 30  # one 480x640 frame
    assert any(line.startswith("images: serial batch 2") for line in lines)
