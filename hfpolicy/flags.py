"""Command-line flags → dataclass configs (draccus), with errors in the command line's own words.

    cfg = parse_flags(TrainConfig, argv, prog="hfpolicy train")

`--help` prints `usage: <prog> ...`. A bad flag raises FlagError with one line: the flag as typed (`--steps`, not
`steps`), what was wrong, and where the flags are listed; draccus's 50-line usage dump is not printed first.
"""

import argparse
import re
from pathlib import Path

import draccus
from draccus.utils import DraccusException


class FlagError(ValueError):
    """A command-line flag that does not exist or cannot be parsed."""


def parse_flags(config_class: type, argv: list[str], prog: str, config_path: str | Path | None = None):
    """draccus.parse with `prog` as the usage name and FlagError instead of a usage dump and SystemExit."""
    try:
        return draccus.parse(config_class, config_path=config_path, args=argv, prog=prog, exit_on_error=False)
    except (DraccusException, argparse.ArgumentError) as e:
        raise FlagError(describe_flag_error(e, prog)) from e


def describe_flag_error(error: BaseException, prog: str) -> str:
    """`steps`: Couldn't parse 'abc' into an int → --steps: couldn't parse 'abc' into an int (...)."""
    message = str(error).strip().splitlines()[0]
    message = re.sub(r"^`([\w.]+)`:", lambda m: f"--{m.group(1)}:", message)
    message = re.sub(r"^argument (--[\w.]+):", r"\1:", message)
    cause = error.__cause__
    if cause is not None and str(cause) and str(cause) not in message:
        message += f" ({str(cause).splitlines()[0]})"
    return f"{message}; `{prog} --help` lists the flags"
