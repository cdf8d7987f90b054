"""Training on a streamed Hub dataset (`--dataset.streaming=true`, the 127.0.0.1 test server), and its bad flags."""

import dataclasses
import json

from training.test_train_mixture import TINY  # the same tiny state Diffusion Policy run

from hfpolicy.constants import METRICS_FILE
from hfpolicy.datasets import push_dataset_to_hub
from hfpolicy.training import main


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
    from hfpolicy.training.run_folder import RunFolder

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
    assert main([*hub, "--num_workers=2", "--dataset.stream_read_ahead=-1", f"--output_dir={out}", *TINY]) == 2
    err = capsys.readouterr().err
    assert "set --dataset.shuffle_buffer_shards to a multiple of 2" in err
    assert "--dataset.stream_read_ahead must be >= 0 (0: no read-ahead), got -1" in err


def test_a_run_saved_before_the_streaming_flags_existed_resumes_without_changes(tmp_path):
    from hfpolicy.training.config import TrainConfig, train_config_to_dict
    from hfpolicy.training.resume_flags import changed_fields

    cfg = TrainConfig()
    older = train_config_to_dict(cfg)
    new_fields = ("streaming", "shuffle_buffer_episodes", "shuffle_buffer_shards", "stream_ram_gb", "stream_disk_gb")
    for name in (*new_fields, "stream_retries", "stream_video", "stream_read_ahead"):
        del older["dataset"][name]
    saved = tmp_path / "train_config.json"
    saved.write_text(json.dumps(older))
    assert changed_fields(cfg, saved) == {}
    streamed = dataclasses.replace(cfg, dataset=dataclasses.replace(cfg.dataset, streaming=True))
    assert changed_fields(streamed, saved) == {"dataset.streaming": (None, True)}
