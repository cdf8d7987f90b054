"""Training state as safetensors + JSON: exact round trips, RNG states, no pickle ever read, and the EMA weights
stored once (the policy file of the checkpoint, referenced by the training state)."""

import json
import math
import pickle
import random

import numpy as np
import pytest
import safetensors.torch
import torch
from accelerate import Accelerator
from diffusers.optimization import get_scheduler

from hfpolicy.io.tensor_tree import load_tree, save_tree
from hfpolicy.policies.ema import EMA
from hfpolicy.training.checkpoints import (
    CheckpointError,
    checkpoint_size_line,
    load_checkpoint,
    load_training_state,
    save_checkpoint,
    save_training_state,
)


def test_tree_round_trip_keeps_types_and_values(tmp_path):
    tree = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 2)}, 7: {}},
        "param_groups": [{"betas": (0.95, 0.999), "lr": 1e-4, "params": [0, 7], "fused": True, "name": None}],
        "floats": [math.inf, -math.inf, 0.5],
        "numpy": np.random.RandomState(3).get_state()[1],  # uint32 (624,)
        "nan": math.nan,
    }
    save_tree(tree, tmp_path, "tree")
    loaded = load_tree(tmp_path, "tree")
    assert loaded["state"][0]["step"].item() == 3.0 and torch.equal(
        loaded["state"][0]["exp_avg"], tree["state"][0]["exp_avg"]
    )
    assert loaded["state"][7] == {} and set(loaded["state"]) == {0, 7}  # int keys stay ints
    assert loaded["param_groups"] == tree["param_groups"] and isinstance(loaded["param_groups"][0]["betas"], tuple)
    assert loaded["floats"] == tree["floats"] and math.isnan(loaded["nan"])
    assert loaded["numpy"].dtype == np.uint32 and np.array_equal(loaded["numpy"], tree["numpy"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree.json", "tree.safetensors"]


def test_tree_refuses_what_only_pickle_could_store(tmp_path):
    with pytest.raises(TypeError, match=r"tree\['fn'\] is a function"):
        save_tree({"fn": lambda: 0}, tmp_path, "tree")


def make_training(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=1e-3, fused=True)
    scheduler = get_scheduler("cosine", optimizer, num_warmup_steps=2, num_training_steps=20)
    return model, optimizer, scheduler, EMA(model, power=0.75, max_decay=0.999)


def train_steps(model, optimizer, scheduler, ema, n: int) -> list[float]:
    losses = []
    for _ in range(n):
        x = torch.randn(16, 3)  # drawn from the global RNG: the RNG state must resume too
        loss = ((model(x) - x[:, :2]) ** 2).mean() + random.random() * 0 + float(np.random.rand()) * 0
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        ema.step(model)
        losses.append(loss.item())
    return losses


def test_training_state_resumes_exactly_and_reads_no_pickle(tmp_path):
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    train_steps(model, optimizer, scheduler, ema, 3)
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    save_training_state(accelerator, tmp_path / "state", **objects)
    expected_losses = train_steps(model, optimizer, scheduler, ema, 4)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    expected_ema = {k: v.clone() for k, v in ema.shadow.items()}

    # A planted pickle payload beside the state (as accelerate names its files) must never run.
    marker = tmp_path / "payload_ran"

    class Payload:
        def __reduce__(self):
            return (marker.write_text, ("pwned",))

    for name in ("optimizer.bin", "random_states_0.pkl", "custom_checkpoint_0.pkl"):
        (tmp_path / "state" / name).write_bytes(pickle.dumps(Payload()))

    torch.manual_seed(123)  # scramble the RNG: the saved state must restore it
    fresh = dict(zip(objects, make_training(seed=99), strict=True))
    load_training_state(accelerator, tmp_path / "state", **fresh)
    assert train_steps(*fresh.values(), 4) == expected_losses
    assert all(torch.equal(fresh["model"].state_dict()[k], v) for k, v in expected.items())
    assert all(torch.equal(fresh["ema"].shadow[k], v) for k, v in expected_ema.items())
    assert fresh["lr_scheduler"].get_last_lr() == scheduler.get_last_lr()
    assert not marker.exists()


def test_legacy_pickle_checkpoint_is_refused_not_loaded(tmp_path):
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    (tmp_path / "optimizer.bin").write_bytes(pickle.dumps({"not": "read"}))
    with pytest.raises(CheckpointError, match=r"optimizer.bin.*pickle format.*never loaded"):
        load_training_state(accelerator, tmp_path, model=model, optimizer=optimizer, lr_scheduler=scheduler, ema=ema)


def test_a_failed_save_removes_its_temporary_folder_and_names_a_full_disk(tmp_path):
    import errno

    from hfpolicy.training.checkpoints import CHECKPOINTS_DIR, list_checkpoints, save_checkpoint

    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    save_checkpoint(accelerator, tmp_path, 1, save_policy=lambda folder: folder.mkdir(), keep_last=0, **objects)

    def disk_full(folder):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 1000)  # half-written when the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match=r"disk full while writing the checkpoint .*step_000002.*intact"):
        save_checkpoint(accelerator, tmp_path, 2, save_policy=disk_full, keep_last=0, **objects)
    assert sorted(p.name for p in (tmp_path / CHECKPOINTS_DIR).iterdir()) == ["last", "step_000001"]  # no staging
    assert [c.name for c in list_checkpoints(tmp_path)] == ["step_000001"]

    def read_only(folder):
        raise PermissionError(errno.EACCES, "Permission denied", str(folder))

    with pytest.raises(CheckpointError, match=r"could not write the checkpoint .*Permission denied"):
        save_checkpoint(accelerator, tmp_path, 3, save_policy=read_only, keep_last=0, **objects)
    assert not list((tmp_path / CHECKPOINTS_DIR).glob(".tmp*"))


def save_ema_weights(ema: EMA, model: torch.nn.Module):
    """A save_policy that writes the EMA weights as a checkpoint's pretrained_model/model.safetensors (what
    save_shareable_policy does for a policy)."""

    def save(folder):
        folder.mkdir()
        with ema.applied_to(model):
            safetensors.torch.save_file(
                {k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors"
            )

    return save


def test_the_ema_weights_are_stored_once_and_resume_exactly(tmp_path):
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    train_steps(model, optimizer, scheduler, ema, 3)
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    checkpoint = save_checkpoint(accelerator, tmp_path, 3, save_ema_weights(ema, model), keep_last=0, **objects)
    state = checkpoint / "training_state"
    assert not (state / "ema.safetensors").exists()  # no second copy of the weights
    reference = json.loads((state / "ema.json").read_text())
    assert reference["weights_file"] == "pretrained_model/model.safetensors" and reference["num_updates"] == 3
    expected_losses = train_steps(model, optimizer, scheduler, ema, 4)
    expected_ema = {k: v.clone() for k, v in ema.shadow.items()}

    fresh = dict(zip(objects, make_training(seed=99), strict=True))
    assert load_checkpoint(accelerator, checkpoint, **fresh) == 3
    assert train_steps(*fresh.values(), 4) == expected_losses
    assert all(torch.equal(fresh["ema"].shadow[k], v) for k, v in expected_ema.items())

    # Other weights put in the policy's place are refused, not taken for the EMA.
    weights = checkpoint / "pretrained_model" / "model.safetensors"
    tensors = safetensors.torch.load_file(weights)
    tensors["0.bias"] += 1
    safetensors.torch.save_file(tensors, weights)
    with pytest.raises(CheckpointError, match=r"model.safetensors, which holds this checkpoint's EMA weights .*sha256"):
        load_checkpoint(accelerator, checkpoint, **dict(zip(objects, make_training(seed=99), strict=True)))


def test_nan_buffers_are_the_same_weights(tmp_path):
    """A policy without stats keeps NaN in its normalizer's buffers: the policy file still holds the EMA's weights."""
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, _ = make_training()
    model.register_buffer("no_stats_yet", torch.full((3,), math.nan))
    ema = EMA(model)
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, save_ema_weights(ema, model), keep_last=0, **objects)
    assert not (checkpoint / "training_state" / "ema.safetensors").exists()


def test_ema_weights_that_the_policy_file_does_not_hold_are_kept_as_a_copy(tmp_path):
    """A save_policy that writes other weights (or none): the training state keeps the EMA's own copy."""
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, ema = make_training()
    train_steps(model, optimizer, scheduler, ema, 3)  # the EMA now differs from the raw weights
    objects = {"model": model, "optimizer": optimizer, "lr_scheduler": scheduler, "ema": ema}

    def raw_weights(folder):
        folder.mkdir()
        safetensors.torch.save_file(dict(model.state_dict()), folder / "model.safetensors")

    checkpoint = save_checkpoint(accelerator, tmp_path, 3, raw_weights, keep_last=0, **objects)
    assert (checkpoint / "training_state" / "ema.safetensors").is_file()
    fresh = dict(zip(objects, make_training(seed=99), strict=True))
    load_checkpoint(accelerator, checkpoint, **fresh)
    assert all(torch.equal(fresh["ema"].shadow[k], v) for k, v in ema.shadow.items())


def test_the_checkpoint_size_line(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.safetensors").write_bytes(b"x" * 5_000_000)
    (tmp_path / "b.json").write_bytes(b"x" * 610_000)
    assert (
        checkpoint_size_line(tmp_path, 3)
        == "checkpoint: 5.61 MB each, ~16.8 MB for the 3 kept (--keep_last_checkpoints)"
    )
    assert checkpoint_size_line(tmp_path, 0) == "checkpoint: 5.61 MB each, all of them kept (--keep_last_checkpoints=0)"
