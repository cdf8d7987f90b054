"""Contract tests for the Hub-protocol test server (tests/hub_server.py), through the REAL huggingface_hub / datasets.

The server lives for the whole session, so each test uses its own repo names; each test has its own empty HF cache
(autouse fixture hf_cache), so every download below really goes over HTTP.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from huggingface_hub import (
    CommitOperationAdd,
    HfApi,
    HfFileSystem,
    PyTorchModelHubMixin,
    constants,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

BIG = 10 * 1024 * 1024 + 123  # over 10 MB: the Hub only takes this through LFS


@pytest.fixture
def api(hub_server) -> HfApi:
    return HfApi(endpoint=hub_server.endpoint, token=hub_server.token)


@pytest.fixture(autouse=True)
def no_unhandled_routes(hub_server):
    """Every request the clients make must hit a route the server knows: a new client endpoint fails here first."""
    before = len(hub_server.unhandled)
    yield
    assert hub_server.unhandled[before:] == []


def read_bytes(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def test_fixtures_point_the_clients_at_the_server(hub_server, hf_cache):
    assert hub_server.endpoint == os.environ["HF_ENDPOINT"] == constants.ENDPOINT
    assert hub_server.token == os.environ["HF_TOKEN"]
    assert constants.HF_HUB_CACHE == str(hf_cache / "hub") == os.environ["HF_HUB_CACHE"]
    assert not any(hf_cache.iterdir())  # a fresh cache for every test
    with pytest.raises(urllib.error.HTTPError) as error:  # unknown routes: 404, logged
        urllib.request.urlopen(f"{hub_server.endpoint}/api/not-a-route")
    assert error.value.code == 404
    assert hub_server.unhandled.pop() == ("GET", "/api/not-a-route")


def test_subprocesses_reach_the_server_and_use_the_test_cache(api, hf_cache):
    api.create_repo("user/from-subprocess")
    api.upload_file(path_or_fileobj=b"hi", path_in_repo="hi.txt", repo_id="user/from-subprocess")
    code = "from huggingface_hub import hf_hub_download; print(hf_hub_download('user/from-subprocess', 'hi.txt'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    path = Path(result.stdout.strip())
    assert path.read_bytes() == b"hi"
    assert path.is_relative_to(hf_cache / "hub")


def test_agent_harness_registry_for_the_user_agent(hub_server, hf_cache, monkeypatch):
    """With telemetry on, the client's user-agent header names the AI agent that runs it, from the Hub's registry
    (fetched once, then cached in the HF home)."""
    from huggingface_hub.utils import _detect_agent, build_hf_headers

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(hf_cache / "agent_harnesses.json"))
    monkeypatch.setattr(_detect_agent, "_registry", None)
    monkeypatch.delenv("AGENT", raising=False)
    monkeypatch.setenv("AI_AGENT", "some-agent")
    start = len(hub_server.requests)
    assert "; agent/unknown" in build_hf_headers()["user-agent"]
    assert "; agent/" in build_hf_headers()["user-agent"]  # the second from the process's copy
    assert hub_server.requests[start:].count(("GET", "/api/agent-harnesses")) == 1
    assert json.loads((hf_cache / "agent_harnesses.json").read_text()) == {
        "standardEnvVars": ["AI_AGENT", "AGENT"], "harnesses": {}
    }  # fmt: skip


def test_whoami_and_create_repo_twice(api, hub_server):
    assert api.whoami()["name"] == "user"
    assert api.create_repo("user/create-twice").repo_id == "user/create-twice"
    assert api.create_repo("user/create-twice", exist_ok=True).repo_id == "user/create-twice"
    with pytest.raises(HfHubHTTPError) as error:
        api.create_repo("user/create-twice")
    assert error.value.response.status_code == 409
    assert api.repo_exists("user/create-twice")
    assert not api.repo_exists("user/never-created")
    assert api.list_repo_files("user/create-twice") == [".gitattributes"]  # the Hub's initial commit
    assert hub_server.requests.count(("POST", "/api/repos/create")) >= 3


def test_upload_file_and_folder_with_a_large_lfs_file(api, tmp_path, hub_server):
    repo_id = "user/upload-model"
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b'{"a": 1}', path_in_repo="config.json", repo_id=repo_id)
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    big = np.random.default_rng(0).integers(0, 256, BIG, dtype=np.uint8).tobytes()
    big_sha256 = hashlib.sha256(big).hexdigest()
    (folder / "big.bin").write_bytes(big)
    (folder / "sub" / "notes.txt").write_text("hello")
    commit = api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="add folder")
    assert len(commit.oid) == 40
    assert ("POST", f"/{repo_id}.git/info/lfs/objects/batch") in hub_server.requests
    assert ("PUT", f"/lfs-upload/{big_sha256}") in hub_server.requests

    assert sorted(api.list_repo_files(repo_id)) == [".gitattributes", "big.bin", "config.json", "sub/notes.txt"]
    entries = {e.path: e for e in api.list_repo_tree(repo_id, recursive=True)}
    assert set(entries) == {".gitattributes", "big.bin", "config.json", "sub", "sub/notes.txt"}
    assert entries["big.bin"].lfs.sha256 == big_sha256 and entries["big.bin"].size == BIG
    assert entries["config.json"].lfs is None
    assert [e.path for e in api.list_repo_tree(repo_id, path_in_repo="sub")] == ["sub/notes.txt"]

    path = hf_hub_download(repo_id, "big.bin")
    assert read_bytes(path) == big
    assert Path(path).resolve().name == big_sha256  # the cache keys LFS blobs by X-Linked-Etag
    assert read_bytes(hf_hub_download(repo_id, "config.json")) == b'{"a": 1}'
    assert api.file_exists(repo_id, "sub/notes.txt") and not api.file_exists(repo_id, "nope.txt")

    n_commits = len(api.list_repo_commits(repo_id))
    api.upload_folder(folder_path=folder, repo_id=repo_id)  # unchanged: preupload's oids let the client skip it
    assert len(api.list_repo_commits(repo_id)) == n_commits

    api.delete_folder("sub", repo_id=repo_id)
    api.delete_file("config.json", repo_id=repo_id)
    assert sorted(api.list_repo_files(repo_id)) == [".gitattributes", "big.bin"]
    with pytest.raises(EntryNotFoundError):
        api.delete_file("config.json", repo_id=repo_id)
    api.delete_repo(repo_id)
    assert not api.repo_exists(repo_id)


def test_tree_pagination(api, hub_server, monkeypatch):
    repo_id = "user/many-files"
    api.create_repo(repo_id)
    ops = [CommitOperationAdd(f"d/f{i:02d}.txt", str(i).encode()) for i in range(25)]
    api.create_commit(repo_id, ops, commit_message="many")
    monkeypatch.setattr(hub_server, "tree_page_size", 7)
    start = len(hub_server.requests)
    assert [e.path for e in api.list_repo_tree(repo_id, path_in_repo="d")] == [f"d/f{i:02d}.txt" for i in range(25)]
    assert sum("/tree/" in path for _, path in hub_server.requests[start:]) == 4  # 7 + 7 + 7 + 4 entries


@pytest.mark.parametrize("repo_type", ["model", "dataset"])
def test_snapshot_and_file_downloads(api, tmp_path, repo_type):
    repo_id = f"user/snapshot-{repo_type}"
    api.create_repo(repo_id, repo_type=repo_type)
    folder = tmp_path / "upload"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "a.json").write_text('{"x": 1}')
    (folder / "data" / "b.txt").write_text("bee")
    (folder / "README.md").write_text(f"# A {repo_type}\n")
    api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type=repo_type)

    local = Path(snapshot_download(repo_id, repo_type=repo_type))
    assert sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file()) == [
        ".gitattributes",
        "README.md",
        "data/a.json",
        "data/b.txt",
    ]
    assert (local / "data" / "b.txt").read_text() == "bee"
    assert (local / "README.md").read_text() == f"# A {repo_type}\n"
    only = Path(snapshot_download(repo_id, repo_type=repo_type, allow_patterns=["*.json"], local_dir=tmp_path / "o"))
    assert [str(p.relative_to(only)) for p in only.rglob("*") if p.is_file() and ".cache" not in p.parts] == [
        "data/a.json"
    ]
    assert read_bytes(hf_hub_download(repo_id, "data/a.json", repo_type=repo_type)) == b'{"x": 1}'


def test_branch_and_tag_revisions_by_name(api):
    repo_id, kind = "user/revisions", {"repo_type": "dataset"}
    api.create_repo(repo_id, **kind)
    api.upload_file(path_or_fileobj=b"v1", path_in_repo="v.txt", repo_id=repo_id, **kind)
    api.create_tag(repo_id, tag="v1.0", **kind)
    api.create_branch(repo_id, branch="dev", **kind)
    api.upload_file(path_or_fileobj=b"dev", path_in_repo="v.txt", repo_id=repo_id, revision="dev", **kind)
    api.upload_file(path_or_fileobj=b"v2", path_in_repo="v.txt", repo_id=repo_id, **kind)

    def read(revision: str) -> bytes:
        return read_bytes(hf_hub_download(repo_id, "v.txt", revision=revision, **kind))

    assert (read("main"), read("v1.0"), read("dev")) == (b"v2", b"v1", b"dev")
    refs = api.list_repo_refs(repo_id, **kind)
    assert sorted(b.name for b in refs.branches) == ["dev", "main"]
    assert [t.name for t in refs.tags] == ["v1.0"]
    tag_sha = refs.tags[0].target_commit
    assert read(tag_sha) == b"v1"
    assert api.dataset_info(repo_id, revision="v1.0").sha == tag_sha
    assert (Path(snapshot_download(repo_id, revision="dev", **kind)) / "v.txt").read_text() == "dev"
    with pytest.raises(HfHubHTTPError) as error:
        api.create_branch(repo_id, branch="dev", **kind)
    assert error.value.response.status_code == 409
    api.create_branch(repo_id, branch="dev", exist_ok=True, **kind)


def test_pull_request_commits(api):
    repo_id = "user/with-pr"
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b"main", path_in_repo="f.txt", repo_id=repo_id)
    commit = api.upload_file(path_or_fileobj=b"proposal", path_in_repo="f.txt", repo_id=repo_id, create_pr=True)
    assert commit.pr_revision == "refs/pr/1"
    assert read_bytes(hf_hub_download(repo_id, "f.txt", revision=commit.pr_revision)) == b"proposal"
    assert read_bytes(hf_hub_download(repo_id, "f.txt")) == b"main"
    refs = api.list_repo_refs(repo_id, include_pull_requests=True)
    assert [r.ref for r in refs.pull_requests] == ["refs/pr/1"]


def test_missing_repo_file_and_revision_raise_the_hub_errors(api):
    repo_id = "user/errors"
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("user/does-not-exist", "x.txt")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("user/does-not-exist")
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("user/does-not-exist", repo_type="dataset")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(repo_id, "missing.txt")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo_id, "x.txt", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(repo_id, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo_id, revision="0" * 40)


def test_private_repos_need_the_token(api, hub_server):
    api.create_repo("user/secret", private=True)
    assert api.model_info("user/secret").private
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub_server.endpoint, token=False).model_info("user/secret")


def test_hf_file_system_listing_paths_info_and_range_reads(api, hub_server):
    repo_id, kind = "user/fs-dataset", {"repo_type": "dataset"}
    api.create_repo(repo_id, **kind)
    blob = bytes(range(256)) * 8000  # 2 MB: LFS by size
    ops = [CommitOperationAdd("meta/info.json", b'{"fps": 10}'), CommitOperationAdd("videos/blob.bin", blob)]
    api.create_commit(repo_id, ops, commit_message="add", **kind)
    infos = api.get_paths_info(repo_id, ["meta", "meta/info.json", "missing"], expand=True, **kind)
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFolder", "meta"), ("RepoFile", "meta/info.json")]
    assert infos[1].last_commit.title == "add"

    fs = HfFileSystem()
    root = f"datasets/{repo_id}"
    assert sorted(fs.ls(root, detail=False)) == [f"{root}/.gitattributes", f"{root}/meta", f"{root}/videos"]
    assert fs.glob(f"{root}/**/*.json") == [f"{root}/meta/info.json"]
    assert fs.info(f"{root}/videos/blob.bin")["size"] == len(blob)
    assert fs.exists(f"{root}/meta/info.json") and not fs.exists(f"{root}/meta/nope.json")
    start = len(hub_server.requests)
    with fs.open(f"{root}/videos/blob.bin", "rb", block_size=4096) as f:
        f.seek(1_500_000)
        assert f.read(100) == blob[1_500_000:1_500_100]
    assert any("/resolve/" in path for _, path in hub_server.requests[start:])

    url = f"{hub_server.endpoint}/{root}/resolve/main/videos/blob.bin"
    for byte_range, (first, last) in {"bytes=10-19": (10, 19), "bytes=-5": (len(blob) - 5, len(blob) - 1)}.items():
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": byte_range})) as response:
            assert response.status == 206
            assert response.headers["Content-Range"] == f"bytes {first}-{last}/{len(blob)}"
            assert response.read() == blob[first : last + 1]


def test_injected_read_failures_answer_501_then_the_file_reads_again(api, hub_server):
    repo_id = "user/fs-faults"
    api.create_repo(repo_id, repo_type="dataset")
    api.upload_file(path_or_fileobj=b"0123456789", path_in_repo="v/a.bin", repo_id=repo_id, repo_type="dataset")
    url = f"{hub_server.endpoint}/datasets/{repo_id}/resolve/main/v/a.bin"

    def status(byte_range: str) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": byte_range})) as response:
                return response.status
        except urllib.error.HTTPError as e:
            return e.code

    hub_server.fail_reads("v/a.bin", after=1, times=2)
    assert [status("bytes=0-3") for _ in range(4)] == [206, 501, 501, 206]
    assert status("bytes=-2") == 206  # no fault left
    hub_server.fail_reads("v/a.bin")  # after=0, times=1: the next GET
    with (
        pytest.raises(HfHubHTTPError, match="501"),
        HfFileSystem().open(f"datasets/{repo_id}/v/a.bin", "rb", block_size=4) as f,
    ):
        f.read(2)
    with HfFileSystem().open(f"datasets/{repo_id}/v/a.bin", "rb", block_size=4) as f:
        f.seek(5)
        assert f.read(3) == b"567"


class TinyNet(torch.nn.Module, PyTorchModelHubMixin):
    def __init__(self, hidden: int = 4):
        super().__init__()
        self.layer = torch.nn.Linear(3, hidden)


def test_pytorch_model_hub_mixin_round_trip():
    torch.manual_seed(0)
    model = TinyNet(hidden=5)
    model.push_to_hub("user/tiny-net")
    loaded = TinyNet.from_pretrained("user/tiny-net")
    assert loaded.layer.out_features == 5
    assert torch.equal(loaded.layer.weight, model.layer.weight)
    assert torch.equal(loaded.layer.bias, model.layer.bias)


CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train/*.parquet
  - split: test
    path: data/test/*.parquet
---
# A dataset
"""


@pytest.mark.parametrize("with_card", [True, False], ids=["card-configs", "file-names"])
def test_parquet_files_load_dataset(api, tmp_path, with_card):
    import datasets

    repo_id = f"user/parquet-{'card' if with_card else 'plain'}"
    api.create_repo(repo_id, repo_type="dataset")
    folder = tmp_path / "ds"
    data = folder / "data"
    train = [
        pa.table({"x": list(range(10)), "y": [i / 2 for i in range(10)]}),
        pa.table({"x": [10, 11], "y": [0.0] * 2}),
    ]
    test = pa.table({"x": [99], "y": [1.0]})
    if with_card:  # splits named by the card's configs
        (data / "train").mkdir(parents=True)
        (data / "test").mkdir()
        paths = [data / "train/0.parquet", data / "train/1.parquet", data / "test/0.parquet"]
        (folder / "README.md").write_text(CARD)
    else:  # splits inferred from file names
        data.mkdir(parents=True)
        paths = [
            data / "train-00000-of-00002.parquet",
            data / "train-00001-of-00002.parquet",
            data / "test-00000-of-00001.parquet",
        ]
    for table, path in zip([*train, test], paths, strict=True):
        pq.write_table(table, path)
    api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="dataset")

    ds = datasets.load_dataset(repo_id)
    assert sorted(ds) == ["test", "train"]
    assert sorted(ds["train"]["x"]) == list(range(12))
    assert ds["test"]["x"] == [99]


def test_streamed_load_dataset_at_a_tag_reads_the_tagged_parquet_files(api, tmp_path, hub_server):
    """What LeRobot's StreamingLeRobotDataset asks of the Hub: `load_dataset(repo, data_files=glob, revision=tag,
    streaming=True)` (one shard per parquet file, rows of the tagged commit), and the video over `hf://` at main."""
    import datasets
    import fsspec

    repo_id, kind = "user/streamed-lerobot", {"repo_type": "dataset"}
    api.create_repo(repo_id, **kind)
    folder = tmp_path / "ds"
    (folder / "data" / "chunk-000").mkdir(parents=True)
    for i, rows in enumerate([range(0, 5), range(5, 8)]):
        pq.write_table(pa.table({"index": list(rows)}), folder / "data" / "chunk-000" / f"file-{i:03d}.parquet")
    (folder / "videos").mkdir()
    (folder / "videos" / "file-000.mp4").write_bytes(bytes(range(256)) * 40)
    api.upload_folder(folder_path=folder, repo_id=repo_id, **kind)
    api.create_tag(repo_id, tag="v3.0", **kind)
    api.upload_file(path_or_fileobj=folder / "data" / "chunk-000" / "file-001.parquet",
                    path_in_repo="data/chunk-000/file-002.parquet", repo_id=repo_id, **kind)  # fmt: skip

    stream = datasets.load_dataset(
        repo_id, split="train", streaming=True, data_files="data/*/*.parquet", revision="v3.0"
    )
    assert stream.num_shards == 2  # the files of the tag, not main's three
    assert sorted(row["index"] for row in stream) == list(range(8))
    assert [row["index"] for row in stream.shard(2, index=1)] == [5, 6, 7]
    start = len(hub_server.requests)
    with fsspec.open(f"hf://datasets/{repo_id}/videos/file-000.mp4", "rb", block_size=1024) as f:
        f.seek(5000)
        assert f.read(10) == (bytes(range(256)) * 40)[5000:5010]
    assert any("/resolve/main/videos/file-000.mp4" in path for _, path in hub_server.requests[start:])


def test_dataset_push_to_hub_and_load_back():
    import datasets

    first = datasets.Dataset.from_dict({"idx": list(range(20)), "name": [f"n{i}" for i in range(20)]})
    first.push_to_hub("user/pushed-ds")
    assert datasets.load_dataset("user/pushed-ds", split="train").to_dict() == first.to_dict()
    second = datasets.Dataset.from_dict({"idx": [7, 8], "name": ["a", "b"]})
    second.push_to_hub("user/pushed-ds")  # replaces the shard and updates the card
    assert datasets.load_dataset("user/pushed-ds", split="train").to_dict() == second.to_dict()
    first.push_to_hub("user/pushed-ds", revision="v1-branch")
    assert datasets.load_dataset("user/pushed-ds", split="train", revision="v1-branch").to_dict() == first.to_dict()


def test_repos_history_and_files_persist_across_a_restart(tmp_path):
    """A server started again on the same root serves the repos the first one kept: files, history, tags, LFS."""
    from hub_server import HubServer

    root, token = tmp_path / "hub", "hf_restart_token"
    with HubServer(root, token=token) as server:
        api = HfApi(endpoint=server.endpoint, token=token)
        api.create_repo("user/kept", repo_type="dataset")
        api.upload_file(path_or_fileobj=b"small", path_in_repo="a.txt", repo_id="user/kept", repo_type="dataset")
        api.upload_file(path_or_fileobj=b"w" * 2000, path_in_repo="w.safetensors", repo_id="user/kept",
                        repo_type="dataset")  # fmt: skip
        api.create_tag("user/kept", tag="v3.0", repo_type="dataset")
        before = api.list_repo_commits("user/kept", repo_type="dataset")
    with HubServer(root, token=token) as server:  # a new process would see the same: all of it is on disk
        api = HfApi(endpoint=server.endpoint, token=token)
        assert [c.commit_id for c in api.list_repo_commits("user/kept", repo_type="dataset")] == [
            c.commit_id for c in before
        ]
        assert [t.name for t in api.list_repo_refs("user/kept", repo_type="dataset").tags] == ["v3.0"]
        for name, data in (("a.txt", b"small"), ("w.safetensors", b"w" * 2000)):
            path = hf_hub_download("user/kept", name, repo_type="dataset", revision="v3.0", endpoint=server.endpoint)
            assert read_bytes(path) == data
        commit = api.upload_file(
            path_or_fileobj=b"more", path_in_repo="b.txt", repo_id="user/kept", repo_type="dataset"
        )
        history = api.list_repo_commits("user/kept", repo_type="dataset")
        assert history[0].commit_id == commit.oid and history[1].commit_id == before[0].commit_id


def read_lines(process: subprocess.Popen, n: int, timeout: float = 60) -> list[str]:
    """The first `n` lines the process prints (AssertionError if it exits or takes longer), read by a thread."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        try:
            got.append(lines.get(timeout=max(0.0, deadline - time.monotonic())).rstrip("\n"))
        except queue.Empty:
            raise AssertionError(f"{n} lines expected within {timeout} s; got {got} (exit {process.poll()})") from None
    return got


def test_the_server_command_prints_its_export_line_and_keeps_its_repos_and_token(tmp_path):
    """`python tests/hub_server.py --root DIR`: the token and the exact `export ...` line; after Ctrl-C and a new
    start on the same root, the same token and the repos pushed through that line."""
    command = [
        sys.executable,
        str(Path(__file__).parent / "hub_server.py"),
        "--root",
        str(tmp_path / "hub"),
        "--port",
        "0",
    ]
    exports = []
    for run in range(2):
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines = read_lines(process, 4)
            assert lines[0].endswith(f"{run} repo(s) kept in {(tmp_path / 'hub').resolve()}")
            export = lines[3]
            variables = dict(item.split("=", 1) for item in export.removeprefix("export ").split())
            assert export.startswith("export ") and set(variables) == {"HF_ENDPOINT", "HF_TOKEN", "HF_HUB_DISABLE_XET"}
            assert (
                variables["HF_ENDPOINT"].startswith("http://127.0.0.1:")
                and f"token: {variables['HF_TOKEN']} " in lines[1]
            )
            api = HfApi(endpoint=variables["HF_ENDPOINT"], token=variables["HF_TOKEN"])
            if run == 0:
                api.create_repo("user/through-the-export-line")
            assert api.repo_exists("user/through-the-export-line")
            exports.append(variables)
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
    assert exports[0]["HF_TOKEN"] == exports[1]["HF_TOKEN"]
