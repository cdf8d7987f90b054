"""Train a PushT policy, evaluate it in gym-pusht, and optionally share it. Two recipes:

    accelerate launch examples/train_pusht.py                  # --recipe=auto: `paper` with a CUDA GPU, else `cpu`
    accelerate launch examples/train_pusht.py --recipe=paper   # Diffusion Policy's image setup on lerobot/pusht
    accelerate launch examples/train_pusht.py --recipe=cpu     # agent position + block keypoints from scripted demos
    accelerate launch examples/train_pusht.py --recipe=cpu --hub.repo_id=user/pusht-diffusion

`paper` is the diffusion_policy paper's PushT image setup: 206 human demonstrations (lerobot/pusht from the Hub),
ResNet18 + U-Net (263 M parameters), 200k steps at batch 64; about a day on one GPU, weeks on a CPU.
`cpu` needs neither a GPU nor the Hub: the scripted expert records demonstrations once (reused by later runs), and a
small state-input Diffusion Policy learns from them; the whole command (record + train + a 500-episode evaluation)
is measured by bench/learning.py (README).

A recipe is a list of `hfpolicy train` flags (below) put before yours, so every flag you give overrides it (`--help`
lists them), with a preset per policy type (`--recipe=cpu --policy.type=act` gets a small ACT); with `--resume=true`
the run's own train_config.json is the base and no recipe flag is added.
"""

import argparse
import json
import sys

import torch

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.training import describe_dataset, main

RECIPE_CHOICES = ("auto", "paper", "cpu")

RECIPES: dict[str, dict[str, list[str]]] = {
    "paper": {  # Diffusion Policy's PushT image setup: 200k steps at batch 64, 50 eval episodes every 20k steps
        "run": [
            "--dataset.repo_id=lerobot/pusht",
            "--steps=200000",
            "--batch_size=64",
            "--save_freq=20000",
            "--eval.freq=20000",
            "--eval.n_episodes=50",
            "--eval.n_videos=4",
        ],
        "policies": {"diffusion": ["--policy.type=diffusion"]},  # the paper's defaults (DiffusionConfig)
    },
    "cpu": {  # state inputs from scripted demos; sizes chosen by measurement on a 2-core CPU (README)
        "run": [
            "--dataset.scripted_episodes=500",  # recorded once into the cache, then reused
            f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
            "--steps=5000",
            "--batch_size=256",
            "--save_freq=1000",
            "--compile=true",  # ~3x faster steps for this small U-Net on CPU
            "--eval.freq=1000",  # a 50-episode check every 1000 steps, 500 episodes at the end
            "--eval.n_episodes=50",
            "--eval.final_n_episodes=500",
            "--eval.batch_size=125",
            "--eval.n_videos=4",
        ],
        "policies": {
            "diffusion": [
                "--policy.type=diffusion",
                "--policy.down_dims=[64,128,256]",  # 4.5 M parameters
                "--policy.crop_shape=null",  # no images
                "--policy.n_action_steps=4",  # closed loop every 4 steps: 58% vs 51% success with 8 (same weights)
                "--policy.optimizer_lr=1e-3",
                "--policy.scheduler_warmup_steps=200",
                "--policy.noise_scheduler_type=DDIM",  # acting: 10 denoising steps instead of 100
                "--policy.num_inference_steps=10",
            ],
            "act": [  # --policy.type=act: a small ACT for 10 Hz PushT (1.5 M parameters; pilots on 50 episodes)
                "--policy.type=act",
                "--policy.chunk_size=16",
                "--policy.n_action_steps=8",
                "--policy.dim_model=128",
                "--policy.n_heads=4",
                "--policy.dim_feedforward=512",
                "--policy.n_vae_encoder_layers=2",
                "--policy.dropout=0.0",
                "--policy.optimizer_lr=1e-3",
                "--policy.scheduler_name=cosine",
                "--policy.scheduler_warmup_steps=300",
                "--steps=3000",  # 77.6% success over 500 seeds in 29 minutes (README)
                "--compile=false",  # measured no faster for this transformer
            ],
        },
    },
}


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


def recipe_flags(recipe: str, flags: list[str]) -> list[str]:
    """The recipe's flags that go before the user's: none when resuming; the preset of the chosen `--policy.type`
    (none for a type the recipe has no preset for); no scripted recording when the user names the data
    (`--dataset.root=` or `--dataset.repo_id=`)."""
    if any(flag in ("--resume=true", "--resume=True") for flag in flags):
        return []
    chosen = RECIPES[recipe]
    types = [flag.split("=", 1)[1] for flag in flags if flag.startswith("--policy.type=")]
    policy_type = types[-1] if types else next(iter(chosen["policies"]))  # the first preset is the default policy
    policy_flags = chosen["policies"].get(policy_type, [])
    run_flags = chosen["run"]
    if any(flag.startswith(("--dataset.root=", "--dataset.repo_id=")) for flag in flags):
        run_flags = [flag for flag in run_flags if not flag.startswith("--dataset.scripted_episodes=")]
    return [*run_flags, *policy_flags]


def run(argv: list[str] | None = None) -> int:
    recipe, reason, flags = choose_recipe(sys.argv[1:] if argv is None else argv)
    if "--help" in flags or "-h" in flags:
        print(f"--recipe {{{','.join(RECIPE_CHOICES)}}}: defaults for the flags below (now {recipe}: {reason}):")
        print("  " + " ".join(recipe_flags(recipe, [])) + "\n")
    return main(
        # the reason is quoted: flag values are read as YAML, where "auto: ..." would be a mapping
        [*recipe_flags(recipe, flags), f"--recipe={recipe}", f"--recipe_reason={json.dumps(reason)}", *flags],
        announce=lambda cfg: f"recipe {recipe} ({reason}); data: {describe_dataset(cfg.dataset)}",
        prog="train_pusht.py",
    )


if __name__ == "__main__":
    sys.exit(run())
