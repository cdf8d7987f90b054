"""A run's metrics.jsonl: one JSON object per line, `{"step": N, "loss": ...}` or `{"step": N, "eval/pc_success": ...}`.
A torn last line (a run killed while appending) is skipped; NaN and inf are written as null."""

import json
import math
from pathlib import Path
from typing import Any

from hfpolicy.io.atomic import write_atomically


class MetricsFileError(ValueError):
    """A metrics.jsonl damaged before its last line (names the file, the line and the fix)."""


FIX = "delete that line (or the file) and run again"


def entry_problem(entry: Any) -> str | None:
    """What makes a parsed line no metrics entry (an object with an integer step and numbers or nulls), or None."""
    if not isinstance(entry, dict) or isinstance(entry.get("step"), bool) or not isinstance(entry.get("step"), int):
        return "not an object with an integer step"
    for key, value in entry.items():
        if value is not None and not isinstance(value, int | float):
            return f"{key} is {json.dumps(value)}, not a number"
    return None


def append_metrics(path: Path, step: int, entry: dict[str, Any]) -> None:
    """Appends one line; non-finite floats become null (JSON has no NaN)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in entry.items()}
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, **clean}, allow_nan=False) + "\n")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The entries of a metrics.jsonl, without a torn last line; ValueError naming the line for damage elsewhere."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    entries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            if number == len(lines):  # cut short by a kill mid-write
                break
            raise MetricsFileError(f"{path} line {number} is not a metrics entry ({e}); {FIX}") from None
        problem = entry_problem(entry)
        if problem is not None:  # whole JSON (never a torn line: a cut object does not parse), but not an entry
            raise MetricsFileError(f"{path} line {number} is not a metrics entry ({problem}); {FIX}")
        entries.append(entry)
    return entries


def truncate_metrics(path: Path, after_step: int) -> None:
    """Drops the entries logged after `after_step` (a resume logs them again), and a torn last line."""
    path = Path(path)
    if path.exists():
        kept = [entry for entry in read_metrics(path) if entry["step"] <= after_step]
        write_atomically(path, "".join(json.dumps(entry) + "\n" for entry in kept))
