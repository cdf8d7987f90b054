"""Training on a streamed Hub dataset (`--dataset.streaming=true`, the 127.0.0.1 test server), and its bad flags."""

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from training.test_train import run_env
from training.test_train_mixture import TINY  # the same tiny state Diffusion Policy run

from hfpolicy.constants import METRICS_FILE
from hfpolicy.datasets import PolicyDataset, push_dataset_to_hub
from hfpolicy.eval.episode_data import ONLINE_META_PATH
from hfpolicy.training import main
from hfpolicy.training.checkpoints import list_checkpoints
from hfpolicy.training.online import ONLINE_DATA_DIR


def test_a_streamed_hub_dataset_trains(pusht_state_dataset, hub_server, tmp_path):
    push_dataset_to_hub(pusht_state_dataset, "user/pusht5-streamed")
    out = tmp_path / "run"
    flags = [
        "--dataset.repo_id=user/pusht5-streamed",
        "--dataset.streaming=true",
        "--dataset.shuffle_buffer_episodes=2",
    ]
    assert main([*flags, f"--output_dir={out}", *TINY, "--steps=2"]) == 0
    assert [json.loads(line)["step"] for line in (out / METRICS_FILE).read_text().splitlines() if "loss" in line]
    config = json.loads((out / "train_config.json").read_text())["dataset"]
    assert config["streaming"] is True and config["shuffle_buffer_episodes"] == 2
    data_gets = [url for method, url in hub_server.requests if method == "GET" and "pusht5-streamed/resolve" in url]
    assert data_gets and not any("/videos/" in url for url in data_gets)  # a state-only policy fetches no video


def test_a_streamed_mixture_trains_and_its_card_names_every_dataset(pusht_state_dataset, hub_server, tmp_path):
    from hfpolicy.hub import PolicyArtifacts, make_model_card
    from hfpolicy.hub.push import run_artifacts
    from hfpolicy.policies import Policy
    from hfpolicy.runs.run_folder import RunFolder

    for name in ("a", "b"):
        push_dataset_to_hub(pusht_state_dataset, f"user/pusht5-mix-{name}")
    out = tmp_path / "run"
    flags = [
        "--dataset.repo_id=[user/pusht5-mix-a,user/pusht5-mix-b]",
        "--dataset.weights=[0.7,0.3]",
        "--dataset.streaming=true",
        "--dataset.shuffle_buffer_episodes=2",
        "--dataset.stream_ram_gb=0.01",
    ]
    assert main([*flags, f"--output_dir={out}", *TINY, "--steps=2"]) == 0
    assert [json.loads(line)["step"] for line in (out / METRICS_FILE).read_text().splitlines() if "loss" in line]
    config = json.loads((out / "train_config.json").read_text())
    assert config["dataset"]["streaming"] is True and config["dataset"]["weights"] == [0.7, 0.3]
    for name in ("a", "b"):  # both were streamed: their data files fetched, no video (a state-only policy)
        gets = [url for method, url in hub_server.requests if method == "GET" and f"pusht5-mix-{name}/resolve" in url]
        assert any("/data/" in url for url in gets) and not any("/videos/" in url for url in gets), name
    policy = Policy.from_pretrained(str(out / "checkpoints" / "last" / "pretrained_model"))
    artifacts = run_artifacts(RunFolder(out), config, None, "hfpolicy train ...")
    card = make_model_card("user/mix-policy", policy, PolicyArtifacts(dataset_repo_id=artifacts.dataset_repo_id))
    assert card.data.datasets == ["user/pusht5-mix-a", "user/pusht5-mix-b"]


def test_streaming_flags_are_checked_before_training(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "bad"
    local = [f"--dataset.root={pusht_state_dataset}", "--dataset.streaming=true"]
    assert main([*local, f"--output_dir={out}", *TINY]) == 2
    assert "--dataset.streaming=true reads a Hub dataset (--dataset.repo_id)" in capsys.readouterr().err
    hub = ["--dataset.repo_id=user/anything", "--dataset.streaming=true"]
    assert (
        main([*hub, "--dataset.stream_ram_gb=0", "--dataset.shuffle_buffer_episodes=0", f"--output_dir={out}", *TINY])
        == 2
    )
    err = capsys.readouterr().err
    assert "--dataset.stream_ram_gb must be > 0" in err and "--dataset.shuffle_buffer_episodes must be >= 1" in err
    shards = ["--dataset.shuffle_buffer_episodes=2", "--dataset.shuffle_buffer_shards=3", "--dataset.stream_video=all"]
    assert main([*hub, *shards, f"--output_dir={out}", *TINY]) == 2
    err = capsys.readouterr().err
    assert "--dataset.shuffle_buffer_shards=3 is more than --dataset.shuffle_buffer_episodes=2" in err
    assert "--dataset.stream_video must be one of auto, range, download, got 'all'" in err
    assert main([*hub, "--num_workers=2", f"--output_dir={out}", *TINY]) == 2
    assert "set --dataset.shuffle_buffer_shards to a multiple of 2" in capsys.readouterr().err


def test_a_run_saved_before_the_streaming_flags_existed_resumes_without_changes(tmp_path):
    from hfpolicy.training.config import TrainConfig, train_config_to_dict
    from hfpolicy.training.resume_flags import changed_fields

    cfg = TrainConfig()
    older = train_config_to_dict(cfg)
    new_fields = ("streaming", "shuffle_buffer_episodes", "shuffle_buffer_shards", "stream_ram_gb", "stream_disk_gb")
    for name in (*new_fields, "stream_retries", "stream_video"):
        del older["dataset"][name]
    saved = tmp_path / "train_config.json"
    saved.write_text(json.dumps(older))
    assert changed_fields(cfg, saved) == {}
    streamed = dataclasses.replace(cfg, dataset=dataclasses.replace(cfg.dataset, streaming=True))
    assert changed_fields(streamed, saved) == {"dataset.streaming": (None, True)}


# --- online training while streaming --------------------------------------------------------------------------------
# DAgger rounds of 1 short episode after steps 4 and 6 of 8 (~1.5 s each), a checkpoint every 3 steps: the offline
# batches come from the Hub server in the shuffle buffer's order, the online data from the run folder.
STREAMED_ONLINE = [
    "--dataset.streaming=true", "--dataset.shuffle_buffer_episodes=2", "--log_freq=1", "--save_freq=3",
    "--online.start_step=4", "--online.every=2", "--online.n_episodes=1", "--env.episode_length=16",
    "--online.labels=expert", "--policy.scheduler_name=constant",  # the LR of a step does not depend on --steps
]  # fmt: skip


def logged(run: Path, key: str) -> list[tuple[int, float]]:
    return [(e["step"], e[key]) for e in map(json.loads, (run / METRICS_FILE).read_text().splitlines()) if key in e]


def online_rounds(run: Path) -> list[dict]:
    return json.loads((run / ONLINE_DATA_DIR / ONLINE_META_PATH).read_text())["rounds"]


def assert_trained_alike(reference: Path, run: Path) -> None:
    """The same losses, step by step, and the same online data, round by round and frame by frame."""
    losses = [logged(r, "loss") for r in (reference, run)]
    assert [step for step, _ in losses[1]] == list(range(1, 9)) and losses[0] == losses[1]
    assert online_rounds(run) == online_rounds(reference)
    tables = [pq.read_table(sorted((r / ONLINE_DATA_DIR / "data").rglob("*.parquet"))) for r in (reference, run)]
    assert tables[0].num_rows == 2 * 16 and tables[0].equals(tables[1])


def kill_after_a_round_past_its_checkpoint(command: list[str], out: Path) -> list[dict]:
    """Runs `command`, SIGKILLs it once its online data holds a round (step 4's), after its checkpoint of step 3 and
    before the next (step 6's, after two steps and another round); returns the rounds the killed run had written."""
    log = out.with_name("killed.log")
    with log.open("w") as output:
        process = subprocess.Popen(command, env=run_env(), stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not (out / ONLINE_DATA_DIR / ONLINE_META_PATH).is_file():  # the dataset appears whole (a rename)
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return online_rounds(out)


@pytest.mark.slow
def test_online_rounds_join_a_streamed_run_and_resume_exactly(pusht_state_dataset, hub_server, tmp_path, capsys):
    push_dataset_to_hub(pusht_state_dataset, "user/pusht5-streamed-online")
    flags = ["--dataset.repo_id=user/pusht5-streamed-online", *STREAMED_ONLINE, *TINY]
    reference, stopped, killed = tmp_path / "reference", tmp_path / "stopped", tmp_path / "killed"
    assert main([*flags, f"--output_dir={reference}", "--steps=8"]) == 0
    out = capsys.readouterr().out
    assert "step 4: online round 0" in out and "step 6: online round 1" in out

    # The rollouts joined the data: a round after steps 4 and 6 (none after the last), logged, in the online dataset.
    assert [r["step"] for r in online_rounds(reference)] == [4, 6]
    assert [seed for r in online_rounds(reference) for seed in r["kept"]] == [1_000_000, 1_000_001]
    assert logged(reference, "online/episodes") == [(4, 1.0), (6, 2.0)]
    online = PolicyDataset("local/online_data", root=reference / ONLINE_DATA_DIR)
    assert online.num_episodes == 2 and online.num_frames == logged(reference, "online/frames")[-1][1] == 2 * 16
    gets = [url for method, url in hub_server.requests if method == "GET" and "pusht5-streamed-online/resolve" in url]
    assert any("/data/" in url for url in gets)  # the offline data was streamed from the server

    # Stopped at step 5 (its checkpoint holds the round of step 4) and resumed to step 8: trained alike.
    assert main([*flags, f"--output_dir={stopped}", "--steps=5"]) == 0
    assert [r["step"] for r in online_rounds(stopped)] == [4]
    assert main([f"--output_dir={stopped}", "--resume=true", "--steps=8"]) == 0
    assert "resuming at step 5" in capsys.readouterr().out
    assert_trained_alike(reference, stopped)

    # Killed after a round that came after its last checkpoint: the resume drops that round and collects it again.
    command = [sys.executable, "-m", "hfpolicy.cli", "train", *flags, f"--output_dir={killed}", "--steps=8"]
    written = kill_after_a_round_past_its_checkpoint(command, killed)
    assert [r["step"] for r in written] == [4]
    assert [c.name for c in list_checkpoints(killed)] == ["step_000003"], "killed too late: after step 6's checkpoint"
    assert main([f"--output_dir={killed}", "--resume=true"]) == 0
    assert "resuming at step 3" in capsys.readouterr().out
    assert_trained_alike(reference, killed)


@pytest.mark.slow
def test_online_rounds_join_a_streamed_mixture_and_resume_exactly(pusht_state_dataset, hub_server, tmp_path, capsys):
    for name in ("a", "b"):
        push_dataset_to_hub(pusht_state_dataset, f"user/pusht5-online-mix-{name}")
    repos = "--dataset.repo_id=[user/pusht5-online-mix-a,user/pusht5-online-mix-b]"
    flags = [repos, "--dataset.weights=[0.7,0.3]", *STREAMED_ONLINE, *TINY]
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    assert main([*flags, f"--output_dir={reference}", "--steps=8"]) == 0
    assert "step 4: online round 0" in capsys.readouterr().out
    assert [r["step"] for r in online_rounds(reference)] == [4, 6]
    for name in ("a", "b"):  # both members were streamed from the server
        gets = [url for method, url in hub_server.requests if method == "GET" and f"online-mix-{name}/resolve" in url]
        assert any("/data/" in url for url in gets)
    assert main([*flags, f"--output_dir={stopped}", "--steps=5"]) == 0
    assert main([f"--output_dir={stopped}", "--resume=true", "--steps=8"]) == 0
    assert "resuming at step 5" in capsys.readouterr().out
    assert_trained_alike(reference, stopped)


def test_a_run_saved_with_the_retired_read_ahead_flag_resumes(tmp_path):
    """`--dataset.stream_read_ahead` (read-ahead, retired) in a run's train_config.json does not stop its resume."""
    from hfpolicy.training.config import TrainConfig, parse_train_config, train_config_to_dict

    saved = train_config_to_dict(TrainConfig(output_dir=str(tmp_path)))
    saved["dataset"]["stream_read_ahead"] = 16
    (tmp_path / "train_config.json").write_text(json.dumps(saved))
    cfg = parse_train_config(["--resume=true", f"--output_dir={tmp_path}"])
    assert cfg.resume and cfg.output_dir == str(tmp_path) and not hasattr(cfg.dataset, "stream_read_ahead")
    assert json.loads((tmp_path / "train_config.json").read_text())["dataset"]["stream_read_ahead"] == 16  # untouched
