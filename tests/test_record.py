"""`hfpolicy record` with the scripted PushT expert, and the whole offline pipeline: record → train → evaluate."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import gym_pusht  # noqa: F401 (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest
import torch

from hfpolicy.constants import ACTION, DONE, EVAL_INFO_FILE, OBS_ENV_STATE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import PolicyDataset
from hfpolicy.record import RecordConfig, main, record, recording

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("record") / "scripted"
    code = main(
        ["--n_episodes=2", "--start_seed=3", f"--output_dir={root}", "--environment_state=true", "--progress=false"]
    )
    assert code == 0
    return root


def test_recorded_dataset_replays_in_the_simulator(recorded):
    dataset = PolicyDataset("local/scripted", root=recorded)
    assert dataset.num_episodes == 2
    for episode in range(2):
        start, end = dataset.episode_bounds[episode]
        frames = [dataset[i] for i in range(start, end)]
        env = gym.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos")
        observation, _ = env.reset(seed=3 + episode)
        for t, frame in enumerate(frames):
            # the recorded observation is the one before the action, the flags are what the action produced
            np.testing.assert_allclose(frame[OBS_STATE].numpy(), observation["agent_pos"], atol=1e-4)
            np.testing.assert_allclose(frame[OBS_ENV_STATE].numpy(), observation["environment_state"], atol=1e-3)
            observation, reward, terminated, truncated, info = env.step(frame[ACTION].numpy())
            assert float(frame[REWARD]) == pytest.approx(reward, abs=1e-6)
            assert bool(frame[DONE]) == (terminated or truncated) == (t == len(frames) - 1)
        assert bool(frames[-1][SUCCESS]) and info["is_success"]  # the expert solved both seeds
        env.close()


def test_record_refuses_an_existing_output_dir_and_unknown_demonstrator(recorded, tmp_path, capsys):
    assert main(["--n_episodes=1", f"--output_dir={recorded}"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["--n_episodes=1", "--policy.type=human", f"--output_dir={tmp_path / 'x'}"]) == 2
    assert "scripted" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_overwrite_replaces_a_dataset_only_once_the_new_one_is_complete(tmp_path, capsys):
    """What makes the README tour re-runnable: record(..., overwrite=True) into the folder of the previous run."""
    root = tmp_path / "tour" / "pusht_scripted"
    quick = dict(n_episodes=1, max_steps=5, images=False, environment_state=True, progress=False)
    record(RecordConfig(output_dir=str(root), start_seed=0, **quick))
    first = PolicyDataset("local/x", root=root)[0][OBS_ENV_STATE]
    # a failing re-run (every episode discarded) leaves the old dataset as it was
    with pytest.raises(RuntimeError, match="no episode was kept"):
        record(RecordConfig(output_dir=str(root), start_seed=1, overwrite=True, discard_failures=True, **quick))
    assert torch.equal(PolicyDataset("local/x", root=root)[0][OBS_ENV_STATE], first)
    # the CLI names the flag that replaces it; with it, the dataset is the new recording and nothing is left beside it
    assert main([f"--output_dir={root}", "--n_episodes=1", "--max_steps=5", "--images=false"]) == 2
    assert "add --overwrite=true to replace that dataset" in capsys.readouterr().err
    record(RecordConfig(output_dir=str(root), start_seed=1, overwrite=True, **quick))
    assert not torch.equal(PolicyDataset("local/x", root=root)[0][OBS_ENV_STATE], first)
    assert sorted(p.name for p in root.parent.iterdir()) == ["pusht_scripted"]


def test_one_recorded_episode_is_said_in_the_singular(tmp_path, capsys):
    root = tmp_path / "one"
    args = ["--n_episodes=1", "--max_steps=5", "--images=false", "--environment_state=true", "--progress=false"]
    assert main([f"--output_dir={root}", *args]) == 0
    assert capsys.readouterr().out.startswith(f"recorded 1 episode into {root}\n")


def test_the_recording_bar_counts_episodes_and_shows_each_frame(tmp_path, monkeypatch, capsys):
    """A camera episode can take a minute (ALOHA's: 73 s): the bar shows the frame within the episode, not only the
    episodes done. The bar drawn at every update (mininterval=0), so that no frame depends on timing."""
    monkeypatch.setattr(recording, "tqdm", functools.partial(recording.tqdm, mininterval=0))
    args = ["--n_episodes=2", "--max_steps=6", "--images=true", "--progress=true"]  # PushT's camera, 6 frames each
    assert main([f"--output_dir={tmp_path / 'rec'}", *args]) == 0
    states = [line.strip() for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if "recording" in line]
    first = [line for line in states if line.startswith("recording:   0%")]
    second = [line for line in states if line.startswith("recording:  50%")]
    assert [f"frame {t}/6]" in " ".join(first) for t in range(1, 7)] == [True] * 6, first
    assert all(f"frame {t}/6]" in " ".join(second) for t in range(1, 7)) and "success " in second[-1], second
    assert states[-1].startswith("recording: 100%|") and "2/2" in states[-1]


def test_overwrite_never_replaces_a_folder_that_is_not_a_dataset(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    args = [f"--output_dir={tmp_path}", "--n_episodes=1", "--max_steps=5", "--images=false", "--overwrite=true"]
    assert main([*args, "--environment_state=true", "--progress=false"]) == 2
    err = capsys.readouterr().err
    assert "is not a LeRobot dataset (notes.txt, no valid meta/info.json)" in err and err.count("\n") == 1
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_offline_pipeline_record_train_evaluate(tmp_path):
    """The README's offline quickstart in miniature: record demos, train the image policy a few steps with
    `accelerate launch examples/train_pusht.py --dataset.root=...`, with one eval episode at the end."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    data = tmp_path / "pusht_scripted"
    subprocess.run(
        [sys.executable, "-m", "hfpolicy.cli", "record", "--env.type=pusht", "--policy.type=scripted",
         "--n_episodes=2", f"--output_dir={data}", "--progress=false"],
        check=True, env=env, timeout=300,
    )  # fmt: skip
    out = tmp_path / "train"
    subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no",
         str(ROOT / "examples" / "train_pusht.py"), "--recipe=paper", f"--dataset.root={data}", f"--output_dir={out}",
         "--steps=2", "--batch_size=4", "--log_freq=1", "--tracker=none", "--progress=false",
         "--policy.down_dims=[32,64]", "--policy.diffusion_step_embed_dim=16", "--policy.spatial_softmax_num_keypoints=8",
         "--policy.noise_scheduler_type=DDIM", "--policy.num_inference_steps=2",
         "--eval.freq=2", "--eval.n_episodes=1", "--eval.batch_size=1", "--eval.n_videos=1", "--env.episode_length=5"],
        check=True, env=env, timeout=600,
    )  # fmt: skip
    info = json.loads((out / "eval" / "step_000002" / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 1 and info["per_episode"][0]["length"] == 5
    assert (out / "eval" / "step_000002" / "videos" / "eval_episode_0.mp4").is_file()
    assert (out / "checkpoints" / "step_000002" / "pretrained_model" / "model.safetensors").is_file()
