"""Writes that appear whole or not at all: `with replacing(path) as tmp: ...` writes `.<name>.<pid>.tmp` beside `path`
and renames it over `path` (a failed write removes it). Folders: `hfpolicy.io.staging`."""

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
    """`.<name>.<pid>.tmp<suffix>` beside `path` (`suffix` for writers that go by the extension, e.g. ".mp4")."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}{suffix}")


def is_temporary(name: str) -> bool:
    """Whether a file name is one of `temporary_path`'s."""
    return name.startswith(".") and TEMPORARY_SUFFIX in Path(name).suffixes


def output_path_problem(path: str | Path, folder: bool = False) -> str | None:
    """Why a file (or a `folder`) cannot be written at `path` (a folder stands there, or a file where a parent folder
    must be), in words for an error message; None if it can."""
    path = Path(path)
    if not folder and path.is_dir():
        return f"{path} is a folder"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} is a file, not a folder"
    return None


@contextlib.contextmanager
def replacing(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yields the temporary path to write (a file or a symlink), renamed over `path` on leaving; removed on an error."""
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
    """Writes `data` (bytes, or text as UTF-8) to `path` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def write_json_atomically(path: str | Path, data: Any, indent: int | None = 2, allow_nan: bool = True) -> Path:
    """JSON (UTF-8, a final newline) written with `write_atomically`."""
    return write_atomically(path, json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=allow_nan) + "\n")


def save_safetensors_atomically(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """`safetensors.torch.save_file`, atomically and with the umask's permissions (safetensors writes 0600); an I/O
    failure raises OSError with its errno."""
    import safetensors.torch
    from safetensors import SafetensorError

    path = Path(path)
    with replacing(path) as tmp:
        try:
            safetensors.torch.save_file(tensors, str(tmp), metadata=metadata)
        except SafetensorError as e:  # "... (os error 28)": an I/O failure
            found = re.search(r"\(os error (\d+)\)", str(e))
            if found is None:
                raise
            code = int(found.group(1))
            raise OSError(code, os.strerror(code), str(path)) from e
        os.chmod(tmp, 0o666 & ~current_umask())
    return path


def is_disk_full(error: BaseException) -> bool:
    """Whether an error is a full disk (ENOSPC), as OSError, pyarrow or safetensors say it."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    return "(os error 28)" in text or "[Errno 28]" in text or "errno 28" in text.lower()


def free_bytes(folder: str | Path) -> int | None:
    """Bytes free for this user on the disk holding `folder` (or its nearest existing parent), None if unknown."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def current_umask() -> int:
    """The process umask, read from /proc/self/status where Linux has it, else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
