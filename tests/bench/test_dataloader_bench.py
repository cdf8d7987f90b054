"""bench/dataloader.py --streaming's LeRobot rows (issue 22) without LeRobot's side venv: the flags are checked before any
work, the FFmpeg library folders become the LD_LIBRARY_PATH of bench/lerobot_streaming.py, and LeRobot's runs add their
own keys to the JSON line while every key it had before keeps its value."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("samples_per_s", "first_batch_s", "peak_rss_mb", "peak_worker_rss_mb")


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))  # as when it runs as a script: its sibling modules import
    spec = importlib.util.spec_from_file_location("dataloader_bench", ROOT / "bench" / "dataloader.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(ROOT / "bench"))
    sys.modules.pop("lerobot_streaming", None)
    sys.modules.pop("dataloader", None)


def run(path: str, workers: int, rate: float, **extra) -> dict:
    return {"path": path, "workers": workers, "samples_per_s": rate, "first_batch_s": 1.5 + workers,
            "peak_rss_mb": 700 + workers, "peak_worker_rss_mb": 100 * workers, "frames": 579, "episodes": 4} | extra  # fmt: skip


def table(bench, capsys, runs: list[dict]) -> tuple[dict, list[str]]:
    args = argparse.Namespace(
        batch_size=64, batches=5, shuffle_buffer_episodes=16, stream_ram_gb=2.0, stream_disk_gb=10.0
    )
    bench.print_streaming_table(runs, args, pushed_mb=0.1)
    lines = capsys.readouterr().out.strip().splitlines()
    return json.loads(lines[-1]), lines[:-1]


def test_lerobot_runs_add_their_keys_and_leave_the_others(bench, capsys):
    ours = [
        run("memory", 0, 4000.0, warm_samples_per_s=4100.0),
        run("memory", 2, 2000.0, warm_samples_per_s=2100.0),
        run("streaming", 0, 3000.0, warm_samples_per_s=4000.0),
        run("streaming", 2, 1500.0, warm_samples_per_s=2000.0),
    ]
    before, lines = table(bench, capsys, ours)
    assert not any("lerobot" in line.lower() for line in lines)
    lerobot = [
        run("lerobot_streaming", w, r, streaming_processes=1, lerobot="0.6.1", buffer_size=1000)
        for w, r in [(0, 60.0), (2, 300.0)]
    ]
    after, lines = table(bench, capsys, ours + lerobot)
    assert sum(line.startswith("lerobot 0.6.1 (1 reader), ") for line in lines) == 2
    assert any(line.startswith("note: the dataset has fewer frames than LeRobot's shuffle buffer") for line in lines)
    assert {k: after[k] for k in before} == before
    assert before["streaming_vs_memory_w2"] == 0.75 and before["warm_streaming_vs_memory_w0"] == round(4000 / 4100, 3)
    added = {k: v for k, v in after.items() if k not in before}
    assert added == {
        **{f"{key}_lerobot_streaming_w{w}": run("lerobot_streaming", w, rate)[key] for w, rate in [(0, 60.0), (2, 300.0)]
           for key in KEYS},
        "streaming_processes_lerobot_streaming_w0": 1, "streaming_processes_lerobot_streaming_w2": 1,
        "streaming_vs_lerobot_w0": 50.0, "streaming_vs_lerobot_w2": 5.0, "lerobot": "0.6.1",
    }  # fmt: skip


def test_the_ffmpeg_folders_bring_their_blas_and_lapack_folders(bench, tmp_path):
    libs, other = tmp_path / "ffmpeg5", tmp_path / "other"
    (libs / "blas").mkdir(parents=True)
    (libs / "lapack").mkdir()
    other.mkdir()
    assert bench.lerobot_library_path(f"{libs}:{other}") == f"{libs}:{libs / 'blas'}:{libs / 'lapack'}:{other}"
    assert bench.lerobot_library_path("") == ""


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lerobot_python=/usr/bin/env"], "--lerobot_python needs --streaming"),
        (["--streaming", "--lerobot_python=/no/such/python"], "--lerobot_python=/no/such/python is not a file"),
    ],
)
def test_lerobot_flags_are_checked_before_any_work(bench, monkeypatch, capsys, flags, message):
    monkeypatch.setattr(sys, "argv", ["dataloader.py", *flags])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
