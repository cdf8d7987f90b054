"""ALOHA bimanual simulation: gym-aloha's MuJoCo scenes (transfer cube, insertion) as a gymnasium env, each holding
its own object pose (not gym-aloha's module global) and ending diverged physics as truncated (docs/aloha.md)."""

import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hfpolicy.envs.mujoco_gl import RENDER_FAILURE, RenderBackendError, backend_advice, use_headless_gl

TASK_NAMES = {"AlohaTransferCube-v0": "transfer_cube", "AlohaInsertion-v0": "insertion"}  # --env.task -> scene
TASK_DESCRIPTIONS = {  # the task strings of LeRobot's ALOHA sim datasets (lerobot/aloha_sim_*)
    "AlohaTransferCube-v0": "Pick up the cube with the right arm and transfer it to the left arm.",
    "AlohaInsertion-v0": "Insert the peg into the socket.",
}
OBS_TYPES = ("pixels_agent_pos", "environment_state_agent_pos", "pixels_environment_state_agent_pos")
MOTOR_NAMES = [  # the joints of observation.state / action, as lerobot/aloha_sim_* names them ("motors")
    f"{side}_{joint}"
    for side in ("left", "right")
    for joint in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
]
ENV_STATE_SIZES = {"AlohaTransferCube-v0": 7, "AlohaInsertion-v0": 14}
SUCCESS_REWARD = 4  # gym-aloha's top reward: the left gripper holds the cube in the air / the peg touches the pin
FPS = 50  # gym-aloha's control rate (DT = 0.02 s)
CAMERA = "top"
GYM_ID = "hfpolicy/Aloha-v0"


def load_dm_control(need_rendering: bool):
    """dm_control's `mujoco` module with a GL backend (MUJOCO_GL, default egl); if that fails, RenderBackendError, or
    without `need_rendering`, MUJOCO_GL=disable for this process (the physics still works)."""
    if RENDER_FAILURE and need_rendering:
        raise RenderBackendError(backend_advice(""))
    use_headless_gl()
    try:
        from dm_control import mujoco
    except Exception as e:  # a missing library shows as ImportError, AttributeError, OSError or RuntimeError
        error = f"{type(e).__name__}: {e}"
        if need_rendering:
            raise RenderBackendError(backend_advice(error)) from e
        RENDER_FAILURE.append((os.environ["MUJOCO_GL"], error))
        for name in [m for m in sys.modules if m.startswith("dm_control")]:
            del sys.modules[name]
        os.environ["MUJOCO_GL"] = "disable"
        from dm_control import mujoco
    return mujoco


def sample_object_pose(task: str, seed: int) -> np.ndarray:
    """The objects' initial pose (qpos of their free joints) that gym-aloha gives `seed`: (7,) cube, (14,) peg+socket."""
    from gym_aloha.utils import sample_box_pose, sample_insertion_pose

    if TASK_NAMES[task] == "transfer_cube":
        return np.asarray(sample_box_pose(seed), dtype=np.float64)
    return np.concatenate(sample_insertion_pose(seed)).astype(np.float64)


def check_task(task: str) -> None:
    if task not in TASK_NAMES:
        raise ValueError(f"unknown ALOHA task --env.task={task!r}; valid: {', '.join(TASK_NAMES)}")


def make_task(task: str, end_effector: bool = False):
    """A dm_control task of gym-aloha's scene `task` whose objects start at its `object_pose` (set before each
    reset), observing the state only (no images)."""
    from gym_aloha.constants import START_ARM_POSE
    from gym_aloha.tasks import sim, sim_end_effector

    if end_effector:
        base = {
            "transfer_cube": sim_end_effector.TransferCubeEndEffectorTask,
            "insertion": sim_end_effector.InsertionEndEffectorTask,
        }
    else:
        base = {"transfer_cube": sim.TransferCubeTask, "insertion": sim.InsertionTask}
    parent: Any = base[TASK_NAMES[task]]  # a base class picked at run time

    class SeededTask(parent):
        object_pose: np.ndarray | None = None

        def initialize_episode(self, physics):
            if self.object_pose is None:
                raise RuntimeError("set the task's object_pose before resetting")
            if end_effector:
                self.initialize_robots(physics)  # arms at the start pose, mocap bodies on the grippers
            else:
                physics.named.data.qpos[:16] = START_ARM_POSE
                np.copyto(physics.data.ctrl, START_ARM_POSE)
            physics.data.qpos[16:] = self.object_pose
            parent.__mro__[1].initialize_episode(self, physics)  # the bimanual base (dm_control's bookkeeping)

        def get_observation(self, physics):
            return {
                "qpos": self.get_qpos(physics),
                "qvel": self.get_qvel(physics),
                "env_state": self.get_env_state(physics),
            }

    return SeededTask()


def make_control_env(task: str, need_rendering: bool, end_effector: bool = False, shadows: bool = True):
    """A dm_control Environment of gym-aloha's joint-space (or end-effector/mocap) scene for `task`, at 50 Hz."""
    from dm_control.rl import control
    from gym_aloha.constants import ASSETS_DIR, DT

    mujoco = load_dm_control(need_rendering)
    prefix = "bimanual_viperx_end_effector_" if end_effector else "bimanual_viperx_"
    physics = mujoco.Physics.from_xml_path(str(ASSETS_DIR / f"{prefix}{TASK_NAMES[task]}.xml"))
    if not shadows:
        physics.model.light_castshadow[:] = 0
    return control.Environment(physics, make_task(task, end_effector), control_timestep=DT)  # no time limit


def action_bounds(physics) -> tuple[np.ndarray, np.ndarray]:
    """The range each of the 14 action entries acts within: the actuators' ctrlrange, the grippers' as normalized
    positions. MuJoCo clamps controls itself, so the env passes actions unchanged (the rollout counts those outside)."""
    from gym_aloha.constants import normalize_puppet_gripper_position

    ranges = physics.model.actuator_ctrlrange  # 16 actuators: 6 arm + 2 fingers, per side
    rows = [*range(0, 7), *range(8, 15)]  # arm joints and the first finger of each side
    low, high = ranges[rows, 0].copy(), ranges[rows, 1].copy()
    for i in (6, 13):
        low[i], high[i] = normalize_puppet_gripper_position(low[i]), normalize_puppet_gripper_position(high[i])
    return low.astype(np.float32), high.astype(np.float32)


class AlohaEnv(gym.Env):
    """gym-aloha's joint-space scene for `task`. Actions: 14 joint targets (per arm: 6 joint angles, then the gripper,
    0 closed, 1 open); observations: `pixels` {"top": (H, W, 3) uint8}, `agent_pos` (14,), `environment_state` (the
    object poses). An episode terminates at reward 4 (success) when `terminate_on_success`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": FPS}

    def __init__(
        self,
        task: str = "AlohaTransferCube-v0",
        obs_type: str = "pixels_agent_pos",
        observation_height: int = 480,
        observation_width: int = 640,
        visualization_height: int = 480,
        visualization_width: int = 640,
        shadows: bool = True,
        terminate_on_success: bool = True,
        render_mode: str = "rgb_array",
    ):
        super().__init__()
        check_task(task)
        if obs_type not in OBS_TYPES:
            raise ValueError(f"unknown obs_type={obs_type!r} for ALOHA; valid: {', '.join(OBS_TYPES)}")
        self.task, self.obs_type, self.render_mode = task, obs_type, render_mode
        self.observation_size = (observation_height, observation_width)
        self.visualization_size = (visualization_height, visualization_width)
        self.terminate_on_success = terminate_on_success
        # A GL backend is needed at once for pixel observations; state-only envs render only for videos.
        self._env = make_control_env(task, need_rendering=obs_type.startswith("pixels"), shadows=shadows)
        self.physics = self._env.physics
        observation: dict[str, spaces.Space] = {}
        if obs_type.startswith("pixels"):
            image = spaces.Box(0, 255, (*self.observation_size, 3), dtype=np.uint8)
            observation["pixels"] = spaces.Dict({CAMERA: image})
        if "environment_state" in obs_type:
            observation["environment_state"] = spaces.Box(-np.inf, np.inf, (ENV_STATE_SIZES[task],), np.float64)
        observation["agent_pos"] = spaces.Box(-1000.0, 1000.0, (14,), dtype=np.float64)
        self.observation_space = spaces.Dict(observation)
        low, high = action_bounds(self.physics)
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        self.object_pose: np.ndarray | None = None  # the objects' start pose of the current episode
        self.episode_seed: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))  # a function of the last seed given
        self.episode_seed = int(seed)
        self.object_pose = sample_object_pose(self.task, self.episode_seed)
        self._env.task.object_pose = self.object_pose
        self._env.task.random.seed(self.episode_seed)
        time_step = self._env.reset()
        return self._observation(time_step.observation), {"is_success": False}

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (14,):
            raise ValueError(f"ALOHA actions are 14 joint targets, got shape {action.shape}")
        from dm_control.rl.control import PhysicsError

        try:
            time_step = self._env.step(action)
        except PhysicsError as e:  # the simulation blew up: this episode is over, as a failure
            observation = self._observation(self._env.task.get_observation(self.physics), render=False)
            return observation, 0.0, False, True, {"is_success": False, "physics_diverged": True, "error": str(e)}
        reward = float(time_step.reward)
        success = reward == SUCCESS_REWARD
        terminated = success and self.terminate_on_success
        return self._observation(time_step.observation), reward, terminated, False, {"is_success": success}

    def _observation(self, raw: dict, render: bool = True) -> dict:
        observation: dict[str, Any] = {}
        if self.obs_type.startswith("pixels"):
            top = self._render(self.observation_size) if render else np.zeros((*self.observation_size, 3), np.uint8)
            observation["pixels"] = {CAMERA: top}
        if "environment_state" in self.obs_type:
            observation["environment_state"] = np.asarray(raw["env_state"], dtype=np.float64)
        observation["agent_pos"] = np.asarray(raw["qpos"], dtype=np.float64)
        return observation

    def environment_state(self) -> np.ndarray:
        """The objects' current pose (whatever the obs type): cube xyz + wxyz quaternion; peg's, then socket's."""
        return self.physics.data.qpos[16:].copy()

    def _render(self, size: tuple[int, int]) -> np.ndarray:
        from mujoco import FatalError  # MUJOCO_GL=glfw without a display

        try:
            return self.physics.render(height=size[0], width=size[1], camera_id=CAMERA)
        except (RuntimeError, ImportError, AttributeError, OSError, FatalError) as e:  # no GL context could be made
            raise RenderBackendError(backend_advice(f"{type(e).__name__}: {e}")) from e

    def render(self):
        return self._render(self.visualization_size)

    def close(self):
        physics = getattr(self, "physics", None)
        if physics is not None:
            physics.free()
            self.physics = None
