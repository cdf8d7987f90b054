"""The policy base class: an nn.Module that saves to and loads from the Hub, normalizes its own inputs and outputs, and
turns chunk-predicting networks into a step-by-step controller with an observation history and an action queue.
"""

import importlib
import json
import tempfile
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import safetensors
import safetensors.torch
import torch
from huggingface_hub import HfApi, PyTorchModelHubMixin, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id
from torch import Tensor, nn

from hfpolicy.atomic_files import save_safetensors_atomically, write_json_atomically
from hfpolicy.constants import ACTION, CONFIG_FILE, WEIGHTS_FILE
from hfpolicy.hub_errors import describe_hub_error, describe_push_error, is_missing_file
from hfpolicy.policies.action_selection import ActionBuffer, ActionQueue
from hfpolicy.policies.config import PolicyConfig, known_policy_types
from hfpolicy.policies.normalization import Normalizer

if TYPE_CHECKING:
    from hfpolicy.policies.card import PolicyArtifacts

_POLICY_CLASSES: dict[str, type["Policy"]] = {}

WEIGHTS_CONFIG_METADATA = "hfpolicy_config"  # model.safetensors metadata: the config the weights were trained as
NoiseSource = torch.Generator | list[torch.Generator] | None  # one generator for the batch, or one per batch row


class PolicyPushError(RuntimeError):
    """`push_to_hub` failed on the Hub's side or the network's (the message names the cause and the fix)."""


class PolicyLoadError(RuntimeError):
    """A saved policy (config.json / model.safetensors) cannot be loaded as it is."""


class Policy(
    nn.Module,
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
    when the queue is empty. Call `reset()` at every episode start: it empties both. The queue is the policy's action
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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.config_class is not PolicyConfig:
            _POLICY_CLASSES[cls.config_class.get_choice_name(cls.config_class)] = cls

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

    # --- what subclasses implement --------------------------------------------------------------------------------
    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Training loss on a normalized batch (inputs with a time dim, `action` (B, horizon, A), `action_is_pad`)."""
        raise NotImplementedError

    def generate_actions(
        self, observation: dict[str, Tensor], generator: NoiseSource = None, noise: Tensor | None = None
    ) -> Tensor:
        """Normalized action chunk (B, >= n_action_steps, A) from normalized observations (B, n_obs_steps, ...).

        Policies that sample draw their noise from `generator` (one `torch.Generator`, or a list with one per batch
        row; None: torch's global RNG) or take it as `noise`; deterministic policies ignore both."""
        raise NotImplementedError

    def make_action_buffer(self) -> ActionBuffer:
        """How `select_action` executes predicted chunks; called by `__init__` and `reset()`. Default: a queue of each
        chunk's first `n_action_steps` actions. See `hfpolicy.policies.action_selection` for the interface."""
        return ActionQueue(self.config.n_action_steps)

    def get_optim_params(self) -> Any:
        """Parameters (or param groups) for the optimizer."""
        return [p for p in self.parameters() if p.requires_grad]

    # --- training ---------------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Normalizes a dataset batch and returns the subclass's losses; "loss" is the one to minimize."""
        missing = [key for key in [*self.config.input_features, ACTION] if key not in batch]
        if missing:
            raise KeyError(f"the training batch lacks {missing}; it has {sorted(batch)}")
        return self.compute_loss(self.normalizer.normalize(batch))

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
        chunk = self.generate_actions(self.normalizer.normalize(observation), generator=generator, noise=noise)
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
            raise KeyError(f"the observation lacks {missing} (policy inputs: {list(self.config.input_features)})")
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
            stacked = {key: torch.stack([obs[key] for obs in self._obs_history], dim=1) for key in current}
            steps = self._actions.steps_per_chunk
            if self._episode_generators is None:
                self._actions.push(self.predict_action_chunk(stacked, n_steps=steps))
            else:
                self._actions.push(self._predict_per_episode(stacked, steps))
        return self._actions.pop()

    # CPU BLAS (MKL) computes a matrix product's rows with kernels that depend on the number of rows: a row of a 20-row
    # product can differ in the last bit from the same row in a 16-row one (measured; rows in full blocks of 16 agree).
    # Per-episode acting therefore pads every batch to a multiple of this many rows.
    PER_EPISODE_ROW_BLOCK: ClassVar[int] = 16

    def _predict_per_episode(self, observation: dict[str, Tensor], n_steps: int) -> Tensor:
        """A chunk whose row i depends on observation row i and generator i alone, whatever the batch: the batch is
        padded to a multiple of PER_EPISODE_ROW_BLOCK rows (copies of its last row, throw-away generators), and the
        padding is dropped again."""
        generators = list(self._episode_generators)
        batch_size = len(generators)
        pad = -batch_size % self.PER_EPISODE_ROW_BLOCK
        if pad > 0:
            observation = {k: torch.cat([v, v[-1:].expand(pad, *v.shape[1:])]) for k, v in observation.items()}
            generators += [torch.Generator().manual_seed(0) for _ in range(pad)]
        return self.predict_action_chunk(observation, generator=generators, n_steps=n_steps)[:batch_size]

    # --- saving and loading -----------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | Path, *, model_card_kwargs: dict | None = None, **kwargs) -> Any:
        """PyTorchModelHubMixin.save_pretrained; the README.md it writes loads the policy from `save_directory`
        (its usage lines name the real path, not a placeholder)."""
        model_card_kwargs = {"repo_id": str(save_directory), **(model_card_kwargs or {})}
        return super().save_pretrained(save_directory, model_card_kwargs=model_card_kwargs, **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:
        """config.json (with `type`) and model.safetensors (weights and normalization stats), each written atomically."""
        save_directory = Path(save_directory)
        write_json_atomically(save_directory / CONFIG_FILE, self.config.to_dict())
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        metadata = {
            "format": "pt",
            "policy_type": self.config.type,
            WEIGHTS_CONFIG_METADATA: json.dumps(self.config.to_dict()),  # what the weights were trained as
        }
        save_safetensors_atomically(state, save_directory / WEIGHTS_FILE, metadata=metadata)

    @classmethod
    def from_pretrained(
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

        def resolve(filename: str) -> Path:
            check_file_name(filename, pretrained_name_or_path)
            local = Path(pretrained_name_or_path)
            if local.is_dir():
                path = local / filename
                if not path.is_file():
                    needed = (
                        f"a saved policy directory holds {CONFIG_FILE} and {WEIGHTS_FILE}"
                        if filename in (CONFIG_FILE, WEIGHTS_FILE)
                        else f"{CONFIG_FILE} there names it (a LeRobot checkpoint keeps its processor files beside "
                        f"{WEIGHTS_FILE}): copy the whole checkpoint folder, or save it again"
                    )
                    raise PolicyLoadError(f"{path} does not exist: {needed}")
                return path
            try:
                validate_repo_id(str(pretrained_name_or_path))  # offline, hf_hub_download would say "not cached"
                return Path(
                    hf_hub_download(
                        repo_id=str(pretrained_name_or_path),
                        filename=filename,
                        revision=revision,
                        cache_dir=cache_dir,
                        force_download=force_download,
                        token=token,
                        local_files_only=local_files_only,
                    )
                )
            except (EntryNotFoundError, HFValidationError, HfHubHTTPError, OSError) as e:
                if isinstance(e, HFValidationError) and not str(pretrained_name_or_path).count("/") == 1:
                    raise PolicyLoadError(
                        f"{pretrained_name_or_path!r} is not a local directory, nor a Hub repo id (user/name)"
                    ) from e
                raise PolicyLoadError(
                    describe_hub_error(e, str(pretrained_name_or_path), filename, revision)
                    + (": is it an hfpolicy policy?" if is_missing_file(e) else "")
                ) from e

        config_path = resolve(CONFIG_FILE)
        try:
            config_data = json.loads(config_path.read_text())
        except json.JSONDecodeError as e:
            raise PolicyLoadError(f"{config_path} is not valid JSON ({e}); re-save or re-download the policy") from e
        from hfpolicy.policies import lerobot_format  # imports this module: imported here, not at the top

        if lerobot_format.is_lerobot_config(config_data):  # saved by LeRobot: converted to hfpolicy's own class
            policy = lerobot_format.load_lerobot_policy(
                config_data,
                resolve,
                str(pretrained_name_or_path),
                expected_class=cls,
                config_overrides=config_overrides,
            )
            return policy.to(map_location).eval()
        if config_overrides:
            config_data.update(config_overrides)
        try:
            config = PolicyConfig.from_dict(config_data)
        except ValueError as e:
            raise PolicyLoadError(f"{config_path}: {e}") from e
        policy_class = get_policy_class(config.type)
        if not issubclass(policy_class, cls):
            raise PolicyLoadError(f"{pretrained_name_or_path} holds a {config.type!r} policy, not a {cls.__name__}")

        weights_path = resolve(WEIGHTS_FILE)
        try:
            state_dict = safetensors.torch.load_file(str(weights_path), device="cpu")
            with safetensors.safe_open(str(weights_path), framework="pt") as weights_file:
                weights_metadata = weights_file.metadata() or {}
        except (safetensors.SafetensorError, OSError, ValueError) as e:
            raise PolicyLoadError(
                f"{weights_path} is not a readable safetensors file ({e}); it may be truncated or corrupt: "
                "download it again (delete it from the Hub cache; in Python, force_download=True) or re-save the policy"
            ) from e
        check_config_matches_weights(config, weights_metadata, config_path, weights_path)
        check_weights_finite(state_dict, weights_path)

        try:
            policy = policy_class(config)
        except ValueError as e:  # settings that do not fit together, e.g. n_action_steps > horizon - n_obs_steps + 1
            raise PolicyLoadError(f"{config_path}: {e}") from e
        policy.load_strict(state_dict, source=str(weights_path))
        policy.to(map_location)
        policy.eval()
        return policy

    def push_to_hub(
        self,
        repo_id: str,
        *,
        artifacts: "PolicyArtifacts | None" = None,
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
        from hfpolicy.policies.card import PolicyArtifacts, stage_policy_repo

        del config, model_card_kwargs
        if artifacts is not None and artifact_fields:
            raise TypeError(f"pass either artifacts= or its fields ({', '.join(artifact_fields)}), not both")
        artifacts = artifacts if artifacts is not None else PolicyArtifacts(**artifact_fields)
        api = HfApi(token=token)
        with tempfile.TemporaryDirectory(prefix="hfpolicy-push-") as tmp:
            folder = stage_policy_repo(self, Path(tmp), repo_id, artifacts)  # fails before anything is created
            try:
                repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
                if branch is not None:
                    api.create_branch(repo_id, branch=branch, exist_ok=True)
                commit = api.upload_folder(
                    repo_id=repo_id,
                    folder_path=folder,
                    revision=branch,
                    commit_message=commit_message,
                    repo_type="model",
                )
            except Exception as e:
                cause = describe_push_error(e, repo_id)  # None: not a Hub or network failure (a bug), shown as it is
                if cause is None:
                    raise
                raise PolicyPushError(cause) from e
        return str(commit)

    def generate_model_card(self, *args, **kwargs) -> Any:
        """The card `save_pretrained` writes: hfpolicy's own (without eval results; `push_to_hub` adds them)."""
        from hfpolicy.policies.card import make_model_card

        return make_model_card(kwargs.get("repo_id") or f"hfpolicy {self.config.type} policy", self)

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
        if missing or unexpected or mismatched:
            problems = []
            if missing:
                problems.append(f"missing keys {missing}")
            if unexpected:
                problems.append(f"unexpected keys {unexpected}")
            if mismatched:
                problems.append(f"shape mismatches [{'; '.join(mismatched)}]")
            raise PolicyLoadError(
                f"{source} does not fit {type(self).__name__} built from its config: {', '.join(problems)}"
            )
        self.load_state_dict(state_dict, strict=True)


def check_config_matches_weights(
    config: PolicyConfig, weights_metadata: dict[str, str], config_path: Path, weights_path: Path
) -> None:
    """Refuses a config.json (or config_overrides) that contradicts what the weights were trained as.

    `save_pretrained` records the config in model.safetensors' metadata. Fields that only steer acting or training
    (`config.acting_fields`: n_action_steps, the sampler, the optimizer presets, ...) may differ; any other field
    that differs (horizon, crop_shape, n_obs_steps, features, ...) would give the weights another meaning. Weights
    saved without that record (older files, other tools) are not checked."""
    saved_json = weights_metadata.get(WEIGHTS_CONFIG_METADATA)
    if saved_json is None:
        return
    try:
        saved = json.loads(saved_json)
    except json.JSONDecodeError as e:
        raise PolicyLoadError(f"{weights_path}: its config metadata is not valid JSON ({e}); re-save the policy") from e
    current = config.to_dict()
    differing = [
        name
        for name in sorted(set(saved) | set(current))
        if name not in config.acting_fields and saved.get(name) != current.get(name)
    ]
    if differing:
        changes = "; ".join(f"{name}: {current.get(name)!r} (trained with {saved.get(name)!r})" for name in differing)
        raise PolicyLoadError(
            f"{config_path} contradicts the weights in {weights_path}, which were trained with other settings: "
            f"{changes}. These fields decide what the weights mean; restore them in config.json (only "
            f"{', '.join(sorted(config.acting_fields))} may be changed after training)"
        )


def check_file_name(filename: Any, source: str | Path) -> None:
    """Refuses a file name, as a checkpoint's JSON gives it, that is not a plain name inside the checkpoint (an
    absolute path, `..`, a folder): a policy's files are read from its own folder or repo, never from elsewhere."""
    parts = Path(filename).parts if isinstance(filename, str) else ()
    if not parts or Path(filename).is_absolute() or ".." in parts or len(parts) != 1:
        raise PolicyLoadError(
            f"{source}: the file name {filename!r} points outside the checkpoint folder; a checkpoint's files are "
            "plain names in its own folder: fix the JSON that names it"
        )


def check_weights_finite(state_dict: dict[str, Tensor], weights_path: Path) -> None:
    """Refuses weights holding NaN or inf (a corrupted but readable file, or a diverged training), naming them.

    All-NaN normalization buffers are the normalizer's "no stats yet" marker (using them raises MissingStatsError),
    not damage, and are let through."""
    bad = {
        name: int((~torch.isfinite(tensor)).sum())
        for name, tensor in state_dict.items()
        if tensor.is_floating_point()
        and not torch.isfinite(tensor).all()
        and not (name.startswith("normalizer.") and torch.isnan(tensor).all())
    }
    if bad:
        listed = ", ".join(f"{name} ({count} values)" for name, count in list(bad.items())[:5])
        more = f" and {len(bad) - 5} more tensors" if len(bad) > 5 else ""
        raise PolicyLoadError(
            f"{weights_path} holds NaN or inf in {listed}{more}: the file is corrupt or the training diverged; "
            "download it again (delete it from the Hub cache; in Python, force_download=True) or load an earlier checkpoint"
        )


def get_policy_class(type_name: str) -> type[Policy]:
    """The Policy subclass registered for a config type, importing `hfpolicy.policies.<type>.modeling` if needed."""
    if type_name not in _POLICY_CLASSES:
        module_name = f"hfpolicy.policies.{type_name}.modeling"
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not module_name.startswith(e.name):
                raise  # a dependency of an existing policy module is missing: show that error
    if type_name not in _POLICY_CLASSES:
        known = sorted(set(known_policy_types()) | set(_POLICY_CLASSES))
        raise PolicyLoadError(f"no policy class for type {type_name!r}; known types: {', '.join(known)}")
    return _POLICY_CLASSES[type_name]


def make_policy(config: PolicyConfig, dataset_stats: dict[str, dict[str, Any]] | None = None) -> Policy:
    """Builds the policy class registered for `config.type`."""
    return get_policy_class(config.type)(config, dataset_stats=dataset_stats)
