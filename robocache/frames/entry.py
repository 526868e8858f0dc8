"""A stream's cache entry, written once for every ingest: lock, look up, reuse, decode, save, commit.

Each ingest describes its stream as a ``Sink`` (ingest.py: the device, host or disk tier's buffer;
compress.py: the JPEG or lossless tier's bitstreams, and the JPEG atlas of several cameras) and hands it
to ``load``, which takes every one through the same steps:

    lock     the entry's flock (cache.Entry.lock): one process builds or checks an entry at a time
    look up  ``check``: every field of the entry's JSON against its own files and against the sources;
             an entry that fails is warned about, naming it and the field, removed and built again
    reuse    the sources other entries hold, copied from them (reuse.py); the rest decoded by the sink
    decode   ``sink.decode``: the sources' frames into the sink (``Jobs``: a job per file on threads,
             each writing into ``sink.rows(job)``)
    save     the frames in the entry's file (tiers device, host and disk as rows come; coded tiers at the end)
    commit   times, offsets and JSON renamed into place (``commit``), unless a source changed meanwhile

The memory plan reads an entry's layout before the load (``peek``, ``peek_donors``) through the same check,
quietly: the load itself warns about a damaged entry and rebuilds it, under its lock.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util import ReaderError
from ..video import FrameSpec, Ticker, VideoSource, probe_sources, probe_video
from . import cache as _cache
from . import reuse
from .jpeg_check import SEAL
from .lossless import MAGIC as LOSSLESS_MAGIC
from .pool import end_pool, raise_first

RAW_FORMATS = ("yuv420", "rgb")        # fixed-size rows: tiers device, host and disk
HEADS = {"jpeg": SEAL, "lossless": LOSSLESS_MAGIC}    # coded frames (an offsets file): each one's first bytes


# ---------------------------------------------------------------------------------------------
# what an entry records besides its frames


def cache_options(sources, resize, backend: str, **more) -> dict:
    """What a cache entry's name and key record besides the files: the decode options and, for sources
    that are spans of a file, each one's stream and span."""
    options = {"resize": list(resize) if resize else None, "backend": backend, **more}
    if any(not s.whole or s.stream for s in sources):
        options["spans"] = [s.key() for s in sources]
    return options


def entry_label(sources, desc: str) -> str:
    return desc or os.path.basename(os.path.dirname(sources[0].path))


def offsets_of(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def split_times(times: np.ndarray, offsets) -> list:
    return [times[offsets[i]:offsets[i + 1]].copy() for i in range(len(offsets) - 1)]


def stat_or_none(paths):
    try:
        return _cache.stat_sources(paths)
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# the check: every field of an entry against its own files and against its sources


class Expect:
    """What the sources say their entry holds, for ``check``: the spec dict an entry records and each
    source's frame count, as the caller's probe (the memory plan) gave them. What the caller lacks is read
    from the files only where that is cheap: the spec from the first file's header (one open; no decode,
    no demux); the counts only to name the field of an entry whose checksum failed. A spec the files cannot
    give (one unreadable) is not checked: the entry may then be all there is of the frames."""

    def __init__(self, spec: dict | None = None, counts=None, sources=None, resize=None, backend: str = ""):
        self.given, self.counts = spec, None if counts is None else np.asarray(counts, np.int64)
        self.sources, self.resize, self.backend = sources, resize, backend

    @functools.cached_property
    def spec(self) -> dict | None:
        if self.given is not None or not self.sources:
            return self.given
        first = VideoSource(self.sources[0].path, self.sources[0].stream)   # its header; a span needs a demux
        try:
            return probe_sources([first], resize=self.resize, backend=self.backend, workers=1)[0].to_dict()
        except (ReaderError, OSError, ImportError):
            return None

    def probed_counts(self) -> np.ndarray | None:
        if self.counts is not None or not self.sources:
            return self.counts
        try:
            return probe_sources(self.sources, resize=self.resize, backend=self.backend)[1]
        except (ReaderError, OSError, ImportError):
            return None


# an entry that passed a quiet check (the plan's, ``peek``), for the load that follows: its JSON and its
# files' stat, and what was read of them; taken by the next check of that entry, which then reads no
# frame again when nothing changed (the checksum reads three frames per source)
_PASSED: dict = {}


def check(entry: _cache.Entry, key: str, expect: Expect, *, quiet: bool = False) -> tuple[dict, np.ndarray]:
    """(meta, times) of ``entry`` when every field of its JSON holds: typed; this format, complete, ``key``
    (the sources as they are now); sources and options those the key was made from; the spec one of its
    format (frame bytes, channels); counts one positive count per source, their sum the frames, the times
    and (raw rows) total_bytes / frame_bytes; the data file total_bytes long; the offsets (coded frames)
    increasing spans of it; the checksum; and against ``expect``: spec and counts the sources'. Raises
    InvalidEntry naming the field (ForeignEntry: another user's), FileNotFoundError when there is none.

    ``quiet``: the plan's look before the load: an entry that passes is remembered for that load, and a
    checksum that fails is not followed by a probe of every source to name the field."""
    try:
        raw = entry.meta_path.read_bytes()
    except NotADirectoryError as e:  # the cache dir is a file: there is no entry
        raise FileNotFoundError(str(e)) from None
    _cache.check_owner((entry.meta_path, entry.data_path, entry.times_path, entry.offsets_path))
    meta = _typed(raw)
    spec, counts = meta["spec"], np.asarray(meta["counts"], np.int64)
    if meta["version"] != _cache.FORMAT_VERSION:
        raise _cache.InvalidEntry(f"written by cache format {meta['version']}, this robocache reads "
                                  f"{_cache.FORMAT_VERSION}")
    if meta["complete"] is not True:
        raise _cache.InvalidEntry("incomplete")
    if meta["key"] != key:
        raise _cache.InvalidEntry("stale (a source file changed since it was written)")
    _fields_agree(meta, spec, counts)
    _as_the_sources_say(spec, counts, expect)
    seen = _PASSED.pop(entry.meta_path, None)
    if seen is not None and seen[0] == (raw, _stat(entry)):
        times, offsets = seen[1]
    else:
        times, offsets = _as_the_files_say(entry, meta, spec, counts, None if quiet else expect)
    if quiet:
        while len(_PASSED) >= 64:
            _PASSED.pop(next(iter(_PASSED)))
        _PASSED[entry.meta_path] = ((raw, _stat(entry)), (times, offsets))
    if offsets is not None:
        meta["offsets"] = offsets   # in memory only: the loader needs them
    return meta, times


def _int(value, positive: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
        raise ValueError(f"{value!r} is not a {'positive' if positive else 'non-negative'} integer")
    return value


def _typed(raw: bytes) -> dict:
    """The JSON, every field the check reads of the type it must have; else InvalidEntry("corrupted metadata")."""
    try:
        meta = json.loads(raw.decode("utf-8"))
        if not isinstance(meta, dict) or not isinstance(meta["spec"], dict):
            raise ValueError("not an object")
        spec = meta["spec"]
        for field in ("height", "width", "channels", *(("atlas",) if "atlas" in spec else ())):
            _int(spec[field], positive=True)
        _int(spec["frame_bytes"])
        if not (isinstance(spec["format"], str) and isinstance(spec["matrix"], str)
                and isinstance(spec["full_range"], bool)):
            raise TypeError("spec: format, matrix or full_range of the wrong type")
        if not isinstance(meta["counts"], list) or not isinstance(meta["sources"], list) \
                or not isinstance(meta["options"], dict) or not isinstance(meta["checksum"], str):
            raise TypeError("counts, sources, options or checksum of the wrong type")
        for c in meta["counts"]:
            _int(c)
        _int(meta["frames"])
        _int(meta["total_bytes"])
        missing = {"version", "complete", "key"} - meta.keys()
        if missing:
            raise KeyError(", ".join(sorted(missing)))
    except _cache.BAD_JSON as e:  # UnicodeDecodeError and JSONDecodeError included
        raise _cache.InvalidEntry(f"corrupted metadata ({type(e).__name__}: {e})") from None
    return meta


def _bad(field: str, why: str) -> _cache.InvalidEntry:
    return _cache.InvalidEntry(f"corrupted metadata (field {field}: {why})")


def _fields_agree(meta: dict, spec: dict, counts: np.ndarray) -> None:
    """The JSON's fields against each other: InvalidEntry("corrupted metadata (field ...)") where they disagree."""
    try:
        key = _cache.entry_key(meta["sources"], meta["options"])
    except (*_cache.BAD_JSON, KeyError):
        key = None
    if key != meta["key"]:
        raise _bad("sources or options", "not the files and options its key was made from")
    fmt, h, w = spec["format"], spec["height"], spec["width"]
    if fmt in RAW_FORMATS:
        frame_bytes = FrameSpec.make(fmt, h, w).frame_bytes
    elif fmt in HEADS:
        frame_bytes = 0
    else:
        raise _bad("spec.format", f"{fmt!r} is none of {RAW_FORMATS + tuple(HEADS)}")
    if spec["channels"] != 3:
        raise _bad("spec.channels", f"{spec['channels']}, frames have 3")
    if spec["frame_bytes"] != frame_bytes:
        raise _bad("spec.frame_bytes", f"{spec['frame_bytes']}, a {h}x{w} {fmt} frame has {frame_bytes}")
    per_source = spec.get("atlas") or 1    # an atlas entry: one count per timestep of K cameras' sources
    if len(counts) * per_source != len(meta["sources"]) or (counts <= 0).any():
        raise _bad("counts", f"{counts.tolist()} is not one positive frame count per source "
                            f"({len(meta['sources'])} sources)")
    total, frames, summed = meta["total_bytes"], meta["frames"], int(counts.sum())
    if fmt in RAW_FORMATS and total % frame_bytes:
        raise _bad("total_bytes", f"{total} is not a number of {frame_bytes}-byte frames")
    held = total // frame_bytes if fmt in RAW_FORMATS else frames   # the frames its data holds (raw rows)
    if summed != held or frames != held:
        # the field that disagrees with the other two (coded rows: the times and offsets files tell later)
        field = "frames" if summed == held else "counts"
        raise _bad(field, f"counts and total_bytes disagree: counts {counts.tolist()} sum to {summed}, frames "
                         f"is {frames}, total_bytes {total} holds {held} frames of {frame_bytes} bytes"
                  if fmt in RAW_FORMATS else f"counts {counts.tolist()} sum to {summed}, frames is {frames}")


def _as_the_sources_say(spec: dict, counts: np.ndarray, expect: Expect) -> None:
    """The spec and counts against what the sources say (``expect``): InvalidEntry("stale or damaged ...")."""
    want = expect.spec
    for k, v in (want or {}).items():
        if spec.get(k) != v:
            raise _cache.InvalidEntry(f"stale or damaged (its field spec.{k} is {spec.get(k)!r}, the sources "
                                      f"give {v!r})")
    if expect.counts is not None:
        wrong = _first_difference(counts, expect.counts)
        if wrong:
            raise _cache.InvalidEntry(f"stale or damaged (its field {wrong})")


def _first_difference(counts: np.ndarray, want: np.ndarray) -> str:
    """"counts[i] is a, the source's frames b" for the first count that is not the sources'; "" when all are."""
    if len(counts) != len(want):
        return f"counts holds {len(counts)} counts for {len(want)} sources"
    wrong = np.flatnonzero(counts != want)
    if not len(wrong):
        return ""
    i = int(wrong[0])
    return f"counts[{i}] is {counts[i]}, source {i} has {want[i]} frames"


def _stat(entry: _cache.Entry) -> tuple:
    out: list = []
    for p in (entry.data_path, entry.times_path, entry.offsets_path):
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _as_the_files_say(entry: _cache.Entry, meta: dict, spec: dict, counts: np.ndarray, expect: Expect | None):
    """(times, offsets) of the entry's files when they are what its JSON says: InvalidEntry naming the file
    or field. ``expect``: probed on a failed checksum to name the field (None: not named)."""
    total, frames = meta["total_bytes"], int(counts.sum())
    try:
        size = entry.data_path.stat().st_size
    except FileNotFoundError:
        raise _cache.InvalidEntry("missing its data file") from None
    if size != total:
        raise _cache.InvalidEntry(f"{'truncated' if size < total else 'corrupted'} (the data file has {size} bytes, "
                                  f"its field total_bytes {total})")
    try:
        times = np.load(entry.times_path, allow_pickle=False)
    except Exception as e:  # missing, truncated, not an npy
        raise _cache.InvalidEntry(f"damaged (its field times, the times file: {type(e).__name__}: {e})") from None
    if times.dtype != np.float64 or times.shape != (frames,):
        raise _cache.InvalidEntry(f"damaged (its field times, the times file, holds {times.dtype} {times.shape}; its "
                                  f"field frames is {frames})")
    offsets = None
    if spec["format"] in HEADS:
        try:
            offsets = np.load(entry.offsets_path, allow_pickle=False)
        except Exception as e:
            raise _cache.InvalidEntry(f"damaged (its field offsets, the offsets file: {type(e).__name__}: "
                                      f"{e})") from None
        if (offsets.dtype != np.int64 or offsets.shape != (frames + 1,) or offsets[0] != 0
                or offsets[-1] != total or (np.diff(offsets) <= 0).any()):
            raise _cache.InvalidEntry(f"damaged (its field offsets, the offsets file, holds {offsets.dtype} "
                                      f"{offsets.shape}: not increasing spans of the {total}-byte data file for "
                                      f"{frames} frames)")
    with open(entry.data_path, "rb") as f:
        read = _cache.pread_row(f.fileno(), spec["frame_bytes"], offsets)
        if _cache.checksum(read, counts, spec["frame_bytes"], times, offsets) != meta["checksum"]:
            field = _failed_field(f.fileno(), spec["format"], counts, offsets, expect) if expect is not None else ""
            raise _cache.InvalidEntry(f"corrupted (checksum mismatch: its field {field})" if field else
                                      "corrupted (checksum mismatch)")
    return times, offsets


def _failed_field(fd: int, fmt: str, counts: np.ndarray, offsets, expect: Expect) -> str:
    """The field the checksum found damaged, where the entry and the sources can tell: counts (against every
    source's count, probed), offsets (a coded frame's span not starting with its format's head); "" else."""
    probed = expect.probed_counts()
    wrong = _first_difference(counts, probed) if probed is not None else ""
    if wrong or offsets is None:
        return wrong
    head = HEADS[fmt]
    for i, at in enumerate(offsets[:-1].tolist()):
        if os.pread(fd, len(head), at) != head:
            return f"offsets: frame {i} does not start at offsets[{i}] ({at})"
    return ""


# ---------------------------------------------------------------------------------------------
# the sink: what an ingest keeps, and where its decoded frames go


class Sink:
    """One ingest's stream, as ``load`` takes it through the entry's steps.

    sources, options, label           the entry's slot (cache.open_entry) and key
    expect                            Expect: what the sources say the entry holds
    redo                              what a warning says happens instead of the entry ("decoding")
    reuses                            whether the rows of other entries may make this one (reuse.py)

    load(entry, meta, times, reused)  the result from an entry that passed ``check`` (None: the sink refused
                                      it, warned and removed it); ``reused``: sources copied from others
    part(rest)                        reuse.Decoded: the sources ``rest`` decoded without a cache
    probe()                           the spec and counts, where the caller gave none (before decoding)
    decode(entry)                     every source into the sink, and into the entry's file: a Made
    rows(job)                         where a job's frames go (robocache.video.Rows), on its decode thread
    decode_job(job, rows, tick, stop) that job decoded (each sink its backend and decoder threads)
    result(made, entry, path)         the result of a decode, its entry committed at ``path`` (None: not kept)
    """

    sources: list
    options: dict
    label: str
    expect: Expect
    redo = "decoding"
    reuses = True

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.sources]

    def load(self, entry: _cache.Entry, meta: dict, times: np.ndarray, reused: int = 0) -> Any:
        raise NotImplementedError

    def part(self, rest: list[int]) -> reuse.Decoded:
        raise NotImplementedError

    def probe(self) -> None:
        pass

    def decode(self, entry: _cache.Entry | None) -> Made:
        raise NotImplementedError

    def rows(self, job) -> Any:
        raise NotImplementedError

    def decode_job(self, job, out, tick, stop) -> Any:
        raise NotImplementedError

    def result(self, made: Made, entry: _cache.Entry | None, path: str | None) -> Any:
        raise NotImplementedError


@dataclass
class Made:
    """What a sink's decode made: ``writer`` (cache.EntryWriter), the file its frames are in (None: no
    cache, or one that could not be written); the spec dict the entry records, counts, each source's frame
    times, a coded tier's frame offsets; ``data``: the frames where the sink holds them itself."""

    writer: _cache.EntryWriter | None
    spec: dict
    counts: np.ndarray
    times: list
    offsets: np.ndarray | None = None
    data: Any = None

    @property
    def file(self):
        """The file the frames were decoded into (None: none)."""
        return None if self.writer is None else self.writer.path


def load(sink: Sink, *, cache: bool):
    """The sink's result: from its cache entry when that passes ``check``; else from the rows other entries
    hold (the rest decoded) made into its entry; else decoded, saved and committed. ``cache`` False neither
    reads nor writes an entry."""
    entry = _cache.open_entry(sink.paths, sink.options, sink.label) if cache else None
    with entry.lock() if entry is not None else contextlib.nullcontext():
        got = look_up(entry, sink) if entry is not None else None
        if got is None and entry is not None and sink.reuses:
            donors = functools.partial(check, expect=Expect(sink.expect.spec), quiet=True)
            held = reuse.assemble(entry, sink.sources, sink.options, sink.expect.spec, sink.expect.counts, sink.part,
                                  donors)
            got = look_up(entry, sink, held) if held else None
        return got if got is not None else build(sink, entry)


def look_up(entry: _cache.Entry, sink: Sink, reused: int = 0):
    """``sink.load`` of ``entry`` when it passes ``check``; else None: no entry, or a damaged, stale or
    another user's one (warned about; removed when it is this user's), or an unreadable cache directory."""
    try:
        meta, times = check(entry, _cache.entry_key(_cache.stat_sources(sink.paths), sink.options), sink.expect)
        _cache.touch(entry.meta_path)
    except FileNotFoundError:
        return None
    except _cache.ForeignEntry as e:
        _cache.warn(f"robocache cache entry {entry.meta_path} is {e}; {sink.redo} without it")
        return None
    except _cache.InvalidEntry as e:
        failed = entry.remove()
        # a read-only or another user's cache dir: the entry is skipped, the load goes on
        _cache.warn(f"robocache cache entry {entry.meta_path} is {e}; " +
                    (f"{sink.redo} again and rebuilding it" if failed is None
                     else f"{sink.redo} without it (it cannot be removed: {failed.strerror or failed})"))
        return None
    except OSError as e:  # unreadable cache dir: go on without it
        _cache.warn(f"robocache cannot read its cache in {entry.root} ({e}); {sink.redo}")
        return None
    return sink.load(entry, meta, times, reused)


def build(sink: Sink, entry: _cache.Entry | None):
    """Probe, decode, save, commit: the sink's result from a decode of its sources."""
    sink.probe()
    stats = _cache.stat_sources(sink.paths) if entry is not None else None  # the sources as decoding began
    made = sink.decode(entry)
    path = commit(made, entry, sink.paths, stats, sink.options)
    try:
        return sink.result(made, entry, path)
    finally:
        if path is None and made.writer is not None:
            made.writer.abort()  # a file of its own, not kept: gone from the directory (a map of it stays)


def save(entry: _cache.Entry, data: np.ndarray):
    """A new file of ``entry`` holding ``data`` (every coded frame's bytes): its EntryWriter, or None
    (warned) where the cache cannot be written (the tier then lives in RAM alone)."""
    writer = None
    try:
        writer = _cache.EntryWriter(entry.root, entry.name, data.nbytes)
        writer.write(0, data)
        return writer
    except OSError as e:
        if writer is not None:
            writer.abort()
        _cache.warn(f"robocache could not write its cache in {entry.root} ({e.strerror or e}); going on without it")
        return None


def commit(made: Made, entry, paths, stats, options) -> str | None:
    """Commits ``made``'s file as ``entry``: its path, or None where it is not kept (warned): no entry or no
    file, a source that changed while it was decoded, a commit that failed (a full disk). Not kept never
    fails the load: the file stays at ``made.writer.path`` with every frame, until ``build`` aborts it."""
    if entry is None or made.writer is None:
        return None
    if stat_or_none(paths) != stats:
        _cache.warn("robocache did not keep a cache entry: a source file changed while it was decoded")
        return None
    try:
        times = np.concatenate(made.times) if made.times else np.zeros(0)
        return str(made.writer.commit(key=_cache.entry_key(stats, options), spec=made.spec, counts=made.counts,
                                      times=times, sources=stats, options=options, offsets=made.offsets))
    except OSError as e:
        _cache.warn(f"robocache could not write its cache in {made.writer.root} ({e.strerror or e}); "
                    f"going on without it")
        return None


# ---------------------------------------------------------------------------------------------
# decoding on threads, into a sink


def file_rates(sources, infos, backend: str) -> list:
    """Each source's file frame rate (the span rule's half frame): from ``infos`` when the caller has them,
    else probed once per file that holds spans (whole files need none)."""
    if infos is not None:
        return [info.fps for info in infos]
    rates = {(s.path, s.stream): 0.0 for s in sources}
    for f in {(s.path, s.stream) for s in sources if not s.whole}:
        rates[f] = probe_video(f[0], backend=backend, stream=f[1]).fps
    return [rates[(s.path, s.stream)] for s in sources]


def job_times(jobs, results, n_sources: int) -> list:
    """Each source's frame times, from the jobs' per-span times."""
    times = [None] * n_sources
    for job, got in zip(jobs, results):
        for i, t in zip(job.index, got):
            times[i] = t
    return times


class Jobs:
    """Decode jobs (robocache.video.make_jobs: a file each) on threads, each into ``sink.rows(job)``: the
    first error stops the others at their next frame and is raised as it was; ``bar`` counts frames."""

    def __init__(self, sink: Sink, bar):
        self.sink, self.bar, self.stop = sink, bar, threading.Event()
        self.pending: list = []   # rows written in place: their hand-overs, waited on once every job is decoded

    def run(self, jobs, workers: int, n_sources: int, name: str) -> list:
        """Every job, on ``workers`` threads; each source's frame times."""
        pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        futures: list = []
        try:
            futures = [pool.submit(self.one, job) for job in jobs]
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            end_pool(pool, futures, self.stop, self.bar)
        raise_first(futures)
        for handle in self.pending:
            if handle is not None:
                handle.wait()   # the host buffer is pinned (moved under the driver) once nothing reads it
        return job_times(jobs, [f.result() for f in futures], n_sources)

    def one(self, job):
        if self.stop.is_set():
            return None
        out = self.sink.rows(job)
        tick = Ticker(self.bar)
        try:
            times = self.sink.decode_job(job, out, tick, self.stop)
        finally:
            tick.flush()
        if times is None:
            return None
        self.pending.extend(out.finish(job.n))
        return times


# ---------------------------------------------------------------------------------------------
# the plan's look at an entry, before the load


def peek(sources, options: dict, label: str, expect: Expect) -> tuple[dict, np.ndarray] | None:
    """(spec dict, counts) of the entry a load of these sources and options would read, when it passes
    ``check`` (quietly: no warning, nothing removed, no lock waited on; the load warns about and rebuilds
    a damaged entry); else None."""
    entry = _cache.open_entry([s.path for s in sources], options, label)
    try:
        if not entry.meta_path.is_file():
            return None
        meta, _ = check(entry, _cache.entry_key(_cache.stat_sources([s.path for s in sources]), options), expect,
                        quiet=True)
    except (OSError, _cache.InvalidEntry):
        return None
    return meta["spec"], np.asarray(meta["counts"], np.int64)


def peek_donors(sources, options: dict, label: str, expect: Expect) -> tuple[dict, np.ndarray] | None:
    """(spec dict, counts) of sources every one of which another cache entry holds (reuse.py; their spec
    the sources', ``expect``), else None."""
    paths = [s.path for s in sources]
    entry = _cache.open_entry(paths, options, label)
    try:
        stats = _cache.stat_sources(paths)
    except OSError:
        return None
    donors = functools.partial(check, expect=Expect(expect.spec), quiet=True)
    with contextlib.ExitStack() as stack:
        spec, found = reuse.find(entry, sources, stats, options, expect.spec, None, stack, donors)
    if spec is None or len(found) != len(sources):
        return None
    return spec, np.array([found[i].count for i in range(len(sources))], np.int64)
