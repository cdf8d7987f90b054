"""Coverage, reward, success and keypoints of PushT states as `PushTEnv.step` computes them, for converting, recording
and online rounds that have states but no env of their own."""

import numpy as np

from hfpolicy.envs.pusht_tee import TeeGeometry


class PushTScorer:
    """Scores PushT states with a live gym-pusht env's T block, goal and success threshold, without stepping the
    physics (but `coverage_after`, which replays actions)."""

    def __init__(self):
        from gym_pusht.envs.pusht import PushTEnv

        self.env = PushTEnv(obs_type="state")
        self.env.reset(seed=0)
        self.success_threshold = float(self.env.success_threshold)
        self.tee = TeeGeometry.from_env(self.env)  # the polygons in the env's keypoint order
        self.center_of_gravity = self.tee.cog
        self.goal_pose = np.asarray(self.env.goal_pose, dtype=np.float64)

    def coverage(self, poses: np.ndarray) -> np.ndarray:
        """area(block ∩ goal) / area(goal) for block poses (N, 3) = (x, y, θ)."""
        return self.tee.coverage(poses, self.goal_pose)

    def keypoints(self, poses: np.ndarray) -> np.ndarray:
        """gym-pusht's `environment_state`: the 8 polygon vertices in world coordinates, flattened to (N, 16)."""
        return self.tee.keypoints(poses)

    def reward_success(self, coverage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.clip(coverage / self.success_threshold, 0.0, 1.0), coverage > self.success_threshold

    def reset_state(self, state: np.ndarray) -> np.ndarray:
        """The `reset_to_state` argument that puts gym-pusht in a recorded zarr state (agent x, y, block x, y, θ)."""
        theta = float(state[4])
        rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
        c = self.center_of_gravity
        return np.array([state[0], state[1], *(state[2:4] - c + rotation @ c), theta], dtype=np.float64)

    def coverage_after(self, states: np.ndarray, actions: np.ndarray) -> float:
        """Coverage after replaying `actions` from `states[0]` in gym-pusht (the last action included)."""
        self.env.reset(options={"reset_to_state": self.reset_state(states[0])})
        info = {}
        for action in actions:
            _, _, _, _, info = self.env.step(np.asarray(action, dtype=np.float64))
        return float(info["coverage"])
