"""The scripted bimanual ALOHA expert: its geometry helpers, its plans, and that it solves fixed seeds (state-only)."""

import numpy as np
import pytest

from hfpolicy.envs import AlohaEnvConfig
from hfpolicy.envs.aloha import sample_object_pose
from hfpolicy.experts.aloha_expert import (
    AlohaExpert,
    Waypoint,
    interpolate,
    quat_about,
    quat_multiply,
    run_aloha_expert_episode,
    slerp,
)


@pytest.fixture(scope="module")
def expert():
    expert = AlohaExpert()
    yield expert
    expert.close()


def test_quaternion_helpers():
    quarter = quat_about([0, 0, 1], 90)
    np.testing.assert_allclose(quat_multiply(quarter, quarter), quat_about([0, 0, 1], 180), atol=1e-12)
    np.testing.assert_allclose(slerp(np.array([1.0, 0, 0, 0]), quat_about([0, 0, 1], 180), 0.5), quarter, atol=1e-12)
    waypoints = [Waypoint(0, (0, 0, 0), (1, 0, 0, 0), 0.0), Waypoint(10, (1, 2, 3), tuple(quarter), 1.0)]
    xyz, quat, opening = interpolate(waypoints, 5)
    np.testing.assert_allclose(xyz, [0.5, 1, 1.5])
    np.testing.assert_allclose(quat, quat_about([0, 0, 1], 45), atol=1e-12)
    assert opening == 0.5 and interpolate(waypoints, 50)[2] == 1.0


def test_plan_is_a_function_of_the_object_pose(expert):
    task = "AlohaTransferCube-v0"
    first = expert.plan(task, sample_object_pose(task, 2))
    again = expert.plan(task, sample_object_pose(task, 2))
    other = expert.plan(task, sample_object_pose(task, 3))
    assert first.shape == (400, 14) and first.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 1e-2  # a different cube, a different reach
    assert first[:, [6, 13]].min() == 0.0 and first[:, [6, 13]].max() == 1.0  # grippers closed and opened


@pytest.mark.parametrize(("task", "seeds"), [("AlohaTransferCube-v0", [0, 7]), ("AlohaInsertion-v0", [1, 12])])
def test_expert_solves_fixed_seeds(expert, task, seeds):
    env = AlohaEnvConfig(task=task, obs_type="environment_state_agent_pos").make_single()  # ends at success
    try:
        for seed in seeds:
            episode = run_aloha_expert_episode(env, expert, seed)
            assert episode.success, (task, seed, np.bincount(episode.rewards.astype(int), minlength=5))
            assert episode.n_steps == episode.first_success_step < 400  # the env ended it at the success
            assert episode.rewards[-1] == 4
    finally:
        env.close()


def test_expert_needs_a_reset_aloha_env(expert):
    import gym_pusht  # noqa: F401
    import gymnasium as gym

    with pytest.raises(TypeError, match="needs a reset hfpolicy AlohaEnv"):
        expert.reset(gym.make("gym_pusht/PushT-v0", obs_type="state"))
    with pytest.raises(RuntimeError, match="call reset"):
        AlohaExpert().act()
    with pytest.raises(ValueError, match="unknown ALOHA task"):
        expert.plan("AlohaPour-v0", np.zeros(7))
