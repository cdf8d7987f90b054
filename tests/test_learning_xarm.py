"""examples/train_xarm.py end to end at a tiny budget (the cpu recipe records the scripted xArm expert, trains a
state-input TD-MPC, evaluates it in the xArm env with a video), and the flags of each recipe. The cpu recipe's sizes
come from step times (docs/xarm.md); its learning is not measured here."""

import importlib.util
import json
from pathlib import Path

import av
import torch

from hfpolicy.constants import EVAL_INFO_FILE, OBS_ENV_STATE, OBS_STATE, REWARD
from hfpolicy.datasets import DatasetMeta
from hfpolicy.envs import XarmEnvConfig
from hfpolicy.policies import Policy
from hfpolicy.policies.tdmpc import TDMPCPolicy
from hfpolicy.training.config import parse_train_config
from hfpolicy.training.recipes import CPU_STATE_POLICIES

ROOT = Path(__file__).resolve().parents[1]
TINY_TDMPC = ["--policy.latent_dim=8", "--policy.mlp_dim=32", "--policy.state_encoder_hidden_dim=16"]
TINY_TDMPC += ["--policy.q_ensemble_size=2", "--policy.n_gaussian_samples=16", "--policy.n_pi_samples=4"]
TINY_TDMPC += ["--policy.n_elites=4", "--policy.cem_iterations=2"]


def load_example():
    spec = importlib.util.spec_from_file_location("train_xarm", ROOT / "examples" / "train_xarm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_recipe_records_trains_and_evaluates_with_a_video(tmp_path, monkeypatch, capsys):
    """The recipe as a user runs it, shrunk: 2 recorded demos (whole episodes, state-only, with gym-xarm's reward), a
    tiny TD-MPC for 3 steps, then the final evaluation: 2 planned episodes of 6 steps, the first one filmed."""
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    flags = ["--recipe=cpu", "--dataset.scripted_episodes=2", *TINY_TDMPC, "--batch_size=8", "--steps=3"]
    flags += ["--eval.freq=3", "--eval.n_episodes=2", "--eval.final_n_episodes=2", "--eval.batch_size=2"]
    flags += ["--env.episode_length=6", "--tracker=none", "--progress=false", f"--output_dir={out}"]
    assert load_example().run(flags) == 0
    recording = tmp_path / "cache" / "datasets" / "xarm_lift_scripted_2"
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line == (
        f"recipe cpu (--recipe=cpu); data: 2 scripted-expert XarmLift-v0 demonstrations in {recording} "
        "(recorded now, reused by later runs)"
    )

    meta = DatasetMeta.load(recording)
    assert meta.total_episodes == 2 and 50 < meta.total_frames <= 400  # whole episodes, ended by success
    assert tuple(meta.features[OBS_ENV_STATE]["shape"]) == (7,) and REWARD in meta.features and not meta.camera_keys
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["recipe"] == "cpu" and saved["dataset"]["root"] == str(recording) and saved["num_threads"] == 1
    assert (saved["env"]["type"], saved["env"]["task"]) == ("xarm", "XarmLift-v0")
    trained = Policy.from_pretrained(out / "checkpoints" / "last" / "pretrained_model")
    assert type(trained) is TDMPCPolicy and set(trained.config.input_features) == {OBS_STATE, OBS_ENV_STATE}
    assert trained.config.mlp_dim == 32 and trained.config.n_elites == 4  # the user's flags override the recipe's

    evaluation = out / "eval" / "step_000003"
    info = json.loads((evaluation / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 2 and [e["length"] for e in info["per_episode"]] == [6, 6]
    assert sorted(p.name for p in (evaluation / "videos").glob("*.mp4")) == ["eval_episode_0.mp4"]
    with av.open(str(evaluation / "videos" / "eval_episode_0.mp4")) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 7 and frames[0].shape == (384, 384, 3)  # the first frame and one per step


def test_recipe_choice_and_the_flags_of_each_recipe():
    example = load_example()
    recipe, reason, rest = example.choose_recipe(["--steps=3"])
    assert (recipe, rest) == ("paper" if torch.cuda.is_available() else "cpu", ["--steps=3"])
    assert reason.startswith("auto: ")

    cpu = parse_train_config(example.recipe_flags("cpu", []))
    assert isinstance(cpu.env, XarmEnvConfig) and cpu.env.task == "XarmLift-v0"
    assert cpu.dataset.scripted_episodes == 100 and cpu.dataset.input_features == [OBS_STATE, OBS_ENV_STATE]
    tdmpc = cpu.policy
    assert tdmpc.type == "tdmpc" and (tdmpc.mlp_dim, tdmpc.state_encoder_hidden_dim, tdmpc.latent_dim) == (128, 64, 50)
    planner = (tdmpc.n_gaussian_samples, tdmpc.n_pi_samples, tdmpc.n_elites, tdmpc.cem_iterations)
    assert planner == (64, 8, 8, 3) and (tdmpc.q_ensemble_size, tdmpc.horizon, tdmpc.n_action_repeats) == (5, 5, 2)
    assert not tdmpc.use_mpc  # acts with pi (planning failed offline, docs/results.md)
    assert (cpu.steps, cpu.batch_size, cpu.num_threads) == (10_000, 256, 1)
    assert (cpu.eval.freq, cpu.eval.n_episodes, cpu.eval.final_n_episodes, cpu.eval.n_videos) == (2000, 20, 100, 1)

    paper = parse_train_config(example.recipe_flags("paper", []))
    assert paper.policy.type == "tdmpc" and (paper.policy.mlp_dim, paper.policy.n_gaussian_samples) == (512, 512)
    assert (paper.steps, paper.batch_size, paper.eval.freq, paper.dataset.scripted_episodes) == (50_000, 256, 5000, 800)
    assert paper.num_threads is None

    assert example.recipe_flags("cpu", ["--output_dir=x", "--resume=true"]) == []
    named = example.recipe_flags("cpu", ["--dataset.root=data/xarm_mine"])
    assert not any(flag.startswith("--dataset.scripted_episodes") for flag in named)
    # Diffusion Policy and ACT: the small state presets PushT's cpu recipe trains, at about TD-MPC's minutes.
    for policy_type, steps in [("diffusion", 1600), ("act", 1800)]:
        other = parse_train_config(example.recipe_flags("cpu", [f"--policy.type={policy_type}"]))
        assert (other.policy.type, other.steps, other.env.type) == (policy_type, steps, "xarm")
        assert other.policy == CPU_STATE_POLICIES[policy_type].policy
