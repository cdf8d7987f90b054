"""The policy contract and acting: the base class, an nn.Module that normalizes its own inputs and outputs and
turns chunk-predicting networks into a step-by-step controller with an observation history and an action queue.

Saving, loading, pushing and the model card are PyTorchModelHubMixin's methods here, each a few lines handing the
policy (or its class) to the hub-I/O modules below it: checkpoint_files (config.json and model.safetensors), loading
(local, Hub, LeRobot checkpoints through lerobot_format) and card (the card, the staged repository, the upload).
Those never import this module: they get the policy or the class they work on.
"""

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


@functools.cache
def _noise_parameters_of(function: Any) -> frozenset[str]:
    parameters = inspect.signature(function).parameters.values()
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return frozenset(NOISE_PARAMETERS)
    return frozenset(parameter.name for parameter in parameters if parameter.name in NOISE_PARAMETERS)


def noise_parameters(generate_actions: Any) -> frozenset[str]:
    """Which of `generator` / `noise` a (bound) generate_actions takes: a deterministic policy's takes neither."""
    return _noise_parameters_of(getattr(generate_actions, "__func__", generate_actions))


class Policy(
    PolicyModule,
    PyTorchModelHubMixin,
    library_name="hfpolicy",
    tags=["robotics", "hfpolicy"],
    repo_url="https://github.com/hfpolicy/hfpolicy",
):
    """Base class of every hfpolicy policy.

    A subclass sets `config_class` (a registered `PolicyConfig`) and implements two methods that see normalized data:
    `compute_loss(batch) -> {"loss": ...}` for training and `generate_actions(observation) -> (B, n_action_steps,
    action_dim)` for acting. The base class provides normalization (stats are buffers saved in model.safetensors),
    `forward` for training, `predict_action_chunk` and `select_action` for acting, and strict Hub (de)serialization.

    Acting step by step: `select_action(observation)` takes one observation per env (tensors with a batch dim) and
    returns one action per env. It keeps the last `n_obs_steps` observations (at an episode's first step the first
    observation is repeated to fill the history) and a queue of `n_action_steps` actions, and predicts a new chunk only
    when the queue is empty (`chunks_predicted` counts them). Call `reset()` at every episode start: it empties both. The queue is the policy's action
    buffer (`hfpolicy.policies.action_selection`); a subclass that executes chunks differently overrides
    `make_action_buffer` (ACT's temporal ensembling predicts a chunk at every step and averages the predictions).

    Sampling noise (policies that sample, such as Diffusion Policy): `reset(seeds=[...])` gives each env slot of the
    coming batch its own `torch.Generator` seeded with that slot's episode seed, and every chunk `select_action`
    predicts draws slot i's noise from generator i alone, so an episode's actions depend on its seed only, not on the
    batch size, the other episodes of the batch, or the process that runs it. Without seeds the noise comes from
    `policy.noise_generator` (one generator, or one per slot) when set, else from torch's global random state.
    `predict_action_chunk(observation, generator=..., noise=...)` takes the same noise sources directly; `noise` is the
    policy's initial noise tensor (Diffusion Policy: (B, horizon, action_dim)), for reproducing another library's
    actions exactly.

    The timeline for n_obs_steps=2, horizon=16, n_action_steps=8 (Diffusion Policy on PushT). `o` is an observation
    in the history, `h` a step of the predicted horizon, `a` an action that is executed; the chunk is predicted at t=0,
    then again at t=8 and t=16 (so 20 steps make 3 predictions):

        step t      : -1  0  1  2  3  4  5  6  7  8  9 10 11 12 13 14
        history     :  o  o                                           (t=-1 repeats t=0 at an episode start)
        horizon     :  h  h  h  h  h  h  h  h  h  h  h  h  h  h  h  h
        executed    :     a  a  a  a  a  a  a  a                      (horizon[n_obs_steps - 1 :][: n_action_steps])
        next chunk  :                            predicted at t=8 from observations t=7 and t=8
    """

    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    # Per-episode acting pads a batch to a multiple of this many rows (see action_selection.PER_EPISODE_ROW_BLOCK);
    # 1: the policy's generate_actions computes each row alone when given one generator per row.
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

    # --- what subclasses implement --------------------------------------------------------------------------------
    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Training loss on a normalized batch (inputs with a time dim, `action` (B, horizon, A), `action_is_pad`)."""
        raise NotImplementedError

    def generate_actions(
        self, observation: dict[str, Tensor], generator: NoiseSource = None, noise: Tensor | None = None
    ) -> Tensor:
        """Normalized action chunk (B, >= n_action_steps, A) from normalized observations (B, n_obs_steps, ...).

        Policies that sample declare `generator` (one `torch.Generator`, or a list with one per batch row; None:
        torch's global RNG) and/or `noise` (the initial noise tensor) and get them; a deterministic policy writes
        `generate_actions(self, observation)` and is called with the observation alone."""
        raise NotImplementedError

    def make_action_buffer(self) -> ActionBuffer:
        """How `select_action` executes predicted chunks; called by `__init__` and `reset()`. Default: a queue of each
        chunk's first `n_action_steps` actions. See `hfpolicy.policies.action_selection` for the interface."""
        return ActionQueue(self.config.n_action_steps)

    def after_optimizer_step(self) -> None:
        """Called by the training loop after every optimizer step (TD-MPC: its target network's EMA step)."""

    def exploring(self, std: float) -> contextlib.AbstractContextManager[None]:
        """A context in which the policy acts with exploration noise of `std` (online reinforcement learning,
        `--online.labels=reward`); policies that learn from rewards (TD-MPC) implement it."""
        raise NotImplementedError(f"the {self.config.type} policy does not explore (it does not learn from rewards)")

    def get_optim_params(self) -> Any:
        """Parameters (or param groups) for the optimizer."""
        return [p for p in self.parameters() if p.requires_grad]

    # --- training ---------------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Normalizes a dataset batch and returns the subclass's losses; "loss" is the one to minimize."""
        needed = [*self.config.input_features, ACTION, *([REWARD] if self.config.reward_delta_indices else [])]
        missing = [key for key in needed if key not in batch]
        if missing:
            raise KeyError(f"the training batch lacks {missing}; it has {sorted(batch)}")
        return self.compute_loss(self.normalizer.normalize(self._with_feature_shapes(batch)))

    def _with_feature_shapes(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The batch with each feature's frames in the feature's shape: a shape-(1,) feature, which a dataset gives
        as one number per frame (LeRobot's format stores it as a plain value), gets its trailing 1 back. An entry
        that is neither (batch, *shape) nor (batch, time, *shape) is a ValueError naming the feature (a shape error
        deep in a network names none)."""
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

    # --- acting -----------------------------------------------------------------------------------------------------
    def reset(self, seeds: Sequence[int] | None = None) -> None:
        """Forget the observation history and queued actions. Call at every episode start.

        `seeds` (one per env of the coming batch, e.g. the episodes' env seeds) give each env slot its own noise
        generator, so that sampling policies act as a function of the episode's seed alone (see the class docstring).
        """
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
        """Actions (B, n_steps, A) in dataset units from raw observations with a time dim (B, n_obs_steps, ...).

        `n_steps`: how many of the predicted actions to return (default n_action_steps; at most as many as the policy
        predicts). Noise (sampling policies only): `noise`, the policy's initial noise tensor, or drawn from
        `generator` (one generator or one per batch row), else from `self.noise_generator`, else from torch's global
        RNG."""
        n_steps = self.config.n_action_steps if n_steps is None else n_steps
        if generator is None:
            generator = self.noise_generator
        if isinstance(generator, list | tuple):
            batch_size = next(iter(observation.values())).shape[0]
            if len(generator) != batch_size:
                raise ValueError(f"{len(generator)} noise generators for a batch of {batch_size}: pass one per row")
            generator = list(generator)
        takes = noise_parameters(self.generate_actions)
        if noise is not None and "noise" not in takes:
            raise TypeError(
                f"{type(self).__name__}.generate_actions(observation) takes no `noise`: add a `noise: Tensor | None = "
                "None` parameter to it to act from a given initial noise"
            )
        sources: dict[str, Any] = {
            name: value for name, value in (("generator", generator), ("noise", noise)) if name in takes
        }
        chunk = self.generate_actions(self.normalizer.normalize(observation), **sources)
        if chunk.ndim != 3 or chunk.shape[1] < n_steps:
            raise RuntimeError(
                f"{type(self).__name__}.generate_actions returned shape {tuple(chunk.shape)}; "
                f"expected (batch, >= {n_steps}, action_dim)"
            )
        return self.normalizer.unnormalize(ACTION, chunk[:, :n_steps])

    @torch.no_grad()
    def select_action(self, observation: dict[str, Tensor]) -> Tensor:
        """One action per env (B, A) for one observation per env; see the class docstring for the history and the
        action buffer (`make_action_buffer`)."""
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
        if not self._obs_history:
            self._obs_history.extend([current] * self.config.n_obs_steps)
        else:
            self._obs_history.append(current)
        if self._actions.needs_chunk():
            self.chunks_predicted += 1
            stacked = {key: torch.stack([obs[key] for obs in self._obs_history], dim=1) for key in current}
            steps = self._actions.steps_per_chunk
            if self._episode_generators is None:
                self._actions.push(self.predict_action_chunk(stacked, n_steps=steps))
            else:
                generators, block = self._episode_generators, self.per_episode_row_block
                chunk = predict_per_episode(self.predict_action_chunk, stacked, generators, steps, block)
                self._actions.push(chunk)
        return self._actions.pop()

    # --- saving and loading -----------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | Path, *, model_card_kwargs: dict | None = None, **kwargs) -> Any:
        """PyTorchModelHubMixin.save_pretrained; the README.md it writes loads the policy from `save_directory`
        (its usage lines name the real path, not a placeholder)."""
        model_card_kwargs = {"repo_id": str(save_directory), **(model_card_kwargs or {})}
        return super().save_pretrained(save_directory, model_card_kwargs=model_card_kwargs, **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:
        """config.json (with `type`) and model.safetensors (weights and normalization stats), each written atomically."""
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
        """Loads a policy from a local directory or a Hub repo id. Only config.json and model.safetensors are read.

        On the base class the policy type comes from config.json's `type`; on a subclass the type must match. Loading
        is strict: missing or unexpected weights and shape mismatches raise `PolicyLoadError` naming them.
        `config_overrides` replaces config fields that do not change the weights (e.g. {"n_action_steps": 4}).
        A checkpoint saved by LeRobot (its config.json, model.safetensors and processor files) is recognised and
        returned as hfpolicy's policy of that type, with the same weights and normalization (see `lerobot_format`).
        """
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
        """Uploads config.json + model.safetensors, a model card and the `artifacts` in one commit; returns the
        commit URL. The repository is staged locally first, so a missing video fails before anything is created.

        `artifacts` (hfpolicy.policies.card.PolicyArtifacts) holds what goes with the weights: eval_info (the card's
        eval results and eval_info.json), eval videos, train_config, training_curve, env_type, dataset_repo_id,
        train_command. Its fields may also be passed as keywords: `policy.push_to_hub("user/x", eval_info=info)`.
        (`config` and `model_card_kwargs` are accepted for PyTorchModelHubMixin compatibility and ignored: the
        config is always the policy's own.)
        """
        del config, model_card_kwargs
        if artifacts is not None and artifact_fields:
            raise TypeError(f"pass either artifacts= or its fields ({', '.join(artifact_fields)}), not both")
        artifacts = artifacts if artifacts is not None else card.PolicyArtifacts(**artifact_fields)
        return card.upload_policy_repo(
            self, repo_id, artifacts, private=private, token=token, branch=branch, commit_message=commit_message
        )

    def generate_model_card(self, *args, **kwargs) -> Any:
        """The card `save_pretrained` writes: hfpolicy's own (without eval results; `push_to_hub` adds them)."""
        return card.make_model_card(kwargs.get("repo_id") or f"hfpolicy {self.config.type} policy", self)
