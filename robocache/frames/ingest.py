"""Video sources -> decoded frames in their final buffer, in parallel, with a persistent cache.

One image stream = one video source per episode (``robocache.video.VideoSource``: a whole file, LeRobot
v2.x; or the episode's span of a shared mp4, v3.0). ``probe_sources`` reads the files' metadata (no
decoding) into a ``FrameSpec`` and per-source frame counts: the memory plan is made from it.
``ingest_videos`` decodes every source straight into its rows of the tier's buffer, one job per file
(a shared mp4 is decoded once for all the selected episodes it holds: seek to the first span, stop after
the last, robocache.video.decode):

    tier "device"  torch uint8 CUDA tensor; each worker decodes into its own pinned staging ring
                   of two halves (STAGE_BYTES); a full half goes to the device by an async copy on
                   the worker's stream and to the cache file, while the decoder fills the other
    tier "host"    torch uint8 CPU tensor, pinned when torch sees a CUDA device (after decoding);
                   jobs are decoded into it in place, and written to the cache file from there
                   a chunk at a time as they are decoded
    tier "disk"    torch CPU tensor over a memory map of the cache file; each worker decodes into a
                   staging ring written to the file with pwrite (decoding into a writable map would
                   count every written page in the process's RSS)

The file writes run on threads of their own (``writes.FileWrites``); from PROCESS_MIN_WORKERS jobs at once
PyAV decodes in processes (``processes.py``). Frames from PyAV stay YUV 4:2:0 as the decoder hands them
back; OpenCV and torchvision hand back RGB. Rules for other sources: docs/frames-ingest.md.

``ingest_videos`` describes the stream as its tier's sink (``DeviceSink``, ``HostSink``, ``DiskSink``: where a
decoded row goes, what a cached file becomes); entry.py takes it through the cache entry's steps (lock, look
up and check, reuse, decode, save, commit), the same for every ingest.

Benchmark: ``python benchmarks/bench_ingest.py`` (frames/s against PyAV alone on the same cores).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._util import cpu_count, progress_bar
from ..video import (FrameSpec, Rows, VideoSource, as_sources, check_resize, decode_job, make_jobs, probe_sources,
                     resolve_backend)
from . import cache as _cache
from . import entry as _entry
from . import reuse
from .buffers import Uploader, device_buffer, host_buffer, host_pages, map_file, ingest_device, shape, torch_or_error, upload
from .entry import Expect, Made, Sink, cache_options, entry_label, file_rates, job_times, offsets_of, split_times
from .processes import decode_in_processes, decode_processes
from .writes import Done, FileWrites, open_writer, write_direct

# ROBOCACHE_DECODER_THREADS: threads per decoder (0: FFmpeg/dav1d's choice); unset: decoder_threads()
_env_threads = os.environ.get("ROBOCACHE_DECODER_THREADS")
DECODER_THREADS = int(_env_threads) if _env_threads not in (None, "") else None
STAGE_BYTES = 32 << 20  # per-worker staging ring of tiers device and disk (two halves); host: a write


@dataclass
class Ingested:
    """What ``ingest_videos`` produced. ``data`` rows of all sources back to back in the order given;
    source i is rows ``offsets[i]:offsets[i+1]``; ``times[i]`` its frame times (seconds from its span's
    start)."""

    data: object  # torch.Tensor [N, frame_bytes] (yuv420) or [N, H, W, 3] (rgb)
    counts: np.ndarray
    offsets: np.ndarray
    times: list
    spec: FrameSpec
    from_cache: bool
    cache_path: str | None
    seconds: float
    frames_per_s: float
    tier: str = ""
    infos: list = field(default_factory=list, repr=False)
    reused: int = 0   # sources whose frames were copied from other cache entries (reuse.py)

    def __repr__(self):
        d = self.data
        where = f"{getattr(d, 'device', 'cpu')}" + (" pinned" if getattr(d, "is_pinned", lambda: False)() else "")
        return (f"Ingested({len(self.counts)} sources, {int(self.offsets[-1])} frames {self.spec.format} "
                f"{self.spec.height}x{self.spec.width}, tier {self.tier!r} ({where}), "
                f"{'from cache' if self.from_cache else 'decoded'} in {self.seconds:.2f} s "
                f"({self.frames_per_s:.0f} frames/s))")


def decoder_threads(workers: int) -> int:
    """Threads per PyAV decoder when `workers` jobs decode at once: DECODER_THREADS when set; else
    FFmpeg/dav1d's own choice (0: about 1.5 threads per core) while fewer jobs than cores are in
    flight, so that each decoder can spread over the idle cores (on 2 cores, one file per core with
    auto threads beat one thread per decoder and one decoder with all threads); and 2 once every core
    has a job, where 16 decoders of 24 threads each oversubscribe 16 cores: on the H100 host (32 real
    AV1 files, 16 workers) 2 threads ingested 9-16% faster than auto, 4 threads 1-15%."""
    if DECODER_THREADS is not None:
        return DECODER_THREADS
    return 2 if workers >= cpu_count() else 0


def cached_layout(sources, *, resize=None, backend: str = "auto", desc: str = ""):
    """``(spec, counts)`` of the cache entry ``ingest_videos`` would read for these sources, when it passes
    the entry's check (entry.check; its spec against the first file's header); else None. A reload's
    memory plan starts from it instead of probing every file (a v3.0 span's frames are counted from its
    file's packets: a demux of every file)."""
    sources, resize, name = as_sources(sources), check_resize(resize), resolve_backend(backend)
    got = _entry.peek(sources, cache_options(sources, resize, name), entry_label(sources, desc),
                      Expect(sources=sources, resize=resize, backend=name))
    return None if got is None else (FrameSpec.from_dict(got[0]), got[1])


def reused_layout(sources, *, resize=None, backend: str = "auto", desc: str = ""):
    """``(spec, counts)`` of sources every one of which another cache entry holds (another episode
    subset's, reuse.py), else None: a subset's memory plan needs no probe of its files. Its load still
    writes an entry of its own (the plan counts its disk space)."""
    sources, resize, name = as_sources(sources), check_resize(resize), resolve_backend(backend)
    got = _entry.peek_donors(sources, cache_options(sources, resize, name), entry_label(sources, desc),
                             Expect(sources=sources, resize=resize, backend=name))
    return None if got is None else (FrameSpec.from_dict(got[0]), got[1])


# ---------------------------------------------------------------------------------------------
# the public entry point


def ingest_videos(sources, *, tier: str, device=None, resize=None, backend: str = "auto", cache: bool = True,
                  workers: int | None = None, show_progress: bool | None = None, desc: str = "",
                  spec: FrameSpec | None = None, counts=None, infos=None) -> Ingested:
    """Decode the video sources of ONE stream (one per episode) into one tier's buffer.

    Parameters
    ----------
    sources : list of str, PathLike or robocache.video.VideoSource
        One per episode: a whole file, or an episode's span of a shared file (LeRobot v3.0); rows of all
        sources back to back in this order. Sources sharing a file are decoded in one pass.
    tier : "device" | "host" | "disk"
        device: a torch uint8 CUDA tensor on ``device`` (default: the current CUDA device);
        host: a torch uint8 CPU tensor, pinned when torch sees a CUDA device;
        disk: a torch CPU tensor over a memory map of the cache file (paged in on demand).
    resize : (height, width), optional
        Resized while decoding (PyAV's swscale, bilinear; to yuv420p keeping the color facts).
    backend : "auto" | "pyav" | "opencv" | "torchvision"
        PyAV gives YUV 4:2:0 frames, the others RGB (``spec.format``).
    cache : bool
        Read a valid cache entry instead of decoding, and write one after decoding. False neither
        reads nor writes (tier "disk", and decoding in processes, still need a file: a temporary
        one in the cache directory, deleted once mapped).
    workers : int, optional
        Jobs (files) decoded at once (default: one per core, at most one per job); from 8 at once, PyAV
        decodes in processes of their own (``decode_in_processes``; ROBOCACHE_DECODE_PROCESSES=0/1).
    show_progress : bool, optional
        A progress bar in frames/s (default: when stderr is a TTY; tqdm needed).
    desc : str
        Label of the bar and of the cache entry (e.g. the stream's key).
    spec, counts, infos : optional
        What ``probe_sources`` returned, when the caller already has it (the memory plan): saves
        probing the files again. A cache entry made with another spec or counts is rebuilt.

    Returns
    -------
    Ingested

    Raises ReaderError naming the file when one is missing, unreadable, truncated or decodes to a
    frame count other than its container (or, for a span, its packets) declares, or when files of the
    stream differ in size or format; CacheError when tier "disk" cannot have its file (naming the
    directory and the bytes).
    """
    if tier not in SINKS:
        raise ValueError(f"tier must be one of {tuple(SINKS)} (where ingest_videos decodes into), got {tier!r}")
    torch = torch_or_error()  # before the clock starts: the first import of torch takes seconds
    t_start = time.perf_counter()
    sources = as_sources(sources)
    resize = check_resize(resize)
    name = resolve_backend(backend)
    dev = ingest_device(torch, tier, device)
    if (spec is None) != (counts is None):
        raise ValueError("pass spec and counts together (both from probe_sources), or neither")
    if spec is not None:
        if not isinstance(spec, FrameSpec):
            raise TypeError(f"spec must be a FrameSpec (from probe_sources), got {type(spec).__name__}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(sources),) or (counts <= 0).any():
            raise ValueError(f"counts must hold one positive frame count per source ({len(sources)}), "
                             f"got {counts!r}")
    sink = SINKS[tier](torch, sources, dev, resize, name, spec, counts, infos, workers, show_progress, desc)
    got = _entry.load(sink, cache=cache)
    got.seconds = time.perf_counter() - t_start
    got.frames_per_s = float(got.offsets[-1]) / got.seconds if got.seconds > 0 else float("inf")
    return got


# ---------------------------------------------------------------------------------------------
# the sinks: one per tier


class TierSink(Sink):
    """One stream's frames in a tier's buffer (``ingest_videos``): from its cache entry, or decoded (on
    threads, each job into ``rows``; or in processes, into the entry's file) and written to the entry's
    file as they come. The tiers differ in where a decoded row goes and what a cached file becomes."""

    tier = ""
    needs_file = False   # a file even without a cache (its frames live there): a failed write fails the ingest
    host: Any = None     # tier host: its buffer, [N, frame_bytes], while the jobs decode into it in place

    def __init__(self, torch, sources: list[VideoSource], dev, resize, backend: str, spec, counts, infos, workers,
                 show_progress, desc: str):
        self.torch, self.sources, self.dev = torch, sources, dev
        self.resize, self.backend, self.spec, self.counts, self.infos = resize, backend, spec, counts, infos
        self.workers, self.show_progress, self.desc = workers, show_progress, desc
        self.options = cache_options(sources, resize, backend)
        self.label = entry_label(sources, desc)
        self.expect = Expect(None if spec is None else spec.to_dict(), counts, sources, resize, backend)

    # --- from the cache

    def load(self, entry, meta, times, reused=0) -> Ingested:
        spec = FrameSpec.from_dict(meta["spec"])
        counts = np.asarray(meta["counts"], np.int64)
        offsets = offsets_of(counts)
        data = self.from_file(entry, spec, int(offsets[-1]))
        return Ingested(data=data, counts=counts, offsets=offsets, times=split_times(times, offsets), spec=spec,
                        from_cache=not reused or reused == len(self.sources), cache_path=str(entry.data_path),
                        seconds=0.0, frames_per_s=0.0, tier=self.tier, reused=reused)

    def from_file(self, entry, spec: FrameSpec, n: int):
        """The tier's buffer of the ``n`` rows of ``entry``'s data file."""
        raise NotImplementedError

    def part(self, rest: list[int]) -> reuse.Decoded:
        """The sources ``rest`` no other entry holds, decoded into a file of their own (no cache)."""
        got = ingest_videos([self.sources[i] for i in rest], tier="disk", resize=self.resize, backend=self.backend,
                            cache=False, workers=self.workers, show_progress=self.show_progress, desc=self.desc,
                            spec=self.spec, counts=None if self.counts is None else self.counts[rest],
                            infos=None if self.infos is None else [self.infos[i] for i in rest])
        return reuse.Decoded(np.asarray(got.data).reshape(-1), got.counts, got.times, got.spec.to_dict())

    # --- decoded

    def probe(self) -> None:
        if self.spec is None:
            self.spec, self.counts, self.infos = probe_sources(self.sources, resize=self.resize, backend=self.backend,
                                                               workers=self.workers)
        self.counts = np.asarray(self.counts, np.int64)

    def decode(self, entry) -> Made:
        offsets = offsets_of(self.counts)
        want = max(1, int(self.workers or cpu_count()))
        jobs = make_jobs(self.sources, self.counts, offsets[:-1], file_rates(self.sources, self.infos, self.backend),
                         parts=want)
        workers = min(want, len(jobs))
        if decode_in_processes(workers, self.backend):
            made = self._in_processes(entry, jobs, workers)
            if made is not None:
                return made
        return self._on_threads(entry, jobs, workers)

    def result(self, made: Made, entry, path) -> Ingested:
        return Ingested(data=made.data, counts=made.counts, offsets=offsets_of(made.counts), times=made.times,
                        spec=self.spec, from_cache=False, cache_path=path, seconds=0.0, frames_per_s=0.0,
                        tier=self.tier, infos=list(self.infos or []))

    def mapped(self, made: Made, entry, path, view):
        """``view(torch, file, spec, n)`` of the file ``made`` decoded into (the committed entry's, held
        while the view lives; or one of its own, which ``build`` then removes from the directory)."""
        data = view(self.torch, path if path is not None else made.file, self.spec, int(made.counts.sum()))
        if path is not None:
            entry.held_by(data)
        return data

    # --- on threads

    def _on_threads(self, entry, jobs, workers) -> Made:
        n, fb = int(self.counts.sum()), self.spec.frame_bytes
        writer = None
        if entry is not None or self.needs_file:
            writer = open_writer(entry, entry.name if entry is not None else "nocache", n * fb,
                                 required=self.needs_file, direct=self.direct(n * fb))
        self.writes = FileWrites(writer, fb, n * fb, self.needs_file) if writer is not None else None
        # rows handed over at a time: a ring half (tiers device and disk), a write of the host buffer
        self.chunk = max(1, min(max(j.n for j in jobs), STAGE_BYTES // 2 // fb))
        self.jobs, self.n_workers, self.threads = jobs, workers, decoder_threads(workers)
        self.staging = threading.local()
        try:
            data = self.decode_all(n)
            if self.writes is not None:
                self.writes.close()
        except BaseException:
            if self.writes is not None:
                self.writes.close(cancel=True)
            if writer is not None:
                writer.abort()
            raise
        if writer is not None and self.writes is not None and self.writes.failed:
            _cache.warn(f"robocache could not write its cache in {writer.root} ({self.writes.failed[0]}); "
                        f"going on without a cache")
            writer.abort()
            writer = None
        return Made(writer, self.spec.to_dict(), self.counts, self.times, data=data)

    def direct(self, nbytes: int) -> bool:
        """Whether the file is written with O_DIRECT (writes.write_direct)."""
        return False

    def decode_all(self, n: int):
        """Every job into the tier's buffer, which is returned (None: the file is the buffer)."""
        data = self.buffer = self.new_buffer(n)
        self.jobs_on_threads(None)
        return data

    def new_buffer(self, n: int):
        return None

    def jobs_on_threads(self, host) -> None:
        """Every job, on the workers' threads (``host``: the host tier's buffer, decoded into in place)."""
        self.host = host.reshape(int(self.counts.sum()), self.spec.frame_bytes) if host is not None else None
        bar = progress_bar(int(self.counts.sum()), self.desc or self.label, self.show_progress)
        self.times = _entry.Jobs(self, bar).run(self.jobs, self.n_workers, len(self.sources), "robocache-ingest")

    def rows(self, job) -> Rows:
        """A job's rows through its worker's staging ring of two halves (the host memory of the jobs in
        flight), each full half handed over (``_RingHandOver``) while the decoder fills the other."""
        if getattr(self.staging, "ring", None) is None:
            self.staging.ring, self.staging.stream = self.new_ring()
        ring = _RingHandOver(self.torch, job, self.staging.ring, self.staging.stream, self.buffer, self.writes)
        return Rows(job.n, ring.buf, ring.rows)

    def new_ring(self):
        """A worker's staging ring (torch uint8 [2 * chunk, frame_bytes]) and the CUDA stream of its copies."""
        return self.torch.empty((2 * self.chunk, self.spec.frame_bytes), dtype=self.torch.uint8), None

    def decode_job(self, job, out, tick, stop):
        return decode_job(self.backend, job, out, self.spec, threads=self.threads, tick=tick, stop=stop)

    # --- in processes

    def _in_processes(self, entry, jobs, workers) -> Made | None:
        """Decoded by processes into a file, the cache entry's (or a temporary one with cache=False), which
        the tier then maps, keeps the pages of or uploads (``uploads``: each job's rows as the job is
        complete). None where no file can be had in the cache directory (the caller decodes on threads)."""
        n, fb = int(self.counts.sum()), self.spec.frame_bytes
        # not warned here: the threads then decode, and say so themselves when the cache cannot be had
        writer = open_writer(entry, entry.name if entry is not None else "nocache", n * fb,
                             required=self.needs_file, warn=False)
        if writer is None:
            return None
        chunk = max(1, min(max(j.n for j in jobs), STAGE_BYTES // 2 // fb))
        data = self.new_buffer(n)
        try:
            with self.uploads(data, writer.fd) as up:
                got = decode_processes(jobs, self.spec, workers=workers, threads=decoder_threads(workers),
                                       data_path=writer.path, chunk=chunk,
                                       bar=progress_bar(n, self.desc or self.label, self.show_progress),
                                       on_job=_JobUploads(jobs, up, fb).done, lock_dir=writer.root)
        except OSError as e:  # the file is the frames here, whatever the tier: a failed write fails the ingest
            writer.abort()
            raise _cache.CacheError(
                e.errno, f"robocache decodes these {len(jobs)} files in processes into one "
                f"{_cache.human_bytes(n * fb)} file in {writer.root}, and could not write it ({e.strerror or e}): "
                f"free space there, point ROBOCACHE_CACHE_DIR at a larger local disk, or decode on threads "
                f"(ROBOCACHE_DECODE_PROCESSES=0)") from e
        except BaseException:
            writer.abort()
            raise
        return Made(writer, self.spec.to_dict(), self.counts, job_times(jobs, got, len(self.sources)), data=data)

    def uploads(self, data, fd):
        """What takes each finished job's rows from the file (device: an Uploader; else nothing)."""
        return contextlib.nullcontext()


class DeviceSink(TierSink):
    """Tier "device": a CUDA tensor. Each worker decodes into its own pinned ring of two halves; a full half
    goes to the device by an async copy on the worker's stream and to the cache file, while the decoder
    fills the other. A cached entry is uploaded through pinned chunks (buffers.upload)."""

    tier = "device"

    def from_file(self, entry, spec, n):
        with open(entry.data_path, "rb") as f:
            return upload(self.torch, f.fileno(), spec, n, self.dev)

    def new_buffer(self, n):
        return device_buffer(self.torch, self.spec, n, self.dev)

    def new_ring(self):
        ring = self.torch.empty((2 * self.chunk, self.spec.frame_bytes), dtype=self.torch.uint8, pin_memory=True)
        return ring, self.torch.cuda.Stream(self.dev)

    def uploads(self, data, fd):
        return Uploader(self.torch, data, fd)


class HostSink(TierSink):
    """Tier "host": a CPU tensor, pinned when torch sees a CUDA device. Jobs decode into it in place, and each
    chunk is written to the cache file from there as it completes (O_DIRECT for an entry large against the
    RAM). A cached entry is the file's own pages (decoded in processes: the same)."""

    tier = "host"

    def from_file(self, entry, spec, n):
        # the cache file's own pages: one copy of the frames in RAM, no fresh memory, no copy; pinned in
        # place for a GPU (72-97 ms for 3.5 GB on the H100 host), plain without one (0.1 s against 1.0 s for
        # the real AV1 set on the 2-core machine)
        data = host_pages(self.torch, entry.data_path, spec, n)
        entry.held_by(data)
        return data

    def direct(self, nbytes):
        return write_direct(nbytes, reserve=nbytes)

    def decode_all(self, n):
        # fresh memory whose pages the decoders fault in (on every core, 2 MiB at a time where the kernel
        # gives huge pages), pinned afterwards when torch sees a GPU
        return host_buffer(self.torch, shape(self.spec, n), fill=self.jobs_on_threads)

    def rows(self, job) -> Rows:
        flush = _HostWrites(job, self.host, self.writes).rows if self.writes is not None else None
        return Rows(job.n, self.host, flush, place=job.place, chunk=self.chunk)

    def result(self, made, entry, path):
        got = super().result(made, entry, path)
        if made.data is None:        # decoded in processes: the file's pages
            got.data = self.mapped(made, entry, path, host_pages)
        return got


class DiskSink(TierSink):
    """Tier "disk": a CPU tensor over a memory map of the cache file (a file of its own with cache=False).
    Each worker decodes into a staging ring written to the file with pwrite (decoding into a writable map
    would count every written page in the process's RSS)."""

    tier = "disk"
    needs_file = True

    def from_file(self, entry, spec, n):
        data = map_file(self.torch, entry.data_path, spec, n)
        entry.held_by(data)
        return data

    def result(self, made, entry, path):
        got = super().result(made, entry, path)
        got.data = self.mapped(made, entry, path, map_file)
        return got


SINKS = {sink.tier: sink for sink in (DeviceSink, HostSink, DiskSink)}     # the tiers ingest_videos decodes into


class _HostWrites:
    """A job's rows in place in the host buffer: each completed chunk written to the file from there, by
    the writes' threads, while the decoder goes on."""

    def __init__(self, job, host, writes: FileWrites):
        self.job, self.host, self.writes = job, host, writes

    def rows(self, first: int, sl: slice):
        return _All([self.writes.submit(row, self.host[row:row + n])
                     for _, row, n in self.job.pieces(first, sl.stop - sl.start)])


class _RingHandOver:
    """A job's rows through its worker's staging ring (tiers device and disk): each full half copied to the
    device by an async copy on the worker's stream (tier device) and written to the file, while the decoder
    fills the other half."""

    def __init__(self, torch, job, ring, stream, data, writes: FileWrites | None):
        self.torch, self.job, self.ring, self.stream, self.data, self.writes = torch, job, ring, stream, data, writes
        self.buf = ring.numpy()

    def rows(self, first: int, sl: slice) -> Done:
        event, futures = None, []
        fb = self.buf.shape[1]
        for off, row, n in self.job.pieces(first, sl.stop - sl.start):
            part = slice(sl.start + off, sl.start + off + n)
            if self.stream is not None:
                with self.torch.cuda.stream(self.stream):
                    self.data.view(-1, fb)[row:row + n].copy_(self.ring[part], non_blocking=True)
            if self.writes is not None:
                futures.append(self.writes.submit(row, self.buf[part]))
        if self.stream is not None:
            event = self.stream.record_event()
        return Done(event, _All(futures))


class _JobUploads:
    """The decode processes' finished jobs: each one's rows uploaded from the file to the device tier
    (``up``, an Uploader; the other tiers map the file)."""

    def __init__(self, jobs, up, fb: int):
        self.jobs, self.up, self.fb = jobs, up, fb

    def done(self, j: int) -> None:
        if self.up is not None:
            for _, row, n in self.jobs[j].pieces(0, self.jobs[j].n):
                self.up.span(row * self.fb, n * self.fb)


class _All:
    """Several write futures as one hand-over handle (``wait`` raises what a write raised)."""

    def __init__(self, futures):
        self.futures = futures

    def wait(self) -> None:
        for f in self.futures:
            f.result()

    def result(self) -> None:
        self.wait()


__all__ = ["FrameSpec", "Ingested", "VideoSource", "cached_layout", "ingest_videos", "probe_sources",
           "reused_layout"]
