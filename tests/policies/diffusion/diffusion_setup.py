"""Small Diffusion Policy configurations, PushT-like stats and deterministic inputs shared by the diffusion tests and by
make_regression_artifact.py (import it as `diffusion_setup`: pytest puts this folder on sys.path)."""

import math

import torch

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, pad_key
from hfpolicy.policies import FeatureType, PolicyFeature
from hfpolicy.policies.diffusion import DiffusionConfig

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
SMALL_NET = dict(  # a U-Net small enough for CPU tests, same structure as the default one
    down_dims=(32, 64), n_groups=8, diffusion_step_embed_dim=32, spatial_softmax_num_keypoints=8
)


def pusht_stats() -> dict[str, dict[str, torch.Tensor]]:
    """Stats shaped like a PushT dataset's: positions in the 512 x 512 workspace, images around a light background."""
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    return {
        OBS_IMAGE: {"mean": torch.tensor([0.95, 0.95, 0.93]), "std": torch.tensor([0.15, 0.12, 0.13])},
        OBS_STATE: workspace,
        OBS_ENV_STATE: {"min": torch.zeros(16), "max": torch.full((16,), 512.0)},
        ACTION: workspace,
    }


def image_config(**overrides) -> DiffusionConfig:
    """The PushT image variant (96x96 pixels + agent position) with a small U-Net unless overridden."""
    fields = dict(input_features=dict(IMAGE_INPUTS), output_features=dict(ACTION_FEATURE), **SMALL_NET)
    return DiffusionConfig(**{**fields, **overrides})


def state_config(**overrides) -> DiffusionConfig:
    """The PushT state-only variant (agent position + 16 block keypoint coordinates) with a small U-Net."""
    fields = dict(input_features=dict(STATE_INPUTS), output_features=dict(ACTION_FEATURE), **SMALL_NET)
    return DiffusionConfig(**{**fields, **overrides})


def wave(shape: tuple[int, ...], phase: float, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """A deterministic, RNG-free tensor with values in [low, high] (same on every machine and torch version)."""
    n = math.prod(shape)
    values = torch.sin(torch.arange(n, dtype=torch.float64) * 0.7548776662466927 + phase) * 0.5 + 0.5
    return (low + (high - low) * values).to(torch.float32).reshape(shape)


def observation_window(config: DiffusionConfig, batch_size: int, phase: float = 0.0) -> dict[str, torch.Tensor]:
    """Raw (unnormalized) observations with a time dim (B, n_obs_steps, ...) for the config's inputs."""
    obs = {}
    for i, (key, feature) in enumerate(config.input_features.items()):
        shape = (batch_size, config.n_obs_steps, *feature.shape)
        if feature.type == FeatureType.IMAGE:
            obs[key] = wave(shape, phase + i, 0.0, 1.0)
        else:
            obs[key] = wave(shape, phase + i, 20.0, 490.0)
    return obs


def training_batch(config: DiffusionConfig, batch_size: int, phase: float = 0.0) -> dict[str, torch.Tensor]:
    """A raw training batch: observation windows, a horizon of actions, and padding at the end of the last sample."""
    batch = observation_window(config, batch_size, phase)
    batch[ACTION] = wave((batch_size, config.horizon, config.action_feature.shape[0]), phase + 10, 20.0, 490.0)
    is_pad = torch.zeros(batch_size, config.horizon, dtype=torch.bool)
    is_pad[-1, -3:] = True
    batch[pad_key(ACTION)] = is_pad
    return batch
