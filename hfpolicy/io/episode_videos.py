"""The names of evaluation's episode videos: episode i is filmed as videos/eval_episode_<i>.mp4."""

from collections.abc import Iterable
from pathlib import Path

EPISODE_VIDEO_PREFIX = "eval_episode_"


def episode_video_path(videos_dir: str | Path, index: int) -> Path:
    return Path(videos_dir) / f"{EPISODE_VIDEO_PREFIX}{index}.mp4"


def episode_index_of(video: str | Path) -> int | None:
    """The episode index in an eval video's file name (None for other names)."""
    stem = Path(video).stem
    digits = stem.removeprefix(EPISODE_VIDEO_PREFIX)
    return int(digits) if stem.startswith(EPISODE_VIDEO_PREFIX) and digits.isdigit() else None


def episode_videos(videos: Iterable[str | Path]) -> list[Path]:
    """The eval videos among `videos`, by episode index."""
    indexed = [(index, Path(video)) for video in videos if (index := episode_index_of(video)) is not None]
    return [video for _, video in sorted(indexed)]
