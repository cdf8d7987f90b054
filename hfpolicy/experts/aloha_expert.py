"""A scripted bimanual ALOHA expert, as the ACT paper made its scripted data: gripper waypoints planned from the
objects' start pose are played in gym-aloha's end-effector (mocap) scene, and the joints the arms reach there are the
actions of the joint-space env. The plan is a function of the object pose alone. Poses in the world frame (metres;
quaternions w, x, y, z)."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from hfpolicy.envs.aloha import TASK_NAMES, check_task, make_control_env
from hfpolicy.experts.episodes import ExpertEpisode, run_episode

IDENTITY = np.array([1.0, 0.0, 0.0, 0.0])
WELD_SOLIMP = (0.9, 0.95, 0.001)  # impedance of the gripper-to-mocap welds (dmin, dmax, width)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The rotation a then b in a's frame (Hamilton product, w first)."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def quat_about(axis: Sequence[float], degrees: float) -> np.ndarray:
    """The rotation by `degrees` about `axis`."""
    unit = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    half = math.radians(degrees) / 2
    return np.array([math.cos(half), *(math.sin(half) * unit)])


def slerp(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    """The rotation a fraction `s` of the way from a to b, along the shorter arc."""
    dot = float(np.dot(a, b))
    if dot < 0:
        b, dot = -b, -dot
    if dot > 0.9995:
        q = a + s * (b - a)
        return q / np.linalg.norm(q)
    theta = math.acos(dot)
    return (math.sin((1 - s) * theta) * a + math.sin(s * theta) * b) / math.sin(theta)


@dataclass(frozen=True)
class Waypoint:
    """Where one gripper is at step `t`: position, orientation and normalized opening (0 closed, 1 open)."""

    t: int
    xyz: ArrayLike
    quat: ArrayLike
    gripper: float


def interpolate(waypoints: Sequence[Waypoint], t: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The gripper pose at step `t`, interpolated between the waypoints around it (held at the last one after it)."""
    if t <= waypoints[0].t:
        w = waypoints[0]
        return np.array(w.xyz), np.array(w.quat), w.gripper
    for before, after in zip(waypoints, waypoints[1:], strict=False):
        if t <= after.t:
            s = (t - before.t) / (after.t - before.t)
            xyz = (1 - s) * np.array(before.xyz) + s * np.array(after.xyz)
            return (
                xyz,
                slerp(np.array(before.quat), np.array(after.quat), s),
                (1 - s) * before.gripper + s * after.gripper,
            )
    w = waypoints[-1]
    return np.array(w.xyz), np.array(w.quat), w.gripper


@dataclass
class AlohaExpertConfig:
    """Knobs of the scripted ALOHA expert (positions in metres, times in env steps at 50 Hz)."""

    pick_tilt_deg: float = 60.0  # grasping grippers pitch down this much from their start orientation
    approach_height: float = 0.08  # the gripper first goes this far above the object's centre ...
    cube_grasp_depth: float = -0.015  # ... then to this height relative to the cube's centre to grasp it
    insertion_grasp_depth: float = -0.03  # ... or to this height relative to the peg's / socket's centre
    handover_xyz: tuple[float, float, float] = (0.0, 0.5, 0.25)  # where the cube changes hands
    insertion_xyz: tuple[float, float, float] = (0.0, 0.5, 0.15)  # where the peg meets the socket
    peg_lift: float = 0.00715  # the peg is held this much higher than the socket's centre (they grasp differently)
    episode_steps: int = 400  # the plan's length (LeRobot's ALOHA episode length)


ArmPlans = tuple[list[Waypoint], list[Waypoint]]  # one episode's plan: the left and the right gripper's waypoints


def transfer_cube_plan(cfg: AlohaExpertConfig, cube_xyz: np.ndarray, left0: np.ndarray, right0: np.ndarray) -> ArmPlans:
    """The right gripper picks the cube up and brings it to the hand-over point, where the left one takes it (`left0`,
    `right0`: the grippers' start poses, xyz + quaternion)."""
    meet = np.array(cfg.handover_xyz)
    pick = quat_multiply(right0[3:], quat_about([0, 1, 0], -cfg.pick_tilt_deg))
    receive = quat_about([1, 0, 0], 90)  # the left gripper meets the cube with its fingers vertical
    above, grasp = cube_xyz + [0, 0, cfg.approach_height], cube_xyz + [0, 0, cfg.cube_grasp_depth]
    end = cfg.episode_steps
    right = [
        Waypoint(0, right0[:3], right0[3:], 0),
        Waypoint(90, above, pick, 1),  # approach over the cube, opening
        Waypoint(130, grasp, pick, 1),  # go down around it
        Waypoint(170, grasp, pick, 0),  # close
        Waypoint(200, meet + [0.05, 0, 0], pick, 0),  # lift and carry towards the hand-over point
        Waypoint(220, meet, pick, 0),
        Waypoint(310, meet, pick, 1),  # let go once the left gripper holds it
        Waypoint(360, meet + [0.1, 0, 0], pick, 1),  # move away to the right
        Waypoint(end, meet + [0.1, 0, 0], pick, 1),
    ]
    left = [
        Waypoint(0, left0[:3], left0[3:], 0),
        Waypoint(100, meet + [-0.1, 0, -0.02], receive, 1),  # wait open beside the hand-over point
        Waypoint(260, meet + [0.02, 0, -0.02], receive, 1),  # close in around the cube
        Waypoint(310, meet + [0.02, 0, -0.02], receive, 0),  # grasp
        Waypoint(360, meet + [-0.1, 0, -0.02], IDENTITY, 0),  # take it away to the left
        Waypoint(end, meet + [-0.1, 0, -0.02], IDENTITY, 0),
    ]
    return left, right


def insertion_plan(
    cfg: AlohaExpertConfig, peg_xyz: np.ndarray, socket_xyz: np.ndarray, left0: np.ndarray, right0: np.ndarray
) -> ArmPlans:
    """The right gripper picks the peg up and the left one the socket; they meet in the air and the peg slides in."""
    meet = np.array(cfg.insertion_xyz)
    pick_right = quat_multiply(right0[3:], quat_about([0, 1, 0], -cfg.pick_tilt_deg))
    pick_left = quat_multiply(left0[3:], quat_about([0, 1, 0], cfg.pick_tilt_deg))
    depth, lift, end = cfg.insertion_grasp_depth, cfg.peg_lift, cfg.episode_steps

    def grasp_and_carry(start, obj, quat, meet_far, meet_in):
        return [
            Waypoint(0, start[:3], start[3:], 0),
            Waypoint(120, obj + [0, 0, cfg.approach_height], quat, 1),  # approach over the object, opening
            Waypoint(170, obj + [0, 0, depth], quat, 1),  # go down around it
            Waypoint(220, obj + [0, 0, depth], quat, 0),  # close
            Waypoint(285, meet_far, quat, 0),  # lift and carry to the meeting point, apart
            Waypoint(340, meet_in, quat, 0),  # close in: the peg enters the socket
            Waypoint(end, meet_in, quat, 0),
        ]

    left = grasp_and_carry(left0, socket_xyz, pick_left, meet + [-0.1, 0, 0], meet + [-0.05, 0, 0])
    right = grasp_and_carry(right0, peg_xyz, pick_right, meet + [0.1, 0, lift], meet + [0.05, 0, lift])
    return left, right


class MocapArms:
    """gym-aloha's end-effector scene for one task: the grippers follow mocap bodies; read back the joint angles."""

    def __init__(self, task: str):
        self.env = make_control_env(task, need_rendering=False, end_effector=True)
        # gym-aloha's welds (solimp 0.25) let the grippers trail their mocap bodies by ~6 cm on MuJoCo 3.x, enough
        # to push the cube away instead of grasping it; a stiffer weld keeps them within ~1 cm.
        self.env.physics.model.eq_solimp[:, :3] = WELD_SOLIMP

    def start_poses(self, object_pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Resets the scene with the objects at `object_pose`; returns the grippers' start poses."""
        self.env.task.object_pose = np.asarray(object_pose, dtype=np.float64)
        self.env.reset()
        data = self.env.physics.data
        return np.r_[data.mocap_pos[0], data.mocap_quat[0]], np.r_[data.mocap_pos[1], data.mocap_quat[1]]

    def joint_targets(self, plans: ArmPlans, n_steps: int) -> np.ndarray:
        """Plays the plan (after `start_poses`): (n_steps, 14) joint-space actions, the arms' joint angles once the
        grippers reached their step-t poses and the planned gripper openings."""
        actions = np.zeros((n_steps, 14), dtype=np.float32)
        for t in range(n_steps):
            command, openings = [], []
            for waypoints in plans:
                xyz, quat, opening = interpolate(waypoints, t)
                command += [*xyz, *quat, opening]
                openings.append(opening)
            time_step = self.env.step(np.array(command))
            qpos = time_step.observation["qpos"]
            actions[t, :6], actions[t, 6] = qpos[:6], openings[0]
            actions[t, 7:13], actions[t, 13] = qpos[7:13], openings[1]
        return actions

    def close(self) -> None:
        self.env.physics.free()


class AlohaExpert:
    """Plans an episode in the end-effector scene at `reset(env)` and hands out its joint targets with `act()`."""

    def __init__(self, config: AlohaExpertConfig | None = None):
        self.config = config or AlohaExpertConfig()
        self._arms: dict[str, MocapArms] = {}
        self.actions: np.ndarray | None = None
        self.t = 0

    def plan(self, task: str, object_pose: np.ndarray) -> np.ndarray:
        """The (episode_steps, 14) joint targets for `task` with the objects starting at `object_pose` (the env's
        `environment_state` after reset)."""
        check_task(task)
        if task not in self._arms:
            self._arms[task] = MocapArms(task)
        arms = self._arms[task]
        left0, right0 = arms.start_poses(object_pose)
        if TASK_NAMES[task] == "transfer_cube":
            plans = transfer_cube_plan(self.config, np.asarray(object_pose[:3]), left0, right0)
        else:
            plans = insertion_plan(
                self.config, np.asarray(object_pose[:3]), np.asarray(object_pose[7:10]), left0, right0
            )
        return arms.joint_targets(plans, self.config.episode_steps)

    def reset(self, env) -> None:
        """Plans the episode the (just reset) ALOHA env starts."""
        aloha = env.unwrapped
        if not hasattr(aloha, "object_pose") or aloha.object_pose is None:
            raise TypeError(f"the ALOHA expert needs a reset hfpolicy AlohaEnv, got {type(aloha).__name__}")
        self.actions = self.plan(aloha.task, aloha.object_pose)
        self.t = 0

    def act(self) -> np.ndarray:
        """The next joint target (the last one again once the plan is over)."""
        if self.actions is None:
            raise RuntimeError("call reset(env) after each env reset, before act()")
        action = self.actions[min(self.t, len(self.actions) - 1)]
        self.t += 1
        return action.copy()

    def close(self) -> None:
        for arms in self._arms.values():
            arms.close()
        self._arms.clear()


def run_aloha_expert_episode(
    env, expert: AlohaExpert, seed: int, max_steps: int | None = None, **hooks
) -> ExpertEpisode:
    """`run_episode` in an hfpolicy AlohaEnv (possibly wrapped), for `max_steps` (default: the plan's length)."""
    return run_episode(env, expert, seed, max_steps or expert.config.episode_steps, **hooks)
