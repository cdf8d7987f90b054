"""`hfpolicy view` on damaged or incomplete folders: a torn episodes.jsonl, records without their numbers, a missing
or corrupt video, a string in metrics.jsonl, an --output that cannot be a file. Each ends in one line naming the file
and the fix, exit status 2 (a torn last line: a one-line warning, and the page of the episodes before it)."""

import json
import shutil

import pytest
from viewer.test_viewer_pages import page_data
from viewer.viewer_inputs import recorded_dataset, toy_eval

from hfpolicy.cli import main as cli_main
from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE
from hfpolicy.runs.metrics_log import append_metrics


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    toy_eval(folder, n_episodes=6, n_videos=2)
    return folder


def copy_of(folder, tmp_path, *drop):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for name in drop:
        (copy / name).unlink()
    return copy


def view_error(capsys, *argv) -> str:
    assert cli_main(["view", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hfpolicy view: error: "), err
    return err


def test_a_torn_last_record_is_skipped_with_a_warning_and_a_torn_middle_is_named(eval_dir, tmp_path, capsys):
    folder = copy_of(eval_dir, tmp_path, EVAL_INFO_FILE)  # what a killed evaluation leaves: records only
    records = folder / "episodes.jsonl"
    lines = records.read_text().splitlines()
    records.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])  # killed while writing the sixth
    assert cli_main(["view", str(folder), f"--output={tmp_path / 'a.html'}"]) == 0
    err = capsys.readouterr().err
    assert err == f"warning: {records} line 6 is cut short (the evaluation was stopped while writing it): showing the 5 episodes before it\n"  # fmt: skip
    assert len(page_data(tmp_path / "a.html").data["episodes"]) == 5

    records.write_text("\n".join([lines[0], lines[1][:25], *lines[2:]]) + "\n")
    err = view_error(capsys, folder, f"--output={tmp_path / 'b.html'}")
    assert f"{records} line 2 is not JSON" in err and "delete that line" in err


def test_records_without_max_reward_are_named(eval_dir, tmp_path, capsys):
    folder = copy_of(eval_dir, tmp_path)
    info = json.loads((folder / EVAL_INFO_FILE).read_text())
    del info["per_episode"][3]["max_reward"]
    (folder / EVAL_INFO_FILE).write_text(json.dumps(info))
    err = view_error(capsys, folder)
    assert f"{folder / EVAL_INFO_FILE} per_episode[3] has no number for ['max_reward']" in err

    (folder / EVAL_INFO_FILE).unlink()
    records = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    records[0].pop("max_reward")
    (folder / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert f"{folder / 'episodes.jsonl'} line 1 has no number for ['max_reward']" in view_error(capsys, folder)


def test_an_output_that_is_a_folder_or_under_a_file_is_refused(eval_dir, tmp_path, capsys):
    (tmp_path / "report.html").mkdir()
    err = view_error(capsys, eval_dir, f"--output={tmp_path / 'report.html'}")
    assert f"{tmp_path / 'report.html'} is a folder" in err
    (tmp_path / "a_file").write_text("x")
    err = view_error(capsys, eval_dir, f"--output={tmp_path / 'a_file' / 'view.html'}")
    assert f"{tmp_path / 'a_file'} is a file, not a folder" in err


def test_a_corrupt_eval_video_is_named(eval_dir, tmp_path, capsys):
    folder = copy_of(eval_dir, tmp_path)
    video = folder / "videos" / "eval_episode_0.mp4"
    video.write_text("an HTML error page saved as .mp4")  # not a video at all
    err = view_error(capsys, folder, f"--output={tmp_path / 'v.html'}")
    assert f"{video} is not a readable video" in err and "Errno" not in err


def test_a_dataset_without_its_videos_is_named(tmp_path, capsys):
    root = recorded_dataset(tmp_path / "demos", n_episodes=1, max_steps=8)
    shutil.rmtree(root / "videos")
    err = view_error(capsys, root)
    assert f"{root} lacks the video files ['videos/observation.image/chunk-000/file-000.mp4']" in err


def test_a_cut_short_dataset_video_is_named(tmp_path, capsys):
    root = recorded_dataset(tmp_path / "demos", n_episodes=1, max_steps=8)
    video = root / "videos" / "observation.image" / "chunk-000" / "file-000.mp4"
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 2 // 3])  # a broken copy or download: it still opens
    err = view_error(capsys, root, f"--output={tmp_path / 'v.html'}")
    assert f"{video} is not a readable video (cut short:" in err
    assert not (tmp_path / "v.html").exists()


def test_a_string_in_metrics_jsonl_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    append_metrics(run / METRICS_FILE, 1, {"loss": 0.5})
    with open(run / METRICS_FILE, "a") as f:
        f.write(json.dumps({"step": 2, "loss": "0.4"}) + "\n")  # a hand-edited or foreign line
    append_metrics(run / METRICS_FILE, 3, {"loss": 0.3})
    err = view_error(capsys, run)
    assert f'{run / METRICS_FILE} line 2 is not a metrics entry (loss is "0.4", not a number)' in err
