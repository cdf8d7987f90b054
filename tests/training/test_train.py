"""Training: multi-process DDP on CPU, exact resume after a kill, push to the Hub, and errors before training starts.

The runs use the state-only Diffusion Policy (no vision encoder) with tiny U-Net dims on 5 converted PushT episodes.
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from safetensors.torch import load_file

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, OBS_ENV_STATE, OBS_STATE, REPLAY_VIDEO_FILE
from hfpolicy.datasets import PolicyDataset
from hfpolicy.envs import make_env
from hfpolicy.eval import evaluate
from hfpolicy.eval import main as eval_main
from hfpolicy.io.staging import shared_staging_path
from hfpolicy.policies import Policy
from hfpolicy.training import main, parse_train_config, train
from hfpolicy.training.checkpoints import STAGING_TAG, list_checkpoints

ROOT = Path(__file__).resolve().parents[2]
TINY_POLICY = [
    f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]",
    "--policy.type=diffusion",
    "--policy.down_dims=[16,32]",
    "--policy.diffusion_step_embed_dim=16",
    "--policy.noise_scheduler_type=DDIM",
    "--policy.num_inference_steps=2",
    "--policy.scheduler_warmup_steps=2",
    "--batch_size=8",
    "--tracker=none",
    "--progress=false",
    "--num_threads=1",  # as run_env: the same numerics in every run, and two processes fit on two cores
]


def run_env() -> dict[str, str]:
    # One thread per process: the same numerics in every run (and two processes fit on two cores).
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(output_dir: Path) -> list[tuple[int, float]]:
    lines = (output_dir / METRICS_FILE).read_text().splitlines()
    return [(e["step"], e["loss"]) for e in map(json.loads, lines) if "loss" in e]


@pytest.mark.slow
def test_two_process_ddp_run_syncs_weights_saves_once_and_shards_eval(pusht_state_dataset, tmp_path):
    out = tmp_path / "ddp"
    n_episodes = 6
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(ROOT / "tests" / "scripts" / "train_and_dump_params.py"),
        f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY_POLICY,
        "--steps=4", "--save_freq=2", "--log_freq=1",
        "--eval.freq=4", f"--eval.n_episodes={n_episodes}", "--eval.batch_size=2", "--eval.n_videos=2",
        "--env.episode_length=16", "--online.every=1", "--online.n_episodes=3",
    ]  # fmt: skip
    result = subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("2 process(es)") == 1  # one run of two processes, announced once

    rank0, rank1 = load_file(out / "params_rank0.safetensors"), load_file(out / "params_rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), "DDP ranks ended with different parameters"

    checkpoints = list_checkpoints(out)
    assert [c.name for c in checkpoints] == ["step_000002", "step_000004"]  # one set, not one per rank
    state_files = sorted(p.name for p in (checkpoints[-1] / "training_state").iterdir())
    assert "rng_state_0.safetensors" in state_files and "rng_state_1.safetensors" in state_files  # one per rank
    assert not [name for name in state_files if name.endswith((".pkl", ".bin", ".pt"))]  # nothing pickled
    assert not list((out / "checkpoints").glob(".tmp*"))

    info = json.loads((out / "eval" / "step_000004" / EVAL_INFO_FILE).read_text())
    episodes = info["per_episode"]
    assert sorted(e["seed"] for e in episodes) == [100_000 + i for i in range(n_episodes)]  # each seed exactly once
    assert {e["rank"] for e in episodes} == {0, 1}
    seeds_by_rank = [{e["seed"] for e in episodes if e["rank"] == r} for r in (0, 1)]
    assert not seeds_by_rank[0] & seeds_by_rank[1]
    assert info["aggregated"]["n_episodes"] == n_episodes
    assert sorted(p.name for p in (out / "eval" / "step_000004" / "videos").glob("*.mp4")) == [
        "eval_episode_0.mp4",
        "eval_episode_1.mp4",
    ]  # episode 0 ran on rank 0, episode 1 on rank 1: both filmed, in one folder

    # Online rounds after steps 1, 2 and 3 (none after the last): the ranks split each round's 3 seeds, and the
    # dataset holds each episode once.
    online = PolicyDataset("local/online_data", root=out / "online_data")
    rounds = json.loads((out / "online_data" / "meta" / "hfpolicy_online.json").read_text())["rounds"]
    assert [r["step"] for r in rounds] == [1, 2, 3] and online.num_episodes == 9
    assert [seed for r in rounds for seed in r["kept"]] == [1_000_000 + i for i in range(9)]
    assert online.num_frames == 9 * 16  # expert labels keep every episode; each ran the 16 steps of its time limit


# Online rounds (DAgger, 2 short episodes every 4 steps) in the run: a resumed run drops the rounds collected after
# its checkpoint and trains on exactly the online data the uninterrupted run had.
ONLINE_FLAGS = ["--online.every=4", "--online.n_episodes=2", "--env.episode_length=24", "--online.labels=expert"]


@pytest.mark.slow
@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
def test_resume_after_kill_continues_with_identical_losses(pusht_state_dataset, tmp_path, online):
    steps = 30
    flags = [f"--dataset.root={pusht_state_dataset}", *TINY_POLICY, f"--steps={steps}", "--log_freq=1"]
    flags += ["--save_freq=5", "--eval.freq=0", "--keep_last_checkpoints=2", *(ONLINE_FLAGS if online else [])]
    train_cli = [sys.executable, "-m", "hfpolicy.cli", "train"]

    reference = tmp_path / "reference"
    subprocess.run([*train_cli, *flags, f"--output_dir={reference}"], env=run_env(), check=True, timeout=300)

    interrupted = tmp_path / "interrupted"
    process = subprocess.Popen([*train_cli, *flags, f"--output_dir={interrupted}"], env=run_env())
    deadline = time.monotonic() + 240
    while not (interrupted / "checkpoints" / "step_000005").exists():
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = max(int(c.name.split("_")[1]) for c in list_checkpoints(interrupted))
    assert killed_at < steps, "the run finished before it was killed: nothing was resumed"
    if online:  # the killed run's online data is a readable dataset (its last finished round)
        killed_data = PolicyDataset("local/online_data", root=interrupted / "online_data")
        assert killed_data.num_episodes >= 2 and killed_data.num_episodes % 2 == 0

    resumed = subprocess.run(
        [*train_cli, f"--output_dir={interrupted}", "--resume=true"], env=run_env(), timeout=300, text=True
    )
    assert resumed.returncode == 0
    assert losses(interrupted) == losses(reference)  # exact equality, step by step
    assert [s for s, _ in losses(interrupted)] == list(range(1, steps + 1))
    assert [c.name for c in list_checkpoints(interrupted)] == ["step_000025", "step_000030"]  # keep_last=2
    if online:  # the same online data, round by round (7 rounds: steps 4, 8, ..., 28), frame by frame
        runs = [reference, interrupted]
        meta = [json.loads((run / "online_data" / "meta" / "hfpolicy_online.json").read_text()) for run in runs]
        assert meta[0]["rounds"] == meta[1]["rounds"] and len(meta[0]["rounds"]) == 7
        tables = [pq.read_table(sorted((run / "online_data" / "data").rglob("*.parquet"))) for run in runs]
        assert tables[0].num_rows > 0 and tables[0].equals(tables[1])


@pytest.mark.slow
def test_a_finished_online_run_extended_first_collects_the_round_its_end_skipped(pusht_state_dataset, tmp_path):
    # A run's last step collects no round (nothing trains after it); extended with a larger --steps, the resumed run
    # must first collect the round due there, as a run started with those steps did: same rounds, same losses.
    flags = [f"--dataset.root={pusht_state_dataset}", *TINY_POLICY, "--log_freq=1", "--eval.freq=0", *ONLINE_FLAGS]
    flags.append("--policy.scheduler_name=constant")  # the LR of a step does not depend on --steps
    reference, extended = tmp_path / "reference", tmp_path / "extended"
    assert main([*flags, "--steps=6", f"--output_dir={reference}"]) == 0
    assert main([*flags, "--steps=4", f"--output_dir={extended}"]) == 0
    assert not (extended / "online_data").exists()  # step 4 was its last: no round
    assert main([f"--output_dir={extended}", "--resume=true", "--steps=6"]) == 0
    runs = [reference, extended]
    meta = [json.loads((run / "online_data" / "meta" / "hfpolicy_online.json").read_text()) for run in runs]
    assert [r["step"] for r in meta[0]["rounds"]] == [4] and meta[0]["rounds"] == meta[1]["rounds"]
    tables = [pq.read_table(sorted((run / "online_data" / "data").rglob("*.parquet"))) for run in runs]
    assert tables[0].num_rows > 0 and tables[0].equals(tables[1])
    assert losses(extended) == losses(reference) and [s for s, _ in losses(extended)] == list(range(1, 7))


@pytest.mark.slow
def test_push_to_hub_then_load_and_evaluate_by_repo_id(pusht_state_dataset, tmp_path, hub_server, monkeypatch):
    repo_id = "user/train-push-diffusion"
    cfg = parse_train_config(
        [
            f"--dataset.root={pusht_state_dataset}",
            f"--output_dir={tmp_path / 'run'}",
            *TINY_POLICY,
            "--steps=3",
            "--log_freq=1",
            "--eval.freq=3",
            "--eval.n_episodes=3",
            "--eval.batch_size=3",
            "--eval.n_videos=2",
            "--env.episode_length=10",
            f"--hub.repo_id={repo_id}",
        ]
    )
    result = train(cfg)
    assert result.hub_commit is not None

    files = set(HfApi().list_repo_files(repo_id))
    expected = {"README.md", "config.json", "model.safetensors", "train_config.json", EVAL_INFO_FILE}
    expected |= {REPLAY_VIDEO_FILE, "eval/episode_0.mp4", "eval/episode_1.mp4", "training_curve.png"}
    assert expected <= files

    measured = json.loads((result.output_dir / "eval" / "step_000003" / EVAL_INFO_FILE).read_text())["aggregated"]
    card = ModelCard.load(repo_id)
    assert card.data.library_name == "hfpolicy"
    assert {"robotics", "diffusion-policy", "pusht"} <= set(card.data.tags)
    # Trained on a local folder: the card names that folder, not the default Hub repo id (lerobot/pusht).
    assert card.data.datasets is None
    assert f"on a local dataset: `{pusht_state_dataset}`" in card.text
    assert json.loads((result.output_dir / "train_config.json").read_text())["dataset"]["root"] == str(
        pusht_state_dataset
    )
    metrics = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert metrics["pc_success"] == pytest.approx(measured["pc_success"])
    assert metrics["avg_max_reward"] == pytest.approx(measured["avg_max_reward"])
    assert metrics["n_episodes"] == 3
    assert REPLAY_VIDEO_FILE in card.text and "## Training" in card.text and "| Success rate |" in card.text
    # The evaluation's page goes with the model, its videos inside, and the card links it.
    assert "eval.html" in files and "[eval.html](eval.html)" in card.text
    page = Path(HfApi().hf_hub_download(repo_id, "eval.html")).read_text()
    page_data = json.loads(page.split('<script id="page-data" type="application/json">')[1].split("</script>")[0])
    assert page_data["kind"] == "eval" and page_data["aggregated"]["n_episodes"] == 3
    assert (
        sum(e["video"] is not None and e["video"].startswith("data:video/mp4;base64,") for e in page_data["episodes"])
        == 2
    )

    policy = Policy.from_pretrained(repo_id)
    env = make_env("pusht", 2, obs_type="environment_state_agent_pos", episode_length=10)
    try:
        evaluated = evaluate(policy, env, n_episodes=2, progress=False)
    finally:
        env.close()
    assert len(evaluated.episodes) == 2 and all(e.length >= 1 for e in evaluated.episodes)

    # ... and the command line runs it by repo id too
    eval_out = tmp_path / "eval"
    flags = ["--eval.n_episodes=2", "--eval.batch_size=2", "--eval.n_videos=0", "--env.episode_length=10"]
    assert (
        eval_main(
            [f"--policy.path={repo_id}", "--env.type=pusht", *flags, f"--output_dir={eval_out}", "--progress=false"]
        )
        == 0
    )
    assert json.loads((eval_out / EVAL_INFO_FILE).read_text())["aggregated"]["n_episodes"] == 2

    # The card's "reproduce" commands work from the Hub repo alone, in another folder: no path of this run's disk.
    block = re.search(r"```bash\n(hf download .*?)\n```", card.text, flags=re.S).group(1)
    download, reproduce = (shlex.split(line) for line in block.splitlines())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hf_cli = str(Path(sys.executable).parent / "hf")
    subprocess.run([hf_cli, *download[1:]], cwd=elsewhere, check=True, capture_output=True, env=os.environ.copy())
    portable = json.loads((elsewhere / download[-1].split("=", 1)[1] / "train_config.json").read_text())
    assert portable["output_dir"] is None and portable["hub"]["repo_id"] is None and not portable["resume"]
    monkeypatch.chdir(elsewhere)
    assert reproduce[:2] == ["hfpolicy", "train"] and main(reproduce[2:]) == 0
    reproduced = next((elsewhere / "outputs" / "train").iterdir())
    assert losses(reproduced) == losses(result.output_dir)  # the same run, step for step


def test_unknown_policy_type_fails_before_training(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", "--policy.type=difusion"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hfpolicy train: error: --policy.type: invalid choice: 'difusion'") and err.count("\n") == 1
    assert not out.exists()


def test_dataset_without_a_needed_feature_fails_before_training(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            f"--dataset.root={pusht_state_dataset}",
            f"--output_dir={out}",
            "--dataset.input_features=[observation.velocity]",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "observation.velocity" in err and OBS_ENV_STATE in err  # names what is missing and what there is
    assert not (out / "train_config.json").exists()


def test_image_policy_on_a_dataset_without_images_fails_before_training(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", f"--dataset.input_features=[{OBS_STATE}]"]
    )
    assert code == 2
    assert "image" in capsys.readouterr().err
    assert not (out / "train_config.json").exists()


def test_missing_hub_dataset_fails_before_training_and_names_the_local_alternative(hub_server, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--dataset.repo_id=user/no-such-dataset", f"--output_dir={out}", *TINY_POLICY]) == 2
    err = capsys.readouterr().err
    assert "user/no-such-dataset" in err and "--dataset.root" in err
    assert not (out / "train_config.json").exists()


def test_unknown_episodes_and_oversized_batches_fail_before_training(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", "--dataset.episodes=[1,999]", *TINY_POLICY]
        )
        == 2
    )
    assert "999" in capsys.readouterr().err
    assert (
        main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY_POLICY, "--batch_size=100000"]) == 2
    )
    assert "batch_size=100000" in capsys.readouterr().err
    assert not (out / "train_config.json").exists()


def test_output_dir_of_another_run_needs_resume(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints" / "step_000005").mkdir(parents=True)
    (out / "train_config.json").write_text("{}")
    assert main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY_POLICY]) == 2
    err = capsys.readouterr().err
    assert "--resume=true" in err and "step_000005" in err

    empty = tmp_path / "empty"
    assert main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={empty}", "--resume=true", *TINY_POLICY]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_policy_device_cuda_without_a_gpu_is_one_line_before_anything_is_created(pusht_state_dataset, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "run"
    assert (
        main([f"--dataset.root={pusht_state_dataset}", f"--output_dir={out}", *TINY_POLICY, "--policy.device=cuda"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--policy.device=cuda, but torch finds no cuda device" in err
    assert "--policy.device=cpu" in err and not out.exists()


def test_fine_tuning_starts_from_the_saved_weights_and_resumes_exactly(pusht_state_dataset, tmp_path, capsys):
    from hfpolicy.runs.run_folder import RunFolder
    from hfpolicy.training.setup import build_training

    data = [f"--dataset.root={pusht_state_dataset}", "--log_freq=1", "--eval.freq=0", "--save_freq=2"]
    assert main([*data, *TINY_POLICY, f"--output_dir={tmp_path / 'base'}", "--steps=2"]) == 0
    source = str(tmp_path / "base" / "checkpoints" / "last" / "pretrained_model")
    pretrained = Policy.from_pretrained(source)
    # --policy.path: the saved config is the base (its tiny U-Net dims without repeating them), flags override it.
    tune = [*data, f"--policy.path={source}", "--policy.optimizer_lr=3e-4", "--tracker=none", "--progress=false"]
    tune += ["--num_threads=1", "--batch_size=8"]
    cfg = parse_train_config([*tune, f"--output_dir={tmp_path / 'probe'}", "--steps=4"])
    fixed = str(Path(source).resolve())  # the `last` link fixed to the checkpoint it names now: step 2
    assert cfg.policy.pretrained_path == fixed and list(cfg.policy.down_dims) == [16, 32]
    assert cfg.policy.optimizer_lr == 3e-4
    run = RunFolder(tmp_path / "probe")
    run.check_for(resume=False)
    training = build_training(cfg, run)  # step 0 of the fine-tuning run
    started = training.accelerator.unwrap_model(training.policy).state_dict()
    for name, tensor in pretrained.state_dict().items():  # the weights and the normalization stats
        assert torch.equal(started[name], tensor), name

    assert main([*tune, f"--output_dir={tmp_path / 'straight'}", "--steps=4"]) == 0
    assert main([*tune, f"--output_dir={tmp_path / 'resumed'}", "--steps=2"]) == 0
    assert main([f"--output_dir={tmp_path / 'resumed'}", "--resume=true", "--steps=4"]) == 0
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
    final = "checkpoints/step_000004/pretrained_model/model.safetensors"
    straight, resumed = load_file(tmp_path / "straight" / final), load_file(tmp_path / "resumed" / final)
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)
    saved = json.loads((tmp_path / "resumed" / "train_config.json").read_text())
    assert saved["policy"]["pretrained_path"] == fixed  # where the fine-tuning started, kept
    checkpoint = tmp_path / "straight" / "checkpoints" / "step_000004" / "pretrained_model"
    card = (checkpoint / "README.md").read_text()
    assert f"Fine-tuned from `{fixed}`" in card
    # The card names the checkpoint where it is, not the staging folder it was written in, and its lines load it.
    staged = shared_staging_path(checkpoint.parent, STAGING_TAG).name  # .step_000004.saving
    assert staged not in card and f"# {checkpoint}\n" in card and f"--policy.path={checkpoint} " in card
    loaded = Policy.from_pretrained(re.search(r'Policy.from_pretrained\("([^"]+)"\)', card).group(1))
    assert loaded.config.pretrained_path == fixed
