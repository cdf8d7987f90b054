"""What a training run's page holds: its metrics.jsonl curves, the success curve with each evaluation's Wilson
interval and a link to its own page (eval/step_N/view.html), and the run's config."""

import json
from pathlib import Path
from typing import Any

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.io.paths import check_apart, contained_path
from hfpolicy.runs.hparams import flat_hparams
from hfpolicy.runs.metrics_log import read_metrics
from hfpolicy.runs.run_folder import EVAL_DIR, step_folders
from hfpolicy.viewer.eval_page import EPISODES_FILE, eval_page_data, load_eval_info
from hfpolicy.viewer.page import VideoLinker, rounded, should_embed, write_page

EVAL_PAGE_FILE = "view.html"  # each evaluation's page, written beside its videos
TRAIN_CURVES = ("loss", "lr", "grad_norm")  # metrics.jsonl entries drawn over steps when logged


def run_evaluations(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of the run's evaluations that wrote records, by step, each inside the run folder."""
    return [
        (step, contained_path(run_dir, folder.relative_to(run_dir), "the run's evaluation"))
        for step, folder in step_folders(run_dir / EVAL_DIR)
        if (folder / EVAL_INFO_FILE).is_file() or (folder / EPISODES_FILE).is_file()
    ]


def curve(entries: list[dict[str, Any]], key: str) -> list[list[float | None]]:
    """[[steps], [values]] of the entries that logged `key` (non-finite values were logged as null)."""
    points = [(e["step"], e[key]) for e in entries if key in e]
    return [[p[0] for p in points], [rounded(p[1], 6) for p in points]]


def run_page_data(run_dir: str | Path, eval_pages: dict[int, str] | None = None) -> dict[str, Any]:
    """The page data of the run in `run_dir`; `eval_pages` maps an evaluation's step to the URL of its page."""
    run_dir = Path(run_dir)
    entries = read_metrics(contained_path(run_dir, METRICS_FILE, what=f"the run's {METRICS_FILE}"))
    config_path = contained_path(run_dir, TRAIN_CONFIG_FILE, what=f"the run's {TRAIN_CONFIG_FILE}")
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    evaluations = []
    for step, folder in run_evaluations(run_dir):
        aggregated = load_eval_info(folder)["aggregated"]
        evaluations.append(
            {
                "step": step,
                "pc_success": aggregated["pc_success"],
                "ci95": list(aggregated["pc_success_ci95"]),
                "avg_max_reward": rounded(aggregated["avg_max_reward"]),
                "avg_length": rounded(aggregated["avg_length"]),
                "n_episodes": aggregated["n_episodes"],
                "page": (eval_pages or {}).get(step),
            }
        )
    return {
        "kind": "run",
        "title": f"training run: {run_dir.resolve().name}",
        "source": str(run_dir),
        "policy_type": (config.get("policy") or {}).get("type"),
        "steps": config.get("steps"),
        "last_step": entries[-1]["step"] if entries else None,
        "curves": {key: curve(entries, key) for key in TRAIN_CURVES if any(key in e for e in entries)},
        "evaluations": evaluations,
        "config": {k: v for k, v in flat_hparams(config).items() if not k.startswith("policy.input_features")},
    }


def write_run_pages(run_dir: str | Path, page_path: str | Path, embed_videos: bool | None = False) -> Path:
    """Writes each evaluation's page (eval/step_N/view.html), then the run's page at `page_path` linking them."""
    run_dir, page_path = Path(run_dir), Path(page_path)
    evaluations = run_evaluations(run_dir)
    for step, folder in evaluations:  # before any page is written: the run's page replaces none of the others
        eval_page = folder / EVAL_PAGE_FILE
        check_apart(page_path, eval_page, output_words=f"--output={page_path}", source_words=f"the page of step {step}")
    eval_pages = {}
    for step, folder in evaluations:
        eval_page = folder / EVAL_PAGE_FILE
        link = VideoLinker(eval_page, should_embed(folder, embed_videos))
        write_page(eval_page, eval_page_data(folder, link, title=f"evaluation at step {step}"))
        eval_pages[step] = VideoLinker(page_path)(eval_page)  # a relative link, as for a video
    return write_page(page_path, run_page_data(run_dir, eval_pages))
