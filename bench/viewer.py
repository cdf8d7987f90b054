"""The page of a 500-episode evaluation: its size (target < 5 MB without videos) and how long headless Chromium takes
to open it (target < 2 s), then to sort the table and to show another episode.

The evaluation is real code on a synthetic env: `hfpolicy.eval.evaluate` runs 500 episodes of an env whose rewards
rise like PushT's coverage (episodes of 60-300 steps, success at coverage > 0.95 ends the episode), films 4 of them,
and the records are written as `hfpolicy eval` writes them (eval_info.json, episodes.jsonl). Prints a table, then
one JSON line.

    python bench/viewer.py [--n_episodes=500] [--runs=5]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the CDP driver and the toy policy live beside the tests

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from chromium import Chromium, find_chromium  # noqa: E402
from gymnasium import spaces  # noqa: E402
from policies.toy_policy import make_toy_policy  # noqa: E402

from hfpolicy.constants import EVAL_INFO_FILE  # noqa: E402
from hfpolicy.envs import make_vector_env  # noqa: E402
from hfpolicy.eval import evaluate  # noqa: E402
from hfpolicy.eval.cli import EPISODES_FILE  # noqa: E402
from hfpolicy.viewer import view  # noqa: E402

MAX_STEPS = 300  # gym-pusht's time limit


class CoverageLikeEnv(gym.Env):
    """Each seed scripts a coverage curve: a noisy rise towards a final level (1.0 for 60% of seeds); reaching 0.95
    is a success and ends the episode, else the time limit does. Frames (96x96) draw the coverage as a bar."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self):
        self.observation_space = spaces.Dict({"agent_pos": spaces.Box(0.0, 512.0, (2,), np.float64)})
        self.action_space = spaces.Box(0.0, 512.0, (2,), np.float32)
        self.render_mode = "rgb_array"
        self.t, self.curve = 0, np.zeros(MAX_STEPS)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rng = np.random.default_rng(seed)
        final = 1.0 if rng.random() < 0.6 else rng.beta(4, 2)  # ~60% of episodes succeed, as a decent policy's
        rise = rng.uniform(30, 250)
        steps = np.arange(1, MAX_STEPS + 1)
        self.curve = np.clip(final / (1 + np.exp(-(steps - rise) / 20)) + rng.normal(0, 0.01, MAX_STEPS), 0, 1)
        self.t = 0
        return {"agent_pos": rng.uniform(0, 512, 2)}, {}

    def step(self, action):
        reward = float(self.curve[self.t])
        self.t += 1
        success = reward > 0.95
        return (
            {"agent_pos": np.asarray(action, dtype=np.float64)},
            reward,
            success,
            self.t >= MAX_STEPS,
            {"is_success": success},
        )

    def render(self):
        frame = np.full((96, 96, 3), 245, dtype=np.uint8)
        height = int(90 * (self.curve[self.t - 1] if self.t else 0.0))
        frame[93 - height : 93, 40:56] = (59, 91, 219)
        return frame


def run_eval(eval_dir: Path, n_episodes: int) -> float:
    env = make_vector_env([CoverageLikeEnv] * 50)
    start = time.perf_counter()
    try:
        records = open(eval_dir / EPISODES_FILE, "w")  # noqa: SIM115 (as hfpolicy eval writes it)
        with records:
            result = evaluate(
                make_toy_policy(), env, n_episodes, max_steps=MAX_STEPS, n_videos=4, videos_dir=eval_dir / "videos",
                progress=False, on_episode_end=lambda r: records.write(json.dumps(r.to_dict()) + "\n"),
            )  # fmt: skip
    finally:
        env.close()
    result.save(eval_dir / EVAL_INFO_FILE)
    return time.perf_counter() - start


def open_times(page_path: Path, runs: int) -> dict[str, list[float]]:
    """Seconds from navigation to the page drawn (wall, and the page's own performance.now()), then to sort the
    500 rows and to show another episode."""
    times = {"open_s": [], "in_page_s": [], "sort_s": [], "select_s": []}
    with Chromium() as browser:
        for _ in range(runs):
            start = time.perf_counter()
            page = browser.open(page_path.as_uri())
            page.wait_for("document.body.dataset.ready", poll_s=0.005)
            times["open_s"].append(time.perf_counter() - start)
            times["in_page_s"].append(page.evaluate("performance.now()") / 1000)
            times["sort_s"].append(page.evaluate(
                "(() => { const t = performance.now(); document.querySelector('#episodes th[data-key=\"length\"]').click();"
                " return (performance.now() - t) / 1000; })()"
            ))  # fmt: skip
            times["select_s"].append(page.evaluate(
                "(() => { const t = performance.now(); document.querySelector('#episodes tbody tr:nth-child(250)').click();"
                " return (performance.now() - t) / 1000; })()"
            ))  # fmt: skip
            page.send("Page.close")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n_episodes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if find_chromium() is None:
        sys.exit("no Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        eval_dir = Path(tmp) / "eval"
        eval_dir.mkdir()
        eval_s = run_eval(eval_dir, args.n_episodes)
        start = time.perf_counter()
        page = view(eval_dir, embed_videos=False)  # the page without its videos (linked beside it)
        write_s = time.perf_counter() - start
        info = json.loads((eval_dir / EVAL_INFO_FILE).read_text())
        info_mb = (eval_dir / EVAL_INFO_FILE).stat().st_size / 1e6
        page_mb = page.stat().st_size / 1e6
        videos_mb = sum(p.stat().st_size for p in (eval_dir / "videos").glob("*.mp4")) / 1e6
        times = open_times(page, args.runs)
    median = {k: statistics.median(v) for k, v in times.items()}
    steps = sum(e["length"] for e in info["per_episode"])
    rows = [
        ("episodes / steps recorded", f"{args.n_episodes} / {steps}"),
        ("eval success (synthetic)", f"{info['aggregated']['pc_success']:.1f}%"),
        ("eval_info.json", f"{info_mb:.2f} MB"),
        ("page (videos linked)", f"{page_mb:.2f} MB (target < 5)"),
        ("videos beside it (4)", f"{videos_mb:.2f} MB"),
        ("hfpolicy view (write the page)", f"{write_s:.2f} s"),
        (
            f"open in Chromium, median of {args.runs}",
            f"{median['open_s']:.2f} s (target < 2; max {max(times['open_s']):.2f})",
        ),
        ("  of which in the page (performance.now)", f"{median['in_page_s']:.2f} s"),
        ("sort 500 rows / show an episode", f"{1000 * median['sort_s']:.0f} ms / {1000 * median['select_s']:.0f} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps({
        "bench": "viewer", "n_episodes": args.n_episodes, "n_steps": steps, "eval_s": round(eval_s, 2),
        "page_mb": round(page_mb, 3), "eval_info_mb": round(info_mb, 3),
        "write_s": round(write_s, 3), **{f"{k}_median": round(v, 4) for k, v in median.items()},
        "open_s_max": round(max(times["open_s"]), 3), "runs": args.runs, "load": os.getloadavg()[0],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
