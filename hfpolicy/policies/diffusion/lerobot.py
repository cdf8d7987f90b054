"""Diffusion Policy to and from LeRobot (0.4 to 0.6): the four functions of `hfpolicy.policies.lerobot_format`. The
networks are the same; module names differ (UNET_RENAMES), LeRobot saves the keypoint grid `pos_grid` that hfpolicy
recomputes, and the conditioning's order differs (LeRobot: observation.state, the cameras, then the environment state;
hfpolicy: the states in input order, then the cameras), so the FiLM layers' input columns are permuted. LeRobot's
final U-Net block always has 8 GroupNorm groups, so n_groups must be 8."""

import math
from typing import Any

import torch
from torch import Tensor

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.policies.config import PolicyFeature
from hfpolicy.policies.diffusion.configuration import DiffusionConfig
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import check_lerobot_fields, lerobot_model_inputs

LEROBOT_PREFIX = "diffusion."
LEROBOT_FINAL_BLOCK_GROUPS = 8  # LeRobot builds the U-Net's final conv block with GroupNorm(8, ...) whatever n_groups

# LeRobot fields with the same name and meaning in DiffusionConfig.
SAME_FIELDS = (
    "n_obs_steps",
    "horizon",
    "n_action_steps",
    "vision_backbone",
    "resize_shape",
    "crop_is_random",
    "use_group_norm",
    "spatial_softmax_num_keypoints",
    "use_separate_rgb_encoder_per_camera",
    "down_dims",
    "kernel_size",
    "n_groups",
    "diffusion_step_embed_dim",
    "use_film_scale_modulation",
    "noise_scheduler_type",
    "num_train_timesteps",
    "beta_schedule",
    "beta_start",
    "beta_end",
    "prediction_type",
    "clip_sample",
    "clip_sample_range",
    "num_inference_steps",
    "optimizer_lr",
    "optimizer_betas",
    "optimizer_eps",
    "optimizer_weight_decay",
    "scheduler_name",
    "scheduler_warmup_steps",
)
# LeRobot fields mapped by hand below; pretrained_backbone_weights is not carried over (the checkpoint has the weights).
HANDLED_FIELDS = (
    "crop_shape",
    "crop_ratio",
    "drop_n_last_frames",
    "do_mask_loss_for_padding",
    "pretrained_backbone_weights",
)
# LeRobot fields that do not change the actions: ignored, with a warning when they are not at LeRobot's default.
IGNORED_FIELDS = {
    "gradient_checkpointing": False,  # training memory only
    "compile_model": False,  # speed only
    "compile_mode": "reduce-overhead",
    "use_amp": False,  # LeRobot's autocast when training/evaluating; hfpolicy acts in float32
}


def config_from_lerobot(
    lerobot_config: dict[str, Any],
    input_features: dict[str, PolicyFeature],
    output_features: dict[str, PolicyFeature],
) -> DiffusionConfig:
    """DiffusionConfig from LeRobot's diffusion config.json dict (features already converted)."""
    check_lerobot_fields(lerobot_config, "diffusion", (*SAME_FIELDS, *HANDLED_FIELDS), IGNORED_FIELDS)
    if lerobot_config.get("n_groups", LEROBOT_FINAL_BLOCK_GROUPS) != LEROBOT_FINAL_BLOCK_GROUPS:
        raise LeRobotConversionError(
            f"n_groups={lerobot_config['n_groups']}: LeRobot's U-Net then normalizes its final block with "
            f"{LEROBOT_FINAL_BLOCK_GROUPS} groups and the others with {lerobot_config['n_groups']}, which hfpolicy's "
            "U-Net (one n_groups everywhere) cannot reproduce"
        )

    inputs = lerobot_model_inputs(input_features, "Diffusion Policy")
    if OBS_STATE not in inputs:
        raise LeRobotConversionError(f"LeRobot's Diffusion Policy needs an {OBS_STATE!r} input feature (type STATE)")

    fields = {name: lerobot_config[name] for name in SAME_FIELDS if name in lerobot_config}
    for name in ("resize_shape", "down_dims", "optimizer_betas"):
        if fields.get(name) is not None:
            fields[name] = tuple(fields[name])
    crop_shape = lerobot_config.get("crop_shape")
    crop_ratio = float(lerobot_config.get("crop_ratio", 1.0))
    if fields.get("resize_shape") is not None:  # LeRobot derives the crop from the resize shape and crop_ratio
        height, width = fields["resize_shape"]
        crop_shape = (int(height * crop_ratio), int(width * crop_ratio)) if crop_ratio < 1.0 else None
    fields["crop_shape"] = tuple(crop_shape) if crop_shape is not None else None
    fields["mask_loss_for_padding"] = bool(lerobot_config.get("do_mask_loss_for_padding", False))
    fields["pretrained_backbone_weights"] = None  # the checkpoint has the backbone's weights
    fields["use_ema"] = False  # LeRobot trains and saves without an EMA: fine-tuning keeps its recipe
    config = DiffusionConfig(input_features=inputs, output_features=dict(output_features), **fields)
    if "drop_n_last_frames" in lerobot_config and lerobot_config["drop_n_last_frames"] != config.drop_n_last_frames:
        config.drop_last_frames = int(lerobot_config["drop_n_last_frames"])
    return config


def state_dict_from_lerobot(state_dict: dict[str, Tensor], config: DiffusionConfig) -> dict[str, Tensor]:
    """LeRobot's DiffusionPolicy weights -> DiffusionPolicy's (without the normalizer's buffers)."""
    converted = {}
    for key, value in state_dict.items():
        if not key.startswith(LEROBOT_PREFIX):
            raise LeRobotConversionError(f"unexpected weight {key!r} in a LeRobot diffusion checkpoint")
        name = _hfpolicy_name(key.removeprefix(LEROBOT_PREFIX), config)
        if name is not None:
            converted[name] = value
    order = _conditioning_order(config)
    return {k: v[:, order] if k.endswith("film.weight") else v for k, v in converted.items()}


def _hfpolicy_name(key: str, config: DiffusionConfig) -> str | None:
    if key.startswith("unet."):
        for lerobot_part, hfpolicy_part in UNET_RENAMES:
            key = key.replace(lerobot_part, hfpolicy_part)
        return key
    if key.startswith("rgb_encoder."):
        if key.endswith(".pool.pos_grid"):
            return None  # the keypoint coordinate grid: recomputed by hfpolicy
        key = key.replace(".pool.nets.", ".pool.keypoint_conv.")
        if config.use_separate_rgb_encoder_per_camera:
            return "rgb_encoders." + key.removeprefix("rgb_encoder.")
        return key
    raise LeRobotConversionError(f"unexpected weight 'diffusion.{key}' in a LeRobot diffusion checkpoint")


UNET_RENAMES = (  # (LeRobot, hfpolicy) name parts of the U-Net, applied in this order
    ("unet.diffusion_step_encoder.", "unet.step_encoder."),
    ("unet.down_modules.", "unet.down."),
    ("unet.mid_modules.", "unet.mid."),
    ("unet.up_modules.", "unet.up."),
    ("unet.final_conv.0.block.", "unet.final.0."),
    ("unet.final_conv.1.", "unet.final.1."),
    (".conv1.block.", ".conv1."),
    (".conv2.block.", ".conv2."),
    (".cond_encoder.1.", ".film."),
    (".residual_conv.", ".residual."),
)


def _conditioning_order(config: DiffusionConfig) -> Tensor:
    """Index of the LeRobot FiLM input column that feeds each hfpolicy column: hfpolicy_weight = lerobot_weight[:, i].
    FiLM input = [diffusion-step embedding, then per observation step the features]."""
    image_width = 2 * config.spatial_softmax_num_keypoints
    widths = {key: f.shape[0] for key, f in config.state_features.items()}
    widths.update({key: image_width for key in config.image_features})
    hfpolicy_order = [*config.state_features, *config.image_features]
    lerobot_order = [OBS_STATE, *config.image_features, *([OBS_ENV_STATE] if OBS_ENV_STATE in widths else [])]
    offsets, start = {}, 0
    for key in lerobot_order:
        offsets[key], start = start, start + widths[key]
    per_step = [offsets[key] + i for key in hfpolicy_order for i in range(widths[key])]
    step_dim, width = config.diffusion_step_embed_dim, start
    columns = list(range(step_dim))
    for t in range(config.n_obs_steps):
        columns += [step_dim + t * width + c for c in per_step]
    return torch.tensor(columns)


def config_to_lerobot(config: DiffusionConfig) -> dict[str, Any]:
    """LeRobot's diffusion config.json fields (besides the common ones lerobot_format writes)."""
    if config.n_groups != LEROBOT_FINAL_BLOCK_GROUPS:
        raise LeRobotConversionError(
            f"n_groups={config.n_groups}: LeRobot's U-Net always normalizes its final block with "
            f"{LEROBOT_FINAL_BLOCK_GROUPS} groups, so it would act differently; export policies with n_groups=8"
        )
    others = sorted(set(config.state_features) - {OBS_STATE, OBS_ENV_STATE})
    if OBS_STATE not in config.input_features or others:
        raise LeRobotConversionError(
            f"LeRobot's Diffusion Policy conditions on {OBS_STATE!r} (required), {OBS_ENV_STATE!r} and images only; "
            f"this policy's state inputs are {list(config.state_features)}"
        )
    shapes = {tuple(f.shape) for f in config.image_features.values()}
    if len(shapes) > 1:
        raise LeRobotConversionError(f"LeRobot's Diffusion Policy needs all cameras of one shape, got {sorted(shapes)}")
    if config.horizon % 2 ** len(config.down_dims):
        raise LeRobotConversionError(
            f"LeRobot 0.6 requires horizon to be a multiple of 2 ** len(down_dims) = {2 ** len(config.down_dims)}; "
            f"horizon is {config.horizon}"
        )
    fields = {name: getattr(config, name) for name in SAME_FIELDS}
    for name in ("resize_shape", "down_dims", "optimizer_betas"):
        if fields[name] is not None:
            fields[name] = list(fields[name])
    fields["crop_shape"] = list(config.crop_shape) if config.crop_shape is not None else None
    fields["crop_ratio"] = 1.0
    if config.resize_shape is not None:  # LeRobot derives the crop from crop_ratio when it resizes
        fields["crop_ratio"] = _crop_ratio(config.resize_shape, config.crop_shape)
        fields["crop_shape"] = None if fields["crop_ratio"] == 1.0 else fields["crop_shape"]
    fields.update(
        drop_n_last_frames=config.drop_n_last_frames,
        pretrained_backbone_weights=None,  # the weights are in model.safetensors
        do_mask_loss_for_padding=config.mask_loss_for_padding,
        gradient_checkpointing=False,
        compile_model=False,
        compile_mode="reduce-overhead",
    )
    return fields


def _crop_ratio(resize_shape: tuple[int, int], crop_shape: tuple[int, int] | None) -> float:
    """LeRobot's crop_ratio r with (int(H * r), int(W * r)) == crop_shape for a resized (H, W) image."""
    height, width = resize_shape
    if crop_shape is None or tuple(crop_shape) == (height, width):
        return 1.0
    crop_h, crop_w = crop_shape
    for ratio in (crop_h / height, crop_w / width, (crop_h + 0.5) / height, (crop_w + 0.5) / width):
        if ratio < 1.0 and (int(height * ratio), int(width * ratio)) == (crop_h, crop_w):
            return ratio
    raise LeRobotConversionError(
        f"crop_shape={tuple(crop_shape)} after resize_shape={tuple(resize_shape)}: LeRobot expresses the crop as one "
        "ratio of the resized size (crop_ratio), and no ratio gives this crop; use a crop proportional to resize_shape"
    )


def state_dict_to_lerobot(state_dict: dict[str, Tensor], config: DiffusionConfig) -> dict[str, Tensor]:
    """DiffusionPolicy's weights (without normalizer.*) -> LeRobot's DiffusionPolicy state dict, pos_grid included."""
    inverse = torch.argsort(_conditioning_order(config))
    converted = {}
    for key, value in state_dict.items():
        if key.endswith("film.weight"):
            value = value[:, inverse]
        if key.startswith("unet."):
            for lerobot_part, hfpolicy_part in UNET_RENAMES:
                key = key.replace(hfpolicy_part, lerobot_part)
        elif key.startswith(("rgb_encoders.", "rgb_encoder.")):
            key = "rgb_encoder." + key.split(".", 1)[1] if key.startswith("rgb_encoders.") else key
            key = key.replace(".pool.keypoint_conv.", ".pool.nets.")
        else:
            raise LeRobotConversionError(f"DiffusionPolicy weight {key!r} has no LeRobot counterpart")
        converted[LEROBOT_PREFIX + key] = value
    for key in [key for key in converted if key.endswith(".pool.nets.weight")]:  # each keypoint layer's grid
        converted[key.removesuffix("nets.weight") + "pos_grid"] = _keypoint_grid(config)
    return converted


def _keypoint_grid(config: DiffusionConfig) -> Tensor:
    """LeRobot's `pos_grid` buffer: (x, y) in [-1, 1] of every feature map cell, computed in float64 as LeRobot's."""
    image_shape = next(iter(config.image_features.values())).shape
    height, width = config.crop_shape or config.resize_shape or image_shape[1:]
    for _ in range(5):  # every torchvision ResNet halves the size 5 times: stem conv, max-pool, layers 2-4
        height, width = math.floor((height - 1) / 2) + 1, math.floor((width - 1) / 2) + 1
    ys, xs = torch.meshgrid(
        torch.linspace(-1, 1, height, dtype=torch.float64),
        torch.linspace(-1, 1, width, dtype=torch.float64),
        indexing="ij",
    )
    return torch.stack([xs.flatten(), ys.flatten()], dim=-1).float()
