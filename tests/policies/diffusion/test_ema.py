"""EMA of the weights (hfpolicy.policies.ema): the decay schedule (checked against diffusers' EMAModel), the averaging,
the temporary swap used for evaluation and saving, exact resume, and DDP-wrapped models."""

import socket

import pytest
import safetensors.torch
import torch
import torch.distributed as dist
from diffusers.training_utils import EMAModel
from diffusion_setup import pusht_stats, state_config, training_batch
from torch import nn

from hfpolicy.constants import WEIGHTS_FILE
from hfpolicy.policies.diffusion import DiffusionPolicy
from hfpolicy.policies.ema import EMA


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.frozen = nn.Parameter(torch.zeros(2), requires_grad=False)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def train_steps(model: nn.Module, ema: EMA, n: int, seed: int = 0) -> list[float]:
    """n SGD steps on random data with ema.step after each; returns the losses."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    losses = []
    for _ in range(n):
        x = torch.randn(4, 3, generator=generator)
        loss = model.linear(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            model.count += 1
            model.frozen += 0.5
        ema.step(model)
        losses.append(loss.item())
    return losses


def test_decay_schedule_is_the_paper_warmup_and_matches_diffusers():
    ema = EMA(Net(), power=0.75, max_decay=0.9999)
    assert ema.decay_at(0) == 0.0  # the average starts as a copy of the weights
    assert ema.decay_at(1) == pytest.approx(1 - 2**-0.75)  # 0.4054
    assert ema.decay_at(9) == pytest.approx(1 - 10**-0.75)  # 0.8222
    assert ema.decay_at(9999) == pytest.approx(0.999)
    assert ema.decay_at(215_443) == 0.9999 and ema.decay_at(10**7) == 0.9999  # capped at max_decay
    assert ema.decay_at(215_000) < 0.9999
    reference = EMAModel(nn.Linear(1, 1).parameters(), decay=0.9999, use_ema_warmup=True, power=0.75, inv_gamma=1.0)
    for n in [0, 1, 2, 5, 100, 12_345, 300_000]:
        # diffusers counts the update being made (1-based); ours counts the updates already made.
        assert ema.decay_at(n) == pytest.approx(reference.get_decay(n + 1), abs=1e-12)


def test_step_averages_trainable_weights_and_copies_the_rest():
    torch.manual_seed(0)
    model = Net()
    ema = EMA(model, power=0.75, max_decay=0.9999)
    expected = model.linear.weight.detach().clone()
    generator = torch.Generator().manual_seed(1)
    for n in range(5):
        with torch.no_grad():
            model.linear.weight.add_(torch.randn(2, 3, generator=generator))
            model.count += 1
            model.frozen += 1
        decay = ema.decay
        assert decay == ema.decay_at(n)
        ema.step(model)
        expected = decay * expected + (1 - decay) * model.linear.weight.detach()
        torch.testing.assert_close(ema.shadow["linear.weight"], expected)
        assert ema.shadow["count"] == model.count and torch.equal(ema.shadow["frozen"], model.frozen)
    assert ema.num_updates == 5
    assert not torch.allclose(ema.shadow["linear.weight"], model.linear.weight)


def test_ema_matches_diffusers_emamodel_over_training():
    torch.manual_seed(0)
    model = Net()
    ema = EMA(model)
    reference = EMAModel(model.linear.parameters(), decay=0.9999, use_ema_warmup=True, power=0.75, inv_gamma=1.0)
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.linear.parameters(), lr=0.1)
    for _ in range(20):
        model.linear(torch.randn(8, 3, generator=generator)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.step(model)
        reference.step(model.linear.parameters())
    torch.testing.assert_close(ema.shadow["linear.weight"], reference.shadow_params[0])
    torch.testing.assert_close(ema.shadow["linear.bias"], reference.shadow_params[1])


def test_save_pretrained_inside_applied_to_saves_the_ema_weights(tmp_path):
    torch.manual_seed(0)
    policy = DiffusionPolicy(state_config(), dataset_stats=pusht_stats())
    config = policy.config
    ema = EMA(policy, power=config.ema_power, max_decay=config.ema_max_decay)
    optimizer = torch.optim.AdamW(policy.get_optim_params(), lr=1e-3)
    for step in range(3):
        policy(training_batch(config, 2, phase=step))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.step(policy)
    trained = {k: v.clone() for k, v in policy.state_dict().items()}
    with ema.applied_to(policy) as swapped:
        assert swapped is policy
        policy.save_pretrained(tmp_path)
    saved = safetensors.torch.load_file(str(tmp_path / WEIGHTS_FILE))
    for name, value in saved.items():
        torch.testing.assert_close(value, ema.shadow[name], rtol=0, atol=0)
    weight = "unet.final.1.weight"
    assert not torch.equal(saved[weight], trained[weight])  # the EMA differs from the trained weights ...
    for name, value in policy.state_dict().items():  # ... which are back in the model after the block
        assert torch.equal(value, trained[name]), name
    assert torch.equal(saved["normalizer.stats.action.min"], trained["normalizer.stats.action.min"])
    loaded = DiffusionPolicy.from_pretrained(tmp_path)
    assert torch.equal(loaded.state_dict()[weight], ema.shadow[weight])

    with pytest.raises(RuntimeError, match="boom"), ema.applied_to(policy):  # restored on errors too
        raise RuntimeError("boom")
    assert torch.equal(policy.state_dict()[weight], trained[weight])
    ema.copy_to(policy)
    assert torch.equal(policy.state_dict()[weight], ema.shadow[weight])


def test_state_dict_resumes_exactly(tmp_path):
    torch.manual_seed(0)
    model = Net()
    ema = EMA(model)
    train_steps(model, ema, 7)
    path = tmp_path / "ema.pt"
    torch.save({"model": model.state_dict(), "ema": ema.state_dict()}, path)
    continued = train_steps(model, ema, 5, seed=1)

    checkpoint = torch.load(path, weights_only=True)
    resumed_model = Net()
    resumed_model.load_state_dict(checkpoint["model"])
    resumed = EMA(resumed_model)
    resumed.load_state_dict(checkpoint["ema"])
    assert resumed.num_updates == 7
    assert train_steps(resumed_model, resumed, 5, seed=1) == continued
    for name, value in ema.shadow.items():
        assert torch.equal(resumed.shadow[name], value), name

    with pytest.raises(ValueError, match="power, max_decay"):
        EMA(Net(), power=2 / 3).load_state_dict(checkpoint["ema"])
    with pytest.raises(ValueError, match="does not fit this model"):
        EMA(nn.Linear(3, 2)).load_state_dict(checkpoint["ema"])
    with pytest.raises(ValueError, match="build the EMA from this model"):
        ema.step(nn.Linear(3, 2))


def test_ema_of_a_ddp_model_keeps_the_plain_names():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = Net()
        ddp = nn.parallel.DistributedDataParallel(model)
        ema = EMA(ddp)
        assert sorted(ema.shadow) == sorted(model.state_dict())  # no "module." prefix: fits the bare policy
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        weights = []
        for _ in range(2):
            ddp(torch.ones(2, 3)).sum().backward()  # through DDP: gradients all-reduced
            optimizer.step()
            optimizer.zero_grad()
            ema.step(ddp)
            weights.append(model.linear.weight.detach().clone())
        decay = 1 - 2**-0.75  # second update; the first one copied the weights
        torch.testing.assert_close(ema.shadow["linear.weight"], decay * weights[0] + (1 - decay) * weights[1])
        with ema.applied_to(ddp):
            assert torch.equal(model.linear.weight, ema.shadow["linear.weight"])
    finally:
        dist.destroy_process_group()


def test_bad_settings():
    with pytest.raises(ValueError, match="max_decay must be in"):
        EMA(Net(), max_decay=1.0)
    with pytest.raises(ValueError, match="power must be > 0"):
        EMA(Net(), power=0)
