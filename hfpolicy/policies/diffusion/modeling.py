"""Diffusion Policy (Chi et al., 2023), CNN variant: a 1D conditional U-Net denoises a horizon of actions, conditioned
through FiLM on the diffusion step and on the observation history (state vectors and, per camera, ResNet spatial-softmax
keypoints), flattened. Everything here sees normalized data."""

import dataclasses
import math
from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812
import torchvision
import torchvision.transforms.functional as TF  # noqa: N812
from diffusers.schedulers.scheduling_ddim import DDIMScheduler
from diffusers.schedulers.scheduling_ddpm import DDPMScheduler
from diffusers.utils.torch_utils import randn_tensor
from torch import Tensor, nn
from torchvision.transforms import InterpolationMode

from hfpolicy.constants import ACTION, pad_key
from hfpolicy.policies.base import NoiseSource, Policy, masked_mean
from hfpolicy.policies.diffusion.configuration import DiffusionConfig
from hfpolicy.policies.diffusion.cpu_kernels import set_acting_dtype, set_cpu_kernels, use_cpu_matmul_convolutions


class DiffusionPolicy(Policy):
    """Diffusion Policy for image or state-only inputs (which one follows from the input features)."""

    config_class = DiffusionConfig

    def __init__(self, config: DiffusionConfig, dataset_stats: dict | None = None):
        super().__init__(config, dataset_stats)
        self.config: DiffusionConfig = config
        self.image_keys = list(config.image_features)
        self.state_keys = list(config.state_features)
        self.action_dim = config.action_feature.shape[0]

        shapes = [config.image_features[key].shape for key in self.image_keys]
        if shapes and config.use_separate_rgb_encoder_per_camera:
            self.rgb_encoders = nn.ModuleList(RgbEncoder(config, shape) for shape in shapes)
        elif shapes:  # one encoder for every camera (of one shape)
            self.rgb_encoder = RgbEncoder(config, shapes[0])
        feature_dim = 2 * config.spatial_softmax_num_keypoints * len(shapes)  # each camera's keypoints
        feature_dim += sum(config.state_features[key].shape[0] for key in self.state_keys)
        self.global_cond_dim = feature_dim * config.n_obs_steps
        self.unet = use_cpu_matmul_convolutions(ConditionalUnet1d(config, self.action_dim, self.global_cond_dim))
        # A policy converted from LeRobot rounds as LeRobot's (torch's kernels); others measure (see cpu_kernels).
        self.set_cpu_kernels("torch" if config.converted_from else "auto")
        self.acting_dtype = "float32"

        self.noise_scheduler = make_noise_scheduler("DDPM", config)  # the forward (noising) process of training
        self.sampler = make_noise_scheduler(config.noise_scheduler_type, config)  # the reverse process when acting

    def set_cpu_kernels(self, choice: str) -> None:
        """Which CPU kernels the convolutions run from now on: "auto", "matmul", "onednn" or "torch" (see cpu_kernels);
        the actions agree up to float rounding."""
        set_cpu_kernels(self.unet, choice)
        self.cpu_kernels = choice
        for encoder in self.modules():
            if isinstance(encoder, RgbEncoder):
                encoder.set_memory_format(torch.contiguous_format if choice == "torch" else torch.channels_last)

    def set_acting_dtype(self, dtype: str, force: bool = False) -> None:
        """With "bfloat16" the U-Net's convolutions act on CPU with bf16 weights (faster; the actions move slightly,
        docs/speed.md), refused on a CPU without native bf16 unless `force`; "float32" undoes it."""
        set_acting_dtype(self.unet, dtype, force)
        self.acting_dtype = dtype

    def set_sampler(self, noise_scheduler_type: str, num_inference_steps: int | None = None) -> None:
        """Acts with another sampler from now on, e.g. `set_sampler("DDIM", 10)`; the config records it."""
        self.config = dataclasses.replace(
            self.config, noise_scheduler_type=noise_scheduler_type, num_inference_steps=num_inference_steps
        )
        self.sampler = make_noise_scheduler(noise_scheduler_type, self.config)

    def encode_observations(self, observation: dict[str, Tensor], random_crop: bool = False) -> Tensor:
        """Global conditioning (B, global_cond_dim) from normalized observations with a time dim (B, n_obs_steps, ...)."""
        n_obs = self.config.n_obs_steps
        for key in [*self.state_keys, *self.image_keys]:
            shape = tuple(observation[key].shape)
            expected = tuple(self.config.input_features[key].shape)
            if len(shape) != len(expected) + 2 or shape[1] != n_obs or shape[2:] != expected:
                raise ValueError(
                    f"{key!r} has shape {shape}; Diffusion Policy needs (batch, n_obs_steps={n_obs}, *{expected}): "
                    f"build training windows with config.delta_timestamps(fps) and act through select_action"
                )
        features = [observation[key] for key in self.state_keys]
        if self.image_keys:
            batch_size = observation[self.image_keys[0]].shape[0]
            if self.config.use_separate_rgb_encoder_per_camera:
                for key, encoder in zip(self.image_keys, self.rgb_encoders, strict=True):
                    encoded = encoder(observation[key].flatten(0, 1), random_crop=random_crop)
                    features.append(encoded.unflatten(0, (batch_size, n_obs)))
            else:  # all cameras through the one encoder as one batch
                images = torch.stack([observation[key] for key in self.image_keys], dim=2)  # (B, T, cams, C, H, W)
                encoded = self.rgb_encoder(images.flatten(0, 2), random_crop=random_crop)
                features.append(encoded.unflatten(0, (batch_size, n_obs, len(self.image_keys))).flatten(2))
        return torch.cat(features, dim=-1).flatten(1)

    def compute_loss(
        self, batch: dict[str, Tensor], noise: Tensor | None = None, timesteps: Tensor | None = None
    ) -> dict[str, Tensor]:
        """MSE between the U-Net's prediction and its target (the noise, or the actions for prediction_type "sample")
        over the unpadded actions. `noise` (B, horizon, A) and `timesteps` (B,) default to random."""
        actions = batch[ACTION]
        expected = (self.config.horizon, self.action_dim)
        if actions.ndim != 3 or tuple(actions.shape[1:]) != expected:
            raise ValueError(
                f"{ACTION!r} has shape {tuple(actions.shape)}; Diffusion Policy trains on (batch, horizon, action_dim) = "
                f"(batch, *{expected}): build the dataset with delta_timestamps=config.delta_timestamps(fps)"
            )
        random_crop = self.training and self.config.crop_is_random
        global_cond = self.encode_observations(batch, random_crop=random_crop)
        if noise is None:
            noise = torch.randn_like(actions)
        if timesteps is None:
            timesteps = torch.randint(self.config.num_train_timesteps, (actions.shape[0],), device=actions.device)
        # diffusers annotates timesteps as the legacy torch.IntTensor; it takes any integer tensor (these are long)
        noisy_actions = self.noise_scheduler.add_noise(actions, noise, timesteps)  # type: ignore[arg-type]
        prediction = self.unet(noisy_actions, timesteps, global_cond)
        target = noise if self.config.prediction_type == "epsilon" else actions
        is_pad = batch.get(pad_key(ACTION)) if self.config.mask_loss_for_padding else None
        return {"loss": masked_mean(F.mse_loss(prediction, target, reduction="none"), is_pad)}

    def generate_actions(
        self, observation: dict[str, Tensor], generator: NoiseSource = None, noise: Tensor | None = None
    ) -> Tensor:
        """Denoises a horizon of actions from `noise` (B, horizon, A), else from noise drawn from `generator` (as is the
        DDPM sampler's per-step noise), and returns the executed part (B, n_action_steps, A)."""
        global_cond = self.encode_observations(observation, random_crop=False)
        batch_size = global_cond.shape[0]
        shape = (batch_size, self.config.horizon, self.action_dim)
        if noise is not None:
            if tuple(noise.shape) != shape:
                raise ValueError(
                    f"noise has shape {tuple(noise.shape)}; expected (batch, horizon, action_dim) = {shape}"
                )
            sample = noise.to(device=global_cond.device, dtype=global_cond.dtype)
        else:
            sample = randn_tensor(shape, generator=generator, device=global_cond.device, dtype=global_cond.dtype)
        self.sampler.set_timesteps(self.config.inference_steps)
        for t in self.sampler.timesteps.tolist():
            timesteps = torch.full((batch_size,), t, dtype=torch.long, device=sample.device)
            prediction = self.unet(sample, timesteps, global_cond)
            # diffusers: a list of generators (one per row) works (randn_tensor takes it), though `step` annotates one;
            # with return_dict=True (the default) it returns the output class, never the tuple
            step = self.sampler.step(prediction, t, sample, generator=generator)  # type: ignore[arg-type]
            sample = step.prev_sample  # type: ignore[union-attr]
        start = self.config.n_obs_steps - 1
        return sample[:, start : start + self.config.n_action_steps]


def make_noise_scheduler(kind: str, config: DiffusionConfig) -> DDPMScheduler | DDIMScheduler:
    """A diffusers scheduler, "DDPM" or "DDIM", with the config's noise schedule."""
    kwargs = dict(
        num_train_timesteps=config.num_train_timesteps,
        beta_start=config.beta_start,
        beta_end=config.beta_end,
        beta_schedule=config.beta_schedule,
        clip_sample=config.clip_sample,
        clip_sample_range=config.clip_sample_range,
        prediction_type=config.prediction_type,
    )
    if kind == "DDPM":
        return DDPMScheduler(**kwargs, variance_type="fixed_small")
    return DDIMScheduler(**kwargs)  # the config allows no other kind


class RgbEncoder(nn.Module):
    """Image (N, 3, H, W) -> feature (N, 2 * keypoints): resize, crop, ResNet, spatial softmax, linear + ReLU."""

    def __init__(self, config: DiffusionConfig, image_shape: tuple[int, ...]):
        super().__init__()
        self.resize_shape = tuple(config.resize_shape) if config.resize_shape is not None else None
        crop_height, crop_width = config.crop_shape or self.resize_shape or image_shape[1:]
        self.crop_shape = (crop_height, crop_width)
        resnet = torchvision.models.get_model(config.vision_backbone, weights=config.pretrained_backbone_weights)
        self.backbone = nn.Sequential(*list(resnet.children())[:-2])  # without the global pooling and classifier
        if config.use_group_norm:
            _replace_batch_norm_by_group_norm(self.backbone)
        self.memory_format = torch.contiguous_format  # DiffusionPolicy.set_cpu_kernels may choose channels-last
        with torch.no_grad():  # the feature map's shape for this crop
            _, channels, height, width = self.backbone(torch.zeros(1, image_shape[0], *self.crop_shape)).shape
        self.pool = SpatialSoftmax(channels, height, width, config.spatial_softmax_num_keypoints)
        self.feature_dim = 2 * config.spatial_softmax_num_keypoints
        self.out = nn.Linear(self.feature_dim, self.feature_dim)

    def set_memory_format(self, memory_format: torch.memory_format) -> None:
        """Channels-last is faster on CPU (docs/speed.md); torch's default layout rounds as LeRobot's encoder."""
        self.memory_format = memory_format
        self.backbone.to(memory_format=memory_format)

    def forward(self, images: Tensor, random_crop: bool = False) -> Tensor:
        if self.resize_shape is not None and tuple(images.shape[-2:]) != self.resize_shape:
            images = TF.resize(images, list(self.resize_shape), InterpolationMode.BILINEAR, antialias=True)
        images = crop_images(images, self.crop_shape, random=random_crop)
        keypoints = self.pool(self.backbone(images.contiguous(memory_format=self.memory_format)))  # (N, K, 2)
        return F.relu(self.out(keypoints.flatten(1)))


def crop_images(images: Tensor, crop_shape: tuple[int, int], random: bool) -> Tensor:
    """(N, C, H, W) -> (N, C, *crop_shape): an independent random crop per image, or the center crop."""
    height, width = images.shape[-2:]
    crop_h, crop_w = crop_shape
    if (height, width) == (crop_h, crop_w):
        return images
    if not random:
        top, left = round((height - crop_h) / 2), round((width - crop_w) / 2)
        return images[..., top : top + crop_h, left : left + crop_w]
    tops = torch.randint(0, height - crop_h + 1, (images.shape[0],)).tolist()
    lefts = torch.randint(0, width - crop_w + 1, (images.shape[0],)).tolist()
    return torch.stack(
        [image[:, y : y + crop_h, x : x + crop_w] for image, y, x in zip(images, tops, lefts, strict=True)]
    )


def _replace_batch_norm_by_group_norm(module: nn.Module) -> None:
    """In place: every BatchNorm2d becomes a GroupNorm with 16 channels per group."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, nn.GroupNorm(child.num_features // 16, child.num_features))
        else:
            _replace_batch_norm_by_group_norm(child)


class SpatialSoftmax(nn.Module):
    """Feature map (N, C, H, W) -> K keypoints (N, K, 2): the expected (x, y) in [-1, 1] under a softmax over positions
    of each of K learned 1x1-conv channels (Levine et al., 2016)."""

    def __init__(self, channels: int, height: int, width: int, num_keypoints: int):
        super().__init__()
        self.keypoint_conv = nn.Conv2d(channels, num_keypoints, kernel_size=1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("positions", torch.stack([xs.flatten(), ys.flatten()], dim=-1), persistent=False)

    def forward(self, features: Tensor) -> Tensor:
        attention = self.keypoint_conv(features).flatten(2).softmax(dim=-1)  # (N, K, H * W)
        return attention @ self.positions


class SinusoidalEmbedding(nn.Module):
    """Diffusion step (N,) -> (N, dim): sines and cosines at geometrically spaced frequencies."""

    frequencies: Tensor  # a buffer

    def __init__(self, dim: int):
        super().__init__()
        half = dim // 2
        frequencies = torch.exp(torch.arange(half) * -(math.log(10000) / max(half - 1, 1)))
        self.register_buffer("frequencies", frequencies, persistent=False)

    def forward(self, steps: Tensor) -> Tensor:
        angles = steps.to(self.frequencies.dtype)[:, None] * self.frequencies[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class Conv1dBlock(nn.Sequential):
    """Conv1d (same length) -> GroupNorm -> Mish."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, n_groups: int):
        super().__init__(
            nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(n_groups, out_channels),
            nn.Mish(),
        )


class FiLMResidualBlock(nn.Module):
    """Two conv blocks; between them the conditioning modulates each channel (FiLM: scale * x + bias); residual path."""

    def __init__(self, in_channels: int, out_channels: int, cond_dim: int, config: DiffusionConfig):
        super().__init__()
        self.scale_modulation = config.use_film_scale_modulation
        self.conv1 = Conv1dBlock(in_channels, out_channels, config.kernel_size, config.n_groups)
        film_dim = 2 * out_channels if self.scale_modulation else out_channels
        self.film = nn.Linear(cond_dim, film_dim)  # applied to mish(conditioning), computed once per U-Net call
        self.conv2 = Conv1dBlock(out_channels, out_channels, config.kernel_size, config.n_groups)
        self.residual = nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        h = self.conv1(x)
        film = self.film(cond).unsqueeze(-1)
        if self.scale_modulation:
            scale, bias = film.chunk(2, dim=1)
            h = scale * h + bias
        else:
            h = h + film
        return self.conv2(h) + self.residual(x)


class ConditionalUnet1d(nn.Module):
    """(noisy actions (B, horizon, A), diffusion steps (B,), conditioning (B, G)) -> (B, horizon, A): down levels of
    two FiLM blocks (all but the last halve the length), two middle blocks, up levels taking skips (not the first's)."""

    def __init__(self, config: DiffusionConfig, action_dim: int, global_cond_dim: int):
        super().__init__()
        step_dim = config.diffusion_step_embed_dim
        self.step_encoder = nn.Sequential(
            SinusoidalEmbedding(step_dim),
            nn.Linear(step_dim, 4 * step_dim),
            nn.Mish(),
            nn.Linear(4 * step_dim, step_dim),
        )
        cond_dim = step_dim + global_cond_dim
        dims = config.down_dims
        levels = list(zip([action_dim, *dims[:-1]], dims, strict=True))

        def block(in_channels: int, out_channels: int) -> FiLMResidualBlock:
            return FiLMResidualBlock(in_channels, out_channels, cond_dim, config)

        self.down = nn.ModuleList()
        for i, (in_channels, out_channels) in enumerate(levels):
            blocks = [block(in_channels, out_channels), block(out_channels, out_channels)]
            is_last = i == len(levels) - 1
            downsample = nn.Identity() if is_last else nn.Conv1d(out_channels, out_channels, 3, stride=2, padding=1)
            self.down.append(nn.ModuleList([*blocks, downsample]))
        self.mid = nn.ModuleList([block(dims[-1], dims[-1]) for _ in range(2)])
        self.up = nn.ModuleList()
        for out_channels, deep_channels in reversed(list(zip(dims[:-1], dims[1:], strict=True))):
            blocks = [block(2 * deep_channels, out_channels), block(out_channels, out_channels)]  # input + skip
            upsample = nn.ConvTranspose1d(out_channels, out_channels, 4, stride=2, padding=1)
            self.up.append(nn.ModuleList([*blocks, upsample]))
        self.final = nn.Sequential(
            Conv1dBlock(dims[0], dims[0], config.kernel_size, config.n_groups),
            nn.Conv1d(dims[0], action_dim, 1),
        )

    def forward(self, sample: Tensor, steps: Tensor, global_cond: Tensor) -> Tensor:
        cond = F.mish(torch.cat([self.step_encoder(steps), global_cond], dim=-1))
        x = sample.transpose(1, 2)  # (B, A, horizon): channels first for the convolutions
        skips = []
        for i, (block1, block2, downsample) in enumerate(cast(Iterable[nn.ModuleList], self.down)):
            x = block2(block1(x, cond), cond)
            if i > 0:
                skips.append(x)
            x = downsample(x)
        for block in self.mid:
            x = block(x, cond)
        for block1, block2, upsample in cast(Iterable[nn.ModuleList], self.up):
            x = torch.cat([x, skips.pop()], dim=1)
            x = upsample(block2(block1(x, cond), cond))
        return self.final(x).transpose(1, 2)
