"""`hfpolicy view` (and the page `hfpolicy push` uploads) reads only what lies inside the folder it views: a
dataset's video template, an eval_info.json's video list or a linked video naming a file elsewhere is refused in one
line (exit 2) and no page is written. Before, such a file was base64-embedded in view.html with exit 0. Also: a run's
page never replaces one of its evaluations' pages (--output)."""

import base64
import json
import shutil

import pytest
from viewer.viewer_inputs import recorded_dataset, toy_eval

from hfpolicy.cli import main as cli_main
from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE
from hfpolicy.hub.push import eval_page_for_hub
from hfpolicy.io.paths import OutsideFolderError
from hfpolicy.runs.metrics_log import append_metrics

SECRET = b"\x00\x00\x00\x18ftypmp42 not a video: a private file elsewhere on the machine"


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory):
    return recorded_dataset(tmp_path_factory.mktemp("recorded") / "demos", n_episodes=1, max_steps=10)


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy_eval") / "eval"
    toy_eval(folder, n_episodes=4, n_videos=2)
    return folder


def refused(capsys, path, *flags) -> str:
    """Runs `hfpolicy view PATH`, checks it exits 2 with one line and wrote no page; returns the line."""
    assert cli_main(["view", str(path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("hfpolicy view: error: ")
    assert not (path / "view.html").exists()
    return err


def assert_nowhere_embedded(folder, secret=SECRET):
    for page in folder.rglob("*.html"):
        assert base64.b64encode(secret).decode()[:40] not in page.read_text()


@pytest.mark.parametrize("absolute", [True, False])
def test_a_dataset_video_template_naming_a_file_elsewhere_is_refused(dataset_root, tmp_path, capsys, absolute):
    root = tmp_path / "crafted"
    shutil.copytree(dataset_root, root)
    (tmp_path / "secret.mp4").write_bytes(SECRET)
    info = json.loads((root / "meta/info.json").read_text())
    info["video_path"] = str(tmp_path / "secret.mp4") if absolute else "../secret.mp4"
    (root / "meta/info.json").write_text(json.dumps(info))
    err = refused(capsys, root)
    assert "meta/info.json video_path" in err and "secret.mp4" in err
    assert_nowhere_embedded(tmp_path)


def test_eval_info_video_paths_naming_a_file_elsewhere_are_refused(eval_dir, tmp_path, capsys):
    crafted = tmp_path / "eval"
    shutil.copytree(eval_dir, crafted)
    shutil.rmtree(crafted / "videos")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "eval_episode_0.mp4").write_bytes(SECRET)
    info = json.loads((crafted / EVAL_INFO_FILE).read_text())
    info["video_paths"] = [str(tmp_path / "elsewhere" / "eval_episode_0.mp4")]
    (crafted / EVAL_INFO_FILE).write_text(json.dumps(info))
    assert "eval_info.json video_paths" in refused(capsys, crafted, "--embed_videos=true")
    with pytest.raises(OutsideFolderError):  # the page `hfpolicy push` uploads, videos inside
        eval_page_for_hub(crafted)
    assert_nowhere_embedded(tmp_path)


def test_a_linked_eval_video_leading_out_is_refused(eval_dir, tmp_path, capsys):
    crafted = tmp_path / "eval"
    shutil.copytree(eval_dir, crafted)
    (tmp_path / "secret.mp4").write_bytes(SECRET)
    video = crafted / "videos" / "eval_episode_0.mp4"
    video.unlink()
    video.symlink_to(tmp_path / "secret.mp4")
    assert "which resolves to" in refused(capsys, crafted, "--embed_videos=true")
    assert_nowhere_embedded(tmp_path)


def test_stale_video_paths_of_a_copied_evaluation_still_draw(eval_dir, tmp_path, capsys):
    """An evaluation copied elsewhere keeps its old absolute video_paths: its own videos/ are used, no error."""
    copy = tmp_path / "copy"
    shutil.copytree(eval_dir, copy)
    assert cli_main(["view", str(copy), "--embed_videos=true"]) == 0
    assert (copy / "view.html").read_text().count("data:video/mp4;base64,") == 2


def test_the_run_page_never_replaces_an_evaluation_page(eval_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(eval_dir, run / "eval" / "step_000010")
    append_metrics(run / METRICS_FILE, 10, {"loss": 1.0})
    eval_page = run / "eval" / "step_000010" / "view.html"
    assert cli_main(["view", str(run), f"--output={eval_page}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--output={eval_page} is the page of step 10 itself" in err
    assert not eval_page.exists() and not (run / "view.html").exists()


def test_push_never_uploads_a_linked_video_from_elsewhere(eval_dir, tmp_path):
    """`hfpolicy push` copies the latest evaluation's videos into the repo: a link leading out is refused first."""
    from hfpolicy.hub.push import run_artifacts
    from hfpolicy.runs.run_folder import RunFolder

    run = tmp_path / "run"
    shutil.copytree(eval_dir, run / "eval" / "step_000010")
    append_metrics(run / METRICS_FILE, 10, {"loss": 1.0})
    (tmp_path / "secret.mp4").write_bytes(SECRET)
    video = run / "eval" / "step_000010" / "videos" / "eval_episode_1.mp4"
    video.unlink()
    video.symlink_to(tmp_path / "secret.mp4")
    with pytest.raises(OutsideFolderError, match="eval_episode_1.mp4"):
        run_artifacts(RunFolder(run), {}, None, "hfpolicy train")
    assert_nowhere_embedded(tmp_path)


def test_push_takes_the_eval_episode_videos_only_in_episode_order(eval_dir, tmp_path):
    """Another mp4 beside the evaluation's videos (a clip someone saved there) is left out; it used to break their
    sort by episode index (None against an int)."""
    from hfpolicy.hub.push import run_artifacts
    from hfpolicy.training.run_folder import RunFolder

    run = tmp_path / "run"
    shutil.copytree(eval_dir, run / "eval" / "step_000010")
    append_metrics(run / METRICS_FILE, 10, {"loss": 1.0})
    (run / "eval" / "step_000010" / "videos" / "clip.mp4").write_bytes(b"")
    artifacts = run_artifacts(RunFolder(run), {}, None, "hfpolicy train")
    assert [video.name for video in artifacts.videos] == ["eval_episode_0.mp4", "eval_episode_1.mp4"]
