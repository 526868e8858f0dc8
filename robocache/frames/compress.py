"""Ingest into a coded tier: each video file decoded (PyAV, YUV 4:2:0) and its frames coded, as JPEG
(``codec="jpeg"``, the compressed tier: robocache.frames.jpeg) or losslessly (``codec="lossless"``, the
lossless tier: robocache.frames.lossless), by a pool of workers, one file each, with a progress bar; the
coded frames go into the persistent cache (data + offsets + times), so a second load reads them back
instead of coding. ``ingest_atlas``: the sources of several cameras coded together, one JPEG per timestep
(robocache.frames.atlas), into one cache entry.

Memory: a worker holds a few decoded frames (a ring of rows) and its file's bitstreams. When every file
is coded, they are joined into one buffer and freed: the peak is twice the tier's bytes for that moment
(compressed bytes: a small share of the decoded frames').

Each entry point describes its stream as a sink (``CodedSink``, ``AtlasSink``); entry.py takes it through
the cache entry's steps (lock, look up and check, reuse, decode, save, commit), as for every ingest.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from .._util import cpu_count, progress_bar
from ..video import FrameSpec, Rows, as_sources, decode_job, make_jobs, probe_sources
from . import cache as _cache
from . import entry as _entry
from . import reuse
from .atlas import AtlasLayout, code_atlas
from .entry import Expect, Made, Sink, cache_options, entry_label, file_rates, offsets_of, split_times
from .jpeg import check_qscale, encode_sealed, pack
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
    if spec is None:
        spec, counts, infos = probe_sources(sources, resize=resize, backend="pyav", workers=workers)
    if spec.format != "yuv420":
        raise ValueError(f"the {codec} tier codes YUV 4:2:0 frames from PyAV; this stream decodes to {spec.format}")
    got = _entry.load(CodedSink(sources, spec, counts, infos, codec, qscale, resize, workers, show_progress, desc,
                                host_budget), cache=cache)
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
    sink = AtlasSink(cameras, spec, counts, infos, qscale, resize, workers, show_progress, desc, host_budget)
    got = _entry.load(sink, cache=cache)
    got.sources = [str(s) for s in cameras[0]]
    got.atlas = sink.layout
    got.seconds = time.perf_counter() - t0
    got.frames_per_s = (len(got.offsets) - 1) * sink.layout.cameras / got.seconds if got.seconds > 0 else float("inf")
    return got


# ---------------------------------------------------------------------------------------------
# the sinks


class CodedSink(Sink):
    """One stream's frames as JPEG or lossless bitstreams (``ingest_compressed``): from its cache entry (in
    RAM, every JPEG's CRC checked; or mapped, beyond ``host_budget``), or decoded a job per file on threads,
    each frame coded in its worker's ring (``rows``), joined into one buffer and saved to the entry."""

    redo = "coding"

    def __init__(self, sources, spec: FrameSpec, counts, infos, codec: str, qscale, resize, workers, show_progress,
                 desc: str, host_budget):
        self.sources, self.spec, self.counts, self.infos = sources, spec, np.asarray(counts, np.int64), infos
        self.codec, self.qscale, self.resize, self.workers = codec, qscale, resize, workers
        self.show_progress, self.desc, self.host_budget = show_progress, desc, host_budget
        self.options = self.entry_options()
        self.label = entry_label(sources, desc)
        self.cspec = {**spec.to_dict(), "format": codec, "frame_bytes": 0, **self.coded_spec()}
        self.expect = Expect(self.cspec, self.counts)
        self.origin = FrameOrigin(desc or self.label, [str(s) for s in sources], self.counts)

    def entry_options(self) -> dict:
        if self.codec == "jpeg":
            return cache_options(self.sources, self.resize, "pyav", tier="compressed", codec="mjpeg",
                                 qscale=self.qscale)
        # the coded format's version (csrc/lossless_math.h's magic): another format is another entry
        return cache_options(self.sources, self.resize, "pyav", tier="lossless", codec="lossless", format="RCL1")

    def coded_spec(self) -> dict:
        """What the entry's spec records of the coding besides the frames' (a JPEG's CRC seal)."""
        return {"check": CHECK} if self.codec == "jpeg" else {}

    def load(self, entry, meta, times, reused=0) -> Compressed | None:
        offsets = meta["offsets"]
        counts = np.asarray(meta["counts"], np.int64)
        total = int(offsets[-1])
        mapped = self.host_budget is not None and total > self.host_budget
        data: np.ndarray
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
            # lossless: no CRC (yet)
            bad = damaged_rows(data, offsets) if self.cspec["format"] == "jpeg" else np.zeros(0, np.int64)
            if len(bad):
                failed = entry.remove()
                _cache.warn(f"robocache cache entry {entry.meta_path} ({self.origin.stream}) has {len(bad)} damaged "
                            f"frames, the first {self.origin.where(int(bad[0]))}; " +
                            ("coding again and rebuilding it" if failed is None else
                             f"coding without it (it cannot be removed: {failed.strerror or failed})"))
                return None
        entry.held_by(data)     # a map of the entry's file: not evicted nor cleared while it lives
        return Compressed(data, offsets, counts, split_times(times, offsets_of(counts)), self.spec, self.qscale,
                          True, str(entry.data_path), mapped, checksum=meta["checksum"], checked=not mapped)

    def part(self, rest: list[int]) -> reuse.Decoded:
        """The sources ``rest`` no other entry holds, coded without a cache."""
        sub = ingest_compressed([self.sources[i] for i in rest], qscale=self.qscale, resize=self.resize, cache=False,
                                workers=self.workers, show_progress=self.show_progress, desc=self.desc, spec=self.spec,
                                counts=self.counts[rest], codec=self.codec,
                                infos=None if self.infos is None else [self.infos[i] for i in rest])
        return reuse.Decoded(sub.data, sub.counts, sub.times, self.cspec, sub.offsets)

    def decode(self, entry) -> Made:
        want = max(1, int(self.workers or cpu_count()))
        jobs = make_jobs(self.sources, self.counts, offsets_of(self.counts)[:-1],
                         file_rates(self.sources, self.infos, "pyav"), parts=want)
        n = int(self.counts.sum())
        self.frames: list = [None] * n  # each frame's bitstream, in store order
        self.local = threading.local()
        times = _entry.Jobs(self, progress_bar(n, self.desc or self.label, self.show_progress)).run(
            jobs, min(want, len(jobs)), len(self.sources), "robocache-code")
        return self.saved(entry, self.frames, times)

    def rows(self, job) -> Rows:
        ring = getattr(self.local, "ring", None)
        if ring is None:
            ring = self.local.ring = np.empty((_RING, self.spec.frame_bytes), np.uint8)
        return Rows(job.n, ring, flush=_Coder(job, ring, self.frames, self.encode).rows)

    def decode_job(self, job, out, tick, stop):
        # one decoder thread per job: the pool already runs one job per core
        return decode_job("pyav", job, out, self.spec, threads=1, tick=tick, stop=stop)

    def encode(self, rows: np.ndarray) -> list[bytes]:
        if self.qscale is None:
            return encode_lossless_rows(rows, self.spec.height, self.spec.width)
        return encode_sealed(rows, self.spec.height, self.spec.width, self.qscale)

    def saved(self, entry, frames: list, times: list) -> Made:
        """The freshly coded bitstreams (``frames``, store order; emptied) joined into one buffer, saved to
        the entry's file when there is an entry."""
        data, offsets = pack(frames)
        frames.clear()                      # the bitstreams now live in `data` only
        writer = _entry.save(entry, data) if entry is not None else None
        return Made(writer, self.cspec, self.counts, times, offsets, data)

    def result(self, made: Made, entry, path) -> Compressed:
        times = np.concatenate(made.times) if made.times else np.zeros(0)
        checksum = made.writer.meta.get("checksum") if path is not None and made.writer is not None else None
        return Compressed(made.data, cast(np.ndarray, made.offsets), self.counts,
                          split_times(times, offsets_of(self.counts)), self.spec, self.qscale, False, path, False,
                          checksum=checksum)


class AtlasSink(CodedSink):
    """The frames of K cameras' streams as JPEG atlases, one per timestep (``ingest_atlas``): coded by
    atlas.code_atlas (the cameras of an episode decoded in lockstep), in one entry of every camera's
    sources. No reuse: another subset's atlases are other images."""

    reuses = False

    def __init__(self, cameras: list, spec: FrameSpec, counts, infos, qscale: int, resize, workers, show_progress,
                 desc: str, host_budget):
        self.cameras, self.layout = cameras, AtlasLayout(len(cameras), spec.height, spec.width)
        super().__init__([s for c in cameras for s in c], spec, counts, infos, "jpeg", qscale, resize, workers,
                         show_progress, desc, host_budget)
        self.origin = FrameOrigin(desc or self.label, [str(s) for s in cameras[0]], self.counts)

    def entry_options(self) -> dict:
        return cache_options(self.sources, self.resize, "pyav", tier="compressed", codec="mjpeg", qscale=self.qscale,
                             atlas=self.layout.cameras)

    def coded_spec(self) -> dict:
        return {"check": CHECK, "atlas": self.layout.cameras}

    def decode(self, entry) -> Made:
        rates = [file_rates(c, None if self.infos is None else self.infos[k], "pyav")
                 for k, c in enumerate(self.cameras)]
        frames, per_source = code_atlas(self.cameras, self.spec, self.counts, rates, self.layout, self.qscale,
                                        self.encode, workers=self.workers, show_progress=self.show_progress,
                                        desc=self.desc or self.label)
        return self.saved(entry, frames, per_source)

    def encode(self, rows: np.ndarray) -> list[bytes]:
        return encode_sealed(rows, self.layout.atlas_height, self.spec.width, self.qscale)


class _Coder:
    """A job's rows from its worker's ring: each chunk coded and its bitstreams put at their store rows."""

    def __init__(self, job, ring: np.ndarray, frames: list, encode):
        self.job, self.ring, self.frames, self.encode = job, ring, frames, encode

    def rows(self, first: int, sl: slice) -> None:
        for k, bits in enumerate(self.encode(self.ring[sl])):
            self.frames[self.job.place(first + k)] = bits


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()
