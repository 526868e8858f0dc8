"""Video files -> decoded frames in their final buffer, in parallel, with a persistent cache.

One image stream = one video file per episode. ``probe_videos`` reads the files' metadata (no
decoding) into a ``FrameSpec`` and per-file frame counts: the memory plan is made from it.
``ingest_videos`` decodes every file straight into its rows of the tier's buffer:

    tier "device"  torch uint8 CUDA tensor; each worker decodes into its own pinned staging ring
                   of two halves (STAGE_BYTES); a full half goes to the device by an async copy on
                   the worker's stream and to the cache file, while the decoder fills the other
    tier "host"    torch uint8 CPU tensor, pinned when torch sees a CUDA device (after decoding);
                   files are decoded into it in place, and written to the cache file from there
                   a chunk at a time as they are decoded
    tier "disk"    torch CPU tensor over a memory map of the cache file; each worker decodes into a
                   staging ring written to the file with pwrite (decoding into a writable map would
                   count every written page in the process's RSS)

The file writes run on threads of their own (``_FileWrites``): a decoder never waits on the page
cache unless both halves of its ring are in flight.

Frames from PyAV stay YUV 4:2:0 as the decoder hands them back (``format="yuv420"``, one row of
``H*W + 2*ceil(H/2)*ceil(W/2)`` bytes per frame: Y, then U, then V, no padding); the batch converts
them to RGB on the device with ``spec.matrix`` / ``spec.full_range``. OpenCV and torchvision hand
back RGB (``format="rgb"``, rows [H, W, 3]). Rules for other sources: docs/frames-ingest.md.

Benchmark: ``python benchmarks/bench_ingest.py`` (frames/s against PyAV alone on the same cores).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import multiprocessing
import os
import threading
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field

import numpy as np

from ..readers._common import ReaderError, progress_enabled, require
from ..readers.video import (RGB_PIX_FMTS, VideoInfo, _check_resize, _opencv_codec, _times_or_index, count_frames,
                             decode_video, opencv_codec_error, probe_video, resolve_backend)
from . import cache as _cache
from .pinned import file_pages, pinned_empty, pinned_file
from .planes import copy_planes, cpu_count, yuv420_geometry
from .store import yuv420_bytes

TIERS = ("device", "host", "disk")

# PyAV decoder threading: frame + slice threads; how many, decoder_threads() (docs/frames-ingest.md).
THREAD_TYPE = "AUTO"
# ROBOCACHE_DECODER_THREADS: threads per decoder (0: FFmpeg/dav1d's choice); unset: decoder_threads()
_env_threads = os.environ.get("ROBOCACHE_DECODER_THREADS")
DECODER_THREADS = int(_env_threads) if _env_threads not in (None, "") else None
# ROBOCACHE_DECODE_PROCESSES=1 / 0: PyAV decoders in processes of their own or threads of this one;
# unset: processes from PROCESS_MIN_WORKERS files at once (decode_in_processes)
_env_procs = os.environ.get("ROBOCACHE_DECODE_PROCESSES")
DECODE_PROCESSES = bool(int(_env_procs)) if _env_procs not in (None, "") else None
PROCESS_MIN_WORKERS = 8
STAGE_BYTES = 32 << 20  # per-worker staging ring of tiers device and disk (two halves); host: a write
UPLOAD_CHUNK = 256 << 20  # cache -> device: two pinned chunks of this size, each read by several threads
POPULATE_MIN_BYTES = 16 << 20  # smaller CPU host buffers come from torch's allocator


@dataclass(frozen=True)
class FrameSpec:
    """The geometry of a stream's stored frames (after resize).

    format      "yuv420": one row of ``frame_bytes`` = H*W + 2*ch*cw bytes per frame (Y plane H x W,
                then U, then V, each ch x cw with ch = (H+1)//2, cw = (W+1)//2, no padding);
                "rgb": rows [H, W, 3] uint8
    height, width, channels (3)
    matrix      "bt601" | "bt709" | "bt2020": the matrix that turns the stored YUV into the RGB PyAV's
                ``to_ndarray(format="rgb24")`` gives; for "rgb" the source's, informational ("" when
                the backend converted without saying how)
    full_range  True: Y/U/V span 0-255 (JPEG range); False: limited (Y 16-235, U/V 16-240)
    frame_bytes bytes per stored frame
    """

    format: str
    height: int
    width: int
    channels: int
    matrix: str
    full_range: bool
    frame_bytes: int

    @classmethod
    def make(cls, format: str, height: int, width: int, matrix: str = "", full_range: bool = False) -> FrameSpec:
        if format == "yuv420":
            nbytes = yuv420_bytes(height, width)
        elif format == "rgb":
            nbytes = height * width * 3
        else:
            raise ValueError(f"format must be 'yuv420' or 'rgb', got {format!r}")
        return cls(format, int(height), int(width), 3, matrix, bool(full_range), int(nbytes))

    @property
    def chroma_shape(self) -> tuple[int, int]:
        return (self.height + 1) // 2, (self.width + 1) // 2

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one frame in the tier buffer: (frame_bytes,) for yuv420, (H, W, 3) for rgb."""
        return (self.frame_bytes,) if self.format == "yuv420" else (self.height, self.width, 3)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Ingested:
    """What ``ingest_videos`` produced. ``data`` rows of all files back to back in the order of
    ``paths``; file i is rows ``offsets[i]:offsets[i+1]``; ``times[i]`` its frame times (seconds)."""

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

    def __repr__(self):
        d = self.data
        where = f"{getattr(d, 'device', 'cpu')}" + (" pinned" if getattr(d, "is_pinned", lambda: False)() else "")
        return (f"Ingested({len(self.counts)} files, {int(self.offsets[-1])} frames {self.spec.format} "
                f"{self.spec.height}x{self.spec.width}, tier {self.tier!r} ({where}), "
                f"{'from cache' if self.from_cache else 'decoded'} in {self.seconds:.2f} s "
                f"({self.frames_per_s:.0f} frames/s))")


# ---------------------------------------------------------------------------------------------
# probing


def _output_format(info: VideoInfo, backend: str) -> str:
    if backend != "pyav":
        return "rgb"  # OpenCV and torchvision convert to RGB themselves
    # RGB-family sources (lossless RGB codecs) would lose color through 4:2:0; everything else
    # (8-bit 4:2:0 as is; 10-bit, 4:2:2, 4:4:4 reformatted by swscale) is stored as yuv420p
    return "rgb" if info.pix_fmt in RGB_PIX_FMTS else "yuv420"


def _file_spec(info: VideoInfo, resize, backend: str) -> FrameSpec:
    h, w = resize if resize is not None else (info.height, info.width)
    if not (h > 0 and w > 0):
        raise ReaderError(f"{info.path}: the video reports a frame size of {info.width}x{info.height}")
    return FrameSpec.make(_output_format(info, backend), h, w, info.matrix, info.full_range)


def probe_videos(paths, *, resize=None, backend: str = "auto", workers: int | None = None
                 ) -> tuple[FrameSpec, np.ndarray, list[VideoInfo]]:
    """Metadata of every file of ONE stream (one file per episode), read without decoding.

    Returns (spec, counts, infos): the frames' geometry after ``resize``, the frames each file will
    give (int64 [E]: the container's declared count; where it declares none, its video packets
    counted without decoding), and each file's ``VideoInfo``. Raises ReaderError naming the file
    when a file is missing or unreadable, or when its size (without ``resize``), format or color
    facts differ from the first file's.
    """
    paths = _as_paths(paths)
    resize = _check_resize(resize)
    name = resolve_backend(backend)
    _check_present(paths)
    n = len(paths)
    workers = min(n, workers or max(4, cpu_count()), 32)  # opening containers is mostly waiting on I/O
    if workers > 1:
        with ThreadPoolExecutor(workers, thread_name_prefix="robocache-probe") as pool:
            infos = list(pool.map(lambda p: probe_video(p, backend=name), paths))
    else:
        infos = [probe_video(p, backend=name) for p in paths]
    specs = [_file_spec(info, resize, name) for info in infos]
    first = specs[0]
    for info, spec in zip(infos, specs):
        if spec != first:
            diff = ", ".join(f"{k} {getattr(spec, k)!r} (first file: {getattr(first, k)!r})"
                             for k in ("format", "height", "width", "matrix", "full_range")
                             if getattr(spec, k) != getattr(first, k))
            hint = " (pass resize=(height, width) to bring every file to one size)" \
                if spec.height != first.height or spec.width != first.width else ""
            raise ReaderError(f"{info.path}: {diff}; every file of one stream must give frames of one size "
                              f"and format as {paths[0]} does{hint}")
    counts = np.empty(n, np.int64)
    for i, info in enumerate(infos):
        counts[i] = info.frames if info.frames > 0 else (count_frames(info.path) if name != "opencv" else 0)
        if counts[i] <= 0:
            raise ReaderError(f"{info.path}: the container declares no frames ({name}); the file is empty, "
                              f"corrupt or truncated")
    return first, counts, infos


def _as_paths(paths) -> list[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError("paths must be a list of video files (one per episode), not one path")
    out = [os.path.abspath(os.fspath(p)) for p in paths]
    if not out:
        raise ValueError("paths is empty: pass one video file per episode")
    return out


def _check_present(paths):
    lost = [p for p in paths if not os.path.isfile(p)]
    if lost:
        more = f" ({len(lost)} of {len(paths)} files are missing)" if len(lost) > 1 else ""
        raise ReaderError(f"{lost[0]}: video file not found{more}")


# ---------------------------------------------------------------------------------------------
# decoding one file into rows


class _Ticker:
    """Frames done, for the progress bar; updated every few frames (tqdm takes a lock)."""

    def __init__(self, bar, every=16):
        self.bar, self.every, self.pending = bar, every, 0

    def __call__(self, n=1):
        if self.bar is None:
            return
        self.pending += n
        if self.pending >= self.every:
            self.bar.update(self.pending)
            self.pending = 0

    def flush(self):
        if self.bar is not None and self.pending:
            self.bar.update(self.pending)
            self.pending = 0


class _Rows:
    """Where one file's decoded frames go: ``row(i)`` is frame i's destination (a writable uint8 view
    of frame_bytes), and every ``chunk`` rows ``flush(first_row, rows)`` gets the rows just completed
    (rows: a slice of ``buf``); it returns None or a handle whose ``wait()`` says it is done with them.

    In place (the host tier): ``buf`` is the file's rows of the final buffer; flushed rows stay where
    they are (the cache file is written from them while the decoder goes on).
    Ring (tiers device and disk, the compressed tier): ``buf`` is a worker's ring of two halves. A
    full half is handed over and the decoder goes on into the other one, which it writes again only
    after that half's handle is done; so a worker holds a few MB, not a whole file, and never waits
    on a copy or a write unless both halves are in flight."""

    def __init__(self, n: int, buf: np.ndarray, flush=None, *, in_place: bool = False, chunk: int = 0):
        self.n, self.buf, self.flush, self.in_place = n, buf, flush, in_place or flush is None
        self.chunk = max(1, chunk or (n if self.in_place else max(1, len(buf) // 2)))
        self.base = 0               # file row of the current chunk's first frame
        self.half = 0               # ring: the half being written
        self.handles = [None, None]  # ring: what each half waits for before it is written again
        self.pending = []           # in place: every flush's handle

    def __len__(self):
        return self.n

    def row(self, i: int) -> np.ndarray:
        if i - self.base == self.chunk:  # the chunk is complete: hand it over before frame i
            self._hand_over(i)
        if self.in_place:
            return self.buf[i]
        return self.buf[self.half * self.chunk + i - self.base]

    def _hand_over(self, upto: int) -> None:
        if self.flush is not None and upto > self.base:
            if self.in_place:
                self.pending.append(self.flush(self.base, slice(self.base, upto)))
            else:
                lo = self.half * self.chunk
                self.handles[self.half] = self.flush(self.base, slice(lo, lo + upto - self.base))
                if len(self.buf) >= 2 * self.chunk:
                    self.half ^= 1
                _wait(self.handles[self.half])  # the half written next: its last hand-over is done
                self.handles[self.half] = None
        self.base = upto

    def finish(self, decoded: int) -> list:
        """Hands over the last rows; waits until the ring can be reused. Returns the in-place
        handles (the caller waits on them once every file is decoded)."""
        if decoded > self.base:
            self._hand_over(decoded)
        for h in self.handles:
            _wait(h)
        self.handles = [None, None]
        return self.pending


def _wait(handle) -> None:
    if handle is not None:
        handle.wait()


def decoder_threads(workers: int) -> int:
    """Threads per PyAV decoder when `workers` files decode at once: DECODER_THREADS when set; else
    FFmpeg/dav1d's own choice (0: about 1.5 threads per core) while fewer files than cores are in
    flight, so that each decoder can spread over the idle cores (on 2 cores, one file per core with
    auto threads beat one thread per decoder and one decoder with all threads); and 2 once every core
    has a file, where 16 decoders of 24 threads each oversubscribe 16 cores: on the H100 host (32 real
    AV1 files, 16 workers) 2 threads ingested 9-16% faster than auto, 4 threads 1-15%."""
    if DECODER_THREADS is not None:
        return DECODER_THREADS
    return 2 if workers >= cpu_count() else 0


def _decode_pyav_into(path, out: _Rows, spec: FrameSpec, threads: int, tick, stop) -> np.ndarray:
    """Every frame of `path` into out [n, frame_bytes] (row i = frame i); returns its times."""
    av = require("av", "lerobot", "video decoding with PyAV")
    H, W = spec.height, spec.width
    n = len(out)
    yuv = spec.format == "yuv420"
    geometry = yuv420_geometry(H, W) if yuv else ((H, W * 3),)
    accept = ("yuv420p", "yuvj420p") if yuv else ("rgb24",)
    reformatter = None
    times = []
    i = 0
    try:
        with av.open(path, mode="r") as container:
            stream = container.streams.video[0]
            stream.thread_type = THREAD_TYPE
            stream.codec_context.thread_count = threads
            fps = float(stream.average_rate) if stream.average_rate else None
            for frame in container.decode(stream):
                if stop.is_set():
                    return None
                if i == n:
                    raise ReaderError(f"{path}: decodes to more than the {n} frames the container declares "
                                      f"(pyav); its header is inconsistent (re-encode or remux the file)")
                if frame.format.name not in accept or frame.width != W or frame.height != H:
                    if reformatter is None:
                        from av.video.reformatter import VideoReformatter
                        reformatter = VideoReformatter()
                    # yuv420p keeping the source's matrix and range (swscale does no color math
                    # YUV->YUV); rgb24 as decode_video makes it
                    kw = {"dst_color_range": 2 if spec.full_range else 1} if yuv else {}
                    try:
                        frame = reformatter.reformat(frame, width=W, height=H,
                                                     format="yuv420p" if yuv else "rgb24", **kw)
                    except TypeError:  # PyAV < 12 has no color-range arguments (and keeps the range)
                        frame = reformatter.reformat(frame, width=W, height=H, format="yuv420p" if yuv else "rgb24")
                copy_planes(frame.planes, out.row(i), geometry)
                times.append(frame.time if frame.time is not None else np.nan)
                i += 1
                tick()
    except ReaderError:
        raise
    except Exception as e:  # av.error.* (InvalidDataError, EOFError...), OSError
        raise ReaderError(f"{path}: cannot decode video with PyAV: {e}") from e
    if i < n:
        raise ReaderError(f"{path}: decoded {i} of the {n} frames the container declares (pyav); the file is "
                          f"truncated or corrupt")
    return _times_or_index(times, n, fps, path)


def _decode_opencv_into(path, out: _Rows, spec: FrameSpec, threads: int, tick, stop) -> np.ndarray:
    cv2 = require("cv2", "lerobot", "video decoding with OpenCV (pip install opencv-python-headless)")
    H, W = spec.height, spec.width
    n = len(out)
    cap = cv2.VideoCapture(path)
    times = []
    i = 0
    try:
        if not cap.isOpened():
            raise ReaderError(f"{path}: OpenCV cannot open the video (corrupt or truncated?)")
        fps = cap.get(cv2.CAP_PROP_FPS) or None
        codec = _opencv_codec(cv2, cap, path)
        while not stop.is_set():
            ok, img = cap.read()
            if not ok or img is None:
                break
            if i == n:
                raise ReaderError(f"{path}: decodes to more than the {n} frames the container declares "
                                  f"(opencv); its header is inconsistent (re-encode or remux the file)")
            times.append(cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0)
            if img.shape[:2] != (H, W):
                img = cv2.resize(img, (W, H), interpolation=cv2.INTER_AREA)
            cv2.cvtColor(img, cv2.COLOR_BGR2RGB, dst=out.row(i).reshape(H, W, 3))
            i += 1
            tick()
    finally:
        cap.release()
    if stop.is_set():
        return None
    if i == 0:
        raise ReaderError(opencv_codec_error(path, codec, n))
    if i < n:
        raise ReaderError(f"{path}: decoded {i} of the {n} frames the container declares (opencv); the file is "
                          f"truncated or corrupt")
    return _times_or_index(times, n, fps, path)


def _decode_torchvision_into(path, out: _Rows, spec: FrameSpec, threads: int, tick, stop) -> np.ndarray:
    # torchvision.io reads a whole file at once: one file in flight per worker, copied into the rows
    frames, times = decode_video(path, backend="torchvision")
    if frames.shape[1:3] != (spec.height, spec.width):  # resize only when asked (it is not the identity)
        frames, times = decode_video(path, resize=(spec.height, spec.width), backend="torchvision")
    if len(frames) != len(out):
        raise ReaderError(f"{path}: decoded {len(frames)} frames, the container declares {len(out)} "
                          f"(torchvision); the file is truncated, corrupt or its header is inconsistent")
    for i, frame in enumerate(frames):
        out.row(i)[:] = frame.reshape(-1)
    tick(len(frames))
    return times


_DECODE_INTO = {"pyav": _decode_pyav_into, "opencv": _decode_opencv_into, "torchvision": _decode_torchvision_into}


# ---------------------------------------------------------------------------------------------
# the tiers' buffers


def _torch():
    return require("torch", "torch", "robocache.frames (frame ingest)")


def _resolve_device(torch, tier, device):
    if tier != "device":
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device={device!r} is for tier='device'; tier={tier!r} keeps frames on the CPU")
        return None
    dev = torch.device(device if device is not None else "cuda")
    if dev.type != "cuda":
        raise ValueError(f"tier='device' needs a CUDA device, got device={device!r} (use tier='host' on the CPU)")
    if not torch.cuda.is_available():
        raise ValueError("tier='device' needs a CUDA device; torch sees none (use tier='host' or 'disk')")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _host_buffer(torch, shape, fill=None):
    """A CPU tensor for the host tier, written by ``fill(array)`` when given, then pinned
    (cudaHostRegister maps and locks every page) when torch sees a CUDA device (pinned_empty: its
    writers fault the pages in, 2 MiB at a time where the kernel gives transparent huge pages).
    Without a GPU an anonymous map populated up front: on the 2-core machine MAP_POPULATE took 0.4 s
    for 0.88 GB, 4 KiB faults while decoding 0.54 s, and huge-page faults 0.13-2.7 s (the kernel's
    compaction on a fragmented VM)."""
    if torch.cuda.is_available():
        # exact size: torch's pin_memory=True rounds to a power of two (75 GB would ask for 128 GB)
        return pinned_empty(shape, fill=fill)
    nbytes = int(np.prod(shape))
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if nbytes < POPULATE_MIN_BYTES or not populate:
        out = torch.empty(shape, dtype=torch.uint8)
    else:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
        out = torch.from_numpy(np.frombuffer(region, np.uint8).reshape(shape))  # the array keeps the map
    if fill is not None:
        fill(_np(out))
    return out


def _np(t):
    """NumPy view of a CPU tensor (no copy)."""
    return t.numpy()


def _shape(spec: FrameSpec, n: int) -> tuple:
    return (n,) + spec.row_shape


def _map_file(torch, path, spec: FrameSpec, n: int):
    """torch CPU tensor over a copy-on-write map of the file: reads come from the file (paged in on
    demand), and a stray write changes only this process's copy, never the cache (a read-only map
    would turn it into a segfault, since torch tensors are always writable)."""
    if n == 0:
        return torch.empty(_shape(spec, 0), dtype=torch.uint8)
    arr = np.memmap(path, dtype=np.uint8, mode="c", shape=_shape(spec, n))
    return torch.from_numpy(arr)


def _pread_into(fd, dst: np.ndarray, offset: int, pool=None, chunk=64 << 20) -> None:
    """Fills dst (a contiguous uint8 array) from fd at offset, in chunks (in threads when given a pool:
    os.preadv releases the GIL, so page-cache copies and page faults run on every core)."""
    flat = dst.reshape(-1)
    spans = [(s, min(s + chunk, len(flat))) for s in range(0, len(flat), chunk)]

    def read(span):
        s, e = span
        view = memoryview(flat[s:e])
        done = 0
        while done < e - s:
            got = os.preadv(fd, [view[done:]], offset + s + done)
            if got <= 0:
                raise _cache.InvalidEntry(f"truncated (read stopped {offset + s + done} bytes in)")
            done += got

    if pool is None:
        for span in spans:
            read(span)
    else:
        list(pool.map(read, spans))


# ---------------------------------------------------------------------------------------------
# the public entry point


def ingest_videos(paths, *, tier: str, device=None, resize=None, backend: str = "auto", cache: bool = True,
                  workers: int | None = None, show_progress: bool | None = None, desc: str = "",
                  spec: FrameSpec | None = None, counts=None) -> Ingested:
    """Decode the video files of ONE stream (one per episode) into one tier's buffer.

    Parameters
    ----------
    paths : list of str or PathLike
        One file per episode; rows of all files back to back in this order.
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
        Files decoded at once (default: one per core, at most one per file); from 8 at once, PyAV
        decodes in processes of their own (``decode_in_processes``; ROBOCACHE_DECODE_PROCESSES=0/1).
    show_progress : bool, optional
        A progress bar in frames/s (default: when stderr is a TTY; tqdm needed).
    desc : str
        Label of the bar and of the cache entry (e.g. the stream's key).
    spec, counts : optional
        What ``probe_videos`` returned, when the caller already has it (the memory plan): saves
        probing the files again. A cache entry made with another spec or counts is rebuilt.

    Returns
    -------
    Ingested

    Raises ReaderError naming the file when one is missing, unreadable, truncated or decodes to a
    frame count other than its container declares, or when files of the stream differ in size or
    format; CacheError when tier "disk" cannot have its file (naming the directory and the bytes).
    """
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    torch = _torch()  # before the clock starts: the first import of torch takes seconds
    t_start = time.perf_counter()
    paths = _as_paths(paths)
    resize = _check_resize(resize)
    name = resolve_backend(backend)
    _check_present(paths)
    dev = _resolve_device(torch, tier, device)
    if (spec is None) != (counts is None):
        raise ValueError("pass spec and counts together (both from probe_videos), or neither")
    if spec is not None:
        if not isinstance(spec, FrameSpec):
            raise TypeError(f"spec must be a FrameSpec (from probe_videos), got {type(spec).__name__}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(paths),) or (counts <= 0).any():
            raise ValueError(f"counts must hold one positive frame count per file ({len(paths)}), got {counts!r}")
    options = {"resize": list(resize) if resize else None, "backend": name}
    label = desc or os.path.basename(os.path.dirname(paths[0]))

    entry = _cache.open_entry(paths, options, label) if cache else None
    with entry.lock() if entry is not None else contextlib.nullcontext():
        if entry is not None:
            hit = _load_cached(torch, entry, paths, options, tier, dev, spec, counts, workers)
            if hit is not None:
                return _finish(hit, t_start)
        infos = []
        if spec is None:
            spec, counts, infos = probe_videos(paths, resize=resize, backend=name, workers=workers)
        res = _decode_all(torch, paths, spec, counts, tier=tier, dev=dev, backend=name, entry=entry,
                          options=options, workers=workers, show_progress=show_progress,
                          desc=desc or label)
        res.infos = infos
        return _finish(res, t_start)


def _finish(res: Ingested, t_start: float) -> Ingested:
    res.seconds = time.perf_counter() - t_start
    res.frames_per_s = float(res.offsets[-1]) / res.seconds if res.seconds > 0 else float("inf")
    return res


def _offsets(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _split_times(times: np.ndarray, offsets) -> list:
    return [times[offsets[i]:offsets[i + 1]].copy() for i in range(len(offsets) - 1)]


# ---------------------------------------------------------------------------------------------
# from the cache


def _load_cached(torch, entry, paths, options, tier, dev, spec, counts, workers):
    """An Ingested from a valid entry, or None (no entry; or an invalid one: warned about, removed)."""
    hit = _cache.lookup(entry, paths, options, spec=spec.to_dict() if spec is not None else None, counts=counts,
                        redo="decoding")
    if hit is None:
        return None
    meta, times = hit
    m = meta["spec"]
    spec = FrameSpec(m["format"], int(m["height"]), int(m["width"]), int(m["channels"]), m["matrix"],
                     bool(m["full_range"]), int(m["frame_bytes"]))
    counts = np.asarray(meta["counts"], np.int64)
    offsets = _offsets(counts)
    n = int(offsets[-1])
    if tier == "disk":
        data = _map_file(torch, entry.data_path, spec, n)
    elif tier == "host":
        # the cache file's own pages: one copy of the frames in RAM, no fresh memory, no copy; pinned in
        # place for a GPU (72-97 ms for 3.5 GB on the H100 host), plain without one (0.1 s against 1.0 s for
        # the real AV1 set on the 2-core machine)
        data = _file_pages(torch, entry.data_path, spec, n)
    else:
        with open(entry.data_path, "rb") as f:
            data = _upload(torch, f.fileno(), spec, n, dev)
    return Ingested(data=data, counts=counts, offsets=offsets, times=_split_times(times, offsets), spec=spec,
                    from_cache=True, cache_path=str(entry.data_path), seconds=0.0, frames_per_s=0.0, tier=tier)


def _file_pages(torch, path, spec, n):
    """The host tier over a decoded file's pages: pinned in place for a GPU, plain without one; where
    that cannot be had, fresh memory filled by parallel reads (the readers fault its pages in on
    every core) and pinned."""
    pages = (pinned_file if torch.cuda.is_available() else file_pages)(path, _shape(spec, n))
    if pages is not None:
        return pages
    with open(path, "rb") as f, \
            ThreadPoolExecutor(min(16, cpu_count()), thread_name_prefix="robocache-read") as pool:
        def fill(arr):
            _pread_into(f.fileno(), arr, 0, pool, chunk=16 << 20)
        return _host_buffer(torch, _shape(spec, n), fill)


def _upload(torch, fd, spec, n, dev):
    """The file's rows to a new device tensor (see _Uploader)."""
    data = torch.empty(_shape(spec, n), dtype=torch.uint8, device=dev)
    with _Uploader(torch, data, fd) as up:
        up.span(0, n * spec.frame_bytes)
    return data


class _Uploader:
    """Byte spans of a file to the same spans of a device tensor, through two pinned chunk buffers:
    reading chunk k+1 overlaps the copy of chunk k (on a side stream; the host waits on its own
    events only). One thread's pread from the page cache moved ~4.5 GB/s on the H100 host (3.9x the
    cold decode) and the copy engine takes ~25 GB/s, so each chunk is read by up to 16 threads in
    16 MB pieces."""

    def __init__(self, torch, data, fd):
        self.torch, self.flat, self.fd = torch, data.view(-1), fd
        size = min(UPLOAD_CHUNK, self.flat.numel())
        self.bufs = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)] if size else []
        self.events = [None, None]
        self.k = 0
        self.stream = torch.cuda.Stream(data.device)
        self.pool = ThreadPoolExecutor(min(16, cpu_count()), thread_name_prefix="robocache-upload")

    def span(self, start: int, nbytes: int) -> None:
        for at in range(start, start + nbytes, UPLOAD_CHUNK):
            size = min(UPLOAD_CHUNK, start + nbytes - at)
            b = self.k % 2
            self.k += 1
            if self.events[b] is not None:
                self.events[b].synchronize()  # the copy that last read this buffer is done
            _pread_into(self.fd, _np(self.bufs[b])[:size], at, self.pool, chunk=16 << 20)
            with self.torch.cuda.stream(self.stream):
                self.flat[at:at + size].copy_(self.bufs[b][:size], non_blocking=True)
                self.events[b] = self.stream.record_event()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.synchronize()
        self.pool.shutdown()


# ---------------------------------------------------------------------------------------------
# decoding


def _progress_bar(total, desc, enable):
    if not progress_enabled(enable):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc or "decoding", unit="frame", unit_scale=False, leave=False, smoothing=0.1)


def _open_writer(entry, name, nbytes, tier, required, direct=False, warn=True):
    """An EntryWriter in the cache dir, or None (warned, unless not `warn`) when it cannot be had and
    is not required; tier "disk" requires it: CacheError naming the directory and the bytes."""
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


class _FileWrites:
    """The decoded rows' writes to the cache (or disk-tier) file, on threads of their own: a decoder
    hands rows over and goes on decoding while they go to the page cache (a write of 32 MB there
    takes ~10 ms of a core that the decoder would otherwise have waited out). ``submit(first_row,
    rows)`` returns a future, whatever order the rows come in (pwrite is positional).

    ``direct`` (the host tier, an entry large against the RAM): whole 4 KiB blocks through O_DIRECT
    (a DMA from the page-aligned host buffer, no copy into the page cache), the partial blocks at
    either end of a span through the page cache; a filesystem refusing O_DIRECT (EINVAL) falls back
    to the page cache. A failure goes to ``failed`` and the later writes are skipped (the ingest goes
    on without a cache), except for tier "disk", whose file is its data: CacheError."""

    THREADS = 4

    def __init__(self, writer, fb: int, tier: str, nbytes: int):
        self.writer, self.fb, self.tier, self.nbytes = writer, fb, tier, nbytes
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
            if self.tier == "disk":
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


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _write_direct(nbytes: int, reserve: int = 0) -> bool:
    """Whether the host tier writes its cache file with O_DIRECT: when the entry is large against the
    memory left (> 1/4 of MemAvailable less ``reserve``, the host buffer still to fill). Through the page
    cache, a small entry stays cached and the next load reads it at memory speed; a large one could
    not stay (the frames themselves fill the RAM), so copying it there would only cost CPU and evict
    other files. ROBOCACHE_CACHE_DIRECT=1 / 0 forces either."""
    env = os.environ.get("ROBOCACHE_CACHE_DIRECT")
    if env in ("0", "1"):
        return env == "1"
    avail = _mem_available()
    return avail is not None and nbytes > max(0, avail - reserve) // 4


def _stat_or_none(paths):
    try:
        return _cache.stat_sources(paths)
    except OSError:
        return None


def _errors(futures) -> list:
    return [f.exception() for f in futures if f.done() and not f.cancelled() and f.exception() is not None]


def _end_pool(pool, futures, stop, bar) -> None:
    """The end of a decode pool (threads or processes), however it ends: after an error or an
    interrupt `stop` is set, so the other decoders stop at their next frame; then the pool is shut
    down (queued files cancelled) and the progress bar closed."""
    if not all(f.done() for f in futures) or _errors(futures):
        stop.set()
    pool.shutdown(wait=True, cancel_futures=True)
    if bar is not None:
        bar.close()


def _raise_first(futures) -> None:
    """Raises the error of the first failing file in the order of paths, if any."""
    errors = _errors(futures)
    if errors:
        raise errors[0]


def _decode_all(torch, paths, spec, counts, *, tier, dev, backend, entry, options, workers, show_progress,
                desc) -> Ingested:
    counts = np.asarray(counts, np.int64)
    offsets = _offsets(counts)
    n_total = int(offsets[-1])
    fb = spec.frame_bytes
    nbytes = n_total * fb
    workers = max(1, min(int(workers or cpu_count()), len(paths)))
    if decode_in_processes(workers, backend):
        res = _decode_all_processes(torch, paths, spec, counts, tier=tier, dev=dev, entry=entry, options=options,
                                    workers=workers, show_progress=show_progress, desc=desc)
        if res is not None:
            return res
    threads = decoder_threads(workers)

    # the sources as they were when decoding began: the entry's key must describe the bytes decoded
    sources = _cache.stat_sources(paths) if entry is not None else None
    writer = None
    if entry is not None or tier == "disk":
        direct = tier == "host" and _write_direct(nbytes, reserve=nbytes)
        writer = _open_writer(entry, entry.name if entry is not None else "nocache", nbytes, tier,
                              required=(tier == "disk"), direct=direct)
    writes = _FileWrites(writer, fb, tier, nbytes) if writer is not None else None
    # rows handed over at a time: a ring half (tiers device and disk), a write of the host buffer
    chunk = max(1, min(int(counts.max()), STAGE_BYTES // 2 // fb))
    data = torch.empty(_shape(spec, n_total), dtype=torch.uint8, device=dev) if tier == "device" else None
    local = threading.local()

    def staging():
        # a worker's ring of two halves (tiers device and disk): the host memory of the files in flight
        if getattr(local, "buf", None) is None:
            local.buf = torch.empty((2 * chunk, fb), dtype=torch.uint8, pin_memory=(tier == "device"))
            local.stream = torch.cuda.Stream(dev) if tier == "device" else None
        return local.buf, local.stream

    stop = threading.Event()
    bar = _progress_bar(n_total, desc, show_progress)
    decode_into = _DECODE_INTO[backend]
    pending = []  # the host tier's writes, waited on once every file is decoded

    def work(i, host):
        if stop.is_set():
            return None
        start, n = int(offsets[i]), int(counts[i])
        if tier == "host":
            rows = host[start:start + n]
            flush = (lambda first, sl: writes.submit(start + first, rows[sl])) if writes is not None else None
            out = _Rows(n, rows, flush, in_place=True, chunk=chunk)
        else:
            buf_t, stream = staging()
            ring = _np(buf_t)

            def flush(first, sl):
                event = None
                if tier == "device":
                    k = sl.stop - sl.start
                    with torch.cuda.stream(stream):
                        data.view(-1, fb)[start + first:start + first + k].copy_(buf_t[sl], non_blocking=True)
                        event = stream.record_event()
                return _Done(event, writes.submit(start + first, ring[sl]) if writes is not None else None)

            out = _Rows(n, ring, flush)
        tick = _Ticker(bar)
        times = decode_into(paths[i], out, spec, threads, tick, stop)
        tick.flush()
        if times is None:
            return None
        pending.extend(out.finish(n))
        return times

    def decode(host=None):
        """Every file, on `workers` threads; returns their times in the order of paths."""
        host = host.reshape(n_total, fb) if host is not None else None
        pool = ThreadPoolExecutor(workers, thread_name_prefix="robocache-ingest")
        futures = []
        try:
            futures = [pool.submit(work, i, host) for i in range(len(paths))]
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            _end_pool(pool, futures, stop, bar)
        _raise_first(futures)
        for f in pending:
            f.result()  # the host buffer is pinned (moved under the driver) once nothing reads it
        return [f.result() for f in futures]

    try:
        if tier == "host":
            # decoded into fresh memory whose pages the decoders fault in (on every core, 2 MiB at a time
            # where the kernel gives huge pages), pinned afterwards when torch sees a GPU
            result = {}
            data = _host_buffer(torch, _shape(spec, n_total), fill=lambda arr: result.update(times=decode(arr)))
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
    if writer is not None:
        if writes.failed:
            _cache.warn(f"robocache could not write its cache in {writer.root} ({writes.failed[0]}); "
                        f"going on without a cache")
            writer.abort()
        else:
            cache_path = _commit(writer, entry, paths, sources, options, spec, counts, times, tier)
        if tier == "disk":
            data = _map_file(torch, cache_path or writer.path, spec, n_total)
            if cache_path is None:
                writer.abort()  # cache=False: a file of our own, gone from the directory once mapped
    return Ingested(data=data, counts=counts, offsets=offsets, times=times, spec=spec, from_cache=False,
                    cache_path=cache_path, seconds=0.0, frames_per_s=0.0, tier=tier)


# ---------------------------------------------------------------------------------------------
# decoding in processes


def decode_in_processes(workers: int, backend: str) -> bool:
    """Whether files decode in processes of their own (PyAV only): DECODE_PROCESSES when set; else
    from PROCESS_MIN_WORKERS files at once. Threads of one process share its GIL, and every frame
    takes it a few times (PyAV's frame objects, the copy's call): on the H100 host, 32 real AV1
    files on 16 workers decoded with planes copied out at 1,677-2,361 frames/s on threads against
    3,174-3,340 in processes (PyAV alone, planes untouched: 2,299-3,162 on threads, 4,033-5,192 in
    processes). On 2 cores threads were as fast, and a process pool costs 0.1-0.2 s to start."""
    if backend != "pyav" or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    if DECODE_PROCESSES is not None:
        return DECODE_PROCESSES
    return workers >= PROCESS_MIN_WORKERS


class _Flag:
    """threading.Event's set and is_set over a shared byte: the parent's stop, seen by its decode
    processes."""

    def __init__(self, value):
        self.value = value

    def set(self) -> None:
        self.value.value = 1

    def is_set(self) -> bool:
        return bool(self.value.value)


class _Counter:
    """A decode process's frames done, in the shared array the parent's progress bar reads."""

    def __init__(self, done, i: int):
        self.done, self.i = done, i

    def __call__(self, n=1):
        self.done[self.i] += n


_SHARED = {}  # in a decode process: the parent's stop flag and progress array (_start_decoder)


def _start_decoder(stop, done) -> None:
    _SHARED.update(stop=_Flag(stop), done=done)


def _decode_file_to(i: int, path: str, data_path: str, first_row: int, n: int, spec: FrameSpec, threads: int,
                    chunk: int):
    """In a decode process: file `path` into rows [first_row, first_row + n) of the file at
    `data_path`, from a ring of two halves whose writes run on a thread while the decoder goes on.
    Returns the frame times (None when stopped)."""
    fb = spec.frame_bytes
    fd = os.open(data_path, os.O_WRONLY)
    pool = ThreadPoolExecutor(1, thread_name_prefix="robocache-write")
    ring = np.empty((min(2 * chunk, n), fb), np.uint8)

    def write(first, sl):
        return _Done(None, pool.submit(_pwrite, fd, ring[sl], (first_row + first) * fb))

    try:
        out = _Rows(n, ring, write, chunk=chunk)
        times = _DECODE_INTO["pyav"](path, out, spec, threads, _Counter(_SHARED["done"], i), _SHARED["stop"])
        if times is not None:
            out.finish(n)
        return times
    finally:
        pool.shutdown(wait=True)
        os.close(fd)


def _pwrite(fd: int, rows: np.ndarray, offset: int) -> None:
    view = memoryview(rows.reshape(-1))
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _decode_processes(paths, spec, counts, offsets, *, workers, data_path, chunk, bar, on_file) -> list:
    """Every file, in `workers` processes, into the file at `data_path` (rows in the order of
    paths); `on_file(i)` runs in this process once file i is written. Returns the times by file."""
    # forked, as torch's DataLoader workers are: ready at once with every module imported, and the
    # caller's script is not run again in each (spawn and forkserver re-import the main module, which
    # a script without an `if __name__ == "__main__"` guard would run again). A decode process runs
    # PyAV, NumPy and pwrite only: none of the locks a thread of this process may hold at the fork
    ctx = multiprocessing.get_context("fork")
    stop, done = ctx.RawValue("b", 0), ctx.RawArray("q", len(paths))
    threads = decoder_threads(workers)
    shown = 0
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_decoder, initargs=(stop, done))
    futures = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            # the pool forks its processes in submit
            futures = [pool.submit(_decode_file_to, i, paths[i], str(data_path), int(offsets[i]), int(counts[i]),
                                   spec, threads, chunk) for i in range(len(paths))]
        index = {f: i for i, f in enumerate(futures)}
        left = set(futures)
        while left:
            finished, left = wait(left, timeout=0.1, return_when=FIRST_COMPLETED)
            if bar is not None:
                total = sum(done)
                bar.update(total - shown)
                shown = total
            for f in sorted(finished, key=index.get):
                if f.exception() is None:
                    on_file(index[f])
            if _errors(finished):
                break
    finally:
        _end_pool(pool, futures, _Flag(stop), bar)
    _raise_first(futures)
    return [f.result() for f in futures]


def _commit(writer, entry, paths, sources, options, spec, counts, times, tier):
    """Commits the writer's file as the cache entry; returns its path, or None (warned) where it is
    not kept: no entry asked for, a source changed while it was decoded, the commit failed (tier
    "disk": CacheError). An entry not kept is removed, except tier disk's file (the caller maps it)."""
    if entry is None:
        return None
    if _stat_or_none(paths) != sources:
        _cache.warn("robocache did not keep a cache entry: a source file changed while it was decoded")
        if tier != "disk":
            writer.abort()
        return None
    try:
        all_times = np.concatenate(times) if times else np.zeros(0)
        return str(writer.commit(key=_cache.entry_key(sources, options), spec=spec.to_dict(), counts=counts,
                                 times=all_times, sources=sources, options=options))
    except OSError as e:
        writer.abort()
        if tier == "disk":
            raise _cache.CacheError(e.errno, f"tier='disk' could not finish its cache file in {writer.root} ({e})") from e
        _cache.warn(f"robocache could not write its cache in {writer.root} ({e}); going on without it")
        return None


def _decode_all_processes(torch, paths, spec, counts, *, tier, dev, entry, options, workers, show_progress,
                          desc):
    """_decode_all with the decoders in processes (decode_in_processes): every tier decodes into a
    file, the cache entry's (or a temporary one with cache=False), which the decode processes write
    through the page cache. Tier disk maps it; tier host keeps its pages (pinned in place for a GPU:
    one copy of the frames in RAM); tier device uploads each file's rows as the file is complete.
    None where no file can be had in the cache directory (the caller decodes on threads)."""
    counts = np.asarray(counts, np.int64)
    offsets = _offsets(counts)
    n_total = int(offsets[-1])
    fb = spec.frame_bytes
    sources = _cache.stat_sources(paths) if entry is not None else None
    # not warned here: the threads then decode, and say so themselves when the cache cannot be had
    writer = _open_writer(entry, entry.name if entry is not None else "nocache", n_total * fb, tier,
                          required=(tier == "disk"), warn=False)
    if writer is None:
        return None
    chunk = max(1, min(int(counts.max()), STAGE_BYTES // 2 // fb))
    data = torch.empty(_shape(spec, n_total), dtype=torch.uint8, device=dev) if tier == "device" else None
    up = _Uploader(torch, data, writer.fd) if tier == "device" else contextlib.nullcontext()
    try:
        with up:
            def on_file(i):
                if tier == "device":
                    up.span(int(offsets[i]) * fb, int(counts[i]) * fb)
            times = _decode_processes(paths, spec, counts, offsets, workers=workers, data_path=writer.path, chunk=chunk,
                                      bar=_progress_bar(n_total, desc, show_progress), on_file=on_file)
    except OSError as e:  # the file is the frames here, whatever the tier: a failed write fails the ingest
        writer.abort()
        raise _cache.CacheError(
            e.errno, f"robocache decodes these {len(paths)} files in processes into one "
            f"{_cache.human_bytes(n_total * fb)} file in {writer.root}, and could not write it ({e.strerror or e}): "
            f"free space there, point ROBOCACHE_CACHE_DIR at a larger local disk, or decode on threads "
            f"(ROBOCACHE_DECODE_PROCESSES=0)") from e
    except BaseException:
        writer.abort()
        raise
    cache_path = _commit(writer, entry, paths, sources, options, spec, counts, times, tier)
    path = cache_path or writer.path
    if tier == "disk":
        data = _map_file(torch, path, spec, n_total)
    elif tier == "host":
        data = _file_pages(torch, path, spec, n_total)
    if cache_path is None:
        writer.abort()  # a file of our own (cache=False, or not kept), gone from the directory once mapped
    return Ingested(data=data, counts=counts, offsets=offsets, times=times, spec=spec, from_cache=False,
                    cache_path=cache_path, seconds=0.0, frames_per_s=0.0, tier=tier)


class _Done:
    """A ring half's hand-over (tiers device and disk): its copy to the device (a CUDA event), its
    write to the file (a future; raises what the write raised)."""

    def __init__(self, event, future):
        self.event, self.future = event, future

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        if self.future is not None:
            self.future.result()


__all__ = ["FrameSpec", "Ingested", "TIERS", "ingest_videos", "probe_videos"]
