"""No writer writes into, or over, what it reads (hfpolicy.io.paths.check_apart): an output that is its source,
lies inside it, or (when replaced) holds it is refused in one line, exit 2, before anything is read or written.
Before, `hfpolicy convert lerobot-v2.1 SRC --output_dir=SRC --overwrite=true` replaced the v2.1 source with a
re-encoded v3.0 copy (exit 0), and eval / export wrote into the policy folder they loaded."""

import hashlib
import shutil
from pathlib import Path

import pytest
from hub.test_export import saved_policy

from hfpolicy.cli import main as cli_main
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainConfigError, validate_train_config

V21_ROOT = Path(__file__).parent / "datasets" / "data" / "lerobot_v21_tiny"


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (links included) with its content's hash."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def refused(capsys, argv: list[str], *words: str) -> str:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(word in err for word in words), err
    return err


@pytest.fixture
def v21_source(tmp_path):
    root = tmp_path / "v21"
    shutil.copytree(V21_ROOT, root)
    return root


def test_a_v21_conversion_never_replaces_its_source(v21_source, capsys):
    before = snapshot(v21_source)
    argv = ["convert", "lerobot-v2.1", str(v21_source), f"--output_dir={v21_source}", "--overwrite=true"]
    refused(capsys, argv, f"--output_dir={v21_source} is the source {v21_source} itself")
    assert snapshot(v21_source) == before


def test_a_v21_conversion_never_writes_inside_its_source(v21_source, capsys):
    before = snapshot(v21_source)
    out = v21_source / "v30"
    refused(capsys, ["convert", "lerobot-v2.1", str(v21_source), f"--output_dir={out}"], "lies inside the source")
    assert snapshot(v21_source) == before and not out.exists()


@pytest.fixture
def policy_dir(tmp_path):
    folder = tmp_path / "policy"
    saved_policy(folder)
    return folder


EVAL_FLAGS = ["--env.type=pusht", "--env.episode_length=5", "--eval.n_episodes=1", "--eval.batch_size=1",
              "--eval.n_videos=0", "--policy.device=cpu", "--progress=false"]  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "where"), [("--output_dir", "."), ("--output_dir", "eval"), ("--dataset_dir", "episodes")]
)
def test_eval_never_writes_into_the_policy_folder(policy_dir, capsys, flag, where):
    before = snapshot(policy_dir)
    folder = (policy_dir / where).resolve()
    outside = [f"--output_dir={policy_dir.parent / 'eval'}"] if flag == "--dataset_dir" else []
    argv = ["eval", f"--policy.path={policy_dir}", f"{flag}={folder}", *outside, *EVAL_FLAGS]
    refused(capsys, argv, f"{flag}={folder}", f"--policy.path={policy_dir}")
    assert snapshot(policy_dir) == before and sorted(p.name for p in policy_dir.iterdir()) == sorted(before)
    assert not (policy_dir.parent / "eval").exists()


def test_eval_output_never_inside_its_episodes_dataset(policy_dir, tmp_path, capsys):
    data = tmp_path / "episodes"
    argv = [
        "eval",
        f"--policy.path={policy_dir}",
        f"--output_dir={data / 'eval'}",
        f"--dataset_dir={data}",
        *EVAL_FLAGS,
    ]
    refused(capsys, argv, "lies inside --dataset_dir")
    assert not data.exists()


def test_export_never_writes_into_the_policy_folder(policy_dir, capsys):
    before = snapshot(policy_dir)
    out = policy_dir / "lerobot"
    refused(capsys, ["export", f"--policy.path={policy_dir}", f"--output_dir={out}"], "lies inside --policy.path")
    assert snapshot(policy_dir) == before and not out.exists()


@pytest.mark.parametrize("output", ["data", "data/run", "."])
def test_training_never_writes_into_or_around_its_dataset(tmp_path, output):
    data = tmp_path / "data"
    cfg = TrainConfig(dataset=DatasetConfig(root=str(data)), output_dir=str(tmp_path / output))
    with pytest.raises(TrainConfigError, match="--dataset.root"):
        validate_train_config(cfg)
