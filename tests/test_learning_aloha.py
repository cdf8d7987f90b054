"""examples/train_aloha.py end to end at a tiny budget (the cpu recipe records the scripted bimanual expert, trains a
state-input ACT, evaluates it in the ALOHA env with a video), its recipe choice and flags, and the scripted recordings
`--dataset.scripted_episodes` makes per task. (bench/learning.py --env aloha measures the full recipe.)"""

import importlib.util
import json
from pathlib import Path

import av
import pytest
import torch

from hfpolicy.constants import EVAL_INFO_FILE, OBS_ENV_STATE, OBS_STATE
from hfpolicy.datasets import DatasetMeta
from hfpolicy.envs import AlohaEnvConfig, PushTEnvConfig
from hfpolicy.policies import Policy
from hfpolicy.record import RecordConfig, record, scripted_dataset_root
from hfpolicy.training import record_scripted_dataset
from hfpolicy.training.config import DatasetConfig, TrainConfigError, parse_train_config

ROOT = Path(__file__).resolve().parents[1]
TINY_ACT = ["--policy.dim_model=32", "--policy.n_heads=2", "--policy.dim_feedforward=64"]
TINY_ACT += ["--policy.n_encoder_layers=1", "--policy.n_vae_encoder_layers=1", "--policy.latent_dim=4"]
TINY_ACT += ["--policy.chunk_size=10", "--policy.n_action_steps=5"]


def load_example():
    spec = importlib.util.spec_from_file_location("train_aloha", ROOT / "examples" / "train_aloha.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_recipe_records_trains_and_evaluates_with_a_video(tmp_path, monkeypatch, capsys):
    """The recipe as a user runs it, shrunk: 2 recorded demos (full 400-step episodes, state-only), a tiny ACT for 3
    steps, then the final evaluation: 2 episodes of 6 steps, the first one filmed at the recipe's 240x320."""
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    flags = ["--recipe=cpu", "--dataset.scripted_episodes=2", *TINY_ACT, "--batch_size=8", "--steps=3"]
    flags += ["--eval.freq=3", "--eval.n_episodes=2", "--eval.final_n_episodes=2", "--eval.batch_size=2"]
    flags += ["--env.episode_length=6", "--tracker=none", "--progress=false", f"--output_dir={out}"]
    assert load_example().run(flags) == 0
    recording = tmp_path / "cache" / "datasets" / "aloha_transfer_cube_scripted_2"
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line == (
        f"recipe cpu (--recipe=cpu); data: 2 scripted-expert AlohaTransferCube-v0 demonstrations in {recording} "
        "(recorded now, reused by later runs)"
    )

    meta = DatasetMeta.load(recording)
    assert meta.total_episodes == 2 and meta.total_frames == 800  # full episodes, whatever the eval's length
    assert tuple(meta.features[OBS_ENV_STATE]["shape"]) == (7,) and not meta.camera_keys  # state-only: not rendered
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["recipe"] == "cpu" and saved["dataset"]["root"] == str(recording)
    env = saved["env"]
    assert (env["type"], env["task"], env["shadows"]) == ("aloha", "AlohaTransferCube-v0", False)
    assert (env["render_height"], env["render_width"]) == (240, 320)
    trained = Policy.from_pretrained(out / "checkpoints" / "last" / "pretrained_model")
    assert trained.config.type == "act" and set(trained.config.input_features) == {OBS_STATE, OBS_ENV_STATE}
    assert trained.config.chunk_size == 10  # the user's flag overrides the recipe's 50

    evaluation = out / "eval" / "step_000003"
    info = json.loads((evaluation / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 2 and [e["length"] for e in info["per_episode"]] == [6, 6]
    assert sorted(p.name for p in (evaluation / "videos").glob("*.mp4")) == ["eval_episode_0.mp4"]
    with av.open(str(evaluation / "videos" / "eval_episode_0.mp4")) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 7 and frames[0].shape == (240, 320, 3)  # the first frame and one per step


def test_recipe_choice_and_the_flags_of_each_recipe_and_task(hub_server, tmp_path, capsys):
    example = load_example()
    recipe, reason, rest = example.choose_recipe(["--steps=3"])
    assert (recipe, rest) == ("paper" if torch.cuda.is_available() else "cpu", ["--steps=3"])
    assert reason.startswith("auto: ")
    assert example.choose_recipe(["--recipe=paper"])[:2] == ("paper", "--recipe=paper")
    with pytest.raises(SystemExit):
        example.choose_recipe(["--recipe=gpu"])

    cpu = example.recipe_flags("cpu", ["--env.task=AlohaInsertion-v0"])
    assert "--env.type=aloha" in cpu and "--env.shadows=false" in cpu  # the task stays the user's flag
    assert not any(flag.startswith("--env.task") for flag in cpu)
    cfg = parse_train_config([*cpu, "--env.task=AlohaInsertion-v0"])
    assert isinstance(cfg.env, AlohaEnvConfig) and cfg.env.task == "AlohaInsertion-v0" and not cfg.env.shadows
    assert cfg.dataset.scripted_episodes == 100 and cfg.dataset.input_features == [OBS_STATE, OBS_ENV_STATE]
    assert cfg.policy.type == "act" and (cfg.policy.chunk_size, cfg.policy.n_action_steps) == (50, 25)
    assert cfg.eval.final_n_episodes == 200 and cfg.eval.freq * 5 == cfg.steps

    paper = parse_train_config(example.recipe_flags("paper", ["--env.task=AlohaInsertion-v0"]))
    assert paper.dataset.repo_id == "lerobot/aloha_sim_insertion_human" and paper.dataset.scripted_episodes == 0
    assert (paper.steps, paper.batch_size, paper.eval.freq, paper.eval.n_episodes) == (100_000, 8, 20_000, 50)
    act = paper.policy  # LeRobot's act_aloha setup: ACT's own defaults, with the ImageNet ResNet18
    assert (act.chunk_size, act.n_action_steps, act.dim_model, act.vision_backbone) == (100, 100, 512, "resnet18")
    assert act.optimizer_lr == 1e-5 and act.kl_weight == 10.0
    assert act.pretrained_backbone_weights == "ResNet18_Weights.IMAGENET1K_V1"
    assert isinstance(paper.env, AlohaEnvConfig) and paper.env.shadows
    default_task = parse_train_config(example.recipe_flags("paper", []))
    assert default_task.dataset.repo_id == "lerobot/aloha_sim_transfer_cube_human"

    assert example.recipe_flags("cpu", ["--output_dir=x", "--resume=true"]) == []
    named = example.recipe_flags("cpu", ["--dataset.root=data/aloha_mine"])
    assert not any(flag.startswith("--dataset.scripted_episodes") for flag in named)
    diffusion = example.recipe_flags("cpu", ["--policy.type=diffusion"])  # no preset: the run's flags only
    assert "--env.type=aloha" in diffusion and not any(flag.startswith("--policy.") for flag in diffusion)

    # The paper recipe without its Hub dataset: the error names the offline recipe, nothing is left behind.
    out = tmp_path / "run"
    assert example.run(["--recipe=paper", "--dataset.repo_id=user/no-such-aloha", f"--output_dir={out}"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == "recipe paper (--recipe=paper); data: user/no-such-aloha from the Hub"
    assert "--recipe=cpu" in captured.err
    assert not (out / "train_config.json").exists()


def test_the_cpu_recipe_on_camera_only_data_names_the_ways_out(tmp_path, capsys):
    """A recording with the camera and no object poses (as the Hub's scripted datasets) is refused by the cpu recipe
    before anything starts, in the script's own name."""
    root = tmp_path / "cube_images"
    flags = ["--env.type=aloha", "--env.shadows=false", "--n_episodes=1", "--max_steps=2", f"--output_dir={root}"]
    from hfpolicy.record import main as record_main

    assert record_main([*flags, "--progress=false"]) == 0
    capsys.readouterr()  # the recording's own lines
    example = load_example()
    assert example.run(["--recipe=cpu", f"--dataset.root={root}", f"--output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("train_aloha.py: error: the cpu recipe trains a state-input policy") and err.count("\n") == 1
    assert f"has no {OBS_ENV_STATE}" in err and "--environment_state=true" in err and "--recipe=paper" in err
    assert not (tmp_path / "run").exists()


def test_scripted_recordings_are_named_and_checked_per_task(tmp_path, monkeypatch):
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))
    datasets = tmp_path / "cache" / "datasets"
    assert scripted_dataset_root(3) == datasets / "pusht_scripted_3"
    assert scripted_dataset_root(3, AlohaEnvConfig()) == datasets / "aloha_transfer_cube_scripted_3"
    assert scripted_dataset_root(3, AlohaEnvConfig(task="AlohaInsertion-v0")) == datasets / "aloha_insertion_scripted_3"
    # A PushT recording named as the recording of an ALOHA task is refused (its poses have another shape).
    pusht = record(
        RecordConfig(n_episodes=1, max_steps=5, environment_state=True, images=False,
                     output_dir=str(tmp_path / "pusht"), progress=False)
    )  # fmt: skip
    dataset = DatasetConfig(scripted_episodes=1, root=str(pusht))
    with pytest.raises(TrainConfigError, match=r"demonstrations of another task .*AlohaTransferCube-v0 has \(7,\)"):
        record_scripted_dataset(dataset, progress=False, env=AlohaEnvConfig())
    assert record_scripted_dataset(dataset, progress=False, env=PushTEnvConfig()) == pusht
