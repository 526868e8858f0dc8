"""Ingest into a coded tier: each video file decoded (PyAV, YUV 4:2:0) and its frames coded, as JPEG
(``codec="jpeg"``, the compressed tier: robocache.frames.jpeg) or losslessly (``codec="lossless"``, the
lossless tier: robocache.frames.lossless), by a pool of workers, one file each, with a progress bar; the
coded frames go into the persistent cache (data + offsets + times), so a second load reads them back
instead of coding. ``ingest_atlas``: the sources of several cameras coded together, one JPEG per timestep
(robocache.frames.atlas), into one cache entry.

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
from dataclasses import dataclass, field

import numpy as np

from .._util import cpu_count, progress_bar
from ..video import FrameSpec, Rows, Ticker, as_sources, decode_job, make_jobs, probe_sources
from . import cache as _cache
from . import reuse
from .ingest import cache_options, file_rates, offsets_of, split_times
from .jpeg import check_qscale, encode_sealed, pack
from .atlas import AtlasLayout, code_atlas
from .jpeg_check import CHECK, FrameOrigin, damaged_rows
from .lossless import encode_rows as encode_lossless_rows
from .pinned import file_pages, pinned_file

_RING = 16   # decoded frames a worker holds before coding them


CODECS = ("jpeg", "lossless")


@dataclass
class Compressed:
    """What ``ingest_compressed`` produced: the coded frames of all files back to back (``data`` uint8,
    frame i = ``data[offsets[i]:offsets[i+1]]``), per-file counts and frame times; ``qscale``: the JPEG
    quantizer (None for ``codec="lossless"``); ``checksum``: the cache entry's; ``checked``: every JPEG
    frame's CRC verified (not for a mapped entry: each on first use)."""

    data: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray
    times: list
    spec: FrameSpec
    qscale: int | None
    from_cache: bool
    cache_path: str | None
    mapped: bool
    seconds: float = 0.0
    frames_per_s: float = 0.0
    sources: list = field(default_factory=list)
    checksum: str | None = None
    checked: bool = True
    codec: str = "jpeg"
    atlas: AtlasLayout | None = None     # jpeg: the cameras of a timestep coded as one image (atlas.py)

    def origin(self, stream: str) -> FrameOrigin:
        """The FrameStore's origin for these frames (jpeg_check: the error naming a damaged frame)."""
        n = len(self.offsets) - 1
        return FrameOrigin(stream, self.sources, self.counts, self.cache_path, self.checksum,
                           None if self.checked else np.ones(n, bool))

    def __repr__(self):
        n = len(self.offsets) - 1
        kind = f"jpeg q{self.qscale}" if self.codec == "jpeg" else self.codec
        if self.atlas is not None:
            kind += f" atlas of {self.atlas.cameras}"
        return (f"Compressed({len(self.counts)} files, {n} frames {kind} {self.spec.height}x"
                f"{self.spec.width}, {self.data.nbytes / 1e6:.1f} MB ({self.data.nbytes / max(n, 1):.0f} B/frame), "
                f"{'from cache' if self.from_cache else 'coded'}{', mapped' if self.mapped else ''} in "
                f"{self.seconds:.2f} s ({self.frames_per_s:.0f} frames/s))")


def ingest_compressed(sources, *, qscale: int | None = 2, resize=None, cache: bool = True, workers: int | None = None,
                      show_progress: bool | None = None, desc: str = "", spec: FrameSpec | None = None,
                      counts=None, infos=None, host_budget: int | None = None, codec: str = "jpeg") -> Compressed:
    """The video sources of ONE stream (one per episode: files, or spans of shared files) into coded
    frames: JPEG bitstreams at ``qscale`` (``codec="jpeg"``), or lossless ones (``codec="lossless"``).

    ``host_budget``: bytes the tier may keep in RAM; a cached entry larger than that is memory-mapped
    (the OS pages it in) instead of read. Raises ReaderError as ``ingest_videos`` does.
    """
    t0 = time.perf_counter()
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    qscale = check_qscale(qscale) if codec == "jpeg" else None
    sources = as_sources(sources)
    paths = [s.path for s in sources]
    if spec is None:
        spec, counts, infos = probe_sources(sources, resize=resize, backend="pyav", workers=workers)
    if spec.format != "yuv420":
        raise ValueError(f"the {codec} tier codes YUV 4:2:0 frames from PyAV; this stream decodes to {spec.format}")
    counts = np.asarray(counts, np.int64)
    if codec == "jpeg":
        options = cache_options(sources, resize, "pyav", tier="compressed", codec="mjpeg", qscale=qscale)
    else:
        # the coded format's version (csrc/lossless_math.h's magic): another format is another entry
        options = cache_options(sources, resize, "pyav", tier="lossless", codec="lossless", format="RCL1")
    label = desc or os.path.basename(os.path.dirname(paths[0]))
    entry = _cache.open_entry(paths, options, label) if cache else None
    cspec = {**spec.to_dict(), "format": codec, "frame_bytes": 0, **({"check": CHECK} if codec == "jpeg" else {})}
    with entry.lock() if entry is not None else contextlib.nullcontext():
        origin = FrameOrigin(desc or label, [str(s) for s in sources], counts)
        got = _load(entry, paths, options, cspec, counts, spec, qscale, host_budget, origin) if entry is not None else None
        if got is None and entry is not None:
            def code(rest: list[int]) -> reuse.Decoded:
                sub = ingest_compressed([sources[i] for i in rest], qscale=qscale, resize=resize, cache=False,
                                        workers=workers, show_progress=show_progress, desc=desc, spec=spec,
                                        counts=counts[rest], infos=None if infos is None else [infos[i] for i in rest],
                                        codec=codec)
                return reuse.Decoded(sub.data, sub.counts, sub.times, cspec, sub.offsets)

            if reuse.assemble(entry, sources, options, cspec, counts, code):    # rows other entries hold
                got = _load(entry, paths, options, cspec, counts, spec, qscale, host_budget, origin)
        if got is None:
            got = _code_all(sources, spec, counts, infos, qscale, entry, options, cspec, workers, show_progress,
                            desc or label)
    got.sources = [str(s) for s in sources]
    got.codec = codec
    got.seconds = time.perf_counter() - t0
    got.frames_per_s = (len(got.offsets) - 1) / got.seconds if got.seconds > 0 else float("inf")
    return got


def ingest_atlas(cameras: list, *, qscale: int = 2, resize=None, cache: bool = True, workers: int | None = None,
                 show_progress: bool | None = None, desc: str = "", spec: FrameSpec, counts, infos=None,
                 host_budget: int | None = None) -> Compressed:
    """The video sources of K cameras (``cameras[k]``: one source per episode; every camera has
    ``counts[e]`` frames of ``spec``'s geometry in episode e) into JPEG atlases at ``qscale``: frame i of
    the result is timestep i of every camera (robocache.frames.atlas). One cache entry covers all the
    cameras' sources. Raises atlas.TimesDiffer when the cameras' frame times differ (nothing is cached)."""
    t0 = time.perf_counter()
    qscale = check_qscale(qscale)
    cameras = [as_sources(c) for c in cameras]
    if spec.format != "yuv420":
        raise ValueError(f"the atlas codes YUV 4:2:0 frames from PyAV; these decode to {spec.format}")
    layout = AtlasLayout(len(cameras), spec.height, spec.width)
    counts = np.asarray(counts, np.int64)
    flat = [s for c in cameras for s in c]
    paths = [s.path for s in flat]
    options = cache_options(flat, resize, "pyav", tier="compressed", codec="mjpeg", qscale=qscale,
                            atlas=layout.cameras)
    label = desc or os.path.basename(os.path.dirname(paths[0]))
    entry = _cache.open_entry(paths, options, label) if cache else None
    cspec = {**spec.to_dict(), "format": "jpeg", "frame_bytes": 0, "check": CHECK, "atlas": layout.cameras}
    with entry.lock() if entry is not None else contextlib.nullcontext():
        origin = FrameOrigin(desc or label, [str(s) for s in cameras[0]], counts)
        got = _load(entry, paths, options, cspec, counts, spec, qscale, host_budget, origin) if entry is not None else None
        if got is None:
            rates = [file_rates(c, None if infos is None else infos[k], "pyav") for k, c in enumerate(cameras)]
            stats = _cache.stat_sources(paths) if entry is not None else None
            frames, per_source = code_atlas(cameras, spec, counts, rates, layout, qscale,
                                            lambda rows: encode_sealed(rows, layout.atlas_height, spec.width, qscale),
                                            workers=workers, show_progress=show_progress, desc=desc or label)
            got = _coded(frames, per_source, counts, spec, qscale, entry, paths, options, cspec, stats)
    got.sources = [str(s) for s in cameras[0]]
    got.atlas = layout
    got.seconds = time.perf_counter() - t0
    got.frames_per_s = (len(got.offsets) - 1) * layout.cameras / got.seconds if got.seconds > 0 else float("inf")
    return got


def _load(entry, paths, options, cspec, counts, spec, qscale, host_budget, origin):
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
        # in RAM as the cache file's own pages, populated in one call (no fresh memory filled by a read);
        # with a GPU, pinned in place (nvJPEG and the lossless decoder read them over the bus)
        pages = pinned_file(entry.data_path, (total,)) if _cuda() else None
        pages = pages if pages is not None else file_pages(entry.data_path, (total,))
        data = pages.numpy() if pages is not None else np.fromfile(entry.data_path, np.uint8, count=total)
        # in RAM: every frame's CRC now, so a damaged one is coded again before any batch (a mapped
        # entry's frames are checked on first use instead: reading them all would read the whole file)
        bad = damaged_rows(data, offsets) if cspec["format"] == "jpeg" else []   # lossless: no CRC (yet)
        if len(bad):
            failed = entry.remove()
            _cache.warn(f"robocache cache entry {entry.meta_path} ({origin.stream}) has {len(bad)} damaged frames, "
                        f"the first {origin.where(int(bad[0]))}; " +
                        ("coding again and rebuilding it" if failed is None else
                         f"coding without it (it cannot be removed: {failed.strerror or failed})"))
            return None
    entry.held_by(data)     # a map of the entry's file: not evicted nor cleared while it lives
    return Compressed(data, offsets, counts, split_times(times, offsets_of(counts)), spec, qscale, True,
                      str(entry.data_path), mapped, checksum=meta["checksum"], checked=not mapped)


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _code_all(sources, spec, counts, infos, qscale, entry, options, cspec, workers, show_progress,
              desc) -> Compressed:
    paths = [s.path for s in sources]
    stats = _cache.stat_sources(paths) if entry is not None else None
    want = max(1, int(workers or cpu_count()))
    jobs = make_jobs(sources, counts, offsets_of(counts)[:-1], file_rates(sources, infos, "pyav"), parts=want)
    workers = min(want, len(jobs))
    H, W, fb = spec.height, spec.width, spec.frame_bytes
    stop = threading.Event()
    bar = progress_bar(int(counts.sum()), desc, show_progress)
    local = threading.local()
    frames: list = [None] * int(counts.sum())  # each frame's bitstream, in store order

    def work(job):
        if stop.is_set():
            return None
        ring = getattr(local, "ring", None)
        if ring is None:
            ring = local.ring = np.empty((_RING, fb), np.uint8)

        def code(first, sl):
            coded = encode_lossless_rows(ring[sl], H, W) if qscale is None else encode_sealed(ring[sl], H, W, qscale)
            for k, bits in enumerate(coded):
                frames[job.place(first + k)] = bits

        rows = Rows(job.n, ring, flush=code)
        tick = Ticker(bar)
        try:
            # one decoder thread per job: the pool already runs one job per core
            times = decode_job("pyav", job, rows, spec, threads=1, tick=tick, stop=stop)
            if times is None:
                return None
            rows.finish(job.n)
        except BaseException:
            stop.set()
            raise
        finally:
            tick.flush()
        return times

    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="robocache-code") as pool:
            results = list(pool.map(work, jobs))
    finally:
        if bar is not None:
            bar.close()
    per_source: list = [None] * len(sources)       # each source's frame times
    for job, got in zip(jobs, results):
        for i, t in zip(job.index, got):
            per_source[i] = t
    return _coded(frames, per_source, counts, spec, qscale, entry, paths, options, cspec, stats)


def _coded(frames: list, per_source: list, counts, spec, qscale, entry, paths, options, cspec, stats) -> Compressed:
    """The freshly coded bitstreams (``frames``, store order; emptied) joined into one buffer, written to
    the cache entry when there is one: the Compressed result of a coding run."""
    data, offsets = pack(frames)
    frames.clear()                      # the bitstreams now live in `data` only
    times = np.concatenate(per_source) if per_source else np.zeros(0)
    path = meta = None
    if entry is not None:
        path = _save(entry, data, offsets, counts, times, stats, options, cspec)
        meta = _cache.peek(entry, paths, options) if path is not None else None
    return Compressed(data, offsets, counts, split_times(times, offsets_of(counts)), spec, qscale, False, path,
                      False, checksum=None if meta is None else meta.get("checksum"))


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
        _cache.warn(f"robocache could not write the coded frames to its cache in {entry.root} ({e}); "
                    f"the next load codes them again")
        return None
