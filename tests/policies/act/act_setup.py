"""Small ACT configurations, PushT-like stats and deterministic inputs shared by the ACT tests (import it as
`act_setup`: pytest puts this folder on sys.path)."""

import math

import torch

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, pad_key
from hfpolicy.policies import FeatureType, PolicyFeature
from hfpolicy.policies.act import ACTConfig

IMAGE_SHAPE = (3, 96, 96)  # gym-pusht pixels, channels first
ACTION_FEATURE = {ACTION: PolicyFeature(FeatureType.ACTION, (2,))}
IMAGE_INPUTS = {
    OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, IMAGE_SHAPE),
    OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
}
STATE_INPUTS = {
    OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
    OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
}
SMALL_NET = dict(  # a transformer small enough for CPU tests, same structure as the default one
    dim_model=32,
    n_heads=4,
    dim_feedforward=64,
    n_encoder_layers=2,
    n_decoder_layers=1,
    n_vae_encoder_layers=1,
    latent_dim=8,
    chunk_size=10,
    n_action_steps=10,
)


def pusht_stats(image_keys=(OBS_IMAGE,)) -> dict[str, dict[str, torch.Tensor]]:
    """Mean / std stats shaped like a PushT dataset's (positions in the 512 x 512 workspace)."""
    workspace = {"mean": torch.tensor([250.0, 260.0]), "std": torch.tensor([100.0, 90.0])}
    stats = {
        OBS_STATE: workspace,
        OBS_ENV_STATE: {"mean": torch.full((16,), 256.0), "std": torch.full((16,), 80.0)},
        ACTION: workspace,
    }
    for key in image_keys:
        stats[key] = {"mean": torch.tensor([0.95, 0.95, 0.93]), "std": torch.tensor([0.15, 0.12, 0.13])}
    return stats


def image_config(**overrides) -> ACTConfig:
    """The PushT image variant (96x96 pixels + agent position) with a small transformer unless overridden."""
    fields = dict(input_features=dict(IMAGE_INPUTS), output_features=dict(ACTION_FEATURE), **SMALL_NET)
    return ACTConfig(**{**fields, **overrides})


def state_config(**overrides) -> ACTConfig:
    """The PushT state-only variant (agent position + 16 block keypoint coordinates) with a small transformer."""
    fields = dict(input_features=dict(STATE_INPUTS), output_features=dict(ACTION_FEATURE), **SMALL_NET)
    return ACTConfig(**{**fields, **overrides})


def wave(shape: tuple[int, ...], phase: float, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """A deterministic, RNG-free tensor with values in [low, high]."""
    n = math.prod(shape)
    values = torch.sin(torch.arange(n, dtype=torch.float64) * 0.7548776662466927 + phase) * 0.5 + 0.5
    return (low + (high - low) * values).to(torch.float32).reshape(shape)


def observation(
    config: ACTConfig, batch_size: int, phase: float = 0.0, time_dim: bool = True
) -> dict[str, torch.Tensor]:
    """Raw observations (B, 1, ...) (or (B, ...) without the time dim) for the config's inputs."""
    obs = {}
    for i, (key, feature) in enumerate(config.input_features.items()):
        shape = (batch_size, 1, *feature.shape) if time_dim else (batch_size, *feature.shape)
        if feature.type == FeatureType.IMAGE:
            obs[key] = wave(shape, phase + i, 0.0, 1.0)
        else:
            obs[key] = wave(shape, phase + i, 20.0, 490.0)
    return obs


def training_batch(config: ACTConfig, batch_size: int, phase: float = 0.0) -> dict[str, torch.Tensor]:
    """A raw training batch: observations, a chunk of actions, and padding at the end of the last sample."""
    batch = observation(config, batch_size, phase)
    batch[ACTION] = wave((batch_size, config.chunk_size, config.action_feature.shape[0]), phase + 10, 20.0, 490.0)
    is_pad = torch.zeros(batch_size, config.chunk_size, dtype=torch.bool)
    is_pad[-1, -3:] = True
    batch[pad_key(ACTION)] = is_pad
    return batch
