"""Datasets both ways with the Hub-protocol test server: `hfpolicy push --dataset=DIR` (v3.0 and v2.1 folders, with
their card and version tag) loaded back by hfpolicy, `hfpolicy view user/name` for a Hub dataset (only the shown
episodes' files downloaded), and folders that are not datasets refused in one line before anything is created."""

import html.parser
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import DatasetCard, HfApi

from hfpolicy.cli import main as cli_main
from hfpolicy.datasets import DatasetWriter, PolicyDataset, make_dataset_card
from hfpolicy.datasets.format import INFO_PATH

V21_ROOT = Path(__file__).parents[1] / "datasets" / "data" / "lerobot_v21_tiny"  # written by LeRobot 0.3.3
LENGTHS = (6, 4, 5)
FEATURES = {
    "observation.image": {"dtype": "video", "shape": [16, 16, 3], "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
}


def write_dataset(root: Path) -> Path:
    """3 short episodes with a camera, one data file and one video file per episode (so that choosing episodes
    chooses files)."""
    writer = DatasetWriter.create(
        root, "local/tiny", 10, FEATURES, robot_type="test_arm", data_files_size_in_mb=1e-4, video_files_size_in_mb=1e-4
    )
    with writer:
        for episode, length in enumerate(LENGTHS):
            for i in range(length):
                value = np.float32(episode + i / 10)
                frame = {
                    "observation.image": np.full((16, 16, 3), 40 * episode + 10 * i, np.uint8),
                    "observation.state": np.array([value, -value], np.float32),
                    "action": np.array([value + 1, value - 1], np.float32),
                    "next.reward": value,
                }
                writer.add_frame(frame, task=f"push {episode}")
            writer.save_episode()
    return root


def push(capsys, *flags: str) -> tuple[int, str, str]:
    status = cli_main(["push", *flags])
    out, err = capsys.readouterr()
    return status, out, err


def assert_same_frames(remote: PolicyDataset, local: PolicyDataset, keys: tuple[str, ...]) -> None:
    assert remote.num_frames == local.num_frames and remote.root != local.root
    a, b = remote.get_batch(range(remote.num_frames)), local.get_batch(range(local.num_frames))
    for key in keys:
        assert torch.equal(a[key], b[key]), key


def test_push_a_v30_dataset_folder_and_load_it_back(hub_server, tmp_path, capsys):
    root = write_dataset(tmp_path / "tiny")
    (root / "view.html").write_text("<html>a page of it</html>")  # written by `hfpolicy view DIR`: not uploaded
    (root / "meta" / ".info.json.123.tmp").write_text("{}")  # a temporary file: not uploaded
    status, out, err = push(capsys, f"--dataset={root}", "--repo_id=user/pushed-v30")
    assert status == 0, err
    assert "3 episodes, 15 frames, LeRobot v3.0, tagged v3.0" in out and "hfpolicy view user/pushed-v30" in out
    api = HfApi()
    files = set(api.list_repo_files("user/pushed-v30", repo_type="dataset"))
    local_files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert files == (local_files - {"view.html", "meta/.info.json.123.tmp"}) | {"README.md", ".gitattributes"}
    assert [t.name for t in api.list_repo_refs("user/pushed-v30", repo_type="dataset").tags] == ["v3.0"]
    card = DatasetCard.load("user/pushed-v30", repo_type="dataset")
    assert card.data.task_categories == ["robotics"] and "LeRobot v3.0 format" in card.text

    deltas = {"action": [0.0, 0.1, 0.2]}
    remote = PolicyDataset("user/pushed-v30", revision="v3.0", delta_timestamps=deltas)
    local = PolicyDataset("local/tiny", root=root, delta_timestamps=deltas)
    assert_same_frames(remote, local, ("action", "action_is_pad", "observation.state", "observation.image", "index"))


def test_push_a_v21_dataset_folder_keeps_its_card_and_version(hub_server, tmp_path, capsys):
    root = tmp_path / "old"
    shutil.copytree(V21_ROOT, root)
    card = "---\nlicense: apache-2.0\ntags:\n- LeRobot\n---\n\nThe card LeRobot wrote for this dataset.\n"
    (root / "README.md").write_text(card)
    status, out, err = push(capsys, f"--dataset={root}", "--repo_id=user/pushed-v21")
    assert status == 0, err
    assert "LeRobot v2.1, tagged v2.1" in out
    api = HfApi()
    assert [t.name for t in api.list_repo_refs("user/pushed-v21", repo_type="dataset").tags] == ["v2.1"]
    assert DatasetCard.load("user/pushed-v21", repo_type="dataset").content == card  # the folder's own card

    deltas = {"action": [-0.1, 0.0, 0.1], "observation.images.top": [0.0]}
    remote = PolicyDataset("user/pushed-v21", revision="v2.1", delta_timestamps=deltas)
    local = PolicyDataset("local/old", root=root, delta_timestamps=deltas)
    assert_same_frames(remote, local, ("action", "action_is_pad", "observation.images.top", "observation.state"))
    page = tmp_path / "v21.html"
    assert cli_main(["view", "user/pushed-v21", f"--output={page}", "--embed_videos=false"]) == 0
    assert [e["length"] for e in page_data(page)["episodes"]] == [12, 7, 15]  # the fixture's episodes


def test_a_folder_that_is_not_a_complete_dataset_is_refused_in_one_line(hub_server, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train_config.json").write_text("{}")
    incomplete = write_dataset(tmp_path / "incomplete")
    next((incomplete / "data").rglob("*.parquet")).unlink()
    cases = {
        str(tmp_path / "run"): f"is not a LeRobot dataset (it has no {INFO_PATH})",
        str(tmp_path / "absent"): "does not exist",
        str(incomplete): "lacks 1 file(s) that its meta/ names",
    }
    for folder, words in cases.items():
        status, _, err = push(capsys, f"--dataset={folder}", "--repo_id=user/never-created")
        assert status == 2 and err.count("\n") == 1 and words in err, err
    status, _, err = push(capsys, f"--dataset={incomplete}")
    assert status == 2 and "needs --repo_id=user/name" in err
    assert not HfApi().repo_exists("user/never-created", repo_type="dataset")


class Tags(html.parser.HTMLParser):
    """The tags and link targets of rendered HTML."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.hrefs += [value or "" for name, value in attrs if name in ("href", "src")]


def test_the_card_shows_what_comes_from_the_dataset_as_text():
    markdown = pytest.importorskip("markdown")
    payloads = ["<img src=x onerror=alert(1)>", "a|b", "```", "[link](javascript:alert(1))", "<script>x</script>"]
    features = {p: {"dtype": "float32", "shape": [1], "names": [p]} for p in payloads}
    info = {"codebase_version": "v3.0", "fps": 10, "features": features, "robot_type": payloads[0], "total_episodes": 1}
    text = str(make_dataset_card(info, "user/payloads")).split("---", 2)[2]
    parser = Tags()
    parser.feed(markdown.markdown(text, extensions=["tables", "fenced_code"]))
    assert parser.tags <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "pre", "a"}
    assert parser.hrefs == ["meta/info.json", "https://github.com/huggingface/lerobot"]  # the card's own links
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(payloads) and all(row.count(" | ") == 3 for row in rows)  # "|" adds no column
    fence = "````"  # longer than the ``` a name holds: the block ends where the card ends it
    assert json.loads(text.split(f"{fence}json\n", 1)[1].split(f"\n{fence}")[0]) == info


def test_view_a_hub_dataset_downloads_only_the_shown_episodes(hub_server, tmp_path, capsys, monkeypatch):
    root = write_dataset(tmp_path / "tiny")
    assert push(capsys, f"--dataset={root}", "--repo_id=user/viewed")[0] == 0
    page = tmp_path / "pages" / "viewed.html"
    before = len(hub_server.requests)
    assert cli_main(["view", "user/viewed", f"--output={page}", "--episodes=[1]", "--embed_videos=false"]) == 0
    assert capsys.readouterr().out.strip() == str(page)
    fetched = {path for method, path in hub_server.requests[before:] if method == "GET" and "/resolve/" in path}
    assert {p.split("/resolve/", 1)[1].split("/", 1)[1] for p in fetched if "/meta/" not in p} == {
        "data/chunk-000/file-001.parquet",
        "videos/observation.image/chunk-000/file-001.mp4",
    }

    from hfpolicy.viewer import VideoLinker, dataset_page_data

    data = page_data(page)
    local = dataset_page_data(root, VideoLinker(tmp_path / "local.html"), episodes=[1])
    assert data["n_episodes"] == 3 and data["n_shown"] == 1 and data["source"].startswith("user/viewed (Hub dataset")
    assert data["episodes"][0]["series"] == local["episodes"][0]["series"]
    video = (page.parent / data["video_files"][0]).resolve()
    assert video.is_file() and data["video_files"][0].endswith("file-001.mp4")

    status = cli_main(["view", "user/not-there"])
    err = capsys.readouterr().err
    assert status == 2 and "user/not-there is not a folder here, and as a Hub dataset" in err and err.count("\n") == 1
    (tmp_path / "data").mkdir()  # a mistyped folder under one that exists here is not looked for on the Hub
    monkeypatch.chdir(tmp_path)
    before = len(hub_server.requests)
    assert cli_main(["view", "data/pusht_typo"]) == 2
    assert "data/pusht_typo does not exist" in capsys.readouterr().err and len(hub_server.requests) == before


def page_data(page: Path) -> dict:
    text = page.read_text()
    start = text.index('<script id="page-data" type="application/json">') + len(
        '<script id="page-data" type="application/json">'
    )
    return json.loads(text[start : text.index("</script>", start)])
