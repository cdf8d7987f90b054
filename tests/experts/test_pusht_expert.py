"""The scripted PushT expert on the real gym-pusht env: it solves episodes with imitable motions, deterministically,
and refuses anything that is not PushT. (bench/scripted_expert.py measures it over 500 seeds.)"""

import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest

from hfpolicy.experts import (
    NotPushTEnvError,
    PushTExpert,
    PushTExpertConfig,
    run_expert_episode,
    target_motion_stats,
)
from hfpolicy.experts.pusht_expert import _PushSimulator


@pytest.fixture()
def env():
    env = gym.make("gym_pusht/PushT-v0", obs_type="state")
    yield env
    env.close()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_solves_seed_with_imitable_targets(env, seed):
    expert = PushTExpert()
    episode = run_expert_episode(env, expert, seed=seed, max_steps=300)

    assert episode.success, f"seed {seed}: max coverage {episode.coverages.max():.3f} after {episode.n_steps} steps"
    assert episode.coverages[-1] > 0.95
    assert episode.n_steps == len(episode.actions) <= 300
    assert episode.actions.dtype == np.float32 and episode.actions.shape == (episode.n_steps, 2)
    assert np.all((episode.actions >= 0) & (episode.actions <= 512))
    motion = target_motion_stats(episode.actions, episode.agent_start, episode.phase_starts)
    assert motion["max_step_px"] <= 20.0, motion  # the first move is measured from the agent's start
    assert motion["jitter"] == 0, motion
    assert 0 < episode.planning_cpu_s < 5.0
    assert episode.n_plans >= 1 and episode.phase_starts[0] == 0


def test_same_seed_same_actions(env):
    first = run_expert_episode(env, PushTExpert(), seed=11)
    expert = PushTExpert()
    run_expert_episode(env, expert, seed=5)  # an expert that ran another episode first still repeats itself
    second = run_expert_episode(env, expert, seed=11)
    assert np.array_equal(first.actions, second.actions)
    assert first.n_steps == second.n_steps and first.success == second.success


def test_max_step_is_a_setting(env):
    expert = PushTExpert(PushTExpertConfig(max_step_px=12.0))
    episode = run_expert_episode(env, expert, seed=3, max_steps=60)
    assert target_motion_stats(episode.actions, episode.agent_start)["max_step_px"] <= 12.0


def test_recorder_hooks_see_every_pixel_observation():
    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos", max_episode_steps=300)
    first, steps = [], []
    episode = run_expert_episode(
        env,
        PushTExpert(),
        seed=0,
        on_reset=lambda obs, info: first.append(obs),
        on_step=lambda t, action, obs, reward, terminated, truncated, info: steps.append((t, action, obs, terminated)),
    )
    env.close()
    assert len(first) == 1 and first[0]["pixels"].shape == (96, 96, 3)
    assert [t for t, *_ in steps] == list(range(episode.n_steps))
    assert all(obs["pixels"].shape == (96, 96, 3) and obs["agent_pos"].shape == (2,) for _, _, obs, _ in steps)
    assert np.array_equal(np.stack([a for _, a, _, _ in steps]), episode.actions)
    assert steps[-1][3] is True and not any(done for *_, done in steps[:-1])


def test_planner_copy_replays_the_env_exactly(env):
    """The private pymunk space predicts the env's own block motion (the planner trusts its rollouts)."""
    env.reset(seed=0)
    base = env.unwrapped
    sim = _PushSimulator(base)
    sim.load(base.agent.position, base.agent.velocity, (*base.block.position, base.block.angle))
    rng = np.random.default_rng(0)
    target = np.array(base.agent.position)
    moved = 0.0
    for _ in range(40):  # drift the agent into the block and through it
        toward = np.array(base.block.position) - target
        target = (target + np.clip(0.3 * toward + rng.normal(0, 8, 2), -20, 20)).astype(np.float32)
        before = np.array(base.block.position)
        env.step(target)
        _, poses = sim.rollout(target[None].astype(np.float64), settle_px=np.inf, max_hold=0)
        moved += float(np.linalg.norm(np.array(base.block.position) - before))
        np.testing.assert_allclose(poses[-1], [*base.block.position, base.block.angle], atol=1e-6)
    assert moved > 20.0  # the block was pushed, so contacts were replayed too


def test_rejects_envs_that_are_not_pusht():
    cartpole = gym.make("CartPole-v1")
    cartpole.reset(seed=0)
    with pytest.raises(NotPushTEnvError, match="gym_pusht/PushT-v0"):
        PushTExpert().reset(cartpole)
    with pytest.raises(NotPushTEnvError, match="CartPole"):
        PushTExpert().reset(cartpole)
    with pytest.raises(NotPushTEnvError):
        PushTExpert().reset("gym_pusht/PushT-v0")


def test_requires_reset_env_and_expert(env):
    fresh = gym.make("gym_pusht/PushT-v0")
    with pytest.raises(NotPushTEnvError, match="env.reset"):
        PushTExpert().reset(fresh)
    with pytest.raises(RuntimeError, match="expert.reset"):
        PushTExpert().act(env)
    env.reset(seed=0)
    expert = PushTExpert()
    expert.reset(env)
    other = gym.make("gym_pusht/PushT-v0")
    other.reset(seed=1)
    with pytest.raises(RuntimeError, match="not the one the expert was reset on"):
        expert.act(other)


def test_motion_stats_count_jitter():
    start = np.zeros(2)
    forth_and_back = np.array([[10, 0], [0, 0], [10, 0], [0, 0]], dtype=np.float32)
    stats = target_motion_stats(forth_and_back, start)
    assert stats["max_step_px"] == 10.0
    assert stats["reversals"] == 3 and stats["jitter"] == 3
    # a reversal where a new phase begins (push -> walk away) is no jitter; a second one right after it is
    push_then_leave = np.array([[10, 0], [20, 0], [30, 0], [20, 0], [10, 0], [10, 20]], dtype=np.float32)
    assert target_motion_stats(push_then_leave, start, phase_starts=[0, 3])["jitter"] == 0
    assert target_motion_stats(push_then_leave, start)["jitter"] == 1
    back_forth_back = np.array([[10, 0], [20, 0], [10, 0], [20, 0], [30, 0]], dtype=np.float32)
    assert target_motion_stats(back_forth_back, start, phase_starts=[0, 2, 3])["jitter"] == 1
    # holds and tiny moves are skipped
    held = np.array([[10, 0], [10, 0], [10.5, 0], [20, 0]], dtype=np.float32)
    assert target_motion_stats(held, start)["reversals"] == 0


# --- labelling another driver's states (DAgger) ---------------------------------------------------------------------


def test_label_driven_by_its_own_labels_acts_as_act(env):
    """Following its own labels, the expert never re-plans and commands exactly what `act` commands."""
    reference = run_expert_episode(env, PushTExpert(), seed=7)
    env.reset(seed=7)
    expert = PushTExpert()
    expert.reset(env)
    last, labels = np.array(env.unwrapped.agent.position), []
    for _ in range(reference.n_steps):
        labels.append(expert.label(env, last))
        env.step(labels[-1])
        last = labels[-1].astype(np.float64)
    assert np.array_equal(np.array(labels), reference.actions)
    assert expert.n_replans == 0


def test_label_replans_when_the_driver_leaves_the_plan_and_still_solves(env):
    """A noisy driver makes the expert re-plan from the state it finds; once the driver hands over, the expert
    solves the episode from there (the states a weak policy leaves behind are still solvable)."""
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    expert = PushTExpert()
    expert.reset(env)
    last, success = np.array(env.unwrapped.agent.position), False
    for t in range(300):
        label = expert.label(env, last)
        assert label.dtype == np.float32 and label.shape == (2,)
        action = label + (rng.normal(0.0, 25.0, 2) if t < 40 else 0.0)  # a poor driver for 40 steps
        action = np.clip(action, 0, 512).astype(np.float32)
        _, _, terminated, truncated, info = env.step(action)
        last, success = action.astype(np.float64), success or info["is_success"]
        if terminated or truncated:
            break
    assert expert.n_replans >= 20  # it re-planned for most of the noisy steps
    assert success
