"""The cpu recipe of examples/train_pusht.py learns: a few hundred steps on a handful of scripted demonstrations lift the
policy's overlap with the target clearly above the untrained policy's, on the same seeds. (bench/learning.py measures
the full recipe: 500 seeds, success rate, minutes.)"""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from hfpolicy.constants import OBS_ENV_STATE
from hfpolicy.envs import make_env
from hfpolicy.eval import evaluate
from hfpolicy.policies import Policy, make_policy
from hfpolicy.training import TrainingClock, record_scripted_dataset
from hfpolicy.training.config import DatasetConfig, TrainConfigError, describe_dataset

ROOT = Path(__file__).resolve().parents[1]
N_DEMOS, SEEDS, EPISODE_STEPS = 4, 4, 100  # evaluated on the demos' own seeds: the policy must reproduce them


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
        "--steps=500",
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
    # Each episode is a function of its seed (per-episode noise generators), so this margin is no sampling luck:
    # measured 0.124 -> 0.211 here (pilot runs of the full recipe: 0.41 after 1000 steps, 0.99 after 5000).
    assert after > before + 0.07 and after > 1.5 * before, f"avg max reward {before:.3f} -> {after:.3f} after 500 steps"

    saved = json.loads((out / "train_config.json").read_text())
    assert saved["recipe"] == "cpu" and saved["dataset"]["scripted_episodes"] == N_DEMOS
    assert saved["dataset"]["root"] == str(tmp_path / "cache" / "datasets" / f"pusht_scripted_{N_DEMOS}")


def test_recipe_choice_is_said_first_and_recorded(hub_server, tmp_path, capsys):
    example = load_example()
    recipe, reason, rest = example.choose_recipe(["--steps=3"])
    assert (recipe, rest) == ("cpu", ["--steps=3"])  # no CUDA device here
    assert "no CUDA device" in reason
    assert example.choose_recipe(["--recipe=paper"])[:2] == ("paper", "--recipe=paper")
    with pytest.raises(SystemExit):
        example.choose_recipe(["--recipe=gpu"])
    # A recipe is flags put before the user's: none when resuming, no --policy.* ones for another policy type.
    assert "--policy.down_dims=[64,128,256]" in example.recipe_flags("cpu", ["--steps=3"])
    act_flags = example.recipe_flags("cpu", ["--policy.type=act"])
    assert "--policy.chunk_size=16" in act_flags and "--policy.down_dims=[64,128,256]" not in act_flags
    assert example.recipe_flags("cpu", ["--output_dir=x", "--resume=true"]) == []
    assert "--dataset.scripted_episodes=500" not in example.recipe_flags("cpu", ["--dataset.root=data/pusht_human"])
    # The paper recipe without the Hub dataset: the error names the offline recipe.
    out = tmp_path / "run"
    assert example.run(["--recipe=paper", "--dataset.repo_id=user/no-such-pusht", f"--output_dir={out}"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == "recipe paper (--recipe=paper); data: user/no-such-pusht from the Hub"
    assert "--recipe=cpu" in captured.err
    assert not (out / "train_config.json").exists()


def test_the_cpu_recipe_on_image_only_data_names_the_ways_out(tmp_path, capsys):
    """The cpu recipe needs state inputs: an image-only --dataset.root is refused before anything starts, naming the
    recipe's need and the fixes, not --dataset.input_features (a flag the recipe added, not the user)."""
    from hfpolicy.record import RecordConfig, record

    root = record(RecordConfig(n_episodes=1, max_steps=4, output_dir=str(tmp_path / "images"), progress=False))
    example = load_example()
    assert example.run([f"--dataset.root={root}", f"--output_dir={tmp_path / 'run'}"]) == 2  # auto: cpu here
    err = capsys.readouterr().err
    assert f"has no {OBS_ENV_STATE}" in err and "--environment_state=true" in err and "--recipe=paper" in err
    assert "--dataset.input_features" not in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
    # With the keypoints recorded, the same data pass the check.
    with_state = record(
        RecordConfig(n_episodes=1, max_steps=4, environment_state=True, images=False,
                     output_dir=str(tmp_path / "state"), progress=False)
    )  # fmt: skip
    assert example.state_inputs_missing("cpu", [f"--dataset.root={with_state}"]) is None


def test_a_recording_that_does_not_match_is_refused(tmp_path):
    from hfpolicy.record import RecordConfig, record

    root = record(
        RecordConfig(
            n_episodes=1,
            max_steps=5,
            environment_state=True,
            images=False,
            output_dir=str(tmp_path / "rec"),
            progress=False,
        )
    )
    dataset = DatasetConfig(scripted_episodes=3, root=str(root))
    with pytest.raises(TrainConfigError, match="holds 1 episodes, not the 3 scripted demonstrations"):
        record_scripted_dataset(dataset, progress=False)
    assert record_scripted_dataset(dataclasses.replace(dataset, scripted_episodes=1), progress=False) == root
    assert "(reused)" in describe_dataset(dataclasses.replace(dataset, scripted_episodes=1))


def test_training_clock_counts_evaluations_and_leaves_out_the_first_steps():
    clock = TrainingClock(total_steps=110, eval_plan={50: 10, 110: 100})
    assert clock.remaining_s(0) == (None, False)
    for seconds in (60.0, 5.0, 3.0):  # the first steps compile and warm up: not representative
        clock.add_step(seconds)
    for _ in range(7):
        clock.add_step(2.0)
    assert clock.remaining_s(10) == (200.0, False)  # 100 steps x 2 s; evaluations not measured yet
    assert clock.postfix(10) == "~3 min left + evals"
    clock.add_eval(50, 10, 30.0)  # 3 s per episode
    assert clock.remaining_s(50) == (120.0 + 300.0, True)  # 60 steps + the final 100-episode evaluation
    slow = TrainingClock(total_steps=200_000, eval_plan={})
    for _ in range(13):
        slow.add_step(8.0)
    line = slow.announcement(10, torch.device("cpu"))
    assert line.startswith("estimated time left: ~18 d 12 h (") and "days" in line and "--recipe=cpu" in line


def test_the_human_bench_reports_the_papers_statistics_of_the_periodic_evaluations():
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "bench" / "learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    periodic = [{"eval/pc_success": 10.0 * i, "eval/avg_max_reward": 0.5 + 0.03 * i} for i in range(12)]
    final = {"eval/pc_success": 50.0, "eval/avg_max_reward": 0.7}  # the 500-episode evaluation is not one of them
    stats = bench.paper_statistics([*periodic, final])
    assert stats["paper_n_evals"] == 12
    assert stats["paper_best_success"] == 1.1 and stats["paper_best_avg_max_reward"] == 0.83
    assert stats["paper_last10_success"] == 0.65 and stats["paper_last10_avg_max_reward"] == 0.695
    assert bench.paper_statistics([final]) == {}


def test_the_cpu_recipe_picks_the_human_demo_preset_for_data_that_are_not_its_recording():
    example = load_example()
    assert example.choose_data_preset("cpu", ["--dataset.root=data/pusht_human"])[0] == "human"
    assert example.choose_data_preset("cpu", ["--dataset.root=cache/pusht_scripted_500"])[0] == "scripted"
    assert example.choose_data_preset("cpu", [])[0] == "scripted"
    assert example.choose_data_preset("cpu", ["--preset=scripted", "--dataset.root=x"]) == (
        "scripted",
        ["--dataset.root=x"],
    )
    assert example.choose_data_preset("paper", ["--dataset.root=x"])[0] == ""
    human = example.recipe_flags("cpu", ["--dataset.root=data/pusht_human"], "human")
    assert "--steps=7500" in human and "--policy.down_dims=[64,128,256]" in human
    assert not any(flag.startswith("--dataset.scripted_episodes") for flag in human)
    assert "--steps=7500" not in example.recipe_flags("cpu", ["--dataset.root=data/pusht_human"])
