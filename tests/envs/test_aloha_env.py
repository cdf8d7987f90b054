"""hfpolicy.envs.aloha: LeRobot's ALOHA observations, gym-aloha's physics and poses, per-env seeding in vector envs.

Rendering is slow on a CPU (0.1-1 s per 480x640 frame), so only a few tests render, once or twice each.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs import AlohaEnvConfig, episode_step_limit, make_env_config, observations_to_batch
from hfpolicy.envs.aloha import AlohaEnv, RenderBackendError, sample_object_pose
from hfpolicy.features import FeatureType
from hfpolicy.field_errors import ConfigFieldError

TASKS = ["AlohaTransferCube-v0", "AlohaInsertion-v0"]
TOP = "observation.images.top"


def hold_still(observation: dict) -> np.ndarray:
    """Joint targets = the current joint positions (a batch), a gentle action that keeps the physics sane."""
    return np.asarray(observation["agent_pos"], dtype=np.float32)


@pytest.mark.parametrize("task", TASKS)
def test_state_observations_have_lerobot_keys_shapes_and_dtypes(task):
    env = AlohaEnvConfig(task=task, obs_type="environment_state_agent_pos").make_single()
    try:
        observation, info = env.reset(seed=0)
        assert set(observation) == {"agent_pos", "environment_state"} and info == {"is_success": False}
        assert observation["agent_pos"].shape == (14,) and observation["agent_pos"].dtype == np.float64
        size = 7 if task == "AlohaTransferCube-v0" else 14
        assert observation["environment_state"].shape == (size,)
        assert env.action_space.shape == (14,) and env.metadata["render_fps"] == 50
        observation, reward, terminated, truncated, info = env.step(hold_still(observation))
        assert reward == 0.0 and not terminated and not truncated and info["is_success"] is False
        batch = observations_to_batch({k: v[None] for k, v in observation.items()})
        features = AlohaEnvConfig(task=task).observation_features("environment_state_agent_pos")
        for key, feature in features.items():
            assert tuple(batch[key].shape[1:]) == feature.shape and batch[key].dtype.is_floating_point
    finally:
        env.close()


def test_pixel_observation_matches_lerobot_features_and_gym_aloha():
    """The top camera is (480, 640, 3) uint8, batched as observation.images.top (B, 3, 480, 640) in [0, 1], and the
    reset observation (pose, joints, image) equals gym-aloha's own env for the same seed."""
    import gym_aloha  # noqa: F401
    import gymnasium as gym

    cfg = AlohaEnvConfig()
    assert cfg.fps == 50 and cfg.max_episode_steps == 400  # LeRobot 0.6.1's AlohaEnv config
    features = cfg.observation_features()
    assert features[TOP].type == FeatureType.IMAGE and features[TOP].shape == (3, 480, 640)
    assert features[OBS_STATE].shape == (14,) and cfg.action_feature.shape == (14,)
    ours = cfg.make_single()
    theirs = gym.make("gym_aloha/AlohaTransferCube-v0", obs_type="pixels_agent_pos")
    try:
        observation, _ = ours.reset(seed=11)
        reference, _ = theirs.reset(seed=11)
        top = observation["pixels"]["top"]
        assert top.shape == (480, 640, 3) and top.dtype == np.uint8
        np.testing.assert_array_equal(top, reference["pixels"]["top"])
        np.testing.assert_array_equal(observation["agent_pos"], reference["agent_pos"])
        np.testing.assert_array_equal(ours.unwrapped.environment_state(), theirs.unwrapped._env.physics.data.qpos[16:])
        batch = observations_to_batch({"pixels": {"top": top[None]}, "agent_pos": observation["agent_pos"][None]})
        assert batch[TOP].shape == (1, 3, 480, 640) and float(batch[TOP].max()) <= 1.0
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("parallel", [False, True])
def test_each_env_slot_starts_from_its_own_seeds_pose(parallel):
    """gym-aloha keeps the pose in a module global; here every slot (and worker process) gets its own seed's."""
    cfg = make_env_config("aloha", task="AlohaInsertion-v0", obs_type="environment_state_agent_pos", episode_length=5)
    seeds = [3, 40, 3]
    env = cfg.make(3, parallel=parallel)
    try:
        assert episode_step_limit(env) == 5
        observation, _ = env.reset(seed=seeds)
        for slot, seed in enumerate(seeds):
            np.testing.assert_array_equal(observation["environment_state"][slot], sample_object_pose(cfg.task, seed))
        assert not np.array_equal(observation["environment_state"][0], observation["environment_state"][1])
        for _ in range(3):
            observation, *_ = env.step(hold_still(observation))
        after = observation["environment_state"]
        np.testing.assert_array_equal(after[0], after[2])  # same seed, same episode
        assert np.abs(after[:, 2] - 0.05).max() > 1e-3  # the objects settled: the physics ran
        again, _ = env.reset()  # unseeded: drawn from each env's generator, so still a function of the seeds
        np.testing.assert_array_equal(again["environment_state"][0], again["environment_state"][2])
        assert not np.array_equal(again["environment_state"][0], observation["environment_state"][0])
    finally:
        env.close()


def test_serial_and_parallel_envs_step_identically():
    cfg = AlohaEnvConfig(task="AlohaTransferCube-v0", obs_type="environment_state_agent_pos")
    results = []
    for parallel in (False, True):
        env = cfg.make(2, parallel=parallel)
        try:
            observation, _ = env.reset(seed=[5, 6])
            trajectory = []
            for t in range(4):
                action = hold_still(observation) + np.float32(0.02 * t)
                observation, reward, *_ = env.step(action)
                trajectory.append(np.concatenate([observation["agent_pos"], observation["environment_state"]], 1))
            results.append(np.stack(trajectory))
        finally:
            env.close()
    np.testing.assert_array_equal(results[0], results[1])


def test_diverging_physics_ends_the_episode_instead_of_raising():
    env = AlohaEnv("AlohaTransferCube-v0", obs_type="environment_state_agent_pos")
    try:
        env.reset(seed=0)
        physics = env.physics
        physics.data.qvel[:] = 1e12  # a state the integrator cannot handle
        _, reward, terminated, truncated, info = env.step(np.zeros(14, np.float32))
        assert truncated and not terminated and reward == 0.0 and info.get("physics_diverged")
    finally:
        env.close()


def test_config_errors_name_the_field():
    """In Python's words from the config, as --env.* flags from the fields (what the command line prints)."""
    with pytest.raises(ConfigFieldError, match="task='Aloha'; valid tasks: AlohaTransferCube-v0") as error:
        AlohaEnvConfig(task="Aloha")
    assert error.value.flags("env.").startswith("unknown ALOHA --env.task=Aloha; valid tasks: AlohaTransferCube-v0")
    with pytest.raises(ConfigFieldError, match="unknown obs_type='pixels'.*environment_state_agent_pos") as error:
        AlohaEnvConfig(obs_type="pixels")
    assert error.value.fields == ["obs_type"]
    with pytest.raises(ConfigFieldError, match="render_height=481 and render_width=640 must be even") as error:
        AlohaEnvConfig(render_height=481)
    assert error.value.flags("env.").startswith("--env.render_height=481 and --env.render_width=640 must be even")
    assert ACTION not in AlohaEnvConfig().observation_features()
    assert OBS_ENV_STATE in AlohaEnvConfig().observation_features("pixels_environment_state_agent_pos")


def test_without_a_gl_backend_state_works_and_pixels_say_what_to_do():
    """An EGL device that does not exist makes the backend fail to load: state-only envs still run (rendering is
    disabled), pixel envs and render() raise RenderBackendError naming the alternatives."""
    script = textwrap.dedent(
        """
        import numpy as np
        from hfpolicy.envs.aloha import AlohaEnv, RenderBackendError
        env = AlohaEnv(obs_type="environment_state_agent_pos")
        observation, _ = env.reset(seed=1)
        env.step(observation["agent_pos"].astype(np.float32))
        print("STATE OK")
        for make in (env.render, lambda: AlohaEnv(obs_type="pixels_agent_pos")):
            try:
                make()
            except RenderBackendError as e:
                print("ERROR", e)
        """
    )
    environ = {**os.environ, "MUJOCO_GL": "egl", "MUJOCO_EGL_DEVICE_ID": "99"}
    out = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "STATE OK" in lines
    errors = [line for line in lines if line.startswith("ERROR")]
    assert len(errors) == 2
    for error in errors:
        assert "MUJOCO_GL=egl did not work" in error and "MUJOCO_GL=osmesa" in error
        assert "--env.obs_type=environment_state_agent_pos" in error
    assert issubclass(RenderBackendError, RuntimeError)


def test_torch_dynamo_imports_after_rendering():
    """Mesa's LLVM (loaded with the EGL display) and triton's (imported by torch dynamo, which diffusers imports)
    crash the process when triton comes second; the env loads triton first."""
    script = textwrap.dedent(
        """
        from hfpolicy.envs.aloha import AlohaEnv
        env = AlohaEnv(obs_type="pixels_agent_pos", shadows=False)
        observation, _ = env.reset(seed=0)
        assert observation["pixels"]["top"].max() > 0
        import torch._dynamo  # noqa: F401
        print("IMPORTED")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "IMPORTED" in out.stdout, (out.returncode, out.stderr[-2000:])
