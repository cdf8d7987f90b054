"""TD-MPC to and from LeRobot (0.6): the four functions of `hfpolicy.policies.lerobot_format`. The config fields and
the networks are the same; only module names differ (MODELS, PARTS)."""

from typing import Any

from torch import Tensor

from hfpolicy.policies.config import PolicyFeature
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import check_lerobot_fields, lerobot_model_inputs
from hfpolicy.policies.tdmpc.configuration import TDMPCConfig

SHARED_FIELDS = (  # LeRobot TDMPCConfig fields that are TDMPCConfig fields of the same name and meaning
    "n_obs_steps", "n_action_repeats", "horizon", "n_action_steps", "image_encoder_hidden_dim",
    "state_encoder_hidden_dim", "latent_dim", "q_ensemble_size", "mlp_dim", "discount", "use_mpc", "cem_iterations",
    "max_std", "min_std", "n_gaussian_samples", "n_pi_samples", "uncertainty_regularizer_coeff", "n_elites",
    "elite_weighting_temperature", "gaussian_mean_momentum", "max_random_shift_ratio", "reward_coeff",
    "expectile_weight", "value_coeff", "consistency_coeff", "advantage_scaling", "pi_coeff", "temporal_decay_coeff",
    "target_model_momentum", "optimizer_lr",
)  # fmt: skip
IGNORED_FIELDS = {"use_amp": False}  # LeRobot's autocast; hfpolicy acts in float32

MODELS = (("model.", "model."), ("model_target.", "target_model."))  # (LeRobot, hfpolicy) prefixes
PARTS = (  # (LeRobot, hfpolicy) module names inside a model
    ("_encoder.image_enc_layers.", "encoder.image."),
    ("_encoder.state_enc_layers.", "encoder.state."),
    ("_encoder.env_state_enc_layers.", "encoder.env_state."),
    ("_dynamics.", "dynamics."),
    ("_reward.", "reward."),
    ("_pi.", "policy."),
    ("_Qs.", "q_functions."),
    ("_V.", "value."),
)


def config_from_lerobot(
    lerobot_config: dict[str, Any], input_features: dict[str, PolicyFeature], output_features: dict[str, PolicyFeature]
) -> TDMPCConfig:
    """TDMPCConfig from LeRobot's TD-MPC config.json dict (features already converted)."""
    check_lerobot_fields(lerobot_config, "TD-MPC", SHARED_FIELDS, IGNORED_FIELDS)
    fields = {name: lerobot_config[name] for name in SHARED_FIELDS if name in lerobot_config}
    inputs = lerobot_model_inputs(input_features, "TD-MPC")
    return TDMPCConfig(input_features=inputs, output_features=dict(output_features), **fields)


def config_to_lerobot(config: TDMPCConfig) -> dict[str, Any]:
    """LeRobot's TD-MPC config.json fields (besides the common ones lerobot_format writes)."""
    return {name: getattr(config, name) for name in SHARED_FIELDS}


def _rename(name: str, direction: int) -> str:
    """A weight's name in the other library's words (direction 0: LeRobot -> hfpolicy, 1: back); KeyError if unknown."""
    for models in MODELS:
        old_model, new_model = models[direction], models[1 - direction]
        if name.startswith(old_model):
            rest = name[len(old_model) :]
            for parts in PARTS:
                if rest.startswith(parts[direction]):
                    return new_model + parts[1 - direction] + rest[len(parts[direction]) :]
    raise KeyError(name)


def state_dict_from_lerobot(state_dict: dict[str, Tensor], config: TDMPCConfig) -> dict[str, Tensor]:
    """LeRobot TD-MPC weights renamed to TDMPCPolicy's; LeRobotConversionError names keys that are not TD-MPC's."""
    renamed, unknown = {}, []
    for name, value in state_dict.items():
        try:
            renamed[_rename(name, 0)] = value
        except KeyError:
            unknown.append(name)
    if unknown:
        raise LeRobotConversionError(
            f"the LeRobot checkpoint has weights that are not TD-MPC weights: {sorted(unknown)}"
        )
    return renamed


def state_dict_to_lerobot(state_dict: dict[str, Tensor], config: TDMPCConfig) -> dict[str, Tensor]:
    """TDMPCPolicy weights under LeRobot TD-MPC's names."""
    return {_rename(name, 1): value for name, value in state_dict.items()}
