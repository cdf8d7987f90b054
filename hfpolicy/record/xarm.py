"""`hfpolicy record --env.type=xarm`: scripted xArm lift demonstrations.

    hfpolicy record --env.type=xarm --env.task=XarmLift-v0 --policy.type=scripted --n_episodes=50 \\
        --output_dir=data/xarm_lift_scripted [--images=false --environment_state=true]

The dataset has the features of the Hub's lerobot/xarm_lift_medium: observation.image (84x84 video, 15 fps),
observation.state (end-effector position + gripper angle), action (move x, y, z and grip), next.reward (gym-xarm's
reward: TD-MPC learns from it), next.done, plus next.success as the PushT recordings have, and optionally
observation.environment_state (the cube's pose). An episode ends at its first success (gym-xarm's is_success) or after
--max_steps (default 200). Episode i is seeded start_seed + i.
"""

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.envs.xarm import ACTION_NAMES, ENV_STATE_NAMES, STATE_NAMES
from hfpolicy.experts.xarm_expert import XarmExpert, run_xarm_expert_episode
from hfpolicy.record.config import EnvRecorder, RecordConfig, arm_observer, scalar_feature, video_feature


def xarm_features(images: bool = True, environment_state: bool = False, size=(84, 84)) -> dict:
    """The features of a scripted xArm dataset (lerobot/xarm_lift_medium's and next.success, optionally with the
    cube's pose and without the camera)."""
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
