"""One batch of episodes stepped in lockstep, and each episode's record. Actions reach the env as the policy gave them:
non-finite ones raise, ones outside the Box are applied and counted (docs/robustness.md#evaluation-acts-as-lerobots)."""

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv

from hfpolicy.envs import PARK_OPTION, SUCCESS_INFO_KEY, LockstepVectorEnv, episode_step_limit, observations_to_batch
from hfpolicy.policies.base import Policy


@dataclass
class EpisodeRecord:
    """The outcome of one episode, counted up to and including its first terminated or truncated step."""

    index: int  # the episode's number in the evaluation (its seed is start_seed + index)
    seed: int  # the env reset seed
    sum_reward: float  # sum of the episode's rewards
    max_reward: float  # largest reward of the episode
    success: bool  # the env reported info["is_success"] at some step of the episode
    length: int  # steps taken: the first terminated/truncated step's number (1-based), or max_steps
    n_actions_outside_space: int = 0  # steps whose action lay outside the env's declared action space (applied as is)
    rewards: list[float] = field(default_factory=list)  # the reward of each step (rounded to 1e-6): the reward curve
    actions: list[list[float]] = field(default_factory=list)  # each step's action as the policy gave it (to 1e-4)
    states: list[list[float]] = field(default_factory=list)  # the state (agent_pos) it acted on; [] if the env has none
    outside_steps: list[int] = field(default_factory=list)  # the steps (1-based) whose action lay outside the space
    chunk_steps: list[int] = field(default_factory=list)  # the steps (1-based) whose action began a new predicted chunk

    def to_dict(self) -> dict[str, Any]:
        """The record's fields (its step lists shared, not copied: asdict's deep copy took seconds for 500 episodes)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


REWARD_DECIMALS = 6  # per-step rewards are stored rounded (the sums and maxima are exact)
STEP_DECIMALS = 4  # per-step actions and states are stored rounded to this many decimals
STATE_KEY = "agent_pos"  # the env observation that becomes observation.state (hfpolicy.envs.observations)


class InvalidActionError(RuntimeError):
    """The policy returned an action that cannot be applied (NaN or inf)."""


class StepHook(Protocol):
    """Sees every step of a rollout; `running` masks the slots whose episode takes the step (ignore the others)."""

    def after_reset(self, env: VectorEnv, observation: Any, seeds: Sequence[int]) -> None:
        """The envs were just reset, slot i with `seeds[i]` (slots past them are parked)."""

    def before_step(self, env: VectorEnv, observation: Any, action: np.ndarray, running: np.ndarray) -> np.ndarray:
        """The policy's (finite) action, about to be applied; returns the action to apply."""

    def after_step(
        self,
        env: VectorEnv,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: dict,
        running: np.ndarray,
    ) -> None:
        """What the step gave, for the slots that took it."""


class RandomActions:
    """Uniform actions in a bounded Box (TD-MPC's seed steps), slot i's drawn with its episode's seed."""

    def __init__(self, space: gym.spaces.Space):
        if not isinstance(space, gym.spaces.Box) or not np.isfinite([space.low, space.high]).all():
            raise ValueError(f"random actions need a bounded Box action space, got {space}")
        self.low = torch.as_tensor(space.low, dtype=torch.float32)
        self.high = torch.as_tensor(space.high, dtype=torch.float32)
        self._generators: list[torch.Generator] = []
        self.chunks_predicted = 0  # (as a Policy counts them: random actions predict none)

    def reset(self, seeds: Sequence[int]) -> None:
        self._generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]

    def select_action(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
        del observation  # random: the same whatever the env shows
        draws = torch.stack([torch.rand(self.low.shape, generator=g) for g in self._generators])
        return self.low + (self.high - self.low) * draws


def rollout(
    policy: Policy | RandomActions,
    env: LockstepVectorEnv,
    seeds: Sequence[int],
    max_steps: int | None = None,
    *,
    episode_indices: Sequence[int] | None = None,
    render_slots: Sequence[int] = (),
    on_frame: Callable[[int, np.ndarray], None] | None = None,
    on_episode_end: Callable[[int, EpisodeRecord], None] | None = None,
    step_hook: StepHook | None = None,
) -> list[EpisodeRecord]:
    """Runs one episode per seed (slot i plays `seeds[i]`; extra envs are parked) in lockstep, one batched
    `select_action` per step, for at most `max_steps` (default: the env's time limit). An episode ends at its first
    terminated or truncated step, its env parked there; the policy is reset with the seeds, so each record depends on
    its seed alone. `on_frame(slot, frame)` gets the `render_slots`' frames (the reset's, then each running step's)."""
    n_envs, n_episodes = env.num_envs, len(seeds)
    if not 1 <= n_episodes <= n_envs:
        raise ValueError(f"rollout needs between 1 and {n_envs} (the number of envs) seeds, got {n_episodes}")
    indices = list(range(n_episodes)) if episode_indices is None else [int(i) for i in episode_indices]
    if len(indices) != n_episodes:
        raise ValueError(f"{len(indices)} episode indices for {n_episodes} seeds")
    if max_steps is None:
        max_steps = episode_step_limit(env)
        if max_steps is None:
            raise ValueError("the env has no time limit (spec.max_episode_steps): pass max_steps")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if any(not 0 <= slot < n_episodes for slot in render_slots):
        raise ValueError(f"render_slots {list(render_slots)} must be among the {n_episodes} slots that get a seed")
    if render_slots and on_frame is None:
        raise ValueError("render_slots needs an on_frame to receive their frames")
    if isinstance(policy, RandomActions):  # no observation read
        device, input_keys = torch.device("cpu"), set()
    else:
        device, input_keys = policy_device(policy), set(policy.config.input_features)

    running = np.zeros(n_envs, dtype=bool)
    running[:n_episodes] = True
    sum_reward = np.zeros(n_envs)
    max_reward = np.full(n_envs, -np.inf)
    success = np.zeros(n_envs, dtype=bool)
    length = np.zeros(n_envs, dtype=np.int64)
    low, high = action_bounds(env)
    # slot -> its episode's record: the step lists grow as it runs, the totals are set when it ends
    records = [
        EpisodeRecord(index=i, seed=int(seed), sum_reward=0.0, max_reward=-math.inf, success=False, length=0)
        for i, seed in zip(indices, seeds, strict=True)
    ]

    def end_episode(slot: int) -> None:
        record = records[slot]
        record.sum_reward = float(sum_reward[slot])
        record.max_reward = float(max_reward[slot])
        record.success = bool(success[slot])
        record.length = int(length[slot])
        record.n_actions_outside_space = len(record.outside_steps)
        if on_episode_end is not None:
            on_episode_end(slot, record)

    def emit_frames() -> None:
        frames = env.render()
        if frames is None:
            raise ValueError("the envs render nothing (render_mode None): make them with render_mode='rgb_array'")
        for slot in render_slots:
            if running[slot] and on_frame is not None:
                on_frame(slot, np.asarray(frames[slot]))  # an rgb_array frame (gymnasium types any RenderFrame)

    # Each slot's sampling noise comes from a generator seeded with its episode's seed (unused slots: seed 0, ignored).
    policy.reset(seeds=[int(s) for s in seeds] + [0] * (n_envs - n_episodes))
    observation, _ = env.reset(seed=[int(s) for s in seeds] + [None] * (n_envs - n_episodes))
    if n_episodes < n_envs:
        observation, _ = env.reset(options={"reset_mask": ~running, PARK_OPTION: True})
    if step_hook is not None:
        step_hook.after_reset(env, observation, [int(s) for s in seeds])
    if render_slots:
        env.set_attr("render_enabled", [slot in render_slots for slot in range(n_envs)])
        emit_frames()

    with torch.inference_mode():
        for _ in range(max_steps):
            states = state_of(observation, n_envs)
            chunks_before = policy.chunks_predicted
            action = policy.select_action(observations_to_batch(observation, device, input_keys)).cpu().numpy()
            new_chunk = policy.chunks_predicted != chunks_before
            finite = np.isfinite(action).reshape(n_envs, -1).all(axis=1)
            if not finite[running].all():
                bad = int(np.flatnonzero(running & ~finite)[0])
                raise InvalidActionError(
                    f"the policy returned a non-finite action {action[bad].tolist()} in episode {indices[bad]} "
                    f"(seed {int(seeds[bad])}) at step {int(length[bad]) + 1}: its weights or inputs hold NaN/inf, "
                    "or its normalization stats are degenerate; check the checkpoint and the dataset stats"
                )
            outside: np.ndarray = np.zeros(n_envs, dtype=bool)
            if low is not None:
                outside = np.asarray(((action < low) | (action > high)).reshape(n_envs, -1).any(axis=1))
            commanded = np.round(action.reshape(n_envs, -1).astype(np.float64), STEP_DECIMALS).tolist()
            if step_hook is not None:
                action = step_hook.before_step(env, observation, action, running.copy())
            observation, reward, terminated, truncated, info = env.step(action)
            if step_hook is not None:
                step_hook.after_step(env, reward, terminated, truncated, info, running.copy())

            sum_reward[running] += reward[running]
            np.maximum(max_reward, reward, out=max_reward, where=running)
            length[running] += 1
            for slot in np.flatnonzero(running):
                record = records[slot]
                record.rewards.append(round(float(reward[slot]), REWARD_DECIMALS))
                record.actions.append(commanded[slot])
                if states is not None:
                    record.states.append(states[slot])
                if outside[slot]:
                    record.outside_steps.append(int(length[slot]))
                if new_chunk:
                    record.chunk_steps.append(int(length[slot]))
            if SUCCESS_INFO_KEY in info:
                success |= running & info[SUCCESS_INFO_KEY].astype(bool)
            if render_slots:
                emit_frames()

            done = terminated | truncated
            if done.any():
                ended = running & done
                running &= ~done
                for slot in np.flatnonzero(ended):
                    end_episode(int(slot))
                if not running.any():
                    break
                # Park them (a vector env without LockstepEnv resets them instead; their results are ignored).
                observation, _ = env.reset(options={"reset_mask": done, PARK_OPTION: True})

    for slot in np.flatnonzero(running):  # reached max_steps without ending
        end_episode(int(slot))
    return records


def state_of(observation: Any, n_envs: int) -> list[list[float]] | None:
    """The envs' states (one list per env), rounded to STEP_DECIMALS, from a batch of observations; None without."""
    if not isinstance(observation, dict) or STATE_KEY not in observation:
        return None
    return np.round(np.asarray(observation[STATE_KEY], dtype=np.float64).reshape(n_envs, -1), STEP_DECIMALS).tolist()


def action_bounds(env: VectorEnv) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The (low, high) of a sub-env's Box action space, or (None, None) when it is unbounded or not a Box."""
    space = env.single_action_space
    if not isinstance(space, gym.spaces.Box) or not (np.isfinite(space.low).any() or np.isfinite(space.high).any()):
        return None, None
    return space.low, space.high


def policy_device(policy: torch.nn.Module) -> torch.device:
    """The device of the policy's first parameter or buffer (cpu if it has none)."""
    for tensor in itertools.chain(policy.parameters(), policy.buffers()):
        return tensor.device
    return torch.device("cpu")
