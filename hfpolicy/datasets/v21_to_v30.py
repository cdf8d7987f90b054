"""Convert a LeRobot v2.1 dataset (a local root or a Hub repo) into a v3.0 one: each episode read by `PolicyDataset`
and written again by `DatasetWriter` (videos re-encoded as H.264, the rest exactly; episodes numbered 0..)."""

from collections.abc import Sequence
from pathlib import Path

from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError
from huggingface_hub.utils import validate_repo_id
from tqdm.auto import tqdm

from hfpolicy.constants import TASK
from hfpolicy.datasets.dataset import PolicyDataset
from hfpolicy.datasets.format import BOOKKEEPING_FEATURES, DatasetFormatError
from hfpolicy.datasets.legacy_v21 import is_v21
from hfpolicy.datasets.writer import DatasetWriter
from hfpolicy.io.paths import check_apart


def open_v21_source(source: str, revision: str | None = None, episodes: Sequence[int] | None = None) -> PolicyDataset:
    """`source` as a v2.1 dataset: a folder, else a Hub repo id (user/name); anything else is a FileNotFoundError."""
    path = Path(source).expanduser()
    if path.is_dir():
        dataset = PolicyDataset(path.name, root=path, episodes=episodes)
    elif path.exists():
        raise FileNotFoundError(f"{source} is a file, not a dataset folder: pass the folder that holds meta/info.json")
    else:
        try:
            validate_repo_id(source)
        except HFValidationError:
            raise FileNotFoundError(
                f"no such folder: {source} (the v2.1 dataset to convert: a folder holding meta/info.json, or a Hub "
                "repo id user/name)"
            ) from None
        try:
            dataset = PolicyDataset(source, revision=revision, episodes=episodes)
        except (HfHubHTTPError, LocalEntryNotFoundError) as e:
            raise FileNotFoundError(
                f"could not download the dataset {source!r} from the Hub ({type(e).__name__}: "
                f"{str(e).splitlines()[0]}); check the repo id and the network (there is no folder {source} here either)"
            ) from None
    if not is_v21(dataset.info):
        raise DatasetFormatError(
            f"{source} is a LeRobot {dataset.info['codebase_version']} dataset, not v2.1: hfpolicy reads it as it is "
            "(there is nothing to convert)"
        )
    return dataset


def convert_lerobot_v21(
    source: str,
    output_dir: str | Path,
    *,
    repo_id: str | None = None,
    revision: str | None = None,
    episodes: Sequence[int] | None = None,
    overwrite: bool = False,
    video_crf: int = 18,
    progress: bool = True,
) -> Path:
    """Writes the v2.1 dataset `source` (a folder, or a Hub repo id) as a v3.0 dataset at `output_dir`."""
    dataset = open_v21_source(source, revision=revision, episodes=episodes)
    check_apart(
        output_dir,
        dataset.root,
        output_words=f"output_dir={output_dir}",
        source_words=f"the source {source}",
        replaces_output=overwrite,
    )
    features = {
        key: {"dtype": ft["dtype"], "shape": list(ft["shape"]), "names": ft.get("names")}
        for key, ft in dataset.features.items()
        if key not in BOOKKEEPING_FEATURES
    }
    with DatasetWriter.create(
        output_dir,
        repo_id or dataset.repo_id,
        dataset.fps,
        features,
        dataset.info.get("robot_type"),
        overwrite=overwrite,
        video_crf=video_crf,
    ) as writer:
        for episode_pos in tqdm(range(dataset.num_episodes), desc=f"converting {source}", disable=not progress):
            frames = dataset.episode_frames(episode_pos)
            for i, task in enumerate(frames[TASK]):
                writer.add_frame({key: frames[key][i] for key in features}, task=task)
            writer.save_episode()
    return Path(output_dir)
