"""ACT checkpoints written by LeRobot 0.6.1 load with `Policy.from_pretrained` and act exactly as LeRobot does: the
predicted chunk and the actions that temporal ensembling executes over 5 steps, within a tolerance scaled to the actions (policies/reference_tolerance.py), for the state fixture in
../shared and (when HFPOLICY_ACT_IMAGE_FIXTURE names one, made by make_act_fixture.py --variant image) the image
fixture. The weight names convert both ways, and an hfpolicy ACT exported in LeRobot's layout loads back identically."""

import os
from pathlib import Path

import pytest
import torch
from act_setup import image_config, observation, pusht_stats
from policies.reference_tolerance import reference_tolerance
from safetensors.torch import load_file
from shared_data import LEROBOT_FIXTURES

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.policies import NormMode, Policy
from hfpolicy.policies.act import ACTPolicy
from hfpolicy.policies.act.lerobot import (
    VAE_POSITIONS_KEY,
    config_from_lerobot,
    config_to_lerobot,
    state_dict_from_lerobot,
    state_dict_to_lerobot,
)
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import write_lerobot_checkpoint

FIXTURES = LEROBOT_FIXTURES  # $HFPOLICY_SHARED_DIR/fixtures/lerobot-0.6.1 (default ../shared)
STATE_FIXTURE = FIXTURES / "lerobot_act_state"
IMAGE_FIXTURE_ENV = "HFPOLICY_ACT_IMAGE_FIXTURE"


def load_lerobot_act(folder: Path) -> ACTPolicy:
    """hfpolicy's policy from a LeRobot fixture folder, through the one public loader."""
    policy = Policy.from_pretrained(folder / "pretrained_model")
    assert type(policy) is ACTPolicy and not policy.training
    return policy


def max_errors(policy: ACTPolicy, folder: Path) -> tuple[float, float, float]:
    """(chunk error, temporal-ensembling error, tolerance) against the fixture's reference.safetensors."""
    reference = load_file(folder / "reference.safetensors")
    observation = {key[4:]: value[:, None] for key, value in reference.items() if key.startswith("obs.")}
    chunk = policy.predict_action_chunk(observation, n_steps=policy.config.chunk_size)
    chunk_error = (chunk - reference["actions"]).abs().max().item()

    policy.config.temporal_ensemble_coeff, policy.config.n_action_steps = 0.01, 1  # as the fixture's script
    policy.reset()
    actions = []
    for t in range(reference["ensemble_actions"].shape[1]):
        prefix = f"ensemble_obs.{t}."
        step = {key[len(prefix) :]: value for key, value in reference.items() if key.startswith(prefix)}
        actions.append(policy.select_action(step))
    ensemble_error = (torch.stack(actions, dim=1) - reference["ensemble_actions"]).abs().max().item()
    return chunk_error, ensemble_error, reference_tolerance(reference["actions"])


def test_state_checkpoint_acts_as_lerobot():
    if not STATE_FIXTURE.is_dir():
        pytest.skip(f"{STATE_FIXTURE} is not present (it sits beside the clone on CI and dev machines)")
    policy = load_lerobot_act(STATE_FIXTURE)
    assert policy.config.chunk_size == 20 and OBS_ENV_STATE in policy.config.input_features
    assert policy.config.norm_mode(policy.config.input_features[OBS_ENV_STATE], OBS_ENV_STATE) == NormMode.IDENTITY
    assert policy.config.norm_mode(policy.config.input_features[OBS_STATE], OBS_STATE) == NormMode.MEAN_STD
    chunk_error, ensemble_error, tolerance = max_errors(policy, STATE_FIXTURE)
    assert chunk_error <= tolerance and ensemble_error <= tolerance, (chunk_error, ensemble_error, tolerance)


def test_image_checkpoint_acts_as_lerobot():
    folder = os.environ.get(IMAGE_FIXTURE_ENV)
    if not folder:
        pytest.skip(f"set {IMAGE_FIXTURE_ENV} to a folder made by make_act_fixture.py --variant image")
    policy = load_lerobot_act(Path(folder))
    assert policy.image_keys == ["observation.image"]
    chunk_error, ensemble_error, tolerance = max_errors(policy, Path(folder))
    print(f"image ACT fixture: chunk max abs error {chunk_error:.2e}, ensemble max abs error {ensemble_error:.2e}")
    assert chunk_error <= tolerance and ensemble_error <= tolerance, (chunk_error, ensemble_error, tolerance)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_weight_names_convert_both_ways(pre_norm):
    torch.manual_seed(0)
    config = image_config(pre_norm=pre_norm)
    policy = ACTPolicy(config, dataset_stats=pusht_stats())
    weights = {k: v for k, v in policy.state_dict().items() if not k.startswith("normalizer.")}
    lerobot = state_dict_to_lerobot(weights, config)
    assert all(name.startswith("model.") for name in lerobot)
    assert {"model.backbone.layer4.1.bn2.running_var", "model.decoder.layers.0.multihead_attn.in_proj_weight"} <= set(
        lerobot
    )
    assert ("model.encoder.norm.weight" in lerobot) == pre_norm and VAE_POSITIONS_KEY in lerobot
    back = state_dict_from_lerobot(lerobot, config)
    assert back.keys() == weights.keys() and all(torch.equal(back[k], weights[k]) for k in weights)
    assert config_from_lerobot(config_to_lerobot(config), config.input_features, config.output_features) == config
    with pytest.raises(LeRobotConversionError, match="model.not_an_act_weight"):
        state_dict_from_lerobot({**lerobot, "model.not_an_act_weight": torch.zeros(1)}, config)


def test_exported_checkpoint_loads_back_with_identical_actions(tmp_path):
    torch.manual_seed(0)
    policy = ACTPolicy(image_config(temporal_ensemble_coeff=0.05, n_action_steps=1), dataset_stats=pusht_stats())
    policy.eval()
    write_lerobot_checkpoint(policy, tmp_path)
    loaded = Policy.from_pretrained(tmp_path)
    assert type(loaded) is ACTPolicy and loaded.config.converted_from is not None
    assert loaded.config.temporal_ensemble_coeff == 0.05
    for name, value in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    steps = [observation(policy.config, 2, phase=0.4 * t, time_dim=False) for t in range(3)]
    actions = []
    for p in (policy, loaded):
        p.reset()
        actions.append(torch.stack([p.select_action(o) for o in steps]))
    torch.testing.assert_close(actions[1], actions[0], rtol=0, atol=0)
