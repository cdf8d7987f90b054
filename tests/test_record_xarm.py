"""`hfpolicy record --env.type=xarm`: lerobot/xarm_lift_medium's features with next.reward / next.success, episodes
that end at their success and replay."""

import json
from pathlib import Path

import av
import numpy as np
import pytest

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import PolicyDataset
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.record import main

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
