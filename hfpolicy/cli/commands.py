"""The `hfpolicy` command: one table of subcommands (COMMANDS, imported only when they run) and one runner. An error is
one line, exit status 2 for bad input, 1 for a failed run; Ctrl-C and SIGTERM stop any command cleanly (130 / 143)."""

import importlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hfpolicy.cli.info import environment_report
from hfpolicy.io.termination import SIGNAL_NAMES, Terminated, stop_on_signals


@dataclass(frozen=True)
class Command:
    """One subcommand."""

    config: str  # "module:Class": the dataclass its flags parse into (its --help is written from it)
    run: str  # "module:function": runs the parsed config; returns the line printed at the end (or None)
    help: str  # the one line `hfpolicy --help` gives it
    parse: str = "hfpolicy.cli.flags:parse_flags"  # "module:function" (config_class=, argv=, prog=) -> the config
    positional: str | None = None  # the field a first argument without `--` sets (`convert pusht-zarr ZARR`)
    bad_input: tuple[str, ...] = ()  # "module:Class" errors that mean bad input here, beyond BAD_INPUT (exit 2)
    failures: tuple[str, ...] = ()  # "module:Class" errors that mean the run failed (exit 1)


# Errors that are bad input for every command (checked by class, through each error's bases).
BAD_INPUT = (
    "builtins:ValueError",  # FlagError, TrainConfigError, DatasetFormatError, ... are ValueErrors
    "builtins:FileExistsError",
    "builtins:FileNotFoundError",
    "draccus.utils:ParsingError",
    "hfpolicy.io.run_lock:RunLockedError",
    "hfpolicy.policies.errors:PolicyLoadError",
    "hfpolicy.envs.mujoco_gl:RenderBackendError",  # no OpenGL backend for pixels: its line names MUJOCO_GL's choices
)

# name -> Command. A name with a space is a command of a group (`hfpolicy convert pusht-zarr`).
COMMANDS: dict[str, Command] = {
    "train": Command(
        config="hfpolicy.training.config:TrainConfig",
        run="hfpolicy.training.cli:run",
        parse="hfpolicy.training.config:parse_train_config",
        help="train a policy on a dataset (the main job; also `accelerate launch ...`)",
        bad_input=("hfpolicy.training.checkpoints:CheckpointError",),
        failures=(
            "hfpolicy.training.progress:TrainingDivergedError",
            "hfpolicy.hub.push:PushError",
            "hfpolicy.datasets.remote_files:StreamingError",  # a streamed file that cannot be fetched
            "hfpolicy.training.online:OnlineDataError",  # a full disk while a round's data is written
        ),
    ),
    "eval": Command(
        config="hfpolicy.eval.cli:EvalPipelineConfig",
        run="hfpolicy.eval.cli:run",
        help="evaluate a policy (local dir or Hub repo id) in batched simulation",
        failures=("hfpolicy.eval.rollouts:InvalidActionError", "hfpolicy.eval.cli:EvalWriteError"),
    ),
    "convert pusht-zarr": Command(
        config="hfpolicy.datasets.convert:PushTZarrConfig",
        run="hfpolicy.datasets.convert:convert_pusht_zarr_command",
        positional="zarr_path",
        help="convert the diffusion_policy PushT zarr to a LeRobot v3.0 dataset",
    ),
    "convert lerobot-v2.1": Command(
        config="hfpolicy.datasets.convert:LeRobotV21Config",
        run="hfpolicy.datasets.convert:convert_lerobot_v21_command",
        positional="source",
        help="convert a LeRobot v2.1 dataset (folder or Hub repo) to a LeRobot v3.0 dataset",
    ),
    "record": Command(
        config="hfpolicy.record.config:RecordConfig",
        run="hfpolicy.record.recording:record_command",
        help="record demonstrations with a scripted expert into a LeRobot v3.0 dataset",
        failures=("hfpolicy.record.recording:RecordWriteError",),
    ),
    "push": Command(
        config="hfpolicy.hub.push_config:PushConfig",
        run="hfpolicy.hub.push:push_command",
        help="push a training run (policy, evaluation, curve, card), or a dataset folder, to the Hub",
        bad_input=("hfpolicy.hub.push:PushError",),
    ),
    "export": Command(
        config="hfpolicy.hub.export:ExportConfig",
        run="hfpolicy.hub.export:export_command",
        help="write a saved policy in another library's layout (--format=lerobot)",
        failures=("hfpolicy.hub.export:ExportWriteError",),
    ),
    "view": Command(
        config="hfpolicy.viewer.view:ViewConfig",
        run="hfpolicy.viewer.view:view_command",
        positional="path",
        help="write one HTML page (offline) to look at a dataset, an evaluation or a run",
    ),
    "info": Command(
        config="hfpolicy.cli.info:InfoConfig",
        run="hfpolicy.cli.info:info_command",
        help="versions of hfpolicy, Python, torch (and the GPU it finds) and the key libraries",
    ),
}
SUBCOMMANDS = COMMANDS


def load(name: str) -> Any:
    """ "module:attribute" -> the attribute."""
    module_name, attribute = name.split(":")
    return getattr(importlib.import_module(module_name), attribute)


def usage(group: str | None = None) -> str:
    """`hfpolicy --help` (or, for a group such as "convert", the group's commands)."""
    names = [name for name in COMMANDS if group is None or name.startswith(f"{group} ")]
    head = "hfpolicy <command>" if group is None else f"hfpolicy {group} <format>"
    lines = [f"usage: {head} [--flag=value ...]", "", "commands:"]
    lines += [f"  {name:<19} {COMMANDS[name].help}" for name in names]
    lines += ["", "`hfpolicy <command> --help` lists a command's flags."]
    return "\n".join(lines)


def split_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the command's name, its flags) from `train --steps=3` or `convert pusht-zarr ZARR ...`."""
    if argv and argv[0] in COMMANDS:
        return argv[0], argv[1:]
    if len(argv) >= 2 and f"{argv[0]} {argv[1]}" in COMMANDS:
        return f"{argv[0]} {argv[1]}", argv[2:]
    return None, argv


def main(argv: list[str] | None = None) -> int:
    """`hfpolicy ...`: the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(environment_report())
        return 0
    name, rest = split_command(argv)
    if name is None:
        group = argv[0]
        if any(known.startswith(f"{group} ") for known in COMMANDS):  # a group without (or with an unknown) format
            if rest[1:2] in ([], ["-h"], ["--help"]):
                print(usage(group))
                return 0
            print(f"hfpolicy {group}: unknown format {rest[1]!r}\n\n{usage(group)}", file=sys.stderr)
            return 2
        print(f"hfpolicy: unknown command {group!r}; valid commands: {', '.join(COMMANDS)}\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    return run_command(name, rest)


def run_command(
    name: str,
    argv: list[str] | None = None,
    *,
    prog: str | None = None,
    config_class: type | None = None,
    before_run: Callable[[Any], None] | None = None,
) -> int:
    """Parses `argv` for the command `name`, runs it and prints its line; the exit status. `config_class` replaces the
    row's config (a subclass with other defaults), `before_run(cfg)` runs after the parse."""
    command = COMMANDS[name]
    prog = prog or f"hfpolicy {name}"
    argv = list(sys.argv[1:] if argv is None else argv)
    if command.positional and argv and not argv[0].startswith("-"):  # the input path, given positionally
        argv = [f"--{command.positional}={argv[0]}", *argv[1:]]
    try:
        with stop_on_signals():  # Ctrl-C and SIGTERM: Terminated, never swallowed where they land
            if config_class is None:
                config_class = load(command.config)
            cfg = load(command.parse)(config_class=config_class, argv=argv, prog=prog)
            if before_run is not None:
                before_run(cfg)
            line = load(command.run)(cfg)
    except Terminated as e:
        print(f"{prog}: stopped by {SIGNAL_NAMES[e.signum]}", file=sys.stderr, flush=True)
        return int(e.code)
    except Exception as e:
        status = exit_status(e, command)
        if status is None:
            raise
        cause = f" ({e.__cause__})" if type(e).__name__ == "ParsingError" and e.__cause__ else ""
        wait_for_the_main_process()
        print(f"{prog}: error: {e}{cause}", file=sys.stderr)
        return status
    if line:
        print(line)
    return 0


OTHER_RANK_WAIT_S = 20.0  # how long a launched process other than the main one holds back its error line


def wait_for_the_main_process() -> None:
    """In a launched process other than the main one, waits before its error line: the main process meets the same
    bad input, prints it and exits, and the launcher stops this one, so the error is printed once."""
    if int(os.environ.get("RANK", "0") or 0) > 0 and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        time.sleep(OTHER_RANK_WAIT_S)


def command_line() -> str:
    """This process's command line as one would type it again: `hfpolicy ...`, `python script.py ...` or
    `accelerate launch script.py ...`."""
    args = [shlex.quote(a) for a in sys.argv[1:]]
    script = sys.argv[0] if sys.argv else "hfpolicy"
    if os.environ.get("ACCELERATE_MIXED_PRECISION") is not None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return shlex.join(["accelerate", "launch", script]) + "".join(f" {a}" for a in args)
    if script.endswith(".py") and Path(script).name != "__main__.py":
        return " ".join(["python", shlex.quote(script), *args])
    return " ".join(["hfpolicy", *args])


def exit_status(error: BaseException, command: Command) -> int | None:
    """1 for a failure of the run, 2 for bad input, None for an error the runner does not know (a bug: raised)."""
    names = {f"{cls.__module__}:{cls.__qualname__}" for cls in type(error).__mro__}
    if names & set(command.failures):
        return 1
    if names & set(BAD_INPUT + command.bad_input):
        return 2
    return None
