"""A small concrete policy for tests of the base class and of evaluation (not part of hfpolicy).

It predicts chunks like Diffusion Policy does (n_obs_steps=2, horizon=16, n_action_steps=8 by default) with a purely
elementwise rule, so every env's action depends on that env's observations only: results are bit-identical whatever
the batch size. Import it as `from policies.toy_policy import ...` (tests/ is on sys.path) so that the config type
"toy" is registered once.
"""

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, pad_key
from hfpolicy.policies import FeatureType, Policy, PolicyConfig, PolicyFeature


@PolicyConfig.register_subclass("toy")
@dataclass
class ToyConfig(PolicyConfig):
    """Chunked toy policy: action[k] = gain * state[-1] + offset[k] in normalized units."""

    n_obs_steps: int = 2  # observations per prediction
    n_action_steps: int = 8  # actions executed per chunk
    horizon: int = 16  # actions predicted per chunk, from the oldest observation's step on
    input_features: dict[str, PolicyFeature] = field(
        default_factory=lambda: {OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}
    )  # consumed features; must include observation.state
    output_features: dict[str, PolicyFeature] = field(
        default_factory=lambda: {ACTION: PolicyFeature(FeatureType.ACTION, (2,))}
    )  # the action
    initial_gain: float = 0.5  # initial value of the gain parameter
    offset_scale: tuple[float, float] = (0.3, 0.2)  # amplitude of the initial per-step offsets, per action dim

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(1 - self.n_obs_steps, 1 - self.n_obs_steps + self.horizon))

    def validate_features(self) -> None:
        super().validate_features()
        if OBS_STATE not in self.input_features:
            raise ValueError(f"the toy policy needs {OBS_STATE}")
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ValueError("n_obs_steps - 1 + n_action_steps must be <= horizon")


class ToyPolicy(Policy):
    config_class = ToyConfig

    def __init__(self, config: ToyConfig, dataset_stats=None):
        super().__init__(config, dataset_stats)
        action_dim = config.action_feature.shape[0]
        self.gain = nn.Parameter(torch.full((action_dim,), config.initial_gain))
        steps = torch.arange(config.horizon, dtype=torch.float32)[:, None]
        scale = torch.tensor(config.offset_scale[:action_dim])
        self.offset = nn.Parameter(scale * torch.stack([torch.sin(steps[:, 0]), torch.cos(steps[:, 0])], dim=1))
        self.generate_calls = 0  # how many chunks were generated (tests count them)

    def _chunk(self, state: Tensor) -> Tensor:
        """(B, horizon, A) from the newest normalized state (B, D)."""
        action_dim = self.gain.shape[0]
        return state[:, None, :action_dim] * self.gain + self.offset

    def generate_actions(self, observation: dict[str, Tensor], generator=None, noise=None) -> Tensor:
        self.generate_calls += 1
        if OBS_IMAGE in observation:  # consumed only to check that it arrives well-formed
            image = observation[OBS_IMAGE]
            assert image.ndim == 5 and image.dtype == torch.float32, image.shape
        start = self.config.n_obs_steps - 1
        return self._chunk(observation[OBS_STATE][:, -1])[:, start : start + self.config.n_action_steps]

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        predicted = self._chunk(batch[OBS_STATE][:, -1])
        error = (predicted - batch[ACTION]) ** 2
        is_pad = batch.get(pad_key(ACTION))
        if is_pad is not None:
            error = error * (~is_pad)[..., None]
        return {"loss": error.mean()}


def toy_stats(config: ToyConfig, low: float = 0.0, high: float = 512.0) -> dict:
    """Dataset stats for every feature of `config`: vectors in [low, high] (like PushT pixels), images ~ 0.5 +- 0.25."""
    stats = {}
    for key, feature in {**config.input_features, **config.output_features}.items():
        if feature.type == FeatureType.IMAGE:
            stats[key] = {"mean": [0.5] * feature.shape[0], "std": [0.25] * feature.shape[0]}
        else:
            stats[key] = {"min": [low] * feature.shape[0], "max": [high] * feature.shape[0]}
    return stats


def make_toy_policy(obs_type: str = "agent_pos", low: float = 0.0, high: float = 512.0, **config_fields) -> ToyPolicy:
    """A toy policy with stats whose inputs are those of a PushT obs type (`agent_pos`: the state only)."""
    inputs = {OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}
    if obs_type == "pixels_agent_pos":
        inputs[OBS_IMAGE] = PolicyFeature(FeatureType.IMAGE, (3, 96, 96))
    elif obs_type == "environment_state_agent_pos":
        inputs[OBS_ENV_STATE] = PolicyFeature(FeatureType.STATE, (16,))
    elif obs_type != "agent_pos":
        raise ValueError(obs_type)
    config = ToyConfig(input_features=inputs, **config_fields)
    return ToyPolicy(config, dataset_stats=toy_stats(config, low=low, high=high))
