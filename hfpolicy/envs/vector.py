"""Vector envs for lockstep rollouts: autoreset disabled, finished episodes parked, rendering only where asked.

With autoreset disabled, SyncVectorEnv refuses to step a sub-env whose episode has ended (AsyncVectorEnv steps it on).
Each sub-env is wrapped in `LockstepEnv`, which reads `reset(options={"reset_mask": mask, PARK_OPTION: True})` as
"park": the env keeps its final state and answers later steps with its final observation, reward 0 and no termination,
without simulating. So a batch steps in lockstep until its slowest episode ends (the rollout ignores parked envs).
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

PARK_OPTION = "park"  # reset(options={"reset_mask": mask, PARK_OPTION: True}) parks the masked sub-envs

# What make_vector_env gives: both take one seed per env in reset and have get_attr/set_attr (VectorEnv has neither).
LockstepVectorEnv = SyncVectorEnv | AsyncVectorEnv


class LockstepEnv(gym.Wrapper):
    """Adds parking (see the module docstring) and selective rendering to one env: `render()` returns None when parked
    or with `render_enabled = False`, so a vector env only draws (and sends back) the frames being recorded."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.parked = False
        self.render_enabled = True
        self._last_observation: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options and options.get(PARK_OPTION):
            if self._last_observation is None:
                raise RuntimeError("cannot park an env that was never reset")
            self.parked = True
            return self._last_observation, {}
        self.parked = False
        self._last_observation, info = self.env.reset(seed=seed, options=options)
        return self._last_observation, info

    def step(self, action):
        if self.parked:
            return self._last_observation, 0.0, False, False, {}
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._last_observation = observation
        return observation, reward, terminated, truncated, info

    def render(self):
        if self.parked or not self.render_enabled:
            return None
        return self.env.render()


def _make_lockstep_env(env_fn: Callable[[], gym.Env]) -> gym.Env:
    return LockstepEnv(env_fn())


def make_vector_env(env_fns: Sequence[Callable[[], gym.Env]], parallel: bool = False) -> LockstepVectorEnv:
    """A SyncVectorEnv, or (parallel) an AsyncVectorEnv with one process per env, of `LockstepEnv`s with autoreset
    disabled: park the envs whose episode ended before the next `step`."""
    if not env_fns:
        raise ValueError("a vector env needs at least one env")
    wrapped = [functools.partial(_make_lockstep_env, fn) for fn in env_fns]
    if parallel:
        return AsyncVectorEnv(wrapped, autoreset_mode=AutoresetMode.DISABLED)
    return SyncVectorEnv(wrapped, autoreset_mode=AutoresetMode.DISABLED)


def episode_step_limit(env: LockstepVectorEnv) -> int | None:
    """The time limit (max_episode_steps) of the sub-envs, read from their spec; None when they have none."""
    specs = env.get_attr("spec")
    limits = {spec.max_episode_steps if spec is not None else None for spec in specs}
    if len(limits) != 1:
        raise ValueError(f"the sub-envs have different time limits {sorted(map(str, limits))}")
    return limits.pop()
