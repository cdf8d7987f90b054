"""README's first run, `examples/train_pusht.py --recipe=smoke`: every stage of the main job at a toy scale (record
scripted demos, train, checkpoint, evaluate with a video), ending with the `hfpolicy view` command that shows it. Here
the recipe is shrunk further with flags (3 demos, 30 steps, 2 short evaluation episodes), as a user would."""

import importlib.util
import json
import shlex
from pathlib import Path

from hfpolicy.cli.commands import main as hfpolicy_main
from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE

ROOT = Path(__file__).resolve().parents[1]
SHRUNK = [
    "--dataset.scripted_episodes=3",
    "--steps=30",
    "--log_freq=10",
    "--policy.scheduler_warmup_steps=3",
    "--eval.n_episodes=2",
    "--eval.batch_size=2",
    "--env.episode_length=40",
    "--num_threads=1",
]


def load_example():
    spec = importlib.util.spec_from_file_location("train_pusht", ROOT / "examples" / "train_pusht.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_recipe_runs_every_stage_and_says_how_to_look_at_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))
    example = load_example()
    out = tmp_path / "run"
    assert example.run(["--recipe=smoke", f"--output_dir={out}", "--progress=false", *SHRUNK]) == 0
    lines = capsys.readouterr().out.splitlines()

    assert lines[0].startswith("recipe smoke (--recipe=smoke); data: 3 scripted-expert PushT demonstrations in")
    recording = tmp_path / "cache" / "datasets" / "pusht_scripted_3"
    assert (recording / "meta" / "info.json").is_file()  # recorded, for later runs to reuse
    saved = json.loads((out / TRAIN_CONFIG_FILE).read_text())
    assert saved["recipe"] == "smoke" and saved["dataset"]["root"] == str(recording)
    assert saved["policy"]["down_dims"] == [32, 64] and saved["budget"]["minutes"] is None  # the recipe's U-Net

    assert (out / "checkpoints" / "step_000030" / "pretrained_model" / "model.safetensors").is_file()
    losses = [e["loss"] for e in map(json.loads, (out / METRICS_FILE).open()) if "loss" in e]
    assert len(losses) == 3 and losses[-1] < 0.8 * losses[0], losses  # the loss falls within the run
    evaluation = out / "eval" / "step_000030"
    info = json.loads((evaluation / EVAL_INFO_FILE).read_text())
    assert info["aggregated"]["n_episodes"] == 2 and [e["length"] for e in info["per_episode"]] == [40, 40]
    (video,) = info["video_paths"]  # the recipe films one episode
    assert Path(video).is_file() and Path(video).stat().st_size > 1000 and Path(video).parent.parent == evaluation

    view_line = lines[-1]
    assert view_line == f"look at the run (curves, evaluations, videos): hfpolicy view {out}"
    command = shlex.split(view_line.split(": ", 1)[1])  # the printed command runs, and writes the run's page
    assert command[:2] == ["hfpolicy", "view"] and hfpolicy_main(command[1:]) == 0
    assert (out / "view.html").is_file()


def test_the_smoke_recipe_is_sized_as_readme_says():
    """20 demos, a 0.3 M U-Net, a few hundred steps with a warm-up that ends early (a learning rate still warming
    at the end learns nothing), one evaluation with one video."""
    smoke = load_example().RECIPES["smoke"]
    policy = smoke.policies["diffusion"].policy
    assert smoke.run.dataset.scripted_episodes == 20 and 200 <= smoke.run.steps <= 1000
    assert policy.scheduler_warmup_steps <= smoke.run.steps // 10
    assert smoke.run.eval.freq == smoke.run.steps and smoke.run.eval.n_videos == 1  # the final evaluation only
