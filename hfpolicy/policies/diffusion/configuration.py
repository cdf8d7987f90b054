"""Configuration of Diffusion Policy (Chi et al., 2023), the CNN variant. The defaults are the paper's PushT image
setup; the state-only variant has `observation.state` + `observation.environment_state` as inputs and no image."""

from dataclasses import dataclass
from typing import ClassVar

from hfpolicy.constants import OBS_ENV_STATE
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.policies.config import PolicyConfig

NOISE_SCHEDULER_TYPES = ("DDPM", "DDIM")
PREDICTION_TYPES = ("epsilon", "sample")
BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")
VISION_BACKBONES = ("resnet18", "resnet34", "resnet50")


@PolicyConfig.register_subclass("diffusion")
@dataclass
class DiffusionConfig(PolicyConfig):
    """Diffusion Policy: a 1D conditional U-Net denoises a horizon of actions, conditioned on encoded observations."""

    # --- timing -----------------------------------------------------------------------------------------------------
    n_obs_steps: int = 2  # observations the policy conditions on: the current one and n_obs_steps - 1 before it
    horizon: int = 16  # actions denoised per prediction, starting at the oldest observation's step
    n_action_steps: int = 8  # actions executed per prediction: horizon[n_obs_steps - 1 :][:n_action_steps]

    # --- vision encoder ---------------------------------------------------------------------------------------------
    vision_backbone: str = "resnet18"  # torchvision ResNet used up to its last conv stage: resnet18/34/50
    pretrained_backbone_weights: str | None = None  # torchvision weights name (e.g. "IMAGENET1K_V1"); None: random init
    use_group_norm: bool = True  # replace the backbone's BatchNorm by GroupNorm (16 channels per group), as the paper
    resize_shape: tuple[int, int] | None = None  # (H, W) every image is resized to (bilinear) before cropping
    crop_shape: tuple[int, int] | None = (84, 84)  # (H, W) crop of every (resized) image; None: use the whole image
    crop_is_random: bool = True  # random crop in training mode (center crop in eval mode); False: always center
    spatial_softmax_num_keypoints: int = 32  # keypoints of the spatial-softmax pooling; feature = 2 * keypoints
    use_separate_rgb_encoder_per_camera: bool = False  # one encoder per camera instead of one shared by all cameras

    # --- 1D conditional U-Net ---------------------------------------------------------------------------------------
    down_dims: tuple[int, ...] = (512, 1024, 2048)  # channels of the U-Net levels; all but the last halve the horizon
    kernel_size: int = 5  # temporal kernel of the U-Net convolutions (odd)
    n_groups: int = 8  # GroupNorm groups in the U-Net blocks (must divide every entry of down_dims)
    diffusion_step_embed_dim: int = 128  # size of the sinusoidal + MLP embedding of the diffusion timestep
    use_film_scale_modulation: bool = True  # FiLM predicts scale and bias from the conditioning (False: bias only)

    # --- noise scheduler (diffusers) --------------------------------------------------------------------------------
    noise_scheduler_type: str = "DDPM"  # sampler used to act: "DDPM" or "DDIM" (training always adds DDPM noise)
    num_train_timesteps: int = 100  # diffusion steps of the forward (noising) process
    beta_schedule: str = "squaredcos_cap_v2"  # beta schedule: squaredcos_cap_v2, linear or scaled_linear
    beta_start: float = 1e-4  # first beta (linear schedules only)
    beta_end: float = 0.02  # last beta (linear schedules only)
    prediction_type: str = "epsilon"  # what the network predicts: "epsilon" (the noise) or "sample" (clean actions)
    clip_sample: bool = True  # clip the predicted clean actions to [-clip_sample_range, clip_sample_range] per step
    clip_sample_range: float = 1.0  # clipping range (normalized actions lie in [-1, 1])
    num_inference_steps: int | None = None  # denoising steps when acting; None: num_train_timesteps (DDIM: use ~10)

    # --- loss -------------------------------------------------------------------------------------------------------
    mask_loss_for_padding: bool = True  # average the loss over valid actions only (action_is_pad excluded)
    drop_last_frames: int | None = None  # episode-end frames that start no training sample; None: derived (see below)

    # --- training presets -------------------------------------------------------------------------------------------
    optimizer_lr: float = 1e-4  # AdamW learning rate
    optimizer_betas: tuple[float, float] = (0.95, 0.999)  # AdamW betas
    optimizer_eps: float = 1e-8  # AdamW epsilon
    optimizer_weight_decay: float = 1e-6  # AdamW weight decay
    scheduler_name: str = "cosine"  # diffusers get_scheduler name
    scheduler_warmup_steps: int = 500  # learning-rate warmup steps
    use_ema: bool = True  # keep an EMA of the weights (hfpolicy.policies.ema.EMA); evaluate and save with it
    ema_power: float = 0.75  # EMA warmup power: decay = 1 - (1 + step) ** -power
    ema_max_decay: float = 0.9999  # EMA decay never exceeds this

    window_fields: ClassVar[tuple[str, ...]] = ("horizon", "n_obs_steps", "n_action_steps", "drop_last_frames")
    retired_fields: ClassVar[frozenset[str]] = frozenset({"fast_kernels"})  # now DiffusionPolicy.set_cpu_kernels
    # The sampler and its step count may change after training (e.g. DDIM with 10 steps to act faster).
    acting_fields: ClassVar[frozenset[str]] = PolicyConfig.acting_fields | {
        "noise_scheduler_type",
        "num_inference_steps",
    }

    def validate_settings(self) -> None:
        for name, known in (
            ("noise_scheduler_type", NOISE_SCHEDULER_TYPES),
            ("prediction_type", PREDICTION_TYPES),
            ("beta_schedule", BETA_SCHEDULES),
            ("vision_backbone", VISION_BACKBONES),
        ):
            if getattr(self, name) not in known:
                raise ConfigFieldError(self, f"{{{name}}} is not supported; use one of {{known}}", known=known)
        if self.use_group_norm and self.pretrained_backbone_weights is not None:
            raise ConfigFieldError(
                self,
                "{pretrained_backbone_weights} with {use_group_norm} would replace the pretrained BatchNorm layers by "
                "untrained GroupNorm ones; set {use_group_norm=False} to use pretrained weights, or "
                "{pretrained_backbone_weights=None} to train the backbone from scratch",
            )
        for name in ("num_train_timesteps", "spatial_softmax_num_keypoints"):
            if getattr(self, name) < 1:
                raise ConfigFieldError(self, f"{{{name}}} must be >= 1")
        steps = self.num_inference_steps
        if steps is not None and not 1 <= steps <= self.num_train_timesteps:
            raise ConfigFieldError(
                self,
                "{num_inference_steps} must be between 1 and {num_train_timesteps} (or None to use num_train_timesteps)",
            )
        if not self.down_dims:
            raise ConfigFieldError(
                self, "{down_dims} is empty; the U-Net needs at least one level, e.g. (512, 1024, 2048)"
            )
        bad_dims = [d for d in self.down_dims if d < 1 or self.n_groups < 1 or d % self.n_groups]
        if bad_dims:
            raise ConfigFieldError(
                self,
                "{n_groups} must divide every entry of {down_dims} (GroupNorm); offending: {bad_dims}",
                bad_dims=bad_dims,
            )
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ConfigFieldError(self, "{kernel_size} must be odd and positive (same-length convolutions)")
        if self.diffusion_step_embed_dim < 2 or self.diffusion_step_embed_dim % 2:
            raise ConfigFieldError(self, "{diffusion_step_embed_dim} must be even and >= 2")
        for name in ("resize_shape", "crop_shape"):
            shape = getattr(self, name)
            if shape is not None and (len(shape) != 2 or min(shape) < 1):
                raise ConfigFieldError(self, f"{{{name}}} must be (height, width) with positive sizes, or None")
        self._validate_timing()

    def _validate_timing(self) -> None:
        """Observation history, horizon and executed actions fit together and the U-Net."""
        if self.drop_last_frames is not None and self.drop_last_frames < 0:
            raise ConfigFieldError(self, "{drop_last_frames} must be >= 0, or None")
        if self.n_obs_steps < 1 or self.n_action_steps < 1:
            raise ConfigFieldError(self, "{n_obs_steps} and {n_action_steps} must be >= 1")
        multiple = 2 ** (len(self.down_dims) - 1)  # every U-Net level but the last halves the horizon
        if self.horizon < 1 or self.horizon % multiple:
            fitting = -(-max(self.horizon, 1) // multiple) * multiple  # the next multiple up: a horizon to try
            raise ConfigFieldError(
                self,
                "{horizon} must be a positive multiple of {multiple}: the U-Net halves it {halvings} times "
                f"(len(down_dims) - 1); e.g. {{horizon={fitting}}}",
                multiple=multiple,
                halvings=len(self.down_dims) - 1,
            )
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ConfigFieldError(
                self,
                "{n_action_steps} does not fit: the executed actions start at horizon index n_obs_steps - 1 = {start}, "
                "so n_action_steps must be <= horizon - n_obs_steps + 1 = {most}",
                start=self.n_obs_steps - 1,
                most=self.horizon - self.n_obs_steps + 1,
            )

    def validate_features(self) -> None:
        super().validate_features()
        if not self.image_features and OBS_ENV_STATE not in self.input_features:
            raise ConfigFieldError(
                self,
                "Diffusion Policy needs at least one image input feature (observation.image or observation.images.*) "
                "or {state} (the state-only variant); input features: {features}",
                state=repr(OBS_ENV_STATE),
                features=list(self.input_features),
            )
        shapes = {key: tuple(f.shape) for key, f in self.image_features.items()}
        if not self.use_separate_rgb_encoder_per_camera and len(set(shapes.values())) > 1:
            raise ConfigFieldError(
                self,
                "the cameras have different shapes {shapes} but share one encoder; resize them to one shape or set "
                "{use_separate_rgb_encoder_per_camera=True}",
                shapes=shapes,
            )
        for key, shape in shapes.items():
            self._validate_image(key, shape)

    def _validate_image(self, key: str, shape: tuple[int, ...]) -> None:
        """An image feature is RGB and at least as large as the crop (after the resize)."""
        if shape[0] != 3:
            raise ConfigFieldError(
                self,
                "image feature {key} has {channels} channels; the ResNet encoder needs RGB (3)",
                key=repr(key),
                channels=shape[0],
            )
        size = tuple(self.resize_shape) if self.resize_shape is not None else shape[1:]
        if self.crop_shape is not None and (self.crop_shape[0] > size[0] or self.crop_shape[1] > size[1]):
            raise ConfigFieldError(
                self,
                "{crop_shape} is larger than image feature {key}{resized} (H, W)={size}; "
                "choose a smaller crop_shape or {crop_shape=None}",
                key=repr(key),
                resized=" resized to resize_shape" if self.resize_shape is not None else "",
                size=size,
            )

    @property
    def action_delta_indices(self) -> list[int]:
        """The denoised horizon starts at the oldest observation."""
        return list(range(1 - self.n_obs_steps, 1 - self.n_obs_steps + self.horizon))

    @property
    def drop_n_last_frames(self) -> int:
        """`drop_last_frames` when set, else horizon - n_action_steps - n_obs_steps + 1 (7 on PushT)."""
        if self.drop_last_frames is not None:
            return self.drop_last_frames
        return self.horizon - self.n_action_steps - self.n_obs_steps + 1

    @property
    def inference_steps(self) -> int:
        return self.num_inference_steps if self.num_inference_steps is not None else self.num_train_timesteps
