"""Train TD-MPC on xArm lift (gym-xarm's XarmLift-v0 on MuJoCo 3), evaluate it in the xArm env, optionally share it.

    accelerate launch examples/train_xarm.py                    # --recipe=auto: `paper` with a CUDA GPU, else `cpu`
    accelerate launch examples/train_xarm.py --recipe=cpu       # a small TD-MPC on scripted demos (CPU)
    accelerate launch examples/train_xarm.py --recipe=paper     # LeRobot's TD-MPC sizes and training setup (GPU)
    python examples/train_xarm.py --online_rl                   # the cpu recipe offline, then online RL (FOWM)
    python examples/train_xarm.py --pure_online                 # no demonstrations: online RL from random actions
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
(docs/xarm.md and docs/results.md have the figures). Its reasons are written beside it. Two online variants of it (docs/online_rl.md):
`--online_rl` trains the cpu recipe's offline steps, then fine-tunes online on the policy's own rollouts and rewards
(FOWM's offline-to-online setting: rounds of 10 explored episodes, 0.5 gradient steps per env step, half of every
batch online); `--pure_online` starts without demonstrations from 25 episodes of random actions (TD-MPC's setting).

A recipe is a typed preset whose fields are put before your flags, so every flag you give overrides it (`--help` lists
them); see hfpolicy.training.recipes.
"""

import argparse
import dataclasses
import sys

from hfpolicy.constants import OBS_ENV_STATE, OBS_STATE
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.policies import TDMPCConfig
from hfpolicy.training import recipes
from hfpolicy.training.config import DatasetConfig, OnlineConfig, TrainConfig, TrainEvalConfig
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
# --online_rl: the cpu recipe's 10000 offline steps, then FOWM's offline-to-online fine-tuning (estimates from the
# step times above, not a measured run):
# - online from step 10000 (the offline recipe's end) to 13000: 3000 more steps (~4 min on an idle core);
# - rounds of 10 episodes (one batch of envs, acting with the recipe's pi plus exploration noise; with
#   `--policy.use_mpc=true` each env plans alone, ~0.065 s per 2 env steps), the next round after max(250, 0.5 x the
#   last round's env steps) gradient steps: FOWM's ratio of gradient steps to env steps (0.5, as its 1 update per 2
#   action-repeated env steps), so ~5 rounds, ~50 episodes;
# - half of every batch from the online data (FOWM's balanced sampling), the rest from the 100 demonstrations;
# - exploration from 0.3 down to 0.05 (TD-MPC's min_std) over the first 10000 online env steps: the offline policy
#   already reaches the cube, and TD-MPC's 0.5 (meant for a random start) would spend the few rounds there are on
#   noise;
# - an evaluation of 20 episodes every 2000 steps (4, <= ~2 min each) and 100 at the end (<= ~10 min).
ONLINE_RL_RECIPE = Recipe(
    run=dataclasses.replace(
        CPU_RECIPE.run,
        steps=STEPS + 3000,
        eval=dataclasses.replace(CPU_RECIPE.run.eval, freq=2000),
        online=OnlineConfig(
            every=250,
            start_step=STEPS,
            n_episodes=10,
            labels="reward",
            ratio=0.5,
            updates_per_env_step=0.5,
            exploration_std=0.3,
            exploration_std_end=0.05,
            exploration_steps=10_000,
        ),  # fmt: skip
    ),
    policies=CPU_RECIPE.policies,
)
# --pure_online: TD-MPC's own setting, no demonstrations:
# - 25 episodes of seeded random actions first (5000 env steps: TD-MPC's seed steps; ~10 s, no planning), which give
#   the normalization stats; every batch is online data;
# - 1000 steps on them, then rounds as above (10 episodes, 0.5 gradient steps per env step, at least 250 apart);
#   10000 steps in all: planned as ~40 minutes, measured 12 (0.06 s a step, rounds 0.2 min in all; 2026-12-05), and
#   no episode succeeded in them (docs/online_rl.md); whether more steps find a lift is not measured;
# - TD-MPC's exploration schedule: 0.5 down to 0.05 over 25000 env steps;
# - an evaluation of 20 episodes every 2500 steps and 100 at the end.
PURE_ONLINE_STEPS = 10_000
PURE_ONLINE_RECIPE = Recipe(
    run=dataclasses.replace(
        CPU_RECIPE.run,
        dataset=DatasetConfig(input_features=STATE_INPUTS),  # no demonstrations: the env's state observations
        steps=PURE_ONLINE_STEPS,
        eval=dataclasses.replace(CPU_RECIPE.run.eval, freq=PURE_ONLINE_STEPS // 4),
        online=OnlineConfig(
            every=250,
            start_step=1000,
            n_episodes=10,
            labels="reward",
            updates_per_env_step=0.5,
            seed_episodes=25,
            exploration_std=0.5,
            exploration_std_end=0.05,
            exploration_steps=25_000,
        ),  # fmt: skip
    ),
    policies=CPU_RECIPE.policies,
)
RECIPES: dict[str, Recipe] = {
    "paper": PAPER_RECIPE,
    "cpu": CPU_RECIPE,
    "cpu_online_rl": ONLINE_RL_RECIPE,
    "cpu_pure_online": PURE_ONLINE_RECIPE,
}
ONLINE_MODES = {"online_rl": "cpu_online_rl", "pure_online": "cpu_pure_online"}  # flag -> recipe
HELP_LINES = [
    "--online_rl: the cpu recipe offline, then online RL on its own rollouts and rewards (FOWM's offline-to-online)",
    "--pure_online: online RL without demonstrations, from 25 episodes of random actions (TD-MPC's setting)",
]


def choose_recipe(argv: list[str]) -> tuple[str, str, list[str]]:
    """(recipe, why it was chosen, the remaining flags) from `--recipe=auto|paper|cpu` (default auto) and
    `--online_rl` / `--pure_online` (the cpu recipe's online variants)."""
    parser = argparse.ArgumentParser(prog=PROG, add_help=False)
    for mode in ONLINE_MODES:
        parser.add_argument(f"--{mode}", action="store_true")
    known, rest = parser.parse_known_args(argv)
    modes = [mode for mode in ONLINE_MODES if getattr(known, mode)]
    if not modes:
        return recipes.choose_recipe(rest, prog=PROG)
    if len(modes) > 1:
        sys.exit(f"{PROG}: error: --online_rl and --pure_online are two settings of the cpu recipe: choose one")
    recipe_parser = argparse.ArgumentParser(prog=PROG, add_help=False)
    recipe_parser.add_argument("--recipe", default="cpu")
    asked, rest = recipe_parser.parse_known_args(rest)
    if asked.recipe != "cpu":
        sys.exit(f"{PROG}: error: --{modes[0]} is a variant of the cpu recipe: leave out --recipe={asked.recipe}")
    return ONLINE_MODES[modes[0]], f"--{modes[0]}", rest


def recipe_flags(recipe: str, flags: list[str]) -> list[str]:
    """The recipe's flags that go before the user's (hfpolicy.training.recipes.preset_flags)."""
    return recipes.preset_flags(RECIPES[recipe], flags)


def run(argv: list[str] | None = None) -> int:
    return recipes.run_example(__file__, PROG, argv, choose_recipe, recipe_flags, HELP_LINES)


if __name__ == "__main__":
    sys.exit(run())
