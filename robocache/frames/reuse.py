"""A cache entry assembled from rows other entries already hold: loading episodes [0, 1] and then [0] or
[0, 1, 2] decodes no file twice.

An entry is one stream's sources back to back (cache.py), so every subset of episodes has its own. When
a load finds no entry of its own, the other entries of the folder are searched for its sources: a
source is the same when its file (absolute path, size, mtime_ns), its stream and span (v3.0) and the
decode options (resize, backend; the compressed tier's codec and quality) are, and the frame format
agrees. Each donor is checked as a load checks it (the caller's ``check``, entry.py's: every field against
its files and the frame format the sources give) under its own lock, taken without waiting (a donor
being built is skipped, never waited on), then its rows are
copied into the new entry's file (``copy_file_range``: in the kernel, or a reflink where the
filesystem shares blocks); the sources no entry holds are decoded on their own and written after them.
Fixed-size rows (tiers device, host, disk) and variable-size ones (the compressed tier's JPEG spans)
alike. The new entry is then committed and loaded like any other, so every tier reads the same bytes.

Disk: each subset still has its own file; ROBOCACHE_CACHE_MAX bounds the folder (cache_folder.evict).
"""

from __future__ import annotations

import contextlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import cache as _cache

COPY_CHUNK = 64 << 20


@dataclass
class Rows:
    """One source's frames: bytes ``[start, end)`` of a file (``fd``: a donor's data file) or of
    ``data`` (freshly decoded), their times, and each frame's size (variable-size rows only)."""

    start: int
    end: int
    times: np.ndarray
    sizes: np.ndarray | None = None
    fd: int = -1
    data: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.times)


@dataclass
class Decoded:
    """What the caller's decode of the sources no entry holds gives back: their frames back to back
    (uint8 bytes), counts, times per source, frame offsets into ``data`` (variable-size rows) and the
    frame format (the spec dict a cache entry records)."""

    data: np.ndarray
    counts: np.ndarray
    times: list
    spec: dict
    offsets: np.ndarray | None = None


def source_ids(sources, stats) -> list[tuple]:
    """What makes two sources the same frames: file, size, mtime, stream, span."""
    return [(st["path"], st["size"], st["mtime_ns"], *s.key()) for s, st in zip(sources, stats)]


def _base(options: dict) -> dict:
    """The decode options of an entry without its sources' spans (those belong to each source)."""
    return {k: v for k, v in options.items() if k != "spans"}


def _donor_ids(meta: dict) -> list[tuple]:
    spans = meta["options"].get("spans") or [[0, None, None]] * len(meta["sources"])
    return [(s["path"], s["size"], s["mtime_ns"], *span) for s, span in zip(meta["sources"], spans)]


def _candidates(entry: _cache.Entry, options: dict, spec: dict | None):
    """(donor Entry, its JSON) of every other current-format, complete entry of this user with the same
    decode options (and frame format, when known), most recently used first."""
    base = _base(options)
    found = []
    for path in entry.root.glob("*.json"):
        name = path.name[:-len(".json")]
        if name == entry.name or "." in name:
            continue
        try:
            _cache.check_owner((path,))
            meta = json.loads(path.read_bytes().decode("utf-8"))
            if (not isinstance(meta, dict) or meta.get("version") != _cache.FORMAT_VERSION
                    or meta.get("complete") is not True or _base(meta.get("options") or {}) != base
                    or (spec is not None and {k: meta["spec"].get(k) for k in spec} != spec)):
                continue
            _donor_ids(meta)     # well formed
            found.append((path.stat().st_mtime, _cache.Entry(name, entry.root), meta))
        except (OSError, _cache.InvalidEntry, *_cache.BAD_JSON):
            continue
    return [(donor, meta) for _, donor, meta in sorted(found, key=lambda f: -f[0])]


def find(entry: _cache.Entry, sources, stats, options: dict, spec: dict | None, counts, stack,
         check: Callable) -> tuple[dict | None, dict]:
    """(spec dict, {source index: Rows}) of the sources other entries hold, each donor passing
    ``check(donor, its key) -> (meta, times)`` first. Donors' data files are opened on ``stack`` (an
    ExitStack: they close with it); a donor renamed over or removed meanwhile keeps its bytes for the
    open descriptor (entries are written by rename, never in place)."""
    want = {ident: i for i, ident in reversed(list(enumerate(source_ids(sources, stats))))}
    found: dict[int, Rows] = {}

    def held(meta) -> list[tuple[int, int]]:
        """(row in the donor, source index) of the sources ``meta``'s entry holds and no donor gave yet."""
        if spec is not None and {k: meta["spec"].get(k) for k in spec} != spec:
            return []
        return [(j, want[ident]) for j, ident in enumerate(_donor_ids(meta)) if ident in want
                and want[ident] not in found]

    for donor, listed in _candidates(entry, options, spec):
        if not held(listed):
            continue
        fd = _cache.lock_file(donor.lock_path, wait=False, create=False)
        if fd is None:       # being built or checked: not waited on
            continue
        try:
            # checked against its own key: intact for the files as they were; `mine` are those unchanged since
            checked, times = check(donor, listed["key"])
            mine = held(checked)     # as validated under the lock (a rebuild may have replaced the one listed)
            data_fd = os.open(donor.data_path, os.O_RDONLY)
        except (OSError, _cache.InvalidEntry, *_cache.BAD_JSON):
            continue
        finally:
            if fd >= 0:
                os.close(fd)
        stack.callback(os.close, data_fd)
        _cache.touch(donor.meta_path)
        spec = {**checked["spec"]} if spec is None else spec
        rows = np.concatenate([[0], np.cumsum(checked["counts"])]).astype(np.int64)
        offsets = checked.get("offsets")
        fb = int(checked["spec"]["frame_bytes"])
        for j, i in mine:
            a, b = int(rows[j]), int(rows[j + 1])
            if counts is not None and b - a != int(counts[i]):
                continue
            at = offsets[a:b + 1] if offsets is not None else np.arange(a, b + 1, dtype=np.int64) * fb
            found[i] = Rows(int(at[0]), int(at[-1]), times[a:b], np.diff(at) if offsets is not None else None,
                            fd=data_fd)
        if len(found) == len(sources):
            break
    return spec, found


def assemble(entry: _cache.Entry, sources, options: dict, spec: dict | None, counts,
             decode: Callable[[list[int]], Decoded], check: Callable) -> int:
    """Builds ``entry`` from the rows other entries hold of ``sources`` (donors passing ``check``, as in
    ``find``; ``decode(indices)`` of the others); returns how many sources came from other entries (0: none
    did, or the entry could not be written: the caller decodes as without this). Call with the entry's
    lock held.

    Fixed-size rows of known counts (a reader's load: the plan probed them) give the file's layout
    before decoding, so the held rows are copied on a thread while the rest decode: on the shared 2-core
    machine (8 of 9 real AV1 episodes held, 908 MB to copy; load average 5) medians of 3 interleaved
    runs 1.83 s one after the other, 1.52 s together (runs spread 1.0-2.5 s)."""
    paths = [s.path for s in sources]
    with contextlib.ExitStack() as stack:
        try:
            stats = _cache.stat_sources(paths)
        except OSError:
            return 0            # a missing file: the caller's decode says which
        spec, found = find(entry, sources, stats, options, spec, counts, stack, check)
        if not found or spec is None:
            return 0
        rest = [i for i in range(len(sources)) if i not in found]
        fb = int(spec["frame_bytes"])
        parts: list[Rows | None] = [found.get(i) for i in range(len(sources))]
        writer: _cache.EntryWriter | None = None
        copying: Future | None = None
        try:
            if fb and counts is not None:
                layout = [p.end - p.start if p is not None else int(counts[i]) * fb for i, p in enumerate(parts)]
                writer = _cache.EntryWriter(entry.root, entry.name, sum(layout))
                copying = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="robocache-reuse")).submit(
                    _copy_held, writer, parts, layout)
            if rest:
                got = decode(rest)
                if {k: got.spec.get(k) for k in spec} != spec or _cache.stat_sources(paths) != stats:
                    return 0    # another format, or a source changed while decoded: the caller's decode says so
                first = np.concatenate([[0], np.cumsum(got.counts)]).astype(np.int64)      # by source
                # each frame's first byte: fixed-size rows, or the spans' offsets
                at = got.offsets if got.offsets is not None else np.arange(first[-1] + 1) * fb
                for k, i in enumerate(rest):
                    lo, hi = int(first[k]), int(first[k + 1])
                    parts[i] = Rows(int(at[lo]), int(at[hi]), np.asarray(got.times[k], np.float64),
                                    np.diff(at[lo:hi + 1]) if got.offsets is not None else None, data=got.data)
            done = [p for p in parts if p is not None]
            sizes = [p.end - p.start for p in done]
            if writer is None:
                writer = _cache.EntryWriter(entry.root, entry.name, sum(sizes))
                _copy_held(writer, done, sizes)
            elif copying is not None:
                copying.result()
                if sizes != layout:
                    return 0
            pos = 0
            for p, n in zip(done, sizes):
                if p.data is not None:
                    writer.write(pos, p.data[p.start:p.end])
                pos += n
            offsets = None
            if done[0].sizes is not None:
                offsets = np.concatenate([[0], np.cumsum(np.concatenate([p.sizes for p in done]))]).astype(np.int64)
            writer.commit(key=_cache.entry_key(stats, options), spec=spec, counts=[p.count for p in done],
                          times=np.concatenate([p.times for p in done]), sources=stats, options=options,
                          offsets=offsets)
            return len(found)
        except OSError as e:
            _cache.warn(f"robocache could not write a cache entry from the frames others hold in {entry.root} "
                        f"({e.strerror or e}); decoding instead")
            return 0
        finally:
            if copying is not None:
                wait([copying])    # the copy into the writer's file ends before that file goes
            if writer is not None:
                writer.abort()     # nothing once committed


def _copy_held(writer: _cache.EntryWriter, parts, sizes) -> None:
    """The rows other entries hold (parts with a donor's ``fd``) into the writer's file at their place."""
    at = 0
    for p, n in zip(parts, sizes):
        if p is not None and p.data is None:
            _copy(p.fd, p.start, writer.fd, at, n)
        at += n


def _copy(src: int, src_at: int, dst: int, dst_at: int, n: int) -> None:
    """n bytes between two files at their offsets: copy_file_range where there is one (the kernel
    copies, or shares the blocks), else pread/pwrite."""
    done = 0
    while done < n:
        step = min(COPY_CHUNK, n - done)
        try:
            got = os.copy_file_range(src, dst, step, src_at + done, dst_at + done)
        except (AttributeError, OSError):    # no such call, or not across these filesystems
            buf = os.pread(src, step, src_at + done)
            got = os.pwrite(dst, buf, dst_at + done) if buf else 0
        if got <= 0:
            raise OSError(f"a cache entry's data file ended {n - done} bytes early")
        done += got
