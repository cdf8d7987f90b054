"""TD-MPC checkpoints written by LeRobot 0.6.1 load with `Policy.from_pretrained` and compute what LeRobot computed:
the training loss and each of its parts, the latent, pi, V, the Q ensemble, the dynamics and reward, and the actions
select_action returns step by step with planning off, within a tolerance scaled to each reference
(policies/reference_tolerance.py); for the state fixture in ../shared and (when HFPOLICY_TDMPC_IMAGE_FIXTURE names
one, made by make_tdmpc_fixture.py --variant image) the image fixture. The weight names convert both ways; an export
loads back identically, and LeRobot 0.6.1 itself (a side venv named by HFPOLICY_LEROBOT_PYTHON) reloads an export of
a policy hfpolicy trained further with the loss and actions hfpolicy computes. `hfpolicy eval` runs the image
fixture in hfpolicy's xArm env."""

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from policies.reference_tolerance import assert_matches_reference
from safetensors.torch import load_file, save_file
from shared_data import LEROBOT_FIXTURES

from hfpolicy.cli.flags import parse_flags
from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.eval import main as eval_main
from hfpolicy.eval.cli import EvalPipelineConfig, load_policy_and_env_config
from hfpolicy.policies import Policy
from hfpolicy.policies.errors import LeRobotConversionError
from hfpolicy.policies.lerobot_format import write_lerobot_checkpoint
from hfpolicy.policies.tdmpc import TDMPCPolicy
from hfpolicy.policies.tdmpc.lerobot import state_dict_from_lerobot, state_dict_to_lerobot

STATE_FIXTURE = LEROBOT_FIXTURES / "lerobot_tdmpc_state"
IMAGE_FIXTURE_ENV = "HFPOLICY_TDMPC_IMAGE_FIXTURE"
LEROBOT_PYTHON_ENV = "HFPOLICY_LEROBOT_PYTHON"
LOSS_PARTS = ("loss", "consistency_loss", "reward_loss", "Q_value_loss", "V_value_loss", "pi_loss")


def fixture_folders() -> list:
    image = os.environ.get(IMAGE_FIXTURE_ENV)
    image_param = pytest.param(
        Path(image) if image else None,
        id="image",
        marks=[] if image else pytest.mark.skip(f"set {IMAGE_FIXTURE_ENV} to a make_tdmpc_fixture.py --variant image"),
    )
    return [pytest.param(STATE_FIXTURE, id="state"), image_param]


def load_fixture(folder: Path) -> tuple[TDMPCPolicy, dict[str, torch.Tensor]]:
    if not folder.is_dir():
        pytest.skip(f"{folder} is not present (it sits beside the clone on CI and dev machines)")
    policy = Policy.from_pretrained(folder / "pretrained_model")
    assert type(policy) is TDMPCPolicy and not policy.training
    return policy, load_file(folder / "reference.safetensors")


def prefixed(reference: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix) :]: value for key, value in reference.items() if key.startswith(prefix)}


def training_batch(reference: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value for key, value in prefixed(reference, "train.").items() if not key.endswith("loss")}


def pi_actions(policy: TDMPCPolicy, reference: dict[str, torch.Tensor]) -> torch.Tensor:
    """The actions select_action returns step by step with planning off, after reset()."""
    policy.config.use_mpc = False
    policy.reset()
    steps = sorted({int(key.split(".")[1]) for key in reference if key.startswith("steps_obs.")})
    return torch.stack([policy.select_action(prefixed(reference, f"steps_obs.{t}.")) for t in steps], dim=1)


@pytest.mark.parametrize("folder", fixture_folders())
def test_lerobot_checkpoint_computes_lerobots_losses_values_and_actions(folder):
    policy, reference = load_fixture(folder)
    with torch.no_grad():
        losses = policy(training_batch(reference))
    for name in LOSS_PARTS:
        assert_matches_reference(losses[name].reshape(1), reference[f"train.{name}"])

    with torch.no_grad():
        z = policy.model.encode(policy.normalizer.normalize(prefixed(reference, "obs.")))
        next_z, reward = policy.model.next_latent_and_reward(z, reference["model.a"])
        outputs = {
            "z": z,
            "pi": policy.model.pi(z),
            "V": policy.model.V(z),
            "Qs": policy.model.Qs(z, reference["model.a"]),
            "next_z": next_z,
            "reward": reward,
        }
    for name, value in outputs.items():
        assert_matches_reference(value, reference[f"model.{name}"])
    actions = pi_actions(policy, reference)
    assert_matches_reference(actions, reference["steps_actions_pi"])
    assert torch.equal(actions[:, 0], actions[:, 1])  # n_action_repeats=2: each action twice


def test_weight_names_convert_both_ways():
    policy, _ = load_fixture(STATE_FIXTURE)
    weights = {k: v for k, v in policy.state_dict().items() if not k.startswith("normalizer.")}
    lerobot = state_dict_to_lerobot(weights, policy.config)
    assert lerobot.keys() == load_file(STATE_FIXTURE / "pretrained_model" / "model.safetensors").keys()
    back = state_dict_from_lerobot(lerobot, policy.config)
    assert back.keys() == weights.keys() and all(torch.equal(back[k], weights[k]) for k in weights)
    with pytest.raises(LeRobotConversionError, match="model._not_a_part.weight"):
        state_dict_from_lerobot({**lerobot, "model._not_a_part.weight": torch.zeros(1)}, policy.config)


def trained_further(folder: Path) -> tuple[TDMPCPolicy, dict[str, torch.Tensor]]:
    """The fixture's policy after 3 more Adam steps (and target updates) in hfpolicy: weights LeRobot never saw."""
    policy, reference = load_fixture(folder)
    optimizer = torch.optim.Adam(policy.get_optim_params(), lr=1e-3)
    policy.train()
    for _ in range(3):
        optimizer.zero_grad()
        policy(training_batch(reference))["loss"].backward()
        optimizer.step()
        policy.after_optimizer_step()
    return policy.eval(), reference


@pytest.mark.parametrize("folder", fixture_folders())
def test_exported_checkpoint_loads_back_with_identical_outputs(folder, tmp_path):
    policy, reference = trained_further(folder)
    write_lerobot_checkpoint(policy, tmp_path)
    loaded = Policy.from_pretrained(tmp_path)
    assert type(loaded) is TDMPCPolicy and loaded.config.converted_from is not None
    for name, value in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    with torch.no_grad():
        assert torch.equal(loaded(training_batch(reference))["loss"], policy(training_batch(reference))["loss"])
    assert torch.equal(pi_actions(loaded, reference), pi_actions(policy, reference))


def lerobot_python() -> str:
    python = os.environ.get(LEROBOT_PYTHON_ENV)
    if not python:
        pytest.skip(f"set {LEROBOT_PYTHON_ENV} to the python of a side venv with lerobot==0.6.1 to run LeRobot itself")
    if subprocess.run([python, "-c", "import lerobot.policies.tdmpc"], capture_output=True).returncode != 0:
        pytest.skip(f"{LEROBOT_PYTHON_ENV}={python} cannot import lerobot.policies.tdmpc")
    return python


@pytest.mark.parametrize("folder", fixture_folders())
def test_lerobot_reloads_an_export_with_hfpolicys_loss_and_actions(folder, tmp_path):
    """LeRobot's own check script (check_tdmpc_fixture.py in ../shared) on an export with hfpolicy's outputs as the
    reference: it prints LeRobot's loss and its pi actions' difference from hfpolicy's."""
    python = lerobot_python()
    policy, reference = trained_further(folder)
    write_lerobot_checkpoint(policy, tmp_path / "pretrained_model")
    ours = {f"train.{k}": v for k, v in training_batch(reference).items()}
    ours.update({k: v for k, v in reference.items() if k.startswith("steps_obs.")})
    with torch.no_grad():
        ours["train.loss"] = policy(training_batch(reference))["loss"].reshape(1)
    ours["steps_actions_pi"] = pi_actions(policy, reference)
    save_file(ours, tmp_path / "reference.safetensors")
    check = subprocess.run(
        [python, str(LEROBOT_FIXTURES / "check_tdmpc_fixture.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr[-3000:]
    loss = float(re.search(r"^loss (\S+)", check.stdout, re.M).group(1))
    actions_error = float(re.search(r"pi actions max diff (\S+)", check.stdout).group(1))
    print(f"LeRobot 0.6.1 on hfpolicy's export: loss {loss} (hfpolicy {ours['train.loss'].item()}), {actions_error=}")
    assert_matches_reference(torch.tensor([loss]), ours["train.loss"])
    assert actions_error <= 5e-6 * ours["steps_actions_pi"].abs().max().item()


def test_hfpolicy_eval_runs_a_lerobot_image_checkpoint_in_the_xarm_env(tmp_path, capsys):
    """`hfpolicy eval` of LeRobot's image TD-MPC checkpoint (xArm's features: 84x84 image + 4-dim state, 4-dim action)
    in hfpolicy's xArm env: the env renders pixels_agent_pos observations, chosen from the policy's inputs; MPPI plans
    (the checkpoint's use_mpc=true) and the episodes, finite, are the same in batches of 2 and of 1 (a function of
    their seeds); the two seeds give two episodes."""
    image = os.environ.get(IMAGE_FIXTURE_ENV)
    if not image:
        pytest.skip(f"set {IMAGE_FIXTURE_ENV} to a make_tdmpc_fixture.py --variant image")
    checkpoint = Path(image) / "pretrained_model"
    flags = [f"--policy.path={checkpoint}", "--env.type=xarm", "--env.task=XarmLift-v0", "--env.episode_length=6"]
    flags += ["--eval.n_episodes=2", "--eval.n_videos=0", "--progress=false", "--num_threads=1"]
    policy, env_config = load_policy_and_env_config(parse_flags(EvalPipelineConfig, flags, prog="hfpolicy eval"))
    assert type(policy) is TDMPCPolicy and policy.config.use_mpc and env_config.obs_type == "pixels_agent_pos"

    episodes = []
    for batch_size in (2, 1):
        out = tmp_path / f"batch{batch_size}"
        assert eval_main([*flags, f"--eval.batch_size={batch_size}", f"--output_dir={out}"]) == 0
        assert capsys.readouterr().out.startswith("success ")
        episodes.append(json.loads((out / EVAL_INFO_FILE).read_text())["per_episode"])
    for episode in episodes[0]:
        assert episode["length"] == 6 and len(episode["rewards"]) == 6
        assert all(math.isfinite(x) for x in [episode["sum_reward"], episode["max_reward"], *episode["rewards"]])
    assert [e["seed"] for e in episodes[0]] == [100000, 100001] and episodes[0][0]["rewards"] != episodes[0][1][
        "rewards"
    ]
    assert episodes[1] == episodes[0]
