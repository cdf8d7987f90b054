"""LeRobot checkpoints in hfpolicy (both layouts) and hfpolicy policies in LeRobot's layout.

The fixtures in ../shared/fixtures/lerobot-0.6.1 were written by LeRobot 0.6.1's own save_pretrained, with the action
chunks LeRobot computed from given observations and initial noise (reference.safetensors)."""

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from policies.reference_tolerance import assert_matches_reference, reference_tolerance
from safetensors.torch import load_file, save_file
from shared_data import LEROBOT_FIXTURES

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.hub import make_model_card
from hfpolicy.policies import FeatureType, NormMode, Policy, PolicyFeature, PolicyLoadError
from hfpolicy.policies.diffusion import DiffusionConfig
from hfpolicy.policies.diffusion.lerobot import _conditioning_order
from hfpolicy.policies.diffusion.modeling import DiffusionPolicy
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import LeRobotConversionWarning, is_lerobot_config, write_lerobot_checkpoint

FIXTURES = LEROBOT_FIXTURES  # $HFPOLICY_SHARED_DIR/fixtures/lerobot-0.6.1 (default ../shared)
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason=f"LeRobot 0.6.1 fixtures not found at {FIXTURES} (../shared beside the repo)"
)
# LeRobot computed the references with 2 intra-op threads; the reductions' order (and so the last bits of every sum)
# depends on the thread count: with 1 thread LeRobot itself misses its own reference by 2e-4 (action units ~500).
REFERENCE_THREADS = 2


@contextmanager
def reference_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(REFERENCE_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fixture_inputs(name: str) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    ref = load_file(str(FIXTURES / name / "reference.safetensors"))
    observation = {k.removeprefix("obs."): v for k, v in ref.items() if k.startswith("obs.")}
    return observation, ref["noise"], ref["actions"]


def chunk(policy: Policy, observation: dict[str, torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
    with reference_threads():
        return policy.predict_action_chunk(observation, noise=noise)


@needs_fixtures
@pytest.mark.parametrize("name", ["lerobot_dp_image_ddim", "lerobot_dp_state_ddim"])
def test_lerobot_checkpoint_acts_as_lerobot(name):
    policy = Policy.from_pretrained(FIXTURES / name / "pretrained_model")
    assert isinstance(policy, DiffusionPolicy) and not policy.training
    assert policy.config.converted_from.startswith("LeRobot checkpoint ")
    observation, noise, expected = fixture_inputs(name)
    actions = chunk(policy, observation, noise)
    assert_matches_reference(actions, expected)
    # The noise matters (the comparison is not vacuous): other noise moves the actions far past the tolerance.
    other = (chunk(policy, observation, torch.randn_like(noise)) - expected).abs().max().item()
    assert other > 1e-2 * expected.abs().max().item() > 100 * reference_tolerance(expected)


@needs_fixtures
def test_lerobot_config_fields_map_to_hfpolicy():
    image = Policy.from_pretrained(FIXTURES / "lerobot_dp_image_ddim" / "pretrained_model").config
    assert image.use_separate_rgb_encoder_per_camera and image.crop_shape == (84, 84) and image.resize_shape is None
    assert image.down_dims == (64, 128) and image.noise_scheduler_type == "DDIM" and image.num_inference_steps == 10
    assert image.mask_loss_for_padding is False and image.drop_n_last_frames == 7 and image.use_group_norm
    assert image.image_features[OBS_IMAGE].shape == (3, 96, 96)
    state = Policy.from_pretrained(FIXTURES / "lerobot_dp_state_ddim" / "pretrained_model").config
    # LeRobot's mapping has no ENV entry, so it leaves the environment state unnormalized; hfpolicy does the same.
    assert state.norm_mode(state.input_features[OBS_ENV_STATE], OBS_ENV_STATE) == NormMode.IDENTITY
    assert state.norm_mode(state.input_features[OBS_STATE], OBS_STATE) == NormMode.MIN_MAX
    assert state.pretrained_backbone_weights is None  # the weights are in the checkpoint, nothing is downloaded


def copy_fixture(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name / "pretrained_model", folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@needs_fixtures
def test_old_layout_with_stats_in_model_safetensors(tmp_path):
    """LeRobot < 0.4 kept the stats as policy buffers in model.safetensors and wrote no processor files."""
    name = "lerobot_dp_state_ddim"
    new = FIXTURES / name / "pretrained_model"
    stats = load_file(str(new / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    weights = load_file(str(new / "model.safetensors"))
    old = tmp_path / "old"
    old.mkdir()
    shutil.copyfile(new / "config.json", old / "config.json")
    buffers = {
        "normalize_inputs.buffer_observation_state.min": stats["observation.state.min"],
        "normalize_inputs.buffer_observation_state.max": stats["observation.state.max"],
    }
    for prefix in ("normalize_targets", "unnormalize_outputs"):
        buffers |= {f"{prefix}.buffer_action.{s}": stats[f"action.{s}"].clone() for s in ("min", "max")}
    save_file({**weights, **buffers}, str(old / "model.safetensors"))

    observation, noise, expected = fixture_inputs(name)
    policy = Policy.from_pretrained(old)
    assert_matches_reference(chunk(policy, observation, noise), expected)

    # A stat that was never set (LeRobot initialized its buffers to inf) is named in the error.
    save_file(
        {**weights, **buffers, "unnormalize_outputs.buffer_action.max": torch.full((2,), torch.inf)},
        str(old / "model.safetensors"),
    )
    with pytest.raises(LeRobotConversionError, match=r"unnormalize_outputs\.buffer_action\.max"):
        Policy.from_pretrained(old)


@needs_fixtures
def test_fields_that_change_actions_raise_and_others_warn(tmp_path):
    folder = copy_fixture("lerobot_dp_state_ddim", tmp_path)
    edit_config(folder, n_groups=16)
    with pytest.raises(LeRobotConversionError, match="n_groups=16"):
        Policy.from_pretrained(folder)

    folder = copy_fixture("lerobot_dp_state_ddim", tmp_path / "quantiles")
    pipeline = json.loads((folder / "policy_preprocessor.json").read_text())
    pipeline["steps"][3]["config"]["norm_map"]["STATE"] = "QUANTILES"
    (folder / "policy_preprocessor.json").write_text(json.dumps(pipeline))
    with pytest.raises(LeRobotConversionError, match="'observation.state' uses LeRobot normalization 'QUANTILES'"):
        Policy.from_pretrained(folder)

    folder = copy_fixture("lerobot_dp_state_ddim", tmp_path / "extra_step")
    pipeline = json.loads((folder / "policy_preprocessor.json").read_text())
    pipeline["steps"].append({"registry_name": "image_crop_resize_processor", "config": {}})
    (folder / "policy_preprocessor.json").write_text(json.dumps(pipeline))
    with pytest.raises(LeRobotConversionError, match="image_crop_resize_processor"):
        Policy.from_pretrained(folder)

    folder = copy_fixture("lerobot_dp_state_ddim", tmp_path / "compile")
    edit_config(folder, compile_model=True, gradient_checkpointing=True)
    with pytest.warns(LeRobotConversionWarning) as warned:
        policy = Policy.from_pretrained(folder)
    messages = " ".join(str(w.message) for w in warned)
    assert "compile_model=True" in messages and "gradient_checkpointing=True" in messages
    observation, noise, expected = fixture_inputs("lerobot_dp_state_ddim")
    assert_matches_reference(chunk(policy, observation, noise), expected)


@needs_fixtures
def test_missing_processor_file_is_named(tmp_path):
    folder = copy_fixture("lerobot_dp_state_ddim", tmp_path)
    (folder / "policy_postprocessor.json").unlink()
    with pytest.raises(PolicyLoadError, match="policy_postprocessor.json"):
        Policy.from_pretrained(folder)


def test_hfpolicy_configs_are_not_taken_for_lerobot_ones(tmp_path):
    config = small_config({OBS_STATE: (2,), OBS_ENV_STATE: (16,)})
    assert not is_lerobot_config(config.to_dict())
    assert is_lerobot_config({"type": "diffusion", "input_features": {OBS_STATE: {"type": "STATE", "shape": [2]}}})


# --- export ---------------------------------------------------------------------------------------------------------------
def small_config(inputs: dict[str, tuple[int, ...]], **overrides) -> DiffusionConfig:
    features = {
        key: PolicyFeature(FeatureType.IMAGE if len(shape) == 3 else FeatureType.STATE, shape)
        for key, shape in inputs.items()
    }
    fields = dict(
        input_features=features,
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
        down_dims=(16, 32),
        diffusion_step_embed_dim=16,
        spatial_softmax_num_keypoints=4,
        crop_shape=(28, 28),
        noise_scheduler_type="DDIM",
        num_inference_steps=4,
    )
    return DiffusionConfig(**{**fields, **overrides})


def random_policy(config: DiffusionConfig) -> DiffusionPolicy:
    torch.manual_seed(0)
    stats = {}
    for key, feature in {**config.input_features, **config.output_features}.items():
        size = feature.shape[0]
        stats[key] = {"mean": torch.rand(size), "std": torch.rand(size) + 0.1, "min": -torch.rand(size) * 100}
        stats[key]["max"] = torch.rand(size) * 100 + 1
    policy = DiffusionPolicy(config, dataset_stats=stats)
    policy.set_cpu_kernels("torch")  # LeRobot's rounding, as the converted policy has it
    with torch.no_grad():
        for parameter in policy.parameters():  # away from the initialization, so that every weight matters
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return policy.eval()


def random_observation(config: DiffusionConfig, batch: int = 2) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return {
        key: torch.rand(batch, config.n_obs_steps, *f.shape, generator=generator) * (1 if len(f.shape) == 3 else 50)
        for key, f in config.input_features.items()
    }


@pytest.mark.parametrize(
    "inputs",
    [
        {OBS_STATE: (2,), OBS_ENV_STATE: (16,)},
        # cameras and the environment state: LeRobot orders the conditioning differently (weights are permuted)
        {
            OBS_ENV_STATE: (4,),
            "observation.images.top": (3, 32, 32),
            OBS_STATE: (2,),
            "observation.images.side": (3, 32, 32),
        },
    ],
    ids=["state", "two_cameras_env_state"],
)
def test_export_round_trip_acts_identically(tmp_path, inputs):
    config = small_config(inputs)
    policy = random_policy(config)
    folder = tmp_path / "lerobot"
    folder.mkdir()
    write_lerobot_checkpoint(policy, folder)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"} <= names
    saved = json.loads((folder / "config.json").read_text())
    assert saved["type"] == "diffusion" and saved["input_features"][OBS_ENV_STATE]["type"] == "ENV"
    assert all(k.startswith("diffusion.") for k in load_file(str(folder / "model.safetensors")))

    loaded = Policy.from_pretrained(folder)
    observation = random_observation(config)
    noise = torch.randn(2, config.horizon, 2, generator=torch.Generator().manual_seed(2))
    expected = policy.predict_action_chunk(observation, noise=noise)
    torch.testing.assert_close(loaded.predict_action_chunk(observation, noise=noise), expected, rtol=0, atol=0)
    env_state = loaded.config.input_features[OBS_ENV_STATE]  # LeRobot's ENV type got hfpolicy's "state" mode
    assert loaded.config.norm_mode(env_state, OBS_ENV_STATE) == NormMode.MIN_MAX


def test_conditioning_permutation_moves_the_environment_state_after_the_cameras():
    config = small_config({OBS_ENV_STATE: (3,), OBS_IMAGE: (3, 32, 32), OBS_STATE: (2,)}, n_obs_steps=1)
    step, camera = config.diffusion_step_embed_dim, 2 * config.spatial_softmax_num_keypoints
    order = _conditioning_order(config).tolist()
    # hfpolicy: [step | env_state (3), state (2), camera]; LeRobot: [step | state (2), camera, env_state (3)]
    assert order[:step] == list(range(step))
    assert order[step : step + 3] == [step + 2 + camera + i for i in range(3)]
    assert order[step + 3 : step + 5] == [step, step + 1]
    assert order[step + 5 :] == [step + 2 + i for i in range(camera)]


def test_export_refuses_what_lerobot_cannot_express(tmp_path):
    policy = random_policy(small_config({OBS_STATE: (2,), OBS_ENV_STATE: (16,)}, n_groups=4))
    with pytest.raises(LeRobotConversionError, match="n_groups=4"):
        write_lerobot_checkpoint(policy, tmp_path)
    policy = random_policy(small_config({"observation.velocity": (2,), OBS_ENV_STATE: (16,)}))
    with pytest.raises(LeRobotConversionError, match="observation.velocity"):
        write_lerobot_checkpoint(policy, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


@needs_fixtures
def test_card_of_a_converted_policy_says_where_it_came_from():
    policy = Policy.from_pretrained(FIXTURES / "lerobot_dp_state_ddim" / "pretrained_model")
    card = str(make_model_card("user/converted", policy))
    assert "converted by hfpolicy from LeRobot checkpoint" in card and "lerobot_dp_state_ddim" in card
