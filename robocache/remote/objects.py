"""A dataset's folder on a remote file system, read by byte range: the URL resolved with fsspec (``s3://``
s3fs, ``gs://`` gcsfs, ``hf://`` huggingface_hub's HfFileSystem pinned to one commit, ``http(s)://``), each
object's version (size and what changes when it does: ETag, generation, blob id, Last-Modified), and
``read(rel, start, end)``: one range, retried on what passes (a dropped connection, a 5xx or 429, a
timeout, a range cut short) with backoff, a clear ``RemoteError`` naming the object on what does not.
Every read is counted (``Counts``): the tests' and the benchmark's bytes fetched.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from .._util import require

#: where a mirror's mtime starts when the remote gives no modification time (2020-01-01)
EPOCH_S = 1_577_836_800


class RemoteError(OSError):
    """A remote object could not be read (after retries where retrying could help). Names the object."""

    __module__ = "robocache"


class RemoteChanged(RemoteError):
    """A remote object changed (or went away) while it was being read: its version before and after."""

    __module__ = "robocache"


@dataclass(frozen=True)
class Version:
    """What identifies one version of an object: ``size`` in bytes and ``tag`` (ETag, generation, blob id
    or Last-Modified: it changes when the object does). ``mtime_ns``: the local copy's mtime, the remote's
    modification time (whole seconds) plus a hash of the tag in the nanoseconds, so a new version gets a new
    (size, mtime) and the frame cache, which keys a source by them, a new entry."""
    size: int
    tag: str
    mtime_ns: int

    def as_json(self) -> dict:
        return {"size": self.size, "tag": self.tag, "mtime_ns": self.mtime_ns}

    @classmethod
    def from_json(cls, d) -> "Version | None":
        try:
            return cls(int(d["size"]), str(d["tag"]), int(d["mtime_ns"]))
        except (TypeError, KeyError, ValueError):
            return None


def version_of(info: dict) -> Version:
    """An fsspec ``info`` dict (s3fs, gcsfs, HfFileSystem, HTTP, local) as a Version."""
    lfs = info.get("lfs") or {}
    tag = next((str(v) for v in (info.get("ETag"), info.get("etag"), info.get("generation"),
                                 lfs.get("sha256") if isinstance(lfs, dict) else None, info.get("blob_id"),
                                 info.get("Last-Modified"), info.get("LastModified"), info.get("mtime"),
                                 info.get("updated")) if v not in (None, "")), "")
    seconds = EPOCH_S
    for key in ("LastModified", "Last-Modified", "last_modified", "mtime", "updated", "created"):
        v = info.get(key)
        try:
            if isinstance(v, datetime):
                seconds = int(v.timestamp())
            elif isinstance(v, (int, float)):
                seconds = int(v)
            elif isinstance(v, str) and v:
                try:
                    seconds = int(email.utils.parsedate_to_datetime(v).timestamp())
                except (TypeError, ValueError):
                    seconds = int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp())
            else:
                continue
            break
        except (TypeError, ValueError, OverflowError):
            continue
    salt = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "little") % 1_000_000_000
    return Version(int(info.get("size") or 0), tag, max(seconds, 0) * 1_000_000_000 + salt)


@dataclass
class Counts:
    """What was asked of the remote: data ``bytes`` and range ``requests``, ``stats`` (HEAD / info / list
    calls) and ``retries``; thread-safe."""
    bytes: int = 0
    requests: int = 0
    stats: int = 0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict:
        return {"bytes": self.bytes, "requests": self.requests, "stats": self.stats, "retries": self.retries}


def _status(e: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp, requests/httpx via huggingface_hub, botocore), or None."""
    response = getattr(e, "response", None)
    if isinstance(response, dict):                  # botocore's ClientError
        code = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return code if isinstance(code, int) else None
    for obj in (e, response):
        for attr in ("status", "status_code"):
            v = getattr(obj, attr, None)
            if isinstance(v, int):
                return v
    return None


def transient(e: BaseException) -> bool:
    """Whether trying again may help: timeouts, dropped or refused connections, bodies cut short, 5xx, 429."""
    status = _status(e)
    if status is not None:
        return status >= 500 or status in (408, 429)
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(e, (TimeoutError, asyncio.TimeoutError, ConnectionError, EOFError)):
        return True
    names = {c.__name__ for c in type(e).__mro__}
    if names & {"ClientError", "ClientPayloadError", "ServerDisconnectedError", "FSTimeoutError",
                "ContentLengthError", "TransferEncodingError", "IncompleteRead", "ProtocolError",
                "ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError", "ConnectionClosedError",
                "RemoteProtocolError", "ReadError", "ConnectError", "NetworkError", "TimeoutException"}:
        return True
    return isinstance(e, OSError)       # s3fs/gcsfs wrap what their own retries gave up on in OSError


class Store:
    """A dataset folder on a remote file system (``url``), read by range.

    ``storage_options`` go to fsspec (an S3-compatible endpoint: ``{"client_kwargs": {"endpoint_url": ...}}``,
    credentials, ``{"endpoint": ...}`` for a Hub mirror). ``retries``: attempts after the first for a range
    that failed in a way that may pass; ``timeout``: seconds one request may take (async file systems: the
    request is cancelled; HfFileSystem: its own ``HF_HUB_DOWNLOAD_TIMEOUT``)."""

    def __init__(self, url: str, storage_options: dict | None = None, *, retries: int = 5, timeout: float = 60.0):
        fsspec = require("fsspec", "remote", "reading a dataset from object storage or the Hub")
        self.url = url.rstrip("/")
        self.retries, self.timeout = int(retries), float(timeout)
        self.counts = Counts()
        opts = dict(storage_options or {})
        # a file system of its own: fsspec's shared instances keep listings (dircache) that go stale
        self.fs, root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **opts)
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.http = self.protocol in ("http", "https")
        self.root = self.url if self.http else root.rstrip("/")
        self.revision = None
        if self.protocol == "hf":
            self.root, self.revision = _pin_hub_revision(self.fs, self.root)

    def __repr__(self):
        return f"Store({self.url!r})"

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def name(self, rel: str) -> str:
        """The object's URL, for messages."""
        return f"{self.url}/{rel}"

    # --- versions

    def stat(self, rel: str) -> Version | None:
        """The object's version, None when it does not exist."""
        ask = self._head if self.http else (lambda path: self._fresh(self.fs.info, path))
        try:
            info = self._call(lambda: ask(self.path(rel)), rel, what="stat")
        except FileNotFoundError:
            return None             # _call let through only a real "not found" (404)
        if info.get("type") == "directory":
            return None
        return version_of(info)

    def listing(self, folder: str = "", recursive: bool = False) -> dict[str, Version] | None:
        """The objects of ``folder`` (a path under the root; ``recursive``: and of its subfolders) with their
        versions, ``rel`` -> Version, from one listing; {} when there is no such folder; None for HTTP, which
        has no listing (each object is stat'ed instead)."""
        if self.http:
            return None
        path = f"{self.root}/{folder}".rstrip("/")
        lister = self.fs.find if recursive else self.fs.ls
        try:
            found = self._call(lambda: self._fresh(lister, path, detail=True), folder, what="list")
        except FileNotFoundError:
            return {}
        if isinstance(found, list):
            found = {info["name"]: info for info in found}
        out = {}
        for name, info in found.items():
            if info.get("type", "file") != "file":
                continue
            rel = name[len(self.root):].lstrip("/") if name.startswith(self.root) else None
            if rel:
                out[rel] = version_of(info)
        return out

    def _head(self, url: str) -> dict:
        """HTTP: one HEAD (fsspec's info follows a failed HEAD, a 404 too, with a GET: a second round trip)."""
        from fsspec.asyn import sync  # type: ignore[import-untyped]  # no stubs

        async def head():
            session = await self.fs.set_session()
            async with session.head(self.fs.encode_url(url), allow_redirects=True,
                                    headers={"Accept-Encoding": "identity"}) as r:
                if r.status in (404, 410):
                    raise FileNotFoundError(url)
                if r.status == 405:                       # a server without HEAD: fsspec's way (a GET)
                    return None
                r.raise_for_status()
                h = r.headers
                if "Content-Length" not in h or h.get("Content-Encoding", "identity") not in ("identity", ""):
                    return None
                return {"size": int(h["Content-Length"]), "ETag": h.get("ETag"),
                        "Last-Modified": h.get("Last-Modified"), "type": "file"}
        info = sync(self.fs.loop, head, timeout=self.timeout)
        return info if info is not None else self.fs.info(url)

    def _fresh(self, fn, path, **kw):
        """``fn(path)`` asked of the remote, not of the file system's cache of listings."""
        self.fs.invalidate_cache(path)
        return fn(path, **kw)

    def _call(self, fn, rel: str, what: str):
        """A stat or listing call, retried as reads are."""
        for attempt in range(self.retries + 1):
            self.counts.add(stats=1)
            try:
                return fn()
            except FileNotFoundError as e:
                # fsspec's HTTP info says "not found" for any failure (a refused connection, a 503): only a 404
                # or 410, or a not-found without a cause (s3fs, gcsfs, the Hub), is one
                cause = e.__cause__
                if cause is None or _status(cause) in (404, 410):
                    raise
                if not transient(cause) or attempt == self.retries:
                    raise RemoteError(f"{self.name(rel) if rel else self.url}: {what} failed: "
                                      f"{_describe(cause)}") from cause
            except Exception as e:  # noqa: BLE001 - classified below
                if not transient(e) or attempt == self.retries:
                    raise RemoteError(f"{self.name(rel) if rel else self.url}: {what} failed: {_describe(e)}") from e
            self.counts.add(retries=1)
            time.sleep(backoff(attempt))

    # --- data

    def read(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, exactly: retried on transient failures and short reads;
        RemoteError naming the object and the range otherwise (RemoteChanged when it is gone or shorter)."""
        want = end - start
        if want <= 0:
            return b""
        last = ""
        for attempt in range(self.retries + 1):
            self.counts.add(requests=1)
            try:
                data = self._cat(self.path(rel), start, end)
            except FileNotFoundError as e:
                raise RemoteChanged(f"{self.name(rel)}: no longer there (deleted while the mirror read it)") from e
            except Exception as e:  # noqa: BLE001 - classified below
                if _status(e) == 416:
                    raise RemoteChanged(f"{self.name(rel)}: bytes {start}-{end} are past its end now (the object "
                                        f"changed while the mirror read it)") from e
                if not transient(e):
                    raise RemoteError(f"{self.name(rel)}: reading bytes {start}-{end} failed: {_describe(e)}") from e
                last = _describe(e)
            else:
                if len(data) == want:
                    self.counts.add(bytes=want)
                    return bytes(data)
                if len(data) > want:
                    raise RemoteError(f"{self.name(rel)}: asked for bytes {start}-{end} ({want}), the server sent "
                                      f"{len(data)}: it does not serve byte ranges")
                last = f"a range cut short: {len(data)} of {want} bytes"
                self.counts.add(bytes=len(data))
            if attempt < self.retries:
                self.counts.add(retries=1)
                time.sleep(backoff(attempt))
        raise RemoteError(f"{self.name(rel)}: bytes {start}-{end} failed {self.retries + 1} times; the last: {last}")

    def _cat(self, path: str, start: int, end: int) -> bytes:
        from fsspec.asyn import AsyncFileSystem, sync
        if isinstance(self.fs, AsyncFileSystem):
            # on fsspec's event loop, cancelled past the timeout
            return sync(self.fs.loop, self.fs._cat_file, path, start=start, end=end, timeout=self.timeout)
        # HfFileSystem and other blocking ones: one request of exactly the range (no read-ahead cache)
        with self.fs.open(path, "rb", cache_type="none") as f:
            f.seek(start)
            return f.read(end - start)


def backoff(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: 0.1 s doubling to 5 s, jittered by half."""
    return min(0.1 * 2 ** attempt, 5.0) * (0.5 + random.random())


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if type(e).__name__ in text else f"{type(e).__name__}: {text}"


def _pin_hub_revision(fs, root: str) -> tuple[str, str]:
    """``datasets/org/name[@rev][/sub]`` -> the same at the revision's commit sha (a commit never changes,
    so nothing moves under a run), and the sha."""
    resolved = fs.resolve_path(root)
    hf = require("huggingface_hub", "remote", "reading a dataset from the Hugging Face Hub")
    api = hf.HfApi(endpoint=getattr(fs, "endpoint", None), token=getattr(fs, "token", None))
    sha = api.repo_info(resolved.repo_id, repo_type=resolved.repo_type, revision=resolved.revision).sha
    sub = f"/{resolved.path_in_repo}" if resolved.path_in_repo else ""
    prefix = "" if resolved.repo_type == "model" else f"{resolved.repo_type}s/"
    return f"{prefix}{resolved.repo_id}@{sha}{sub}", sha
