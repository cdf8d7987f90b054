"""LeRobot checkpoints as hfpolicy policies, and hfpolicy policies in LeRobot's checkpoint layout (docs/lerobot.md).
Only JSON and safetensors are read. Each policy type that converts has a module `hfpolicy/policies/<type>/lerobot.py`
with `config_from_lerobot(lerobot_config, input_features, output_features)`, `state_dict_from_lerobot(state_dict,
config)`, `config_to_lerobot(config)` and `state_dict_to_lerobot(state_dict, config)`; each raises
LeRobotConversionError for what the other library cannot reproduce."""

import dataclasses
import json
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from hfpolicy.constants import ACTION, CONFIG_FILE, OBS_ENV_STATE, OBS_STATE, WEIGHTS_FILE
from hfpolicy.io.atomic import save_safetensors_atomically, write_json_atomically
from hfpolicy.policies.card import LEROBOT_VERSION as CARD_LEROBOT_VERSION
from hfpolicy.policies.checkpoint_files import check_weights_finite, read_weights
from hfpolicy.policies.config import FeatureType, NormMode, PolicyConfig, PolicyFeature, feature_norm_mode
from hfpolicy.policies.errors import LeRobotConversionError, PolicyLoadError
from hfpolicy.policies.module import PolicyModule
from hfpolicy.policies.normalization import EPS, STAT_NAMES
from hfpolicy.policies.registry import get_policy_class, import_type_module

PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
NORMALIZER_STEP = "normalizer_processor"
UNNORMALIZER_STEP = "unnormalizer_processor"
# Processor steps that leave the values a policy sees unchanged (renaming is warned about: it changes input keys only).
PASSIVE_STEPS = ("rename_observations_processor", "to_batch_processor", "device_processor")
LEGACY_INPUT_PREFIX = "normalize_inputs."  # LeRobot < 0.4: input stats inside model.safetensors
LEGACY_OUTPUT_PREFIX = "unnormalize_outputs."  # LeRobot < 0.4: the action stats used when acting
LEGACY_PREFIXES = (LEGACY_INPUT_PREFIX, "normalize_targets.", LEGACY_OUTPUT_PREFIX)

NORM_MODES_FROM_LEROBOT = {mode.name: mode for mode in NormMode}  # MEAN_STD, MIN_MAX, IDENTITY
HFPOLICY_TYPE_OF_LEROBOT_TYPE = {"VISUAL": "image", "STATE": "state", "ACTION": "action"}  # ENV: per feature key
FEATURE_TYPES_FROM_LEROBOT = {
    "VISUAL": FeatureType.IMAGE,
    "STATE": FeatureType.STATE,
    "ENV": FeatureType.STATE,
    "ACTION": FeatureType.ACTION,
}
LEROBOT_VERSION = CARD_LEROBOT_VERSION  # the LeRobot release whose layout export writes (and that tests check against)
# LeRobot config fields of every type that this module handles, or that say where LeRobot runs or uploads.
RUNTIME_FIELDS = {"type", "input_features", "output_features", "normalization_mapping", "use_peft", "device"}
RUNTIME_FIELDS |= {"push_to_hub", "repo_id", "private", "tags", "license", "pretrained_path", "pretrained_revision"}


class LeRobotConversionWarning(UserWarning):
    """A LeRobot setting that does not change the actions was ignored (or a setting was mapped approximately)."""


def warn_ignored(message: str) -> None:
    warnings.warn(message, LeRobotConversionWarning, stacklevel=3)


def check_lerobot_fields(
    lerobot_config: Mapping[str, Any], policy_name: str, known: Iterable[str], ignored: Mapping[str, Any]
) -> None:
    """Refuses PEFT adapters; warns about fields neither `known` nor runtime ones, and `ignored` ones not at their
    (LeRobot default) value, which do not change the actions."""
    if lerobot_config.get("use_peft"):
        raise LeRobotConversionError(
            "use_peft=true: this LeRobot checkpoint holds PEFT adapter weights, which hfpolicy does not apply; "
            "merge the adapters into the model in LeRobot and save it again"
        )
    unknown = sorted(set(lerobot_config) - {*known, *ignored, *RUNTIME_FIELDS})
    if unknown:
        warn_ignored(f"LeRobot {policy_name} config fields {unknown} are unknown to hfpolicy's conversion and ignored")
    for name, default in ignored.items():
        if name in lerobot_config and lerobot_config[name] != default:
            warn_ignored(f"LeRobot's {name}={lerobot_config[name]!r} does not change the actions; hfpolicy ignores it")


def lerobot_model_inputs(input_features: Mapping[str, Any], policy_name: str) -> dict[str, Any]:
    """The inputs LeRobot's policies condition on (the two states and the images); others are dropped, warning."""
    inputs = {}
    for key, feature in input_features.items():
        if key in (OBS_STATE, OBS_ENV_STATE) or feature.type == FeatureType.IMAGE:
            inputs[key] = feature
        else:
            warn_ignored(f"input feature {key!r}: LeRobot's {policy_name} does not condition on it; dropped")
    return inputs


def is_lerobot_config(config_data: Mapping[str, Any]) -> bool:
    """Whether a config.json dict was written by LeRobot: its feature types or normalization keys are LeRobot's
    upper-case enums (VISUAL, STATE, ...), where hfpolicy writes lower-case ones (image, state, ...)."""
    if not isinstance(config_data, Mapping):  # not a config at all: the caller's own check names the problem
        return False
    features = {}
    for field_name in ("input_features", "output_features"):
        if isinstance(config_data.get(field_name), Mapping):  # any other value: the conversion names the field
            features.update(config_data[field_name])
    feature_types = {f.get("type") for f in features.values() if isinstance(f, Mapping)}
    mapping_keys = set(config_data.get("normalization_mapping") or {})
    lerobot_names = {"VISUAL", "STATE", "ENV", "ACTION", "REWARD", "LANGUAGE"}
    return bool((feature_types | mapping_keys) & lerobot_names)


def policy_module(lerobot_type: str) -> ModuleType:
    """`hfpolicy.policies.<type>.lerobot`, the conversion functions of one policy type."""
    module = import_type_module(lerobot_type, "lerobot")
    if module is None:
        supported = sorted(p.parent.name for p in Path(__file__).parent.glob("*/lerobot.py"))
        raise LeRobotConversionError(
            f"this is a LeRobot {lerobot_type!r} policy; hfpolicy converts LeRobot policies of types "
            f"{', '.join(supported)} only"
        )
    return module


def load_lerobot_policy(
    config_data: Mapping[str, Any],
    resolve: Callable[[str], Path],
    source: str,
    *,
    expected_class: type[PolicyModule],
    config_overrides: Mapping[str, Any] | None = None,
) -> Any:
    """hfpolicy's policy (of `expected_class`, in eval mode, on the CPU) from a LeRobot checkpoint: `config_data` is
    its config.json, `resolve(filename)` the local path of one of its files, `source` what `converted_from` records."""
    lerobot_type = config_data.get("type")
    if not isinstance(lerobot_type, str):
        raise LeRobotConversionError(f"{source}: LeRobot's config.json has no policy 'type'")
    check_numbers_finite(config_data, f"{source}: {CONFIG_FILE}")
    module = policy_module(lerobot_type)
    lerobot_types, input_features, output_features = features_from_lerobot(config_data, source)

    weights_path = resolve(WEIGHTS_FILE)
    weights = read_weights(weights_path)[0]
    legacy = {k: weights.pop(k) for k in [k for k in weights if k.startswith(LEGACY_PREFIXES)]}
    check_weights_finite(weights, weights_path)  # as for hfpolicy's own checkpoints
    if legacy:
        modes, stats = _legacy_normalization(config_data, lerobot_types, legacy, source)
    else:
        modes, stats = _processor_normalization(lerobot_types, resolve, source)

    try:
        config = module.config_from_lerobot(dict(config_data), input_features, output_features)
    except ValueError as e:  # hfpolicy's config refuses the settings
        raise LeRobotConversionError(f"this LeRobot {lerobot_type} config cannot be reproduced by hfpolicy: {e}") from e
    normalization_mapping = normalization_mapping_from_lerobot(
        config_data, {**input_features, **output_features}, modes
    )
    config = dataclasses.replace(
        config, normalization_mapping=normalization_mapping, converted_from=f"LeRobot checkpoint {source}"
    )
    if config_overrides:
        try:
            config = PolicyConfig.from_dict({**config.to_dict(), **config_overrides})
        except ValueError as e:
            raise PolicyLoadError(f"{source}: config_overrides {dict(config_overrides)}: {e}") from e

    policy_class = get_policy_class(config.type)
    if not issubclass(policy_class, expected_class):
        raise PolicyLoadError(f"{source} holds a {config.type!r} policy, not a {expected_class.__name__}")
    try:
        policy = policy_class(config, dataset_stats=stats)
    except (KeyError, ValueError) as e:
        raise LeRobotConversionError(f"{source}: the normalization stats do not fit the features: {e}") from e
    model_weights = module.state_dict_from_lerobot(weights, config)
    normalizer_state = {k: v for k, v in policy.state_dict().items() if k.startswith("normalizer.")}
    policy.load_strict({**model_weights, **normalizer_state}, source=f"{weights_path} (converted from LeRobot)")
    return policy.eval()


def check_numbers_finite(data: Any, where: str, path: str = "") -> None:
    """Refuses NaN or inf anywhere in a parsed JSON config (json.loads reads NaN and Infinity), naming the field."""
    if isinstance(data, float) and not math.isfinite(data):
        raise LeRobotConversionError(f"{where}: {path or 'a value'} is {data}: set it to a finite number")
    items = data.items() if isinstance(data, Mapping) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        check_numbers_finite(
            value, where, f"{path}.{key}" if path and isinstance(key, str) else f"{path}[{key}]" if path else str(key)
        )


def features_from_lerobot(
    config_data: Mapping[str, Any], source: str
) -> tuple[dict[str, str], dict[str, PolicyFeature], dict[str, PolicyFeature]]:
    """(LeRobot type of every feature, hfpolicy input features, hfpolicy output features), in LeRobot's order."""
    lerobot_types: dict[str, str] = {}
    converted: list[dict[str, PolicyFeature]] = []
    for field_name, allowed in (("input_features", ("VISUAL", "STATE", "ENV")), ("output_features", ("ACTION",))):
        features = {}
        given = config_data.get(field_name) or {}
        if not isinstance(given, Mapping):
            raise LeRobotConversionError(
                f"{source}: {CONFIG_FILE} {field_name} is {json.dumps(given)}, not an object of features "
                '{"key": {"type": ..., "shape": [...]}}: fix that field'
            )
        for key, feature in given.items():
            where = f"{source}: {CONFIG_FILE} {field_name}[{key!r}]"
            if not isinstance(feature, Mapping):
                raise LeRobotConversionError(
                    f"{where} is {json.dumps(feature)}, not a feature object "
                    '{"type": ..., "shape": [...]}: fix that field'
                )
            kind = feature.get("type")
            shape = feature.get("shape")
            if not isinstance(shape, list | tuple) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
            ):
                raise LeRobotConversionError(
                    f"{where}.shape is {json.dumps(shape)}: a feature's shape is a list of positive integers (e.g. "
                    "[2]); fix that field"
                )
            if not isinstance(kind, str) or kind not in allowed:
                raise LeRobotConversionError(
                    f"{source}: {field_name}[{key!r}] has LeRobot type {kind!r}; hfpolicy converts "
                    f"{'/'.join(allowed)} {field_name.split('_')[0]} features only"
                )
            lerobot_types[key] = kind
            features[key] = PolicyFeature(FEATURE_TYPES_FROM_LEROBOT[kind], tuple(shape))
        converted.append(features)
    if ACTION not in converted[1]:
        raise LeRobotConversionError(f"{source}: LeRobot's config has no {ACTION!r} output feature")
    return lerobot_types, converted[0], converted[1]


def _norm_mode_from_lerobot(name: Any, key: str, source: str) -> NormMode:
    if name not in NORM_MODES_FROM_LEROBOT:
        raise LeRobotConversionError(
            f"{source}: feature {key!r} uses LeRobot normalization {name!r}; hfpolicy implements "
            f"{', '.join(NORM_MODES_FROM_LEROBOT)} only (the actions would differ)"
        )
    return NORM_MODES_FROM_LEROBOT[name]


def _legacy_normalization(
    config_data: Mapping[str, Any], lerobot_types: dict[str, str], buffers: dict[str, Tensor], source: str
) -> tuple[dict[str, NormMode], dict[str, dict[str, Tensor]]]:
    """Modes (from config.json) and stats (from the normalize_inputs / unnormalize_outputs buffers) per feature."""
    mapping = config_data.get("normalization_mapping") or {}
    modes: dict[str, NormMode] = {}
    stats: dict[str, dict[str, Tensor]] = {}
    for key, kind in lerobot_types.items():
        mode = modes[key] = _norm_mode_from_lerobot(mapping.get(kind, "IDENTITY"), key, source)
        prefix = LEGACY_OUTPUT_PREFIX if kind == "ACTION" else LEGACY_INPUT_PREFIX
        for name in STAT_NAMES.get(mode, ()):
            buffer_name = f"{prefix}buffer_{key.replace('.', '_')}.{name}"
            value = buffers.get(buffer_name)
            if value is None or not torch.isfinite(value).all():
                raise LeRobotConversionError(
                    f"{source}: model.safetensors has no usable {buffer_name!r} ({'missing' if value is None else 'not set'}"
                    f"): this older LeRobot checkpoint lacks the {mode.value} stats of {key!r}"
                )
            stats.setdefault(key, {})[name] = value
    return modes, stats


def _processor_normalization(
    lerobot_types: dict[str, str], resolve: Callable[[str], Path], source: str
) -> tuple[dict[str, NormMode], dict[str, dict[str, Tensor]]]:
    """Modes and stats per feature from the pre- (inputs) and post-processor (actions) files of LeRobot >= 0.4."""
    modes: dict[str, NormMode] = {}
    stats: dict[str, dict[str, Tensor]] = {}
    for filename, step_name, keys in (
        (PREPROCESSOR_FILE, NORMALIZER_STEP, [k for k, t in lerobot_types.items() if t != "ACTION"]),
        (POSTPROCESSOR_FILE, UNNORMALIZER_STEP, [k for k, t in lerobot_types.items() if t == "ACTION"]),
    ):
        path = resolve(filename)
        try:
            step = _normalizer_step(path, filename, step_name)
            step_config = step.get("config", {})
            eps = float(step_config.get("eps", EPS))
            if eps > 1e-6:
                raise LeRobotConversionError(
                    f"{path}: {step_name} eps={eps} differs from hfpolicy's {EPS} enough to change the actions"
                )
            norm_map, normalized = step_config.get("norm_map", {}), step_config.get("features", {})
            state_file = step.get("state_file")
            if state_file is not None and not isinstance(state_file, str):
                raise TypeError(f"state_file is {state_file!r}, not a file name")
            state = read_weights(resolve(state_file))[0] if state_file else {}
            for key in keys:
                name = norm_map.get(lerobot_types[key], "IDENTITY") if key in normalized else "IDENTITY"
                mode = modes[key] = _norm_mode_from_lerobot(name, key, source)
                if mode == NormMode.IDENTITY:
                    continue
                missing = [s for s in STAT_NAMES[mode] if f"{key}.{s}" not in state]
                if missing:
                    raise LeRobotConversionError(
                        f"{source}: {state_file} lacks {[f'{key}.{s}' for s in missing]} ({mode.value} stats)"
                    )
                stats[key] = {s: state[f"{key}.{s}"] for s in STAT_NAMES[mode]}
                bad = [s for s, value in stats[key].items() if not torch.isfinite(value).all()]
                if bad:
                    raise LeRobotConversionError(
                        f"{source}: {state_file} holds NaN or inf in {[f'{key}.{s}' for s in bad]} ({mode.value} stats): "
                        "the file is damaged or the stats were computed from bad data; re-export or re-download it"
                    )
        except (AttributeError, TypeError, ValueError, KeyError) as e:  # a field of the wrong type or shape
            raise LeRobotConversionError(f"{path} is not a LeRobot processor pipeline ({type(e).__name__}: {e})") from e
    return modes, stats


def _normalizer_step(path: Path, filename: str, step_name: str) -> dict[str, Any]:
    """The step `step_name` of a processor file, refusing steps that would change what the policy sees."""
    step = None
    for entry in list(json.loads(path.read_text())["steps"]):
        name = entry.get("registry_name")
        if name == step_name and step is None:
            step = entry
        elif name == "rename_observations_processor" and entry.get("config", {}).get("rename_map"):
            warn_ignored(
                f"{filename} renames observations {entry['config']['rename_map']}; hfpolicy's policy takes the "
                "renamed keys (its input features) directly"
            )
        elif name not in PASSIVE_STEPS:
            raise LeRobotConversionError(
                f"{path} has a processor step {name!r} that hfpolicy does not reproduce (it may change what the "
                f"policy sees or outputs); hfpolicy converts pipelines of {', '.join(PASSIVE_STEPS)}, "
                f"{NORMALIZER_STEP} and {UNNORMALIZER_STEP}"
            )
    if step is None:
        raise LeRobotConversionError(f"{path} has no {step_name!r} step, so the normalization is unknown")
    return step


def normalization_mapping_from_lerobot(
    config_data: Mapping[str, Any], features: dict[str, PolicyFeature], modes: dict[str, NormMode]
) -> dict[str, NormMode]:
    """hfpolicy's normalization_mapping: LeRobot's mode of each type, plus an entry per feature key whose mode differs
    from its type's (ENV features, features the processor skips)."""
    lerobot_mapping = config_data.get("normalization_mapping") or {}
    mapping: dict[str, NormMode] = {}
    for lerobot_type, hf_type in HFPOLICY_TYPE_OF_LEROBOT_TYPE.items():
        if lerobot_mapping.get(lerobot_type) in NORM_MODES_FROM_LEROBOT:
            mapping[hf_type] = NORM_MODES_FROM_LEROBOT[lerobot_mapping[lerobot_type]]
    for key, feature in features.items():
        if feature_norm_mode(mapping, key, feature) != modes[key]:
            mapping[key] = modes[key]
    return mapping


def lerobot_feature_type(key: str, feature: PolicyFeature) -> str:
    """LeRobot's type of a feature: the environment state is ENV, other states STATE."""
    if feature.type == FeatureType.IMAGE:
        return "VISUAL"
    if feature.type == FeatureType.ACTION:
        return "ACTION"
    return "ENV" if key == OBS_ENV_STATE else "STATE"


def lerobot_normalization(config: PolicyConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(LeRobot type of each feature, LeRobot's normalization_mapping). LeRobot normalizes per type, so the features of
    one LeRobot type must share a mode."""
    features = {**config.input_features, **config.output_features}
    lerobot_types = {key: lerobot_feature_type(key, f) for key, f in features.items()}
    mapping = {  # types absent from the features too
        lerobot_type: NormMode(config.normalization_mapping.get(hf_type, NormMode.IDENTITY)).name
        for lerobot_type, hf_type in HFPOLICY_TYPE_OF_LEROBOT_TYPE.items()
    }
    for lerobot_type in dict.fromkeys(lerobot_types.values()):
        keys = [k for k, t in lerobot_types.items() if t == lerobot_type]
        names = {config.norm_mode(features[k], k).name for k in keys}
        if len(names) > 1:
            raise LeRobotConversionError(
                f"features {keys} are all LeRobot type {lerobot_type} but use different normalizations {sorted(names)}; "
                "LeRobot normalizes per type: give them one mode in normalization_mapping"
            )
        mapping[lerobot_type] = names.pop()
    return lerobot_types, mapping


def lerobot_config(config: PolicyConfig) -> dict[str, Any]:
    """LeRobot's config.json for an hfpolicy config (LeRobot's common fields, then the type's own)."""
    lerobot_types, mapping = lerobot_normalization(config)

    def features(group: dict[str, PolicyFeature]) -> dict[str, Any]:
        return {k: {"type": lerobot_types[k], "shape": list(f.shape)} for k, f in group.items()}

    data: dict[str, Any] = {
        "type": config.type,
        "n_obs_steps": config.n_obs_steps,
        "input_features": features(config.input_features),
        "output_features": features(config.output_features),
        "device": "cpu",
        **dict.fromkeys(("use_amp", "use_peft", "push_to_hub"), False),
        **dict.fromkeys(("repo_id", "private", "tags", "license", "pretrained_path", "pretrained_revision")),
        "normalization_mapping": mapping,
    }
    data.update(policy_module(config.type).config_to_lerobot(config))
    return data


def write_lerobot_checkpoint(policy: PolicyModule, folder: str | Path) -> list[Path]:
    """Writes `policy` into the existing `folder` as LeRobot's save_pretrained would and returns the files written;
    LeRobotConversionError before writing anything when LeRobot cannot express the policy."""
    folder = Path(folder)
    config = policy.config
    module = policy_module(config.type)
    data = lerobot_config(config)
    weights = {k: v.detach().cpu() for k, v in policy.state_dict().items() if not k.startswith("normalizer.")}
    lerobot_weights = {k: v.contiguous() for k, v in module.state_dict_to_lerobot(weights, config).items()}

    stats: dict[str, Tensor] = {}
    for module_stats in policy.normalizer.feature_stats():
        for name in STAT_NAMES[module_stats.mode]:
            stats[f"{module_stats.key}.{name}"] = getattr(module_stats, name).detach().cpu().contiguous()
    features = {**data["input_features"], **data["output_features"]}
    pre_state = "policy_preprocessor_step_3_normalizer_processor.safetensors"
    post_state = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    device = {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}

    def normalizer(step_name: str, step_features: dict[str, Any], state_file: str) -> dict[str, Any]:
        step_config = {"eps": EPS, "norm_map": data["normalization_mapping"], "features": step_features}
        return {"registry_name": step_name, "config": step_config, "state_file": state_file}

    preprocessor_steps = [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        device,
        normalizer(NORMALIZER_STEP, features, pre_state),
    ]
    postprocessor_steps = [normalizer(UNNORMALIZER_STEP, data["output_features"], post_state), device]
    return [
        write_json_atomically(folder / CONFIG_FILE, data, indent=4),
        write_json_atomically(folder / PREPROCESSOR_FILE, {"name": "policy_preprocessor", "steps": preprocessor_steps}),
        write_json_atomically(
            folder / POSTPROCESSOR_FILE, {"name": "policy_postprocessor", "steps": postprocessor_steps}
        ),
        save_safetensors_atomically(lerobot_weights, folder / WEIGHTS_FILE),
        save_safetensors_atomically(stats, folder / pre_state),  # LeRobot saves every feature's stats in both files
        save_safetensors_atomically(stats, folder / post_state),
    ]
