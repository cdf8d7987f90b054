"""Loading a saved policy (`Policy.from_pretrained`): a local directory, a training run's folder or a Hub repo id,
in hfpolicy's layout (checkpoint_files) or LeRobot's (lerobot_format)."""

import sys
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from hfpolicy.constants import CONFIG_FILE, TRAIN_CONFIG_FILE, WEIGHTS_FILE
from hfpolicy.io.hub_errors import describe_hub_error, is_missing_file
from hfpolicy.policies import lerobot_format
from hfpolicy.policies.checkpoint_files import (
    check_config_matches_weights,
    check_weights_finite,
    read_config_json,
    read_weights,
    weights_origin,
)
from hfpolicy.policies.config import PolicyConfig
from hfpolicy.policies.errors import PolicyLoadError, UnknownOverrideError
from hfpolicy.policies.module import PolicyModule
from hfpolicy.policies.registry import get_policy_class
from hfpolicy.runs.run_folder import CHECKPOINTS_DIR, LAST_LINK, PRETRAINED_DIR


def load_policy(
    cls: type[PolicyModule],
    source: str | Path,
    *,
    map_location: str | torch.device = "cpu",
    config_overrides: dict[str, Any] | None = None,
    **hub_options: Any,
) -> Any:
    """The policy saved at `source`, of class `cls` or a subclass of it; `hub_options` go to hf_hub_download."""
    source = saved_policy_folder(source)

    def resolve(filename: str) -> Path:
        return resolve_file(source, filename, **hub_options)

    config_path = resolve(CONFIG_FILE)
    config_data = read_config_json(config_path)
    if lerobot_format.is_lerobot_config(config_data):  # saved by LeRobot: converted to hfpolicy's own class
        policy = lerobot_format.load_lerobot_policy(
            config_data, resolve, str(source), expected_class=cls, config_overrides=config_overrides
        )
        return policy.to(map_location).eval()
    if config_overrides:
        unknown = sorted(set(config_overrides) - set(config_data))  # a saved config.json lists every field
        if unknown:
            raise UnknownOverrideError(
                f"{source} holds a {config_data.get('type')!r} policy, without {unknown}", unknown
            )
        config_data.update(config_overrides)
    try:
        config = PolicyConfig.from_dict(config_data)
    except ValueError as e:
        raise PolicyLoadError(f"{config_path}: {e}") from e
    policy_class = get_policy_class(config.type)
    if not issubclass(policy_class, cls):
        raise PolicyLoadError(f"{source} holds a {config.type!r} policy, not a {cls.__name__}")
    weights_path = resolve(WEIGHTS_FILE)
    state_dict, weights_metadata = read_weights(weights_path)
    check_config_matches_weights(config, weights_metadata, config_path, weights_path)
    check_weights_finite(state_dict, weights_path)
    try:
        policy = policy_class(config)
    except ValueError as e:  # settings that do not fit together, e.g. n_action_steps > horizon - n_obs_steps + 1
        raise PolicyLoadError(f"{config_path}: {e}") from e
    policy.load_strict(state_dict, source=str(weights_path))
    policy.weights_origin = weights_origin(weights_metadata)
    return policy.to(map_location).eval()


# A training run's folder (hfpolicy.runs.run_folder): <run>/checkpoints/last -> step_N/pretrained_model/.
RUN_CHECKPOINT_POLICY = (CHECKPOINTS_DIR, LAST_LINK, PRETRAINED_DIR)


def saved_policy_folder(source: str | Path, say: bool = True) -> str | Path:
    """`source`, or, for a training run's folder (or one of its checkpoints), the policy of its last checkpoint,
    saying so on stderr if `say`; PolicyLoadError for a run without a checkpoint yet."""
    local = Path(source)
    if not local.is_dir() or (local / CONFIG_FILE).is_file():
        return source
    candidates = [local.joinpath(*RUN_CHECKPOINT_POLICY), local / LAST_LINK / PRETRAINED_DIR, local / PRETRAINED_DIR]
    found = next((path for path in candidates if (path / CONFIG_FILE).is_file()), None)
    if found is not None:
        if say:
            print(
                f"{source} is a training run's folder: loading its last checkpoint's policy, {found}", file=sys.stderr
            )
        return found
    if (local / TRAIN_CONFIG_FILE).is_file() or (local / CHECKPOINTS_DIR).is_dir():
        raise PolicyLoadError(
            f"{source} is a training run's folder without a checkpoint yet (a saved policy is in "
            f"{local.joinpath(*RUN_CHECKPOINT_POLICY)} once the run saves one): let it reach --save_freq, or resume it"
        )
    return source


def resolve_file(source: str | Path, filename: str, *, revision: str | None = None, **hub_options: Any) -> Path:
    """The local path of `filename` in a policy directory, or downloaded from the Hub repo `source` (`hub_options`:
    force_download, token, cache_dir, local_files_only)."""
    check_file_name(filename, source)
    local = Path(source)
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
        validate_repo_id(str(source))  # offline, hf_hub_download would say "not cached"
        return Path(hf_hub_download(repo_id=str(source), filename=filename, revision=revision, **hub_options))
    except (EntryNotFoundError, HFValidationError, HfHubHTTPError, OSError) as e:
        if isinstance(e, HFValidationError) and not str(source).count("/") == 1:
            raise PolicyLoadError(f"{source!r} is not a local directory, nor a Hub repo id (user/name)") from e
        raise PolicyLoadError(
            describe_hub_error(e, str(source), filename, revision)
            + (": is it an hfpolicy policy?" if is_missing_file(e) else "")
        ) from e


def check_file_name(filename: Any, source: str | Path) -> None:
    """Refuses a file name from a checkpoint's JSON that is not a plain name inside the checkpoint's own folder."""
    parts = Path(filename).parts if isinstance(filename, str) else ()
    if not parts or Path(filename).is_absolute() or ".." in parts or len(parts) != 1:
        raise PolicyLoadError(
            f"{source}: the file name {filename!r} points outside the checkpoint folder; a checkpoint's files are "
            "plain names in its own folder: fix the JSON that names it"
        )
