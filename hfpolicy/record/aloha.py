"""`hfpolicy record --env.type=aloha`: scripted bimanual ALOHA demonstrations with the features of the Hub's
lerobot/aloha_sim_*_scripted (optionally the object poses as observation.environment_state), full-length episodes as
there (the expert's plan carries on holding the object after a success)."""

import dataclasses

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGES_PREFIX, OBS_STATE
from hfpolicy.envs import AlohaEnvConfig
from hfpolicy.envs.aloha import CAMERA, ENV_STATE_SIZES, MOTOR_NAMES
from hfpolicy.experts.aloha_expert import AlohaExpert, run_aloha_expert_episode
from hfpolicy.record.config import EnvRecorder, RecordConfig, arm_observer, scalar_feature, video_feature

OBS_IMAGE_TOP = f"{OBS_IMAGES_PREFIX}{CAMERA}"


def aloha_features(task: str, images: bool = True, environment_state: bool = False, size=(480, 640)) -> dict:
    """The features of a scripted ALOHA dataset, optionally with the object poses and without the camera."""
    features = {}
    if images:
        features[OBS_IMAGE_TOP] = video_feature(*size)
    features[OBS_STATE] = {"dtype": "float32", "shape": [14], "names": {"motors": list(MOTOR_NAMES)}}
    features[ACTION] = {"dtype": "float32", "shape": [14], "names": {"motors": list(MOTOR_NAMES)}}
    features[DONE] = scalar_feature("bool")
    if environment_state:
        objects = ["cube"] if ENV_STATE_SIZES[task] == 7 else ["peg", "socket"]
        names = [f"{o}_{c}" for o in objects for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
        features[OBS_ENV_STATE] = {"dtype": "float32", "shape": [ENV_STATE_SIZES[task]], "names": names}
    return features


def aloha_recorder(cfg: RecordConfig, env_cfg: AlohaEnvConfig) -> EnvRecorder:
    """The bimanual expert in the env `env_cfg` makes, for full-length episodes (`cfg`: the checked flags)."""
    env_cfg = dataclasses.replace(env_cfg, terminate_on_success=False)
    env = env_cfg.make_single()
    expert = AlohaExpert()  # its plan lasts 400 steps; a longer episode holds the last targets

    def close() -> None:
        env.close()
        expert.close()

    size = (env_cfg.observation_height, env_cfg.observation_width)
    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=aloha_features(env_cfg.task, cfg.images, cfg.environment_state, size),
        task=env_cfg.description,
        observe=arm_observer(env, cfg, OBS_IMAGE_TOP, camera=CAMERA),
        run_episode=lambda seed, **hooks: run_aloha_expert_episode(env, expert, seed, cfg.max_steps, **hooks),
        rewards=False,
        tags=["aloha", env_cfg.task],
        demonstration=f"{env_cfg.task} demonstration",
        expert="hfpolicy's scripted bimanual expert",
        close=close,
    )
