"""Fine-tuning says what it starts from (hfpolicy.training.finetune): a run folder is fixed to its last checkpoint,
named with its step in the first line, and refused while a live run still trains in it; a recipe's own --policy.*
flags never contradict --policy.path, and a --policy.type the user typed that does is said as such."""

import json
import sys
from pathlib import Path

import pytest
from test_train import TINY_POLICY

from hfpolicy.io.run_lock import RunLock
from hfpolicy.training import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_run(pusht_state_dataset, tmp_path_factory) -> Path:
    """A finished 2-step run of the tiny diffusion policy (its checkpoint: step 2)."""
    out = tmp_path_factory.mktemp("finetune") / "base"
    flags = [f"--dataset.root={pusht_state_dataset}", "--eval.freq=0", "--save_freq=2", "--steps=2"]
    assert main([*flags, *TINY_POLICY, f"--output_dir={out}"]) == 0
    return out


def tune_flags(dataset: Path, out: Path) -> list[str]:
    return [f"--dataset.root={dataset}", "--eval.freq=0", "--steps=1", "--batch_size=8", "--tracker=none",
            "--progress=false", "--num_threads=1", f"--output_dir={out}"]  # fmt: skip


def test_a_run_folder_is_fixed_to_its_checkpoint_and_refused_while_its_run_lives(
    base_run, pusht_state_dataset, tmp_path, capsys
):
    checkpoint = base_run / "checkpoints" / "step_000002" / "pretrained_model"
    flags = tune_flags(pusht_state_dataset, tmp_path / "tuned")
    capsys.readouterr()
    lock = RunLock(base_run).acquire()  # the base run still training
    try:
        assert main([f"--policy.path={base_run}", *flags]) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a run still training" in err and f"--policy.path={checkpoint}" in err
    assert not (tmp_path / "tuned").exists()

    assert main([f"--policy.path={base_run}", *flags]) == 0  # the run ended: its last checkpoint, said
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("hfpolicy train:"))
    assert first.endswith(f"; fine-tuning from {checkpoint} (step 2)")
    saved = json.loads((tmp_path / "tuned" / "train_config.json").read_text())
    assert saved["policy"]["pretrained_path"] == str(checkpoint)  # where it started, not a link that moves on


def test_a_named_checkpoint_of_a_live_run_is_taken_as_it_is(base_run, pusht_state_dataset, tmp_path, capsys):
    checkpoint = base_run / "checkpoints" / "step_000002" / "pretrained_model"
    with RunLock(base_run):
        assert main([f"--policy.path={checkpoint}", *tune_flags(pusht_state_dataset, tmp_path / "tuned")]) == 0
    assert f"; fine-tuning from {checkpoint} (step 2)" in capsys.readouterr().out


def test_a_policy_type_that_contradicts_the_checkpoint_is_said_as_such(base_run, pusht_state_dataset, tmp_path, capsys):
    source = base_run / "checkpoints" / "step_000002" / "pretrained_model"
    flags = tune_flags(pusht_state_dataset, tmp_path / "tuned")
    assert main([f"--policy.path={source}", "--policy.type=act", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"--policy.path={source} is a saved diffusion policy, and --policy.type=act contradicts it" in err
    assert main([f"--policy.path={source}", "--policy.type=diffusion", *flags]) == 0  # agreeing: fine


def test_the_cpu_recipe_fine_tunes_with_only_the_users_policy_flags(base_run, pusht_state_dataset, tmp_path, capsys):
    """examples/train_pusht.py --recipe=cpu adds its own --policy.* preset: with --policy.path they must not count
    as the user's (they refused every saved policy whose config differs from the preset)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_pusht", ROOT / "examples" / "train_pusht.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    source = base_run / "checkpoints" / "step_000002" / "pretrained_model"
    flags = [f"--policy.path={source}", *tune_flags(pusht_state_dataset, tmp_path / "tuned"), "--compile=false"]
    assert not any(f.startswith("--policy.") for f in example.recipe_flags("cpu", flags))
    assert example.run(["--recipe=cpu", *flags]) == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "tuned" / "train_config.json").read_text())
    assert saved["policy"]["down_dims"] == [16, 32] and saved["recipe"] == "cpu"  # the saved policy's, not the preset's
    sys.modules.pop("train_pusht", None)
