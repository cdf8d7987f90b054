"""`--num_processes=N` of the example scripts: the flags are checked once, then the script runs again under
`accelerate launch`, and the launching process ends with the training's last line and exit status (not accelerate's
traceback). The launched main process writes them into the file HFPOLICY_LAUNCH_RESULT names (`report_result`).
"""

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from hfpolicy.constants import TRAIN_CONFIG_FILE
from hfpolicy.io.termination import die_with_parent
from hfpolicy.runs.run_folder import RunFolder
from hfpolicy.training.config import parse_train_config, validate_train_config
from hfpolicy.training.resume_flags import check_resume_flags

RESULT_ENV = "HFPOLICY_LAUNCH_RESULT"


def is_launch_main_process() -> bool:
    """Whether this is the main process of the launch, asked before the Accelerator exists (a PartialState made for
    this would fix the distributed setup first: on CPU each launched process would then train alone)."""
    return int(os.environ.get("RANK", "0")) == 0


class _LastLine:
    """A stderr that remembers the last line starting with one of `starts` (the error or stop line)."""

    def __init__(self, stream, starts: tuple[str, ...]):
        self.stream, self.starts = stream, starts
        self.line: str | None = None

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith(self.starts):
                self.line = line
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def report_result(prog: str, run: Callable[[], int]) -> int:
    """`run()`'s exit status, and in a launched main process that status and its last error or stop line."""
    result_file = os.environ.get(RESULT_ENV)
    if not result_file or not is_launch_main_process():
        return run()
    stderr = sys.stderr = _LastLine(sys.stderr, (f"{prog}: error:", "stopped by "))
    status = 1
    try:
        status = run()
        return status
    except SystemExit as e:  # RunStopped: 130 or 143
        status = e.code if isinstance(e.code, int) else 1
        raise
    finally:
        sys.stderr = stderr.stream
        Path(result_file).write_text(json.dumps({"status": status, "line": stderr.line}))


def check_before_launch(argv: list[str], prog: str) -> str | None:
    """The one-line error for flags (or a run folder) that would fail in every launched process, or None."""
    try:
        cfg = parse_train_config(argv, prog=prog)
        validate_train_config(cfg)
        if cfg.output_dir:
            RunFolder(cfg.output_dir).check_for(resume=cfg.resume)
            if cfg.resume:
                check_resume_flags(cfg, Path(cfg.output_dir) / TRAIN_CONFIG_FILE)
    except ValueError as e:  # FlagError, TrainConfigError
        return f"{prog}: error: {e}"
    return None


def launch(script: str, num_processes: int, argv: list[str]) -> int:
    """Runs `script argv` on `num_processes` processes; the main process's exit status, after its last line."""
    import torch

    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["ACCELERATE_USE_CPU"] = "1"  # DDP over gloo on CPU processes
    command = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", "--multi_gpu", "--num_machines", "1"]
    command += ["--num_processes", str(num_processes), script, *argv]
    with tempfile.TemporaryDirectory(prefix="hfpolicy-launch-") as folder:
        env[RESULT_ENV] = str(Path(folder) / "result.json")
        # the launcher (and through it its trainers) stops when this process dies, even on kill -9
        launcher = subprocess.Popen(
            command, env=env, preexec_fn=functools.partial(die_with_parent, os.getpid(), signal.SIGTERM)
        )
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
            signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: launcher.send_signal(signal.SIGTERM)),
        }
        try:
            launcher_status = launcher.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        result_file = Path(env[RESULT_ENV])
        result = json.loads(result_file.read_text()) if result_file.is_file() else None
    if result is None:  # the launch failed before the training reported (the launcher's error is above)
        return launcher_status if launcher_status > 0 else 128 - launcher_status
    if result["status"] != 0 and result["line"]:
        print(result["line"], file=sys.stderr, flush=True)
    return result["status"]
