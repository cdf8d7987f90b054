"""`hfpolicy view PATH`: the one-file HTML page of a dataset (local or a Hub repo id), an evaluation or a training run,
chosen by what the folder holds; videos inside the page when small, else linked (docs/evaluation.md)."""

from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError
from huggingface_hub.utils import validate_repo_id

from hfpolicy.constants import EVAL_INFO_FILE, METRICS_FILE, TRAIN_CONFIG_FILE
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.hub import DatasetDownloadError, download_dataset, download_meta
from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.io.atomic import output_path_problem
from hfpolicy.io.hub_errors import describe_hub_error
from hfpolicy.viewer.dataset_page import dataset_page_data
from hfpolicy.viewer.eval_page import EPISODES_FILE, eval_page_data
from hfpolicy.viewer.page import VideoLinker, should_embed, write_page
from hfpolicy.viewer.run_page import write_run_pages

DEFAULT_PAGE_FILE = "view.html"
HUB_PAGES_DIR = Path("outputs/view")  # a Hub dataset's page: outputs/view/<user>/<name>.html
HUB_EPISODES_SHOWN = 10  # a Hub dataset's page shows its first episodes (only their files are downloaded)


@dataclass
class ViewConfig:
    """`hfpolicy view` flags."""

    path: str | None = None  # a dataset, evaluation or training run folder, or a Hub dataset's repo id (positional)
    output: str | None = None  # the HTML file to write (default: PATH/view.html; outputs/view/<user>/<name>.html)
    embed_videos: str = "auto"  # put the mp4s inside the page (base64): auto (when under 10 MB together), true, false
    episodes: list[int] | None = None  # the dataset episodes shown, e.g. [0,5] (default: all; a Hub dataset's first 10)
    revision: str | None = None  # a Hub dataset's branch, tag or commit (default: main)


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


def view(
    path: str | Path,
    output: str | Path | None = None,
    embed_videos: bool | None = None,
    *,
    episodes: list[int] | None = None,
    revision: str | None = None,
) -> Path:
    """Writes the page of the dataset, evaluation or run at `path` (or of the Hub dataset `path` names, when no such
    folder exists); returns its path. `embed_videos`: True, False, or None (decide by size)."""
    if not Path(path).exists() and is_repo_id(str(path)) and not Path(Path(path).parts[0]).is_dir():
        return view_hub_dataset(str(path), output, embed_videos, episodes, revision)
    path = Path(path)
    if path.is_file() and path.name == EVAL_INFO_FILE:
        path = path.parent
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} does not exist: pass a dataset, evaluation or training run folder, or a Hub dataset's repo id "
            "(tried on the Hub when no folder here has its user's name)"
        )
    kind = detect_kind(path)
    if kind != "dataset" and (episodes is not None or revision is not None):
        raise ValueError(f"--episodes and --revision choose what a dataset's page shows; {path} is not a dataset")
    page = checked_page(Path(output) if output is not None else path / DEFAULT_PAGE_FILE)
    if kind == "run":
        return write_run_pages(path, page, embed_videos)
    link = VideoLinker(page, should_embed(path, embed_videos))
    data = dataset_page_data(path, link, episodes=episodes) if kind == "dataset" else eval_page_data(path, link)
    return write_page(page, data)


def checked_page(page: Path) -> Path:
    """`page` once it is known to be an .html file that can be written (ValueError naming --output otherwise)."""
    if page.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--output={page} must name an .html file")
    problem = output_path_problem(page)
    if problem is not None:
        raise ValueError(f"--output={page} cannot be written ({problem}): name a new .html file")
    return page


def is_repo_id(text: str) -> bool:
    """Whether `text` reads as a Hub repo id (user/name)."""
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return text.count("/") == 1


def view_hub_dataset(
    repo_id: str,
    output: str | Path | None,
    embed_videos: bool | None,
    episodes: list[int] | None,
    revision: str | None,
) -> Path:
    """The page of a Hub dataset, from its meta/ and the shown episodes' files (downloaded into the Hub cache)."""
    page = checked_page(Path(output) if output is not None else HUB_PAGES_DIR / f"{repo_id}.html")
    try:
        meta_root = download_meta(repo_id, revision)  # named by the commit it resolved: the files come from it too
        available = [int(e) for e in DatasetMeta.load(meta_root, repo_id).episodes.index]
        shown = available[:HUB_EPISODES_SHOWN] if episodes is None else sorted(set(episodes))
        unknown = sorted(set(shown) - set(available))
        if unknown:
            raise ValueError(
                f"--episodes: {unknown} are not episodes of {repo_id} (it has {len(available)}, indices "
                f"{available[0]}..{available[-1]})"
            )
        root = download_dataset(repo_id, revision=meta_root.name, episodes=shown)
    except DatasetDownloadError as e:
        raise FileNotFoundError(f"{repo_id} is not a folder here, and {e}") from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
        cause = describe_hub_error(e, repo_id, INFO_PATH, revision)
        raise FileNotFoundError(f"{repo_id} is not a folder here, and as a Hub dataset: {cause}") from None
    link = VideoLinker(page, should_embed(root, embed_videos))
    source = f"{repo_id} (Hub dataset, commit {meta_root.name[:12]})"
    data = dataset_page_data(root, link, repo_id=repo_id, episodes=shown, source=source)
    return write_page(page, data)


def view_command(cfg: ViewConfig) -> str:
    """`hfpolicy view PATH`: writes the page and returns its path (the line printed)."""
    if cfg.path is None:
        raise ValueError(
            "which folder? `hfpolicy view DATASET_OR_RUN_OR_EVAL_DIR_OR_HUB_DATASET [--output=report.html]`"
        )
    embed = embed_choice(cfg.embed_videos)
    return str(view(cfg.path, cfg.output, embed, episodes=cfg.episodes, revision=cfg.revision))
