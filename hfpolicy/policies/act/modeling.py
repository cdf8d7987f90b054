"""ACT, the Action Chunking Transformer (Zhao et al., 2023): a conditional VAE whose decoder is a transformer. A
transformer encoder reads [latent, states, camera feature-map cells]; chunk_size learned queries cross-attend to it and
become actions. Training infers the latent with a CVAE encoder over [CLS, state, actions]; acting uses the zero latent.
The layer layout (and with it the numerics) is LeRobot's, so LeRobot checkpoints act identically."""

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F  # noqa: N812
import torchvision
from torch import Tensor, nn
from torchvision.ops import FrozenBatchNorm2d

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE, pad_key
from hfpolicy.policies.act.configuration import ACTConfig
from hfpolicy.policies.action_selection import ActionBuffer, TemporalEnsembler
from hfpolicy.policies.base import NoiseSource, Policy, masked_mean

BACKBONE_PREFIX = "backbone."  # parameters of the vision backbone (their own learning rate)


class ACTPolicy(Policy):
    """ACT for image and/or state inputs; deterministic when acting. With `temporal_ensemble_coeff` set it predicts a
    chunk at every step and executes the weighted average of all predictions for the step (`TemporalEnsembler`)."""

    config_class = ACTConfig

    def __init__(self, config: ACTConfig, dataset_stats: dict | None = None):
        super().__init__(config, dataset_stats)
        self.config: ACTConfig = config
        self.image_keys = list(config.image_features)
        self.has_state = OBS_STATE in config.input_features
        self.has_env_state = OBS_ENV_STATE in config.input_features
        action_dim = config.action_feature.shape[0]
        dim = config.dim_model

        if config.use_vae:
            state_dim = config.input_features[OBS_STATE].shape[0] if self.has_state else None
            self.cvae = CVAEEncoder(config, state_dim, action_dim)
        if self.image_keys:
            self.backbone = ResNetTrunk(config)
            self.image_proj = nn.Conv2d(self.backbone.out_channels, dim, kernel_size=1)
        self.latent_proj = nn.Linear(config.latent_dim, dim)
        if self.has_state:
            self.state_proj = nn.Linear(config.input_features[OBS_STATE].shape[0], dim)
        if self.has_env_state:
            self.env_state_proj = nn.Linear(config.input_features[OBS_ENV_STATE].shape[0], dim)
        self.token_positions = nn.Embedding(1 + self.has_state + self.has_env_state, dim)  # latent, state, env state
        self.encoder = TransformerEncoder(config, config.n_encoder_layers)
        self.decoder = TransformerDecoder(config)
        self.query_positions = nn.Embedding(config.chunk_size, dim)
        self.action_head = nn.Linear(dim, action_dim)

        for p in [*self.encoder.parameters(), *self.decoder.parameters()]:  # the original code's initialization
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def make_action_buffer(self) -> ActionBuffer:
        if self.config.temporal_ensemble_coeff is not None:
            return TemporalEnsembler(self.config.temporal_ensemble_coeff, self.config.chunk_size)
        return super().make_action_buffer()

    def get_optim_params(self) -> list[dict]:
        """Two parameter groups: the vision backbone with `optimizer_lr_backbone`, the rest with the default lr."""
        named = [(name, p) for name, p in self.named_parameters() if p.requires_grad]
        groups: list[dict] = [{"params": [p for name, p in named if not name.startswith(BACKBONE_PREFIX)]}]
        backbone = [p for name, p in named if name.startswith(BACKBONE_PREFIX)]
        if backbone:
            groups.append({"params": backbone, "lr": self.config.optimizer_lr_backbone})
        return groups

    def current_observation(self, observation: dict[str, Tensor]) -> dict[str, Tensor]:
        """The inputs without their time dim, checking shapes: (B, 1, *shape) -> (B, *shape)."""
        current = {}
        for key, feature in self.config.input_features.items():
            if key not in observation:
                raise KeyError(f"ACT needs {key!r}; the batch has {sorted(observation)}")
            value = observation[key]
            expected = tuple(feature.shape)
            if value.ndim != len(expected) + 2 or value.shape[1] != 1 or tuple(value.shape[2:]) != expected:
                raise ValueError(
                    f"{key!r} has shape {tuple(value.shape)}; ACT needs (batch, n_obs_steps=1, *{expected}): "
                    "build training windows with config.delta_timestamps(fps) and act through select_action"
                )
            current[key] = value[:, 0]
        return current

    def predict(self, observation: dict[str, Tensor], latent: Tensor) -> Tensor:
        """Normalized actions (B, chunk_size, A) from current normalized observations (no time dim) and a latent."""
        one_d = [self.latent_proj(latent)]
        if self.has_state:
            one_d.append(self.state_proj(observation[OBS_STATE]))
        if self.has_env_state:
            one_d.append(self.env_state_proj(observation[OBS_ENV_STATE]))
        tokens = torch.stack(one_d, dim=1)  # (B, n_1d, D)
        positions = self.token_positions.weight.unsqueeze(0)  # (1, n_1d, D)
        if self.image_keys:
            image_tokens, image_positions = self.encode_images([observation[key] for key in self.image_keys])
            tokens = torch.cat([tokens, image_tokens], dim=1)
            positions = torch.cat([positions, image_positions], dim=1)
        memory = self.encoder(tokens, positions)
        queries = memory.new_zeros(memory.shape[0], self.config.chunk_size, self.config.dim_model)
        decoded = self.decoder(queries, memory, self.query_positions.weight.unsqueeze(0), positions)
        return self.action_head(decoded)

    def encode_images(self, images: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Camera images (each (B, 3, H, W)) -> tokens (B, cells, D) and positions (1, cells, D) of every camera's
        feature map cells, row-major, camera after camera; cameras of one shape share one backbone pass."""
        batch_size = images[0].shape[0]
        if len({tuple(image.shape) for image in images}) == 1:
            maps = self.backbone(torch.cat(images)).split(batch_size)
        else:
            maps = [self.backbone(image) for image in images]
        tokens, positions = [], []
        for feature_map in maps:
            positions.append(sinusoidal_positions_2d(feature_map.shape[-2:], self.config.dim_model, feature_map))
            tokens.append(self.image_proj(feature_map).flatten(2).transpose(1, 2))
        return torch.cat(tokens, dim=1), torch.cat(positions, dim=1)

    def compute_loss(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> dict[str, Tensor]:
        """L1 over the unpadded actions (+ kl_weight * KL with the CVAE); `noise`: the reparametrization's."""
        observation = self.current_observation(batch)
        actions = batch[ACTION]
        expected = (self.config.chunk_size, self.config.action_feature.shape[0])
        if actions.ndim != 3 or tuple(actions.shape[1:]) != expected:
            raise ValueError(
                f"{ACTION!r} has shape {tuple(actions.shape)}; ACT trains on (batch, chunk_size, action_dim) = "
                f"(batch, *{expected}): build the dataset with delta_timestamps=config.delta_timestamps(fps)"
            )
        is_pad = batch.get(pad_key(ACTION))
        if is_pad is None:
            is_pad = torch.zeros(actions.shape[:2], dtype=torch.bool, device=actions.device)
        is_pad = is_pad.bool()
        if self.config.use_vae:
            mean, log_var = self.cvae(observation.get(OBS_STATE), actions, is_pad)
            if noise is None:
                noise = torch.randn_like(mean)
            latent = mean + (log_var / 2).exp() * noise
        else:
            latent = actions.new_zeros(actions.shape[0], self.config.latent_dim)
        l1 = masked_mean(F.l1_loss(self.predict(observation, latent), actions, reduction="none"), is_pad)
        if not self.config.use_vae:
            return {"loss": l1, "l1_loss": l1.detach()}
        kld = (-0.5 * (1 + log_var - mean.square() - log_var.exp())).sum(-1).mean()
        return {"loss": l1 + self.config.kl_weight * kld, "l1_loss": l1.detach(), "kld_loss": kld.detach()}

    def generate_actions(
        self, observation: dict[str, Tensor], generator: NoiseSource = None, noise: Tensor | None = None
    ) -> Tensor:
        """The whole normalized chunk (B, chunk_size, A), predicted with the zero latent; noise is ignored."""
        del generator, noise
        current = self.current_observation(observation)
        reference = next(iter(current.values()))
        return self.predict(current, reference.new_zeros(reference.shape[0], self.config.latent_dim))


class ResNetTrunk(nn.Sequential):
    """The config's torchvision ResNet with frozen batch norm (as the paper), without its pooling and classifier:
    (N, 3, H, W) -> (N, out_channels, H / 32, W / 32)."""

    def __init__(self, config: ACTConfig):
        resnet = torchvision.models.get_model(
            config.vision_backbone,
            weights=config.pretrained_backbone_weights,
            norm_layer=FrozenBatchNorm2d,
            replace_stride_with_dilation=[False, False, config.replace_final_stride_with_dilation],
        )
        super().__init__(
            OrderedDict((name, module) for name, module in resnet.named_children() if name not in ("avgpool", "fc"))
        )
        self.out_channels = resnet.fc.in_features


def sinusoid_angles(positions: Tensor, dim: int) -> Tensor:
    """Positions (...) -> (..., dim): channel j is sin (j even) or cos (j odd) of position / 10000 ** (2 * (j // 2) /
    dim), as in "Attention Is All You Need"."""
    j = torch.arange(dim, device=positions.device)
    angles = positions.unsqueeze(-1) / 10000 ** (2 * torch.div(j, 2, rounding_mode="floor").to(positions.dtype) / dim)
    return torch.where(j % 2 == 0, angles.sin(), angles.cos())


def sinusoidal_positions_1d(n_positions: int, dim: int) -> Tensor:
    """(n_positions, dim) fixed positions 0 .. n_positions - 1 (computed in float64, returned in float32)."""
    return sinusoid_angles(torch.arange(n_positions, dtype=torch.float64), dim).float()


def sinusoidal_positions_2d(size: tuple[int, int] | torch.Size, dim: int, like: Tensor) -> Tensor:
    """(1, H * W, dim) positions of a feature map's cells (row-major): half the channels the row, half the column,
    each scaled to (0, 2 pi] as DETR's."""
    height, width = size
    eps, two_pi = 1e-6, 2 * math.pi
    rows = torch.arange(1, height + 1, dtype=torch.float32, device=like.device) / (height + eps) * two_pi
    cols = torch.arange(1, width + 1, dtype=torch.float32, device=like.device) / (width + eps) * two_pi
    row_features = sinusoid_angles(rows, dim // 2)[:, None, :].expand(height, width, dim // 2)
    col_features = sinusoid_angles(cols, dim // 2)[None, :, :].expand(height, width, dim // 2)
    return torch.cat([row_features, col_features], dim=-1).reshape(1, height * width, dim).to(like.dtype)


def activation_function(name: str):
    return {"relu": F.relu, "gelu": F.gelu}[name]


class EncoderLayer(nn.Module):
    """Self-attention (positions added to queries and keys, not values) and a feedforward block, each with a residual
    connection; LayerNorm after each residual sum (post-norm, the paper) or before each block (pre_norm)."""

    def __init__(self, config: ACTConfig):
        super().__init__()
        dim = config.dim_model
        self.self_attn = nn.MultiheadAttention(dim, config.n_heads, dropout=config.dropout, batch_first=True)
        self.ff_in = nn.Linear(dim, config.dim_feedforward)
        self.ff_out = nn.Linear(config.dim_feedforward, dim)
        self.norm_attn = nn.LayerNorm(dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(config.dropout)
        self.activation = activation_function(config.feedforward_activation)
        self.pre_norm = config.pre_norm

    def attend(self, x: Tensor, positions: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        query = x + positions
        return self.dropout(self.self_attn(query, query, x, key_padding_mask=key_padding_mask, need_weights=False)[0])

    def feedforward(self, x: Tensor) -> Tensor:
        return self.dropout(self.ff_out(self.dropout(self.activation(self.ff_in(x)))))

    def forward(self, x: Tensor, positions: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if self.pre_norm:
            x = x + self.attend(self.norm_attn(x), positions, key_padding_mask)
            return x + self.feedforward(self.norm_ff(x))
        x = self.norm_attn(x + self.attend(x, positions, key_padding_mask))
        return self.norm_ff(x + self.feedforward(x))


class TransformerEncoder(nn.Module):
    """A stack of encoder layers (batch-first tokens); with pre_norm a final LayerNorm."""

    def __init__(self, config: ACTConfig, n_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(n_layers))
        self.norm = nn.LayerNorm(config.dim_model) if config.pre_norm else nn.Identity()

    def forward(self, x: Tensor, positions: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, positions, key_padding_mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """Self-attention among the queries, cross-attention to the encoder output (positions added to queries and keys),
    and a feedforward block, each with a residual connection and a LayerNorm (post- or pre-norm)."""

    def __init__(self, config: ACTConfig):
        super().__init__()
        dim = config.dim_model
        self.self_attn = nn.MultiheadAttention(dim, config.n_heads, dropout=config.dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(dim, config.n_heads, dropout=config.dropout, batch_first=True)
        self.ff_in = nn.Linear(dim, config.dim_feedforward)
        self.ff_out = nn.Linear(config.dim_feedforward, dim)
        self.norm_self_attn = nn.LayerNorm(dim)
        self.norm_cross_attn = nn.LayerNorm(dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(config.dropout)
        self.activation = activation_function(config.feedforward_activation)
        self.pre_norm = config.pre_norm

    def attend_self(self, x: Tensor, query_positions: Tensor) -> Tensor:
        query = x + query_positions
        return self.dropout(self.self_attn(query, query, x, need_weights=False)[0])

    def attend_memory(self, x: Tensor, memory: Tensor, query_positions: Tensor, memory_positions: Tensor) -> Tensor:
        out = self.cross_attn(x + query_positions, memory + memory_positions, memory, need_weights=False)[0]
        return self.dropout(out)

    def feedforward(self, x: Tensor) -> Tensor:
        return self.dropout(self.ff_out(self.dropout(self.activation(self.ff_in(x)))))

    def forward(self, x: Tensor, memory: Tensor, query_positions: Tensor, memory_positions: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.attend_self(self.norm_self_attn(x), query_positions)
            x = x + self.attend_memory(self.norm_cross_attn(x), memory, query_positions, memory_positions)
            return x + self.feedforward(self.norm_ff(x))
        x = self.norm_self_attn(x + self.attend_self(x, query_positions))
        x = self.norm_cross_attn(x + self.attend_memory(x, memory, query_positions, memory_positions))
        return self.norm_ff(x + self.feedforward(x))


class TransformerDecoder(nn.Module):
    """A stack of decoder layers followed by a LayerNorm."""

    def __init__(self, config: ACTConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.norm = nn.LayerNorm(config.dim_model)

    def forward(self, x: Tensor, memory: Tensor, query_positions: Tensor, memory_positions: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, query_positions, memory_positions)
        return self.norm(x)


class CVAEEncoder(nn.Module):
    """[CLS, observation.state (if an input), actions (chunk_size)] -> transformer encoder (fixed sinusoidal positions,
    padded actions masked) -> the CLS token's output -> the latent's mean and log-variance (B, latent_dim) each."""

    def __init__(self, config: ACTConfig, state_dim: int | None, action_dim: int):
        super().__init__()
        dim = config.dim_model
        self.cls_token = nn.Parameter(torch.randn(1, dim))
        self.state_proj = nn.Linear(state_dim, dim) if state_dim is not None else None
        self.action_proj = nn.Linear(action_dim, dim)
        self.encoder = TransformerEncoder(config, config.n_vae_encoder_layers)
        self.latent_head = nn.Linear(dim, 2 * config.latent_dim)
        n_tokens = 1 + (state_dim is not None) + config.chunk_size
        self.register_buffer("positions", sinusoidal_positions_1d(n_tokens, dim).unsqueeze(0), persistent=False)

    def forward(self, state: Tensor | None, actions: Tensor, actions_is_pad: Tensor) -> tuple[Tensor, Tensor]:
        batch_size = actions.shape[0]
        parts = [self.cls_token.expand(batch_size, 1, -1)]
        if self.state_proj is not None:
            parts.append(self.state_proj(state).unsqueeze(1))
        parts.append(self.action_proj(actions))
        tokens = torch.cat(parts, dim=1)
        n_prefix = tokens.shape[1] - actions.shape[1]
        is_pad = torch.cat([actions_is_pad.new_zeros(batch_size, n_prefix), actions_is_pad], dim=1)
        cls_out = self.encoder(tokens, self.positions, key_padding_mask=is_pad)[:, 0]
        mean, log_var = self.latent_head(cls_out).chunk(2, dim=-1)
        return mean, log_var
