"""Files written atomically: to a temporary name beside the target, then renamed over it, so a reader (or a crash
half-way) never sees a half-written file."""

import json
import os
from pathlib import Path
from typing import Any


def write_atomically(path: str | Path, data: bytes | str) -> Path:
    """Writes `data` (bytes, or text as UTF-8) to `path` through a temporary file and a rename; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, an unwritable folder, an interrupt: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomically(path: str | Path, data: Any, indent: int = 2) -> Path:
    """JSON (UTF-8, a final newline) written with `write_atomically`."""
    return write_atomically(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
