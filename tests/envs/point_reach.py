"""A reaching task for online reinforcement learning tests: offline data that cannot teach the task, rewards that
exploration can find.

A point in the plane starts near the origin and moves by STEP x action each step (action: dx, dy in [-1, 1]; the
observation is its position, two numbers).
The reward is max(0, x - REWARD_FROM): zero until the point passes x = REWARD_FROM; success, which ends the episode, is
x >= GOAL. The offline demonstrations come from a demonstrator that acts uniformly at random while x < TURN and pushes
back (dx uniform in [-1, 0]) beyond it, so they cover the whole action range but never a state with a reward: trained
on them alone, TD-MPC sees only zero rewards. Played online with exploration noise, a random walk of that size passes
REWARD_FROM in a good share of the episodes, and the rewards it finds teach the planner to go right
(tests/training/test_online_rl.py).

`register()` adds it as `--env.type=point_reach` (an EnvConfig subclass, as the real envs are).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hfpolicy.constants import ACTION, DONE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.envs import EnvConfig
from hfpolicy.eval.episode_data import RolloutEpisode, rollout_features, write_episodes_dataset
from hfpolicy.features import FeatureType, PolicyFeature

STEP = 0.2  # x moves by STEP x action
REWARD_FROM = 0.5  # the reward is max(0, x - REWARD_FROM)
GOAL = 1.5  # success: x >= GOAL (a mean action >= 0.375 over 20 steps)
TURN = 0.2  # the demonstrator pushes back beyond it: its states stay below ~0.4, its rewards 0
GYM_ID = "hfpolicy_tests/PointReach-v0"
TASK = "Reach x = 1.5."


class PointReach(gym.Env):
    metadata = {"render_modes": [], "render_fps": 10}

    def __init__(self):
        self.observation_space = spaces.Dict({"agent_pos": spaces.Box(-10, 10, (2,), np.float32)})
        self.action_space = spaces.Box(-1, 1, (2,), np.float32)
        self.x = self.y = 0.0

    def _observation(self) -> dict[str, np.ndarray]:
        return {"agent_pos": np.array([self.x, self.y], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.y = (float(v) for v in self.np_random.uniform(-0.05, 0.05, size=2))
        return self._observation(), {"is_success": False}

    def step(self, action):
        move = STEP * np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1, 1)
        self.x, self.y = self.x + float(move[0]), self.y + float(move[1])
        success = self.x >= GOAL
        reward = max(0.0, self.x - REWARD_FROM)
        return self._observation(), reward, success, False, {"is_success": success}


@dataclass
class PointReachEnvConfig(EnvConfig):
    obs_types: ClassVar[tuple[str, ...]] = ("agent_pos",)

    obs_type: str | None = None
    episode_length: int = 20
    description: ClassVar[str] = TASK

    @property
    def fps(self) -> float:
        return 10.0

    def observation_features(self, obs_type: str | None = None) -> dict[str, PolicyFeature]:
        return {OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}

    @property
    def action_feature(self) -> PolicyFeature:
        return PolicyFeature(FeatureType.ACTION, (2,))

    def make_single(self) -> gym.Env:
        return gym.make(GYM_ID, max_episode_steps=self.episode_length)


def register() -> None:
    """`--env.type=point_reach` for this process (idempotent)."""
    if GYM_ID not in gym.registry:
        gym.register(GYM_ID, entry_point=PointReach)
    if "point_reach" not in EnvConfig.get_known_choices():
        EnvConfig.register_subclass("point_reach")(PointReachEnvConfig)


def record_demonstrations(root: Path, n_episodes: int, episode_length: int = 20, seed: int = 0) -> Path:
    """`n_episodes` of the demonstrator (see the module docstring) as a LeRobot v3.0 dataset with rewards."""
    rng = np.random.default_rng(seed)
    env = PointReach()
    episodes = []
    for e in range(n_episodes):
        observation, _ = env.reset(seed=seed + e)
        episode = RolloutEpisode(seed=seed + e)
        for _ in range(episode_length):
            high = 1.0 if env.x < TURN else 0.0
            action = np.array([rng.uniform(-1.0, high), rng.uniform(-1.0, 1.0)], dtype=np.float32)
            next_observation, reward, terminated, _, _ = env.step(action)
            frame = {OBS_STATE: observation["agent_pos"], ACTION: action, REWARD: np.float32(reward),
                     SUCCESS: np.bool_(terminated), DONE: np.bool_(False)}  # fmt: skip
            for key, value in frame.items():
                episode.frames.setdefault(key, []).append(value)
            observation = next_observation
        episodes.append(episode)
    features = rollout_features({OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}, (2,))
    return write_episodes_dataset(root, "local/point_reach", 10.0, features, episodes, TASK)
