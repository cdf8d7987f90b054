"""TD-MPC through the command line: `hfpolicy train --policy.type=tdmpc` on a scripted PushT recording (with
next.reward and the keypoints as observation.environment_state) trains, updates its target network, evaluates and
saves a policy that `hfpolicy eval` runs; a run stopped after 2 steps and resumed ends exactly as the uninterrupted
one (losses, weights and target network); a dataset without next.reward is refused naming the feature and how to
record it. On a fixed batch of recorded windows the losses fall and pi's actions approach the demonstrations'.
"""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hfpolicy.cli.flags import parse_flags
from hfpolicy.constants import ACTION, DONE, EVAL_INFO_FILE, METRICS_FILE, OBS_ENV_STATE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import DatasetMeta, PolicyDataset, dataset_to_policy_features
from hfpolicy.eval import main as eval_main
from hfpolicy.eval.cli import EvalPipelineConfig, load_policy_and_env_config
from hfpolicy.eval.episode_data import RolloutEpisode, rollout_features, write_episodes_dataset
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.policies import NormMode, Policy
from hfpolicy.policies.tdmpc import TDMPCConfig, TDMPCPolicy
from hfpolicy.training import main as train_main
from hfpolicy.training.config import TrainConfigError
from hfpolicy.training.data import configure_policy_features

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

    # --policy.use_mpc=false acts with pi alone: the saved policy plans (TDMPCConfig's default), the flag overrides it.
    assert policy.config.use_mpc
    flags = [f"--policy.path={saved}", "--env.type=pusht", "--policy.use_mpc=false", *eval_flags]
    pi_only, _ = load_policy_and_env_config(parse_flags(EvalPipelineConfig, flags, prog="hfpolicy eval"))
    assert not pi_only.config.use_mpc
    assert eval_main([*flags, f"--output_dir={tmp_path / 'pi'}"]) == 0
    with_pi = json.loads((tmp_path / "pi" / EVAL_INFO_FILE).read_text())["per_episode"]
    assert [e["rewards"] for e in with_pi] != [e["rewards"] for e in again]  # other actions than the planner's


def test_a_dataset_without_rewards_is_refused_naming_the_feature_and_how_to_record_it(pusht_state_dataset):
    features = dict(DatasetMeta.load(pusht_state_dataset, "local/pusht5").features)
    del features[REWARD]
    with pytest.raises(TrainConfigError) as error:
        configure_policy_features(TDMPCConfig(), features, [OBS_STATE, OBS_ENV_STATE])
    message = str(error.value)
    assert "'next.reward'" in message and "hfpolicy record" in message and "\n" not in message


def test_losses_fall_and_pi_approaches_the_demonstrations_on_a_fixed_batch(pusht_state_dataset):
    meta = PolicyDataset("local/pusht5", root=pusht_state_dataset, download_videos=False)
    inputs, outputs = dataset_to_policy_features(meta.features)
    config = TDMPCConfig(
        input_features={key: inputs[key] for key in (OBS_STATE, OBS_ENV_STATE)},
        output_features=outputs,
        latent_dim=16,
        mlp_dim=64,
        state_encoder_hidden_dim=32,
        normalization_mapping={"state": NormMode.MIN_MAX, "action": NormMode.MIN_MAX},  # PushT's pixel coordinates
    )
    dataset = PolicyDataset(
        "local/pusht5",
        root=pusht_state_dataset,
        delta_timestamps=config.delta_timestamps(meta.fps),
        download_videos=False,
    )
    indices = torch.linspace(0, len(dataset) - 1, 32).long().tolist()
    batch = {k: v for k, v in dataset.get_batch(indices).items() if isinstance(v, torch.Tensor)}
    assert batch[REWARD].shape == (32, 5) and batch[f"{REWARD}_is_pad"].any()  # the last window runs past its end
    torch.manual_seed(0)
    policy = TDMPCPolicy(config, dataset_stats=dataset.stats)
    optimizer = torch.optim.Adam(policy.get_optim_params(), lr=1e-3)

    def pi_error() -> float:
        """Mean L1 (normalized units) of pi's action at each window's first frame against the recorded one."""
        with torch.no_grad():
            normalized = policy.normalizer.normalize(batch)
            z = policy.model.encode({key: normalized[key][:, 0] for key in config.input_features})
            return (policy.model.pi(z) - normalized[ACTION][:, 0]).abs().mean().item()

    before, first = pi_error(), None
    for _ in range(150):
        losses = policy(batch)
        optimizer.zero_grad()
        losses["loss"].backward()
        optimizer.step()
        policy.after_optimizer_step()
        first = first or {name: value.item() for name, value in losses.items()}
    assert losses["loss"].item() < first["loss"] / 10, (first, losses)
    assert losses["reward_loss"].item() < first["reward_loss"] / 10
    assert pi_error() < before / 2, (before, pi_error())


def one_number_dataset(root, state_dim: int, action_dim: int):
    """4 episodes of 12 random frames with a `state_dim`-number state and an `action_dim`-number action, written as
    LeRobot writes them (a one-number feature is a plain parquet value, read back as one number per frame)."""
    rng, episodes = np.random.default_rng(0), []
    for seed in range(4):
        episode = RolloutEpisode(seed=seed)
        for _ in range(12):
            frame = {OBS_STATE: rng.normal(size=state_dim).astype(np.float32), REWARD: np.float32(rng.uniform()),
                     ACTION: rng.uniform(-1, 1, size=action_dim).astype(np.float32), SUCCESS: np.bool_(False),
                     DONE: np.bool_(False)}  # fmt: skip
            for key, value in frame.items():
                episode.frames.setdefault(key, []).append(value)
        episodes.append(episode)
    features = rollout_features({OBS_STATE: PolicyFeature(FeatureType.STATE, (state_dim,))}, (action_dim,))
    return write_episodes_dataset(root, "local/one_number", 10.0, features, episodes, "Move.")


def tiny_config_and_batch(root):
    """The dataset at `root` with a tiny TD-MPC's windows, the config, and a batch of its first 8 windows."""
    meta = PolicyDataset("local/one_number", root=root)
    inputs, outputs = dataset_to_policy_features(meta.features)
    config = TDMPCConfig(input_features={OBS_STATE: inputs[OBS_STATE]}, output_features=outputs, latent_dim=8,
                         mlp_dim=16, state_encoder_hidden_dim=8, horizon=3)  # fmt: skip
    dataset = PolicyDataset("local/one_number", root=root, delta_timestamps=config.delta_timestamps(meta.fps))
    return dataset, config, {k: v for k, v in dataset.get_batch(list(range(8))).items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize(("state_dim", "action_dim"), [(1, 2), (2, 1), (1, 1)])
def test_one_number_state_and_action_train_and_act_in_their_feature_shape(tmp_path, state_dim, action_dim):
    """A shape-(1,) feature comes out of a dataset as one number per frame (as LeRobot reads it); the policy gives
    it back its trailing 1, so a one-number state or action trains (it failed deep in the encoder before) and acts."""
    root = one_number_dataset(tmp_path / "data", state_dim, action_dim)
    dataset, config, batch = tiny_config_and_batch(root)
    if state_dim == 1:
        assert batch[OBS_STATE].shape == (8, 4)  # the dataset's own shape: one number per frame of the window
    policy = TDMPCPolicy(config, dataset_stats=dataset.stats)
    loss = policy(batch)["loss"]
    assert torch.isfinite(loss)
    loss.backward()
    policy.eval()
    policy.reset()
    action = policy.select_action({OBS_STATE: torch.zeros(3, state_dim)})
    assert action.shape == (3, action_dim)


def test_a_batch_in_another_shape_than_the_policy_feature_is_one_error_naming_it(tmp_path):
    root = one_number_dataset(tmp_path / "data", 2, 2)
    dataset, config, batch = tiny_config_and_batch(root)
    batch[OBS_STATE] = torch.cat([batch[OBS_STATE], batch[OBS_STATE][..., :1]], dim=-1)  # 3 numbers, not 2
    policy = TDMPCPolicy(config, dataset_stats=dataset.stats)
    with pytest.raises(ValueError, match=r"'observation.state' is \(8, 4, 3\), neither .* shape \(2,\)"):
        policy(batch)
