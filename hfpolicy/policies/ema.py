"""Exponential moving average (EMA) of a model's weights, kept beside the model (not a submodule, so the model's state
dict, DDP and `save_pretrained` see the trained weights until `applied_to` swaps the average in). The n-th update's
decay is min(max_decay, 1 - (1 + n) ** -power), the Diffusion Policy paper's warmup (diffusers' EMAModel with
use_ema_warmup=True, inv_gamma=1); trainable float parameters are averaged, the rest copied. Faster than EMAModel:
docs/speed.md#the-ema-update."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from accelerate.utils import extract_model_from_parallel
from torch import Tensor, nn


class EMA:
    """An exponential moving average of a model's state, updated with `step(model)` after each optimizer step."""

    def __init__(self, model: nn.Module, power: float = 0.75, max_decay: float = 0.9999):
        if power <= 0:
            raise ValueError(f"EMA power must be > 0, got {power}")
        if not 0.0 <= max_decay < 1.0:
            raise ValueError(f"EMA max_decay must be in [0, 1), got {max_decay}")
        model = extract_model_from_parallel(model, keep_torch_compile=False)
        self.power = power
        self.max_decay = max_decay
        self.num_updates = 0  # updates done so far; the next one uses decay_at(num_updates)
        self.shadow: dict[str, Tensor] = {name: t.detach().clone() for name, t in model.state_dict().items()}
        self._averaged = [  # names averaged with the decay; every other entry of the state is copied
            name for name, p in model.named_parameters() if p.requires_grad and p.is_floating_point()
        ]
        averaged = set(self._averaged)
        self._copied = [name for name in self.shadow if name not in averaged]

    def decay_at(self, num_updates: int) -> float:
        """The decay used by the update that follows `num_updates` earlier updates."""
        return min(self.max_decay, max(0.0, 1.0 - (1.0 + num_updates) ** -self.power))

    @property
    def decay(self) -> float:
        return self.decay_at(self.num_updates)

    @torch.no_grad()
    def step(self, model: nn.Module) -> None:
        """shadow = decay * shadow + (1 - decay) * weights; entries that are not averaged are copied."""
        state = self._model_state(model)
        weight = 1.0 - self.decay
        torch._foreach_lerp_([self.shadow[n] for n in self._averaged], [state[n] for n in self._averaged], weight)
        for name in self._copied:
            self.shadow[name].copy_(state[name])
        self.num_updates += 1

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Overwrites the model's weights with the EMA weights for good (`applied_to`: only within a block)."""
        state = self._model_state(model)
        for name, value in self.shadow.items():
            state[name].copy_(value)

    @contextmanager
    def applied_to(self, model: nn.Module) -> Iterator[nn.Module]:
        """Within the block the model holds the EMA weights; its own weights are restored on exit (even on error)."""
        state = self._model_state(model)
        backup = {name: t.clone() for name, t in state.items()}
        try:
            self.copy_to(model)
            yield model
        finally:
            with torch.no_grad():
                for name, value in backup.items():
                    state[name].copy_(value)

    def to(self, device: torch.device | str) -> "EMA":
        """Moves the EMA weights to `device`."""
        self.shadow = {name: t.to(device) for name, t in self.shadow.items()}
        return self

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly."""
        return {
            "num_updates": self.num_updates,
            "power": self.power,
            "max_decay": self.max_decay,
            "shadow": dict(self.shadow),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        settings = (float(state["power"]), float(state["max_decay"]))
        if settings != (self.power, self.max_decay):
            raise ValueError(
                f"the saved EMA has power, max_decay = {settings} but this one {(self.power, self.max_decay)}; "
                "resume with the EMA settings of the saved run"
            )
        shadow = state["shadow"]
        missing = sorted(set(self.shadow) - set(shadow))
        unexpected = sorted(set(shadow) - set(self.shadow))
        mismatched = [n for n in self.shadow if n in shadow and shadow[n].shape != self.shadow[n].shape]
        if missing or unexpected or mismatched:
            raise ValueError(
                f"the saved EMA does not fit this model: missing {missing}, unexpected {unexpected}, "
                f"shape mismatches {mismatched}"
            )
        for name, value in shadow.items():
            self.shadow[name].copy_(value)
        self.num_updates = int(state["num_updates"])

    def _model_state(self, model: nn.Module) -> dict[str, Tensor]:
        state = extract_model_from_parallel(model, keep_torch_compile=False).state_dict(keep_vars=True)
        if state.keys() != self.shadow.keys():
            raise ValueError(
                "this model's state does not match the one the EMA was built from "
                f"({len(state)} vs {len(self.shadow)} entries); build the EMA from this model"
            )
        return {name: t.detach() for name, t in state.items()}
