"""gym-pusht's T in one module (hfpolicy.envs.pusht_tee), used by the dataset converter and the scripted expert:
its keypoints and coverage are the env's own."""

import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest

from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.envs.pusht_tee import TeeGeometry
from hfpolicy.experts import PushTExpert


@pytest.fixture(scope="module")
def env():
    env = gym.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos")
    env.reset(seed=0)
    yield env
    env.close()


def test_keypoints_and_coverage_are_the_envs_own(env):
    tee = TeeGeometry.from_env(env)  # through gymnasium's wrappers
    base = env.unwrapped
    goal = np.array(base.goal_pose, dtype=np.float64)
    rng = np.random.default_rng(0)
    poses = goal + rng.normal(0, [30.0, 30.0, 1.0], (12, 3))
    keypoints, coverage = [], []
    for x, y, angle in poses:
        base.block.angle = angle
        base.block.position = (x, y)
        keypoints.append(base.get_obs()["environment_state"])
        coverage.append(base._get_coverage())
    np.testing.assert_allclose(tee.keypoints(poses), keypoints, atol=1e-9)
    np.testing.assert_allclose(tee.coverage(poses, goal), coverage, atol=1e-9)


def test_the_converter_and_the_expert_share_one_t(env):
    converter = PushTScorer()
    expert = PushTExpert()
    expert.reset(env)
    assert isinstance(converter.tee, TeeGeometry) and isinstance(expert.tee, TeeGeometry)
    np.testing.assert_array_equal(converter.tee.pieces, expert.tee.pieces)
    np.testing.assert_array_equal(converter.center_of_gravity, expert.tee.cog)


def test_a_block_that_is_not_the_t_is_refused():
    with pytest.raises(ValueError, match="expected 2 quadrilaterals"):
        TeeGeometry(np.zeros((3, 4, 2)), np.zeros(2))
