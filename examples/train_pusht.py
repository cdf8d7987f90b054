"""Train Diffusion Policy on PushT (the paper's image setup), then evaluate it in gym-pusht and optionally share it.

    accelerate launch examples/train_pusht.py                                   # lerobot/pusht from the Hub
    accelerate launch examples/train_pusht.py --dataset.root=data/pusht         # a local dataset, no network
    accelerate launch examples/train_pusht.py --hub.repo_id=user/pusht-diffusion

Every flag of `hfpolicy train` works here (`--help` lists them); this file only sets the PushT preset's defaults.
"""

import sys
from dataclasses import dataclass, field

from hfpolicy.train import DatasetConfig, TrainConfig, TrainEvalConfig, main


@dataclass
class PushTDiffusionTrainConfig(TrainConfig):
    """Diffusion Policy on lerobot/pusht: 200k steps at batch 64, evaluated on 50 episodes every 20k steps."""

    dataset: DatasetConfig = field(default_factory=lambda: DatasetConfig(repo_id="lerobot/pusht"))  # 206 human demos
    eval: TrainEvalConfig = field(default_factory=lambda: TrainEvalConfig(freq=20_000, n_episodes=50, n_videos=4))
    steps: int = 200_000  # optimizer steps (about 500 epochs of lerobot/pusht)
    batch_size: int = 64  # samples per process per step
    save_freq: int = 20_000  # checkpoint every N steps


if __name__ == "__main__":
    sys.exit(main(config_class=PushTDiffusionTrainConfig))
