"""The viewer's page data (what each table and plot holds), computed from small real evaluations, a recorded dataset
and a run folder, and the HTML file around it (`hfpolicy view`)."""

import html.parser
import json
import math
from pathlib import Path

import numpy as np
import pytest
from envs.toy_env import episode_script
from viewer.viewer_inputs import ACTION_BOUND, recorded_dataset, save_eval, toy_eval

from hfpolicy.cli import main as cli_main
from hfpolicy.constants import ACTION, METRICS_FILE, OBS_STATE, REWARD, SUCCESS, TRAIN_CONFIG_FILE
from hfpolicy.datasets import DatasetMeta, PolicyDataset
from hfpolicy.eval import summarize_episodes, wilson_interval
from hfpolicy.io.video import read_video_frames
from hfpolicy.runs.metrics_log import append_metrics
from hfpolicy.viewer import (
    VideoLinker,
    dataset_page_data,
    eval_page_data,
    render_page,
    run_page_data,
    view,
    write_run_pages,
)
from hfpolicy.viewer.page import asset, rounded_list


@pytest.fixture(scope="module")
def toy_eval_dir(tmp_path_factory):
    eval_dir = tmp_path_factory.mktemp("toy_eval")
    return eval_dir, toy_eval(eval_dir)


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory):
    return recorded_dataset(tmp_path_factory.mktemp("recorded") / "pusht_demos", n_episodes=3, max_steps=60)


class PageData(html.parser.HTMLParser):
    """The JSON in a page's <script id="page-data">, and the number of external references (src/href)."""

    def __init__(self):
        super().__init__()
        self.data, self._in_data, self.external = None, False, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in_data = attrs.get("id") == "page-data"
        if tag in ("script", "link", "img") and (attrs.get("src") or attrs.get("href")):
            self.external.append(attrs.get("src") or attrs.get("href"))

    def handle_data(self, data):
        if self._in_data:
            self.data = json.loads(data)
            self._in_data = False


def page_data(path: Path) -> PageData:
    parser = PageData()
    parser.feed(path.read_text())
    return parser


def test_eval_page_holds_every_record_failures_first(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    data = eval_page_data(eval_dir, VideoLinker(tmp_path / "page.html"))
    records = {r.index: r for r in result.episodes}
    assert [e["index"] for e in data["episodes"]] == sorted(records)
    for episode in data["episodes"]:
        record = records[episode["index"]]
        assert episode["success"] == record.success and episode["length"] == record.length
        assert episode["max_reward"] == pytest.approx(record.max_reward, rel=1e-3)
        assert len(episode["rewards"]) == record.length  # one reward per step: the curve
        assert sum(episode["rewards"]) == pytest.approx(record.sum_reward, abs=1e-3 * record.length)
        assert max(episode["rewards"]) == pytest.approx(record.max_reward, rel=1e-3, abs=1e-4)
    # Default order: failures first, worst max reward first; both kinds present in the toy episodes.
    order = [records[i] for i in data["default_order"]]
    assert sorted(data["default_order"]) == sorted(records)
    n_failures = sum(not r.success for r in order)
    assert 0 < n_failures < len(order)
    assert not any(r.success for r in order[:n_failures]) and all(r.success for r in order[n_failures:])
    for group in (order[:n_failures], order[n_failures:]):
        assert [r.max_reward for r in group] == sorted(r.max_reward for r in group)
    # Aggregates are the evaluation's own, with the Wilson interval.
    n_successes = sum(r.success for r in result.episodes)
    low, high = wilson_interval(n_successes, len(result.episodes))
    assert data["aggregated"]["pc_success_ci95"] == pytest.approx([100 * low, 100 * high])


def test_eval_page_links_the_filmed_episodes(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    page = tmp_path / "pages" / "eval.html"
    page.parent.mkdir()
    data = eval_page_data(eval_dir, VideoLinker(page))
    filmed = {e["index"]: e["video"] for e in data["episodes"] if e["video"]}
    assert sorted(filmed) == [0, 1, 2]
    for index, link in filmed.items():
        assert not Path(link).is_absolute()
        frames = read_video_frames(page.parent / link)
        assert len(frames) == result.episodes[index].length + 1
    assert data["fps"] == 5  # the toy env's render_fps, read from the mp4
    embedded = eval_page_data(eval_dir, VideoLinker(page, embed=True))
    assert all(e["video"].startswith("data:video/mp4;base64,") for e in embedded["episodes"] if e["video"])


def test_eval_page_draws_actions_beside_states_with_outside_steps_and_chunks(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    data = eval_page_data(eval_dir, VideoLinker(tmp_path / "p.html"))
    assert data["action_space"] == {"low": [-ACTION_BOUND] * 2, "high": [ACTION_BOUND] * 2}
    records = {r.index: r for r in result.episodes}
    n_outside = 0
    for episode in data["episodes"]:
        record = records[episode["index"]]
        actions, states = np.array(record.actions), np.array(record.states)
        assert actions.shape == states.shape == (record.length, 2)
        assert episode["actions"] == [rounded_list(actions[:, d]) for d in range(2)]
        assert episode["states"] == [rounded_list(states[:, d]) for d in range(2)]
        # the state is the one each action acted on: the toy env moves by 0.1 * action
        assert np.allclose(states[0], episode_script(record.seed)["start"])
        assert np.allclose(states[1:], states[:-1] + 0.1 * actions[:-1], atol=1e-3)
        outside = [t for t in range(1, record.length + 1) if (np.abs(actions[t - 1]) > ACTION_BOUND).any()]
        assert episode["outside_steps"] == outside and len(outside) == record.n_actions_outside_space
        assert episode["chunk_steps"] == list(range(1, record.length + 1, 8))  # the toy policy: 8 actions a chunk
        n_outside += len(outside)
    assert 0 < n_outside < sum(r.length for r in result.episodes)  # steps inside and outside the space


def test_eval_page_keeps_the_step_series_of_the_failures_first_within_its_budget(toy_eval_dir, tmp_path, monkeypatch):
    import hfpolicy.viewer.eval_page as eval_page

    eval_dir, result = toy_eval_dir
    order = eval_page_data(eval_dir, VideoLinker(tmp_path / "p.html"))["default_order"]
    lengths = {r.index: r.length for r in result.episodes}
    monkeypatch.setattr(eval_page, "MAX_SERIES_VALUES", sum(4 * lengths[i] for i in order[:3]))  # 2 actions, 2 states
    episodes = {e["index"]: e for e in eval_page_data(eval_dir, VideoLinker(tmp_path / "p.html"))["episodes"]}
    assert [episodes[i]["actions"] is not None for i in order] == [True] * 3 + [False] * (len(order) - 3)
    assert all(len(episodes[i]["states"][0]) == lengths[i] for i in order[:3])


def test_max_reward_histogram_counts_each_episode_in_its_bin(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    histogram = eval_page_data(eval_dir, VideoLinker(tmp_path / "p.html"))["histogram"]
    edges = histogram["edges"]
    assert edges[0] <= min(r.max_reward for r in result.episodes) and edges[-1] >= max(
        r.max_reward for r in result.episodes
    )
    for kind, wanted in (("successes", True), ("failures", False)):
        expected = np.zeros(len(edges) - 1, dtype=int)
        for r in result.episodes:
            if r.success == wanted:
                expected[min(np.searchsorted(edges, r.max_reward, side="right") - 1, len(edges) - 2)] += 1
        assert histogram[kind] == expected.tolist()
    assert sum(histogram["successes"]) + sum(histogram["failures"]) == len(result.episodes)


def test_an_interrupted_eval_shows_the_records_it_kept(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    partial = tmp_path / "partial"
    partial.mkdir()
    lines = (eval_dir / "episodes.jsonl").read_text().splitlines()[:4]
    (partial / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    data = eval_page_data(partial, VideoLinker(tmp_path / "p.html"))
    assert data["partial"] and len(data["episodes"]) == 4
    expected = summarize_episodes(result.episodes[:4], 1.0)
    assert data["aggregated"]["pc_success"] == expected["pc_success"]
    assert data["aggregated"]["pc_success_ci95"] == expected["pc_success_ci95"]


def test_dataset_page_holds_the_episodes_series_and_stats(dataset_root, tmp_path):
    page = tmp_path / "d.html"
    data = dataset_page_data(dataset_root, VideoLinker(page))
    meta = DatasetMeta.load(dataset_root)
    frames = PolicyDataset("local/pusht_demos", root=dataset_root, download_videos=False)
    assert data["fps"] == meta.fps and data["n_episodes"] == 3 and data["n_frames"] == meta.total_frames
    assert data["cameras"] == meta.video_keys == ["observation.image"]
    assert [s["key"] for s in data["series_keys"]] == [
        OBS_STATE,
        ACTION,
        REWARD,
        SUCCESS,
        "observation.environment_state",
    ]
    for position, episode in enumerate(data["episodes"]):
        start, end = frames.episode_bounds[position]
        batch = frames.get_batch(np.arange(start, end))
        assert episode["length"] == end - start == int(meta.episodes.at[episode["index"], "length"])
        assert episode["success"] == bool(batch[SUCCESS].any())
        assert episode["max_reward"] == pytest.approx(float(batch[REWARD].max()), rel=1e-3)
        state = np.array(episode["series"][OBS_STATE]).T  # (frames, dims)
        np.testing.assert_allclose(state, batch[OBS_STATE].numpy(), rtol=1e-3)
        span = episode["cameras"]["observation.image"]
        assert span["to"] - span["from"] == pytest.approx(episode["length"] / meta.fps)
        video = page.parent / data["video_files"][span["file"]]
        assert len(read_video_frames(video, span["from"], span["to"])) == episode["length"]
    features = {f["key"]: f for f in data["features"]}
    assert features[OBS_STATE]["names"] == ["x", "y"]
    assert features[OBS_STATE]["stats"]["mean"] == pytest.approx(meta.stats[OBS_STATE]["mean"].tolist(), rel=1e-3)
    assert "stats" not in features["observation.image"]


def test_run_page_holds_the_curves_and_each_evaluation(toy_eval_dir, tmp_path):
    eval_dir, result = toy_eval_dir
    run = tmp_path / "run"
    run.mkdir()
    (run / TRAIN_CONFIG_FILE).write_text(json.dumps({"steps": 30, "policy": {"type": "toy"}, "batch_size": 4}))
    for step in range(10, 31, 10):
        append_metrics(run / METRICS_FILE, step, {"loss": 1.0 / step, "lr": 1e-3 * (1 - step / 40), "grad_norm": 2.0})
    append_metrics(run / METRICS_FILE, 20, {"loss": math.nan})  # a NaN is logged as null
    for step, n in ((10, 4), (30, 10)):
        folder = run / "eval" / f"step_{step:06d}"
        (folder / "videos").mkdir(parents=True)
        for video in sorted((eval_dir / "videos").glob("*.mp4"))[:1]:
            (folder / "videos" / video.name).write_bytes(video.read_bytes())
        subset = type(result)(result.episodes[:n], 1.0)
        save_eval(subset, folder)
        append_metrics(
            run / METRICS_FILE, step, {f"eval/{k}": v for k, v in subset.aggregated.items() if k != "pc_success_ci95"}
        )
    page = write_run_pages(run, tmp_path / "out" / "run.html")
    data = page_data(page).data
    assert data["curves"]["loss"] == [[10, 20, 30, 20], [0.1, 0.05, pytest.approx(1 / 30, rel=1e-5), None]]
    assert data["curves"]["lr"][0] == [10, 20, 30] and data["policy_type"] == "toy" and data["last_step"] == 30
    assert [e["step"] for e in data["evaluations"]] == [10, 30]
    for evaluation, n in zip(data["evaluations"], (4, 10), strict=True):
        expected = summarize_episodes(result.episodes[:n], 1.0)
        assert evaluation["pc_success"] == expected["pc_success"] and evaluation["n_episodes"] == n
        assert evaluation["ci95"] == expected["pc_success_ci95"]
        eval_page = page.parent / evaluation["page"]
        assert eval_page.is_file() and page_data(eval_page).data["aggregated"]["n_episodes"] == n
    assert run_page_data(run)["evaluations"][0]["page"] is None  # no pages asked for: no links


def test_the_page_is_self_contained_and_its_data_survives_markup(tmp_path):
    data = {"kind": "eval", "title": "a </script><b>title", "note": "</script><script>alert(1)</script>"}
    page = tmp_path / "p.html"
    page.write_text(render_page(data))
    parsed = page_data(page)
    assert parsed.data == data  # nothing in the data can end the script element
    assert parsed.external == []  # no script or stylesheet from anywhere: it works offline
    text = page.read_text()
    assert asset("UPLOT_JS") in text and asset("VIEWER_JS") in text
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in asset("VIEWER_JS")
    with pytest.raises(ValueError, match="kind"):
        render_page({"kind": "nonsense"})


def test_vendored_uplot_is_small_and_licensed():
    import hfpolicy.viewer

    vendor = Path(hfpolicy.viewer.__file__).parent / "vendor"
    assert (vendor / "uPlot.iife.min.js").stat().st_size < 200_000
    assert "MIT License" in (vendor / "uPlot.LICENSE").read_text()


def test_hfpolicy_view_writes_each_kind_and_explains_bad_input(toy_eval_dir, dataset_root, tmp_path, capsys):
    eval_dir, _ = toy_eval_dir
    assert cli_main(["view", str(eval_dir), f"--output={tmp_path / 'e.html'}"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "e.html")
    assert page_data(tmp_path / "e.html").data["kind"] == "eval"
    assert view(dataset_root, tmp_path / "d.html").is_file()
    assert page_data(tmp_path / "d.html").data["kind"] == "dataset"
    assert view(eval_dir / "eval_info.json", tmp_path / "e2.html").is_file()  # the file itself works too
    assert cli_main(["view", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli_main(["view", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "neither a dataset" in err and err.count("\n") == 1
    assert cli_main(["view", str(eval_dir), "--output=report.txt"]) == 2
    assert "--output" in capsys.readouterr().err


def test_hfpolicy_record_prints_the_command_that_opens_the_new_dataset(tmp_path, capsys):
    from hfpolicy.record import main as record_main

    root = tmp_path / "demos"
    assert record_main(["--n_episodes=1", "--max_steps=8", f"--output_dir={root}", "--progress=false"]) == 0
    command = capsys.readouterr().out.strip().splitlines()[-1].removeprefix("look at them: ")
    assert command == f"hfpolicy view {root}"
    assert cli_main(command.split()[1:]) == 0
    assert page_data(root / "view.html").data["episodes"][0]["length"] == 8


def test_videos_go_inside_the_page_only_when_small(toy_eval_dir, tmp_path, monkeypatch):
    import hfpolicy.viewer.page as page_module

    eval_dir, _ = toy_eval_dir
    assert page_data(view(eval_dir, tmp_path / "a.html")).data["episodes"][0]["video"].startswith("data:video/mp4")
    monkeypatch.setattr(page_module, "EMBED_AUTO_MAX_BYTES", 100)  # the toy videos are larger than that together
    linked = page_data(view(eval_dir, tmp_path / "b.html")).data["episodes"][0]["video"]
    assert (tmp_path / linked).is_file()
    assert cli_main(["view", str(eval_dir), f"--output={tmp_path / 'c.html'}", "--embed_videos=true"]) == 0
    assert page_data(tmp_path / "c.html").data["episodes"][0]["video"].startswith("data:video/mp4")
    assert cli_main(["view", str(eval_dir), "--embed_videos=maybe"]) == 2


def test_the_page_json_holds_no_angle_bracket_and_no_line_separator():
    """Every "<" of the data is written \\u003c: "<!--" and "<script" cannot reach the HTML parser (it would leave
    the page blank), and U+2028 / U+2029 are escaped; the JSON reads back the same."""
    from hfpolicy.viewer.page import script_json

    data = {"kind": "dataset", "tasks": ["<!--<script>", "</script>", "a\u2028b\u2029c", "<"], "<k>": 1}
    text = script_json(data)
    assert "<" not in text and "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == data
    assert page_data_of(render_page(data)) == data


def page_data_of(html_text: str):
    parser = PageData()
    parser.feed(html_text)
    return parser.data
