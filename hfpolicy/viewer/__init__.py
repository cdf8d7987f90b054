"""The viewer: one self-contained, offline HTML page (`hfpolicy view PATH`) for a dataset, an evaluation or a run;
each kind's module computes its data (`*_page_data`), `page.write_page` writes it with the page script inline."""

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
