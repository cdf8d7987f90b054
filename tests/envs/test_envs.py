"""hfpolicy.envs: PushT vector envs (serial / parallel, autoreset off, parking), observations -> policy batch, configs."""

import dataclasses

import draccus
import numpy as np
import pytest
import torch
from draccus.utils import ParsingError
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.envs import (
    PARK_OPTION,
    EnvConfig,
    PushTEnvConfig,
    episode_step_limit,
    make_env,
    make_env_config,
    observations_to_batch,
)
from hfpolicy.policies import FeatureType

TARGET = np.array([256.0, 256.0], dtype=np.float32)


@pytest.mark.parametrize("parallel", [False, True])
def test_make_env_builds_a_vector_env_with_autoreset_disabled(parallel):
    env = make_env("pusht", 2, parallel=parallel, episode_length=7)
    try:
        assert isinstance(env, AsyncVectorEnv if parallel else SyncVectorEnv)
        assert env.num_envs == 2
        assert env.metadata["autoreset_mode"] == AutoresetMode.DISABLED
        assert episode_step_limit(env) == 7
        observation, _ = env.reset(seed=[1, 2])
        assert observation["pixels"].shape == (2, 96, 96, 3) and observation["agent_pos"].shape == (2, 2)
        assert not np.array_equal(observation["pixels"][0], observation["pixels"][1])  # different seeds
        for step in range(1, 8):
            observation, reward, terminated, truncated, info = env.step(np.stack([TARGET, TARGET]))
            assert truncated.all() == (step == 7)  # the time limit
        assert "is_success" in info
    finally:
        env.close()


@pytest.mark.parametrize("parallel", [False, True])
def test_parked_env_stays_still_and_renders_nothing(parallel):
    env = make_env("pusht", 2, parallel=parallel, obs_type="environment_state_agent_pos", episode_length=3)
    try:
        env.reset(seed=[5, 6])
        for _ in range(3):
            observation, *_ = env.step(np.stack([TARGET, TARGET]))
        # Both episodes are truncated now: stepping env 1 again is only allowed once it is parked.
        parked, _ = env.reset(options={"reset_mask": np.array([True, True]), PARK_OPTION: True})
        np.testing.assert_array_equal(parked["environment_state"], observation["environment_state"])
        for _ in range(4):
            after, reward, terminated, truncated, _ = env.step(np.stack([TARGET + 100, TARGET - 100]))
            np.testing.assert_array_equal(after["agent_pos"], observation["agent_pos"])  # nothing simulated
            assert (reward == 0).all() and not terminated.any() and not truncated.any()
        assert env.render() == (None, None)
        # A plain reset un-parks.
        observation, _ = env.reset(seed=[5, 6])
        env.step(np.stack([TARGET, TARGET]))
        frames = env.render()
        assert frames[0].shape == (384, 384, 3)
    finally:
        env.close()


def test_render_only_where_enabled():
    env = make_env("pusht", 3, render_size=128)
    try:
        env.reset(seed=[0, 1, 2])
        env.set_attr("render_enabled", [False, True, False])
        frames = env.render()
        assert frames[0] is None and frames[2] is None and frames[1].shape == (128, 128, 3)
    finally:
        env.close()


@pytest.mark.parametrize("obs_type", PushTEnvConfig.obs_types)
def test_observations_to_batch_matches_the_declared_features(obs_type):
    config = make_env_config("pusht", obs_type=obs_type, observation_size=64)
    env = config.make(2)
    try:
        observation, _ = env.reset(seed=[3, 4])
        batch = observations_to_batch(observation, "cpu")
    finally:
        env.close()
    features = config.observation_features()
    assert set(batch) == set(features)
    for key, feature in features.items():
        assert batch[key].shape == (2, *feature.shape) and batch[key].dtype == torch.float32
    if OBS_IMAGE in batch:
        pixels = torch.from_numpy(observation["pixels"] if isinstance(observation, dict) else observation)
        torch.testing.assert_close(batch[OBS_IMAGE], pixels.permute(0, 3, 1, 2).float() / 255)
        assert batch[OBS_IMAGE].is_contiguous() and batch[OBS_IMAGE].min() >= 0 and batch[OBS_IMAGE].max() <= 1
    if OBS_STATE in batch:
        torch.testing.assert_close(batch[OBS_STATE], torch.from_numpy(observation["agent_pos"]).float())
    if OBS_ENV_STATE in batch:
        assert batch[OBS_ENV_STATE].shape == (2, 16)


def test_observations_to_batch_copies_and_filters():
    observation = {
        "pixels": np.full((2, 4, 6, 3), 255, dtype=np.uint8),
        "agent_pos": np.ones((2, 2), dtype=np.float32),
        "velocity": np.zeros((2, 2)),
    }
    batch = observations_to_batch(observation)
    assert set(batch) == {OBS_IMAGE, OBS_STATE, "observation.velocity"}
    assert batch[OBS_IMAGE].shape == (2, 3, 4, 6) and (batch[OBS_IMAGE] == 1).all()
    observation["agent_pos"][:] = 7  # the env overwrites its buffers at the next step
    assert (batch[OBS_STATE] == 1).all()
    assert set(observations_to_batch(observation, keys={OBS_STATE})) == {OBS_STATE}
    cameras = observations_to_batch({"pixels": {"top": observation["pixels"]}})
    assert set(cameras) == {"observation.images.top"}
    with pytest.raises(ValueError, match="uint8"):
        observations_to_batch({"pixels": np.zeros((2, 4, 6, 3), dtype=np.float32)})


def test_unknown_env_name_obs_type_and_option_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown env 'pushT'; valid envs: aloha, pusht"):
        make_env("pushT", 1)
    with pytest.raises(ValueError, match="unknown obs_type='state'.*pixels_agent_pos, environment_state_agent_pos"):
        make_env("pusht", 1, obs_type="state")
    with pytest.raises(TypeError, match="no option.*'episode_len'.*episode_length"):
        make_env("pusht", 1, episode_len=10)
    with pytest.raises(ValueError, match="render_size"):
        make_env_config("pusht", render_size=95)


def test_env_config_from_the_command_line():
    @dataclasses.dataclass
    class Config:
        env: EnvConfig = dataclasses.field(default_factory=PushTEnvConfig)  # the env

    config = draccus.parse(Config, args=["--env.type=pusht", "--env.obs_type=pixels", "--env.episode_length=50"])
    assert config.env == PushTEnvConfig(obs_type="pixels", episode_length=50)
    assert config.env.type == "pusht" and config.env.fps == 10 and config.env.max_episode_steps == 50
    with pytest.raises(ParsingError) as error:
        draccus.parse(Config, args=["--env.type=pusht", "--env.obs_type=keypoints"])
    assert "valid obs types: pixels_agent_pos" in str(error.value.__cause__)


def test_obs_type_for_a_policy_picks_the_cheapest_that_fits():
    config = PushTEnvConfig()
    assert config.obs_type_for([OBS_IMAGE, OBS_STATE]) == "pixels_agent_pos"
    assert config.obs_type_for([OBS_ENV_STATE, OBS_STATE]) == "environment_state_agent_pos"
    assert config.obs_type_for([OBS_STATE]) == "environment_state_agent_pos"  # no rendering when not needed
    assert config.obs_type_for([OBS_IMAGE]) == "pixels"
    with pytest.raises(ValueError, match="no observation type.*offers"):
        config.obs_type_for([OBS_IMAGE, OBS_ENV_STATE])
    assert config.action_feature.type == FeatureType.ACTION and config.action_feature.shape == (2,)


def test_make_env_for_a_policy_gives_what_it_reads():
    """make_env(..., policy=policy) picks the obs type from the policy's inputs, as `hfpolicy eval` does: a state
    policy gets the block's keypoints and no pixels; the default env (pixels) lacks them, and the error says why."""
    from policies.toy_policy import make_toy_policy

    policy = make_toy_policy("environment_state_agent_pos")
    env = make_env("pusht", 2, policy=policy, episode_length=3)
    try:
        observation, _ = env.reset(seed=[1, 2])
        assert set(observation) == {"environment_state", "agent_pos"}  # nothing rendered
        policy.reset()
        assert policy.select_action(observations_to_batch(observation)).shape == (2, 2)
    finally:
        env.close()
    env = make_env("pusht", 2, episode_length=3)  # no policy: pixels_agent_pos
    try:
        observation, _ = env.reset(seed=[1, 2])
        policy.reset()
        with pytest.raises(KeyError, match=r"lacks \['observation.environment_state'\].*obs_type.*policy=policy"):
            policy.select_action(observations_to_batch(observation))
    finally:
        env.close()


def test_make_env_for_a_policy_refuses_an_obs_type_that_lacks_its_inputs():
    from policies.toy_policy import make_toy_policy

    policy = make_toy_policy("environment_state_agent_pos")
    with pytest.raises(ValueError, match=r"obs_type='pixels_agent_pos' does not give.*obs_type='environment_state_"):
        make_env("pusht", 1, obs_type="pixels_agent_pos", policy=policy)
