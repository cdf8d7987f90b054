"""The diffusion_policy PushT zarr -> LeRobot v3.0 converter, on the first episodes of the real zarr."""

import json

import datasets
import numpy as np
import pytest
import torch
import zarr
from gym_pusht.envs.pusht import PushTEnv

from hfpolicy.datasets import PolicyDataset, dataset_to_policy_features
from hfpolicy.datasets.convert import main as convert_main
from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr
from hfpolicy.policies.config import FeatureType

pytestmark = pytest.mark.shared_data
EPISODES = 5
# H.264 (crf 23, yuv420p) of the 96x96 PushT renders: mean abs error ~0.7 levels of 255.
IMAGE_MAE_TOLERANCE = 2.0 / 255


@pytest.fixture(scope="module")
def zarr_data(pusht_zarr_path):
    group = zarr.open_group(str(pusht_zarr_path), mode="r")
    ends = group["meta/episode_ends"][:EPISODES]
    n = int(ends[-1])
    return {
        "ends": ends,
        "starts": np.r_[0, ends[:-1]],
        "state": group["data/state"][:n],
        "action": group["data/action"][:n],
        "img": np.rint(group["data/img"][:n]).astype(np.uint8),
    }


@pytest.fixture(scope="module")
def converted(pusht_zarr_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("pusht") / "pusht"
    return convert_pusht_zarr(pusht_zarr_path, root, episodes=list(range(EPISODES)), progress=False)


def _reset_to(env: PushTEnv, state: np.ndarray) -> None:
    """gym-pusht sets the block position before its angle, turning it about its centre of gravity (0, 45)."""
    theta = state[4]
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    cog = np.array([0.0, 45.0])
    env.reset(options={"reset_to_state": np.r_[state[:2], state[2:4] - cog + rotation @ cog, theta]})


def test_frames_states_actions_and_images(converted, zarr_data):
    ds = PolicyDataset("local/pusht", root=converted)
    info = json.loads((converted / "meta/info.json").read_text())
    assert info["fps"] == 10 and info["total_episodes"] == EPISODES and info["total_frames"] == zarr_data["ends"][-1]
    assert info["features"]["observation.image"]["shape"] == [96, 96, 3]
    assert info["features"]["observation.image"]["dtype"] == "video"
    assert {"next.reward", "next.success", "next.done"} <= set(info["features"])
    lengths = np.diff(ds.episode_bounds, axis=1).ravel()
    assert lengths.tolist() == np.diff(np.r_[0, zarr_data["ends"]]).tolist()

    batch = ds.get_batch(range(len(ds)))
    assert torch.equal(batch["observation.state"], torch.from_numpy(zarr_data["state"][:, :2]))
    assert torch.equal(batch["action"], torch.from_numpy(zarr_data["action"]))
    images = torch.from_numpy(zarr_data["img"]).permute(0, 3, 1, 2).float() / 255
    errors = (batch["observation.image"] - images).abs().mean(dim=(1, 2, 3))
    assert errors.mean() < IMAGE_MAE_TOLERANCE, f"mean abs error {errors.mean() * 255:.2f}/255"
    assert errors.max() < 2 * IMAGE_MAE_TOLERANCE
    assert batch["task"][0] == "Push the T-shaped block onto the T-shaped target."

    inputs, outputs = dataset_to_policy_features(ds.features)
    assert {k: (f.type, f.shape) for k, f in inputs.items()} == {
        "observation.image": (FeatureType.IMAGE, (3, 96, 96)),
        "observation.state": (FeatureType.STATE, (2,)),
    }
    assert outputs["action"].type == FeatureType.ACTION and outputs["action"].shape == (2,)


def test_rewards_and_success_follow_gym_pusht_coverage(converted, zarr_data):
    ds = PolicyDataset("local/pusht", root=converted)
    batch = ds.get_batch(range(len(ds)))
    reward, success, done = batch["next.reward"].numpy(), batch["next.success"].numpy(), batch["next.done"].numpy()
    assert ((reward >= 0) & (reward <= 1)).all()
    env = PushTEnv(obs_type="state")
    threshold = env.success_threshold
    for start, end in zip(zarr_data["starts"], zarr_data["ends"], strict=True):
        assert done[start:end].tolist() == [False] * (end - start - 1) + [True]
        # next.* of frame i describes recorded state i + 1 ...
        for i in range(start, end - 1):
            _reset_to(env, zarr_data["state"][i + 1])
            coverage = env._get_coverage()
            assert reward[i] == pytest.approx(min(coverage / threshold, 1.0), abs=1e-5)
            assert success[i] == (coverage > threshold)
        # ... and of the last frame, the state the last action leads to: replay the whole episode in gym-pusht.
        _reset_to(env, zarr_data["state"][start])
        for action in zarr_data["action"][start:end]:
            _, step_reward, terminated, _, info = env.step(action)
        assert reward[end - 1] == pytest.approx(step_reward, abs=0.01)
        assert success[end - 1] == terminated or abs(info["coverage"] - threshold) < 0.01
    assert success.sum() == (reward[success] == 1.0).sum()  # success only where the coverage passed the threshold
    assert reward.max() > 0.9


def test_cli_converts_and_pushes(pusht_zarr_path, tmp_path, hub_server, zarr_data, capsys):
    out = tmp_path / "cli"
    code = convert_main(
        [
            "pusht-zarr",
            str(pusht_zarr_path),
            f"--output_dir={out}",
            "--episodes=[0,1]",
            "--environment_state=true",
            "--push_to=user/pusht",
        ]
    )
    assert code == 0
    ds = PolicyDataset("user/pusht")
    assert ds.num_frames == zarr_data["ends"][1] and ds.num_episodes == 2
    keypoints = ds.get_batch([0, 30])["observation.environment_state"].numpy()
    env = PushTEnv(obs_type="environment_state_agent_pos")
    for row, position in zip(keypoints, [0, 30], strict=True):
        _reset_to(env, zarr_data["state"][position])
        np.testing.assert_allclose(row, env.get_obs()["environment_state"], atol=1e-3)
    rows = datasets.load_dataset("user/pusht", split="train")
    assert rows.num_rows == ds.num_frames
    assert "observation.environment_state" in rows.column_names

    assert convert_main(["pusht-zarr", str(pusht_zarr_path)]) == 2  # no --output_dir
    assert convert_main(["pusht-zarr", str(pusht_zarr_path), f"--output_dir={out}", "--episodes=[0]"]) == 2
    assert "add --overwrite=true" in capsys.readouterr().err  # the command names the flag, without a traceback
    assert convert_main(["pusht-zarr", str(tmp_path / "missing.zarr"), f"--output_dir={tmp_path / 'y'}"]) == 2
    assert "is not a zarr folder" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="is not a zarr folder"):
        convert_pusht_zarr(tmp_path / "missing.zarr", tmp_path / "x")
