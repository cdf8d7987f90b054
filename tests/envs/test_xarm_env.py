"""hfpolicy.envs.xarm: LeRobot's xArm features, gym-xarm's physics on MuJoCo 3, per-seed episodes in vector envs."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hfpolicy.cli import main
from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.envs import XarmEnvConfig, episode_step_limit, make_env_config, observations_to_batch
from hfpolicy.envs.xarm import XarmEnv
from hfpolicy.features import FeatureType
from hfpolicy.field_errors import ConfigFieldError

STATE = "environment_state_agent_pos"


def wiggle(t: int, n: int) -> np.ndarray:
    """(n, 4) actions that move the arm and close the gripper (so the gripper control is non-zero at episode end)."""
    return np.tile(np.array([0.3 * np.sin(t), 0.5, -0.4, 1.0], dtype=np.float32), (n, 1))


def test_features_are_lerobots_and_pixels_are_84x84():
    """LeRobot 0.6.1's xArm config: 15 fps, 200 steps, observation.image 84x84, observation.state 4, action 4."""
    cfg = XarmEnvConfig()
    assert cfg.fps == 15 and cfg.max_episode_steps == 200 and cfg.action_feature.shape == (4,)
    features = cfg.observation_features()
    assert set(features) == {OBS_IMAGE, OBS_STATE}
    assert features[OBS_IMAGE].type == FeatureType.IMAGE and features[OBS_IMAGE].shape == (3, 84, 84)
    assert features[OBS_STATE].shape == (4,)
    assert cfg.observation_features(STATE)[OBS_ENV_STATE].shape == (7,)
    env = XarmEnvConfig(obs_type="pixels_environment_state_agent_pos").make_single()
    try:
        observation, info = env.reset(seed=0)
        assert info == {"is_success": False} and env.metadata["render_fps"] == 15
        assert observation["pixels"].shape == (84, 84, 3) and observation["pixels"].dtype == np.uint8
        assert observation["pixels"].std() > 10  # a scene, not a blank frame
        assert env.render().shape == (384, 384, 3)
        observation, reward, terminated, truncated, info = env.step(np.zeros(4, np.float32))
        assert np.isfinite(reward) and not terminated and not truncated and info == {"is_success": False}
        batch = observations_to_batch({k: v[None] for k, v in observation.items()})
        features = cfg.observation_features("pixels_environment_state_agent_pos")
        assert set(batch) == set(features)
        for key, feature in features.items():
            assert tuple(batch[key].shape[1:]) == feature.shape and batch[key].dtype.is_floating_point
        sim = env.unwrapped.sim  # observation.state is gym-xarm's robot_state; the cube's pose its obj, obj_rot
        np.testing.assert_array_equal(observation["agent_pos"], sim.robot_state)
        np.testing.assert_array_equal(observation["environment_state"], np.r_[sim.obj, sim.obj_rot])
    finally:
        env.close()


def test_an_episode_depends_on_its_seed_alone():
    """A used env (its last episode ended with the gripper closing) replays a seed exactly as a fresh env does."""
    cfg = XarmEnvConfig(obs_type=STATE)
    trajectories = []
    for warm_up in (False, True):
        env = cfg.make_single()
        try:
            if warm_up:
                env.reset(seed=99)
                for t in range(15):
                    env.step(wiggle(t, 1)[0])
            observation, _ = env.reset(seed=7)
            steps = [np.r_[observation["agent_pos"], observation["environment_state"]]]
            for t in range(5):
                observation, reward, *_ = env.step(wiggle(t, 1)[0])
                steps.append(np.r_[observation["agent_pos"], observation["environment_state"], reward])
            trajectories.append(np.concatenate(steps))
        finally:
            env.close()
    np.testing.assert_array_equal(trajectories[0], trajectories[1])


@pytest.mark.parametrize("parallel", [False, True])
def test_each_env_slot_starts_from_its_own_seed(parallel):
    cfg = make_env_config("xarm", obs_type=STATE, episode_length=6)
    env = cfg.make(3, parallel=parallel)
    try:
        assert episode_step_limit(env) == 6
        observation, _ = env.reset(seed=[3, 40, 3])
        cubes = observation["environment_state"]
        np.testing.assert_array_equal(cubes[0], cubes[2])
        assert not np.array_equal(cubes[0], cubes[1])
        for t in range(3):
            observation, *_ = env.step(wiggle(t, 3))
        np.testing.assert_array_equal(observation["agent_pos"][0], observation["agent_pos"][2])
        again, _ = env.reset()  # unseeded: drawn from each env's generator, so still a function of the seeds
        np.testing.assert_array_equal(again["environment_state"][0], again["environment_state"][2])
        assert not np.array_equal(again["environment_state"][0], cubes[0])
    finally:
        env.close()


def test_serial_and_parallel_envs_step_identically():
    cfg = XarmEnvConfig(obs_type=STATE)
    results = []
    for parallel in (False, True):
        env = cfg.make(2, parallel=parallel)
        try:
            observation, _ = env.reset(seed=[5, 6])
            trajectory = []
            for t in range(4):
                observation, reward, *_ = env.step(wiggle(t, 2))
                trajectory.append(np.c_[observation["agent_pos"], observation["environment_state"], reward])
            results.append(np.stack(trajectory))
        finally:
            env.close()
    np.testing.assert_array_equal(results[0], results[1])


def test_bad_task_and_missing_gym_xarm_say_the_fix(monkeypatch, capsys):
    with pytest.raises(ConfigFieldError) as error:
        XarmEnvConfig(task="XarmPush-v0")
    assert error.value.flags("env.") == "unknown xArm --env.task=XarmPush-v0; gym-xarm has: XarmLift-v0"
    with pytest.raises(ValueError, match="gym-xarm has: XarmLift-v0"):
        XarmEnv(task="XarmReach-v0")
    argv = ["record", "--env.type=xarm", "--env.task=Lift", "--output_dir=x"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "hfpolicy record: error: unknown xArm --env.task=Lift; gym-xarm has: XarmLift-v0\n"
    monkeypatch.setitem(sys.modules, "gym_xarm", None)  # as if not installed
    with pytest.raises(ConfigFieldError, match=r"needs gym-xarm, which is not installed: pip install --no-deps gym-xa"):
        XarmEnvConfig()


def test_without_a_gl_backend_state_works_and_pixels_say_what_to_do(tmp_path):
    """An EGL device that does not exist: state-only envs run, pixel envs and the CLI say (one line) which
    MUJOCO_GL backends there are and how to avoid rendering."""
    script = textwrap.dedent(
        """
        import numpy as np
        from hfpolicy.envs.xarm import XarmEnv
        from hfpolicy.envs.mujoco_gl import RenderBackendError
        env = XarmEnv(obs_type="environment_state_agent_pos")
        env.reset(seed=1)
        env.step(np.zeros(4))
        print("STATE OK")
        for make in (env.render, lambda: XarmEnv(obs_type="pixels_agent_pos").reset(seed=0)):
            try:
                make()
            except RenderBackendError as e:
                print("ERROR", e)
        """
    )
    environ = {**os.environ, "MUJOCO_GL": "egl", "MUJOCO_EGL_DEVICE_ID": "99"}
    out = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "STATE OK" in out.stdout.splitlines()
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2
    for error in errors:
        assert "MUJOCO_GL=egl did not work" in error and "MUJOCO_GL=osmesa" in error and "MUJOCO_GL=glfw" in error
        assert "--env.obs_type=environment_state_agent_pos" in error
    command = [sys.executable, "-m", "hfpolicy", "record", "--env.type=xarm", f"--output_dir={tmp_path / 'd'}"]
    out = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.startswith("hfpolicy record: error:")]
    assert out.returncode == 2 and len(lines) == 1 and "MUJOCO_GL=osmesa" in lines[0], out.stderr[-2000:]
    assert not (tmp_path / "d").exists()  # (stderr may also hold mujoco's "Exception ignored" from its GL cleanup)
