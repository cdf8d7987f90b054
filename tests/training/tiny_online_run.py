"""The tiny, fully seeded online run of test_online.py's learning test, shared with bench/online_labels.py: a state
ACT on 4 scripted PushT demos, 600 steps, 16 evaluation seeds; online rounds of 8 episodes every 150 steps."""

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE

FLAGS = [
    "--dataset.scripted_episodes=4", f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
    "--policy.type=act", "--policy.dim_model=64", "--policy.dim_feedforward=128", "--policy.n_encoder_layers=2",
    "--policy.chunk_size=16", "--policy.n_action_steps=8", "--policy.use_vae=false", "--policy.optimizer_lr=1e-3",
    "--batch_size=64", "--steps=600", "--eval.freq=600", "--eval.n_episodes=16", "--eval.batch_size=16",
    "--eval.n_videos=0", "--env.episode_length=80", "--tracker=none", "--progress=false", "--num_threads=1",
]  # fmt: skip
ONLINE_FLAGS = ["--online.every=150", "--online.n_episodes=8", "--online.ratio=0.5"]  # add --online.labels=...
