"""ACT to and from LeRobot (0.4 to 0.6): the four functions of `hfpolicy.policies.lerobot_format`. The networks are the
same; module names differ (LeRobot's `model.encoder_robot_state_input_proj` is `state_proj`, ...), and the CVAE's
fixed positions LeRobot saves (`model.vae_encoder_pos_enc`) are recomputed by hfpolicy, checked on loading."""

import re
from typing import Any

import torch
from torch import Tensor

from hfpolicy.policies.act.configuration import ACTConfig
from hfpolicy.policies.act.modeling import sinusoidal_positions_1d
from hfpolicy.policies.config import PolicyFeature
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import check_lerobot_fields, lerobot_model_inputs

# LeRobot ACTConfig fields that are ACTConfig fields of the same name and meaning.
SHARED_FIELDS = (
    "n_obs_steps",
    "chunk_size",
    "n_action_steps",
    "vision_backbone",
    "pretrained_backbone_weights",
    "replace_final_stride_with_dilation",
    "pre_norm",
    "dim_model",
    "n_heads",
    "dim_feedforward",
    "feedforward_activation",
    "n_encoder_layers",
    "n_decoder_layers",
    "use_vae",
    "latent_dim",
    "n_vae_encoder_layers",
    "temporal_ensemble_coeff",
    "dropout",
    "kl_weight",
    "optimizer_lr",
    "optimizer_weight_decay",
    "optimizer_lr_backbone",
)
IGNORED_FIELDS = {"use_amp": False}  # LeRobot's autocast; hfpolicy acts in float32

# (LeRobot name prefix, hfpolicy name prefix), most specific first; applied to whole dotted components.
_TOP_LEVEL = (
    ("model.vae_encoder_cls_embed.weight", "cvae.cls_token"),
    ("model.vae_encoder_robot_state_input_proj.", "cvae.state_proj."),
    ("model.vae_encoder_action_input_proj.", "cvae.action_proj."),
    ("model.vae_encoder_latent_output_proj.", "cvae.latent_head."),
    ("model.vae_encoder.", "cvae.encoder."),
    ("model.backbone.", "backbone."),
    ("model.encoder_img_feat_input_proj.", "image_proj."),
    ("model.encoder_latent_input_proj.", "latent_proj."),
    ("model.encoder_robot_state_input_proj.", "state_proj."),
    ("model.encoder_env_state_input_proj.", "env_state_proj."),
    ("model.encoder_1d_feature_pos_embed.", "token_positions."),
    ("model.decoder_pos_embed.", "query_positions."),
    ("model.action_head.", "action_head."),
    ("model.encoder.", "encoder."),
    ("model.decoder.", "decoder."),
)
_ENCODER_LAYER = {"linear1": "ff_in", "linear2": "ff_out", "norm1": "norm_attn", "norm2": "norm_ff"}
_DECODER_LAYER = {
    "multihead_attn": "cross_attn",
    "linear1": "ff_in",
    "linear2": "ff_out",
    "norm1": "norm_self_attn",
    "norm2": "norm_cross_attn",
    "norm3": "norm_ff",
}
_LAYER = re.compile(r"^(cvae\.encoder|encoder|decoder)\.layers\.(\d+)\.([a-z_0-9]+)\.(.+)$")
VAE_POSITIONS_KEY = "model.vae_encoder_pos_enc"


def config_from_lerobot(
    lerobot_config: dict[str, Any],
    input_features: dict[str, PolicyFeature],
    output_features: dict[str, PolicyFeature],
) -> ACTConfig:
    """ACTConfig from LeRobot's ACT config.json dict (features already converted)."""
    check_lerobot_fields(lerobot_config, "ACT", SHARED_FIELDS, IGNORED_FIELDS)
    inputs = lerobot_model_inputs(input_features, "ACT")
    fields = {name: lerobot_config[name] for name in SHARED_FIELDS if name in lerobot_config}
    fields["pretrained_backbone_weights"] = None  # the checkpoint holds them (downloading them fails offline)
    fields["replace_final_stride_with_dilation"] = bool(fields.get("replace_final_stride_with_dilation", False))
    return ACTConfig(input_features=inputs, output_features=dict(output_features), **fields)


def config_to_lerobot(config: ACTConfig) -> dict[str, Any]:
    """LeRobot's ACT config.json fields (besides the common ones lerobot_format writes)."""
    fields = {name: getattr(config, name) for name in SHARED_FIELDS}
    fields.update(pretrained_backbone_weights=None, use_amp=False)  # the weights are in model.safetensors
    return fields


def _rename_from_lerobot(name: str) -> str:
    for old, new in _TOP_LEVEL:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    else:
        raise KeyError(name)
    match = _LAYER.match(name)
    if match:
        stack, index, layer_part, rest = match.groups()
        table = _DECODER_LAYER if stack == "decoder" else _ENCODER_LAYER
        name = f"{stack}.layers.{index}.{table.get(layer_part, layer_part)}.{rest}"
    return name


def _rename_to_lerobot(name: str) -> str:
    match = _LAYER.match(name)
    if match:
        stack, index, layer_part, rest = match.groups()
        table = _DECODER_LAYER if stack == "decoder" else _ENCODER_LAYER
        inverse = {new: old for old, new in table.items()}
        name = f"{stack}.layers.{index}.{inverse.get(layer_part, layer_part)}.{rest}"
    for old, new in _TOP_LEVEL:
        if name.startswith(new):
            return old + name[len(new) :]
    raise KeyError(name)


def state_dict_from_lerobot(state_dict: dict[str, Tensor], config: ACTConfig) -> dict[str, Tensor]:
    """LeRobot ACT weights renamed to ACTPolicy's; the CVAE positions LeRobot saves must be hfpolicy's."""
    renamed, unknown = {}, []
    for name, value in state_dict.items():
        if name == VAE_POSITIONS_KEY:
            expected = sinusoidal_positions_1d(value.shape[1], config.dim_model).unsqueeze(0)
            if value.shape != expected.shape or not torch.allclose(value.float(), expected, atol=1e-6):
                raise LeRobotConversionError(
                    f"{VAE_POSITIONS_KEY} of shape {tuple(value.shape)} is not the sinusoidal table hfpolicy computes "
                    f"for dim_model={config.dim_model}: the checkpoint does not come from a LeRobot ACT it can load"
                )
            continue
        try:
            renamed[_rename_from_lerobot(name)] = value
        except KeyError:
            unknown.append(name)
    if unknown:
        raise LeRobotConversionError(
            f"the LeRobot checkpoint has weights that are not LeRobot ACT weights: {sorted(unknown)}"
        )
    return renamed


def state_dict_to_lerobot(state_dict: dict[str, Tensor], config: ACTConfig) -> dict[str, Tensor]:
    """ACTPolicy weights under LeRobot ACT's names, with the CVAE positions LeRobot saves."""
    converted = {_rename_to_lerobot(name): value for name, value in state_dict.items()}
    if config.use_vae:
        n_tokens = 1 + int(any(k.startswith("cvae.state_proj.") for k in state_dict)) + config.chunk_size
        converted[VAE_POSITIONS_KEY] = sinusoidal_positions_1d(n_tokens, config.dim_model).unsqueeze(0)
    return converted
