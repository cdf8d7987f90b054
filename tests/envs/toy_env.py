"""A deterministic toy env for rollout/evaluation tests (not part of hfpolicy).

Each reset seed scripts a whole episode: it ends (terminated or truncated, the seed decides) at a known step between
1 and 30, its rewards are known numbers plus a small term in the action (so a wrong env/action pairing shows), and
`is_success` is reported at one known step (which may fall after the end: then the episode is a failure). Stepping
past the end returns a poison reward of 1000 and success, so counting anything after the end shows in the results.
Frames are 32x32 images whose grey level encodes the step number.
"""

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from hfpolicy.constants import OBS_STATE

TOY_ENV_ID = "hfpolicy_tests/ScriptedEpisodes-v0"  # gym.make(TOY_ENV_ID, max_episode_steps=n) gives a spec
POISON_REWARD = 1000.0
MAX_END_STEP = 30


def episode_script(seed: int | None) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "end_step": int(rng.integers(1, MAX_END_STEP + 1)),
        "terminates": bool(rng.integers(0, 2)),  # else truncated
        "success_step": int(rng.integers(1, 41)),
        "rewards": rng.uniform(-1.0, 1.0, size=MAX_END_STEP),
        "start": np.array([float(rng.integers(0, 100)), 50.0]),
    }


class ScriptedEpisodesEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 5}

    def __init__(self):
        self.observation_space = spaces.Dict({"agent_pos": spaces.Box(-np.inf, np.inf, (2,), np.float64)})
        self.action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.render_mode = "rgb_array"
        self.n_renders = 0  # frames drawn by this env (tests check that only recorded episodes are drawn)
        self.t = 0
        self.script = episode_script(0)
        self.position = self.script["start"].copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.script = episode_script(seed)
        self.t = 0
        self.position = self.script["start"].copy()
        return {"agent_pos": self.position.copy()}, {}

    def step(self, action):
        if self.t >= self.script["end_step"]:
            return {"agent_pos": self.position.copy()}, POISON_REWARD, True, True, {"is_success": True}
        self.t += 1
        self.position = self.position + 0.1 * np.asarray(action, dtype=np.float64)
        reward = float(self.script["rewards"][self.t - 1]) + 0.01 * float(action[0])
        ended = self.t == self.script["end_step"]
        terminated = ended and self.script["terminates"]
        truncated = ended and not self.script["terminates"]
        info = {"is_success": self.t == self.script["success_step"]}
        return {"agent_pos": self.position.copy()}, reward, terminated, truncated, info

    def render(self):
        self.n_renders += 1
        return np.full((32, 32, 3), frame_level(self.t), dtype=np.uint8)


def frame_level(step: int) -> int:
    """The grey level of the frame rendered after `step` steps."""
    return (8 * step) % 256


def reference_episode(policy, seed: int, max_steps: int) -> dict:
    """One episode on one env, stepped by hand: the ground truth the batched evaluation must reproduce."""
    env = ScriptedEpisodesEnv()
    policy.reset()
    observation, _ = env.reset(seed=seed)
    total, best, success, length, rewards = 0.0, -np.inf, False, 0, []
    actions, states, chunk_steps = [], [], []
    while length < max_steps:
        length += 1
        states.append(np.round(observation["agent_pos"].astype(np.float64), 4).tolist())
        state = torch.from_numpy(observation["agent_pos"][None]).to(torch.float32)
        chunks = policy.chunks_predicted
        with torch.inference_mode():
            action = policy.select_action({OBS_STATE: state})[0].numpy()
        actions.append(np.round(action.astype(np.float64), 4).tolist())
        if policy.chunks_predicted > chunks:
            chunk_steps.append(length)
        observation, reward, terminated, truncated, info = env.step(action)
        total += reward
        best = max(best, reward)
        rewards.append(round(float(reward), 6))
        success = success or info["is_success"]
        if terminated or truncated:
            break
    # the toy env's action space is unbounded: no action lies outside it
    return {
        "seed": seed,
        "sum_reward": total,
        "max_reward": best,
        "success": success,
        "length": length,
        "n_actions_outside_space": 0,
        "rewards": rewards,
        "actions": actions,
        "states": states,
        "outside_steps": [],
        "chunk_steps": chunk_steps,
    }


if TOY_ENV_ID not in gym.registry:
    gym.register(id=TOY_ENV_ID, entry_point=ScriptedEpisodesEnv)
