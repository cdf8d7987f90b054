"""The scripted xArm lift expert: it lifts the cube on fixed seeds (state-only), through its four phases."""

import numpy as np
import pytest

from hfpolicy.envs import PushTEnvConfig, XarmEnvConfig
from hfpolicy.experts.xarm_expert import LIFT, XarmExpert, run_xarm_expert_episode


@pytest.fixture(scope="module")
def env():
    env = XarmEnvConfig(obs_type="environment_state_agent_pos").make_single()
    yield env
    env.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_expert_lifts_the_cube(env, seed):
    """gym-xarm's is_success (the cube 0.15 m above its start height) ends the episode within LeRobot's 200 steps;
    gym-xarm's reward pays for the lift (its pick term, the cube's target height in the table frame, > 0.05)."""
    expert = XarmExpert()
    episode = run_xarm_expert_episode(env, expert, seed)
    assert episode.success and episode.n_steps < 200 and expert.phase == LIFT
    cube_z = env.unwrapped.environment_state()[2]
    assert cube_z >= env.unwrapped.sim.z_target > -0.059 + 0.13  # lifted from the table (cube centre at -0.059)
    assert episode.rewards[-1] > 0.05 and episode.rewards[:10].max() < 0


def test_the_expert_is_deterministic_and_needs_an_xarm_env(env):
    expert = XarmExpert()
    with pytest.raises(RuntimeError, match="call reset"):
        expert.act()
    lengths = [run_xarm_expert_episode(env, expert, 5).rewards for _ in range(2)]
    np.testing.assert_array_equal(*lengths)
    pusht = PushTEnvConfig(obs_type="environment_state_agent_pos").make_single()
    try:
        pusht.reset(seed=0)
        with pytest.raises(TypeError, match="needs an hfpolicy XarmEnv"):
            expert.reset(pusht)
    finally:
        pusht.close()
