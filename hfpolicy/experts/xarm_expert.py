"""A scripted xArm lift expert: reach above the cube, descend around it, close the gripper, lift, steering the end
effector towards each phase's target (from the simulator's positions, metres) with a proportional controller."""

from dataclasses import dataclass

import numpy as np

from hfpolicy.experts.episodes import ExpertEpisode, run_episode

REACH, DESCEND, CLOSE, LIFT = range(4)  # the phases, in order


@dataclass
class XarmExpertConfig:
    """Knobs of the scripted xArm expert (metres, env steps)."""

    approach_height: float = 0.05  # first go this far above the cube's centre ...
    grasp_depth: float = -0.01  # ... then to this height relative to its centre, gripper open
    tolerance: float = 0.012  # a target is reached within this distance (above the cube: horizontally, and 2 cm up)
    close_steps: int = 20  # steps the gripper closes before lifting (it needs ~15 to hold the 17 kg cube)
    gain: float = 30.0  # action per metre of error (the move saturates at 1 beyond 3.3 cm)
    episode_steps: int = 200  # LeRobot's xArm episode length


class XarmExpert:
    """The lift expert: `reset(env)` after each env reset, then `act()` for each step's action."""

    def __init__(self, config: XarmExpertConfig | None = None):
        self.config = config or XarmExpertConfig()
        self.sim = None
        self.phase, self.phase_steps = REACH, 0

    def reset(self, env) -> None:
        """Follows the (just reset) hfpolicy XarmEnv `env`."""
        sim = getattr(env.unwrapped, "sim", None)
        if sim is None or not hasattr(sim, "obj"):
            raise TypeError(f"the xArm expert needs an hfpolicy XarmEnv, got {type(env.unwrapped).__name__}")
        self.sim, self.phase, self.phase_steps = sim, REACH, 0

    def act(self) -> np.ndarray:
        """The next action (float32, 4): towards the phase's target, and the phase moves on once it is reached."""
        if self.sim is None:
            raise RuntimeError("call reset(env) after each env reset, before act()")
        cfg, eef, cube = self.config, np.asarray(self.sim.eef), np.asarray(self.sim.obj)
        if self.phase in (REACH, DESCEND):
            target = cube + [0, 0, cfg.approach_height if self.phase == REACH else cfg.grasp_depth]
            error = target - eef
            reached = np.linalg.norm(error[:2]) < cfg.tolerance and abs(error[2]) < 0.02
            if self.phase == DESCEND:
                reached = np.linalg.norm(error) < cfg.tolerance
            action = np.clip(np.r_[cfg.gain * error, -1.0], -1, 1)
        else:  # close in place, then lift at full speed
            reached = self.phase == CLOSE and self.phase_steps + 1 >= cfg.close_steps
            action = np.array([0.0, 0.0, 1.0 if self.phase == LIFT else 0.0, 1.0])
        self.phase_steps += 1
        if reached and self.phase != LIFT:
            self.phase, self.phase_steps = self.phase + 1, 0
        return action.astype(np.float32)


def run_xarm_expert_episode(env, expert: XarmExpert, seed: int, max_steps: int | None = None, **hooks) -> ExpertEpisode:
    """`run_episode` in an hfpolicy XarmEnv (possibly wrapped), for `max_steps` (default: the expert's episode length)."""
    return run_episode(env, expert, seed, max_steps or expert.config.episode_steps, **hooks)
