"""Diffusion Policy learns: on one fixed batch of real PushT training windows, the denoising loss falls at least 10x.

The windows come from the real zarr through hfpolicy's converter and PolicyDataset (delta_timestamps from the config,
stats from the dataset). The state-only variant with a small U-Net keeps this within ~30 s of CPU; the image path's
ResNet18 would take ~1.5 s per step here (its numerics are covered by the regression test, its gradients by
test_output_shapes_and_gradients).
"""

import pytest
import torch
from diffusion_setup import state_config

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
from hfpolicy.datasets import PolicyDataset, dataset_to_policy_features
from hfpolicy.policies.diffusion import DiffusionPolicy

BATCH_SIZE = 16
STEPS = 400
LEARNING_RATE = 2e-3


@pytest.mark.slow
@pytest.mark.shared_data
def test_loss_falls_10x_on_a_fixed_batch_of_real_pusht_windows(pusht_dataset_root):
    meta = PolicyDataset("local/pusht", root=pusht_dataset_root, download_videos=False)
    inputs, outputs = dataset_to_policy_features(meta.features)
    config = state_config(
        input_features={key: inputs[key] for key in (OBS_STATE, OBS_ENV_STATE)}, output_features=outputs
    )
    dataset = PolicyDataset(
        "local/pusht",
        root=pusht_dataset_root,
        delta_timestamps=config.delta_timestamps(meta.fps),
        download_videos=False,
    )
    # Windows spread over both episodes, the last ones running past an episode end (padded actions).
    indices = torch.linspace(0, len(dataset) - 1, BATCH_SIZE).long().tolist()
    batch = {k: v for k, v in dataset.get_batch(indices).items() if isinstance(v, torch.Tensor)}
    assert batch[ACTION].shape == (BATCH_SIZE, 16, 2) and batch[f"{ACTION}_is_pad"].any()

    torch.manual_seed(0)
    policy = DiffusionPolicy(config, dataset_stats=dataset.stats)
    optimizer = torch.optim.AdamW(policy.get_optim_params(), lr=LEARNING_RATE, betas=config.optimizer_betas)
    # The loss on fixed noise draws and diffusion steps measures progress without the sampling noise of training.
    generator = torch.Generator().manual_seed(0)
    probes = [
        (torch.randn(BATCH_SIZE, 16, 2, generator=generator), torch.randint(0, 100, (BATCH_SIZE,), generator=generator))
        for _ in range(4)
    ]

    def probe_loss() -> float:
        with torch.no_grad():
            normalized = policy.normalizer.normalize(batch)
            losses = [policy.compute_loss(normalized, noise=n, timesteps=t)["loss"] for n, t in probes]
        return torch.stack(losses).mean().item()

    before = probe_loss()
    training_losses = []
    for _ in range(STEPS):
        loss = policy(batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        training_losses.append(loss.item())
    after = probe_loss()
    assert before > 0.5  # an untrained noise predictor is off by about the noise itself
    assert after < before / 10, f"probe loss {before:.3f} -> {after:.3f}"
    first, last = sum(training_losses[:10]) / 10, sum(training_losses[-20:]) / 20
    assert last < first / 10, f"training loss {first:.3f} -> {last:.3f}"
