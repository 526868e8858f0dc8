"""The compressed tier's frame check: a CRC-32 sealed into every JPEG it codes, and the error that names a
frame which fails it or fails to decode.

The cache entry's checksum reads only three frames per source file (a load must stay cheap), so damage in
any other JPEG used to surface in the training loop as FFmpeg's or nvJPEG's bare error on every run, or
not at all (a JPEG decoder conceals damaged entropy data as garbled blocks). Each frame therefore carries
its own CRC-32, in an APP15 segment right after the SOI marker (every JPEG decoder skips APPn segments;
12 bytes a frame), covering every byte after it; the segment's fixed bytes are checked too, so a damaged
byte anywhere in the frame shows. Cost (docs/perf-notes.md, benchmarks/bench_frame_check.py): zlib's
CRC-32 reads 0.5-2 GB/s a core, next to the load it guards:

- a cache entry read into RAM is checked whole at load (threads): a damaged frame is warned about and
  the entry coded again before any batch;
- an entry mapped from disk (larger than the host budget: reading it all would read the whole file) is
  checked frame by frame on first use, in the batch that samples it (once per frame and process);
- a frame that fails its check or its decode in a batch raises ``DamagedFrameError`` naming the stream,
  the episode, the frame, its source and the cache entry, and marks the entry for a rebuild
  (``cache.mark_damaged``), so the next load codes the stream again instead of failing on every run.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .._util import cpu_count

#: SOI, then an APP15 segment: its length (10: itself, the tag, the CRC), the tag; the CRC follows
SEAL = b"\xff\xd8\xff\xef\x00\x0arcrc"
HEAD = len(SEAL) + 4       # bytes before the coded JPEG's own segments: the CRC covers the rest
CHECK = "crc32-app15"      # what a cache entry records of it (its spec: entries without it are rebuilt)


class DamagedFrameError(RuntimeError):
    """A compressed-tier frame failed its CRC or its decode; the message names the stream, the episode, the
    frame, its source and the cache entry (which is marked for a rebuild)."""


def seal(bits: bytes) -> bytes:
    """A JPEG bitstream with its CRC segment after SOI."""
    if bits[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG bitstream (no SOI marker)")
    body = bits[2:]
    return SEAL + zlib.crc32(body).to_bytes(4, "big") + body


def damaged_rows(data: np.ndarray, offsets: np.ndarray, rows=None, workers: int | None = None) -> np.ndarray:
    """The rows among ``rows`` (default: all; int64, sorted, unique) whose span is not sealed or whose CRC
    does not match. The CRCs run on threads (zlib releases the GIL for spans over 5 KiB)."""
    n = len(offsets) - 1
    rows = np.arange(n, dtype=np.int64) if rows is None else np.unique(np.asarray(rows, np.int64))
    if not len(rows):
        return rows
    starts, ends = offsets[rows], offsets[rows + 1]
    sized = ends - starts >= HEAD
    head = np.zeros((len(rows), HEAD), np.uint8)
    head[sized] = data[starts[sized, None] + np.arange(HEAD)]
    sealed = sized & (head[:, :len(SEAL)] == np.frombuffer(SEAL, np.uint8)).all(axis=1)
    want = np.ascontiguousarray(head[:, len(SEAL):]).view(">u4")[:, 0]     # the CRC each frame carries
    got = np.zeros(len(rows), np.uint32)
    view = np.ascontiguousarray(data).data.cast("B")       # no copy: the store's bytes are contiguous
    at, to = (starts + HEAD).tolist(), ends.tolist()

    def crc(part):
        for k in part.tolist():
            got[k] = zlib.crc32(view[at[k]:to[k]])

    todo = np.flatnonzero(sealed)
    threads = max(1, min(workers or cpu_count(), len(todo) // 256))    # a pool pays off from ~256 frames a thread
    if threads == 1:
        crc(todo)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(crc, np.array_split(todo, threads)))
    return rows[~sealed | (got != want)]


@dataclass(eq=False)
class FrameOrigin:
    """Where a compressed store's frames came from, for the error that names a damaged one.

    stream    the dataset's stream name
    sources   one per episode of the load, in storage order (a file, or a span of one)
    counts    frames per source, int64 [E]
    entry     the cache entry's data file (None: not cached)
    checksum  the entry's checksum as loaded (marking it checks it is still that entry)
    unchecked bool per storage row: CRC not verified yet (a mapped entry); None: every frame verified
    rows      storage row -> row of the load (a subset's own bitstreams); None: the same
    """

    stream: str
    sources: list
    counts: np.ndarray
    entry: str | None = None
    checksum: str | None = None
    unchecked: np.ndarray | None = None
    rows: np.ndarray | None = field(default=None, repr=False)

    def take(self, rows: np.ndarray) -> FrameOrigin:
        """The origin of a store made of storage rows ``rows`` of this one."""
        rows = np.asarray(rows, np.int64)
        return FrameOrigin(self.stream, self.sources, self.counts, self.entry, self.checksum,
                           None if self.unchecked is None else self.unchecked[rows].copy(),
                           rows if self.rows is None else self.rows[rows])

    def where(self, row: int) -> str:
        """``frame k of episode e (source)`` for a storage row."""
        r = int(row if self.rows is None else self.rows[row])
        ends = np.cumsum(self.counts)
        e = int(np.searchsorted(ends, r, side="right"))
        if e >= len(self.sources):
            return f"row {r}"
        return f"frame {r - int(ends[e] - self.counts[e])} of episode {e} ({self.sources[e]})"


def check_sampled(store, rows: np.ndarray) -> None:
    """CRC of the sampled storage ``rows`` not verified yet (a mapped entry's); DamagedFrameError on the
    first that fails."""
    origin = store.origin
    if origin is None or origin.unchecked is None:
        return
    rows = rows[origin.unchecked[rows]]
    if not len(rows):
        return
    bad = damaged_rows(store.data, store.offsets, rows)
    if len(bad):
        raise damaged(store, int(bad[0]), "fails its checksum (its bytes changed since it was coded)")
    origin.unchecked[rows] = False


def damaged(store, row: int, reason: str) -> DamagedFrameError:
    """The error for storage ``row`` of a compressed store; marks its cache entry for a rebuild."""
    from . import cache
    origin = store.origin
    if origin is None:
        return DamagedFrameError(f"robocache: frame {row} of a compressed frame store {reason}")
    what = f"robocache: {origin.where(row)} of stream {origin.stream!r}"
    if origin.entry is None:
        return DamagedFrameError(f"{what} {reason}; it is not cached: the next load codes it again")
    failed = cache.mark_damaged(origin.entry, origin.checksum, f"{origin.where(row)} {reason}")
    then = ("the entry is marked for a rebuild: the next load codes the stream again" if failed is None else
            f"it could not be marked for a rebuild ({failed.strerror or failed}): remove it with "
            f"`python -m robocache cache clear {os.path.basename(origin.entry).split('.', 1)[0]}`")
    return DamagedFrameError(f"{what}, in cache entry {origin.entry}, {reason}; {then}")
