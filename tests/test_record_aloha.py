"""`hfpolicy record --env.type=aloha`: the features of lerobot/aloha_sim_*_scripted, and episodes that replay."""

import json
from pathlib import Path

import av
import numpy as np
import pytest

from hfpolicy.constants import ACTION, DONE, EVAL_INFO_FILE, OBS_ENV_STATE, OBS_STATE
from hfpolicy.datasets import PolicyDataset
from hfpolicy.envs import AlohaEnvConfig
from hfpolicy.envs.aloha import TASK_DESCRIPTIONS
from hfpolicy.record import main
from hfpolicy.training import main as train_main

# The features of the Hub's lerobot/aloha_sim_transfer_cube_scripted and lerobot/aloha_sim_insertion_scripted.
HUB_FEATURES = {
    "observation.images.top",
    "observation.state",
    "action",
    "episode_index",
    "frame_index",
    "timestamp",
    "next.done",
    "index",
    "task_index",
}


@pytest.fixture(scope="module")
def recorded_insertion(tmp_path_factory) -> Path:
    """One full insertion episode (seed 4), state-only with the object poses (no rendering)."""
    root = tmp_path_factory.mktemp("record_aloha") / "insertion"
    flags = ["--env.type=aloha", "--env.task=AlohaInsertion-v0", "--n_episodes=1", "--start_seed=4"]
    flags += ["--images=false", "--environment_state=true", f"--output_dir={root}", "--progress=false"]
    assert main(flags) == 0
    return root


def test_recorded_episode_replays_to_the_same_final_object_pose(recorded_insertion):
    dataset = PolicyDataset("local/insertion", root=recorded_insertion)
    start, end = dataset.episode_bounds[0]
    assert end - start == 400  # full-length episodes, as the Hub's scripted datasets have
    frames = [dataset[i] for i in range(start, end)]
    assert [bool(f[DONE]) for f in frames] == [False] * 399 + [True]
    cfg = AlohaEnvConfig(task="AlohaInsertion-v0", obs_type="environment_state_agent_pos", terminate_on_success=False)
    env = cfg.make_single()
    try:
        observation, _ = env.reset(seed=4)
        rewards = []
        for t, frame in enumerate(frames):
            np.testing.assert_allclose(observation["agent_pos"], frame[OBS_STATE].numpy(), atol=1e-6, err_msg=f"t={t}")
            np.testing.assert_allclose(env.unwrapped.environment_state(), frame[OBS_ENV_STATE].numpy(), atol=1e-6)
            observation, reward, *_ = env.step(frame[ACTION].numpy())
            rewards.append(reward)
        assert 4 in rewards  # the replayed demonstration inserts the peg
        final = frames[-1][OBS_ENV_STATE].numpy()  # the pose before the last action, as recorded and as replayed
        peg, socket = final[:3], final[7:10]
        assert np.abs(peg[1:] - socket[1:]).max() < 0.01 and abs(peg[0] - socket[0]) < 0.12  # peg in the socket
        assert peg[2] > 0.1  # held up in the air
    finally:
        env.close()


def test_recorded_state_dataset_metadata(recorded_insertion):
    info = json.loads((recorded_insertion / "meta" / "info.json").read_text())
    assert info["fps"] == 50 and info["total_episodes"] == 1 and info["total_frames"] == 400
    assert set(info["features"]) == (HUB_FEATURES - {"observation.images.top"}) | {OBS_ENV_STATE}
    assert info["features"][OBS_STATE]["names"]["motors"][0] == "left_waist"
    assert info["features"][OBS_ENV_STATE]["shape"] == [14]
    dataset = PolicyDataset("local/insertion", root=recorded_insertion)
    assert dataset[0]["task"] == TASK_DESCRIPTIONS["AlohaInsertion-v0"]


def test_recorded_video_dataset_has_the_hub_features(tmp_path):
    """A short rendered recording (3 steps, shadows off for speed): the top camera as a 480x640 video."""
    root = tmp_path / "cube"
    flags = ["--env.type=aloha", "--env.task=AlohaTransferCube-v0", "--env.shadows=false", "--n_episodes=1"]
    flags += ["--max_steps=3", f"--output_dir={root}", "--progress=false"]
    assert main(flags) == 0
    info = json.loads((root / "meta" / "info.json").read_text())
    assert set(info["features"]) == HUB_FEATURES
    video = info["features"]["observation.images.top"]
    assert video["dtype"] == "video" and video["shape"] == [480, 640, 3] and video["info"]["video.fps"] == 50
    [mp4] = (root / "videos" / "observation.images.top").rglob("*.mp4")
    with av.open(str(mp4)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 3 and frames[0].shape == (480, 640, 3)
    assert frames[0][..., 0].max() > 200  # the red cube is in view
    dataset = PolicyDataset("local/cube", root=root)
    assert dataset[0]["task"] == TASK_DESCRIPTIONS["AlohaTransferCube-v0"]
    assert tuple(dataset[0]["observation.images.top"].shape) == (3, 480, 640)


def test_a_few_training_steps_on_a_recorded_aloha_dataset_evaluate_with_a_video(recorded_insertion, tmp_path):
    """Record -> train (tiny ACT on joints + object poses, 3 steps) -> evaluate in the ALOHA env with a video."""
    out = tmp_path / "run"
    flags = [f"--dataset.root={recorded_insertion}", f"--output_dir={out}", "--policy.type=act"]
    flags += [f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]", "--policy.dim_model=32", "--policy.n_heads=2"]
    flags += ["--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_vae_encoder_layers=1"]
    flags += ["--policy.latent_dim=4", "--policy.chunk_size=10", "--policy.n_action_steps=5", "--batch_size=8"]
    flags += ["--tracker=none", "--progress=false", "--steps=3", "--log_freq=1", "--eval.freq=3"]
    flags += ["--eval.n_episodes=1", "--eval.batch_size=1", "--eval.n_videos=1"]
    flags += ["--env.type=aloha", "--env.task=AlohaInsertion-v0", "--env.episode_length=4", "--env.shadows=false"]
    assert train_main(flags) == 0
    evaluation = out / "eval" / "step_000003"
    info = json.loads((evaluation / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 1 and info["per_episode"][0]["length"] == 4
    with av.open(str(evaluation / "videos" / "eval_episode_0.mp4")) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 5 and frames[0].shape == (480, 640, 3)  # the first frame and one per step
