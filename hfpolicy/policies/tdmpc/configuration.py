"""Configuration of TD-MPC in its FOWM variant (Hansen et al., 2022; Feng et al., 2023), with LeRobot 0.6.1's fields
and defaults (its xArm lift setup; docs/tdmpc.md). Inputs: `observation.state`, `observation.environment_state` and
at most one square image."""

from dataclasses import dataclass, field
from typing import ClassVar

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.policies.config import NormMode, PolicyConfig

STATE_KEYS = (OBS_STATE, OBS_ENV_STATE)
IMAGE_KERNELS = (7, 5, 3, 3)  # the image encoder's convolutions, each with stride 2


def image_encoding_size(size: int) -> int:
    """The side of the image encoder's last feature map for images of `size` x `size` pixels."""
    for kernel in IMAGE_KERNELS:
        size = (size - kernel) // 2 + 1
    return size


@PolicyConfig.register_subclass("tdmpc")
@dataclass
class TDMPCConfig(PolicyConfig):
    """TD-MPC (FOWM): a latent world model (encoder, dynamics, reward, Q ensemble, V, policy pi) that plans with MPPI."""

    # --- timing -----------------------------------------------------------------------------------------------------
    n_obs_steps: int = 1  # TD-MPC encodes the current observation only (must be 1)
    n_action_repeats: int = 2  # times each chosen action is executed (the FOWM setup: 2)
    horizon: int = 5  # planning horizon, and the steps of a training window
    n_action_steps: int = 1  # planned actions executed per plan (> 1 needs n_action_repeats=1 and use_mpc)

    # --- normalization ----------------------------------------------------------------------------------------------
    normalization_mapping: dict[str, NormMode] = field(
        default_factory=lambda: {"image": NormMode.IDENTITY, "state": NormMode.IDENTITY, "action": NormMode.MIN_MAX}
    )  # feature type or key -> mode; actions must be min_max (the planner works in [-1, 1])

    # --- networks ---------------------------------------------------------------------------------------------------
    image_encoder_hidden_dim: int = 32  # channels of the image encoder's 4 convolutions
    state_encoder_hidden_dim: int = 256  # hidden width of the state encoders' MLPs
    latent_dim: int = 50  # size of the latent state
    q_ensemble_size: int = 5  # Q functions in the ensemble
    mlp_dim: int = 512  # hidden width of the dynamics, reward, pi, Q and V MLPs
    discount: float = 0.9  # discount factor gamma of returns and TD targets

    # --- planning (acting) ------------------------------------------------------------------------------------------
    use_mpc: bool = True  # plan with MPPI; False: act with the policy network pi alone (deterministic)
    cem_iterations: int = 6  # MPPI iterations per plan
    max_std: float = 2.0  # initial (and largest) std of the Gaussian action samples
    min_std: float = 0.05  # smallest std of the Gaussian; also the noise added to pi's samples while planning
    n_gaussian_samples: int = 512  # action sequences drawn from the Gaussian per iteration (>= 1)
    n_pi_samples: int = 51  # action sequences rolled out with pi (with min_std noise) per plan
    uncertainty_regularizer_coeff: float = 1.0  # lambda: values are penalized by lambda x the Q ensemble's std
    n_elites: int = 50  # best sequences that update the Gaussian each iteration
    elite_weighting_temperature: float = 0.5  # softmax temperature over the elites' values
    gaussian_mean_momentum: float = 0.1  # the Gaussian's mean <- momentum * mean + (1 - momentum) * elite mean

    # --- training ---------------------------------------------------------------------------------------------------
    max_random_shift_ratio: float = 0.0476  # random image shift (fraction of the image size) in training; 0: none
    reward_coeff: float = 0.5  # weight of the reward regression loss
    expectile_weight: float = 0.9  # tau of V's expectile regression (V below its target weighs tau)
    value_coeff: float = 0.1  # weight of the Q (TD) and V (expectile) losses
    consistency_coeff: float = 20.0  # weight of the latent consistency loss
    advantage_scaling: float = 3.0  # pi's advantage-weighted regression weights exp(scaling x advantage), at most 100
    pi_coeff: float = 0.5  # weight of pi's loss
    temporal_decay_coeff: float = 0.5  # loss weight of the window's step t: coeff ** t
    target_model_momentum: float = 0.995  # the target network <- momentum * target + (1 - momentum) * weights, per step

    # --- training presets (LeRobot's: Adam, no decay, constant learning rate) ---------------------------------------
    optimizer_lr: float = 3e-4  # Adam(W) learning rate
    optimizer_weight_decay: float = 0.0  # AdamW weight decay (0: Adam)

    window_fields: ClassVar[tuple[str, ...]] = ("horizon",)  # it sets the training window
    acting_fields: ClassVar[frozenset[str]] = PolicyConfig.acting_fields | {
        "n_action_repeats",
        "horizon",
        "discount",
        "use_mpc",
        "cem_iterations",
        "max_std",
        "min_std",
        "n_gaussian_samples",
        "n_pi_samples",
        "uncertainty_regularizer_coeff",
        "n_elites",
        "elite_weighting_temperature",
        "gaussian_mean_momentum",
        "max_random_shift_ratio",
        "reward_coeff",
        "expectile_weight",
        "value_coeff",
        "consistency_coeff",
        "advantage_scaling",
        "pi_coeff",
        "temporal_decay_coeff",
        "target_model_momentum",
    }

    def validate_settings(self) -> None:
        if self.n_obs_steps != 1:
            raise ConfigFieldError(self, "TD-MPC encodes the current observation only: {n_obs_steps} must be 1")
        for name in ("horizon", "n_action_repeats", "n_action_steps", "latent_dim", "mlp_dim", "cem_iterations"):
            if getattr(self, name) < 1:
                raise ConfigFieldError(self, f"{{{name}}} must be >= 1")
        if self.q_ensemble_size < 2:
            raise ConfigFieldError(self, "{q_ensemble_size} must be >= 2 (values take the minimum of two Q functions)")
        if self.n_gaussian_samples < 1 or self.n_pi_samples < 0:
            raise ConfigFieldError(self, "{n_gaussian_samples} must be >= 1 and {n_pi_samples} >= 0")
        if not 1 <= self.n_elites <= self.n_gaussian_samples + self.n_pi_samples:
            raise ConfigFieldError(self, "{n_elites} must be between 1 and n_gaussian_samples + n_pi_samples")
        if not 0 < self.min_std <= self.max_std:
            raise ConfigFieldError(self, "{min_std} must be > 0 and <= {max_std}")
        if self.n_action_steps > 1 and (self.n_action_repeats != 1 or not self.use_mpc):
            raise ConfigFieldError(
                self,
                "executing several planned actions ({n_action_steps}) needs {n_action_repeats=1} and {use_mpc=True}",
            )
        if self.n_action_steps > self.horizon:
            raise ConfigFieldError(self, "{n_action_steps} must be <= {horizon}: the plan has horizon actions")

    def validate_features(self) -> None:
        super().validate_features()
        others = [key for key in self.state_features if key not in STATE_KEYS]
        if others:
            raise ConfigFieldError(
                self, "TD-MPC takes the vector inputs {known} only; drop {others} from the input features",
                known=STATE_KEYS, others=others,
            )  # fmt: skip
        if len(self.image_features) > 1:
            raise ConfigFieldError(
                self, "TD-MPC (as LeRobot's) encodes one image; the inputs have {keys}: keep one camera",
                keys=list(self.image_features),
            )  # fmt: skip
        for key, feature in self.image_features.items():
            if feature.shape[1] != feature.shape[2]:
                raise ConfigFieldError(
                    self, "image feature {key} is {shape}: TD-MPC (as LeRobot's) needs square images; resize them",
                    key=repr(key), shape=tuple(feature.shape),
                )  # fmt: skip
            if image_encoding_size(feature.shape[1]) < 1:
                raise ConfigFieldError(
                    self, "image feature {key} is {shape}: the encoder's strided convolutions need 39 pixels a side",
                    key=repr(key), shape=tuple(feature.shape),
                )  # fmt: skip
        if self.norm_mode(self.action_feature, ACTION) != NormMode.MIN_MAX:
            raise ConfigFieldError(
                self,
                "TD-MPC plans actions in [-1, 1]: normalization_mapping must map action to min_max, got {got}",
                got=self.norm_mode(self.action_feature, ACTION).value,
            )

    @property
    def observation_delta_indices(self) -> list[int]:
        """The current observation and the horizon after it (the consistency and TD targets)."""
        return list(range(self.horizon + 1))

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.horizon))

    @property
    def reward_delta_indices(self) -> list[int]:
        return list(range(self.horizon))

    @property
    def drop_n_last_frames(self) -> int:
        """Every frame starts a training sample (steps past an episode's end are masked in the losses)."""
        return 0
