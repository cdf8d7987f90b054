"""Training faults (issue 13): a locked run folder, a diverging loss, a torn metrics.jsonl, a run stopped before its
first checkpoint, Hub access checked before step 1, `hfpolicy push --run=DIR`, and one-line errors for a bad resume.

Each run is the tiny state-only Diffusion Policy of tests/test_train.py for a few steps, in this process (~1 s).
"""

import json
import shutil
import socket
from pathlib import Path

import huggingface_hub.constants as hub_constants
import pytest
from huggingface_hub import HfApi

from hfpolicy.constants import METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.hub.push import PushError, push_run
from hfpolicy.hub.push import main as push_main
from hfpolicy.io.run_lock import RunLock
from hfpolicy.runs.metrics_log import append_metrics, read_metrics, truncate_metrics
from hfpolicy.training import main
from hfpolicy.training.checkpoints import list_checkpoints

TINY = [
    "--dataset.input_features=[observation.state,observation.environment_state]",
    "--policy.type=diffusion",
    "--policy.down_dims=[16,32]",
    "--policy.diffusion_step_embed_dim=16",
    "--policy.noise_scheduler_type=DDIM",
    "--policy.num_inference_steps=2",
    "--policy.scheduler_warmup_steps=0",
    "--batch_size=8",
    "--tracker=none",
    "--progress=false",
    "--eval.freq=0",
    "--log_freq=1",
]


def flags(dataset, out, *more: str) -> list[str]:
    return [f"--dataset.root={dataset}", f"--output_dir={out}", *TINY, *more]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_folder_held_by_a_live_run_is_refused(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    with RunLock(out):  # another run holds the folder (flock: exclusive even within one process)
        assert main(flags(pusht_state_dataset, out, "--steps=2")) == 2
        err = capsys.readouterr().err
        assert "in use by another run" in err and "--output_dir" in err and err.count("\n") == 1
        assert not (out / TRAIN_CONFIG_FILE).exists()
    assert main(flags(pusht_state_dataset, out, "--steps=2")) == 0  # released: the same folder trains


def test_a_diverging_loss_stops_the_run_keeping_the_last_good_checkpoint(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    diverge = ["--policy.optimizer_lr=1e30", "--grad_clip_norm=0", "--save_freq=1", "--keep_last_checkpoints=0"]
    assert main(flags(pusht_state_dataset, out, "--steps=8", *diverge)) == 1
    err = capsys.readouterr().err
    assert "NaN or inf at step 2" in err and "step_000001" in err and "--resume=true" in err
    assert [c.name for c in list_checkpoints(out)] == ["step_000001"]  # nothing saved from the bad step
    lines = (out / METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]  # strict JSON, and no NaN entry
    assert "NaN" not in (out / METRICS_FILE).read_text()


def test_metrics_never_hold_a_bare_nan_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / METRICS_FILE
    append_metrics(path, 1, {"loss": 0.5, "grad_norm": float("inf")})
    append_metrics(path, 2, {"loss": float("nan")})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "loss": 0.5, "grad_norm": None},
        {"step": 2, "loss": None},
    ]
    with open(path, "a") as f:
        f.write('{"step": 3, "lo')  # killed mid-write
    assert [e["step"] for e in read_metrics(path)] == [1, 2]
    truncate_metrics(path, after_step=5)
    assert path.read_text().endswith("}\n") and [e["step"] for e in read_metrics(path)] == [1, 2]

    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')  # damage elsewhere is named, not skipped
    with pytest.raises(ValueError, match=r"line 2 is not a metrics entry"):
        read_metrics(path)


def test_resume_tolerates_a_torn_last_metrics_line(pusht_state_dataset, tmp_path):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--save_freq=2")) == 0
    with open(out / METRICS_FILE, "a") as f:
        f.write('{"step": 3, "loss": 0.1')
    assert main([f"--output_dir={out}", "--resume=true", "--steps=4"]) == 0
    assert [e["step"] for e in read_metrics(out / METRICS_FILE)] == [1, 2, 3, 4]


def test_a_run_stopped_before_its_first_checkpoint_restarts_in_place(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--save_freq=2")) == 0
    # What Ctrl-C at step 1 leaves: train_config.json, metrics of step 1, an eval folder, no checkpoint.
    for checkpoint in (out / "checkpoints").iterdir():
        if checkpoint.is_symlink():
            checkpoint.unlink()
        else:
            shutil.rmtree(checkpoint)
    (out / "eval" / "step_000001").mkdir(parents=True)

    assert main([f"--output_dir={out}", "--resume=true"]) == 2
    err = capsys.readouterr().err
    assert "stopped before the first one" in err and "dropping --resume" in err

    assert main(flags(pusht_state_dataset, out, "--steps=2", "--save_freq=2")) == 0  # started again in place
    assert [e["step"] for e in read_metrics(out / METRICS_FILE)] == [1, 2]  # no duplicate step 1
    assert not (out / "eval" / "step_000001").exists()
    assert [c.name for c in list_checkpoints(out)] == ["step_000002"]


def test_resume_without_output_dir_says_it_is_needed(capsys):
    assert main(["--resume=true"]) == 2
    err = capsys.readouterr().err
    assert "--resume=true needs --output_dir=DIR" in err and err.count("\n") == 1


def test_an_unreadable_checkpoint_is_one_line_not_a_traceback(pusht_state_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2")) == 0
    (list_checkpoints(out)[-1] / "training_state" / "optimizer.json").unlink()
    assert main([f"--output_dir={out}", "--resume=true", "--steps=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hfpolicy train: error:") and "optimizer.json" in err and err.count("\n") == 1


def test_hub_access_is_checked_before_step_one(pusht_state_dataset, tmp_path, hub_server, monkeypatch, capsys):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--hub.repo_id=someone-else/policy")) == 2
    err = capsys.readouterr().err
    assert "'user'" in err and "'someone-else'" in err  # whose token, which namespace it cannot write
    assert not (out / TRAIN_CONFIG_FILE).exists()

    monkeypatch.delenv("HF_TOKEN")
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--hub.repo_id=user/no-token-13")) == 2
    err = capsys.readouterr().err
    assert "needs a Hub token" in err and "hf auth login" in err and "hfpolicy push --run=DIR" in err
    assert not (out / TRAIN_CONFIG_FILE).exists()


def test_a_dead_hub_is_named_with_its_endpoint(pusht_state_dataset, tmp_path, monkeypatch, capsys):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(hub_constants, "ENDPOINT", endpoint)
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2", "--hub.repo_id=user/dead-hub-13")) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Hub at {endpoint} (ConnectError" in err and "HF_ENDPOINT" in err

    # A push that fails after training names the way to push the finished run later.
    assert main(flags(pusht_state_dataset, out, "--steps=2")) == 0
    with pytest.raises(PushError, match=rf"{endpoint}.*hfpolicy push --run={out}"):
        push_run(out, "user/dead-hub-13", check_access=False)


def test_hfpolicy_push_publishes_a_finished_run(pusht_state_dataset, tmp_path, hub_server, capsys):
    out = tmp_path / "run"
    assert main(flags(pusht_state_dataset, out, "--steps=2")) == 0
    assert push_main([f"--run={out}"]) == 2  # trained without --hub.repo_id: where to?
    assert "--repo_id=user/name" in capsys.readouterr().err
    assert push_main([f"--run={tmp_path / 'nothing'}", "--repo_id=user/x"]) == 2
    assert "not a training run folder" in capsys.readouterr().err

    assert push_main([f"--run={out}", "--repo_id=user/pushed-run-13"]) == 0
    files = set(HfApi().list_repo_files("user/pushed-run-13"))
    assert {"config.json", "model.safetensors", "README.md", TRAIN_CONFIG_FILE, "training_curve.png"} <= files
    card = HfApi().hf_hub_download("user/pushed-run-13", "README.md")
    assert f"hfpolicy train --config_path={out / TRAIN_CONFIG_FILE}" in Path(card).read_text()


@pytest.mark.parametrize("when", ["after", "during"])
def test_ctrl_c_before_the_first_step_says_that_the_recording_is_kept(when, tmp_path, monkeypatch, capsys):
    """Ctrl-C after `--dataset.scripted_episodes`'s recording (here: as the run is announced) keeps the recording,
    and says so; during it (here: as the recording starts), nothing is kept."""
    import signal

    import hfpolicy.training.data as data
    import hfpolicy.training.setup as setup
    from hfpolicy.training.stopping import Interrupted

    def ctrl_c(*args, **kwargs):
        raise Interrupted(signal.SIGINT)

    if when == "after":
        monkeypatch.setattr(setup, "announce_training", ctrl_c)
    else:
        monkeypatch.setattr(data, "record_scripted_dataset", ctrl_c)
    recording, out = tmp_path / "recording", tmp_path / "run"
    argv = [*TINY, "--dataset.scripted_episodes=1", f"--dataset.root={recording}", f"--output_dir={out}"]
    with pytest.raises(SystemExit) as stopped:  # as `hfpolicy train` ends on Ctrl-C (hfpolicy.training.stopping)
        main(argv)
    assert stopped.value.code == 130
    err = capsys.readouterr().err
    assert "before the first step; nothing was trained" in err and not out.exists()
    if when == "after":
        assert recording.is_dir() and "nothing is kept" not in err
        assert f"the scripted demonstrations recorded into {recording} are kept, and the next run reuses them" in err
    else:
        assert not recording.exists() and "nothing is kept" in err
