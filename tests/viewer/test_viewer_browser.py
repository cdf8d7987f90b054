"""The viewer in a real browser: headless Chromium (Debian's package; .ci/run installs it) opens the pages, the test
reads the episode table from the DOM, clicks an episode, checks that its video (an H.264 mp4 as hfpolicy writes it)
loads and that moving the time cursor moves the plots' marker, and saves screenshots under the test's tmp dir."""

import json

import numpy as np
import pytest
from chromium import Chromium, find_chromium
from viewer.viewer_inputs import pusht_eval, recorded_dataset

from hfpolicy.viewer import VideoLinker, eval_page_data, view

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium; .ci/run installs it)"
)

ROWS = "[...document.querySelectorAll('#episodes tbody tr')]"
VIDEO_STATE = """(() => { const v = document.querySelector('#episode video');
  return v && (v.readyState >= 2 || v.error) ? {ready: v.readyState, error: v.error && v.error.code,
  width: v.videoWidth, duration: v.duration} : null; })()"""
MARKERS = "[...document.querySelectorAll('#episode .marker')].map(m => parseFloat(m.style.left))"


def move_cursor(page, frame: int) -> None:
    page.evaluate(
        f"(() => {{ const s = document.getElementById('time-cursor'); s.value = {frame}; "
        "s.dispatchEvent(new Event('input')); })()"
    )


@pytest.fixture(scope="module")
def browser():
    with Chromium(CHROMIUM) as chromium:
        yield chromium


PROVENANCE = {
    "policy": "user/pusht-toy",
    "policy_type": "toy",
    "revision": "main",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "checkpoint_step": 4000,
    "ema_weights": True,
    "env": "pusht",
    "command": "hfpolicy eval --policy.path=user/pusht-toy --env.type=pusht",
    "hfpolicy_version": "0.1.0",
}


def test_eval_page_in_chromium(browser, tmp_path):
    eval_dir = tmp_path / "eval"
    result = pusht_eval(eval_dir, n_episodes=5, n_videos=2, episode_length=20)
    info = json.loads((eval_dir / "eval_info.json").read_text())
    (eval_dir / "eval_info.json").write_text(json.dumps({**info, "provenance": PROVENANCE}))  # as `hfpolicy eval` says
    page_path = view(eval_dir)  # small videos: inside the page
    assert page_path.read_text().count("data:video/mp4;base64,") == 2
    expected = eval_page_data(eval_dir, VideoLinker(page_path))
    page = browser.open(page_path.as_uri())
    page.wait_for("document.body.dataset.ready")

    rows = page.evaluate(f"{ROWS}.map(r => [r.dataset.index, ...[...r.cells].slice(1).map(c => c.textContent.trim())])")
    assert [int(r[0]) for r in rows] == expected["default_order"]  # failures first, lowest max reward first
    records = {r.index: r for r in result.episodes}
    filmed = page.evaluate(f"{ROWS}.filter(r => r.querySelector('.filmed')).map(r => Number(r.dataset.index))")
    assert sorted(filmed) == [0, 1]  # the episodes with a video are marked
    for row in rows:
        record = records[int(row[0])]
        assert row[1] == ("success" if record.success else "failure") and int(row[4]) == record.length
        assert float(row[2]) == pytest.approx(record.max_reward, rel=2e-3, abs=1e-3)

    # Click the filmed episode that is not shown yet.
    shown = page.evaluate("document.querySelector('#episodes tr.selected').dataset.index")
    target = next(i for i in (0, 1) if str(i) != shown)
    page.evaluate(f"document.querySelector('#episodes tr[data-index=\"{target}\"]').click()")
    assert page.evaluate("document.querySelector('#episodes tr.selected').dataset.index") == str(target)
    assert f"episode {target} " in page.evaluate("document.querySelector('#episode h2').textContent")
    state = page.wait_for(VIDEO_STATE)
    # Debian's Chromium decodes H.264; an error code here (4: MEDIA_ERR_SRC_NOT_SUPPORTED) would say it cannot.
    assert state["error"] is None, f"the video did not load: MediaError code {state['error']}"
    assert state["ready"] >= 2 and state["width"] == 96
    assert state["duration"] == pytest.approx((records[target].length + 1) / expected["fps"], abs=0.11)

    before = page.evaluate(MARKERS)
    move_cursor(page, 12)
    after = page.wait_for(
        f"(() => {{ const m = {MARKERS}; return m.every((x, i) => x > {before}[i] + 1) ? m : null; }})()"
    )
    assert len(after) == 3  # the reward curve's marker, and those of the two action dimensions' plots
    assert page.wait_for("Math.abs(document.querySelector('#episode video').currentTime - 12.25 / 10) < 1e-3")
    move_cursor(page, 3)
    assert page.wait_for(f"{MARKERS}[0] < {after[0]} - 1")  # and back

    # Per action dimension: the commanded action beside the state, the space's bounds, outside steps, new chunks.
    titles = page.evaluate("[...document.querySelectorAll('#episode .plot .title')].map(t => t.textContent)")
    assert titles[1:] == [f"action {d} (commanded) and state {d} over the steps" for d in (0, 1)]
    legend = page.evaluate("[...document.querySelectorAll('#episode .plot')][1].querySelector('.u-legend').textContent")
    for label in ("action 0", "state 0", "action space low", "action space high", "outside the action space"):
        assert label in legend
    shown = records[target]
    assert page.evaluate("document.getElementById('chunk-note').textContent") == (
        f"{len(shown.chunk_steps)} predicted chunks (black dots: their first steps) · red dots: "
        f"{len(shown.outside_steps)} steps outside the action space"
    )
    assert shown.chunk_steps == [1, 9, 17]  # the toy policy predicts 8 actions a chunk
    cells = page.evaluate(
        "[...document.querySelectorAll('#provenance div')].map(d => [...d.children].map(c => c.textContent))"
    )
    assert ["checkpoint step", "4000"] in cells and ["EMA weights", "yes"] in cells
    assert ["command", PROVENANCE["command"]] in cells and ["commit", PROVENANCE["commit"]] in cells

    page.evaluate("document.querySelector('#episodes th[data-key=\"max_reward\"]').click()")
    ascending = page.evaluate(f"{ROWS}.map(r => Number(r.cells[2].textContent))")
    page.evaluate("document.querySelector('#episodes th[data-key=\"max_reward\"]').click()")
    descending = page.evaluate(f"{ROWS}.map(r => Number(r.cells[2].textContent))")
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert page.evaluate("document.querySelectorAll('#histogram canvas').length") == 1

    shot = page.screenshot(tmp_path / "eval_page.png")
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one


def test_dataset_page_in_chromium(browser, tmp_path):
    root = recorded_dataset(tmp_path / "demos", n_episodes=2, max_steps=30)
    page = browser.open(view(root, embed_videos=False).as_uri())  # linked by relative path (the eval's are inside)
    page.wait_for("document.body.dataset.ready")
    assert page.evaluate(f"{ROWS}.map(r => Number(r.dataset.index))") == [0, 1]
    page.evaluate("document.querySelector('#episodes tr[data-index=\"1\"]').click()")
    state = page.wait_for(VIDEO_STATE)
    assert state["error"] is None and state["width"] == 96
    before = page.evaluate(MARKERS)
    assert len(before) == 5  # state, action, reward, success, keypoints: each follows the cursor
    move_cursor(page, 20)
    after = page.wait_for(
        f"(() => {{ const m = {MARKERS}; return m.every((x, i) => x > {before}[i] + 1) ? m : null; }})()"
    )
    assert len(set(after)) == 1  # the same frame on every plot
    # Episode 1 starts 3 s into the shared mp4 (episode 0 has 30 frames at 10 fps): the video seeks into its span.
    assert page.wait_for("Math.abs(document.querySelector('#episode video').currentTime - (3 + 20.25 / 10)) < 1e-3")
    page.evaluate(
        "(() => { const f = document.getElementById('filter-length'); f.value = 1000; f.dispatchEvent(new Event('input')); })()"
    )
    assert page.evaluate(f"{ROWS}.length") == 0
    page.screenshot(tmp_path / "dataset_page.png")


# Strings that, put in a page's inline JSON unescaped, end its script element, turn the HTML parser into its
# (double-)escaped script states (a blank page), or would run script if the page ever wrote them as HTML.
PAYLOADS = [
    "<!--<script>",
    "</script><script>window.__payload_ran = 1</script>",
    "<script>window.__payload_ran = 2</script>",
    '<img src=x onerror="window.__payload_ran = 3">',
    '<svg onload="window.__payload_ran = 4">',
    "<!--",
    "-->",
    "</SCRIPT ><!-- <script>",
    "<![CDATA[ ]]>",
    "\u2028\u2029 line separators",
    '<iframe srcdoc="<script>parent.__payload_ran = 5</script>">',
    "&lt;/script&gt; \" ' ` ${1}",
]
FEATURE_PAYLOADS = ["<!--<script>", "<img src=x onerror=window.__payload_ran=6>"]  # no "/": not in feature names


def assert_drawn_and_inert(page, texts):
    """The page drew (the viewer script ran to its end), no payload ran, and each payload reads as plain text."""
    page.wait_for("document.body.dataset.ready", timeout=10)
    assert page.evaluate("window.__payload_ran === undefined")
    body = page.evaluate("document.body.textContent")
    for text in texts:
        assert text in body


def test_payloads_in_task_strings_and_feature_names_stay_text(browser, tmp_path):
    from hfpolicy.datasets import DatasetWriter

    names = {"observation.state": FEATURE_PAYLOADS[0], "action": FEATURE_PAYLOADS[1]}
    features = {key: {"dtype": "float32", "shape": [1], "names": [name]} for key, name in names.items()}
    features[FEATURE_PAYLOADS[0]] = {"dtype": "float32", "shape": [1], "names": None}
    writer = DatasetWriter.create(tmp_path / "payloads", "user/payloads", 10, features)
    with writer:
        for episode, task in enumerate(PAYLOADS):
            for i in range(3):
                writer.add_frame({key: np.full(1, episode + i, np.float32) for key in features}, task=task)
            writer.save_episode()
    page = browser.open(view(tmp_path / "payloads").as_uri())
    assert_drawn_and_inert(page, [p.replace("\u2028", "").replace("\u2029", "") for p in PAYLOADS[:9]])


def test_payloads_in_eval_records_stay_text(browser, tmp_path):
    eval_dir = tmp_path / "<!--<script>eval"
    eval_dir.mkdir()
    pusht_eval(eval_dir, n_episodes=2, n_videos=0, episode_length=5)
    info = json.loads((eval_dir / "eval_info.json").read_text())
    info["aggregated"].update({f"note {i}": text for i, text in enumerate(PAYLOADS)})
    for record, text in zip(info["per_episode"], PAYLOADS, strict=False):
        record["seed"] = text
    info["provenance"] = {**{f"key {text}": text for text in PAYLOADS}, "policy": PAYLOADS[1], "command": PAYLOADS[3]}
    (eval_dir / "eval_info.json").write_text(json.dumps(info))
    page = browser.open(view(eval_dir).as_uri())
    assert_drawn_and_inert(page, ["<!--<script>eval", PAYLOADS[0], PAYLOADS[1], PAYLOADS[3], f"key {PAYLOADS[2]}"])
