"""The policy base class: an nn.Module that normalizes its own inputs and outputs and acts step by step from predicted
action chunks. Saving, loading and pushing hand the policy to checkpoint_files, loading and card, which never import
this module."""

import contextlib
import functools
import inspect
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import Tensor

from hfpolicy.constants import ACTION, REWARD
from hfpolicy.policies import card
from hfpolicy.policies.action_selection import PER_EPISODE_ROW_BLOCK, ActionBuffer, ActionQueue, predict_per_episode
from hfpolicy.policies.checkpoint_files import save_policy_files
from hfpolicy.policies.config import PolicyConfig
from hfpolicy.policies.loading import load_policy
from hfpolicy.policies.module import PolicyModule
from hfpolicy.policies.normalization import Normalizer
from hfpolicy.policies.registry import register_policy_class

NoiseSource = torch.Generator | list[torch.Generator] | None  # one generator for the batch, or one per batch row
NOISE_PARAMETERS = ("generator", "noise")  # what `predict_action_chunk` passes to a generate_actions that takes it


def masked_mean(loss: Tensor, is_pad: Tensor | None) -> Tensor:
    """The mean of a per-action loss (B, T, A) over the steps that are not padding (is_pad (B, T); None: all)."""
    if is_pad is None:
        return loss.mean()
    valid = (~is_pad.bool()).unsqueeze(-1).to(loss.dtype)
    return (loss * valid).sum() / (valid.sum() * loss.shape[-1]).clamp(min=1)


@functools.cache
def noise_parameters(generate_actions: Any) -> frozenset[str]:
    """Which of `generator` / `noise` a generate_actions takes: a deterministic policy's takes neither."""
    parameters = inspect.signature(generate_actions).parameters.values()
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return frozenset(NOISE_PARAMETERS)
    return frozenset(parameter.name for parameter in parameters if parameter.name in NOISE_PARAMETERS)


class Policy(
    PolicyModule,
    PyTorchModelHubMixin,
    library_name="hfpolicy",
    tags=["robotics", "hfpolicy"],
    repo_url="https://github.com/hfpolicy/hfpolicy",
):
    """Base class of every hfpolicy policy (docs/design.md#the-policy-base-class): a subclass sets `config_class` (a
    registered `PolicyConfig`) and implements, on normalized data, `compute_loss(batch) -> {"loss": ...}` and
    `generate_actions(observation) -> (B, >= n_action_steps, action_dim)`. `select_action` keeps the last
    `n_obs_steps` observations and a queue of actions, predicting a chunk when the queue needs one; `reset(seeds=...)`
    empties both at every episode start."""

    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    # Per-episode acting pads a batch to a multiple of this many rows; 1: generate_actions computes each row alone.
    per_episode_row_block: ClassVar[int] = PER_EPISODE_ROW_BLOCK

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.config_class is not PolicyConfig:
            register_policy_class(cls)

    def __init__(self, config: PolicyConfig, dataset_stats: dict[str, dict[str, Any]] | None = None):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        config.validate_features()
        self.config = config
        self.normalizer = Normalizer({**config.input_features, **config.output_features}, config.normalization_mapping)
        if dataset_stats is not None:
            self.normalizer.set_stats(dataset_stats)
        self._obs_history: deque[dict[str, Tensor]] = deque(maxlen=config.n_obs_steps)
        self._actions: ActionBuffer = self.make_action_buffer()
        self.noise_generator: NoiseSource = None  # set by the user; used when reset() got no seeds
        self._episode_generators: list[torch.Generator] | None = None  # one per env slot, set by reset(seeds=...)
        self.chunks_predicted = 0  # chunks `select_action` has predicted so far (a rollout marks the steps of new ones)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Training loss on a normalized batch (inputs with a time dim, `action` (B, horizon, A), `action_is_pad`)."""
        raise NotImplementedError

    def generate_actions(
        self, observation: dict[str, Tensor], generator: NoiseSource = None, noise: Tensor | None = None
    ) -> Tensor:
        """Normalized action chunk (B, >= n_action_steps, A) from normalized observations (B, n_obs_steps, ...).
        Policies that sample declare `generator` (one, or one per batch row) and/or `noise` (the initial noise); a
        deterministic policy writes `generate_actions(self, observation)`."""
        raise NotImplementedError

    def make_action_buffer(self) -> ActionBuffer:
        """How `select_action` executes predicted chunks (default: a queue of each chunk's first n_action_steps)."""
        return ActionQueue(self.config.n_action_steps)

    def after_optimizer_step(self) -> None:
        """Called by the training loop after every optimizer step (TD-MPC: its target network's EMA step)."""

    def exploring(self, std: float) -> contextlib.AbstractContextManager[None]:
        """A context in which the policy acts with exploration noise of `std` (online RL; TD-MPC implements it)."""
        raise NotImplementedError(f"the {self.config.type} policy does not explore (it does not learn from rewards)")

    def get_optim_params(self) -> Any:
        """Parameters (or param groups) for the optimizer."""
        return [p for p in self.parameters() if p.requires_grad]

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Normalizes a dataset batch and returns the subclass's losses; "loss" is the one to minimize."""
        needed = [*self.config.input_features, ACTION, *([REWARD] if self.config.reward_delta_indices else [])]
        missing = [key for key in needed if key not in batch]
        if missing:
            raise KeyError(f"the training batch lacks {missing}; it has {sorted(batch)}")
        return self.compute_loss(self.normalizer.normalize(self._with_feature_shapes(batch)))

    def _with_feature_shapes(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The batch with a shape-(1,) feature's plain numbers (as LeRobot's format stores them) given their trailing 1;
        ValueError naming an entry that is neither (batch, *shape) nor (batch, time, *shape)."""
        shaped = dict(batch)
        for key, feature in {**self.config.input_features, **self.config.output_features}.items():
            if key not in batch:
                continue
            value, frame_shape = batch[key], tuple(feature.shape)
            if frame_shape == (1,) and value.ndim == (2 if f"{key}_is_pad" in batch else 1):
                value = shaped[key] = value.unsqueeze(-1)  # a window of numbers (batch, time), or (batch,)
            if frame_shape not in (tuple(value.shape[1:]), tuple(value.shape[2:])):
                raise ValueError(
                    f"the training batch's {key!r} is {tuple(batch[key].shape)}, neither (batch, *shape) nor (batch, "
                    f"time, *shape) for the policy's feature shape {frame_shape}: the dataset's features and the "
                    "policy's config disagree (train the policy on this dataset's features, or fix the shape in the "
                    "dataset's meta/info.json)"
                )
        return shaped

    def reset(self, seeds: Sequence[int] | None = None) -> None:
        """Forgets the observation history and queued actions: call at every episode start. `seeds` (one per env) give
        each env slot its own noise generator, so that an episode's actions depend on its seed alone."""
        self._obs_history.clear()
        self._actions = self.make_action_buffer()
        self._episode_generators = None if seeds is None else [torch.Generator().manual_seed(int(s)) for s in seeds]

    @torch.inference_mode()  # no autograd bookkeeping in (e.g.) a denoising loop
    def predict_action_chunk(
        self,
        observation: dict[str, Tensor],
        *,
        generator: NoiseSource = None,
        noise: Tensor | None = None,
        n_steps: int | None = None,
    ) -> Tensor:
        """Actions (B, n_steps (default n_action_steps), A) in dataset units from raw observations (B, n_obs_steps, ...).
        Sampling policies take `noise` (their initial noise) or draw it from `generator` (one, or one per row), else
        from `noise_generator`, else from torch's global RNG."""
        n_steps = self.config.n_action_steps if n_steps is None else n_steps
        if generator is None:
            generator = self.noise_generator
        if isinstance(generator, list | tuple):
            batch_size = next(iter(observation.values())).shape[0]
            if len(generator) != batch_size:
                raise ValueError(f"{len(generator)} noise generators for a batch of {batch_size}: pass one per row")
            generator = list(generator)
        takes = noise_parameters(type(self).generate_actions)  # cached per function
        if noise is not None and "noise" not in takes:
            raise TypeError(
                f"{type(self).__name__}.generate_actions(observation) takes no `noise`: add a `noise: Tensor | None = "
                "None` parameter to it to act from a given initial noise"
            )
        sources: dict[str, Any] = {"generator": generator, "noise": noise}
        chunk = self.generate_actions(self.normalizer.normalize(observation), **{k: sources[k] for k in takes})
        if chunk.ndim != 3 or chunk.shape[1] < n_steps:
            raise RuntimeError(
                f"{type(self).__name__}.generate_actions returned shape {tuple(chunk.shape)}; "
                f"expected (batch, >= {n_steps}, action_dim)"
            )
        return self.normalizer.unnormalize(ACTION, chunk[:, :n_steps])

    @torch.no_grad()
    def select_action(self, observation: dict[str, Tensor]) -> Tensor:
        """One action per env (B, A) for one observation per env (tensors with a batch dim)."""
        missing = [key for key in self.config.input_features if key not in observation]
        if missing:
            raise KeyError(
                f"the observation lacks {missing} (policy inputs: {list(self.config.input_features)}): the env's "
                "obs_type decides what it gives; make_env(name, n_envs, policy=policy) picks the obs_type this "
                "policy needs (hfpolicy eval does the same)"
            )
        current = {key: observation[key] for key in self.config.input_features}
        batch_size = next(iter(current.values())).shape[0]
        if self._obs_history and next(iter(self._obs_history[0].values())).shape[0] != batch_size:
            raise RuntimeError("the batch size changed within an episode: call policy.reset() at every episode start")
        if self._episode_generators is not None and len(self._episode_generators) != batch_size:
            raise RuntimeError(
                f"policy.reset got {len(self._episode_generators)} seeds but the batch has {batch_size} envs: "
                "pass one seed per env"
            )
        # an episode's first observation fills the whole history
        self._obs_history.extend([current] * (1 if self._obs_history else self.config.n_obs_steps))
        if self._actions.needs_chunk():
            self.chunks_predicted += 1
            stacked = {key: torch.stack([obs[key] for obs in self._obs_history], dim=1) for key in current}
            steps = self._actions.steps_per_chunk
            if self._episode_generators is None:
                self._actions.push(self.predict_action_chunk(stacked, n_steps=steps))
            else:
                generators, block = self._episode_generators, self.per_episode_row_block
                self._actions.push(predict_per_episode(self.predict_action_chunk, stacked, generators, steps, block))
        return self._actions.pop()

    def save_pretrained(self, save_directory: str | Path, *, model_card_kwargs: dict | None = None, **kwargs) -> Any:
        """PyTorchModelHubMixin.save_pretrained, whose README.md loads the policy from `save_directory`."""
        model_card_kwargs = {"repo_id": str(save_directory), **(model_card_kwargs or {})}
        return super().save_pretrained(save_directory, model_card_kwargs=model_card_kwargs, **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:
        save_policy_files(self, save_directory)

    @classmethod
    def from_pretrained(  # type: ignore[override]  # on purpose: named options only, no **model_kwargs
        cls,
        pretrained_name_or_path: str | Path,
        *,
        revision: str | None = None,
        force_download: bool = False,
        token: str | bool | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
        map_location: str | torch.device = "cpu",
        config_overrides: dict[str, Any] | None = None,
    ) -> "Policy":
        """Loads a policy of this class, strictly, from a local directory, a training run's folder or a Hub repo id,
        hfpolicy's or LeRobot's; `config_overrides` replaces fields that do not change the weights."""
        return load_policy(
            cls,
            pretrained_name_or_path,
            revision=revision,
            force_download=force_download,
            token=token,
            cache_dir=cache_dir,
            local_files_only=local_files_only,
            map_location=map_location,
            config_overrides=config_overrides,
        )

    def push_to_hub(
        self,
        repo_id: str,
        *,
        artifacts: card.PolicyArtifacts | None = None,
        private: bool | None = None,
        token: str | None = None,
        branch: str | None = None,
        commit_message: str = "Upload policy with hfpolicy",
        config: Any = None,
        model_card_kwargs: Any = None,
        **artifact_fields: Any,
    ) -> str:
        """Uploads the policy, its model card and the `artifacts` (card.PolicyArtifacts, or its fields as keywords) in
        one commit; returns the commit URL. PyTorchModelHubMixin's `config` and `model_card_kwargs` are ignored."""
        del config, model_card_kwargs
        if artifacts is not None and artifact_fields:
            raise TypeError(f"pass either artifacts= or its fields ({', '.join(artifact_fields)}), not both")
        artifacts = artifacts if artifacts is not None else card.PolicyArtifacts(**artifact_fields)
        return card.upload_policy_repo(
            self, repo_id, artifacts, private=private, token=token, branch=branch, commit_message=commit_message
        )

    def generate_model_card(self, *args, **kwargs) -> Any:
        """The card `save_pretrained` writes (without eval results; `push_to_hub` adds them)."""
        return card.make_model_card(kwargs.get("repo_id") or f"hfpolicy {self.config.type} policy", self)
