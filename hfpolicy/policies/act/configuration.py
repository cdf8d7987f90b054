"""Configuration of ACT (Zhao et al., 2023) with the paper's (and LeRobot's) defaults. Inputs: images, `observation.state`
and `observation.environment_state`; at least one image or the environment state."""

from dataclasses import dataclass, field
from typing import ClassVar

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.policies.config import NormMode, PolicyConfig

VISION_BACKBONES = ("resnet18", "resnet34", "resnet50")
FEEDFORWARD_ACTIVATIONS = ("relu", "gelu")
STATE_KEYS = (OBS_STATE, OBS_ENV_STATE)


@PolicyConfig.register_subclass("act")
@dataclass
class ACTConfig(PolicyConfig):
    """ACT: a transformer encoder over image features, state and a CVAE latent; a decoder reads out a chunk of actions."""

    # --- timing -----------------------------------------------------------------------------------------------------
    n_obs_steps: int = 1  # ACT conditions on the current observation only (must be 1)
    chunk_size: int = 100  # actions predicted per forward pass (the decoder's queries)
    n_action_steps: int = 100  # actions executed per predicted chunk (<= chunk_size; 1 with temporal ensembling)
    temporal_ensemble_coeff: float | None = None  # k of the ensembling weights exp(-k i), i=0 oldest (paper: 0.01)

    # --- normalization ----------------------------------------------------------------------------------------------
    normalization_mapping: dict[str, NormMode] = field(
        default_factory=lambda: {"image": NormMode.MEAN_STD, "state": NormMode.MEAN_STD, "action": NormMode.MEAN_STD}
    )  # feature type -> normalization mode (ACT standardizes everything)

    # --- vision backbone --------------------------------------------------------------------------------------------
    vision_backbone: str = "resnet18"  # torchvision ResNet (frozen batch norm) up to layer4: resnet18/34/50
    pretrained_backbone_weights: str | None = None  # torchvision weights name (paper: "ResNet18_Weights.IMAGENET1K_V1")
    replace_final_stride_with_dilation: bool = False  # dilate layer4 instead of striding it (2x larger feature map)

    # --- transformer ------------------------------------------------------------------------------------------------
    pre_norm: bool = False  # LayerNorm before attention / feedforward (True) or after the residual sum (False, paper)
    dim_model: int = 512  # width of every token
    n_heads: int = 8  # attention heads (must divide dim_model)
    dim_feedforward: int = 3200  # hidden width of the feedforward blocks
    feedforward_activation: str = "relu"  # activation of the feedforward blocks: relu or gelu
    n_encoder_layers: int = 4  # layers of the transformer encoder
    n_decoder_layers: int = 1  # layers of the decoder (the original code used only the first of its 7)
    dropout: float = 0.1  # dropout in attention, feedforward and residual branches

    # --- CVAE -------------------------------------------------------------------------------------------------------
    use_vae: bool = True  # train with the CVAE objective (a latent inferred from the action chunk); False: plain L1
    latent_dim: int = 32  # size of the CVAE latent
    n_vae_encoder_layers: int = 4  # layers of the CVAE encoder (a transformer over [CLS, state, actions])
    kl_weight: float = 10.0  # loss = L1 + kl_weight * KL(latent posterior || N(0, I))

    # --- training presets -------------------------------------------------------------------------------------------
    optimizer_lr: float = 1e-5  # AdamW learning rate of everything but the vision backbone
    optimizer_lr_backbone: float = 1e-5  # AdamW learning rate of the vision backbone
    optimizer_betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    optimizer_eps: float = 1e-8  # AdamW epsilon
    optimizer_weight_decay: float = 1e-4  # AdamW weight decay
    scheduler_name: str = "constant"  # diffusers get_scheduler name (the paper: constant)
    scheduler_warmup_steps: int = 0  # learning-rate warmup steps
    use_ema: bool = False  # keep an EMA of the weights (not used by the paper)

    window_fields: ClassVar[tuple[str, ...]] = ("chunk_size", "n_action_steps")  # they set the training window
    acting_fields: ClassVar[frozenset[str]] = PolicyConfig.acting_fields | {
        "temporal_ensemble_coeff",
        "optimizer_lr_backbone",
        "dropout",
        "kl_weight",
    }

    def validate_settings(self) -> None:
        if self.n_obs_steps != 1:
            raise ConfigFieldError(self, "ACT conditions on the current observation only: {n_obs_steps} must be 1")
        if self.chunk_size < 1:
            raise ConfigFieldError(self, "{chunk_size} must be >= 1")
        if not 1 <= self.n_action_steps <= self.chunk_size:
            raise ConfigFieldError(
                self,
                "{n_action_steps} must be between 1 and {chunk_size}: "
                "the policy executes at most the actions of one predicted chunk",
            )
        if self.temporal_ensemble_coeff is not None and self.n_action_steps != 1:
            raise ConfigFieldError(
                self,
                "temporal ensembling ({temporal_ensemble_coeff}) predicts a chunk at every step and executes one "
                "action of the ensemble: set {n_action_steps=1} (got {got})",
                got=self.n_action_steps,
            )
        for name, known in (("vision_backbone", VISION_BACKBONES), ("feedforward_activation", FEEDFORWARD_ACTIVATIONS)):
            if getattr(self, name) not in known:
                raise ConfigFieldError(self, f"{{{name}}} is not supported; use one of {{known}}", known=known)
        if self.dim_model < 2 or self.dim_model % 2:
            raise ConfigFieldError(self, "{dim_model} must be even (2D positions use half of it per axis)")
        if self.n_heads < 1 or self.dim_model % self.n_heads:
            raise ConfigFieldError(self, "{n_heads} must divide {dim_model}")
        for name in ("dim_feedforward", "n_encoder_layers", "n_decoder_layers", "latent_dim"):
            if getattr(self, name) < 1:
                raise ConfigFieldError(self, f"{{{name}}} must be >= 1")
        if self.use_vae and self.n_vae_encoder_layers < 1:
            raise ConfigFieldError(self, "{n_vae_encoder_layers} must be >= 1 with {use_vae}")
        if not 0 <= self.dropout < 1:
            raise ConfigFieldError(self, "{dropout} must be in [0, 1)")

    def validate_features(self) -> None:
        super().validate_features()
        if not self.image_features and OBS_ENV_STATE not in self.input_features:
            raise ValueError(
                "ACT needs at least one image input feature (observation.image or observation.images.*) or "
                f"{OBS_ENV_STATE!r}; input features: {list(self.input_features)}"
            )
        others = [key for key in self.state_features if key not in STATE_KEYS]
        if others:
            raise ValueError(
                f"ACT takes the vector inputs {STATE_KEYS} only; drop {others} from the input features "
                "(or concatenate them into observation.state when building the dataset)"
            )
        for key, feature in self.image_features.items():
            if feature.shape[0] != 3:
                raise ValueError(
                    f"image feature {key!r} has {feature.shape[0]} channels; the ResNet backbone needs RGB (3)"
                )

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.chunk_size))

    @property
    def drop_n_last_frames(self) -> int:
        """Every frame starts a training sample (actions past an episode's end are masked in the loss)."""
        return 0
