"""Test set-up shared by the whole suite.

Hub access: the real huggingface_hub / datasets clients talk to the Hub-protocol test server in tests/hub_server.py
(started once per session on 127.0.0.1). The clients read their settings at import time, so the environment is set
here, before any test module imports them.
"""

import os
import signal
import socket
import sys
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

# Ctrl-C as under a terminal, for this process and every command a test starts (an exec keeps only an ignored signal
# ignored): a suite run as a background job of a script (`bash .ci/run &`) starts with SIGINT ignored, which hfpolicy's
# commands keep ignored on purpose (hfpolicy/training/stopping.py), so the tests that press Ctrl-C would wait forever.
signal.signal(signal.SIGINT, signal.default_int_handler)

from shared_data import PUSHT_ZARR  # noqa: E402 ($HFPOLICY_SHARED_DIR, default ../shared)


@pytest.fixture(scope="session")
def pusht_zarr_path() -> Path:
    """The diffusion_policy PushT zarr in $HFPOLICY_SHARED_DIR/data (default ../shared/data; read-only); tests that
    need it skip where it is absent."""
    if not PUSHT_ZARR.is_dir():
        pytest.skip(
            f"{PUSHT_ZARR} is not present (CI and the dev machines keep it in ../shared beside the clone; "
            "HFPOLICY_SHARED_DIR=DIR points elsewhere)"
        )
    return PUSHT_ZARR


@pytest.fixture(scope="session")
def pusht_state_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5 PushT episodes (418 frames) recorded now by the scripted expert, with the camera and
    observation.environment_state (read-only): the data the training tests train on, made without shared data."""
    from hfpolicy.record import RecordConfig, record

    root = tmp_path_factory.mktemp("pusht_state") / "pusht5"
    return record(
        RecordConfig(n_episodes=5, output_dir=str(root), environment_state=True, repo_id="local/pusht5", progress=False)
    )


@pytest.fixture(scope="session")
def pusht_human_dataset(pusht_zarr_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 5 human demos of the zarr converted to a v3.0 dataset with observation.environment_state
    (read-only): for the tests that learn from real human demonstrations."""
    from hfpolicy.datasets import convert_pusht_zarr

    root = tmp_path_factory.mktemp("pusht_human") / "pusht5"
    return convert_pusht_zarr(
        pusht_zarr_path, root, repo_id="local/pusht5", episodes=list(range(5)), environment_state=True, progress=False
    )


# --- Hub-protocol test server (tests/hub_server.py) -------------------------------------------------------------------
# Repos live for the whole session: give each test its own repo names (e.g. f"user/{test_name}-model").


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory: pytest.TempPathFactory):
    """The Hub-protocol server on HF_ENDPOINT (127.0.0.1:HUB_PORT) for the whole session.

    Yields the `hub_server.HubServer`: `.endpoint`, `.token` (== HF_TOKEN), `.root` (storage dir), `.requests`
    ([(method, URL path as sent, no query)] in order), `.unhandled` (requests it did not serve: unknown routes, crashes).
    """
    from hub_server import HubServer

    try:
        server = HubServer(tmp_path_factory.mktemp("hub"), token=os.environ["HF_TOKEN"], port=HUB_PORT).start()
    except OSError as error:  # the port was free when conftest chose it; another process took it since
        raise RuntimeError(f"HF_ENDPOINT's port {HUB_PORT} is taken ({error}); run the tests again") from error
    assert server.endpoint == os.environ["HF_ENDPOINT"]
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def hf_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty HF cache: env vars (for subprocesses) and the module constants the clients read."""
    home = tmp_path_factory.mktemp("hf_home")
    paths = {
        "HF_HOME": home,
        "HF_HUB_CACHE": home / "hub",
        "HF_ASSETS_CACHE": home / "assets",
        "HF_XET_CACHE": home / "xet",
        "HF_DATASETS_CACHE": home / "datasets",
        "HF_MODULES_CACHE": home / "modules",
    }
    for name, path in paths.items():
        monkeypatch.setenv(name, str(path))
    # Modules imported later read the env vars above; modules already imported copied them into constants.
    if "huggingface_hub" in sys.modules:
        import huggingface_hub.constants as hub_constants
        import huggingface_hub.utils._cache_manager as cache_manager
        from huggingface_hub import HfFileSystem

        for name in ("HF_HOME", "HF_HUB_CACHE", "HF_ASSETS_CACHE", "HF_XET_CACHE"):
            monkeypatch.setattr(hub_constants, name, str(paths[name]))
        monkeypatch.setattr(hub_constants, "HF_TOKEN_PATH", str(home / "token"))
        monkeypatch.setattr(hub_constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
        monkeypatch.setattr(cache_manager, "HF_HUB_CACHE", str(paths["HF_HUB_CACHE"]))
        HfFileSystem.clear_instance_cache()  # its listings of a repo would outlive the test that made them
    if "datasets" in sys.modules:
        import datasets.config as datasets_config

        downloads = paths["HF_DATASETS_CACHE"] / datasets_config.DOWNLOADED_DATASETS_DIR
        monkeypatch.setattr(datasets_config, "HF_CACHE_HOME", str(home))
        monkeypatch.setattr(datasets_config, "HF_DATASETS_CACHE", paths["HF_DATASETS_CACHE"])
        monkeypatch.setattr(datasets_config, "HF_MODULES_CACHE", paths["HF_MODULES_CACHE"])
        monkeypatch.setattr(datasets_config, "DOWNLOADED_DATASETS_PATH", downloads)
        monkeypatch.setattr(
            datasets_config, "EXTRACTED_DATASETS_PATH", downloads / datasets_config.EXTRACTED_DATASETS_DIR
        )
    return home
