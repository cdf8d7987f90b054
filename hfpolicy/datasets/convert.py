"""`hfpolicy convert <format> ...`: convert other dataset formats to LeRobot v3.0.

hfpolicy convert pusht-zarr ZARR_PATH --output_dir=DIR [--push_to=REPO_ID] [--episodes=[0,1,2]]
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass

from draccus.utils import ParsingError

from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.flags import parse_flags
from hfpolicy.run_lock import RunLockedError
from hfpolicy.termination import stop_on_sigterm


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


def convert_pusht_zarr_command(config: PushTZarrConfig) -> int:
    from hfpolicy.datasets.hub import push_dataset_to_hub
    from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr
    from hfpolicy.datasets.writer import check_dataset_destination

    if not config.zarr_path or not config.output_dir:
        print("hfpolicy convert pusht-zarr: give the zarr path and --output_dir=DIR", file=sys.stderr)
        return 2
    check_dataset_destination(config.output_dir, config.overwrite, cli=True)  # before reading the zarr
    root = convert_pusht_zarr(
        config.zarr_path,
        config.output_dir,
        repo_id=config.repo_id or config.push_to,
        episodes=config.episodes,
        environment_state=config.environment_state,
        overwrite=config.overwrite,
        video_crf=config.video_crf,
    )
    meta = DatasetMeta.load(root)
    print(f"wrote {root}: {meta.total_episodes} episodes, {meta.total_frames} frames (LeRobot v3.0)")
    if config.push_to:
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
        print(f"pushed to {url}")
    return 0


# name -> (config class, the field the positional argument sets, command, one-line help)
CONVERTERS: dict[str, tuple[type, str, Callable[..., int], str]] = {
    "pusht-zarr": (
        PushTZarrConfig,
        "zarr_path",
        convert_pusht_zarr_command,
        "the diffusion_policy PushT zarr -> LeRobot v3.0",
    ),
}


def usage() -> str:
    lines = ["usage: hfpolicy convert <format> INPUT --output_dir=DIR [--flag=value ...]", "", "formats:"]
    lines += [f"  {name:<12} {help_line}" for name, (_, _, _, help_line) in CONVERTERS.items()]
    lines += ["", "`hfpolicy convert <format> --help` lists a format's flags."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in CONVERTERS:
        print(f"hfpolicy convert: unknown format {name!r}; formats: {', '.join(CONVERTERS)}\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    config_class, positional, command, _ = CONVERTERS[name]
    if rest and not rest[0].startswith("-"):  # the input path, given positionally
        rest = [f"--{positional}={rest[0]}", *rest[1:]]
    try:
        with stop_on_sigterm():  # a stopped conversion removes its staging folder
            return command(parse_flags(config_class, rest, prog=f"hfpolicy convert {name}"))
    except (ParsingError, FileNotFoundError, FileExistsError, ValueError, RunLockedError) as e:  # bad input: one line
        print(f"hfpolicy convert {name}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"hfpolicy convert {name}: error: cannot write the dataset: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
