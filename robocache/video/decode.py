"""Decoding, written once for every backend: a job (one video file and the spans of it that are wanted)
into a ``Rows`` sink, frame by frame, in presentation order.

A job's spans are decoded in one pass: the decoder seeks to the first span (to the keyframe before it),
keeps the frames that fall in a span (``span_bounds``), skips the others, seeks again only across a gap of
more than ``SEEK_GAP`` seconds, and stops after the last span. Each span must give exactly the frames the
probe counted for it (``probe_sources``); anything else is a ReaderError naming the file and the span.

Backends: PyAV hands back the frames' YUV 4:2:0 planes (``FrameSpec.format == "yuv420"``) or RGB;
OpenCV and torchvision.io RGB. ``decode_video`` is the plain in-memory sink: one source to a uint8
``[F, H, W, 3]`` RGB array, for inspection and tests.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._util import ReaderError, cpu_count, progress, require
from .layout import FrameSpec, copy_planes
from .probe import check_resize, opencv_codec, opencv_codec_error, probe_sources, resolve_backend
from .rows import Rows
from .source import VideoSource, span_bounds

# PyAV decoder threading: frame + slice threads; how many per decoder, the caller's choice up to
# MAX_FRAME_THREADS, FFmpeg's own cap on its automatic count. A decoder with n frame threads reads about n
# packets past the frame it hands back, and a node-local mirror of a remote file holds only that many past
# a span (remote/mp4.py's DECODER_DELAY): FFmpeg 7 (PyAV 15) given 64 threads read into bytes never fetched
THREAD_TYPE = "AUTO"
MAX_FRAME_THREADS = 16
# two wanted spans of one file further apart than this are reached by a seek, not by decoding through
SEEK_GAP = 4.0


class Job:
    """The spans of one video stream that a decoder handles in one pass, in time order, and where each
    one's frames go: span k is ``sources[k]``, its ``counts[k]`` frames go to store rows
    ``first_rows[k] ...``; ``index[k]`` is its position among all the stream's sources."""

    def __init__(self, sources, counts, first_rows, index, fps: float):
        self.sources = list(sources)
        self.path, self.stream = self.sources[0].path, self.sources[0].stream
        self.counts = np.asarray(counts, np.int64)
        self.first_rows = np.asarray(first_rows, np.int64)
        self.index = list(index)
        self.bounds = span_bounds(self.sources, fps)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)  # job row of each span
        self.n = int(self.starts[-1])
        self.whole = len(self.sources) == 1 and self.sources[0].whole

    def place(self, i: int) -> int:
        """The store row of job row i."""
        k = 0 if len(self.counts) == 1 else int(np.searchsorted(self.starts, i, side="right") - 1)
        return int(self.first_rows[k]) + i - int(self.starts[k])

    def pieces(self, first: int, k: int):
        """(offset in [0, k), store row, length) of the contiguous store pieces of job rows first .. first+k-1."""
        at = first
        while at < first + k:
            s = int(np.searchsorted(self.starts, at, side="right") - 1)
            n = min(int(self.starts[s + 1]), first + k) - at
            yield at - first, int(self.first_rows[s]) + at - int(self.starts[s]), n
            at += n

    def __repr__(self):
        return f"Job({self.path}, {len(self.sources)} spans, {self.n} frames)"


def make_jobs(sources, counts, offsets, fps, parts: int = 1) -> list[Job]:
    """The decode jobs of one stream's sources: the sources of a file grouped, in time order, into as few
    jobs as do not overlap (one per file, unless a span is asked for twice). ``offsets``: each source's
    first store row; ``fps``: per source, its file's frame rate (for the span rule).

    ``parts``: the decoders that will run at once. While there are fewer than ``4 * parts`` jobs, the largest
    job holding several spans is cut in two at a span boundary (each half seeks to its own first span): a
    LeRobot v3.0 set keeps many episodes in a few large mp4s (500 MB each by default), and one decoder per
    file would leave most cores idle; a few jobs per decoder keep them busy to the end (3 jobs on 2
    decoders left one idle for a third of the load). Every frame is still decoded once, plus at most a GOP
    before each cut. Jobs come largest first, so the last ones to start are short."""
    by_file: dict = {}
    for i, s in enumerate(sources):
        by_file.setdefault((s.path, s.stream), []).append(i)
    jobs: list[list[int]] = []
    for idx in by_file.values():
        idx.sort(key=lambda i: -math.inf if sources[i].whole else sources[i].start)
        groups: list[list[int]] = []
        for i in idx:
            s = sources[i]
            home = next((g for g in groups if not s.whole and not sources[g[-1]].whole
                         and sources[g[-1]].end <= s.start), None)
            if home is None:
                groups.append([i])
            else:
                home.append(i)
        jobs.extend(groups)
    while len(jobs) < 4 * parts and parts > 1:
        cuttable = [g for g in jobs if len(g) > 1]
        if not cuttable:
            break
        g = max(cuttable, key=lambda g: sum(counts[i] for i in g))
        n = np.cumsum([counts[i] for i in g])
        cut = int(np.clip(np.searchsorted(n, n[-1] / 2), 0, len(g) - 2)) + 1
        jobs[jobs.index(g):jobs.index(g) + 1] = [g[:cut], g[cut:]]
    jobs.sort(key=lambda g: -sum(counts[i] for i in g))
    return [Job([sources[i] for i in g], [counts[i] for i in g], [offsets[i] for i in g], g, fps[g[0]])
            for g in jobs]


class _Spans:
    """A job's frames, one at a time, into its spans: ``row(t)`` is the sink row of the frame at time t,
    or None when the frame is in no span; ``times()`` each span's frame times from its start."""

    def __init__(self, job: Job, out: Rows, tick, backend: str):
        self.job, self.out, self.tick, self.backend = job, out, tick, backend
        self.got = np.zeros(len(job.sources), np.int64)
        self.t: list[list[float]] = [[] for _ in job.sources]
        self.k, self.i = 0, 0

    def row(self, t: float):
        b = self.job.bounds
        while self.k < len(b) and t >= b[self.k, 1]:
            self.k += 1
        if self.k == len(b) or t < b[self.k, 0]:
            return None
        k = self.k
        if self.got[k] == self.job.counts[k]:
            raise ReaderError(self._more(k))
        self.got[k] += 1
        self.t[k].append(t)
        r = self.out.row(self.i)
        self.i += 1
        self.tick()
        return r

    def _more(self, k) -> str:
        s = self.job.sources[k]
        if s.whole:
            return (f"{s.path}: decodes to more than the {self.job.counts[k]} frames the container declares "
                    f"({self.backend}); its header is inconsistent (re-encode or remux the file)")
        return f"{s}: decodes to more than the {self.job.counts[k]} frames its packets hold ({self.backend})"

    def past_end(self, t: float) -> bool:
        return t >= self.job.bounds[-1, 1]

    def times(self, fps) -> list:
        """Per span, its frame times (seconds from the span's start); a short span is a ReaderError."""
        out = []
        for k, s in enumerate(self.job.sources):
            n = int(self.job.counts[k])
            if self.got[k] < n:
                what = "the container declares" if s.whole else "its packets hold"
                raise ReaderError(f"{s}: decoded {self.got[k]} of the {n} frames {what} ({self.backend}); the "
                                  f"file is truncated or corrupt")
            if s.whole:
                out.append(times_or_index(self.t[k], n, fps, s.path))
            else:
                out.append(np.asarray(self.t[k], np.float64) - s.offset)
        return out


def times_or_index(times, n, fps, path):
    """pts times when every frame had one and they increase; else index / fps."""
    t = np.asarray(times, dtype=np.float64)
    if len(t) == n and np.all(np.isfinite(t)) and (n < 2 or np.all(np.diff(t) > 0)):
        return t
    if not fps or not fps > 0:
        raise ReaderError(f"{path}: the video has no usable frame timestamps and no frame rate")
    return np.arange(n, dtype=np.float64) / float(fps)


def _groups(job: Job):
    """(lo, hi) of runs of spans close enough to decode through, in time order."""
    b = job.bounds
    lo, hi = b[0]
    for s_lo, s_hi in b[1:]:
        if s_lo - hi > SEEK_GAP:
            yield lo, hi
            lo = s_lo
        hi = s_hi
    yield lo, hi


# ---------------------------------------------------------------------------------------------
# the backends: job -> rows


def _decode_pyav(job: Job, out: Rows, spec: FrameSpec, threads: int, tick, stop):
    av = require("av", "lerobot", "video decoding with PyAV")
    H, W = spec.height, spec.width
    yuv = spec.format == "yuv420"
    geometry = spec.geometry
    accept = ("yuv420p", "yuvj420p") if yuv else ("rgb24",)
    reformatter = None
    spans = _Spans(job, out, tick, "pyav")
    try:
        with av.open(job.path, mode="r") as container:
            stream = container.streams.video[job.stream]
            stream.thread_type = THREAD_TYPE
            stream.codec_context.thread_count = min(threads, MAX_FRAME_THREADS)
            fps = float(stream.average_rate) if stream.average_rate else None
            tb = float(stream.time_base) if stream.time_base else None
            for lo, hi in _groups(job):
                for frame in _frames_from(container, stream, lo, tb, job.whole):
                    if stop.is_set():
                        return None
                    t = frame.time
                    if t is None:
                        if not job.whole:
                            raise ReaderError(f"{job.path}: a frame without a timestamp; spans of the file "
                                              f"cannot be found")
                        t = math.nan
                    elif t >= hi:
                        break
                    row = spans.row(t)
                    if row is None:
                        continue
                    if frame.format.name not in accept or frame.width != W or frame.height != H:
                        if reformatter is None:
                            from av.video.reformatter import VideoReformatter
                            reformatter = VideoReformatter()
                        # yuv420p keeping the source's matrix and range (swscale does no color math
                        # YUV->YUV); rgb24 as to_ndarray(format="rgb24") makes it
                        kw = {"dst_color_range": 2 if spec.full_range else 1} if yuv else {}
                        try:
                            frame = reformatter.reformat(frame, width=W, height=H,
                                                         format="yuv420p" if yuv else "rgb24", **kw)
                        except TypeError:  # PyAV < 12 has no color-range arguments (and keeps the range)
                            frame = reformatter.reformat(frame, width=W, height=H,
                                                         format="yuv420p" if yuv else "rgb24")
                    copy_planes(frame.planes, row, geometry)
    except ReaderError:
        raise
    except Exception as e:  # av.error.* (InvalidDataError, EOFError...), OSError
        raise ReaderError(f"{job.path}: cannot decode video with PyAV: {e}") from e
    return spans.times(fps)


def _frames_from(container, stream, lo: float, tb, whole: bool):
    """The stream's frames from time ``lo`` on: from the keyframe before it (a seek) when ``lo`` is past
    the file's start; where the seek lands past ``lo`` (a container without a usable index), from the
    file's start."""
    if whole or tb is None or lo <= 0:
        yield from container.decode(stream)
        return
    container.seek(max(0, int(math.floor(lo / tb))), stream=stream, backward=True, any_frame=False)
    frames = container.decode(stream)
    first = next(frames, None)
    if first is not None and first.time is not None and first.time > lo:
        container.seek(0, stream=stream, backward=True, any_frame=False)
        frames = container.decode(stream)
        first = next(frames, None)
    if first is not None:
        yield first
        yield from frames


def _decode_opencv(job: Job, out: Rows, spec: FrameSpec, threads: int, tick, stop):
    cv2 = require("cv2", "lerobot", "video decoding with OpenCV (pip install opencv-python-headless)")
    H, W = spec.height, spec.width
    if job.stream != 0:
        raise ReaderError(f"{job.path}: OpenCV reads a file's first video stream only (stream {job.stream} asked)")
    cap = cv2.VideoCapture(job.path)
    spans = _Spans(job, out, tick, "opencv")
    decoded = 0
    try:
        if not cap.isOpened():
            raise ReaderError(f"{job.path}: OpenCV cannot open the video (corrupt or truncated?)")
        fps = cap.get(cv2.CAP_PROP_FPS) or None
        codec = opencv_codec(cv2, cap, job.path)
        while not stop.is_set():
            ok, img = cap.read()
            if not ok or img is None:
                break
            decoded += 1
            t = cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
            if spans.past_end(t):
                break
            row = spans.row(t)
            if row is None:
                continue
            if img.shape[:2] != (H, W):
                img = cv2.resize(img, (W, H), interpolation=cv2.INTER_AREA)
            cv2.cvtColor(img, cv2.COLOR_BGR2RGB, dst=row.reshape(H, W, 3))
    finally:
        cap.release()
    if stop.is_set():
        return None
    if decoded == 0:
        raise ReaderError(opencv_codec_error(job.path, codec, job.n))
    return spans.times(fps)


def _decode_torchvision(job: Job, out: Rows, spec: FrameSpec, threads: int, tick, stop):
    # torchvision.io reads a whole file at once: one file in flight per worker, copied into the rows
    io = require("torchvision.io", "lerobot", "video decoding with torchvision")
    try:
        video, _, info = io.read_video(job.path, pts_unit="sec", output_format="THWC")
        pts, fps = io.read_video_timestamps(job.path, pts_unit="sec")
    except Exception as e:
        raise ReaderError(f"{job.path}: cannot decode video with torchvision.io: {e}") from e
    if tuple(video.shape[1:3]) != (spec.height, spec.width):  # resize only when asked (it is not the identity)
        import torch.nn.functional as F

        x = video.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=(spec.height, spec.width), mode="bilinear", antialias=True, align_corners=False)
        video = x.round().clamp(0, 255).to(video.dtype).permute(0, 2, 3, 1)
    frames = video.numpy()
    spans = _Spans(job, out, tick, "torchvision")
    for frame, t in zip(frames, pts):
        if stop.is_set():
            return None
        row = spans.row(float(t))
        if row is not None:
            row[:] = frame.reshape(row.shape)
    return spans.times(fps or info.get("video_fps"))


DECODERS = {"pyav": _decode_pyav, "opencv": _decode_opencv, "torchvision": _decode_torchvision}


def decode_job(backend: str, job: Job, out: Rows, spec: FrameSpec, *, threads: int = 0, tick=None, stop=None):
    """Every frame of `job`'s spans into `out` (job row i = its i-th frame in time order). Returns each
    span's frame times (seconds from its start), or None when `stop` was set."""
    return DECODERS[backend](job, out, spec, threads, tick or _no_tick, stop or _NEVER)


def _no_tick(n=1):
    pass


class _Never:
    @staticmethod
    def is_set() -> bool:
        return False


_NEVER = _Never()


# ---------------------------------------------------------------------------------------------
# the in-memory sink: frames as RGB arrays


def decode_video(source, *, resize=None, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Decode one source (a video file, or a VideoSource's span of one) to RGB, in memory.

    Parameters
    ----------
    source : str, PathLike or VideoSource
    resize : (height, width), optional
        Resize each frame while decoding (the backend's own scaler: PyAV/swscale bilinear,
        OpenCV INTER_AREA, torchvision antialiased bilinear).
    backend : "auto", "pyav", "opencv" or "torchvision"

    Returns
    -------
    frames : uint8 array [F, H, W, 3], RGB
    times : float64 array [F], seconds (frame pts from the span's start, or index / fps)

    Raises ReaderError naming the file when it is missing, corrupt or truncated (fewer frames
    decoded than the container declares).
    """
    src = VideoSource.of(source)
    resize = check_resize(resize)
    name = resolve_backend(backend)
    if not os.path.isfile(src.path):
        raise ReaderError(f"{src.path}: video file not found")
    yuv, counts, infos = probe_sources([src], resize=resize, backend=name)
    spec = FrameSpec.make("rgb", yuv.height, yuv.width, yuv.matrix, yuv.full_range)
    n = int(counts[0])
    frames = np.empty((n, spec.height, spec.width, 3), np.uint8)
    job = Job([src], [n], [0], [0], infos[0].fps)
    times = decode_job(name, job, Rows(n, frames.reshape(n, -1)), spec)
    return frames, times[0]


def decode_videos(sources, *, resize=None, backend: str = "auto", max_workers: int | None = None,
                  show_progress: bool | None = None, desc: str = "decoding videos"):
    """decode_video over many sources in threads; results in the order of `sources`."""
    sources = list(sources)
    name = resolve_backend(backend)
    if not sources:
        return []
    workers = max_workers or min(len(sources), cpu_count(), 16)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="robocache-video") as pool:
        futures = [pool.submit(decode_video, s, resize=resize, backend=name) for s in sources]
        return [f.result() for f in progress(futures, total=len(futures), desc=desc, enable=show_progress)]
