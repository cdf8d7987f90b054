"""Writes tests/datasets/data/lerobot_v21_tiny: a tiny dataset in LeRobot's v2.1 layout, written by LeRobot itself.

Run it in a side venv with a LeRobot release that writes v2.1 (0.3.3, the last one before v3.0), not in hfpolicy's:

    python3.12 -m venv /tmp/lerobot21 && /tmp/lerobot21/bin/pip install lerobot==0.3.3 av==15.1.0
    HF_HUB_OFFLINE=1 /tmp/lerobot21/bin/python tests/datasets/data/make_lerobot_v21_tiny.py

Three episodes (lengths 12, 7, 15) at 10 fps with two tasks, a video camera (AV1, LeRobot's default codec), an image
camera (PNG in the parquet), a 3-d state and a 2-d action whose values say which episode and frame they belong to.
(LeRobot 0.3.3 fails with PyAV >= 16, whose stream rates are no longer numbers: hence av==15.1.0. The committed copy
was made with lerobot 0.3.3, torch 2.7.1, datasets 3.6.0, av 15.1.0; its temporary images/ folder removed.)
"""

import shutil
import sys
from pathlib import Path

import numpy as np
from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset

OUT = Path(__file__).parent / "lerobot_v21_tiny"
LENGTHS = (12, 7, 15)
TASKS = ("push the block", "lift the cube", "push the block")
H, W = 48, 64

FEATURES = {
    "observation.images.top": {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]},
    "observation.images.wrist": {"dtype": "image", "shape": (H, W, 3), "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float32", "shape": (3,), "names": ["x", "y", "z"]},
    "action": {"dtype": "float32", "shape": (2,), "names": ["vx", "vy"]},
}


def frame(episode: int, i: int, rng: np.random.Generator) -> dict:
    """A frame whose images are smooth (they survive the codec) and whose numbers name episode and frame."""
    yy, xx = np.mgrid[0:H, 0:W]
    top = np.stack([(xx * 4 + i * 8) % 256, (yy * 5 + episode * 60) % 256, np.full_like(xx, 40 * episode)], -1)
    wrist = rng.integers(0, 256, size=(H, W, 3))
    return {
        "observation.images.top": top.astype(np.uint8),
        "observation.images.wrist": wrist.astype(np.uint8),
        "observation.state": np.array([episode, i, rng.normal()], dtype=np.float32),
        "action": np.array([episode + i / 100, rng.normal()], dtype=np.float32),
    }


def main() -> int:
    assert CODEBASE_VERSION == "v2.1", f"this LeRobot writes {CODEBASE_VERSION}, not v2.1: use lerobot==0.3.3"
    if OUT.exists():
        shutil.rmtree(OUT)
    dataset = LeRobotDataset.create("hfpolicy/lerobot_v21_tiny", fps=10, features=FEATURES, root=OUT)
    rng = np.random.default_rng(0)
    for episode, (length, task) in enumerate(zip(LENGTHS, TASKS, strict=True)):
        for i in range(length):
            dataset.add_frame(frame(episode, i, rng), task=task)
        dataset.save_episode()
    shutil.rmtree(OUT / "images", ignore_errors=True)  # LeRobot's temporary PNGs of the video frames
    print(f"wrote {OUT}: {sum(LENGTHS)} frames, {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
