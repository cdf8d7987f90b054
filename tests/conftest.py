"""Test set-up shared by the whole suite.

Hub access: the real huggingface_hub / datasets clients talk to the Hub-protocol test server in tests/hub_server.py
(started once per session on 127.0.0.1). The clients read their settings at import time, so the environment is set
here, before any test module imports them.
"""

import os
import socket
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HUB_PORT = _free_port()
os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{HUB_PORT}"
os.environ["HF_TOKEN"] = "hf_test_token_for_the_local_hub_server"
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HUB_OFFLINE"] = "0"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PUSHT_ZARR = SHARED_DATA / "pusht_cchi_v7_replay.zarr"


@pytest.fixture(scope="session")
def pusht_zarr_path() -> Path:
    """The diffusion_policy PushT zarr in ../shared/data (read-only); tests that need it skip where it is absent."""
    if not PUSHT_ZARR.is_dir():
        pytest.skip(f"{PUSHT_ZARR} is not present (it sits beside the clone on CI and dev machines)")
    return PUSHT_ZARR
