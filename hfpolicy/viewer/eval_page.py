"""What an evaluation's page holds (from eval_info.json, or episodes.jsonl alone after an interruption, and videos/):
the aggregates, one row per episode (failures first) with its video and series, the max-reward histogram."""

import json
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from hfpolicy.constants import EVAL_INFO_FILE
from hfpolicy.eval.cli import EPISODES_FILE
from hfpolicy.eval.evaluation import summarize_episodes
from hfpolicy.eval.rollouts import EpisodeRecord
from hfpolicy.io.episode_videos import episode_index_of
from hfpolicy.io.paths import contained_path
from hfpolicy.io.video import probe_video
from hfpolicy.viewer.page import MAX_SERIES_VALUES, rounded, rounded_list

VIDEOS_DIR = "videos"
HISTOGRAM_BINS = 20
STEP_SERIES = ("actions", "states")  # per-step vectors of a record, drawn per dimension
PER_STEP_FIELDS = ("rewards", *STEP_SERIES)  # drawn as curves, not shown in the episode's row
# an episode's row: the record's other fields, and what older evaluations called n_actions_outside_space
RECORD_FIELDS = [f.name for f in fields(EpisodeRecord) if f.name not in PER_STEP_FIELDS] + ["n_clipped_actions"]
NUMBER_FIELDS = ("index", "max_reward", "sum_reward", "length")  # what the page computes with: each record has them


class EvalRecordsError(ValueError):
    """An evaluation's eval_info.json or episodes.jsonl that cannot be read (names the file, the line or record)."""


def checked_record(record: Any, where: str) -> dict[str, Any]:
    """`record` when it is an episode record with the numbers the page needs, else EvalRecordsError naming `where`."""
    if not isinstance(record, dict):
        raise EvalRecordsError(f"{where} is not an episode record (a JSON object): re-run the evaluation")
    lacking = [
        k for k in NUMBER_FIELDS if isinstance(record.get(k), bool) or not isinstance(record.get(k), int | float)
    ]
    lacking += [] if "success" in record else ["success"]
    if lacking:
        raise EvalRecordsError(
            f"{where} has no number for {lacking} (written by another tool or an older hfpolicy?): re-run the "
            "evaluation with `hfpolicy eval`"
        )
    return record


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of an episodes.jsonl; a torn last line is skipped with a warning, damage elsewhere raises."""
    lines = path.read_text().splitlines()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):
                print(f"warning: {path} line {number} is cut short (the evaluation was stopped while writing it): "
                      f"showing the {len(records)} episodes before it", file=sys.stderr)  # fmt: skip
                break
            raise EvalRecordsError(
                f"{path} line {number} is not JSON ({e.msg}): delete that line, or re-run the evaluation"
            ) from None
        records.append(checked_record(record, f"{path} line {number}"))
    return records


def load_eval_info(eval_dir: Path) -> dict[str, Any]:
    """eval_info.json, or the records of episodes.jsonl with their aggregates computed here."""
    info_path = contained_path(eval_dir, EVAL_INFO_FILE, what=f"the evaluation's {EVAL_INFO_FILE}")
    if info_path.is_file():
        try:
            info = json.loads(info_path.read_text())
        except json.JSONDecodeError as e:
            raise EvalRecordsError(f"{info_path} is not JSON ({e}): re-run the evaluation") from None
        if not isinstance(info, dict) or "per_episode" not in info or "aggregated" not in info:
            raise EvalRecordsError(f"{info_path} is not an eval_info.json (no 'aggregated' / 'per_episode' entries)")
        for i, record in enumerate(info["per_episode"]):
            checked_record(record, f"{info_path} per_episode[{i}]")
        return info
    records_path = contained_path(eval_dir, EPISODES_FILE, what=f"the evaluation's {EPISODES_FILE}")
    if not records_path.is_file():
        raise FileNotFoundError(
            f"{eval_dir} holds neither {EVAL_INFO_FILE} nor {EPISODES_FILE}: pass the --output_dir of `hfpolicy eval`"
        )
    per_episode = read_records(records_path)
    if not per_episode:
        raise ValueError(f"{records_path} holds no episode yet")
    per_episode.sort(key=lambda record: record["index"])
    records = [
        EpisodeRecord(**{k: v for k, v in r.items() if k in EpisodeRecord.__dataclass_fields__}) for r in per_episode
    ]
    aggregated = summarize_episodes(records, eval_s=0.0)
    aggregated["eval_s"] = aggregated["episodes_per_s"] = None  # not known from the records alone
    return {"aggregated": aggregated, "per_episode": per_episode, "video_paths": [], "partial": True}


def find_eval_videos(eval_dir: Path, info: dict[str, Any]) -> dict[int, Path]:
    """Episode index -> mp4 inside eval_dir: from videos/, else from eval_info's video_paths (missing ones skipped)."""
    videos = {}
    for path in sorted((eval_dir / VIDEOS_DIR).glob("*.mp4")):
        index = episode_index_of(path)
        if index is not None and index not in videos and path.is_file():
            videos[index] = contained_path(eval_dir, path.relative_to(eval_dir), what=f"the eval video {path.name}")
    for entry in info.get("video_paths", []):
        index = episode_index_of(entry)
        if index is not None and index not in videos and (eval_dir / entry).is_file():
            videos[index] = contained_path(eval_dir, entry, what=f"{EVAL_INFO_FILE} video_paths")
    return videos


def failures_first(episodes: list[dict[str, Any]]) -> list[int]:
    """Episode indices in the table's default order: failures before successes, then lowest max reward first."""
    ordered = sorted(episodes, key=lambda e: (bool(e["success"]), e["max_reward"], e["index"]))
    return [e["index"] for e in ordered]


def max_reward_histogram(episodes: list[dict[str, Any]], n_bins: int = HISTOGRAM_BINS) -> dict[str, list]:
    """Counts of max rewards in equal bins over [0, 1] (or the rewards' wider range), successes and failures apart;
    a value on a bin's upper edge counts in the next bin."""
    values = [float(e["max_reward"]) for e in episodes]
    low, high = min(0.0, *values), max(1.0, *values)
    if high <= low:
        high = low + 1.0
    width = (high - low) / n_bins
    edges = [low + i * width for i in range(n_bins + 1)]
    successes, failures = [0] * n_bins, [0] * n_bins
    for episode, value in zip(episodes, values, strict=True):
        b = min(int((value - low) / width), n_bins - 1)
        (successes if episode["success"] else failures)[b] += 1
    return {"edges": rounded_list(edges, 6), "successes": successes, "failures": failures}


def step_series(record: dict[str, Any], key: str) -> list[list[float | None]]:
    """A record's per-step vectors (`actions`, `states`) as one list per dimension; [] unless a (steps, dims) table."""
    rows = record.get(key) or []
    if not isinstance(rows, list) or not all(isinstance(row, list) and len(row) == len(rows[0]) for row in rows):
        return []
    try:
        return [rounded_list(dimension) for dimension in zip(*rows, strict=True)]
    except (TypeError, ValueError):  # not numbers: drawn as nothing rather than failing the page
        return []


def add_step_series(episodes: list[dict[str, Any]], records: dict[int, dict[str, Any]], order: list[int]) -> None:
    """Each episode's actions and states per dimension, in `order`, up to MAX_SERIES_VALUES (then None)."""
    budget = MAX_SERIES_VALUES
    by_index = {episode["index"]: episode for episode in episodes}
    for index in order:
        series = {key: step_series(records[index], key) for key in STEP_SERIES}
        size = sum(len(values) for dimensions in series.values() for values in dimensions)
        fits = size <= budget
        budget -= size if fits else 0
        by_index[index].update({key: series[key] if fits else None for key in STEP_SERIES})


def eval_page_data(eval_dir: str | Path, link_video: Callable[[Path], str], title: str | None = None) -> dict[str, Any]:
    """The page data of the evaluation in `eval_dir`; `link_video(mp4 path)` gives the page's video URL."""
    eval_dir = Path(eval_dir)
    info = load_eval_info(eval_dir)
    videos = find_eval_videos(eval_dir, info)
    episodes = []
    for record in info["per_episode"]:
        episode = {key: record.get(key) for key in RECORD_FIELDS}
        episode["max_reward"], episode["sum_reward"] = rounded(record["max_reward"]), rounded(record["sum_reward"])
        episode["rewards"] = rounded_list(record.get("rewards") or [])
        video = videos.get(record["index"])
        episode["video"] = link_video(video) if video is not None else None
        episodes.append(episode)
    order = failures_first(episodes)
    add_step_series(episodes, {record["index"]: record for record in info["per_episode"]}, order)
    return {
        "kind": "eval",
        "title": title or f"evaluation: {eval_dir.resolve().name}",
        "source": str(eval_dir),
        "partial": bool(info.get("partial", False)),
        "provenance": info.get("provenance") if isinstance(info.get("provenance"), dict) else None,
        "action_space": info.get("action_space") if isinstance(info.get("action_space"), dict) else None,
        "aggregated": dict(info["aggregated"]),
        "episodes": episodes,
        "default_order": order,
        "histogram": max_reward_histogram(episodes),
        "fps": probe_video(next(iter(videos.values()))).fps if videos else None,
        "n_videos": len(videos),
    }
