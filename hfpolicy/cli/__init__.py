"""The `hfpolicy` command: one table of subcommands (hfpolicy.cli.commands) and the flag parser and --help writer
every subcommand shares (hfpolicy.cli.flags)."""

from hfpolicy.cli.commands import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "main"]
