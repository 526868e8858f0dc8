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

Benchmark: ``python benchmarks/bench_ingest.py`` (frames/s against PyAV alone on the same cores).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from .._util import cpu_count, progress_bar
from ..video import (FrameSpec, Rows, Ticker, VideoSource, as_sources, check_resize, decode_job, make_jobs,
                     probe_sources, probe_video, resolve_backend)
from . import cache as _cache
from . import reuse
from .buffers import Uploader, device_buffer, host_buffer, host_pages, map_file, resolve_device, shape, torch_or_error, upload
from .pool import end_pool, raise_first
from .processes import decode_in_processes, decode_processes
from .writes import Done, FileWrites, commit, open_writer, write_direct

TIERS = ("device", "host", "disk")

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


def cache_options(sources, resize, backend: str, **more) -> dict:
    """What a cache entry's name and key record besides the files: the decode options and, for sources
    that are spans of a file, each one's stream and span."""
    options = {"resize": list(resize) if resize else None, "backend": backend, **more}
    if any(not s.whole or s.stream for s in sources):
        options["spans"] = [s.key() for s in sources]
    return options


def offsets_of(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def split_times(times: np.ndarray, offsets) -> list:
    return [times[offsets[i]:offsets[i + 1]].copy() for i in range(len(offsets) - 1)]


def file_rates(sources, infos, backend: str) -> list:
    """Each source's file frame rate (the span rule's half frame): from ``infos`` when the caller has them,
    else probed once per file that holds spans (whole files need none)."""
    if infos is not None:
        return [info.fps for info in infos]
    rates = {(s.path, s.stream): 0.0 for s in sources}
    for f in {(s.path, s.stream) for s in sources if not s.whole}:
        rates[f] = probe_video(f[0], backend=backend, stream=f[1]).fps
    return [rates[(s.path, s.stream)] for s in sources]


def entry_label(sources, desc: str) -> str:
    return desc or os.path.basename(os.path.dirname(sources[0].path))


def cached_layout(sources, *, resize=None, backend: str = "auto", desc: str = ""):
    """``(spec, counts)`` of the cache entry ``ingest_videos`` would read for these sources, when one looks
    current; else None. A reload's memory plan starts from it instead of probing the files (a v3.0 span's
    frames are counted from its file's packets: a demux of every file)."""
    sources = as_sources(sources)
    options = cache_options(sources, check_resize(resize), resolve_backend(backend))
    meta = _cache.peek(_cache.open_entry([s.path for s in sources], options, entry_label(sources, desc)),
                       [s.path for s in sources], options)
    if meta is None:
        return None
    try:
        return FrameSpec.from_dict(meta["spec"]), np.asarray(meta["counts"], np.int64)
    except (KeyError, TypeError, ValueError):
        return None


def reused_layout(sources, *, resize=None, backend: str = "auto", desc: str = ""):
    """``(spec, counts)`` of sources every one of which another cache entry holds (another episode
    subset's, reuse.py), else None: a subset's memory plan needs no probe of its files. Its load still
    writes an entry of its own (the plan counts its disk space)."""
    sources = as_sources(sources)
    options = cache_options(sources, check_resize(resize), resolve_backend(backend))
    paths = [s.path for s in sources]
    entry = _cache.open_entry(paths, options, entry_label(sources, desc))
    try:
        stats = _cache.stat_sources(paths)
    except OSError:
        return None
    with contextlib.ExitStack() as stack:
        spec, found = reuse.find(entry, sources, stats, options, None, None, stack)
    if spec is None or len(found) != len(sources):
        return None
    return FrameSpec.from_dict(spec), np.array([found[i].count for i in range(len(sources))], np.int64)


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
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    torch = torch_or_error()  # before the clock starts: the first import of torch takes seconds
    t_start = time.perf_counter()
    sources = as_sources(sources)
    resize = check_resize(resize)
    name = resolve_backend(backend)
    dev = resolve_device(torch, tier, device)
    if (spec is None) != (counts is None):
        raise ValueError("pass spec and counts together (both from probe_sources), or neither")
    if spec is not None:
        if not isinstance(spec, FrameSpec):
            raise TypeError(f"spec must be a FrameSpec (from probe_sources), got {type(spec).__name__}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(sources),) or (counts <= 0).any():
            raise ValueError(f"counts must hold one positive frame count per source ({len(sources)}), "
                             f"got {counts!r}")
    options = cache_options(sources, resize, name)
    paths = [s.path for s in sources]
    label = entry_label(sources, desc)

    entry = _cache.open_entry(paths, options, label) if cache else None
    with entry.lock() if entry is not None else contextlib.nullcontext():
        if entry is not None:
            hit = _load_cached(torch, entry, paths, options, tier, dev, spec, counts)
            if hit is None:
                def decode(rest: list[int]) -> reuse.Decoded:
                    got = ingest_videos([sources[i] for i in rest], tier="disk", resize=resize, backend=name,
                                        cache=False, workers=workers, show_progress=show_progress, desc=desc,
                                        spec=spec, counts=None if counts is None else counts[rest],
                                        infos=None if infos is None else [infos[i] for i in rest])
                    return reuse.Decoded(np.asarray(got.data).reshape(-1), got.counts, got.times, got.spec.to_dict())

                reused = reuse.assemble(entry, sources, options, spec.to_dict() if spec is not None else None,
                                        counts, decode)
                hit = _load_cached(torch, entry, paths, options, tier, dev, spec, counts) if reused else None
                if hit is not None:
                    hit.reused, hit.from_cache = reused, reused == len(sources)
            if hit is not None:
                return _finish(hit, t_start)
        if spec is None:
            spec, counts, infos = probe_sources(sources, resize=resize, backend=name, workers=workers)
        res = _decode_all(torch, sources, spec, counts, infos, tier=tier, dev=dev, backend=name, entry=entry,
                          options=options, workers=workers, show_progress=show_progress, desc=desc or label)
        res.infos = list(infos or [])
        return _finish(res, t_start)


def _finish(res: Ingested, t_start: float) -> Ingested:
    res.seconds = time.perf_counter() - t_start
    res.frames_per_s = float(res.offsets[-1]) / res.seconds if res.seconds > 0 else float("inf")
    return res


# ---------------------------------------------------------------------------------------------
# from the cache


def _load_cached(torch, entry, paths, options, tier, dev, spec, counts):
    """An Ingested from a valid entry, or None (no entry; or an invalid one: warned about, removed)."""
    hit = _cache.lookup(entry, paths, options, spec=spec.to_dict() if spec is not None else None, counts=counts,
                        redo="decoding")
    if hit is None:
        return None
    meta, times = hit
    spec = FrameSpec.from_dict(meta["spec"])
    counts = np.asarray(meta["counts"], np.int64)
    offsets = offsets_of(counts)
    n = int(offsets[-1])
    if tier == "disk":
        data = map_file(torch, entry.data_path, spec, n)
    elif tier == "host":
        # the cache file's own pages: one copy of the frames in RAM, no fresh memory, no copy; pinned in
        # place for a GPU (72-97 ms for 3.5 GB on the H100 host), plain without one (0.1 s against 1.0 s for
        # the real AV1 set on the 2-core machine)
        data = host_pages(torch, entry.data_path, spec, n)
    else:
        with open(entry.data_path, "rb") as f:
            data = upload(torch, f.fileno(), spec, n, dev)
    if tier != "device":
        entry.held_by(data)
    return Ingested(data=data, counts=counts, offsets=offsets, times=split_times(times, offsets), spec=spec,
                    from_cache=True, cache_path=str(entry.data_path), seconds=0.0, frames_per_s=0.0, tier=tier)




# ---------------------------------------------------------------------------------------------
# decoding on threads


def _job_times(jobs, results, n_sources) -> list:
    """Each source's frame times, from the jobs' per-span times."""
    times = [None] * n_sources
    for job, got in zip(jobs, results):
        for i, t in zip(job.index, got):
            times[i] = t
    return times


def _decode_all(torch, sources, spec, counts, infos, *, tier, dev, backend, entry, options, workers,
                show_progress, desc) -> Ingested:
    counts = np.asarray(counts, np.int64)
    offsets = offsets_of(counts)
    n_total = int(offsets[-1])
    fb = spec.frame_bytes
    nbytes = n_total * fb
    paths = [s.path for s in sources]
    want = max(1, int(workers or cpu_count()))
    jobs = make_jobs(sources, counts, offsets[:-1], file_rates(sources, infos, backend), parts=want)
    workers = min(want, len(jobs))
    if decode_in_processes(workers, backend):
        res = _decode_all_processes(torch, jobs, paths, spec, counts, tier=tier, dev=dev, entry=entry,
                                    options=options, workers=workers, show_progress=show_progress, desc=desc)
        if res is not None:
            return res
    threads = decoder_threads(workers)

    # the sources as they were when decoding began: the entry's key must describe the bytes decoded
    stats = _cache.stat_sources(paths) if entry is not None else None
    writer = None
    if entry is not None or tier == "disk":
        direct = tier == "host" and write_direct(nbytes, reserve=nbytes)
        writer = open_writer(entry, entry.name if entry is not None else "nocache", nbytes, tier,
                             required=(tier == "disk"), direct=direct)
    writes = FileWrites(writer, fb, tier, nbytes) if writer is not None else None
    # rows handed over at a time: a ring half (tiers device and disk), a write of the host buffer
    chunk = max(1, min(max(j.n for j in jobs), STAGE_BYTES // 2 // fb))
    data = device_buffer(torch, spec, n_total, dev) if tier == "device" else None
    local = threading.local()

    def staging():
        # a worker's ring of two halves (tiers device and disk): the host memory of the jobs in flight
        if getattr(local, "buf", None) is None:
            local.buf = torch.empty((2 * chunk, fb), dtype=torch.uint8, pin_memory=(tier == "device"))
            local.stream = torch.cuda.Stream(dev) if tier == "device" else None
        return local.buf, local.stream

    stop = threading.Event()
    bar = progress_bar(n_total, desc, show_progress)
    pending = []  # the host tier's writes, waited on once every job is decoded

    def host_rows(job, host):
        def flush(first, sl):
            futures = [writes.submit(row, host[row:row + n]) for _, row, n in job.pieces(first, sl.stop - sl.start)]
            return _All(futures)
        return Rows(job.n, host, flush if writes is not None else None, place=job.place, chunk=chunk)

    def ring_rows(job):
        buf_t, stream = staging()
        ring = buf_t.numpy()

        def flush(first, sl):
            event, futures = None, []
            for off, row, n in job.pieces(first, sl.stop - sl.start):
                part = slice(sl.start + off, sl.start + off + n)
                if tier == "device":
                    with torch.cuda.stream(stream):
                        data.view(-1, fb)[row:row + n].copy_(buf_t[part], non_blocking=True)
                if writes is not None:
                    futures.append(writes.submit(row, ring[part]))
            if tier == "device":
                event = stream.record_event()
            return Done(event, _All(futures))

        return Rows(job.n, ring, flush)

    def work(job, host):
        if stop.is_set():
            return None
        out = host_rows(job, host) if tier == "host" else ring_rows(job)
        tick = Ticker(bar)
        times = decode_job(backend, job, out, spec, threads=threads, tick=tick, stop=stop)
        tick.flush()
        if times is None:
            return None
        pending.extend(out.finish(job.n))
        return times

    def decode(host=None):
        """Every job, on `workers` threads; returns each source's times."""
        host = host.reshape(n_total, fb) if host is not None else None
        pool = ThreadPoolExecutor(workers, thread_name_prefix="robocache-ingest")
        futures = []
        try:
            futures = [pool.submit(work, job, host) for job in jobs]
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            end_pool(pool, futures, stop, bar)
        raise_first(futures)
        for f in pending:
            if f is not None:
                f.wait()  # the host buffer is pinned (moved under the driver) once nothing reads it
        return _job_times(jobs, [f.result() for f in futures], len(sources))

    try:
        if tier == "host":
            # decoded into fresh memory whose pages the decoders fault in (on every core, 2 MiB at a time
            # where the kernel gives huge pages), pinned afterwards when torch sees a GPU
            result: dict[str, list] = {}
            data = host_buffer(torch, shape(spec, n_total), fill=lambda arr: result.update(times=decode(arr)))
            times = result["times"]
        else:
            times = decode()
        if writes is not None:
            writes.close()
    except BaseException:
        if writes is not None:
            writes.close(cancel=True)
        if writer is not None:
            writer.abort()
        raise

    cache_path = None
    if writer is not None and writes is not None:    # both or neither
        if writes.failed:
            _cache.warn(f"robocache could not write its cache in {writer.root} ({writes.failed[0]}); "
                        f"going on without a cache")
            writer.abort()
        else:
            cache_path = commit(writer, entry, paths, stats, options, spec, counts, times, tier)
        if tier == "disk":
            data = map_file(torch, cache_path or writer.path, spec, n_total)
            if cache_path is not None:
                entry.held_by(data)
        if cache_path is None:
            writer.abort()  # cache=False or not kept: a file of our own, gone from the directory once mapped
    return Ingested(data=data, counts=counts, offsets=offsets, times=times, spec=spec, from_cache=False,
                    cache_path=cache_path, seconds=0.0, frames_per_s=0.0, tier=tier)


class _All:
    """Several write futures as one hand-over handle (``wait`` raises what a write raised)."""

    def __init__(self, futures):
        self.futures = futures

    def wait(self) -> None:
        for f in self.futures:
            f.result()

    def result(self) -> None:
        self.wait()


# ---------------------------------------------------------------------------------------------
# decoding in processes


def _decode_all_processes(torch, jobs, paths, spec, counts, *, tier, dev, entry, options, workers, show_progress,
                          desc):
    """_decode_all with the decoders in processes (decode_in_processes): every tier decodes into a
    file, the cache entry's (or a temporary one with cache=False), which the decode processes write
    through the page cache. Tier disk maps it; tier host keeps its pages (pinned in place for a GPU:
    one copy of the frames in RAM); tier device uploads each job's rows as the job is complete.
    None where no file can be had in the cache directory (the caller decodes on threads)."""
    counts = np.asarray(counts, np.int64)
    offsets = offsets_of(counts)
    n_total = int(offsets[-1])
    fb = spec.frame_bytes
    stats = _cache.stat_sources(paths) if entry is not None else None
    # not warned here: the threads then decode, and say so themselves when the cache cannot be had
    writer = open_writer(entry, entry.name if entry is not None else "nocache", n_total * fb, tier,
                         required=(tier == "disk"), warn=False)
    if writer is None:
        return None
    chunk = max(1, min(max(j.n for j in jobs), STAGE_BYTES // 2 // fb))
    data = device_buffer(torch, spec, n_total, dev) if tier == "device" else None
    up = Uploader(torch, data, writer.fd) if tier == "device" else contextlib.nullcontext()
    try:
        with up:
            def on_job(j):
                if tier == "device":
                    for _, row, n in jobs[j].pieces(0, jobs[j].n):
                        up.span(row * fb, n * fb)
            got = decode_processes(jobs, spec, workers=workers, threads=decoder_threads(workers),
                                   data_path=writer.path, chunk=chunk,
                                   bar=progress_bar(n_total, desc, show_progress), on_job=on_job,
                                   lock_dir=writer.root)
    except OSError as e:  # the file is the frames here, whatever the tier: a failed write fails the ingest
        writer.abort()
        raise _cache.CacheError(
            e.errno, f"robocache decodes these {len(jobs)} files in processes into one "
            f"{_cache.human_bytes(n_total * fb)} file in {writer.root}, and could not write it ({e.strerror or e}): "
            f"free space there, point ROBOCACHE_CACHE_DIR at a larger local disk, or decode on threads "
            f"(ROBOCACHE_DECODE_PROCESSES=0)") from e
    except BaseException:
        writer.abort()
        raise
    times = _job_times(jobs, got, len(counts))
    cache_path = commit(writer, entry, paths, stats, options, spec, counts, times, tier)
    path = cache_path or writer.path
    if tier == "disk":
        data = map_file(torch, path, spec, n_total)
    elif tier == "host":
        data = host_pages(torch, path, spec, n_total)
    if cache_path is not None and tier != "device":
        entry.held_by(data)
    if cache_path is None:
        writer.abort()  # a file of our own (cache=False, or not kept), gone from the directory once mapped
    return Ingested(data=data, counts=counts, offsets=offsets, times=times, spec=spec, from_cache=False,
                    cache_path=cache_path, seconds=0.0, frames_per_s=0.0, tier=tier)


__all__ = ["FrameSpec", "Ingested", "TIERS", "VideoSource", "ingest_videos", "probe_sources"]
