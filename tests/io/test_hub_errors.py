"""Loading a policy from the Hub: offline mode, no network, a server error, a missing repo and a missing file each
get their own one-line error (from Policy.from_pretrained and from `hfpolicy eval --policy.path`)."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import huggingface_hub.constants as hub_constants
import huggingface_hub.utils._http as hub_http
import pytest
from huggingface_hub import HfApi

from hfpolicy.eval import main as eval_main
from hfpolicy.policies import Policy, PolicyLoadError


class AlwaysFailing(BaseHTTPRequestHandler):
    """A Hub endpoint whose server is broken: every request answers 501 (which the client does not retry)."""

    def do_HEAD(self):
        self.send_response(501)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):
        pass


def use_endpoint(monkeypatch, endpoint: str) -> None:
    """Points the already-imported huggingface_hub at another endpoint (it copies HF_ENDPOINT at import)."""
    monkeypatch.setattr(hub_constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_repo_and_missing_file_are_told_apart(hub_server, capsys):
    with pytest.raises(PolicyLoadError, match=r"there is no Hub repo 'user/no-such-policy-13'.*or it is private"):
        Policy.from_pretrained("user/no-such-policy-13")
    api = HfApi()
    api.create_repo("user/not-a-policy-13")
    api.upload_file(path_or_fileobj=b"# a model card only", path_in_repo="README.md", repo_id="user/not-a-policy-13")
    with pytest.raises(PolicyLoadError, match=r"'user/not-a-policy-13' has no config.json: is it an hfpolicy policy"):
        Policy.from_pretrained("user/not-a-policy-13")
    assert eval_main(["--policy.path=user/not-a-policy-13"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hfpolicy eval: error:") and "has no config.json" in err and "\n" not in err


def test_offline_mode_fails_fast_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    start = time.monotonic()
    assert eval_main(["--policy.path=user/some-policy"]) == 2
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err.strip()
    assert "not in the local Hub cache and HF_HUB_OFFLINE=1" in err and "has no config.json" not in err


def test_a_server_error_is_named_as_such(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), AlwaysFailing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    use_endpoint(monkeypatch, endpoint)
    try:
        with pytest.raises(PolicyLoadError, match=rf"the Hub at {endpoint} answered 501 \(a server error\).*later"):
            Policy.from_pretrained("user/some-policy")
    finally:
        server.shutdown()


class NoWaits:
    """The `time` module as huggingface_hub's HTTP retries see it, without their waits: they back off 1, 2, 4, 8 and 8 s
    on a refused connection before giving up (no setting shortens them)."""

    def __init__(self):
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def __getattr__(self, name):
        return getattr(time, name)


def test_an_unreachable_hub_is_not_reported_as_a_missing_file(monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    use_endpoint(monkeypatch, endpoint)
    retries = NoWaits()
    monkeypatch.setattr(hub_http, "time", retries)  # the client still retries, without ~23 s of waiting
    with pytest.raises(PolicyLoadError, match=rf"cannot reach the Hub at {endpoint} \(ConnectError.*HF_HUB_OFFLINE=1"):
        Policy.from_pretrained("user/some-policy")
    assert retries.waits  # it retried (without the waits) before giving up
