"""PolicyModule: what the modules below hfpolicy.policies.base (registry, loading, checkpoint files, LeRobot format)
know of a policy. `Policy` derives from it."""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from hfpolicy.policies.config import PolicyConfig
from hfpolicy.policies.errors import PolicyLoadError
from hfpolicy.policies.normalization import Normalizer


@dataclass(frozen=True)
class WeightsOrigin:
    """Where a policy's weights stand in their training, as model.safetensors' metadata records it (unknown: None)."""

    training_step: int | None = None  # the optimizer steps the weights were trained for
    ema: bool | None = None  # whether they are the exponential moving average of the trained weights


class PolicyModule(nn.Module):
    """A policy's config, normalizer and strict weight loading; `weights_origin` is saved and loaded with the weights."""

    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    config: PolicyConfig
    normalizer: Normalizer
    weights_origin: WeightsOrigin = WeightsOrigin()

    def load_strict(self, state_dict: dict[str, Tensor], source: str = "state dict") -> None:
        """load_state_dict that names every missing key, unexpected key and shape mismatch in one error."""
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(expected))
        mismatched = [
            f"{k}: saved {tuple(state_dict[k].shape)}, model {tuple(v.shape)}"
            for k, v in expected.items()
            if k in state_dict and state_dict[k].shape != v.shape
        ]
        problems = [f"missing keys {missing}"] if missing else []
        problems += [f"unexpected keys {unexpected}"] if unexpected else []
        problems += [f"shape mismatches [{'; '.join(mismatched)}]"] if mismatched else []
        if problems:
            raise PolicyLoadError(
                f"{source} does not fit {type(self).__name__} built from its config: {', '.join(problems)}"
            )
        self.load_state_dict(state_dict, strict=True)
