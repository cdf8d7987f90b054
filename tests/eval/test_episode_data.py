"""`hfpolicy eval --dataset_dir=...`: the evaluation's episodes written as a LeRobot v3.0 dataset, an episode at a
time, through the same writer as recordings (and online training's data)."""

import json

import numpy as np
import torch
from policies.toy_policy import make_toy_policy

from hfpolicy.constants import ACTION, DONE, EVAL_INFO_FILE, OBS_IMAGE, OBS_STATE, REWARD
from hfpolicy.datasets import PolicyDataset
from hfpolicy.envs import PushTEnvConfig
from hfpolicy.eval import main


def test_eval_writes_its_episodes_as_a_dataset(tmp_path, capsys):
    make_toy_policy("pixels_agent_pos").save_pretrained(tmp_path / "policy")
    argv = [
        f"--policy.path={tmp_path / 'policy'}", "--env.type=pusht", "--env.episode_length=12",
        "--eval.n_episodes=3", "--eval.batch_size=2", "--eval.n_videos=0", "--progress=false", "--num_threads=1",
        f"--output_dir={tmp_path / 'eval'}", f"--dataset_dir={tmp_path / 'episodes'}",
    ]  # fmt: skip
    assert main(argv) == 0
    info = json.loads((tmp_path / "eval" / EVAL_INFO_FILE).read_text())
    dataset = PolicyDataset("local/episodes", root=tmp_path / "episodes")
    assert dataset.num_episodes == 3 and dataset.num_frames == sum(e["length"] for e in info["per_episode"]) == 36
    assert set(dataset.features) >= {OBS_IMAGE, OBS_STATE, ACTION, REWARD, DONE}
    assert dataset.features[OBS_IMAGE]["dtype"] == "video"
    for position, record in enumerate(info["per_episode"]):  # episode i is the eval's episode i
        start, end = dataset.episode_bounds[position]
        frames = dataset.get_batch(np.arange(start, end))
        assert abs(frames[REWARD].sum().item() - record["sum_reward"]) < 1e-5  # float32 rewards
        assert frames[DONE].reshape(-1).tolist() == [False] * 11 + [True]
        env = PushTEnvConfig(obs_type="pixels_agent_pos").make_single()
        observation, _ = env.reset(seed=record["seed"])  # frame 0: the observation the policy saw first
        assert np.allclose(frames[OBS_STATE][0].numpy(), observation["agent_pos"])
        pixels = torch.from_numpy(observation["pixels"]).permute(2, 0, 1).float() / 255
        assert (frames[OBS_IMAGE][0] - pixels).abs().mean() < 0.03  # through H.264
        env.close()

    # The folder must be new: the evaluation stops before running an episode, naming the flag.
    assert main([*argv[:-2], f"--output_dir={tmp_path / 'eval2'}", f"--dataset_dir={tmp_path / 'episodes'}"]) == 2
    assert "--dataset_dir" in capsys.readouterr().err
