import subprocess
import sys

import pytest

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


def test_each_command_help_names_itself(capsys):
    for name in ("eval", "record", "export", "push"):
        with pytest.raises(SystemExit) as exit_info:  # argparse's --help exits 0
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: hfpolicy {name} ")
    with pytest.raises(SystemExit):
        main(["convert", "pusht-zarr", "--help"])
    assert capsys.readouterr().out.startswith("usage: hfpolicy convert pusht-zarr ")


def test_a_mistyped_flag_is_one_line_in_cli_words(capsys):
    for name, flag in (("train", "--stepz=3"), ("eval", "--eval.n_episode=3"), ("push", "--runn=x")):
        assert main([name, flag]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "usage:" not in err  # no usage dump before it
        assert f"unrecognized arguments: {flag}" in err and f"`hfpolicy {name} --help` lists the flags" in err
    assert main(["train", "--steps=abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hfpolicy train: error: --steps: Couldn't parse 'abc' into an int") and err.count("\n") == 1
