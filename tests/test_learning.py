"""The cpu recipe of examples/train_pusht.py learns: a few hundred steps on a handful of scripted demonstrations lift the
policy's overlap with the target clearly above the untrained policy's, on the same seeds. (bench/learning.py measures
the full recipe: 500 seeds, success rate, minutes.)"""

import importlib.util
import json
from pathlib import Path

import torch

from hfpolicy.envs import make_env
from hfpolicy.eval import evaluate
from hfpolicy.policies import Policy, make_policy

ROOT = Path(__file__).resolve().parents[1]
N_DEMOS, SEEDS, EPISODE_STEPS = 4, 6, 80


def load_example():
    spec = importlib.util.spec_from_file_location("train_pusht", ROOT / "examples" / "train_pusht.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def avg_max_reward(policy: Policy) -> float:
    env = make_env("pusht", SEEDS, obs_type="environment_state_agent_pos", episode_length=EPISODE_STEPS)
    try:
        return evaluate(policy, env, SEEDS, start_seed=0, progress=False).aggregated["avg_max_reward"]
    finally:
        env.close()


def test_a_few_hundred_steps_of_the_cpu_recipe_lift_the_overlap(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))
    example = load_example()
    out = tmp_path / "run"
    flags = [
        "--recipe=cpu",
        f"--dataset.scripted_episodes={N_DEMOS}",
        "--policy.down_dims=[32,64,128]",  # the recipe's U-Net at half width: a CI-sized budget
        "--policy.scheduler_warmup_steps=20",
        "--steps=300",
        "--batch_size=64",
        "--eval.freq=0",
        "--compile=false",  # compiling costs a minute up front: worth it for the real run only
        "--tracker=none",
        "--progress=false",
        f"--output_dir={out}",
    ]
    assert example.run(flags) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.startswith("recipe cpu (--recipe=cpu); data: 4 scripted-expert PushT demonstrations in")

    trained = Policy.from_pretrained(out / "checkpoints" / "last" / "pretrained_model")
    torch.manual_seed(0)
    untrained = make_policy(trained.config, dataset_stats=None)
    untrained.normalizer.load_state_dict(trained.normalizer.state_dict())  # same stats, untrained weights
    before, after = avg_max_reward(untrained), avg_max_reward(trained)
    assert after > before + 0.15, f"avg max reward {before:.3f} untrained -> {after:.3f} after 300 steps"

    saved = json.loads((out / "train_config.json").read_text())
    assert saved["recipe"] == "cpu" and saved["dataset"]["scripted_episodes"] == N_DEMOS
    assert saved["dataset"]["root"] == str(tmp_path / "cache" / "datasets" / f"pusht_scripted_{N_DEMOS}")
