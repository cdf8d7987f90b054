"""TD-MPC through the command line: `hfpolicy train --policy.type=tdmpc` on a scripted PushT recording (with
next.reward and the keypoints as observation.environment_state) trains, updates its target network, evaluates and
saves a policy that `hfpolicy eval` runs; a run stopped after 2 steps and resumed ends exactly as the uninterrupted
one (losses, weights and target network); a dataset without next.reward is refused naming the feature and how to
record it."""

import json

import pytest
import torch
from safetensors.torch import load_file

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, OBS_ENV_STATE, OBS_STATE, REWARD
from hfpolicy.datasets import DatasetMeta
from hfpolicy.eval import main as eval_main
from hfpolicy.policies import Policy
from hfpolicy.policies.tdmpc import TDMPCConfig, TDMPCPolicy
from hfpolicy.training import main as train_main
from hfpolicy.training.config import TrainConfigError
from hfpolicy.training.setup import configure_policy_features

TINY_TDMPC = [
    "--policy.type=tdmpc",
    f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
    "--policy.latent_dim=8",
    "--policy.mlp_dim=32",
    "--policy.state_encoder_hidden_dim=16",
    "--policy.q_ensemble_size=3",
    "--policy.n_gaussian_samples=16",
    "--policy.n_pi_samples=4",
    "--policy.n_elites=4",
    "--policy.cem_iterations=2",
    "--batch_size=8",
    "--tracker=none",
    "--progress=false",
    "--num_threads=1",
    "--log_freq=1",
    "--save_freq=2",
    "--eval.freq=2",
    "--eval.n_episodes=2",
    "--eval.batch_size=2",
    "--eval.n_videos=0",
    "--env.episode_length=8",
]


def losses(out) -> list[float]:
    return [e["loss"] for e in map(json.loads, (out / METRICS_FILE).read_text().splitlines()) if "loss" in e]


def test_train_resume_and_eval_command_lines_with_tdmpc(pusht_state_dataset, tmp_path):
    assert REWARD in DatasetMeta.load(pusht_state_dataset, "local/pusht5").features  # the scripted recording's
    flags = [f"--dataset.root={pusht_state_dataset}", *TINY_TDMPC]
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    assert train_main([*flags, f"--output_dir={reference}", "--steps=4"]) == 0
    assert train_main([*flags, f"--output_dir={resumed}", "--steps=2"]) == 0
    assert train_main([f"--output_dir={resumed}", "--resume=true", "--steps=4"]) == 0
    assert len(losses(reference)) == 4 and losses(resumed) == losses(reference)  # exact, step by step

    saved = reference / "checkpoints" / "step_000004" / "pretrained_model"
    weights = [load_file(out / "checkpoints" / "step_000004" / "pretrained_model" / "model.safetensors") for out in (reference, resumed)]  # fmt: skip
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    policy = Policy.from_pretrained(saved)
    assert type(policy) is TDMPCPolicy and policy.config.q_ensemble_size == 3
    targets = [load_file(reference / "checkpoints" / f"step_00000{s}" / "pretrained_model" / "model.safetensors") for s in (2, 4)]  # fmt: skip
    names = [name for name in targets[0] if name.startswith("target_model.")]
    assert names and any(not torch.equal(targets[0][n], targets[1][n]) for n in names)  # updated at each step
    info = json.loads((reference / "eval" / "step_000004" / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 2

    eval_out = tmp_path / "eval"
    eval_flags = ["--eval.n_episodes=2", "--eval.batch_size=2", "--eval.n_videos=0", "--env.episode_length=8"]
    assert eval_main([f"--policy.path={saved}", "--env.type=pusht", *eval_flags, f"--output_dir={eval_out}"]) == 0
    again = json.loads((eval_out / EVAL_INFO_FILE).read_text())["per_episode"]
    assert [e["sum_reward"] for e in again] == [e["sum_reward"] for e in info["per_episode"]]  # seeded planning


def test_a_dataset_without_rewards_is_refused_naming_the_feature_and_how_to_record_it(pusht_state_dataset):
    features = dict(DatasetMeta.load(pusht_state_dataset, "local/pusht5").features)
    del features[REWARD]
    with pytest.raises(TrainConfigError) as error:
        configure_policy_features(TDMPCConfig(), features, [OBS_STATE, OBS_ENV_STATE])
    message = str(error.value)
    assert "'next.reward'" in message and "hfpolicy record" in message and "\n" not in message
