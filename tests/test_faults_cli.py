"""Fault cases that used to end in a traceback or the wrong cause: each now ends in one line naming the problem and
the fix (export, eval, push, the Hub, metrics.jsonl, the action shape, the cache folder)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import huggingface_hub.constants as hub_constants
import pytest
import torch
from hub.test_export import saved_policy
from huggingface_hub import HfApi
from training.test_train_faults import closed_port, flags

from hfpolicy.constants import ACTION, EVAL_INFO_FILE, METRICS_FILE, OBS_ENV_STATE, OBS_STATE, TRAIN_CONFIG_FILE
from hfpolicy.eval import main as eval_main
from hfpolicy.hub.export import export_policy
from hfpolicy.hub.export import main as export_main
from hfpolicy.hub.push import main as push_main
from hfpolicy.io.run_lock import RunLock
from hfpolicy.policies import FeatureType, Policy, PolicyFeature, PolicyLoadError, PolicyPushError
from hfpolicy.training import main as train_main

ROOT = Path(__file__).resolve().parents[1]
EVAL = ["--env.episode_length=3", "--progress=false", "--num_threads=1", "--eval.n_episodes=1", "--env.render_size=96"]


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_export_to_an_unwritable_path_and_over_a_concurrent_export(tmp_path, capsys, monkeypatch):
    saved_policy(tmp_path / "policy")
    shadow = tmp_path / "a_file"
    shadow.write_text("a file where a folder should be")
    assert export_main([f"--policy.path={tmp_path / 'policy'}", f"--output_dir={shadow / 'export'}"]) == 2
    assert f"--output_dir={shadow / 'export'} cannot be made ({shadow} is a file, not a folder)" in one_line(capsys)

    out = tmp_path / "exports" / "lerobot"
    dead = out.parent / ".lerobot.partial-1-deadbeef"  # a killed export's staging (47 MB once)
    dead.mkdir(parents=True)
    (dead / "model.safetensors").write_bytes(b"x" * 1000)
    from hfpolicy.hub import export

    real_write = export.write_lerobot_checkpoint

    def and_another_export_finishes_first(policy, folder):
        real_write(policy, folder)
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(export, "write_lerobot_checkpoint", and_another_export_finishes_first)
    with pytest.raises(FileExistsError, match="was created while this export ran"):
        export_policy(Policy.from_pretrained(tmp_path / "policy"), out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["lerobot"]  # no staging: neither ours nor the dead one
    assert (out / "config.json").read_text() == "{}"  # the other export's files are untouched


def test_eval_refuses_bad_seeds_devices_and_an_unwritable_videos_folder_before_running(tmp_path, capsys):
    saved_policy(tmp_path / "policy")
    base = [f"--policy.path={tmp_path / 'policy'}", *EVAL]
    assert eval_main([*base, "--eval.start_seed=-1", f"--output_dir={tmp_path / 'a'}"]) == 2
    assert "--eval.start_seed=-1: seeds are >= 0" in one_line(capsys)
    if not torch.cuda.is_available():
        assert eval_main([*base, "--policy.device=cuda", f"--output_dir={tmp_path / 'b'}"]) == 2
        assert "--policy.device=cuda, but torch finds no cuda device" in one_line(capsys)
    out = tmp_path / "c"
    out.mkdir()
    (out / "videos").write_text("a file where the videos folder should be")
    assert eval_main([*base, f"--output_dir={out}", "--eval.n_videos=1"]) == 2
    assert f"the videos folder {out / 'videos'} cannot be written" in one_line(capsys)
    assert not (out / "episodes.jsonl").exists()  # before any episode ran


def test_a_policy_whose_actions_do_not_fit_the_env_is_refused_before_the_first_step(tmp_path, capsys):
    from hfpolicy.envs import PushTEnvConfig
    from hfpolicy.policies.diffusion import DiffusionConfig
    from hfpolicy.policies.diffusion.modeling import DiffusionPolicy

    inputs = {OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)), OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,))}
    config = DiffusionConfig(
        input_features=inputs,
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (3,))},  # e.g. trained on another robot's data
        down_dims=(16, 32),
        diffusion_step_embed_dim=16,
        num_inference_steps=2,
        noise_scheduler_type="DDIM",
    )
    span = {"min": torch.zeros(3), "max": torch.ones(3)}
    stats = {OBS_STATE: {"min": torch.zeros(2), "max": torch.ones(2)}, ACTION: span}
    stats[OBS_ENV_STATE] = {"min": torch.zeros(16), "max": torch.ones(16)}
    DiffusionPolicy(config, dataset_stats=stats).save_pretrained(tmp_path / "policy")
    assert eval_main([f"--policy.path={tmp_path / 'policy'}", *EVAL, f"--output_dir={tmp_path / 'e'}"]) == 2
    assert "the policy gives actions of shape (3,), env 'pusht' takes actions of shape (2,)" in one_line(capsys)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):  # the check training runs at set-up, before step 1
        PushTEnvConfig().for_policy(config.input_features, config.output_features)


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or no privileges)")
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=True)  # lazy: PyAV keeps a failed mp4's file open


def test_an_eval_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, small_tmpfs, capsys):
    saved_policy(tmp_path / "policy")
    stats = os.statvfs(small_tmpfs)
    (small_tmpfs / "filler").write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - 4096))
    out = small_tmpfs / "eval"
    assert eval_main([f"--policy.path={tmp_path / 'policy'}", *EVAL, "--eval.n_videos=1", f"--output_dir={out}"]) == 1
    err = one_line(capsys)
    assert "No space left on device" in err or "cannot write the video" in err
    assert not (out / EVAL_INFO_FILE).exists() and not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_push_of_a_run_still_training_is_refused(pusht_state_dataset, tmp_path, hub_server, capsys):
    out = tmp_path / "run"
    assert train_main(flags(pusht_state_dataset, out, "--steps=2")) == 0
    with RunLock(out):  # the training still holds its folder
        assert push_main([f"--run={out}", "--repo_id=user/still-training-16"]) == 2
        err = one_line(capsys)
    assert f"--run={out} is still training (pid {os.getpid()}" in err and "push it once it has stopped" in err
    assert not HfApi().repo_exists("user/still-training-16")  # nothing pushed
    assert push_main([f"--run={out}", "--repo_id=user/still-training-16"]) == 0  # stopped: pushed


def test_a_damaged_metrics_file_mid_file_is_one_line_on_resume_and_push(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(flags(pusht_state_dataset, out, "--steps=2")) == 0
    lines = (out / METRICS_FILE).read_text().splitlines()
    (out / METRICS_FILE).write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    assert train_main([f"--output_dir={out}", "--resume=true", "--steps=3"]) == 2
    assert f"{out / METRICS_FILE} line 2 is not a metrics entry" in one_line(capsys)
    assert push_main([f"--run={out}", "--repo_id=user/damaged-metrics-16"]) == 2
    assert "line 2 is not a metrics entry" in one_line(capsys)


def test_bad_dataset_repo_ids_and_repos_without_lerobot_files(tmp_path, hub_server, capsys):
    base = ["--policy.type=diffusion", f"--output_dir={tmp_path / 'run'}", "--steps=1", "--eval.freq=0"]
    assert train_main(["--dataset.repo_id=not a repo!", *base]) == 2
    assert "'not a repo!' is not a valid Hub dataset repo id (user/name)" in one_line(capsys)
    api = HfApi()
    api.create_repo("user/not-lerobot-16", repo_type="dataset", exist_ok=True)
    api.upload_file(
        path_or_fileobj=b"# hi", path_in_repo="README.md", repo_id="user/not-lerobot-16", repo_type="dataset"
    )
    assert train_main(["--dataset.repo_id=user/not-lerobot-16", *base]) == 2
    err = one_line(capsys)
    assert "has no meta/info.json: it is not a LeRobot v3.0 dataset" in err and "does not exist" not in err


def test_an_invalid_policy_repo_id_offline_is_called_invalid(tmp_path, monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PolicyLoadError, match="nor a valid Hub repo id") as e:
        Policy.from_pretrained("user/bad name")
    assert "local Hub cache" not in str(e.value)
    with pytest.raises(PolicyLoadError, match=r"there is no directory '\./nope' \(a path, not a Hub repo id"):
        Policy.from_pretrained("./nope")  # one slash: a valid-looking id, but written as a path


def test_push_to_hub_with_the_hub_down_names_the_endpoint(tmp_path, monkeypatch):
    policy = saved_policy(tmp_path / "policy")
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(hub_constants, "ENDPOINT", endpoint)
    with pytest.raises(PolicyPushError, match=rf"cannot reach the Hub at {endpoint} \(ConnectError"):
        policy.push_to_hub("user/hub-down-16")


def test_a_cache_folder_that_is_a_file_is_named(pusht_state_dataset, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "datasets").write_text("a file")
    monkeypatch.setenv("HFPOLICY_CACHE", str(cache))
    argv = ["--policy.type=diffusion", "--dataset.scripted_episodes=1", f"--output_dir={tmp_path / 'run'}"]
    assert train_main([*argv, "--steps=1", "--eval.freq=0"]) == 2
    assert f"{cache / 'datasets'} (under $HFPOLICY_CACHE" in one_line(capsys)


def test_episodes_shorter_than_the_training_window_name_the_policy_flags(tmp_path, capsys):
    import numpy as np

    from hfpolicy.datasets import DatasetWriter
    from hfpolicy.datasets.pusht_zarr import pusht_features

    root = tmp_path / "short"
    with DatasetWriter.create(root, "user/short", 10, pusht_features(96, True, images=False)) as writer:
        for i in range(5):
            frame = {OBS_STATE: np.zeros(2, np.float32), OBS_ENV_STATE: np.zeros(16, np.float32)}
            frame.update({ACTION: np.zeros(2, np.float32), "next.reward": 0.0, "next.success": False})
            writer.add_frame({**frame, "next.done": i == 4}, task="t")
        writer.save_episode()
    base = [f"--dataset.root={root}", "--steps=1", "--eval.freq=0", "--tracker=none", "--recipe=paper"]
    for policy, flag in (("diffusion", "--policy.horizon=16"), ("act", "--policy.chunk_size=100")):
        assert train_main([*base, f"--policy.type={policy}", f"--output_dir={tmp_path / policy}"]) == 2
        err = one_line(capsys)
        assert flag in err and "the longest episode has 5 frames" in err and "delta_timestamps" not in err


def test_a_local_looking_convert_source_that_is_not_there_is_no_such_folder(tmp_path, capsys, monkeypatch):
    from hfpolicy.datasets.convert import main as convert_main

    monkeypatch.chdir(tmp_path)
    for source in ("./no_such_dir", str(tmp_path / "no" / "such"), "../x"):
        assert convert_main(["lerobot-v2.1", source, f"--output_dir={tmp_path / 'out'}"]) == 2
        err = one_line(capsys)
        assert f"no such folder: {source}" in err and "Hub" not in err.split("(")[0]
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # a repo id that cannot be fetched: one line too
    assert convert_main(["lerobot-v2.1", "user/not-here", f"--output_dir={tmp_path / 'out'}"]) == 2
    err = one_line(capsys)
    assert "could not download the dataset 'user/not-here' from the Hub" in err and "no folder user/not-here" in err
    (tmp_path / "data.zip").write_bytes(b"PK")
    assert convert_main(["lerobot-v2.1", "data.zip", f"--output_dir={tmp_path / 'out'}"]) == 2
    assert "data.zip is a file, not a dataset folder" in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_an_unknown_mujoco_gl_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "MUJOCO_GL": "nonsense", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "hfpolicy.cli", "record", "--env.type=aloha", "--n_episodes=1", "--progress=false"]
    done = subprocess.run([*argv, f"--output_dir={tmp_path / 'aloha'}"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("hfpolicy record: error: MuJoCo cannot render: MUJOCO_GL=nonsense did not work")
    assert "MUJOCO_GL=egl" in done.stderr and not (tmp_path / "aloha").exists()


def test_a_one_item_dataset_list_is_that_dataset(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(flags(f"[{pusht_state_dataset}]", out, "--steps=1")) == 0
    assert json.loads((out / TRAIN_CONFIG_FILE).read_text())["dataset"]["root"] == str(pusht_state_dataset)


def test_resume_with_another_policy_type_names_the_flag(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(flags(pusht_state_dataset, out, "--steps=1")) == 0
    assert train_main([f"--output_dir={out}", "--resume=true", "--steps=2", "--policy.type=act"]) == 2
    err = one_line(capsys)
    assert "--policy.type=act (the run has diffusion)" in err and "drop --policy.type to resume" in err
    assert "not valid for ACTConfig" not in err


def test_a_mixture_says_which_features_it_leaves_out_without_progress_bars(pusht_state_dataset, tmp_path, capsys):
    from hfpolicy.record import RecordConfig, record

    no_keypoints = record(RecordConfig(n_episodes=2, output_dir=str(tmp_path / "b"), progress=False, repo_id="local/b"))
    argv = flags(f"[{pusht_state_dataset},{no_keypoints}]", tmp_path / "run", "--steps=1")
    argv = [a for a in argv if not a.startswith("--dataset.input_features")]  # the keypoints: only one dataset has them
    assert (
        train_main([*argv, "--dataset.input_features=[observation.state,observation.image]"]) == 0
    )  # --progress=false
    out = capsys.readouterr().out
    assert "features not in every dataset are left out: ['observation.environment_state']" in out
