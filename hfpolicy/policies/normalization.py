"""Per-feature normalization with dataset stats kept as buffers, so they travel inside model.safetensors. A policy
built without stats holds NaN buffers; normalizing with them raises `MissingStatsError`."""

from collections.abc import Iterator, Mapping
from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from hfpolicy.policies.config import FeatureType, NormMode, PolicyFeature, feature_norm_mode
from hfpolicy.policies.errors import MissingStatsError

STAT_NAMES = {NormMode.MEAN_STD: ("mean", "std"), NormMode.MIN_MAX: ("min", "max")}
EPS = 1e-8


class FeatureStats(nn.Module):
    """The two statistics (STAT_NAMES[mode]) one feature's normalization needs, as buffers (NaN until set)."""

    mean: Tensor
    std: Tensor
    min: Tensor
    max: Tensor

    def __init__(self, key: str, feature: PolicyFeature, mode: NormMode):
        super().__init__()
        self.key, self.feature, self.mode = key, feature, mode
        # images get per-channel stats (C, 1, 1), broadcast over H and W
        shape = (feature.shape[0], 1, 1) if feature.type == FeatureType.IMAGE else tuple(feature.shape)
        for name in STAT_NAMES[mode]:
            self.register_buffer(name, torch.full(shape, torch.nan))

    def set_(self, stats: Mapping[str, object]) -> None:
        for name in STAT_NAMES[self.mode]:
            if name not in stats:
                raise KeyError(
                    f"stats for {self.key!r} lack {name!r} (normalization {self.mode.value}); have {list(stats)}"
                )
            value = torch.as_tensor(np.asarray(stats[name], dtype=np.float32))
            buffer = getattr(self, name)
            if value.numel() != buffer.numel():
                raise ValueError(
                    f"stats {name!r} for {self.key!r} have {value.numel()} values, feature shape {self.feature.shape} "
                    f"needs {buffer.numel()}"
                )
            buffer.copy_(value.reshape(buffer.shape))

    def check(self) -> None:
        for name in STAT_NAMES[self.mode]:
            if not torch.isfinite(getattr(self, name)).all():
                raise MissingStatsError(
                    f"the policy has no normalization stats for {self.key!r} ({name} is not set). Build the policy with "
                    "dataset_stats=dataset.stats to train it, or load a trained one with Policy.from_pretrained(...)."
                )

    def normalize(self, x: Tensor) -> Tensor:
        if self.mode == NormMode.MEAN_STD:
            return (x - self.mean) / (self.std + EPS)
        return (x - self.min) / (self.max - self.min + EPS) * 2 - 1

    def unnormalize(self, x: Tensor) -> Tensor:
        if self.mode == NormMode.MEAN_STD:
            return x * (self.std + EPS) + self.mean
        return (x + 1) / 2 * (self.max - self.min + EPS) + self.min


class Normalizer(nn.Module):
    """Normalizes and unnormalizes named features of a batch. `modes` maps a feature type or a feature key (which wins)
    to a mode; features with mode IDENTITY pass through."""

    def __init__(self, features: Mapping[str, PolicyFeature], modes: Mapping[str, NormMode]):
        super().__init__()
        stats = {}
        for key, feature in features.items():
            mode = feature_norm_mode(dict(modes), key, feature)
            if mode != NormMode.IDENTITY:
                stats[_module_name(key)] = FeatureStats(key, feature, mode)
        self.stats = nn.ModuleDict(stats)
        self._stats_checked = False  # validated once after each change, not on every call (avoids GPU syncs)

    def set_stats(self, dataset_stats: Mapping[str, Mapping[str, object]]) -> None:
        """Copies dataset stats ({key: {"mean": ..., "std": ..., "min": ..., "max": ...}}) into the buffers."""
        for module in self.feature_stats():
            if module.key not in dataset_stats:
                raise KeyError(
                    f"dataset stats have no entry for feature {module.key!r}; stats cover {list(dataset_stats)}"
                )
            module.set_(dataset_stats[module.key])
        self._stats_checked = False

    def check(self) -> None:
        if self._stats_checked:
            return
        for module in self.feature_stats():
            module.check()
        self._stats_checked = True

    def normalize(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """A new dict with the configured features normalized; other entries are kept."""
        self.check()
        out = dict(batch)
        for module in self.feature_stats():
            if module.key in out:
                out[module.key] = module.normalize(out[module.key])
        return out

    def unnormalize(self, key: str, x: Tensor) -> Tensor:
        name = _module_name(key)
        if name not in self.stats:
            return x
        self.check()
        return cast(FeatureStats, self.stats[name]).unnormalize(x)

    def feature_stats(self) -> Iterator[FeatureStats]:
        return (cast(FeatureStats, module) for module in self.stats.values())

    def _load_from_state_dict(self, *args, **kwargs):
        self._stats_checked = False
        return super()._load_from_state_dict(*args, **kwargs)


def _module_name(key: str) -> str:
    """Module names cannot contain dots: "observation.image" -> "observation_image"."""
    return key.replace(".", "_")
