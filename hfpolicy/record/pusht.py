"""`hfpolicy record --env.type=pusht`: the scripted PushT expert's episodes with the features of the converted
lerobot/pusht (optionally the block keypoints as observation.environment_state)."""

from typing import Any

import numpy as np

from hfpolicy.constants import OBS_ENV_STATE, OBS_IMAGE, OBS_STATE
from hfpolicy.datasets.pusht_zarr import PUSHT_TASK, pusht_features
from hfpolicy.envs import PushTEnvConfig
from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.experts import PushTExpert, run_expert_episode
from hfpolicy.record.config import EnvRecorder, RecordConfig


def pusht_recorder(cfg: RecordConfig, env_cfg: PushTEnvConfig) -> EnvRecorder:
    """The PushT expert in the env `env_cfg` makes (`cfg`: the checked flags)."""
    env = env_cfg.make_single()
    pusht: Any = env.unwrapped  # gym-pusht's PushTEnv (untyped): its T block's pose is the environment state
    expert = PushTExpert()
    scorer = PushTScorer() if cfg.environment_state else None

    def observe(observation) -> dict:
        frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
        if cfg.images:
            frame[OBS_IMAGE] = observation["pixels"]
        if scorer is not None:
            block = pusht.block
            frame[OBS_ENV_STATE] = scorer.keypoints(np.array([[*block.position, block.angle]]))[0].astype(np.float32)
        return frame

    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=pusht_features(env_cfg.observation_size, cfg.environment_state, images=cfg.images),
        task=PUSHT_TASK,
        observe=observe,
        run_episode=lambda seed, **hooks: run_expert_episode(env, expert, seed, env_cfg.episode_length, **hooks),
        rewards=True,
        tags=["pusht"],
        demonstration="PushT demonstration",
        expert="hfpolicy's scripted expert",
        close=env.close,
    )
