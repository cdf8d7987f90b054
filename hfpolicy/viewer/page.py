"""One HTML file from a page's data: the page script, styles and the vendored uPlot library inline, the data as a JSON
script element, videos linked relative to the page or embedded as data URIs."""

import base64
import json
import math
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hfpolicy.io.atomic import write_atomically

PAGE_KINDS = ("dataset", "eval", "run")
MAX_SERIES_VALUES = 1_500_000  # numbers of per-step series a page holds at most (~9 MB); later episodes go without
EMBED_AUTO_MAX_BYTES = 10_000_000  # `hfpolicy view --embed_videos=auto` puts videos inside a page below this total
ASSETS = {  # placeholder in the template -> package file inlined there
    "UPLOT_CSS": "vendor/uPlot.min.css",
    "UPLOT_JS": "vendor/uPlot.iife.min.js",
    "VIEWER_CSS": "static/viewer.css",
    "VIEWER_JS": "static/viewer.js",
}
TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="hfpolicy view">
<title>{title}</title>
<style>{UPLOT_CSS}</style>
<style>{VIEWER_CSS}</style>
</head>
<body>
<div id="app"></div>
<script id="page-data" type="application/json">{data}</script>
<script>{UPLOT_JS}</script>
<script>{VIEWER_JS}</script>
</body>
</html>
"""


@cache
def asset(name: str) -> str:
    """The text of a packaged asset (hfpolicy/viewer/vendor/..., hfpolicy/viewer/static/...)."""
    return resources.files("hfpolicy.viewer").joinpath(ASSETS[name]).read_text(encoding="utf-8")


def render_page(data: dict[str, Any]) -> str:
    """The page's HTML: `data` (JSON-ready, with "kind" and "title") in a script element, the assets inline."""
    if data.get("kind") not in PAGE_KINDS:
        raise ValueError(f"page data needs a kind among {PAGE_KINDS}, got {data.get('kind')!r}")
    title = str(data.get("title", "hfpolicy")).replace("&", "&amp;").replace("<", "&lt;")
    return TEMPLATE.format(title=title, data=script_json(data), **{name: asset(name) for name in ASSETS})


def script_json(data: Any) -> str:
    """`data` as JSON that stays inert inside an HTML script element: "<" (no "</script", no "<!--"), U+2028 and
    U+2029 escaped; JSON.parse reads the same strings back."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def write_page(path: str | Path, data: dict[str, Any]) -> Path:
    """Writes the page atomically; returns its path."""
    return write_atomically(path, render_page(data))


class VideoLinker:
    """How a page refers to a video: a path relative to the page, or (`embed`) the whole mp4 as a data URI."""

    def __init__(self, page_path: str | Path, embed: bool = False):
        self.page_dir = Path(page_path).resolve().parent
        self.embed = embed

    def __call__(self, video: str | Path) -> str:
        video = Path(video)
        if self.embed:
            return "data:video/mp4;base64," + base64.b64encode(video.read_bytes()).decode("ascii")
        relative = os.path.relpath(os.path.abspath(video), self.page_dir)  # a link's own name (a Hub cache's .mp4)
        return Path(relative).as_posix()


def should_embed(folder: Path, choice: bool | None) -> bool:
    """`choice`, or for None (--embed_videos=auto) whether the mp4s under `folder` total under EMBED_AUTO_MAX_BYTES."""
    if choice is not None:
        return choice
    return sum(video.stat().st_size for video in Path(folder).rglob("*.mp4")) < EMBED_AUTO_MAX_BYTES


def rounded(value: float | None, digits: int = 4) -> float | None:
    """A number with `digits` significant digits (None for None, NaN and inf: JSON has no NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def rounded_list(values, digits: int = 4) -> list[float | None]:
    return [rounded(float(v), digits) for v in values]
