"""Train a PushT policy, evaluate it in gym-pusht, and optionally share it. Two recipes:

    accelerate launch examples/train_pusht.py                  # --recipe=auto: `paper` with a CUDA GPU, else `cpu`
    accelerate launch examples/train_pusht.py --recipe=paper   # Diffusion Policy's image setup on lerobot/pusht
    accelerate launch examples/train_pusht.py --recipe=cpu     # agent position + block keypoints from scripted demos
    accelerate launch examples/train_pusht.py --recipe=cpu --hub.repo_id=user/pusht-diffusion

`paper` is the diffusion_policy paper's PushT image setup: 206 human demonstrations (lerobot/pusht from the Hub),
ResNet18 + U-Net (263 M parameters), 200k steps at batch 64; about a day on one GPU, weeks on a CPU.
`cpu` needs neither a GPU nor the Hub: the scripted expert records demonstrations once (reused by later runs), and a
small state-input Diffusion Policy learns from them; the whole command (record + train + a 500-episode evaluation)
fits in under an hour on a 2-core laptop CPU (README, bench/learning.py).

Every flag of `hfpolicy train` works here and overrides the recipe's defaults (`--help` lists them).
"""

import argparse
import sys
from dataclasses import dataclass, field

import torch

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.policies import PolicyConfig
from hfpolicy.policies.diffusion import DiffusionConfig
from hfpolicy.train import DatasetConfig, TrainConfig, TrainEvalConfig, describe_dataset, main

RECIPE_CHOICES = ("auto", "paper", "cpu")


@dataclass
class PushTPaperConfig(TrainConfig):
    """Diffusion Policy on lerobot/pusht (images): 200k steps at batch 64, evaluated on 50 episodes every 20k steps."""

    recipe: str | None = "paper"  # the preset these defaults come from
    dataset: DatasetConfig = field(default_factory=lambda: DatasetConfig(repo_id="lerobot/pusht"))  # 206 human demos
    eval: TrainEvalConfig = field(default_factory=lambda: TrainEvalConfig(freq=20_000, n_episodes=50, n_videos=4))
    steps: int = 200_000  # optimizer steps (about 500 epochs of lerobot/pusht)
    batch_size: int = 64  # samples per process per step
    save_freq: int = 20_000  # checkpoint every N steps


def cpu_recipe_policy() -> DiffusionConfig:
    """The state-input Diffusion Policy of the cpu recipe (sizes chosen by measurement: see README)."""
    return DiffusionConfig(
        down_dims=(64, 128, 256),  # 4.5 M parameters
        crop_shape=None,  # no images
        n_action_steps=4,  # closed loop every 4 steps: 58% vs 51% success with 8 (same weights, 100 seeds)
        optimizer_lr=1e-3,
        scheduler_warmup_steps=200,
        noise_scheduler_type="DDIM",  # acting: 10 denoising steps instead of 100
        num_inference_steps=10,
    )


@dataclass
class PushTCpuConfig(TrainConfig):
    """Diffusion Policy on the agent position and the T block's 8 keypoints, learned from scripted demonstrations."""

    recipe: str | None = "cpu"  # the preset these defaults come from
    dataset: DatasetConfig = field(
        default_factory=lambda: DatasetConfig(scripted_episodes=500, input_features=[OBS_STATE, OBS_ENV_STATE])
    )  # recorded once into the cache, then reused
    policy: PolicyConfig = field(default_factory=cpu_recipe_policy)  # see cpu_recipe_policy
    eval: TrainEvalConfig = field(
        default_factory=lambda: TrainEvalConfig(
            freq=1000, n_episodes=50, final_n_episodes=500, batch_size=125, n_videos=4
        )
    )  # a 50-episode check every 1000 steps, 500 episodes at the end
    steps: int = 5000  # optimizer steps
    batch_size: int = 256  # samples per process per step
    save_freq: int = 1000  # checkpoint every N steps
    compile: bool = True  # torch.compile: ~3x faster steps for this small U-Net on CPU


RECIPES: dict[str, type[TrainConfig]] = {"paper": PushTPaperConfig, "cpu": PushTCpuConfig}


def choose_recipe(argv: list[str]) -> tuple[str, str, list[str]]:
    """(recipe, why it was chosen, the remaining flags) from `--recipe=auto|paper|cpu` (default auto)."""
    parser = argparse.ArgumentParser(prog="train_pusht.py", add_help=False)
    parser.add_argument("--recipe", choices=RECIPE_CHOICES, default="auto")
    known, rest = parser.parse_known_args(argv)
    if known.recipe != "auto":
        return known.recipe, f"--recipe={known.recipe}", rest
    if torch.cuda.is_available():
        return "paper", f"auto: CUDA device {torch.cuda.get_device_name(0)} present", rest
    return "cpu", "auto: no CUDA device, and the paper recipe would take weeks on a CPU", rest


def run(argv: list[str] | None = None) -> int:
    recipe, reason, flags = choose_recipe(sys.argv[1:] if argv is None else argv)
    if "--help" in flags or "-h" in flags:
        print(f"--recipe {{{','.join(RECIPE_CHOICES)}}}  defaults for the flags below (now: {recipe}, {reason})\n")
    return main(
        [*flags, f"--recipe_reason={reason}"],
        config_class=RECIPES[recipe],
        announce=lambda cfg: f"recipe {recipe} ({reason}); data: {describe_dataset(cfg.dataset)}",
    )


if __name__ == "__main__":
    sys.exit(run())
