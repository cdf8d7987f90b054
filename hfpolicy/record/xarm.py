"""`hfpolicy record --env.type=xarm`: scripted xArm lift demonstrations with the features of the Hub's
lerobot/xarm_lift_medium plus next.success (optionally the cube's pose as observation.environment_state); an episode
ends at its first success or after --max_steps."""

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.envs.xarm import ACTION_NAMES, ENV_STATE_NAMES, STATE_NAMES
from hfpolicy.experts.xarm_expert import XarmExpert, run_xarm_expert_episode
from hfpolicy.record.config import EnvRecorder, RecordConfig, arm_observer, scalar_feature, video_feature


def xarm_features(images: bool = True, environment_state: bool = False, size=(84, 84)) -> dict:
    """The features of a scripted xArm dataset, optionally with the cube's pose and without the camera."""
    features = {}
    if images:
        features[OBS_IMAGE] = video_feature(*size)
    features[OBS_STATE] = {"dtype": "float32", "shape": [len(STATE_NAMES)], "names": list(STATE_NAMES)}
    features[ACTION] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    features[REWARD] = scalar_feature("float32")
    features[SUCCESS] = scalar_feature("bool")
    features[DONE] = scalar_feature("bool")
    if environment_state:
        features[OBS_ENV_STATE] = {"dtype": "float32", "shape": [len(ENV_STATE_NAMES)], "names": list(ENV_STATE_NAMES)}
    return features


def xarm_recorder(cfg: RecordConfig, env_cfg: XarmEnvConfig) -> EnvRecorder:
    """The lift expert in the env `env_cfg` makes (`cfg`: the checked flags)."""
    env = env_cfg.make_single()
    expert = XarmExpert()
    return EnvRecorder(
        env=env,
        fps=env_cfg.fps,
        features=xarm_features(
            cfg.images, cfg.environment_state, (env_cfg.observation_height, env_cfg.observation_width)
        ),
        task=env_cfg.description,
        observe=arm_observer(env, cfg, OBS_IMAGE),
        run_episode=lambda seed, **hooks: run_xarm_expert_episode(env, expert, seed, cfg.max_steps, **hooks),
        rewards=True,
        tags=["xarm", env_cfg.task],
        demonstration=f"{env_cfg.task} demonstration",
        expert="hfpolicy's scripted lift expert",
        close=env.close,
    )
