"""A benchmark's own Hub: starts tests/hub_server.py's Hub-protocol server on 127.0.0.1 in `workdir` and points
huggingface_hub's environment at it (HF_ENDPOINT, a token, no Xet, online); call it before huggingface_hub is
imported, since huggingface_hub reads these variables at import."""

import os
import sys
from pathlib import Path

TOKEN = "hf_bench_token"


def start_local_hub(workdir: Path):
    """The started server (call `.stop()` when done); HF_HOME is `workdir/hf_home`."""
    os.environ.update(
        HF_HOME=str(workdir / "hf_home"), HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1", HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
    )  # fmt: skip
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hub_server import HubServer

    server = HubServer(workdir / "hub", token=TOKEN).start()
    os.environ["HF_ENDPOINT"] = server.endpoint
    return server
