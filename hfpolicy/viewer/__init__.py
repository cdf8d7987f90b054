"""The viewer: one self-contained HTML page (`hfpolicy view PATH`) for a dataset, an evaluation or a training run,
opened in any browser, offline. Each page kind's module computes the page's data (`*_page_data`, JSON-ready dicts);
`page.write_page` puts it, the vendored uPlot library and the page script into one file."""

from hfpolicy.viewer.dataset_page import dataset_page_data
from hfpolicy.viewer.eval_page import eval_page_data
from hfpolicy.viewer.page import VideoLinker, render_page, write_page
from hfpolicy.viewer.run_page import run_page_data, write_run_pages
from hfpolicy.viewer.view import detect_kind, view

__all__ = [
    "VideoLinker",
    "dataset_page_data",
    "detect_kind",
    "eval_page_data",
    "render_page",
    "run_page_data",
    "view",
    "write_page",
    "write_run_pages",
]
