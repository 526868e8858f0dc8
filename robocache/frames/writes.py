"""Decoded rows to the cache (or disk-tier) file: the writer, the writes on threads of their own (the
commit that makes the file a cache entry: entry.commit)."""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..machine.memory import available_host_memory
from . import cache as _cache


def open_writer(entry, name, nbytes, required, direct=False, warn=True):
    """An EntryWriter in the cache dir, or None (warned, unless not `warn`) when it cannot be had and
    is not ``required``; tier "disk" requires it: CacheError naming the directory and the bytes."""
    root = entry.root if entry is not None else _cache.frames_dir()
    try:
        return _cache.EntryWriter(root, name, nbytes, direct=direct)
    except OSError as e:
        if required:
            raise _cache.CacheError(
                e.errno, f"tier='disk' needs a {_cache.human_bytes(nbytes)} ({nbytes} bytes) file for the decoded "
                f"frames in {root}, and cannot have it ({e.strerror or e}): free space there, point "
                f"ROBOCACHE_CACHE_DIR at a larger local disk, or use tier='host' (or resize)") from e
        if not warn:
            return None
        _cache.warn(f"robocache cannot write its cache in {root} ({e.strerror or e}; {_cache.human_bytes(nbytes)} "
                    f"needed); going on without a cache")
        return None


class FileWrites:
    """The decoded rows' writes to the cache (or disk-tier) file, on threads of their own: a decoder
    hands rows over and goes on decoding while they go to the page cache (a write of 32 MB there
    takes ~10 ms of a core that the decoder would otherwise have waited out). ``submit(first_row,
    rows)`` returns a future, whatever order the rows come in (pwrite is positional).

    ``direct`` (the host tier, an entry large against the RAM): whole 4 KiB blocks through O_DIRECT
    (a DMA from the page-aligned host buffer, no copy into the page cache), the partial blocks at
    either end of a span through the page cache; a filesystem refusing O_DIRECT (EINVAL) falls back
    to the page cache. A failure goes to ``failed`` and the later writes are skipped (the ingest goes
    on without a cache), except where the file is ``required`` (tier "disk": its data): CacheError."""

    THREADS = 4

    def __init__(self, writer, fb: int, nbytes: int, required: bool):
        self.writer, self.fb, self.nbytes, self.required = writer, fb, nbytes, required
        self.direct = writer.direct  # opened with O_DIRECT: the host tier's large entries
        self.failed: list = []
        self.pool = ThreadPoolExecutor(self.THREADS, thread_name_prefix="robocache-cache-write")

    def submit(self, first_row: int, rows: np.ndarray):
        return self.pool.submit(self._write, first_row * self.fb, rows.reshape(-1))

    def _write(self, offset: int, flat: np.ndarray) -> None:
        if self.failed:
            return
        try:
            if self.direct and flat.ctypes.data % self.writer.BLOCK == offset % self.writer.BLOCK:
                block = self.writer.BLOCK
                lo = min(len(flat), -offset % block)                     # to the first block boundary
                hi = max(lo, (offset + len(flat)) // block * block - offset)  # from the last one
                if hi > lo:
                    try:
                        self.writer.write_direct(offset + lo, flat[lo:hi])
                        self._buffered(offset, flat[:lo])
                        self._buffered(offset + hi, flat[hi:])
                        return
                    except OSError as e:
                        if e.errno != errno.EINVAL:
                            raise
                        self.direct = False  # the filesystem refused O_DIRECT after all: page cache
            self._buffered(offset, flat)
        except OSError as e:
            if self.required:
                raise _cache.CacheError(
                    e.errno, f"tier='disk' could not write {_cache.human_bytes(self.nbytes)} ({self.nbytes} bytes) "
                    f"of decoded frames to {self.writer.root} ({e.strerror or e}): free space there, point "
                    f"ROBOCACHE_CACHE_DIR at a larger local disk, or use tier='host'") from e
            self.failed.append(e)

    def _buffered(self, offset: int, flat: np.ndarray) -> None:
        if len(flat):
            self.writer.write(offset, flat)

    def close(self, cancel: bool = False) -> None:
        if cancel:
            self.failed.append(None)  # queued writes return at once
        self.pool.shutdown(wait=True, cancel_futures=cancel)


def write_direct(nbytes: int, reserve: int = 0) -> bool:
    """Whether the host tier writes its cache file with O_DIRECT: when the entry is large against the
    memory left (> 1/4 of what the host, its cgroup and RLIMIT_AS leave, less ``reserve``, the host buffer still to fill). Through the page
    cache, a small entry stays cached and the next load reads it at memory speed; a large one could
    not stay (the frames themselves fill the RAM), so copying it there would only cost CPU and evict
    other files. ROBOCACHE_CACHE_DIRECT=1 / 0 forces either."""
    env = os.environ.get("ROBOCACHE_CACHE_DIRECT")
    if env in ("0", "1"):
        return env == "1"
    avail = available_host_memory()
    return avail is not None and nbytes > max(0, avail - reserve) // 4


class Done:
    """A ring half's hand-over (tiers device and disk): its copy to the device (a CUDA event), its
    write to the file (a future; raises what the write raised)."""

    def __init__(self, event, future):
        self.event, self.future = event, future

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        if self.future is not None:
            self.future.result()
