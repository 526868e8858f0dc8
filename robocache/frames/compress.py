"""Ingest into the compressed tier: each video file decoded (PyAV, YUV 4:2:0) and its frames coded as
JPEG (robocache.frames.jpeg) by a pool of workers, one file each, with a progress bar; the bitstreams go
into the persistent cache (data + offsets + times), so a second load reads them back instead of coding.

Memory: a worker holds a few decoded frames (a ring of rows) and its file's bitstreams. When every file
is coded, they are joined into one buffer and freed: the peak is twice the tier's bytes for that moment
(compressed bytes: a small share of the decoded frames').
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import cache as _cache
from .ingest import (FrameSpec, _as_paths, _check_present, _decode_pyav_into, _offsets, _progress_bar, _Rows,
                     _split_times, _Ticker, probe_videos)
from .pinned import file_pages
from .planes import cpu_count
from .jpeg import check_qscale, encode_rows, pack

_RING = 16   # decoded frames a worker holds before coding them


@dataclass
class Compressed:
    """What ``ingest_compressed`` produced: the bitstreams of all files back to back (``data`` uint8,
    frame i = ``data[offsets[i]:offsets[i+1]]``), per-file counts and frame times."""

    data: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray
    times: list
    spec: FrameSpec
    qscale: int
    from_cache: bool
    cache_path: str | None
    mapped: bool
    seconds: float = 0.0
    frames_per_s: float = 0.0

    def __repr__(self):
        n = len(self.offsets) - 1
        return (f"Compressed({len(self.counts)} files, {n} frames jpeg q{self.qscale} {self.spec.height}x"
                f"{self.spec.width}, {self.data.nbytes / 1e6:.1f} MB ({self.data.nbytes / max(n, 1):.0f} B/frame), "
                f"{'from cache' if self.from_cache else 'coded'}{', mapped' if self.mapped else ''} in "
                f"{self.seconds:.2f} s ({self.frames_per_s:.0f} frames/s))")


def ingest_compressed(paths, *, qscale: int = 2, resize=None, cache: bool = True, workers: int | None = None,
                      show_progress: bool | None = None, desc: str = "", spec: FrameSpec | None = None,
                      counts=None, host_budget: int | None = None) -> Compressed:
    """The video files of ONE stream (one per episode) into compressed-tier bitstreams.

    ``host_budget``: bytes the tier may keep in RAM; a cached entry larger than that is memory-mapped
    (the OS pages it in) instead of read. Raises ReaderError as ``ingest_videos`` does.
    """
    t0 = time.perf_counter()
    qscale = check_qscale(qscale)
    paths = _as_paths(paths)
    _check_present(paths)
    if spec is None:
        spec, counts, _ = probe_videos(paths, resize=resize, backend="pyav", workers=workers)
    if spec.format != "yuv420":
        raise ValueError(f"the compressed tier codes YUV 4:2:0 frames from PyAV; this stream decodes to {spec.format}")
    counts = np.asarray(counts, np.int64)
    options = {"resize": list(resize) if resize else None, "backend": "pyav", "tier": "compressed",
               "codec": "mjpeg", "qscale": qscale}
    label = desc or os.path.basename(os.path.dirname(paths[0]))
    entry = _cache.open_entry(paths, options, label) if cache else None
    cspec = {**spec.to_dict(), "format": "jpeg", "frame_bytes": 0}
    with entry.lock() if entry is not None else contextlib.nullcontext():
        got = _load(entry, paths, options, cspec, counts, spec, qscale, host_budget) if entry is not None else None
        if got is None:
            got = _code_all(paths, spec, counts, qscale, entry, options, cspec, workers, show_progress, desc or label)
    got.seconds = time.perf_counter() - t0
    got.frames_per_s = (len(got.offsets) - 1) / got.seconds if got.seconds > 0 else float("inf")
    return got


def _load(entry, paths, options, cspec, counts, spec, qscale, host_budget):
    hit = _cache.lookup(entry, paths, options, spec=cspec, counts=counts, redo="coding")
    if hit is None:
        return None
    meta, times = hit
    offsets = meta["offsets"]
    counts = np.asarray(meta["counts"], np.int64)
    total = int(offsets[-1])
    mapped = host_budget is not None and total > host_budget
    if mapped:
        data = np.memmap(entry.data_path, np.uint8, "r", shape=(total,))
    else:
        # in RAM as the cache file's own pages, populated in one call (no fresh memory filled by a read)
        pages = file_pages(entry.data_path, (total,))
        data = pages.numpy() if pages is not None else np.fromfile(entry.data_path, np.uint8, count=total)
    return Compressed(data, offsets, counts, _split_times(times, _offsets(counts)), spec, qscale, True,
                      str(entry.data_path), mapped)


def _code_all(paths, spec, counts, qscale, entry, options, cspec, workers, show_progress, desc) -> Compressed:
    sources = _cache.stat_sources(paths) if entry is not None else None
    workers = max(1, min(int(workers or cpu_count()), len(paths)))
    H, W, fb = spec.height, spec.width, spec.frame_bytes
    stop = threading.Event()
    bar = _progress_bar(int(counts.sum()), desc, show_progress)
    local = threading.local()

    def work(i):
        if stop.is_set():
            return None
        chunks: list[bytes] = []
        ring = getattr(local, "ring", None)
        if ring is None:
            ring = local.ring = np.empty((_RING, fb), np.uint8)
        rows = _Rows(int(counts[i]), ring, flush=lambda first, sl: chunks.extend(encode_rows(ring[sl], H, W, qscale)))
        tick = _Ticker(bar)
        try:
            # one decoder thread per file: the pool already runs one file per core
            times = _decode_pyav_into(paths[i], rows, spec, 1, tick, stop)
            if times is None:
                return None
            rows.finish(int(counts[i]))
        except BaseException:
            stop.set()
            raise
        finally:
            tick.flush()
        return chunks, times

    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="robocache-jpeg") as pool:
            results = list(pool.map(work, range(len(paths))))
    finally:
        if bar is not None:
            bar.close()
    times = [t for _, t in results]
    data, offsets = pack([c for chunks, _ in results for c in chunks])
    results = None                      # the files' bitstreams now live in `data` only
    times = np.concatenate(times) if times else np.zeros(0)
    path = None
    if entry is not None:
        path = _save(entry, data, offsets, counts, times, sources, options, cspec)
    return Compressed(data, offsets, counts, _split_times(times, _offsets(counts)), spec, qscale, False, path,
                      False)


def _save(entry, data, offsets, counts, times, sources, options, cspec):
    """The entry written; on a cache that cannot be written, a warning and None (the tier lives in RAM)."""
    writer = None
    try:
        writer = _cache.EntryWriter(entry.root, entry.name, data.nbytes)
        writer.write(0, data)
        return str(writer.commit(key=_cache.entry_key(sources, options), spec=cspec, counts=counts, times=times,
                                 sources=sources, options=options, offsets=offsets))
    except OSError as e:
        if writer is not None:
            writer.abort()
        _cache.warn(f"robocache could not write the compressed frames to its cache in {entry.root} ({e}); "
                    f"the next load codes them again")
        return None
