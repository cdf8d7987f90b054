"""Names shared across hfpolicy: feature keys of the LeRobot dataset format, and file names on the Hub."""

# Feature keys, as in LeRobot datasets (lerobot/pusht and community datasets use exactly these).
OBS_PREFIX = "observation."
OBS_IMAGE = "observation.image"  # a single camera; multi-camera datasets use "observation.images.<name>"
OBS_IMAGES_PREFIX = "observation.images."
OBS_STATE = "observation.state"  # robot proprioception (PushT: agent x, y)
OBS_ENV_STATE = "observation.environment_state"  # privileged simulator state (PushT: block keypoints)
ACTION = "action"
REWARD = "next.reward"
DONE = "next.done"
SUCCESS = "next.success"

# Bookkeeping columns of every LeRobot frame.
INDEX = "index"
EPISODE_INDEX = "episode_index"
FRAME_INDEX = "frame_index"
TIMESTAMP = "timestamp"
TASK_INDEX = "task_index"
TASK = "task"

# Files of a policy repository.
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TRAIN_CONFIG_FILE = "train_config.json"
EVAL_INFO_FILE = "eval_info.json"
REPLAY_VIDEO_FILE = "replay.mp4"  # the Hub shows this video on robotics model pages
TRAINING_CURVE_FILE = "training_curve.png"  # loss (and eval success) over training steps

# Files of a training run folder (besides checkpoints/, eval/ and logs/).
METRICS_FILE = "metrics.jsonl"  # one JSON line per log or eval event (the training curve is drawn from it)

# Evaluation: episode i is seeded DEFAULT_EVAL_START_SEED + i (far from the seeds used for training data).
DEFAULT_EVAL_START_SEED = 100_000


PAD_SUFFIX = "_is_pad"


def pad_key(key: str) -> str:
    """The name of the padding mask of a windowed feature (true where a time offset fell outside the episode)."""
    return f"{key}{PAD_SUFFIX}"
