"""DiffusionConfig: registration under --policy.type=diffusion, the config.json round trip, and clear errors."""

from dataclasses import dataclass, field

import draccus
import pytest
import torch
from diffusion_setup import image_config, observation_window, pusht_stats, state_config, training_batch

from hfpolicy.constants import ACTION, OBS_IMAGE, OBS_STATE
from hfpolicy.policies import DiffusionConfig, FeatureType, PolicyConfig, PolicyFeature, known_policy_types
from hfpolicy.policies.diffusion import DiffusionPolicy


@dataclass
class CommandLine:
    """What a command's config holds: a policy config chosen by --policy.type."""

    policy: PolicyConfig = field(default_factory=DiffusionConfig)  # the policy to build


def test_the_command_line_knows_the_diffusion_type():
    assert "diffusion" in known_policy_types()
    parsed = draccus.parse(
        CommandLine,
        args=["--policy.type=diffusion", "--policy.horizon=32", "--policy.noise_scheduler_type=DDIM",
              "--policy.num_inference_steps=10", "--policy.down_dims=[64, 128, 256]", "--policy.crop_shape=null"],
    )  # fmt: skip
    config = parsed.policy
    assert type(config) is DiffusionConfig
    assert (config.horizon, config.noise_scheduler_type, config.num_inference_steps) == (32, "DDIM", 10)
    assert config.down_dims == (64, 128, 256) and config.crop_shape is None


def test_config_json_round_trip_keeps_types():
    config = image_config(crop_shape=(80, 80), pretrained_backbone_weights=None, num_inference_steps=7)
    data = config.to_dict()
    assert data["type"] == "diffusion" and data["down_dims"] == [32, 64]
    restored = PolicyConfig.from_dict(data)
    assert restored == config and type(restored) is DiffusionConfig
    assert isinstance(restored.crop_shape, tuple) and isinstance(restored.optimizer_betas, tuple)
    assert restored.input_features[OBS_IMAGE] == PolicyFeature(FeatureType.IMAGE, (3, 96, 96))


IMAGE = {OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96))}
STATE = {OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}
OUT = {ACTION: PolicyFeature(FeatureType.ACTION, (2,))}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"horizon": 10}, r"horizon=10 must be a positive multiple of 4: .* halves it 2 times .* e\.g\. horizon=12"),
        ({"horizon": 12, "down_dims": (32, 64, 128, 256)}, r"multiple of 8: .* e\.g\. horizon=16"),
        ({"n_action_steps": 16}, r"n_action_steps must be <= horizon - n_obs_steps \+ 1 = 15"),
        (
            {"noise_scheduler_type": "DPM"},
            r"noise_scheduler_type='DPM' is not supported; use one of \('DDPM', 'DDIM'\)",
        ),
        ({"prediction_type": "v_prediction"}, r"prediction_type='v_prediction' is not supported"),
        ({"beta_schedule": "cosine"}, r"beta_schedule='cosine' is not supported"),
        ({"num_inference_steps": 101}, r"num_inference_steps=101 must be between 1 and num_train_timesteps=100"),
        ({"vision_backbone": "vit_b_16"}, r"vision_backbone='vit_b_16' is not supported"),
        ({"pretrained_backbone_weights": "IMAGENET1K_V1"}, r"set use_group_norm=False to use pretrained weights"),
        ({"down_dims": (30, 64)}, r"n_groups=8 must divide every entry of down_dims.*offending: \[30\]"),
        ({"down_dims": ()}, r"down_dims=\(\) is empty"),
        ({"kernel_size": 4}, r"kernel_size=4 must be odd"),
        ({"crop_shape": (84,)}, r"crop_shape=\(84,\) must be \(height, width\)"),
        ({"diffusion_step_embed_dim": 7}, r"diffusion_step_embed_dim=7 must be even"),
    ],
)
def test_bad_settings_are_rejected_with_the_fix(fields, message):
    with pytest.raises(ValueError, match=message):
        DiffusionConfig(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input_features": STATE}, r"needs at least one image input feature .* or 'observation.environment_state'"),
        ({"input_features": {**IMAGE, **STATE}, "crop_shape": (100, 84)}, r"crop_shape=\(100, 84\) is larger than"),
        (
            {"input_features": {OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (1, 96, 96))}},
            r"has 1 channels; the ResNet encoder needs RGB",
        ),
        (
            {
                "input_features": {
                    "observation.images.a": PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
                    "observation.images.b": PolicyFeature(FeatureType.IMAGE, (3, 64, 64)),
                }
            },
            r"different shapes .* use_separate_rgb_encoder_per_camera=True",
        ),
        ({"input_features": {**IMAGE, **STATE}, "output_features": {}}, r"no 'action' output feature"),
    ],
)
def test_features_that_cannot_drive_the_policy_are_rejected(fields, message):
    config = DiffusionConfig(**{"output_features": OUT, **fields})
    with pytest.raises(ValueError, match=message):
        DiffusionPolicy(config)


def test_separate_encoders_accept_cameras_of_different_sizes():
    inputs = {
        "observation.images.a": PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
        "observation.images.b": PolicyFeature(FeatureType.IMAGE, (3, 88, 88)),
        **STATE,
    }
    config = image_config(input_features=inputs, use_separate_rgb_encoder_per_camera=True)
    stats = {**pusht_stats(), "observation.images.a": pusht_stats()[OBS_IMAGE]}
    stats["observation.images.b"] = stats["observation.images.a"]
    policy = DiffusionPolicy(config, dataset_stats=stats)
    assert len(policy.rgb_encoders) == 2
    assert policy(training_batch(config, 2))["loss"].isfinite()


def test_batches_of_the_wrong_shape_name_the_fix():
    policy = DiffusionPolicy(state_config(), dataset_stats=pusht_stats())
    batch = training_batch(policy.config, 2)
    short = dict(batch, action=batch[ACTION][:, :8])
    with pytest.raises(ValueError, match=r"'action' has shape \(2, 8, 2\).*delta_timestamps=config.delta_timestamps"):
        policy(short)
    no_time_dim = dict(batch, **{OBS_STATE: batch[OBS_STATE][:, -1]})
    with pytest.raises(ValueError, match=r"'observation.state' has shape \(2, 2\); .* n_obs_steps=2"):
        policy(no_time_dim)
    observation = observation_window(policy.config, 1)
    observation[OBS_STATE] = torch.cat([observation[OBS_STATE]] * 2, dim=1)  # 4 steps of history instead of 2
    with pytest.raises(ValueError, match=r"n_obs_steps=2"):
        policy.predict_action_chunk(observation)
