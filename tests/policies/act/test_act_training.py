"""ACT learns and runs through the command line: on one fixed batch of real PushT windows the L1 error of the acting
policy (zero latent) falls 4x; `hfpolicy train --policy.type=act` trains, evaluates and saves a policy that
`hfpolicy eval` loads and evaluates."""

import json

import pytest
import torch
from act_setup import state_config

from hfpolicy.constants import ACTION, EVAL_INFO_FILE, METRICS_FILE, OBS_ENV_STATE, OBS_STATE
from hfpolicy.datasets import PolicyDataset, dataset_to_policy_features
from hfpolicy.eval import main as eval_main
from hfpolicy.policies import Policy
from hfpolicy.policies.act import ACTPolicy
from hfpolicy.training import main as train_main

BATCH_SIZE = 16
STEPS = 150
TINY_ACT = [
    "--policy.type=act",
    f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
    "--policy.dim_model=32",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=64",
    "--policy.n_encoder_layers=1",
    "--policy.n_vae_encoder_layers=1",
    "--policy.latent_dim=4",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=5",
    "--batch_size=8",
    "--tracker=none",
    "--progress=false",
]


@pytest.mark.shared_data
def test_acting_error_falls_4x_on_a_fixed_batch_of_real_pusht_windows(pusht_human_dataset):
    meta = PolicyDataset("local/pusht5", root=pusht_human_dataset, download_videos=False)
    inputs, outputs = dataset_to_policy_features(meta.features)
    config = state_config(
        input_features={key: inputs[key] for key in (OBS_STATE, OBS_ENV_STATE)}, output_features=outputs, dropout=0.0
    )
    dataset = PolicyDataset(
        "local/pusht5",
        root=pusht_human_dataset,
        delta_timestamps=config.delta_timestamps(meta.fps),
        download_videos=False,
    )
    indices = torch.linspace(0, len(dataset) - 1, BATCH_SIZE).long().tolist()
    batch = {k: v for k, v in dataset.get_batch(indices).items() if isinstance(v, torch.Tensor)}
    assert batch[ACTION].shape == (BATCH_SIZE, 10, 2) and batch[f"{ACTION}_is_pad"].any()  # the last window is padded

    torch.manual_seed(0)
    policy = ACTPolicy(config, dataset_stats=dataset.stats)
    optimizer = torch.optim.AdamW(policy.get_optim_params(), lr=1e-3)

    def acting_error() -> float:
        """Mean L1 (normalized units) of the actions the policy executes (zero latent) on the unpadded steps."""
        policy.eval()
        with torch.no_grad():
            normalized = policy.normalizer.normalize(batch)
            predicted = policy.generate_actions(normalized)
            valid = ~batch[f"{ACTION}_is_pad"]
            error = (predicted - normalized[ACTION]).abs()[valid].mean().item()
        policy.train()
        return error

    before = acting_error()
    for _ in range(STEPS):
        loss = policy(batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = acting_error()
    assert before > 0.3, before  # standardized actions: an untrained policy is off by about their spread
    assert after < before / 4, f"acting L1 {before:.3f} -> {after:.3f}"


def test_train_and_eval_command_lines_with_act(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    flags = [f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY_ACT, "--steps=4", "--log_freq=1"]
    flags += ["--eval.freq=4", "--eval.n_episodes=2", "--eval.batch_size=2", "--eval.n_videos=0"]
    assert train_main([*flags, "--env.episode_length=8"]) == 0
    entries = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    assert [e["step"] for e in entries if "loss" in e] == [1, 2, 3, 4]
    assert (out / "training_curve.png").stat().st_size > 1000  # drawn at the evaluation, without a push
    saved = out / "checkpoints" / "step_000004" / "pretrained_model"
    policy = Policy.from_pretrained(saved)
    assert type(policy) is ACTPolicy and (policy.config.chunk_size, policy.config.n_action_steps) == (10, 5)
    config = json.loads((out / "train_config.json").read_text())
    assert config["policy"]["type"] == "act" and config["policy"]["optimizer_lr"] == 1e-5

    eval_out = tmp_path / "eval"
    eval_flags = ["--eval.n_episodes=2", "--eval.batch_size=2", "--eval.n_videos=0", "--env.episode_length=8"]
    code = eval_main([f"--policy.path={saved}", "--env.type=pusht", *eval_flags, f"--output_dir={eval_out}"])
    assert code == 0
    info = json.loads((eval_out / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 2 and all(e["length"] == 8 for e in info["per_episode"])
