"""The training curve PNG (hfpolicy.runs.curve): drawn from metrics.jsonl, eval markers whole at 0%."""

import json

import numpy as np
from matplotlib.image import imread

from hfpolicy.runs.curve import draw_training_curve

GREEN = np.array([44, 160, 44]) / 255  # matplotlib's tab:green, the eval success markers


def curve_with_success(tmp_path, name: str, success: float) -> np.ndarray:
    metrics = tmp_path / f"{name}.jsonl"
    entries = [{"step": step, "loss": 1.0 / step} for step in range(1, 101)]
    entries += [{"step": step, "eval/pc_success": success} for step in (20, 60, 100)]
    metrics.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return imread(draw_training_curve(metrics, tmp_path / f"{name}.png"))[..., :3]


def green_pixels(image: np.ndarray) -> int:
    return int((np.abs(image - GREEN).max(axis=-1) < 0.08).sum())


def test_zero_success_markers_are_drawn_whole(tmp_path):
    at_zero, at_half = curve_with_success(tmp_path, "zero", 0.0), curve_with_success(tmp_path, "half", 50.0)
    assert green_pixels(at_half) > 100
    # The same markers and line: as many green pixels at 0% as at 50% (a frame at 0 would cut the markers in half).
    assert green_pixels(at_zero) > 0.9 * green_pixels(at_half), (green_pixels(at_zero), green_pixels(at_half))
