"""xArm simulation: gym-xarm's MuJoCo tasks (XarmLift-v0) as a gymnasium env, on MuJoCo 3 and gymnasium 1.x; what
differs from gym-xarm's own env is in docs/xarm.md."""

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hfpolicy.envs.mujoco_gl import RENDER_FAILURE, RenderBackendError, backend_advice, use_headless_gl

OBS_TYPES = ("pixels_agent_pos", "environment_state_agent_pos", "pixels_environment_state_agent_pos")
FPS = 15  # LeRobot's xArm config and datasets (lerobot/xarm_*: 15 fps)
CAMERA = "camera0"
STATE_NAMES = ["eef_x", "eef_y", "eef_z", "gripper"]  # gym-xarm's robot_state
ENV_STATE_NAMES = ["cube_x", "cube_y", "cube_z", "cube_qw", "cube_qx", "cube_qy", "cube_qz"]
ACTION_NAMES = ["dx", "dy", "dz", "gripper"]  # end-effector moves and the grip (-1 open .. 1 closed)
GYM_ID = "hfpolicy/Xarm-v0"
TASK_DESCRIPTIONS = {"XarmLift-v0": "Pick up the cube and lift it."}  # the task sentence of recordings
INSTALL = "pip install --no-deps gym-xarm==0.1.1"  # gym-xarm pins mujoco<3; its real needs are in pyproject.toml


def registered_tasks() -> list[str]:
    """The xArm tasks gym-xarm registers (`gym_xarm/<task>`); ImportError saying how to install gym-xarm."""
    use_headless_gl()  # before gym_xarm imports mujoco
    try:
        import gym_xarm  # noqa: F401 (registers its tasks)
    except ImportError as e:
        raise ImportError(f"the xArm env needs gym-xarm ({e}): {INSTALL}") from e
    return sorted(name.split("/", 1)[1] for name in gym.registry if name.startswith("gym_xarm/"))


def check_task(task: str) -> None:
    tasks = registered_tasks()
    if task not in tasks:
        raise ValueError(f"unknown xArm task --env.task={task!r}; gym-xarm has: {', '.join(tasks)}")


class XarmEnv(gym.Env):
    """gym-xarm's task `task`. Actions: the end effector's move (x, y, z in [-1, 1]; 1 = 5 cm) and the grip (-1 open,
    1 closed); observations: `pixels` (H, W, 3) uint8 from camera0, `agent_pos` (4,) gym-xarm's robot state,
    `environment_state` (7,) the cube's pose. Episodes terminate at gym-xarm's `is_success`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": FPS}

    def __init__(
        self,
        task: str = "XarmLift-v0",
        obs_type: str = "pixels_agent_pos",
        observation_height: int = 84,
        observation_width: int = 84,
        visualization_height: int = 384,
        visualization_width: int = 384,
        render_mode: str = "rgb_array",
    ):
        super().__init__()
        check_task(task)
        if obs_type not in OBS_TYPES:
            raise ValueError(f"unknown obs_type={obs_type!r} for xArm; valid: {', '.join(OBS_TYPES)}")
        self.task, self.obs_type, self.render_mode = task, obs_type, render_mode
        self.observation_size = (observation_height, observation_width)
        self.visualization_size = (visualization_height, visualization_width)
        self.sim: Any = gym.make(f"gym_xarm/{task}", obs_type="state", disable_env_checker=True).unwrapped  # untyped
        self._renderers: dict[tuple[int, int], Any] = {}
        if obs_type.startswith("pixels") and RENDER_FAILURE:
            raise RenderBackendError(backend_advice(""))
        observation: dict[str, spaces.Space] = {}
        if obs_type.startswith("pixels"):
            observation["pixels"] = spaces.Box(0, 255, (*self.observation_size, 3), dtype=np.uint8)
        if "environment_state" in obs_type:
            observation["environment_state"] = spaces.Box(-np.inf, np.inf, (len(ENV_STATE_NAMES),), np.float64)
        observation["agent_pos"] = spaces.Box(-1000.0, 1000.0, (len(STATE_NAMES),), dtype=np.float64)
        self.observation_space = spaces.Dict(observation)
        self.action_space = spaces.Box(-1.0, 1.0, (len(ACTION_NAMES),), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        import mujoco

        super().reset(seed=seed)
        mujoco.mj_resetData(self.sim.model, self.sim.data)
        self.sim.reset(seed=seed)  # seed None: gym-xarm's generator goes on
        if hasattr(self.sim, "_init_z"):  # Lift: its start height in the table frame its success test uses
            self.sim._init_z -= self.sim.center_of_table[2]
        mujoco.mj_forward(self.sim.model, self.sim.data)  # positions of the settled state (gym-xarm's step does too)
        return self._observation(), {"is_success": False}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        if action.shape != self.action_space.shape:
            raise ValueError(
                f"xArm actions are {len(ACTION_NAMES)} numbers ({', '.join(ACTION_NAMES)}), got shape {action.shape}"
            )
        _, reward, terminated, _, info = self.sim.step(action)
        success = bool(info["is_success"])
        return self._observation(), float(reward), bool(terminated), False, {"is_success": success}

    def _observation(self) -> dict:
        observation = {}
        if self.obs_type.startswith("pixels"):
            observation["pixels"] = self._render(self.observation_size)
        if "environment_state" in self.obs_type:
            observation["environment_state"] = self.environment_state()
        observation["agent_pos"] = np.asarray(self.sim.robot_state, dtype=np.float64)
        return observation

    def environment_state(self) -> np.ndarray:
        """The cube's pose (whatever the obs type): xyz relative to the table centre, wxyz quaternion."""
        return np.concatenate([self.sim.obj, self.sim.obj_rot]).astype(np.float64)

    def _render(self, size: tuple[int, int]) -> np.ndarray:
        import mujoco

        try:
            renderer = self._renderers.get(size)
            if renderer is None:
                visual = self.sim.model.vis.global_  # the offscreen buffer must hold the frame
                visual.offheight, visual.offwidth = max(visual.offheight, size[0]), max(visual.offwidth, size[1])
                renderer = self._renderers[size] = mujoco.Renderer(self.sim.model, *size)
            renderer.update_scene(self.sim.data, camera=CAMERA)
            return renderer.render()
        except (RuntimeError, ImportError, AttributeError, OSError, mujoco.FatalError) as e:  # no GL context
            raise RenderBackendError(backend_advice(f"{type(e).__name__}: {e}")) from e

    def render(self):
        return self._render(self.visualization_size)

    def close(self):
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
