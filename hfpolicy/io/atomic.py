"""Files written atomically: to a temporary name beside the target, then renamed over it, so a reader (or a crash
half-way) never sees a half-written file. A failed write removes its temporary file.

Safetensors files go through `save_safetensors_atomically`, which also makes them honour the umask like every other
file (safetensors' own writer creates them 0600, unreadable to the other users or containers sharing a run) and turns
safetensors' I/O errors into OSError with their errno (ENOSPC: a full disk), so callers handle one kind of error.
"""

import json
import os
import re
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


def save_safetensors_atomically(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """`safetensors.torch.save_file` through a temporary file and a rename, with the umask's permissions; an I/O
    failure raises OSError (errno set, the target as its filename). Returns the path."""
    import safetensors.torch
    from safetensors import SafetensorError

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            safetensors.torch.save_file(tensors, str(tmp), metadata=metadata)
        except SafetensorError as e:
            os_error = safetensors_os_error(e, path)
            if os_error is None:
                raise
            raise os_error from e
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def safetensors_os_error(error: Exception, path: str | Path) -> OSError | None:
    """The OSError behind a SafetensorError ("... (os error 28)"), or None when it was not an I/O failure."""
    found = re.search(r"\(os error (\d+)\)", str(error))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))


def current_umask() -> int:
    """The process umask, read without changing it where Linux says it (/proc/self/status), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
