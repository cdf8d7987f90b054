"""A Hub-protocol HTTP server for tests (a test double: standard library only, not part of hfpolicy).

It speaks the subset of the Hugging Face Hub HTTP API that the real `huggingface_hub` (HfApi, hf_hub_download,
snapshot_download, HfFileSystem, PyTorchModelHubMixin) and `datasets` (load_dataset, Dataset.push_to_hub) clients use,
so tests exercise those clients unchanged against 127.0.0.1. Repos are git-like history: every commit is a full
snapshot {path: blob}, refs are branches / tags / pull-request heads, commit oids are 40-hex. File contents are stored
once per sha256 under `<root>/objects/`, and each repo's state is written to `<root>/repos/` as JSON after every
change, so a server started again on the same root serves the same repos.

For local use (pushing and loading without an account), run it on a root that stays:

    python tests/hub_server.py --root ~/.cache/hfpolicy-hub [--port 8765]

It prints the token (kept in `<root>/token`, the same on every start) and the line that points the Hub clients at it,
`export HF_ENDPOINT=http://127.0.0.1:8765 HF_TOKEN=... HF_HUB_DISABLE_XET=1`, and serves until Ctrl-C. The token's
user is `user`: repo ids are `user/<name>`.

`{t}` is `models`, `datasets` or `spaces`; `{id}` is `namespace/name`; `{prefix}` is `` for models and `datasets/` or
`spaces/` otherwise; `{rev}` is a branch, tag, `refs/pr/N` or 40-hex commit oid (URL-quoted).

Endpoints served:
    GET    /api/whoami-v2                                   user "user" (any token equal to the server's token)
    GET    /api/agent-harnesses                             the AI-agent registry a client's user-agent header
                                                            consults unless HF_HUB_DISABLE_TELEMETRY: no harness
    POST   /api/repos/create                                409 + {"url"} when the repo exists
    DELETE /api/repos/delete
    POST   /api/validate-yaml                               always valid
    GET    /api/{t}/{id}[/revision/{rev}]                   repo info: id, sha, siblings (+ size/blobId/lfs if ?blobs)
    GET    /api/{t}/{id}/tree/{rev}[/{path}]                ?recursive= &expand= &cursor=, Link-header pagination
    POST   /api/{t}/{id}/paths-info/{rev}                   form or JSON {"paths": [...], "expand": bool}
    GET    /api/{t}/{id}/refs                               ?include_prs=1
    GET    /api/{t}/{id}/commits/{rev}                      first-parent history, newest first, one page
    POST   /api/{t}/{id}/preupload/{rev}                    uploadMode lfs|regular (.gitattributes + size), oid
    POST   /api/{t}/{id}/commit/{rev}                       NDJSON header/file/lfsFile/deletedFile/deletedFolder,
                                                            ?create_pr=1
    POST   /api/{t}/{id}/branch/{name}   DELETE ...         body {"startingPoint": rev}
    POST   /api/{t}/{id}/tag/{rev}       DELETE .../{tag}   body {"tag": name}
    POST   /api/{t}/{id}/super-squash/{branch}
    POST   /{prefix}{id}.git/info/lfs/objects/batch         git-LFS batch API (basic transfer)
    PUT    /lfs-upload/{sha256}                             the upload href handed out by the batch API
    HEAD   /{prefix}{id}/resolve/{rev}/{path}               ETag, X-Linked-Etag, X-Linked-Size, X-Repo-Commit
    GET    /{prefix}{id}/resolve/{rev}/{path}               same headers, Range -> 206

Faults for tests: `HubServer.fail_reads(path, after=n, times=m)` answers 501 (which the client does not retry) to the
m GETs of a file that follow its next n, as a connection lost in the middle of reading a file by ranges would.

Errors are JSON {"error": msg} with `X-Error-Code` RepoNotFound / RevisionNotFound / EntryNotFound where the Hub sends
them (the client maps those to RepositoryNotFoundError / RevisionNotFoundError / EntryNotFoundError). Any other route
answers 404 and is logged to stderr and to `HubServer.unhandled`, so a client change shows up at once; a request that
crashes the server answers 501 (which the client does not retry), prints its traceback and is logged there too.
"""

import argparse
import base64
import fnmatch
import hashlib
import itertools
import json
import os
import re
import secrets
import sys
import threading
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

USER = "user"
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
LFS_SIZE_THRESHOLD = 1024 * 1024  # files above this go through git-LFS whatever their name
# fmt: off
LFS_EXTENSIONS = (  # the Hub's default .gitattributes (abridged): these always go through git-LFS
    "7z", "arrow", "bin", "bz2", "ckpt", "ftz", "gz", "h5", "joblib", "lz4", "mp3", "mp4", "msgpack", "npy", "npz",
    "onnx", "ot", "parquet", "pb", "pickle", "pkl", "pt", "pth", "rar", "safetensors", "tar", "tflite", "tgz", "wasm",
    "webm", "wav", "xz", "zip", "zst",
)
# fmt: on
DEFAULT_GITATTRIBUTES = "".join(f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n" for ext in LFS_EXTENSIONS)
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
# The agent-harness registry: the two variables any tool may set to its name, and no harness of its own, so a client
# run by an agent that sets them reports "agent/unknown" in its user-agent and any other reports none.
AGENT_REGISTRY = {"standardEnvVars": ["AI_AGENT", "AGENT"], "harnesses": {}}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def git_blob_oid(data: bytes) -> str:
    """The git object id of a blob with these bytes (what the Hub reports for regular files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class Blob:
    """One file in a snapshot: content addressed by sha256; `oid` is the git blob id (of the pointer for LFS)."""

    sha256: str
    size: int
    oid: str
    lfs: bool


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    message: str
    date: str
    files: dict[str, Blob]


@dataclass
class Repo:
    type: str
    id: str
    private: bool
    created_at: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid (incl. "refs/pr/N")
    tags: dict[str, str] = field(default_factory=dict)
    n_prs: int = 0


class HubError(Exception):
    """An HTTP error answer: status, message and the Hub's X-Error-Code (if any)."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class Hub:
    """Repo storage and Git-like history; thread-safe (one lock), no HTTP in here."""

    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        self.repos: dict[tuple[str, str], Repo] = {}
        for path in sorted((self.root / "repos").glob("*/**/*.json")):  # the repos a server on this root kept
            repo = load_repo(json.loads(path.read_text()))
            self.repos[(repo.type, repo.id)] = repo
        self.lock = threading.RLock()
        self._counter = itertools.count(sum(len(repo.commits) for repo in self.repos.values()))

    # --- blobs -------------------------------------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256[:2] / sha256

    def store_bytes(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.object_path(sha256)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{sha256}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return sha256

    def read_blob(self, blob: Blob) -> bytes:
        return self.object_path(blob.sha256).read_bytes()

    # --- repos and revisions -----------------------------------------------------------------------------
    def get_repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            raise HubError(404, f"Repository {repo_id} ({repo_type}) not found", "RepoNotFound")
        return repo

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        with self.lock:
            if (repo_type, repo_id) in self.repos:
                raise HubError(409, "You already created this repo")
            repo = Repo(repo_type, repo_id, private, _now())
            self.repos[(repo_type, repo_id)] = repo
            attributes = DEFAULT_GITATTRIBUTES.encode()
            blob = Blob(self.store_bytes(attributes), len(attributes), git_blob_oid(attributes), lfs=False)
            self._add_commit(repo, "main", None, "initial commit", "", {".gitattributes": blob})
            return repo

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        with self.lock:
            self.get_repo(repo_type, repo_id)
            del self.repos[(repo_type, repo_id)]
            self._state_path(repo_type, repo_id).unlink(missing_ok=True)

    def resolve(self, repo: Repo, revision: str) -> Commit:
        """Branch, tag, refs/heads/x, refs/tags/x, refs/pr/N or full commit oid -> commit."""
        name = revision.removeprefix("refs/heads/")
        oid = repo.branches.get(name) or repo.tags.get(revision.removeprefix("refs/tags/"))
        if oid is None and SHA1_RE.match(revision) and revision in repo.commits:
            oid = revision
        if oid is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[oid]

    def _add_commit(self, repo: Repo, branch: str, parent: str | None, title: str, message: str, files) -> Commit:
        seed = f"{repo.type}/{repo.id}/{parent}/{title}/{next(self._counter)}/{sorted(files.items())}"
        commit = Commit(hashlib.sha1(seed.encode()).hexdigest(), parent, title, message, _now(), files)
        repo.commits[commit.oid] = commit
        repo.branches[branch] = commit.oid
        self.save_state(repo)
        return commit

    def commit(self, repo: Repo, revision: str, operations: list[dict], create_pr: bool) -> tuple[Commit, str | None]:
        """Apply NDJSON commit operations on top of a branch (or of a new PR branch); returns (commit, pr_ref)."""
        with self.lock:
            head = self.resolve(repo, revision)
            branch = revision.removeprefix("refs/heads/")
            if create_pr:
                repo.n_prs += 1
                branch = f"refs/pr/{repo.n_prs}"
            elif branch not in repo.branches:
                raise HubError(400, f"Cannot commit to {revision}: it is not a branch")
            header = next((op["value"] for op in operations if op["key"] == "header"), {})
            parent_commit = header.get("parentCommit")
            if parent_commit and parent_commit != head.oid:
                raise HubError(
                    412, f"A commit has happened since {parent_commit}: the head of {revision} is now {head.oid}"
                )
            files = dict(head.files)
            for op in operations:
                key, value = op["key"], op["value"]
                if key == "file":
                    data = base64.b64decode(value["content"]) if value.get("encoding") == "base64" else value["content"]
                    data = data.encode() if isinstance(data, str) else data
                    files[value["path"]] = Blob(self.store_bytes(data), len(data), git_blob_oid(data), lfs=False)
                elif key == "lfsFile":
                    sha256 = value["oid"]
                    path = self.object_path(sha256)
                    if not path.exists():
                        raise HubError(422, f"LFS object {sha256} for {value['path']} was never uploaded")
                    size = path.stat().st_size
                    files[value["path"]] = Blob(sha256, size, git_blob_oid(lfs_pointer(sha256, size)), lfs=True)
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    doomed = [p for p in files if p.startswith(folder)]
                    if not doomed:
                        raise HubError(404, f"A folder with this name doesn't exist: {folder}", "EntryNotFound")
                    for p in doomed:
                        del files[p]
                elif key != "header":
                    raise HubError(400, f"Unknown commit operation key {key!r}")
            title = header.get("summary") or "commit"
            commit = self._add_commit(repo, branch, head.oid, title, header.get("description", ""), files)
            return commit, (branch if create_pr else None)

    def upload_mode(self, repo: Repo, commit: Commit, path: str, size: int) -> str:
        attributes = commit.files.get(".gitattributes")
        text = self.read_blob(attributes).decode() if attributes else DEFAULT_GITATTRIBUTES
        patterns = [line.split()[0] for line in text.splitlines() if "filter=lfs" in line and line.split()]
        name = path.rsplit("/", 1)[-1]
        by_pattern = any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in patterns)
        return "lfs" if by_pattern or size > LFS_SIZE_THRESHOLD else "regular"

    def last_commit(self, repo: Repo, head: Commit, path: str, is_dir: bool) -> Commit:
        """The newest commit (following first parents) that changed `path` (a file, or anything below a folder)."""

        def state(commit: Commit):
            if not is_dir:
                return commit.files.get(path)
            return sorted((p, b) for p, b in commit.files.items() if p.startswith(path + "/"))

        current = head
        while current.parent is not None and state(repo.commits[current.parent]) == state(current):
            current = repo.commits[current.parent]
        return current

    def save_state(self, repo: Repo) -> None:
        """Mirror a repo's refs and commits to `<root>/repos/<type>s/<id>.json` (for humans debugging a test)."""
        path = self._state_path(repo.type, repo.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(repo), indent=1))
        os.replace(tmp, path)

    def _state_path(self, repo_type: str, repo_id: str) -> Path:
        return self.root / "repos" / f"{repo_type}s" / f"{repo_id}.json"


def load_repo(state: dict) -> Repo:
    """A Repo from the JSON `Hub.save_state` wrote."""
    commits = {
        oid: Commit(**{**commit, "files": {path: Blob(**blob) for path, blob in commit["files"].items()}})
        for oid, commit in state["commits"].items()
    }
    return Repo(**{**state, "commits": commits})


def tree_entries(files: dict[str, Blob], folder: str, recursive: bool) -> list[tuple[str, Blob | None]]:
    """(path, blob) for files and (path, None) for folders under `folder` ('' = root), sorted, folders first."""
    prefix = folder.rstrip("/") + "/" if folder else ""
    found_files: dict[str, Blob] = {}
    found_dirs: set[str] = set()
    for path, blob in files.items():
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
            found_dirs.add(prefix + "/".join(parts[:depth]))
        if recursive or len(parts) == 1:
            found_files[path] = blob
    return [(d, None) for d in sorted(found_dirs)] + sorted(found_files.items())


class HubServer:
    """The HTTP front: `start()` serves in a daemon thread on 127.0.0.1:`port`, `stop()` shuts it down."""

    def __init__(self, root: Path, token: str, port: int = 0, host: str = "127.0.0.1"):
        self.hub = Hub(root)
        self.root = Path(root)
        self.token = token
        self.requests: list[tuple[str, str]] = []  # (method, path without query), every request in order
        self.unhandled: list[tuple[str, str]] = []  # (method, full path) answered 404 as an unknown route
        self.tree_page_size = 1000  # entries per /tree page (the Hub uses 1000; 50 with expand)
        self._read_faults: dict[str, list[int]] = {}  # file path in a repo -> [GETs still served, GETs then failed]
        self._faults_lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        self._thread: threading.Thread | None = None

    def fail_reads(self, path: str, after: int = 0, times: int = 1) -> None:
        """The GETs of file `path` (in any repo) after the next `after` answer 501, `times` of them; then all succeed
        again. times=0 removes the fault."""
        with self._faults_lock:
            if times > 0:
                self._read_faults[path] = [after, times]
            else:
                self._read_faults.pop(path, None)

    def read_fails(self, path: str) -> bool:
        """Whether this GET of `path` is one to fail (counts it)."""
        with self._faults_lock:
            fault = self._read_faults.get(path)
            if fault is None:
                return False
            if fault[0] > 0:
                fault[0] -= 1
                return False
            fault[1] -= 1
            if fault[1] <= 0:
                del self._read_faults[path]
            return True

    def start(self) -> "HubServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hub-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _make_handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    hub = server.hub

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: every answer carries a Content-Length

        def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's signature)
            pass  # quiet; the request log is server.requests

        # --- plumbing ----------------------------------------------------------------------------------
        def _dispatch(self) -> None:
            url = urlsplit(self.path)
            self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            server.requests.append((self.command, url.path))
            self.segments = url.path.strip("/").split("/")
            try:
                body = self._read_body()
                self._route(body)
            except HubError as e:
                headers = dict(e.headers)
                if e.code:
                    headers["X-Error-Code"] = e.code
                headers["X-Error-Message"] = e.message
                self._json({"error": e.message}, e.status, headers)
            except Exception as e:  # a bug here or a request it cannot parse: fail fast (501 is not retried)
                server.unhandled.append((self.command, self.path))
                traceback.print_exc()
                message = f"hub_server crashed on {self.command} {self.path}: {e!r}"
                self._json({"error": message}, 501, {"X-Error-Message": message})

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None, length=None) -> None:
            """Answer; `length` is the Content-Length a HEAD announces without a body (default len(body))."""
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, payload, status: int = 200, headers: dict | None = None) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json", headers)

        def _body_json(self, body: bytes) -> dict:
            return json.loads(body) if body else {}

        def _require_write(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {server.token}":
                raise HubError(401, "Invalid credentials in Authorization header")

        def _readable_repo(self, repo_type: str, repo_id: str) -> Repo:
            repo = hub.get_repo(repo_type, repo_id)
            if repo.private and self.headers.get("Authorization") != f"Bearer {server.token}":
                raise HubError(404, f"Repository {repo_id} ({repo_type}) not found", "RepoNotFound")
            return repo

        def _unhandled(self) -> None:
            server.unhandled.append((self.command, self.path))
            print(f"hub_server: unhandled {self.command} {self.path}", file=sys.stderr, flush=True)
            raise HubError(404, f"hub_server does not serve {self.command} {self.path}")

        # --- routing -----------------------------------------------------------------------------------
        def _route(self, body: bytes) -> None:
            s, method = self.segments, self.command
            if s[0] == "api":
                if s[1:] == ["whoami-v2"] and method == "GET":
                    return self._whoami()
                if s[1:] == ["agent-harnesses"] and method == "GET":
                    return self._json(AGENT_REGISTRY)
                if s[1] == "repos" and len(s) == 3 and method in ("POST", "DELETE"):
                    return self._repos(s[2], self._body_json(body))
                if s[1:] == ["validate-yaml"] and method == "POST":
                    return self._json({"errors": [], "warnings": []})
                if s[1] in REPO_TYPES and len(s) >= 4:
                    repo_type, repo_id = REPO_TYPES[s[1]], f"{unquote(s[2])}/{unquote(s[3])}"
                    return self._repo_api(repo_type, repo_id, s[4:], body)
            if s[0] == "lfs-upload" and len(s) == 2 and method == "PUT":
                return self._lfs_put(s[1], body)
            repo_type = REPO_TYPES.get(s[0], "model") if s[0] in ("datasets", "spaces") else "model"
            rest = s[1:] if repo_type != "model" else s
            if len(rest) == 6 and rest[1].endswith(".git") and rest[2:] == ["info", "lfs", "objects", "batch"]:
                return self._lfs_batch(repo_type, f"{rest[0]}/{rest[1][:-4]}", self._body_json(body))
            if len(rest) >= 5 and rest[2] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(repo_type, f"{rest[0]}/{rest[1]}", unquote(rest[3]), unquote("/".join(rest[4:])))
            return self._unhandled()

        def _repo_api(self, repo_type: str, repo_id: str, rest: list[str], body: bytes) -> None:
            method = self.command
            action, args = (rest[0], [unquote(a) for a in rest[1:]]) if rest else ("", [])
            if method == "GET" and (action == "" or (action == "revision" and len(args) == 1)):
                return self._info(repo_type, repo_id, args[0] if args else "main")
            if method == "GET" and action == "tree" and args:
                return self._tree(repo_type, repo_id, args[0], "/".join(args[1:]))
            if method == "POST" and action == "paths-info" and len(args) == 1:
                return self._paths_info(repo_type, repo_id, args[0], body)
            if method == "GET" and action == "refs" and not args:
                return self._refs(repo_type, repo_id)
            if method == "GET" and action == "commits" and len(args) == 1:
                return self._commits(repo_type, repo_id, args[0])
            if method == "POST" and action == "preupload" and len(args) == 1:
                return self._preupload(repo_type, repo_id, args[0], self._body_json(body))
            if method == "POST" and action == "commit" and len(args) == 1:
                return self._commit(repo_type, repo_id, args[0], body)
            if method in ("POST", "DELETE") and action in ("branch", "tag") and len(args) == 1:
                return self._ref_change(repo_type, repo_id, action, args[0], self._body_json(body))
            if method == "POST" and action == "super-squash" and len(args) == 1:
                return self._super_squash(repo_type, repo_id, args[0], self._body_json(body))
            return self._unhandled()

        # --- account and repos -------------------------------------------------------------------------
        def _whoami(self) -> None:
            self._require_write()
            auth = {"accessToken": {"displayName": "test-token", "role": "write"}, "type": "access_token"}
            self._json(
                {"type": "user", "id": "0" * 24, "name": USER, "fullname": "Test User", "orgs": [], "auth": auth}
            )

        def _repos(self, action: str, payload: dict) -> None:
            self._require_write()
            repo_type = payload.get("type") or "model"
            namespace = payload.get("organization") or USER
            repo_id = f"{namespace}/{payload.get('name')}"
            url = f"{server.endpoint}/{URL_PREFIXES[repo_type]}{repo_id}"
            if action == "create":
                private = bool(payload.get("private") or payload.get("visibility") == "private")
                try:
                    hub.create_repo(repo_type, repo_id, private)
                except HubError as e:  # the client reads "url" from the 409 answer too (exist_ok=True)
                    return self._json({"error": e.message, "url": url}, e.status, {"X-Error-Message": e.message})
                return self._json({"url": url, "name": repo_id, "id": repo_id})
            if action == "delete":
                hub.delete_repo(repo_type, repo_id)
                return self._json({})
            return self._unhandled()

        def _info(self, repo_type: str, repo_id: str, revision: str) -> None:
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                commit = hub.resolve(repo, revision)
                blobs = self.query.get("blobs", "").lower() in ("1", "true")
                siblings = []
                for path, blob in sorted(commit.files.items()):
                    sibling: dict = {"rfilename": path}
                    if blobs:
                        sibling |= {"size": blob.size, "blobId": blob.oid}
                        if blob.lfs:
                            pointer_size = len(lfs_pointer(blob.sha256, blob.size))
                            sibling["lfs"] = {"size": blob.size, "sha256": blob.sha256, "pointerSize": pointer_size}
                    siblings.append(sibling)
                info = {
                    "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id,
                    "author": repo_id.split("/")[0],
                    "sha": commit.oid,
                    "lastModified": commit.date,
                    "createdAt": repo.created_at,
                    "private": repo.private,
                    "gated": False,
                    "disabled": False,
                    "downloads": 0,
                    "likes": 0,
                    "tags": [],
                    "siblings": siblings,
                }
            self._json(info)

        # --- listing -----------------------------------------------------------------------------------
        def _entry_json(self, repo: Repo, head: Commit, path: str, blob: Blob | None, expand: bool) -> dict:
            if blob is None:
                tree_oid = hashlib.sha1(repr(tree_entries(head.files, path, True)).encode()).hexdigest()
                entry: dict = {"type": "directory", "oid": tree_oid, "size": 0, "path": path}
            else:
                entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
                if blob.lfs:
                    pointer_size = len(lfs_pointer(blob.sha256, blob.size))
                    entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": pointer_size}
            if expand:
                last = hub.last_commit(repo, head, path, is_dir=blob is None)
                entry["lastCommit"] = {"id": last.oid, "title": last.title, "date": last.date}
            return entry

        def _tree(self, repo_type: str, repo_id: str, revision: str, folder: str) -> None:
            recursive = self.query.get("recursive", "").lower() in ("1", "true")
            expand = self.query.get("expand", "").lower() in ("1", "true")
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                head = hub.resolve(repo, revision)
                folder = folder.strip("/")
                entries = tree_entries(head.files, folder, recursive)
                if folder and not entries:
                    raise HubError(404, f"{folder} does not exist on {revision}", "EntryNotFound",
                                   {"X-Repo-Commit": head.oid})  # fmt: skip
                page_size = server.tree_page_size if not expand else min(server.tree_page_size, 50)
                start = int(self.query.get("cursor") or 0)
                page = [self._entry_json(repo, head, p, b, expand) for p, b in entries[start : start + page_size]]
            headers = {}
            if start + page_size < len(entries):
                query = urlencode({**self.query, "cursor": str(start + page_size)})
                headers["Link"] = f'<{server.endpoint}{urlsplit(self.path).path}?{query}>; rel="next"'
            self._json(page, headers=headers)

        def _paths_info(self, repo_type: str, repo_id: str, revision: str, body: bytes) -> None:
            if self.headers.get("Content-Type", "").startswith("application/json"):
                payload = json.loads(body)
                paths, expand = payload.get("paths", []), bool(payload.get("expand"))
            else:
                form = parse_qs(body.decode())
                paths, expand = form.get("paths", []), form.get("expand", ["False"])[-1].lower() in ("1", "true")
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                head = hub.resolve(repo, revision)
                found = []
                for path in paths:
                    path = path.strip("/")
                    if path in head.files:
                        found.append(self._entry_json(repo, head, path, head.files[path], expand))
                    elif any(p.startswith(path + "/") for p in head.files) or path == "":
                        found.append(self._entry_json(repo, head, path, None, expand))
            self._json(found)

        def _refs(self, repo_type: str, repo_id: str) -> None:
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                branches = {n: o for n, o in repo.branches.items() if not n.startswith("refs/pr/")}
                prs = {n: o for n, o in repo.branches.items() if n.startswith("refs/pr/")}
                refs = {
                    "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": o} for n, o in branches.items()],
                    "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": o} for n, o in repo.tags.items()],
                    "converts": [],
                }
                if self.query.get("include_prs"):
                    refs["pullRequests"] = [{"name": n[5:], "ref": n, "targetCommit": o} for n, o in prs.items()]
            self._json(refs)

        def _commits(self, repo_type: str, repo_id: str, revision: str) -> None:
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                commit: Commit | None = hub.resolve(repo, revision)
                history = []
                while commit is not None:
                    history.append({"id": commit.oid, "title": commit.title, "message": commit.message,
                                    "authors": [{"user": USER}], "date": commit.date})  # fmt: skip
                    commit = repo.commits[commit.parent] if commit.parent else None
            self._json(history)

        # --- writing -----------------------------------------------------------------------------------
        def _preupload(self, repo_type: str, repo_id: str, revision: str, payload: dict) -> None:
            self._require_write()
            with hub.lock:
                repo = hub.get_repo(repo_type, repo_id)
                head = hub.resolve(repo, revision)
                answers = []
                for file in payload.get("files", []):
                    mode = hub.upload_mode(repo, head, file["path"], int(file.get("size", 0)))
                    existing = head.files.get(file["path"])
                    oid = None
                    if existing is not None and existing.lfs == (mode == "lfs"):
                        oid = existing.sha256 if existing.lfs else existing.oid
                    answers.append({"path": file["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
            self._json({"files": answers, "commitOid": head.oid})

        def _lfs_batch(self, repo_type: str, repo_id: str, payload: dict) -> None:
            self._require_write()
            hub.get_repo(repo_type, repo_id)
            if payload.get("operation") != "upload":
                raise HubError(400, "hub_server only supports LFS uploads (downloads go through /resolve)")
            objects = []
            for obj in payload.get("objects", []):
                entry = {"oid": obj["oid"], "size": obj["size"]}
                if not hub.object_path(obj["oid"]).exists():  # no "actions" = already uploaded
                    entry["actions"] = {"upload": {"href": f"{server.endpoint}/lfs-upload/{obj['oid']}", "header": {}}}
                objects.append(entry)
            self._send(
                200, json.dumps({"transfer": "basic", "objects": objects}).encode(), "application/vnd.git-lfs+json"
            )

        def _lfs_put(self, sha256: str, body: bytes) -> None:
            if hashlib.sha256(body).hexdigest() != sha256:
                raise HubError(400, f"Uploaded content does not match its LFS oid {sha256}")
            hub.store_bytes(body)
            self._json({})

        def _commit(self, repo_type: str, repo_id: str, revision: str, body: bytes) -> None:
            self._require_write()
            operations = [json.loads(line) for line in body.splitlines() if line.strip()]
            create_pr = self.query.get("create_pr") in ("1", "true", "True")
            repo = hub.get_repo(repo_type, repo_id)
            commit, pr_ref = hub.commit(repo, revision, operations, create_pr)
            repo_url = f"{server.endpoint}/{URL_PREFIXES[repo_type]}{repo_id}"
            answer = {"success": True, "commitOid": commit.oid, "commitUrl": f"{repo_url}/commit/{commit.oid}"}
            answer["pullRequestUrl"] = f"{repo_url}/discussions/{pr_ref.rsplit('/', 1)[-1]}" if pr_ref else None
            self._json(answer)

        def _ref_change(self, repo_type: str, repo_id: str, kind: str, name: str, payload: dict) -> None:
            self._require_write()
            with hub.lock:
                repo = hub.get_repo(repo_type, repo_id)
                refs = repo.branches if kind == "branch" else repo.tags
                if self.command == "DELETE":
                    if name not in refs:
                        raise HubError(404, f"{kind} {name} does not exist", "RevisionNotFound")
                    del refs[name]
                elif kind == "branch":
                    if name in refs:
                        raise HubError(409, f"Branch {name} already exists")
                    refs[name] = hub.resolve(repo, payload.get("startingPoint") or "main").oid
                else:  # POST /tag/{revision} with {"tag": name}
                    tag = payload["tag"]
                    if tag in refs:
                        raise HubError(409, f"Tag {tag} already exists")
                    refs[tag] = hub.resolve(repo, name).oid
                hub.save_state(repo)
            self._json({})

        def _super_squash(self, repo_type: str, repo_id: str, branch: str, payload: dict) -> None:
            self._require_write()
            with hub.lock:
                repo = hub.get_repo(repo_type, repo_id)
                head = hub.resolve(repo, branch)
                title = payload.get("message") or "Super-squash branch"
                commit = hub._add_commit(repo, branch, None, title, "", dict(head.files))
            self._json({"commitId": commit.oid})

        # --- downloads ---------------------------------------------------------------------------------
        def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str) -> None:
            with hub.lock:
                repo = self._readable_repo(repo_type, repo_id)
                commit = hub.resolve(repo, revision)
                blob = commit.files.get(path)
                if blob is None:
                    raise HubError(404, f"Entry not found: {path} at {revision}", "EntryNotFound",
                                   {"X-Repo-Commit": commit.oid})  # fmt: skip
            headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{blob.oid}"', "Accept-Ranges": "bytes"}
            if blob.lfs:
                headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)}
            status, start, end = 200, 0, blob.size - 1
            byte_range = self.headers.get("Range")
            if byte_range:
                match = re.fullmatch(r"bytes=(\d*)-(\d*)", byte_range.strip())
                if not match or (match[1] == "" and match[2] == ""):
                    raise HubError(416, f"Unsupported Range {byte_range!r}")
                if match[1] == "":  # suffix range: the last N bytes
                    start = max(blob.size - int(match[2]), 0)
                else:
                    start, end = int(match[1]), min(int(match[2]) if match[2] else end, end)
                if start >= blob.size or start > end:
                    unsatisfiable = {"Content-Range": f"bytes */{blob.size}"}
                    raise HubError(416, f"Range {byte_range} not satisfiable", headers=unsatisfiable)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
            data = b""
            if self.command == "GET" and server.read_fails(path):
                raise HubError(501, f"hub_server: the read of {path} fails (HubServer.fail_reads)")
            if self.command == "GET":
                with open(hub.object_path(blob.sha256), "rb") as f:
                    f.seek(start)
                    data = f.read(end + 1 - start)
            self._send(status, data, "application/octet-stream", headers, length=end + 1 - start)

    return Handler


DEFAULT_PORT = 8765
TOKEN_FILE = "token"


def stored_token(root: Path) -> str:
    """The server token of `root`: read from <root>/token, or made and kept there at the first start."""
    path = Path(root) / TOKEN_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"hf_local_{secrets.token_hex(16)}\n")
    return path.read_text().strip()


def main(argv: list[str] | None = None) -> int:
    """`python tests/hub_server.py --root DIR [--port P]`: serves until Ctrl-C (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python tests/hub_server.py", description="A Hub-protocol server on 127.0.0.1."
    )
    parser.add_argument("--root", required=True, type=Path, help="where repos and files are kept (across restarts)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port")
    args = parser.parse_args(argv)
    if args.root.exists() and not args.root.is_dir():
        parser.error(f"--root {args.root} is a file: pass a folder (it is created if needed)")
    token = stored_token(args.root)
    try:
        server = HubServer(args.root, token=token, port=args.port)
    except OSError as e:
        parser.error(f"cannot serve on 127.0.0.1:{args.port} ({e.strerror or e}): choose another --port")
    n_repos = len(server.hub.repos)
    print(f"hub_server: the Hub protocol on {server.endpoint}, {n_repos} repo(s) kept in {args.root.resolve()}")
    print(f"token: {token} (user {USER!r}: push to {USER}/<name>)")
    print("point the Hub clients (hfpolicy, huggingface_hub, datasets) at it in another shell:")
    print(f"export HF_ENDPOINT={server.endpoint} HF_TOKEN={token} HF_HUB_DISABLE_XET=1", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    print("hub_server: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
