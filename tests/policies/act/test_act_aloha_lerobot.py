"""A LeRobot 0.6.1 ACT checkpoint with ALOHA features acts in hfpolicy's pipeline as in LeRobot's: hfpolicy's ALOHA env
observations, batched by hfpolicy, give the action chunk LeRobot computed from gym-aloha's own observations of the
same seeds (image layout, scaling and joint order all match), within 1e-4.

The checkpoint (47 MB, so not stored) is made by bench/aloha_act_fixture.py in two steps (hfpolicy's venv, then
LeRobot's); the test reads it from $HFPOLICY_ACT_ALOHA_FIXTURE and skips when that is unset.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hfpolicy.envs import AlohaEnvConfig, observations_to_batch
from hfpolicy.policies import Policy
from hfpolicy.policies.act import ACTPolicy

FIXTURE_ENV = "HFPOLICY_ACT_ALOHA_FIXTURE"


@pytest.fixture(scope="module")
def fixture_folder() -> Path:
    folder = os.environ.get(FIXTURE_ENV)
    if not folder:
        pytest.skip(f"set {FIXTURE_ENV} to a folder made by bench/aloha_act_fixture.py (observe, then make)")
    return Path(folder)


def test_lerobot_aloha_act_checkpoint_acts_identically_on_hfpolicy_env_observations(fixture_folder):
    policy = Policy.from_pretrained(fixture_folder / "pretrained_model")
    assert type(policy) is ACTPolicy
    reference = load_file(fixture_folder / "reference.safetensors")
    seeds = reference["seeds"].tolist()
    gym_aloha = load_file(fixture_folder / "gym_aloha_observations.safetensors")

    cfg = AlohaEnvConfig(task="AlohaTransferCube-v0").for_policy(policy.config.input_features)
    assert cfg.obs_type == "pixels_agent_pos"
    env = cfg.make(len(seeds))
    try:
        observation, _ = env.reset(seed=seeds)
    finally:
        env.close()
    # hfpolicy's env gives gym-aloha's observations for these seeds ...
    np.testing.assert_array_equal(observation["pixels"]["top"], gym_aloha["pixels.top"].numpy())
    np.testing.assert_array_equal(observation["agent_pos"], gym_aloha["agent_pos"].numpy())
    # ... and hfpolicy's batch of them gives LeRobot's actions.
    batch = observations_to_batch(observation, "cpu", set(policy.config.input_features))
    with torch.inference_mode():
        chunk = policy.predict_action_chunk({k: v[:, None] for k, v in batch.items()}, n_steps=policy.config.chunk_size)
    assert chunk.shape == reference["actions"].shape == (len(seeds), 10, 14)
    error = (chunk - reference["actions"]).abs().max().item()
    assert error < 1e-4, error
    policy.reset()
    with torch.inference_mode():
        first = policy.select_action(batch)
    torch.testing.assert_close(first, reference["actions"][:, 0], atol=1e-4, rtol=0)
