"""The `hfpolicy` command: its subcommands (hfpolicy.cli.commands) and their flags (hfpolicy.cli.flags)."""

from hfpolicy.cli.commands import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "main"]
