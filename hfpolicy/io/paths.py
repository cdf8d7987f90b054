"""Two fences for paths, each in one place:

    contained_path(root, "videos/x.mp4", what="meta/info.json video_path")   # root / that, or OutsideFolderError
    check_apart(output, source, output_words="--output_dir=out", source_words="the v2.1 dataset src")

`contained_path` is how every reader opens a file that a file names (a dataset's info.json path templates, an
evaluation's eval_info.json video list, a run's evaluation folders): the path, resolved through `..` and symbolic
links, must stay inside the folder it belongs to, so a crafted folder cannot make hfpolicy read (and a page embed, or
a push publish) a file from elsewhere on the machine. The one link that may leave its folder is a huggingface_hub
cache snapshot's link into its own repo's blobs/ folder (the way the Hub cache stores every file).

`check_apart` is how every writer given a source refuses an output that would write into, or replace, that source:
the output may be neither the source nor inside it, and the source may not be inside an output the writer replaces.
"""

import os
from pathlib import Path, PurePath


class OutsideFolderError(ValueError):
    """A path named by a file of a folder (a dataset, an evaluation, a run) leads outside that folder."""


class OutputOverlapsSourceError(ValueError):
    """A writer's output is its own source, lies inside it, or (when the output is replaced) holds it."""


def _hub_cache_blobs(real_root: Path) -> Path | None:
    """The blobs/ folder that a huggingface_hub cache snapshot (<repo>/snapshots/<commit>/) links its files into."""
    if real_root.parent.name == "snapshots":
        return real_root.parent.parent / "blobs"
    return None


def contained_path(root: str | Path, relative: str | PurePath, what: str) -> Path:
    """`root / relative`, once checked to stay inside `root`: `relative` does not climb out with `..`,
    and what it resolves to (symbolic links followed) lies inside `root` (or, for a Hub cache snapshot, is one of its
    repo's blobs). An absolute `relative` passes only when it lies inside `root` too. OutsideFolderError, one line
    naming `what` (e.g. "meta/info.json video_path"), otherwise."""
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
    blobs = _hub_cache_blobs(real_root)
    if not (real.is_relative_to(real_root) or (blobs is not None and real.parent == blobs)):
        raise OutsideFolderError(
            f"{what} names {text!r}, which resolves to {real}, outside {root}: hfpolicy reads only files inside the folder it "
            "is given (copy the file into the folder instead of linking it)"
        )
    return path


def check_apart(
    output: str | Path, source: str | Path, *, output_words: str, source_words: str, replaces_output: bool = True
) -> None:
    """Raises OutputOverlapsSourceError (one line) when the folder `output` is `source`, lies inside it, or, for a
    writer that replaces or clears its output (`replaces_output`), holds it. Both are compared resolved (links and
    `..` followed), before anything is read or written."""
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
