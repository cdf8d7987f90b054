"""The episode loop every scripted expert is played in, to measure it or, with hooks, to record it."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


@dataclass
class ExpertEpisode:
    """What `run_episode` returns: the executed actions and how the episode went."""

    seed: int | None  # the env seed of the episode
    actions: np.ndarray  # (n_steps, action size) float32, in order
    rewards: np.ndarray  # (n_steps,) env rewards
    infos: list[dict]  # each step's info
    first_success_step: int | None  # 1-based step at which the env first reported is_success

    @property
    def success(self) -> bool:
        return self.first_success_step is not None

    @property
    def n_steps(self) -> int:
        return len(self.rewards)


def run_episode(
    env: gym.Env,
    expert: Any,
    seed: int | None,
    max_steps: int,
    on_reset: Callable[[Any, dict], None] | None = None,
    on_step: Callable[[int, np.ndarray, Any, float, bool, bool, dict], None] | None = None,
) -> ExpertEpisode:
    """Reset `env` with `seed` and `expert` (`reset(env)`, `act()`) on it, and step it with the expert's actions until
    it ends or for `max_steps`. `on_reset(observation, info)` sees the first observation, `on_step(t, action,
    observation, reward, terminated, truncated, info)` each step's: a recorder stores the observation before each
    action."""
    observation, info = env.reset(seed=seed)
    expert.reset(env)
    if on_reset is not None:
        on_reset(observation, info)
    actions, rewards, infos = [], [], []
    for t in range(max_steps):
        action = expert.act()
        observation, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        rewards.append(float(reward))
        infos.append(info)
        if on_step is not None:
            on_step(t, action, observation, float(reward), bool(terminated), bool(truncated), info)
        if terminated or truncated:
            break
    first_success = next((t + 1 for t, info in enumerate(infos) if info.get("is_success")), None)
    return ExpertEpisode(seed, np.array(actions, dtype=np.float32), np.array(rewards), infos, first_success)
