"""The viewer: one self-contained HTML page (scripts, styles and plots inline; videos linked or embedded) for a
dataset, an evaluation or a training run, written by `hfpolicy view PATH` and opened in any browser, offline.

    hfpolicy view data/pusht_scripted                 # episode list, camera videos, state/action plots, stats
    hfpolicy view outputs/eval/pusht                  # success with its Wilson interval, per-episode table, videos
    hfpolicy view outputs/train/pusht --output=r.html # loss, learning rate and success curves, each evaluation's page

Each page kind has a module that computes what the page holds (`*_page_data`, plain JSON-ready dicts, tested without a
browser), and `page.write_page` puts that data, the vendored uPlot library and the page script into one file.
"""

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
