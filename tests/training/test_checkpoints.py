"""Training state as safetensors + JSON: exact round trips, RNG states, and no pickle ever read."""

import math
import pickle
import random

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from diffusers.optimization import get_scheduler

from hfpolicy.io.tensor_tree import load_tree, save_tree
from hfpolicy.policies.ema import EMA
from hfpolicy.training.checkpoints import CheckpointError, load_training_state, save_training_state


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
