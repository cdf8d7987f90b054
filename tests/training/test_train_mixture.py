"""Training on several datasets at once: `--dataset.root='[a,b]'` with `--dataset.weights`, and its bad input."""

import json

import numpy as np
import pytest
from safetensors.torch import load_file

from hfpolicy.constants import METRICS_FILE, OBS_ENV_STATE, OBS_STATE
from hfpolicy.datasets import PolicyDataset
from hfpolicy.training import main

TINY = [
    f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
    "--policy.type=diffusion",
    "--policy.down_dims=[16,32]",
    "--policy.diffusion_step_embed_dim=16",
    "--policy.noise_scheduler_type=DDIM",
    "--policy.num_inference_steps=2",
    "--batch_size=8",
    "--tracker=none",
    "--progress=false",
    "--num_threads=1",
    "--eval.freq=0",
]


@pytest.fixture(scope="module")
def second_pusht(pusht_zarr_path, tmp_path_factory):
    from hfpolicy.datasets import convert_pusht_zarr

    root = tmp_path_factory.mktemp("pusht_b") / "pusht_b"
    return convert_pusht_zarr(
        pusht_zarr_path, root, repo_id="local/pusht_b", episodes=[10, 11], environment_state=True, progress=False
    )


def test_a_run_on_two_datasets_trains_on_their_pooled_stats(pusht_state_dataset, second_pusht, tmp_path):
    out = tmp_path / "run"
    roots = f"--dataset.root=[{pusht_state_dataset},{second_pusht}]"
    assert main([roots, "--dataset.weights=[0.7,0.3]", f"--output_dir={out}", *TINY, "--steps=2"]) == 0
    assert [json.loads(line)["step"] for line in (out / METRICS_FILE).read_text().splitlines() if "loss" in line]
    config = json.loads((out / "train_config.json").read_text())
    assert config["dataset"]["weights"] == [0.7, 0.3] and str(second_pusht) in config["dataset"]["root"]
    # the policy normalizes with the union's stats (from both datasets' frames)
    states = np.concatenate(
        [
            PolicyDataset("x", root=r).get_batch(range(PolicyDataset("x", root=r).num_frames))[OBS_STATE].numpy()
            for r in (pusht_state_dataset, second_pusht)
        ]
    ).astype(np.float64)
    tensors = load_file(next((out / "checkpoints").rglob("model.safetensors")))
    for stat, want in (("min", states.min(0)), ("max", states.max(0))):  # this policy normalizes by min/max
        got = tensors[f"normalizer.stats.observation_state.{stat}"].numpy().reshape(-1)
        assert np.allclose(got, want, atol=1e-4), stat


def test_mixture_flags_are_checked_before_training(pusht_state_dataset, second_pusht, tmp_path, capsys):
    roots = f"--dataset.root=[{pusht_state_dataset},{second_pusht}]"
    out = tmp_path / "bad"
    assert main([roots, "--dataset.weights=[1.0]", f"--output_dir={out}", *TINY]) == 2
    assert "--dataset.weights has 1 numbers for 2 datasets" in capsys.readouterr().err
    assert main([roots, "--dataset.rename_features=[observation.state]", f"--output_dir={out}", *TINY]) == 2
    assert "--dataset.rename_features entries are OLD=NEW" in capsys.readouterr().err
    assert main([roots, "--dataset.episodes=[0]", f"--output_dir={out}", *TINY]) == 2
    assert "--dataset.episodes" in capsys.readouterr().err
    assert main([f"--dataset.root={pusht_state_dataset}", "--dataset.weights=[1,2]", f"--output_dir={out}", *TINY]) == 2
    assert "--dataset.weights and --dataset.rename_features need several datasets" in capsys.readouterr().err
    assert not out.exists()


# DAgger rounds of 1 short episode after steps 4 and 6 of 8, a checkpoint every 3 steps (as test_train_streaming.py's).
MIXED_ONLINE = [
    "--log_freq=1", "--save_freq=3", "--online.start_step=4", "--online.every=2", "--online.n_episodes=1",
    "--env.episode_length=16", "--online.labels=expert", "--policy.scheduler_name=constant",
]  # fmt: skip


def test_online_rounds_join_a_mixture_and_resume_exactly(pusht_state_dataset, second_pusht, tmp_path, capsys):
    from test_train_streaming import assert_trained_alike, logged, online_rounds

    from hfpolicy.training.online import ONLINE_DATA_DIR

    roots = f"--dataset.root=[{pusht_state_dataset},{second_pusht}]"
    flags = [roots, "--dataset.weights=[0.7,0.3]", *MIXED_ONLINE, *TINY]
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    assert main([*flags, f"--output_dir={reference}", "--steps=8"]) == 0
    assert "step 4: online round 0" in capsys.readouterr().out
    assert [r["step"] for r in online_rounds(reference)] == [4, 6]
    assert logged(reference, "online/episodes") == [(4, 1.0), (6, 2.0)]
    online = PolicyDataset("local/online_data", root=reference / ONLINE_DATA_DIR)
    assert online.num_episodes == 2 and set(online.features) >= {OBS_STATE, OBS_ENV_STATE, "action", "next.done"}
    assert len(list((reference / ONLINE_DATA_DIR / "data").rglob("*.parquet"))) == 2  # a file per round, appended

    # Stopped at step 5 (its checkpoint holds the round of step 4) and resumed to step 8: trained alike.
    assert main([*flags, f"--output_dir={stopped}", "--steps=5"]) == 0
    assert main([f"--output_dir={stopped}", "--resume=true", "--steps=8"]) == 0
    assert "resuming at step 5" in capsys.readouterr().out
    assert_trained_alike(reference, stopped)


def test_repo_id_and_root_lists_make_one_member_per_dataset():
    from hfpolicy.training.config import DatasetConfig
    from hfpolicy.training.data import dataset_members

    hub = dataset_members(DatasetConfig(repo_id="[user/a, user/b]", weights=[2.0, 1.0]))
    assert [(m.repo_id, m.root, m.weights) for m in hub] == [("user/a", None, None), ("user/b", None, None)]
    local = dataset_members(DatasetConfig(repo_id="[x/a,x/b]", root="[/d/a,/d/b]"))
    assert [(m.repo_id, m.root) for m in local] == [("x/a", "/d/a"), ("x/b", "/d/b")]
    assert [m.repo_id for m in dataset_members(DatasetConfig(repo_id="user/a"))] == ["user/a"]
