"""Writes that appear whole or not at all, one scheme for files and one for folders:

    with replacing(path) as tmp: ...write tmp...   # a file: written as .<name>.<pid>.tmp beside it, renamed over it

A reader (or a crash half-way) never sees a half-written file. A failed write removes its temporary file. Folders are
written the same way, through a staging folder renamed into place: `hfpolicy.io.staging`.

Safetensors files go through `save_safetensors_atomically`, which also makes them honour the umask like every other
file (safetensors' own writer creates them 0600, unreadable to the other users or containers sharing a run) and turns
safetensors' I/O errors into OSError with their errno (ENOSPC: a full disk), so callers handle one kind of error.
"""

import contextlib
import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TEMPORARY_SUFFIX = ".tmp"


def temporary_path(path: str | Path, suffix: str = "") -> Path:
    """Where a file for `path` is written before its rename: `.<name>.<pid>.tmp<suffix>` beside it (`suffix` for
    writers that go by the file's extension, e.g. ".mp4")."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}{suffix}")


def is_temporary(name: str) -> bool:
    """Whether a file name is one of `temporary_path`'s (a write under way, or left by a dead process)."""
    return name.startswith(".") and TEMPORARY_SUFFIX in Path(name).suffixes


def output_path_problem(path: str | Path, folder: bool = False) -> str | None:
    """Why a file (or, with `folder`, a folder) cannot be written at `path`, in words for an error message: a folder
    stands there (a file is to be written), or a file stands where one of its parent folders must be; None if
    neither."""
    path = Path(path)
    if not folder and path.is_dir():
        return f"{path} is a folder"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} is a file, not a folder"
    return None


@contextlib.contextmanager
def replacing(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yields the temporary path to write (a file or a symlink); on leaving, renames it over `path`. On an error (a
    full disk, an unwritable folder, an interrupt) the temporary file is removed and the error raised."""
    path = Path(path)
    tmp = temporary_path(path, suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # its folder may be gone (the error being cleaned up after)
            tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: str | Path, data: bytes | str) -> Path:
    """Writes `data` (bytes, or text as UTF-8) to `path` through a temporary file and a rename; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def write_json_atomically(path: str | Path, data: Any, indent: int | None = 2, allow_nan: bool = True) -> Path:
    """JSON (UTF-8, a final newline) written with `write_atomically`."""
    return write_atomically(path, json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=allow_nan) + "\n")


def save_safetensors_atomically(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """`safetensors.torch.save_file` through a temporary file and a rename, with the umask's permissions; an I/O
    failure raises OSError (errno set, the target as its filename). Returns the path."""
    import safetensors.torch
    from safetensors import SafetensorError

    path = Path(path)
    with replacing(path) as tmp:
        try:
            safetensors.torch.save_file(tensors, str(tmp), metadata=metadata)
        except SafetensorError as e:
            os_error = safetensors_os_error(e, path)
            if os_error is None:
                raise
            raise os_error from e
        os.chmod(tmp, 0o666 & ~current_umask())
    return path


def safetensors_os_error(error: Exception, path: str | Path) -> OSError | None:
    """The OSError behind a SafetensorError ("... (os error 28)"), or None when it was not an I/O failure."""
    found = re.search(r"\(os error (\d+)\)", str(error))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))


def is_disk_full(error: BaseException) -> bool:
    """Whether an error is a full disk (ENOSPC), as OSError says it, or pyarrow and safetensors in their messages."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    return "(os error 28)" in text or "[Errno 28]" in text or "errno 28" in text.lower()


def free_bytes(folder: str | Path) -> int | None:
    """Bytes free for this user on the disk holding `folder` (its nearest existing parent), None if unknown."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


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
