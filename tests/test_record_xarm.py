"""`hfpolicy record --env.type=xarm`: lerobot/xarm_lift_medium's features with next.reward / next.success, episodes
that end at their success and replay."""

import json
from pathlib import Path

import av
import numpy as np
import pytest

from hfpolicy.constants import ACTION, DONE, EVAL_INFO_FILE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import PolicyDataset
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.record import main
from hfpolicy.training import main as train_main

# lerobot/xarm_lift_medium's features, and next.success (as hfpolicy's PushT recordings have).
HUB_FEATURES = {OBS_IMAGE, OBS_STATE, ACTION, REWARD, DONE, "episode_index", "frame_index", "timestamp", "index"}
FEATURES = HUB_FEATURES | {SUCCESS, "task_index"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """Two full episodes (seeds 2, 3), state-only with the cube's pose (no rendering)."""
    root = tmp_path_factory.mktemp("record_xarm") / "lift"
    flags = ["--env.type=xarm", "--n_episodes=2", "--start_seed=2", "--images=false", "--environment_state=true"]
    assert main([*flags, f"--output_dir={root}", "--progress=false"]) == 0
    return root


def test_recorded_episodes_have_rewards_end_at_success_and_replay(recorded):
    dataset = PolicyDataset("local/lift", root=recorded)
    assert dataset.meta.fps == 15 and set(dataset.meta.features) == (FEATURES - {OBS_IMAGE}) | {OBS_ENV_STATE}
    env = XarmEnvConfig(obs_type="environment_state_agent_pos").make_single()
    try:
        for episode, (start, end) in enumerate(dataset.episode_bounds):
            frames = [dataset[i] for i in range(start, end)]
            assert [bool(f[DONE]) for f in frames] == [False] * (len(frames) - 1) + [True]
            assert [bool(f[SUCCESS]) for f in frames] == [False] * (len(frames) - 1) + [True]  # it ends at success
            observation, _ = env.reset(seed=2 + episode)
            for t, frame in enumerate(frames):
                np.testing.assert_allclose(
                    observation["agent_pos"], frame[OBS_STATE].numpy(), atol=1e-6, err_msg=str(t)
                )
                np.testing.assert_allclose(observation["environment_state"], frame[OBS_ENV_STATE].numpy(), atol=1e-6)
                observation, reward, terminated, *_ = env.step(frame[ACTION].numpy())
                assert float(frame[REWARD]) == pytest.approx(reward, abs=1e-6)
            assert terminated
            assert float(frames[-1][REWARD]) > 0.05 > float(frames[0][REWARD])  # the lift pays
    finally:
        env.close()
    assert dataset[0]["task"] == "Pick up the cube and lift it."


def test_recorded_video_dataset_has_the_hub_features(tmp_path):
    root = tmp_path / "video"
    assert main(["--env.type=xarm", "--n_episodes=1", "--max_steps=3", f"--output_dir={root}", "--progress=false"]) == 0
    info = json.loads((root / "meta" / "info.json").read_text())
    assert set(info["features"]) == FEATURES and info["total_frames"] == 3
    video = info["features"][OBS_IMAGE]
    assert video["dtype"] == "video" and video["shape"] == [84, 84, 3] and video["info"]["video.fps"] == 15
    [mp4] = (root / "videos" / OBS_IMAGE).rglob("*.mp4")
    with av.open(str(mp4)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 3 and frames[0].shape == (84, 84, 3) and frames[0].std() > 10
    item = PolicyDataset("local/video", root=root)[2]
    assert tuple(item[OBS_IMAGE].shape) == (3, 84, 84) and bool(item[DONE]) and not bool(item[SUCCESS])


def test_state_only_needs_the_cube(tmp_path, capsys):
    assert main(["--env.type=xarm", "--images=false", f"--output_dir={tmp_path / 'x'}"]) == 2
    assert "--images=false needs --environment_state=true" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_few_training_steps_on_a_recorded_xarm_dataset_evaluate_with_a_video(recorded, tmp_path):
    """Record -> train (tiny ACT on the gripper + the cube's pose, 3 steps) -> evaluate in the xArm env with a video."""
    out = tmp_path / "run"
    flags = [f"--dataset.root={recorded}", f"--output_dir={out}", "--policy.type=act"]
    flags += [f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]", "--policy.dim_model=32", "--policy.n_heads=2"]
    flags += ["--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_vae_encoder_layers=1"]
    flags += ["--policy.latent_dim=4", "--policy.chunk_size=10", "--policy.n_action_steps=5", "--batch_size=8"]
    flags += ["--tracker=none", "--progress=false", "--steps=3", "--log_freq=1", "--eval.freq=3"]
    flags += ["--eval.n_episodes=1", "--eval.batch_size=1", "--eval.n_videos=1"]
    flags += ["--env.type=xarm", "--env.episode_length=4"]
    assert train_main(flags) == 0
    evaluation = out / "eval" / "step_000003"
    info = json.loads((evaluation / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 1 and info["per_episode"][0]["length"] == 4
    with av.open(str(evaluation / "videos" / "eval_episode_0.mp4")) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 5 and frames[0].shape == (384, 384, 3)  # the first frame and one per step
