"""Fault cases of saved files: a full disk while a checkpoint is written (safetensors' own error), a damaged or NaN
latest checkpoint on resume and in the NaN guard's advice, and safetensors files that honour the umask."""

import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
import safetensors.torch
import torch
from accelerate import Accelerator
from test_checkpoints import make_training
from test_train_faults import flags

from hfpolicy.io.tensor_tree import save_tree
from hfpolicy.runs.run_folder import RunFolder
from hfpolicy.training import main
from hfpolicy.training.checkpoints import (
    CHECKPOINTS_DIR,
    PRETRAINED_DIR,
    TRAINING_STATE_DIR,
    CheckpointError,
    latest_good_checkpoint,
    list_checkpoints,
    save_checkpoint,
)
from hfpolicy.training.progress import NonFiniteLossGuard, TrainingDivergedError


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs (root only: skipped where mount is not allowed; test_a_full_disk_... then injects the error)."""
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or no privileges)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def fill(folder, leave_bytes: int) -> None:
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    (folder / "filler").write_bytes(b"\0" * max(free - leave_bytes, 0))


def test_a_full_disk_during_a_checkpoint_is_one_error_and_leaves_no_staging(small_tmpfs):
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    fill(small_tmpfs, 8 * 1024)  # room for the small JSON files, not for every safetensors file
    with pytest.raises(CheckpointError, match=r"disk full while writing the checkpoint .*step_000001") as caught:
        save_checkpoint(accelerator, small_tmpfs, 1, save_policy=lambda f: f.mkdir(), keep_last=0, **objects)
    # the first checkpoint: nothing to resume, so the advice is the one that exists
    assert str(caught.value).endswith(
        "run the same command again (no checkpoint was kept yet: the run starts again in place)"
    )
    assert "--resume" not in str(caught.value) and "intact" not in str(caught.value)
    del caught
    assert os.listdir(small_tmpfs / CHECKPOINTS_DIR) == []  # no .step_000001.saving, no .<name>.safetensors.*.tmp


def test_a_full_disk_as_safetensors_reports_it(tmp_path, monkeypatch):
    """The same error where no tmpfs can be mounted: safetensors' writer fails as it does on a full disk."""
    from safetensors import SafetensorError

    def full(tensors, path, metadata=None):
        Path(path).write_bytes(b"x" * 100)  # half-written
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(CheckpointError, match=r"disk full while writing the checkpoint .*step_000001"):
        save_checkpoint(accelerator, tmp_path, 1, save_policy=lambda f: f.mkdir(), keep_last=0, **objects)
    assert os.listdir(tmp_path / CHECKPOINTS_DIR) == []


def test_stale_checkpoint_staging_is_removed_at_the_next_save(tmp_path):
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    (tmp_path / CHECKPOINTS_DIR / ".step_000007.saving").mkdir(parents=True)  # a save killed half-way
    (tmp_path / CHECKPOINTS_DIR / ".tmp_step_000006").mkdir()  # one killed before the staging name moved to io.atomic
    save_checkpoint(accelerator, tmp_path, 8, save_policy=lambda f: f.mkdir(), keep_last=0, **objects)
    assert sorted(os.listdir(tmp_path / CHECKPOINTS_DIR)) == ["last", "step_000008"]


def nan_weights(checkpoint) -> None:
    for path in (
        checkpoint / TRAINING_STATE_DIR / "model.safetensors",
        checkpoint / PRETRAINED_DIR / "model.safetensors",
    ):
        tensors = safetensors.torch.load_file(str(path))
        name = max(tensors, key=lambda k: tensors[k].numel())  # a weight matrix, not a normalizer's stats
        tensors[name] = torch.full_like(tensors[name], float("nan"))
        safetensors.torch.save_file(tensors, str(path), metadata={"format": "pt"})


def test_a_damaged_or_nan_latest_checkpoint_names_the_file_and_the_intact_one(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--save_freq=1", "--keep_last_checkpoints=0")) == 0
    first, latest = list_checkpoints(out)
    model_file = latest / TRAINING_STATE_DIR / "model.safetensors"
    intact = model_file.read_bytes()
    model_file.write_bytes(intact[: len(intact) // 2])  # truncated: a crash of the disk, not of hfpolicy
    assert main([f"--output_dir={out}", "--resume=true", "--steps=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(model_file.with_suffix("")) in err and "damaged" in err
    assert "the previous checkpoint step_000001 is intact" in err and "--resume=true" in err

    model_file.write_bytes(intact)
    nan_weights(latest)
    assert main([f"--output_dir={out}", "--resume=true", "--steps=3"]) == 2
    err = capsys.readouterr().err
    assert "holds NaN or inf weights" in err and "the previous checkpoint step_000001 is intact" in err

    # The NaN guard recommends the newest checkpoint whose weights are finite, not the latest one.
    assert latest_good_checkpoint(out) == first
    guard = NonFiniteLossGuard(torch.device("cpu"))
    guard.add(3, torch.tensor(float("nan")))
    with pytest.raises(TrainingDivergedError, match="the last good checkpoint is .*step_000001: resume"):
        guard.check(Accelerator(cpu=True), RunFolder(out), 3, None)


def test_safetensors_files_honour_the_umask(tmp_path):
    from hub.test_export import saved_policy

    from hfpolicy.hub.export import export_policy

    previous = os.umask(0o022)
    try:
        policy = saved_policy(tmp_path / "policy")
        export_policy(policy, tmp_path / "export")
        save_tree({"w": torch.zeros(2)}, tmp_path, "tree")
        written = [tmp_path / "tree.safetensors", *(tmp_path / "policy").glob("*"), *(tmp_path / "export").glob("*")]
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in written}
        assert {name for name in modes if name.endswith(".safetensors")} >= {"model.safetensors", "tree.safetensors"}
        assert set(modes.values()) == {0o644}, modes  # as the JSON files beside them: readable by the group, others
    finally:
        os.umask(previous)
