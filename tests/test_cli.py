import subprocess
import sys

from hfpolicy.cli import SUBCOMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_unknown_command_names_the_valid_ones(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "train" in err


def test_console_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "hfpolicy.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "usage: hfpolicy" in result.stdout
