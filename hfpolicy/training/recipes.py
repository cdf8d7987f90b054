"""Training recipes: typed presets of `hfpolicy train` flags, and the run of the example scripts built on them
(examples/train_pusht.py, train_aloha.py). The fields of a recipe that differ from the defaults become flags put
before the user's, so every flag the user gives overrides the recipe; a resume adds none.
"""

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs.configs import EnvConfig
from hfpolicy.field_errors import value_words
from hfpolicy.policies import ACTConfig, DiffusionConfig, TDMPCConfig
from hfpolicy.policies.config import PolicyConfig
from hfpolicy.training.cli import main
from hfpolicy.training.config import BudgetConfig, TrainConfig, describe_dataset
from hfpolicy.training.launch import check_before_launch, launch, report_result

RECIPE_CHOICES = ("auto", "paper", "cpu")


@dataclass(frozen=True)
class PolicyPreset:
    """A policy type's preset within a recipe: its config, and the run settings that differ for it."""

    policy: PolicyConfig
    steps: int | None = None  # None: the recipe's
    compile: bool | None = None  # None: the recipe's
    budget_minutes: float | None = None  # --budget.minutes (None: none); not added when the user gives --steps


@dataclass(frozen=True)
class Recipe:
    """A preset run: the run's fields, and the preset of each policy type it knows (the first: the default)."""

    run: TrainConfig
    policies: dict[str, PolicyPreset] = field(default_factory=dict)


# The small state-input policies of the cpu recipes (PushT's and xArm's; ALOHA's ACT is this one with longer chunks),
# sized by measurement on a 2-core CPU (docs/recipes.md, docs/xarm.md). Each recipe sets its own steps.
CPU_STATE_POLICIES: dict[str, PolicyPreset] = {
    "diffusion": PolicyPreset(
        DiffusionConfig(
            down_dims=(64, 128, 256),  # 4.5 M parameters
            crop_shape=None,  # no images
            n_action_steps=4,  # closed loop every 4 steps: 58% vs 51% PushT success with 8 (same weights)
            optimizer_lr=1e-3,
            scheduler_warmup_steps=200,
            noise_scheduler_type="DDIM",  # acting: 10 denoising steps instead of 100
            num_inference_steps=10,
        )
    ),
    "act": PolicyPreset(  # 1.5 M parameters (pilots on 50 PushT episodes)
        ACTConfig(
            chunk_size=16,
            n_action_steps=8,
            dim_model=128,
            n_heads=4,
            dim_feedforward=512,
            n_vae_encoder_layers=2,
            dropout=0.0,
            optimizer_lr=1e-3,
            scheduler_name="cosine",
            scheduler_warmup_steps=300,
        ),
        compile=False,  # measured no faster for this transformer
    ),
    # LeRobot's latent (50), 5 Q functions, horizon 5, action repeats 2 and losses; MLPs 128 wide and a small planner
    # (a plan 0.05-0.08 s instead of 3-4 s); acting with pi: offline, planning with values learnt from expert-only
    # data failed where pi succeeded (docs/results.md), `hfpolicy eval --policy.use_mpc=true` plans.
    "tdmpc": PolicyPreset(
        TDMPCConfig(
            mlp_dim=128,
            state_encoder_hidden_dim=64,
            n_gaussian_samples=64,
            n_pi_samples=8,
            n_elites=8,
            cem_iterations=3,
            use_mpc=False,
        ),
        compile=False,
    ),
}


@dataclass(frozen=True)
class ChosenRecipe:
    """The recipe a script runs: its name, why it was chosen (printed first, kept in the model card) and its flags."""

    name: str  # "paper" / "cpu"
    reason: str
    flags: list[str]  # put before the user's flags


def changed_flags(preset, base, prefix: str = "") -> list[str]:
    """The flags that turn config `base` into `preset` (a policy, or an env of another type, as its `.type` first)."""
    flags = []
    for f in dataclasses.fields(preset):
        value, default = getattr(preset, f.name), getattr(base, f.name)
        other_choice = isinstance(value, EnvConfig) and type(value) is not type(default)
        if isinstance(value, PolicyConfig) or other_choice:  # a registered choice: its type, then its own fields
            flags += [f"--{prefix}{f.name}.type={value.type}"]
            flags += changed_flags(value, type(value)(), f"{prefix}{f.name}.")
        elif dataclasses.is_dataclass(value) and type(value) is type(default):
            flags += changed_flags(value, default, f"{prefix}{f.name}.")
        elif value != default:
            flags.append(f"--{prefix}{f.name}={value_words(value)}")
    return flags


def user_choices(flags: list[str]) -> argparse.Namespace:
    """The user's flags that decide what a recipe adds (parsed, not matched)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--steps")
    parser.add_argument("--policy.type", dest="policy_type")
    parser.add_argument("--policy.path", dest="policy_path")
    parser.add_argument("--resume", type=lambda text: text.lower() == "true", default=False)
    parser.add_argument("--dataset.root", dest="dataset_root")
    parser.add_argument("--dataset.repo_id", dest="dataset_repo_id")
    parser.add_argument("--env.task", dest="env_task")
    return parser.parse_known_args(flags)[0]


def choose_recipe(argv: list[str], prog: str, choices: Sequence[str] = RECIPE_CHOICES) -> tuple[str, str, list[str]]:
    """(recipe, why, the other flags) from `--recipe=auto|paper|cpu` (auto: `paper` with CUDA, else `cpu`)."""
    import torch

    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    parser.add_argument("--recipe", choices=choices, default="auto")
    known, rest = parser.parse_known_args(argv)
    if known.recipe != "auto":
        return known.recipe, f"--recipe={known.recipe}", rest
    if torch.cuda.is_available():
        return "paper", f"auto: CUDA device {torch.cuda.get_device_name(0)} present", rest
    return "cpu", "auto: no CUDA device, and the paper recipe would take weeks on a CPU", rest


def preset_flags(chosen: Recipe, flags: list[str]) -> list[str]:
    """Recipe `chosen`'s flags that go before the user's `flags`: none when resuming; with the preset of the chosen
    `--policy.type` (no `--policy.*` flags with `--policy.path`); no scripted recording when the user names the data;
    no time budget when the user gives `--steps`."""
    user = user_choices(flags)
    if user.resume:
        return []
    run = chosen.run
    if user.dataset_root is not None or user.dataset_repo_id is not None:
        run = dataclasses.replace(run, dataset=dataclasses.replace(run.dataset, scripted_episodes=0))
    run_flags = [flag for flag in changed_flags(run, TrainConfig()) if not flag.startswith("--policy.")]
    policy_type = user.policy_type or next(iter(chosen.policies))  # the first preset is the default policy
    preset = chosen.policies.get(policy_type)
    if preset is None:
        return run_flags
    changes: dict[str, Any] = {
        name: getattr(preset, name) for name in ("steps", "compile") if getattr(preset, name) is not None
    }
    if preset.budget_minutes is not None and user.steps is None:
        changes["budget"] = BudgetConfig(minutes=preset.budget_minutes)
    flags = changed_flags(dataclasses.replace(run, policy=preset.policy, **changes), run)
    if user.policy_path is not None:
        flags = [flag for flag in flags if not flag.startswith("--policy.")]
    return [*run_flags, *flags]


def state_inputs_missing(recipe: str, flags: list[str], prog: str) -> str | None:
    """The one-line error for a cpu recipe (state inputs) on a `--dataset.root` without them, or None."""
    user = user_choices(flags)
    if recipe != "cpu" or user.resume or user.dataset_root is None:
        return None
    info = Path(user.dataset_root) / "meta" / "info.json"
    if not info.is_file() or any(f.startswith("--dataset.input_features") for f in flags):
        return None  # (no info.json: hfpolicy train says what is wrong with the folder)
    features = json.loads(info.read_text()).get("features", {})
    missing = [key for key in (OBS_STATE, OBS_ENV_STATE) if key not in features]
    if not missing:
        return None
    return (
        f"{prog}: error: the cpu recipe trains a state-input policy ({OBS_STATE} + {OBS_ENV_STATE}), and "
        f"--dataset.root={user.dataset_root} has no {', '.join(missing)}: record or convert it with "
        "--environment_state=true, or train on its images with --recipe=paper (a GPU recipe)"
    )


def split_num_processes(argv: list[str], prog: str) -> tuple[int, list[str]]:
    """(--num_processes, the other flags): `python examples/train_pusht.py --num_processes=2` launches 2 processes."""
    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    parser.add_argument("--num_processes", type=int, default=1)
    known, rest = parser.parse_known_args(argv)
    return known.num_processes, rest


def run_recipe(
    script: str,
    prog: str,
    argv: list[str],
    num_processes: int,
    chosen: ChosenRecipe,
    flags: list[str],
    help_lines: Sequence[str] = (),
    recipe_choices: Sequence[str] = RECIPE_CHOICES,
) -> int:
    """Trains with the recipe's flags before the user's `flags`: in this process, or with `num_processes` > 1 through
    `accelerate launch` of `script` with `argv` (hfpolicy.training.launch). `--help` first prints the recipe,
    `help_lines` (the script's own) and the recipe's flags."""
    if "--help" in flags or "-h" in flags:
        print("--num_processes N: train on N processes (accelerate launch; default 1: this process, no launcher)")
        print(
            f"--recipe {{{','.join(recipe_choices)}}}: defaults for the flags below (now {chosen.name}: {chosen.reason}):"
        )
        for line in help_lines:
            print(line)
        print("  " + " ".join(chosen.flags) + "\n")
    # the reason is quoted: flag values are read as YAML, where "auto: ..." would be a mapping
    train_flags = [*chosen.flags, f"--recipe={chosen.name}", f"--recipe_reason={json.dumps(chosen.reason)}", *flags]
    if num_processes > 1:
        problem = check_before_launch(train_flags, prog=prog)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
        return launch(script, num_processes, argv)

    def announce(cfg: TrainConfig) -> str:
        return f"recipe {chosen.name} ({chosen.reason}); data: {describe_dataset(cfg.dataset, cfg.env, cfg.online)}"

    # a launched process reports its status and last line to the launching one
    return report_result(prog, lambda: main(train_flags, announce=announce, prog=prog))


def run_example(
    script: str,
    prog: str,
    argv: list[str] | None,
    choose_recipe: Callable[[list[str]], tuple[str, str, list[str]]],
    recipe_flags: Callable[[str, list[str]], list[str]],
    help_lines: Sequence[str] = (),
) -> int:
    """An example script's run: --num_processes split off, its recipe chosen, a cpu recipe without state inputs
    refused, then `run_recipe` with `recipe_flags(recipe, flags)` before the user's flags."""
    num_processes, argv = split_num_processes(sys.argv[1:] if argv is None else argv, prog=prog)
    recipe, reason, flags = choose_recipe(argv)
    problem = state_inputs_missing(recipe, flags, prog=prog)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    chosen = ChosenRecipe(recipe, reason, recipe_flags(recipe, flags))
    return run_recipe(script, prog, argv, num_processes, chosen, flags, help_lines)
