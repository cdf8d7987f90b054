"""`hfpolicy view PATH [--output=report.html]`: the page of a dataset, an evaluation or a training run, chosen by
what the folder holds, written as one HTML file; prints its path.

    hfpolicy view data/pusht_scripted          # a LeRobot v3.0 dataset (meta/info.json)
    hfpolicy view outputs/eval/pusht           # an evaluation (eval_info.json or episodes.jsonl)
    hfpolicy view outputs/train/pusht          # a training run (metrics.jsonl / train_config.json)

The page goes to PATH/view.html unless --output names another file. Videos go inside the page when they are small
(--embed_videos=auto: under 10 MB together; one file to send around), else they are linked by their path relative
to the page (a dataset's videos, usually); --embed_videos=true / false decides it.
"""

from dataclasses import dataclass
from pathlib import Path

from hfpolicy.cli.commands import run_command
from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.io.atomic import output_path_problem
from hfpolicy.viewer.dataset_page import dataset_page_data
from hfpolicy.viewer.eval_page import EPISODES_FILE, eval_page_data
from hfpolicy.viewer.page import VideoLinker, small_enough_to_embed, write_page
from hfpolicy.viewer.run_page import write_run_pages

DEFAULT_PAGE_FILE = "view.html"


@dataclass
class ViewConfig:
    """`hfpolicy view` flags."""

    path: str | None = None  # a dataset root, an evaluation's --output_dir or a training run's folder (positional)
    output: str | None = None  # the HTML file to write (default: PATH/view.html)
    embed_videos: str = "auto"  # put the mp4s inside the page (base64): auto (when under 10 MB together), true, false


def detect_kind(path: Path) -> str:
    """ "dataset", "eval" or "run", from the files in `path`; ValueError naming what was expected otherwise."""
    if (path / INFO_PATH).is_file():
        return "dataset"
    if (path / EVAL_INFO_FILE).is_file() or (path / EPISODES_FILE).is_file():
        return "eval"
    if (path / METRICS_FILE).is_file() or (path / TRAIN_CONFIG_FILE).is_file():
        return "run"
    raise ValueError(
        f"{path} is neither a dataset (no {INFO_PATH}), an evaluation (no {EVAL_INFO_FILE} or {EPISODES_FILE}) nor "
        f"a training run (no {METRICS_FILE} or {TRAIN_CONFIG_FILE}): pass one of those folders"
    )


def embed_choice(flag: str) -> bool | None:
    """--embed_videos=auto|true|false as None (decide by size) / True / False."""
    choices = {"auto": None, "true": True, "false": False}
    if flag.lower() not in choices:
        raise ValueError(f"--embed_videos={flag} is not one of auto, true, false")
    return choices[flag.lower()]


def view(path: str | Path, output: str | Path | None = None, embed_videos: bool | None = None) -> Path:
    """Writes the page of the dataset, evaluation or run at `path`; returns the page's path. `embed_videos`: put
    the videos inside the page (True), link them (False), or decide by their size (None: under 10 MB, inside)."""
    path = Path(path)
    if path.is_file() and path.name == EVAL_INFO_FILE:
        path = path.parent
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist: pass a dataset, evaluation or training run folder")
    kind = detect_kind(path)
    page = Path(output) if output is not None else path / DEFAULT_PAGE_FILE
    if page.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--output={page} must name an .html file")
    problem = output_path_problem(page)
    if problem is not None:
        raise ValueError(f"--output={page} cannot be written ({problem}): name a new .html file")
    if kind == "run":
        return write_run_pages(path, page, embed_videos)
    if embed_videos is None:
        embed_videos = small_enough_to_embed(path)
    link = VideoLinker(page, embed_videos)
    data = dataset_page_data(path, link) if kind == "dataset" else eval_page_data(path, link)
    return write_page(page, data)


def view_command(cfg: ViewConfig) -> str:
    """`hfpolicy view PATH`: writes the page and returns its path (the line printed)."""
    if cfg.path is None:
        raise ValueError("which folder? `hfpolicy view DATASET_OR_RUN_OR_EVAL_DIR [--output=report.html]`")
    return str(view(cfg.path, cfg.output, embed_choice(cfg.embed_videos)))


def main(argv: list[str] | None = None) -> int:
    return run_command("view", argv)
