"""Train TD-MPC on xArm lift (gym-xarm's XarmLift-v0 on MuJoCo 3), evaluate it in the xArm env, optionally share it.

    accelerate launch examples/train_xarm.py                    # --recipe=auto: `paper` with a CUDA GPU, else `cpu`
    accelerate launch examples/train_xarm.py --recipe=cpu       # a small TD-MPC on scripted demos (CPU)
    accelerate launch examples/train_xarm.py --recipe=paper     # LeRobot's TD-MPC sizes and training setup (GPU)
    python examples/train_xarm.py [--num_processes=N] ...       # without a launcher, as examples/train_pusht.py

Both recipes train offline on demonstrations the scripted xArm expert records once (`--dataset.scripted_episodes`,
reused by later runs; state-only: the end effector and gripper as observation.state, the cube's pose as
observation.environment_state, and gym-xarm's reward as next.reward, which TD-MPC learns from), and evaluate in
hfpolicy's xArm env with those observations (no rendering but the videos). `--dataset.root=DIR` trains on a recording
of your own instead (`hfpolicy record --env.type=xarm --environment_state=true ...`).

`paper` is LeRobot 0.6.1's TD-MPC (its TDMPCConfig defaults: the FOWM variant, latent 50, MLPs 512 wide, 5 Q
functions, MPPI with 512 + 51 samples over 6 iterations) with the training setup of LeRobot's former xArm lift TD-MPC
config (50k offline steps at batch 256, Adam at 3e-4, gradient clipping at 10, an evaluation every 5k steps), on 800
scripted demonstrations (~90k frames, a few minutes to record). Not LeRobot's xArm datasets: their physics is FOWM's,
not gym-xarm's (docs/xarm.md). Planning at these sizes costs seconds per plan on a CPU: a GPU recipe, not measured.

`cpu` needs neither a GPU nor the Hub: narrower networks and a smaller planner, sized by step time on a 2-core CPU
(docs/xarm.md and docs/results.md have the figures). Its reasons are written beside it.

A recipe is a typed preset whose fields are put before your flags, so every flag you give overrides it (`--help` lists
them); see hfpolicy.training.recipes.
"""

import dataclasses
import sys

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.policies import TDMPCConfig
from hfpolicy.training import recipes
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainEvalConfig
from hfpolicy.training.recipes import CPU_STATE_POLICIES, PolicyPreset, Recipe

PROG = "train_xarm.py"
STATE_INPUTS = [OBS_STATE, OBS_ENV_STATE]

PAPER_RECIPE = Recipe(
    run=TrainConfig(
        dataset=DatasetConfig(scripted_episodes=800, input_features=STATE_INPUTS),
        env=XarmEnvConfig(),
        steps=50_000,
        batch_size=256,
        save_freq=10_000,
        eval=TrainEvalConfig(freq=5_000, n_episodes=50, batch_size=50, n_videos=4),
    ),
    policies={"tdmpc": PolicyPreset(TDMPCConfig())},  # LeRobot 0.6.1's defaults (FOWM's sizes, lr 3e-4)
)

# The cpu recipe, for the 2-core dev machine. Why these settings (measured there, 1 torch thread; docs/xarm.md
# "examples/train_xarm.py", docs/results.md):
# - state inputs (end effector + gripper, the cube's pose): a camera frame costs ~0.13 s to render on this CPU whatever
#   its size, more than a training step, and the scripted recordings are state-only;
# - the shared small TD-MPC (recipes.CPU_STATE_POLICIES): LeRobot's latent, Q ensemble, horizon, repeats and losses,
#   MLPs 128 wide; it acts with pi (use_mpc=False): trained offline on expert demonstrations, the same checkpoint
#   succeeded with pi and failed with MPPI planning (docs/results.md); `--policy.use_mpc=true` plans;
# - a training step at batch 256 (LeRobot's) takes ~0.07 s on an idle core (0.16-0.19 s at load 4-5), so 10000 steps
#   cost ~12-30 minutes; 100 demonstrations (11248 frames, recorded in ~25 s) make that ~230 passes over the data;
# - one torch thread: these 128-wide MLPs give a second thread little to share, and on the 2-core machine with other
#   jobs running 2 threads made a step 1.3-4.2 s instead of 0.16-0.19 s (--num_threads=N overrides it);
# - a 20-episode evaluation every 2000 steps (the curve) and 100 episodes at the end, one filmed per evaluation (a
#   384x384 frame costs ~0.13 s): with pi a 200-step episode costs well under a second unfilmed.
# `--policy.type=diffusion|act` trains the same small presets as PushT's cpu recipe (docs/results.md compares them at
# equal minutes).
STEPS = 10_000
CPU_RECIPE = Recipe(
    run=TrainConfig(
        dataset=DatasetConfig(scripted_episodes=100, input_features=STATE_INPUTS),  # recorded once
        env=XarmEnvConfig(),
        steps=STEPS,
        batch_size=256,
        num_threads=1,
        save_freq=2000,
        eval=TrainEvalConfig(freq=STEPS // 5, n_episodes=20, final_n_episodes=100, batch_size=50, n_videos=1),
    ),
    policies={  # TD-MPC first (the default); Diffusion Policy and ACT at about TD-MPC's minutes (docs/results.md)
        "tdmpc": CPU_STATE_POLICIES["tdmpc"],
        "diffusion": dataclasses.replace(CPU_STATE_POLICIES["diffusion"], steps=1600),
        "act": dataclasses.replace(CPU_STATE_POLICIES["act"], steps=1800),
    },
)
RECIPES: dict[str, Recipe] = {"paper": PAPER_RECIPE, "cpu": CPU_RECIPE}


def choose_recipe(argv: list[str]) -> tuple[str, str, list[str]]:
    """(recipe, why it was chosen, the remaining flags) from `--recipe=auto|paper|cpu` (default auto)."""
    return recipes.choose_recipe(argv, prog=PROG)


def recipe_flags(recipe: str, flags: list[str]) -> list[str]:
    """The recipe's flags that go before the user's (hfpolicy.training.recipes.preset_flags)."""
    return recipes.preset_flags(RECIPES[recipe], flags)


def run(argv: list[str] | None = None) -> int:
    return recipes.run_example(__file__, PROG, argv, choose_recipe, recipe_flags)


if __name__ == "__main__":
    sys.exit(run())
