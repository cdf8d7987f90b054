"""`hfpolicy export --format=lerobot` and evaluating a LeRobot checkpoint with `hfpolicy eval`."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from shared_data import LEROBOT_FIXTURES

from hfpolicy.cli import main as cli_main
from hfpolicy.constants import ACTION, EVAL_INFO_FILE, OBS_ENV_STATE, OBS_STATE
from hfpolicy.eval import main as eval_main
from hfpolicy.hub.export import export_policy
from hfpolicy.policies import FeatureType, Policy, PolicyFeature
from hfpolicy.policies.diffusion import DiffusionConfig
from hfpolicy.policies.diffusion.modeling import DiffusionPolicy

FIXTURES = LEROBOT_FIXTURES  # $HFPOLICY_SHARED_DIR/fixtures/lerobot-0.6.1 (default ../shared)


def saved_policy(folder: Path, **overrides) -> DiffusionPolicy:
    config = DiffusionConfig(
        input_features={
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
            OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
        down_dims=(16, 32),
        diffusion_step_embed_dim=16,
        noise_scheduler_type="DDIM",
        num_inference_steps=3,
        **overrides,
    )
    workspace = {"min": torch.zeros(2), "max": torch.full((2,), 512.0)}
    stats = {OBS_STATE: workspace, ACTION: workspace, OBS_ENV_STATE: {"min": torch.zeros(16), "max": torch.ones(16)}}
    policy = DiffusionPolicy(config, dataset_stats=stats).eval()
    policy.save_pretrained(folder)
    return policy


def test_export_cli_writes_a_lerobot_checkpoint_that_loads_back(tmp_path, capsys):
    policy = saved_policy(tmp_path / "policy")
    policy.set_cpu_kernels("torch")  # as the LeRobot checkpoint loads: torch's kernels, LeRobot's rounding
    out = tmp_path / "exports" / "lerobot"
    argv = ["export", f"--policy.path={tmp_path / 'policy'}", "--format=lerobot", f"--output_dir={out}"]
    assert cli_main(argv) == 0
    assert str(out) in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["normalization_mapping"]["STATE"] == "MIN_MAX"
    card = (out / "README.md").read_text()
    assert f"Exported by hfpolicy from {tmp_path / 'policy'}" in card and "library_name: lerobot" in card
    # LeRobot's way to load it first, hfpolicy's beside it, both naming the export where it is, with its files.
    lerobot_load = card.index(f'DiffusionPolicy.from_pretrained("{out}")')
    assert "from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy" in card
    for name in re.findall(r'config_filename="([^"]+)"', card):
        assert (out / name).is_file(), name
    assert lerobot_load < card.index(f'Policy.from_pretrained("{out}")')
    assert [p.name for p in out.parent.iterdir()] == ["lerobot"]  # no staging directory left behind

    loaded = Policy.from_pretrained(out)
    observation = {OBS_STATE: torch.rand(3, 2, 2) * 512, OBS_ENV_STATE: torch.rand(3, 2, 16)}
    noise = torch.randn(3, policy.config.horizon, 2)
    expected = policy.predict_action_chunk(observation, noise=noise)
    assert torch.equal(loaded.predict_action_chunk(observation, noise=noise), expected)

    # Never overwrites: the existing export is untouched and the error says what to do.
    before = (out / "model.safetensors").read_bytes()
    assert cli_main(argv) == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == before


def test_export_errors_leave_nothing_behind(tmp_path, capsys):
    policy = saved_policy(tmp_path / "policy", n_groups=4)  # LeRobot's U-Net cannot express n_groups != 8
    out = tmp_path / "exports" / "lerobot"
    with pytest.raises(Exception, match="n_groups=4"):
        export_policy(policy, out)
    assert list((tmp_path / "exports").iterdir()) == []
    assert cli_main(["export", f"--policy.path={tmp_path / 'policy'}", f"--output_dir={out}"]) == 2
    assert "n_groups=4" in capsys.readouterr().err and not out.exists()
    assert cli_main(["export", f"--policy.path={tmp_path / 'policy'}", "--format=onnx", f"--output_dir={out}"]) == 2
    assert "unknown --format='onnx'" in capsys.readouterr().err
    assert cli_main(["export", f"--policy.path={tmp_path / 'missing'}", f"--output_dir={out}"]) == 2
    assert str(tmp_path / "missing") in capsys.readouterr().err  # the error names the path it could not load


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"LeRobot 0.6.1 fixtures not found at {FIXTURES}")
def test_eval_cli_runs_a_lerobot_checkpoint(tmp_path, capsys):
    folder = tmp_path / "lerobot_dp_state_ddim"
    shutil.copytree(FIXTURES / "lerobot_dp_state_ddim" / "pretrained_model", folder)
    out = tmp_path / "eval"
    argv = [
        f"--policy.path={folder}",
        "--env.type=pusht",
        "--env.episode_length=10",
        "--eval.n_episodes=2",
        "--eval.batch_size=2",
        "--eval.n_videos=0",
        f"--output_dir={out}",
        "--policy.device=cpu",
        "--progress=false",
    ]
    assert eval_main(argv) == 0
    info = json.loads((out / EVAL_INFO_FILE).read_text())
    assert [e["length"] for e in info["per_episode"]] == [10, 10]
    assert "success" in capsys.readouterr().out
