"""Errors under a bare `accelerate launch` of several processes: every process meets the same bad flag, and the
launch prints the training's error line once (the main process's), not once per process. What accelerate and torchrun
print after it (their traceback and report) is theirs: `python examples/train_pusht.py --num_processes=N` or
`accelerate launch --quiet` end with the training's line."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_bad_flag_under_a_bare_multi_process_launch_is_one_line(tmp_path):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += [str(ROOT / "examples" / "train_pusht.py"), "--steps=0", f"--output_dir={tmp_path / 'run'}"]
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("train_pusht.py: error:")]
    assert errors == ["train_pusht.py: error: --steps must be >= 1, got 0"], result.stderr[-3000:]
    assert not (tmp_path / "run").exists()
