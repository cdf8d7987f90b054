"""`hfpolicy convert <format> ...`: convert other dataset formats to LeRobot v3.0.

hfpolicy convert pusht-zarr ZARR_PATH --output_dir=DIR [--push_to=REPO_ID] [--episodes=[0,1,2]]
hfpolicy convert lerobot-v2.1 REPO_OR_DIR --output_dir=DIR [--revision=REV] [--episodes=[0,1,2]]
"""

import sys
from dataclasses import dataclass
from pathlib import Path

from hfpolicy.cli.commands import main as hfpolicy_main
from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.io.paths import check_apart


@dataclass
class PushTZarrConfig:
    """Convert the diffusion_policy PushT zarr into a LeRobot v3.0 dataset shaped like the Hub's lerobot/pusht."""

    zarr_path: str = ""  # the diffusion_policy zarr folder (pusht_cchi_v7_replay.zarr); also given positionally
    output_dir: str = ""  # the dataset folder to create (it must not exist, unless --overwrite=true)
    push_to: str | None = None  # a Hub repo id to upload the finished dataset to, with a dataset card
    repo_id: str | None = None  # the dataset's name in messages (default: --push_to, else local/<output_dir name>)
    episodes: list[int] | None = None  # zarr episode indices to convert, e.g. [0,1,2] (default: all 206)
    environment_state: bool = False  # also write observation.environment_state (the T's 8 keypoints, 16 floats)
    overwrite: bool = False  # replace output_dir if it exists
    video_crf: int = 23  # H.264 quality of the image videos (lower: better and bigger)
    private: bool = False  # with --push_to: create the Hub repo private
    license: str = "mit"  # with --push_to: the license in the dataset card (the diffusion_policy data is MIT)


def convert_pusht_zarr_command(config: PushTZarrConfig) -> str:
    from hfpolicy.datasets.hub import push_dataset_to_hub  # lazy: heavy (huggingface_hub), not imported by --help
    from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr  # lazy: optional heavy dependency (gym-pusht)
    from hfpolicy.datasets.writer import check_dataset_destination  # lazy: heavy (pyarrow, PyAV), not for --help

    if not config.zarr_path or not config.output_dir:
        raise ValueError("give the zarr path and --output_dir=DIR")
    check_apart(
        config.output_dir, config.zarr_path, output_words=f"--output_dir={config.output_dir}",
        source_words=f"the zarr {config.zarr_path}", replaces_output=config.overwrite,
    )  # fmt: skip
    check_dataset_destination(config.output_dir, config.overwrite, cli=True)  # before reading the zarr
    root = convert_pusht_zarr(  # a stopped conversion (Ctrl-C, SIGTERM) removes its staging folder
        config.zarr_path,
        config.output_dir,
        repo_id=config.repo_id or config.push_to,
        episodes=config.episodes,
        environment_state=config.environment_state,
        overwrite=config.overwrite,
        video_crf=config.video_crf,
    )
    meta = DatasetMeta.load(root)
    wrote = f"wrote {root}: {meta.total_episodes} episodes, {meta.total_frames} frames (LeRobot v3.0)"
    if not config.push_to:
        return wrote
    print(wrote)
    url = push_dataset_to_hub(
        root,
        config.push_to,
        private=config.private,
        license=config.license,
        tags=["pusht", "diffusion_policy", "simulation"],
        description=(
            "PushT demonstrations of Diffusion Policy (Chi et al., 2023), converted from the diffusion_policy "
            "zarr (pusht_cchi_v7_replay.zarr) with hfpolicy. Rewards and success are recomputed with gym-pusht's "
            "coverage of the goal zone."
        ),
    )
    return f"pushed to {url}"


@dataclass
class LeRobotV21Config:
    """Convert a LeRobot v2.1 dataset (one parquet and one mp4 per episode) into a LeRobot v3.0 dataset."""

    source: str = ""  # a local v2.1 dataset folder (with meta/info.json) or a Hub repo id; also given positionally
    output_dir: str = ""  # the v3.0 dataset folder to create (it must not exist, unless --overwrite=true)
    repo_id: str | None = None  # the new dataset's name in its info and messages (default: the source's name)
    revision: str | None = None  # with a Hub repo id: the branch, tag or commit to read (e.g. v2.1)
    episodes: list[int] | None = None  # source episode indices to convert, e.g. [0,1,2] (default: all)
    overwrite: bool = False  # replace output_dir if it exists
    video_crf: int = 18  # H.264 quality of the re-encoded videos (lower: closer to the source and bigger)


def convert_lerobot_v21_command(config: LeRobotV21Config) -> str:
    from hfpolicy.datasets.v21_to_v30 import convert_lerobot_v21  # lazy: heavy (pyarrow, PyAV), not for --help
    from hfpolicy.datasets.writer import check_dataset_destination  # lazy: heavy (pyarrow, PyAV), not for --help

    if not config.source or not config.output_dir:
        raise ValueError("give the v2.1 dataset (a folder or a Hub repo id) and --output_dir=DIR")
    if Path(config.source).expanduser().is_dir():  # a Hub source is checked once downloaded, still before writing
        check_apart(
            config.output_dir, Path(config.source).expanduser(), output_words=f"--output_dir={config.output_dir}",
            source_words=f"the source {config.source}", replaces_output=config.overwrite,
        )  # fmt: skip
    check_dataset_destination(config.output_dir, config.overwrite, cli=True)  # before reading the source
    root = convert_lerobot_v21(  # a stopped conversion (Ctrl-C, SIGTERM) removes its staging folder
        config.source,
        config.output_dir,
        repo_id=config.repo_id,
        revision=config.revision,
        episodes=config.episodes,
        overwrite=config.overwrite,
        video_crf=config.video_crf,
    )
    meta = DatasetMeta.load(root)
    return f"wrote {root}: {meta.total_episodes} episodes, {meta.total_frames} frames (LeRobot v3.0)"


def main(argv: list[str] | None = None) -> int:
    """`hfpolicy convert <format> ...` (the formats are rows of hfpolicy.cli.commands)."""
    return hfpolicy_main(["convert", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
