"""Bringing what a load reads of remote objects into their local copies (``sparse.LocalFile``), in parallel.

A ``Need`` says what one file's load reads: all of it (``whole``), the spans of an mp4 (``spans``), or the
row groups of a v3.0 data file that hold some episodes (``rowgroups``). ``Mirror.sync(needs)`` runs one
session per file on a pool of file threads; their byte ranges go to one pool of request threads (cut into
``CHUNK``-byte requests), each written straight into its place in the local file. Per file:

1. the remote version (from the listing, or a stat) against the record: another version empties the copy;
2. the index (an mp4's boxes and moov, a parquet footer) from the copy where it holds it, else by range;
3. the ranges (or row groups) needed and not held, fetched;
4. when anything was fetched, the remote version again: changed meanwhile, the session starts over once at
   the new version, then ``RemoteChanged`` naming the object; else the data is synced and the record
   rewritten under the file's lock (merged with what other processes of the node added meanwhile).

A second run whose ranges are all held fetches nothing; with ``revalidate=False`` it asks the remote nothing.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from . import mp4, parquet
from .objects import Counts, RemoteChanged, RemoteError, Version
from .ranges import chunks, merge, subtract
from .sparse import LocalFile, set_mtime, write_atomic

#: bytes per range request: large enough to stream, small enough to spread a file over the request threads
CHUNK = 8 * 1024 * 1024
#: sample ranges of one mp4 closer than this are fetched as one request (the bytes between come along)
MP4_GAP = 4096


@dataclass
class Need:
    """What a load reads of the file ``rel``: ``kind`` "whole", "spans" (``spans``: video stream -> list of
    ``(start, end)`` seconds; the file's frames in them) or "rowgroups" (``episodes``, with ``rows``: episode ->
    ``(dataset_from_index, dataset_to_index)``). A need of an object the remote lacks leaves no local copy."""
    rel: str
    kind: str = "whole"
    spans: dict = field(default_factory=dict)
    episodes: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)


@dataclass
class Synced:
    """A file after its session: ``present`` (False: the remote has no such object), ``fetched`` bytes,
    ``held`` bytes on the local disk, ``whole``: an mp4 read whole because its layout was not understood."""
    rel: str
    present: bool = True
    fetched: int = 0
    held: int = 0
    whole: bool = False


class _Reset(Exception):
    """Another process of the node replaced the local copy during the session: start it again."""


class Mirror:
    """The mirror folder ``root`` of the remote folder ``store()`` (created on first use: a run that needs
    nothing remote never opens a connection)."""

    def __init__(self, root: Path, store, *, workers: int = 16, revalidate: bool = True):
        self.root = Path(root)
        self._store_factory, self._store = store, None
        self.workers, self.revalidate = max(1, int(workers)), revalidate
        self._listed: dict[str, dict] = {}           # folder -> {rel: Version}, listed once per run
        self._lock = threading.RLock()
        self._requests: ThreadPoolExecutor | None = None

    @property
    def store(self):
        with self._lock:
            if self._store is None:
                self._store = self._store_factory()
            return self._store

    def counts(self) -> dict:
        """What was asked of the remote so far (``objects.Counts``); zeros when nothing was."""
        with self._lock:
            return self._store.counts.as_dict() if self._store is not None else Counts().as_dict()

    def listing(self, folder: str, recursive: bool = False) -> dict:
        """The remote objects of ``folder`` with their versions, listed once per run ({} for HTTP, which
        cannot list)."""
        key = f"{folder}/**" if recursive else folder
        with self._lock:
            if key not in self._listed:
                self._listed[key] = self.store.listing(folder, recursive) or {}
            return self._listed[key]

    def version(self, rel: str, fresh: bool = False) -> Version | None:
        """The object's version: from its folder's listing (one request for all the files of a folder that a
        run reads), over HTTP or ``fresh`` from a stat of its own."""
        if not fresh and not self.store.http:
            folder = rel.rpartition("/")[0]
            listed = self._listed.get(f"{folder.split('/')[0]}/**") if folder.startswith("meta") else None
            return (listed if listed is not None else self.listing(folder)).get(rel)
        return self.store.stat(rel)

    # --- all files

    def sync(self, needs: list[Need]) -> list[Synced]:
        """Every file of ``needs`` brought up to what its load reads; in parallel, errors raised after the
        other files' sessions end (each keeps what it completed)."""
        if not needs:
            return []
        with ThreadPoolExecutor(self.workers, thread_name_prefix="robocache-remote-request") as requests, \
                ThreadPoolExecutor(min(len(needs), 4 * self.workers, 64),
                                   thread_name_prefix="robocache-remote-file") as files:
            self._requests = requests
            try:
                futures = [files.submit(self._file, n) for n in needs]
                wait(futures, return_when=FIRST_EXCEPTION)
                for f in futures:
                    if f.exception() is not None:
                        for g in futures:
                            g.cancel()
                        raise f.exception()  # type: ignore[misc]  # checked not None above
                return [f.result() for f in futures]
            finally:
                self._requests = None

    def _file(self, need: Need) -> Synced:
        local = LocalFile(self.root, need.rel)
        if not self.revalidate:
            done = self._held_already(local, need)
            if done is not None:
                return done
        for attempt in range(3):
            version = self.version(need.rel, fresh=attempt > 0)
            if version is None:
                return self._absent(local)
            try:
                if need.kind == "rowgroups":
                    return self._rowgroups(local, need, version)
                return self._bytes(local, need, version)
            except RemoteChanged:
                if attempt:
                    raise
            except _Reset:
                continue
        raise RemoteError(f"{self.store.name(need.rel)}: its local copy {local.path} kept being replaced by "
                          f"another process while this one read it")

    def _absent(self, local: LocalFile) -> Synced:
        """The remote has no such object: no local copy either (the reader then says what is missing)."""
        if not (local.record.exists() or local.path.exists()):
            return Synced(local.rel, present=False)
        with local.lock():
            for p in (local.record, local.path, local.tail):
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
        return Synced(local.rel, present=False)

    def _held_already(self, local: LocalFile, need: Need) -> Synced | None:
        """Without asking the remote: the file's record, when it holds everything ``need`` reads."""
        h = local.held()
        if h.version is None:
            return None
        try:
            if need.kind == "rowgroups":
                if not local.tail.is_file():
                    return None
                md = parquet.metadata(local.tail.read_bytes(), h.tail_at, h.version.size, str(local.path))
                want = parquet.groups_for(md, need.episodes, need.rows)
                return Synced(need.rel, held=_size(local.path)) if set(want) <= set(h.groups) else None
            if h.mode != "bytes":
                return None
            fd = os.open(local.path, os.O_RDONLY)
            try:
                def read(a, b):
                    if subtract([(a, b)], h.ranges):
                        raise LookupError
                    return os.pread(fd, b - a, a)
                want, _ = self._wants(need, h.version, read)
            finally:
                os.close(fd)
        except (LookupError, OSError, ValueError):
            return None
        if subtract(want, h.ranges):
            return None
        return Synced(need.rel, held=sum(b - a for a, b in h.ranges))

    # --- byte ranges: whole files, mp4 spans

    def _wants(self, need: Need, version: Version, read) -> tuple[list, bool]:
        """(ranges the load reads, whether an mp4 is taken whole), ``read(a, b)`` giving the file's bytes."""
        whole = [(0, version.size)]
        if need.kind == "whole" or version.size == 0:
            return whole, False
        try:
            boxes, seen = mp4.top_boxes(read, version.size)
            moov = next(b for b in boxes if b.kind == b"moov")
            tracks = mp4.parse_moov(mp4.box_bytes(moov, seen, read))
            bounds = {}
            for stream, spans in need.spans.items():
                t = mp4.video_track(tracks, stream)
                bounds[stream] = None if spans is None else mp4.decoded_bounds(t, spans)
            return mp4.needed_ranges(boxes, tracks, bounds, _seek_gap(), MP4_GAP), False
        except mp4.Unsupported:
            return whole, True

    def _bytes(self, local: LocalFile, need: Need, version: Version) -> Synced:
        with local.lock():
            h = local.held()
            if h.version != version or h.mode != "bytes":
                h = local.reset(version, "bytes")
            fd = os.open(local.path, os.O_RDWR)
        try:
            inode = os.fstat(fd).st_ino
            got: list = []
            lock = threading.Lock()

            def sink(a, data):
                os.pwrite(fd, data, a)
                with lock:
                    got.append((a, a + len(data)))

            def read(a, b):                 # the index: from the copy where held, else fetched (and kept)
                missing = subtract([(a, b)], merge(h.ranges + got))
                self._fetch(need.rel, missing, sink)
                return os.pread(fd, b - a, a)

            want, whole = self._wants(need, version, read)
            self._fetch(need.rel, subtract(merge(want), merge(h.ranges + got)), sink)
            fetched = sum(b - a for a, b in got)
            if got:
                self._still(need.rel, version)
                os.fsync(fd)
                with local.lock():
                    now = local.held()
                    if now.version != version or _inode(local.path) != inode:
                        raise _Reset
                    now.ranges = merge(now.ranges + got)
                    local.write_record(now)
                    set_mtime(local.path, version)
                    held = sum(b - a for a, b in now.ranges)
            else:
                held = sum(b - a for a, b in h.ranges)
            return Synced(need.rel, fetched=fetched, held=held, whole=whole and need.kind == "spans")
        finally:
            os.close(fd)

    # --- parquet row groups

    def _rowgroups(self, local: LocalFile, need: Need, version: Version) -> Synced:
        size, name = version.size, self.store.name(need.rel)
        with local.lock():
            h = local.held()
            if h.version != version or h.mode != "rowgroups":
                h = local.reset(version, "rowgroups")
        parts: dict = {}
        fetched = 0
        if h.tail_at >= 0 and local.tail.is_file():
            tail, tail_at = local.tail.read_bytes(), h.tail_at
        else:
            tail_at = max(0, size - parquet.TAIL)
            tail = self.store.read(need.rel, tail_at, size)
            foot = parquet.footer_span(tail, size, name)
            if foot < tail_at:
                tail = self.store.read(need.rel, foot, tail_at) + tail
                tail_at = foot
            fetched += len(tail)
        md = parquet.metadata(tail, tail_at, size, name)
        want = parquet.groups_for(md, need.episodes, need.rows)
        missing = [g for g in want if g not in h.groups]
        if not missing and fetched == 0:
            return Synced(need.rel, held=_size(local.path))
        if not h.groups and len(want) == md.num_row_groups:
            return self._whole_parquet(local, need, version, tail, tail_at, md.num_row_groups, fetched)
        lock = threading.Lock()

        def sink(a, data):
            with lock:
                parts[a] = data
        # a small file's tail is the whole file: its row groups are there already
        self._fetch(need.rel, subtract(parquet.group_ranges(md, missing), [(tail_at, size)]), sink)
        fetched += sum(len(v) for v in parts.values())
        parts[tail_at] = tail
        tables = parquet.read_groups(md, size, parts, missing, name)
        self._still(need.rel, version)
        with local.lock():
            now = local.held()
            if now.version != version or now.mode != "rowgroups":
                raise _Reset
            import pyarrow.parquet as pq  # type: ignore[import-untyped]  # no stubs; the reader's dependency
            if now.groups:
                kept = pq.ParquetFile(local.path)
                for j, g in enumerate(now.groups):
                    tables.setdefault(g, kept.read_row_group(j))
            groups = sorted(tables)
            write_atomic(local.tail, tail)
            if groups:                      # no row group of the episodes here: no file (the reader sees none)
                tmp = local.path.with_name(f".{local.path.name}.{os.getpid()}.new")
                local.path.parent.mkdir(parents=True, exist_ok=True)
                parquet.compact(tmp, md.schema.to_arrow_schema(), [tables[g] for g in groups])
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, local.path)
            now.groups, now.tail_at = groups, tail_at
            local.write_record(now)
        return Synced(need.rel, fetched=fetched, held=_size(local.path))

    def _whole_parquet(self, local: LocalFile, need: Need, version: Version, tail: bytes, tail_at: int,
                       groups: int, fetched: int) -> Synced:
        """Every row group of the file wanted: its bytes as they are (no re-encoding), a parquet file of all
        its row groups in order."""
        tmp = local.path.with_name(f".{local.path.name}.{os.getpid()}.new")
        local.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.pwrite(fd, tail, tail_at)
            self._fetch(need.rel, [(0, tail_at)], lambda a, data: os.pwrite(fd, data, a))
            self._still(need.rel, version)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        with local.lock():
            now = local.held()
            if now.version != version or now.mode != "rowgroups" or now.groups:
                tmp.unlink(missing_ok=True)
                raise _Reset
            write_atomic(local.tail, tail)
            os.replace(tmp, local.path)
            now.groups, now.tail_at = list(range(groups)), tail_at
            local.write_record(now)
        return Synced(need.rel, fetched=fetched + tail_at, held=version.size)

    # --- requests

    def _piece(self, sink, rel: str, a: int, b: int) -> None:
        sink(a, self.store.read(rel, a, b))

    def _fetch(self, rel: str, ranges, sink) -> None:
        """Every range fetched (in ``CHUNK`` requests on the request threads), ``sink(start, bytes)`` each."""
        pieces = chunks(ranges, CHUNK)
        if not pieces:
            return
        pool = self._requests
        if pool is None or len(pieces) == 1:
            for a, b in pieces:
                sink(a, self.store.read(rel, a, b))
            return
        futures = [pool.submit(self._piece, sink, rel, a, b) for a, b in pieces]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.exception() is not None:
                for g in futures:
                    g.cancel()
                wait(futures)
                raise f.exception()  # type: ignore[misc]  # checked not None above

    def _still(self, rel: str, version: Version) -> None:
        """RemoteChanged unless the object is still ``version`` (a Hub commit never changes: not asked)."""
        if self.store.revision is not None:
            return
        now = self.store.stat(rel)
        if now != version:
            what = "is gone" if now is None else (f"is now {now.size} bytes, tag {now.tag!r}; it was "
                                                  f"{version.size} bytes, tag {version.tag!r}")
            raise RemoteChanged(f"{self.store.name(rel)} changed while the mirror read it: it {what}")


def _seek_gap() -> float:
    from ..video.decode import SEEK_GAP
    return SEEK_GAP


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
