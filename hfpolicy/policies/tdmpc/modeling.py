"""TD-MPC, FOWM variant (Hansen et al., 2022; Feng et al., 2023): a latent world model (encoder, dynamics, reward, pi,
a Q ensemble and V) learnt offline, acting by MPPI planning in its latent space (docs/tdmpc.md). Every random draw of a
plan comes from the per-episode generators of `reset(seeds=...)` when given."""

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE, REWARD, pad_key
from hfpolicy.policies.action_selection import ActionQueue
from hfpolicy.policies.base import NoiseSource, Policy
from hfpolicy.policies.tdmpc.configuration import IMAGE_KERNELS, TDMPCConfig, image_encoding_size


class TDMPCPolicy(Policy):
    """TD-MPC (FOWM) for state and/or single-image inputs: `model` is trained, `target_model` is its EMA."""

    config_class = TDMPCConfig
    per_episode_row_block = 1  # generate_actions computes each row alone (see there)

    def __init__(self, config: TDMPCConfig, dataset_stats: dict | None = None):
        super().__init__(config, dataset_stats)
        self.config: TDMPCConfig = config
        self.action_dim = config.action_feature.shape[0]
        self.model = WorldModel(config)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self._plan_mean: Tensor | None = None  # (B, horizon, A): the last plan's mean, warm-starting the next
        self._exploration_std: float | None = None  # set while exploring (online RL collection); None: no noise

    def make_action_buffer(self) -> ActionQueue:
        return ActionQueue(self.config.n_action_steps * self.config.n_action_repeats)

    def reset(self, seeds=None) -> None:
        """As `Policy.reset`; also forgets the planner's warm start."""
        super().reset(seeds)
        self._plan_mean = None

    def after_optimizer_step(self) -> None:
        """The target network's EMA step: target <- momentum * target + (1 - momentum) * weights."""
        with torch.no_grad():
            targets: list[Tensor] = list(self.target_model.parameters())
            params: list[Tensor] = list(self.model.parameters())
            torch._foreach_lerp_(targets, params, 1.0 - self.config.target_model_momentum)

    @contextlib.contextmanager
    def exploring(self, std: float) -> Iterator[None]:
        """Acts as TD-MPC collects its data inside the block: the planner's std floored at `std` and noise of that std
        on the executed action (use_mpc=false: noise of `std` on pi's action)."""
        if std < 0:
            raise ValueError(f"the exploration std must be >= 0, got {std}")
        previous, self._exploration_std = self._exploration_std, float(std)
        try:
            yield
        finally:
            self._exploration_std = previous

    # It takes no `noise`: predict_action_chunk passes only the sources an override declares (noise_parameters).
    def generate_actions(self, observation: dict[str, Tensor], generator: NoiseSource = None) -> Tensor:  # type: ignore[override]
        """Normalized actions (B, n_action_steps * n_action_repeats, A) in [-1, 1]: planned (use_mpc) or pi's. With one
        generator per row, each row is planned alone, so that its actions never depend on the batch."""
        if isinstance(generator, list | tuple) and len(generator) > 1:
            warm, means, chunks = self._plan_mean, [], []  # means: each row's warm start, set by its plan (use_mpc)
            for i, row_generator in enumerate(generator):
                self._plan_mean = None if warm is None else warm[i : i + 1]
                chunks.append(self.generate_actions({k: v[i : i + 1] for k, v in observation.items()}, [row_generator]))
                means.append(self._plan_mean)
            self._plan_mean = torch.cat(cast(list[Tensor], means)) if self.config.use_mpc else None
            return torch.cat(chunks)
        z = self.model.encode({key: observation[key][:, -1] for key in self.config.input_features})
        if self.config.use_mpc:
            actions = self.plan(z, generator)
        else:  # pi alone, with noise of the exploration std while exploring
            actions = self.model.pi(z, self._exploration_std or 0.0, generator).unsqueeze(1)
        actions = actions.clamp(-1, 1)[:, : self.config.n_action_steps]
        return actions.repeat_interleave(self.config.n_action_repeats, dim=1)

    @torch.no_grad()
    def plan(self, z: Tensor, generator: NoiseSource = None) -> Tensor:
        """MPPI from latents z (B, L): the chosen action sequence (B, horizon, A)."""
        cfg, batch_size = self.config, z.shape[0]
        horizon, n_pi, n_gaussian = cfg.horizon, cfg.n_pi_samples, cfg.n_gaussian_samples
        pi_actions = z.new_empty(batch_size, n_pi, horizon, self.action_dim)
        latent = z.unsqueeze(1).expand(-1, n_pi, -1)
        for t in range(horizon):  # pi's rollouts, with a little noise
            pi_actions[:, :, t] = self.model.pi(latent, cfg.min_std, generator)
            latent = self.model.dynamics(torch.cat([latent, pi_actions[:, :, t]], dim=-1))

        mean = z.new_zeros(batch_size, horizon, self.action_dim)
        if self._plan_mean is not None:
            if self._plan_mean.shape != mean.shape:
                raise RuntimeError("the batch size changed since the last plan: call policy.reset() between episodes")
            mean[:, :-1] = self._plan_mean[:, 1:]
        std = torch.full_like(mean, cfg.max_std)
        floor = cfg.min_std if self._exploration_std is None else max(cfg.min_std, self._exploration_std)
        z = z.unsqueeze(1).expand(-1, n_gaussian + n_pi, -1)
        for _ in range(cfg.cem_iterations):
            noise = draw(generator, batch_size, z.device, normal((n_gaussian, horizon, self.action_dim)))
            gaussian = (mean.unsqueeze(1) + std.unsqueeze(1) * noise).clamp(-1, 1)
            actions = torch.cat([gaussian, pi_actions], dim=1)  # (B, N, horizon, A)
            values = self.estimate_value(z, actions, generator).nan_to_num_(0)  # (B, N)
            elite_values, elite_index = values.topk(cfg.n_elites, dim=1)
            elites = actions.gather(1, elite_index[:, :, None, None].expand(-1, -1, horizon, self.action_dim))
            weights = torch.softmax(cfg.elite_weighting_temperature * elite_values, dim=1)[:, :, None, None]
            elite_mean = (weights * elites).sum(1)
            elite_std = (weights * (elites - elite_mean.unsqueeze(1)) ** 2).sum(1).sqrt()
            mean = cfg.gaussian_mean_momentum * mean + (1 - cfg.gaussian_mean_momentum) * elite_mean
            std = elite_std.clamp(floor, cfg.max_std)
        self._plan_mean = mean
        weights = weights[:, :, 0, 0]
        chosen = draw(generator, batch_size, z.device, categorical(weights))  # one elite per row, by its weight
        plan = elites[torch.arange(batch_size), chosen]
        if self._exploration_std is not None:  # exploring: the planner's own uncertainty on the executed action
            plan = plan + std * draw(generator, batch_size, z.device, normal((horizon, self.action_dim)))
        return plan

    def estimate_value(self, z: Tensor, actions: Tensor, generator: NoiseSource = None) -> Tensor:
        """FOWM's value of action sequences (B, N, horizon, A) from latents (B, N, L): discounted rewards, then the
        min of two random Q functions at pi's next action, each step penalized by the Q ensemble's std."""
        cfg = self.config
        value: Tensor | float = 0.0
        discount = 1.0
        for t in range(actions.shape[2]):
            penalty = cfg.uncertainty_regularizer_coeff * self.model.Qs(z, actions[:, :, t]).std(0)
            z, reward = self.model.next_latent_and_reward(z, actions[:, :, t])
            value = value + discount * (reward - penalty)
            discount *= cfg.discount
        q = self.model.Qs(z, self.model.pi(z, cfg.min_std, generator))  # (k, B, N)
        terminal = q.min(0).values
        if q.shape[0] > 2:  # two Q functions drawn per row (with replacement)
            pair = draw(generator, z.shape[0], z.device, integers(q.shape[0], 2))  # (B, 2)
            terminal = q.gather(0, pair.T[:, :, None].expand(-1, -1, q.shape[2])).min(0).values
        return value + discount * (terminal - cfg.uncertainty_regularizer_coeff * q.std(0))

    def training_window(self, batch: dict[str, Tensor]) -> tuple[dict[str, Tensor], ...]:
        """(observations, actions and rewards, time first; which steps are valid), a training batch's windows checked
        and its images randomly shifted when training."""
        cfg, horizon = self.config, self.config.horizon
        keys = list(cfg.input_features)
        if REWARD not in batch:
            raise KeyError(f"the training batch lacks {REWARD!r}: build it with config.delta_timestamps(fps)")
        reward = batch[REWARD].reshape(batch[REWARD].shape[0], -1)
        shapes = {key: tuple(batch[key].shape[:2]) for key in [*keys, ACTION]} | {REWARD: tuple(reward.shape)}
        expected = {key: (reward.shape[0], horizon + 1) for key in keys}
        expected[ACTION] = expected[REWARD] = (reward.shape[0], horizon)
        if shapes != expected:
            raise ValueError(
                f"TD-MPC trains on windows of horizon + 1 = {horizon + 1} observations and {horizon} actions and "
                f"rewards; the batch has (batch, time) {shapes}: build it with config.delta_timestamps(fps)"
            )
        observations = {key: batch[key].transpose(0, 1) for key in keys}  # time first: (horizon + 1, B, ...)
        steps = {ACTION: batch[ACTION].transpose(0, 1), REWARD: reward.transpose(0, 1)}
        valid = {}  # the observations' (all windowed alike), the actions' and the rewards' masks, time first
        for key in (keys[0], *steps):
            is_pad = batch.get(pad_key(key))
            valid[key] = torch.ones(expected[key][::-1], device=reward.device) if is_pad is None else ~is_pad.T
        image_key = next(iter(cfg.image_features), None)
        if image_key is not None and self.training and cfg.max_random_shift_ratio > 0:
            images = observations[image_key]
            shifted = random_shift(images.flatten(0, 1), cfg.max_random_shift_ratio)
            observations[image_key] = shifted.unflatten(0, images.shape[:2])
        return observations, steps, valid

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """FOWM's losses on a normalized window (docs/tdmpc.md); "loss" is their weighted sum."""
        cfg, horizon = self.config, self.config.horizon
        observations, steps, valid = self.training_window(batch)
        action, reward = steps[ACTION], steps[REWARD]
        obs_valid, action_valid, reward_valid = valid[next(iter(cfg.input_features))], valid[ACTION], valid[REWARD]
        current = {key: value[0] for key, value in observations.items()}
        following = {key: value[1:] for key, value in observations.items()}

        latents, reward_preds = [self.model.encode(current)], []
        for t in range(horizon):
            latent, predicted = self.model.next_latent_and_reward(latents[-1], action[t])
            latents.append(latent)
            reward_preds.append(predicted)
        z, reward_pred = torch.stack(latents), torch.stack(reward_preds)  # (horizon + 1, B, L), (horizon, B)
        q_preds, v_preds = self.model.Qs(z[:-1], action), self.model.V(z[:-1])
        with torch.no_grad():
            z_targets = self.target_model.encode(following)
            q_targets = reward + cfg.discount * self.model.V(self.model.encode(following))
            v_targets = self.target_model.min_of_two_Qs(z[:-1].detach(), action)

        decay = cfg.temporal_decay_coeff ** torch.arange(horizon, device=z.device).unsqueeze(-1)  # (horizon, 1)
        rolled_out = decay * obs_valid[:1] * action_valid  # the latent rollout is valid up to the first padded step
        consistency = rolled_out * obs_valid[1:] * F.mse_loss(z[1:], z_targets, reduction="none").mean(-1)
        reward_loss = rolled_out * reward_valid * (reward_pred - reward) ** 2
        q_loss = rolled_out * reward_valid * obs_valid[1:] * ((q_preds - q_targets) ** 2).sum(0)
        diff = v_targets - v_preds
        v_loss = rolled_out * torch.where(diff > 0, cfg.expectile_weight, 1 - cfg.expectile_weight) * diff**2
        z = z.detach()
        with torch.no_grad():
            advantage = self.target_model.min_of_two_Qs(z[:-1], action) - self.model.V(z[:-1])
            weights = torch.exp(advantage * cfg.advantage_scaling).clamp(max=100.0)
        pi_loss = (weights * rolled_out * ((self.model.pi(z[:-1]) - action) ** 2).sum(-1)).mean()
        losses = {
            "consistency_loss": consistency.sum(0).mean(),
            "reward_loss": reward_loss.sum(0).mean(),
            "Q_value_loss": q_loss.sum(0).mean(),
            "V_value_loss": v_loss.sum(0).mean(),
            "pi_loss": pi_loss,
        }
        loss = (
            cfg.consistency_coeff * losses["consistency_loss"]
            + cfg.reward_coeff * losses["reward_loss"]
            + cfg.value_coeff * (losses["Q_value_loss"] + losses["V_value_loss"])
            + cfg.pi_coeff * pi_loss
        )
        return {"loss": loss, **losses}


Draw = Callable[[torch.Generator | None, slice, torch.device], Tensor]


def draw(generator: NoiseSource, batch_size: int, device: torch.device, sample: Draw) -> Tensor:
    """`sample(generator, rows, device)` for every row, moved to `device`: row i from generator i when `generator` is a
    list, else all rows from the one generator (None: torch's global RNG)."""
    if isinstance(generator, list | tuple):
        return torch.cat([sample(g, slice(i, i + 1), g.device) for i, g in enumerate(generator)]).to(device)
    return sample(generator, slice(0, batch_size), device if generator is None else generator.device).to(device)


def normal(shape: tuple[int, ...]) -> Draw:
    """Standard normal draws of `shape` per row."""
    return lambda g, rows, device: torch.randn(rows.stop - rows.start, *shape, generator=g, device=device)


def integers(high: int, n: int) -> Draw:
    """`n` integers in [0, high) per row."""
    return lambda g, rows, device: torch.randint(high, (rows.stop - rows.start, n), generator=g, device=device)


def categorical(probabilities: Tensor) -> Draw:
    """One index per row, drawn with the row's `probabilities` (B, K)."""
    return lambda g, rows, device: torch.multinomial(probabilities[rows].to(device), 1, generator=g).squeeze(1)


def random_shift(images: Tensor, ratio: float) -> Tensor:
    """Each image (N, C, H, W) shifted by up to round(ratio * H) pixels each way, edges repeated (DrQ's augmentation)."""
    n, channels, height, width = images.shape
    pad = int(round(ratio * height))
    if pad == 0:
        return images
    padded = F.pad(images, (pad,) * 4, mode="replicate")
    top, left = torch.randint(0, 2 * pad + 1, (2, n, 1), device=images.device)
    rows = (top + torch.arange(height, device=images.device))[:, None, :, None]
    cols = (left + torch.arange(width, device=images.device))[:, None, None, :]
    index = torch.arange(n, device=images.device)[:, None, None, None]
    return padded[index, torch.arange(channels, device=images.device)[None, :, None, None], rows, cols]


def mlp(in_dim: int, hidden: int, out_dim: int, *head: nn.Module) -> nn.Sequential:
    """Linear, LayerNorm, Mish, Linear, LayerNorm, Mish, Linear (+ head): the dynamics, reward and pi networks."""
    layers = [nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.Mish(), nn.Linear(hidden, hidden)]
    return nn.Sequential(*layers, nn.LayerNorm(hidden), nn.Mish(), nn.Linear(hidden, out_dim), *head)


def value_mlp(in_dim: int, hidden: int) -> nn.Sequential:
    """Linear, LayerNorm, Tanh, Linear, ELU, Linear to one value: each Q function and V."""
    layers = [nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.ELU()]
    return nn.Sequential(*layers, nn.Linear(hidden, 1))


def to_latent(in_dim: int, latent_dim: int) -> list[nn.Module]:
    return [nn.Linear(in_dim, latent_dim), nn.LayerNorm(latent_dim), nn.Sigmoid()]


class ObservationEncoder(nn.Module):
    """Each input to a latent in (0, 1) (image: 4 strided convolutions; states: an MLP); the latent is their mean."""

    def __init__(self, config: TDMPCConfig):
        super().__init__()
        self.image_key = next(iter(config.image_features), None)
        if self.image_key is not None:
            shape, hidden = config.image_features[self.image_key].shape, config.image_encoder_hidden_dim
            convs = []
            for kernel, in_channels in zip(IMAGE_KERNELS, (shape[0], hidden, hidden, hidden), strict=True):
                convs += [nn.Conv2d(in_channels, hidden, kernel, stride=2), nn.ReLU()]
            size = image_encoding_size(shape[1])
            self.image = nn.Sequential(*convs, nn.Flatten(), *to_latent(hidden * size * size, config.latent_dim))
        for key, name in ((OBS_STATE, "state"), (OBS_ENV_STATE, "env_state")):
            if key in config.input_features:
                dim, hidden = config.input_features[key].shape[0], config.state_encoder_hidden_dim
                layers = [nn.Linear(dim, hidden), nn.ELU(), *to_latent(hidden, config.latent_dim)]
                setattr(self, name, nn.Sequential(*layers))

    def forward(self, observation: dict[str, Tensor]) -> Tensor:
        features = []  # in LeRobot's order, which the mean's rounding follows
        if self.image_key is not None:
            images = observation[self.image_key]
            features.append(self.image(images.flatten(0, -4)).unflatten(0, images.shape[:-3]))
        for key, name in ((OBS_ENV_STATE, "env_state"), (OBS_STATE, "state")):
            if hasattr(self, name):
                features.append(getattr(self, name)(observation[key]))
        return torch.stack(features).mean(0)


class WorldModel(nn.Module):
    """TOLD: encoder, latent dynamics, reward, pi, the Q ensemble and V (all on leading batch dims)."""

    def __init__(self, config: TDMPCConfig):
        super().__init__()
        latent, hidden, action = config.latent_dim, config.mlp_dim, config.action_feature.shape[0]
        self.encoder = ObservationEncoder(config)
        self.dynamics = mlp(latent + action, hidden, latent, nn.LayerNorm(latent), nn.Sigmoid())
        self.reward = mlp(latent + action, hidden, 1)
        self.policy = mlp(latent, hidden, action)
        q_functions = [value_mlp(latent + action, hidden) for _ in range(config.q_ensemble_size)]
        self.q_functions = nn.ModuleList(q_functions)
        self.value = value_mlp(latent, hidden)
        for module in self.modules():  # orthogonal weights, zero biases; the reward and Q outputs start at zero
            if isinstance(module, nn.Linear | nn.Conv2d):
                gain = nn.init.calculate_gain("relu") if isinstance(module, nn.Conv2d) else 1.0
                nn.init.orthogonal_(module.weight, gain)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for head in [self.reward[-1], *(q[-1] for q in q_functions)]:
            nn.init.zeros_(cast(nn.Linear, head).weight)  # the last Linear of each

    def encode(self, observation: dict[str, Tensor]) -> Tensor:
        return self.encoder(observation)

    def next_latent_and_reward(self, z: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.cat([z, a], dim=-1)
        return self.dynamics(x), self.reward(x).squeeze(-1)

    def pi(self, z: Tensor, std: float = 0.0, generator: NoiseSource = None) -> Tensor:
        """tanh(policy(z)), plus Gaussian noise of `std` (drawn per row of the batch dim 0 from `generator`)."""
        action = torch.tanh(self.policy(z))
        if std > 0:
            action = action + std * draw(generator, z.shape[0], z.device, normal(tuple(action.shape[1:])))
        return action

    def V(self, z: Tensor) -> Tensor:  # noqa: N802 (the paper's name)
        return self.value(z).squeeze(-1)

    def Qs(self, z: Tensor, a: Tensor) -> Tensor:  # noqa: N802 (the paper's name)
        """Every Q function's value (k, *batch dims)."""
        x = torch.cat([z, a], dim=-1)
        return torch.stack([q(x).squeeze(-1) for q in self.q_functions])

    def min_of_two_Qs(self, z: Tensor, a: Tensor) -> Tensor:  # noqa: N802
        """The smaller value of two Q functions: drawn at random (with replacement; torch's global RNG) from more."""
        k = len(self.q_functions)
        chosen = torch.randint(k, (2,)).tolist() if k > 2 else [0, 1]
        x = torch.cat([z, a], dim=-1)
        return torch.minimum(*(self.q_functions[i](x).squeeze(-1) for i in chosen))
