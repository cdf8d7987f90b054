"""Two fences for paths: `contained_path`, how every reader opens a file that a file names (inside its folder only),
and `check_apart`, how every writer refuses an output that would write into, or replace, its source."""

import os
from pathlib import Path, PurePath


class OutsideFolderError(ValueError):
    """A path named by a file of a folder leads outside that folder."""


class OutputOverlapsSourceError(ValueError):
    """A writer's output is its source, lies inside it, or (when replaced) holds it."""


def contained_path(root: str | Path, relative: str | PurePath, what: str) -> Path:
    """`root / relative`, once checked to resolve (links followed) inside `root`, or to one of its repo's blobs for a
    Hub cache snapshot; else OutsideFolderError naming `what` (e.g. "meta/info.json video_path")."""
    root = Path(root)
    text = os.fspath(relative)
    lexical = os.path.normpath(text)
    path = root / text
    if lexical == ".." or lexical.startswith(".." + os.sep):
        raise OutsideFolderError(
            f"{what} names {text!r}, which is outside {root}: hfpolicy reads only files inside the folder it is given "
            "(a crafted or damaged file?)"
        )
    real_root, real = root.resolve(), path.resolve()
    # a huggingface_hub cache snapshot (<repo>/snapshots/<commit>/) links its files into <repo>/blobs/
    in_hub_blobs = real_root.parent.name == "snapshots" and real.parent == real_root.parent.parent / "blobs"
    if not (real.is_relative_to(real_root) or in_hub_blobs):
        raise OutsideFolderError(
            f"{what} names {text!r}, which resolves to {real}, outside {root}: hfpolicy reads only files inside the folder it "
            "is given (copy the file into the folder instead of linking it)"
        )
    return path


def check_apart(
    output: str | Path, source: str | Path, *, output_words: str, source_words: str, replaces_output: bool = True
) -> None:
    """OutputOverlapsSourceError when the folder `output` (resolved) is `source`, lies inside it, or, when the writer
    replaces its output, holds it."""
    out, src = Path(output).resolve(), Path(source).resolve()
    if out == src:
        problem = f"{output_words} is {source_words} itself"
    elif out.is_relative_to(src):
        problem = f"{output_words} lies inside {source_words}"
    elif replaces_output and src.is_relative_to(out):
        problem = f"{source_words} lies inside {output_words}, which would be replaced"
    else:
        return
    raise OutputOverlapsSourceError(
        f"{problem}: choose an output apart from it (hfpolicy never writes into, or over, what it reads)"
    )
