"""What a video says about itself, read without decoding: the backends, ``probe_video`` (codec, size,
declared frame count, rate, pixel format and the color matrix/range PyAV's RGB conversion applies),
a file's frame times from its packets, and ``probe_sources``: the ``FrameSpec`` and the frame count of
every source of one stream, from which the memory plan is made before anything is decoded.

Backends, in the order "auto" tries them: PyAV (``av``), OpenCV (``cv2``), torchvision.io.
torchvision.io.read_video is itself built on PyAV (and deprecated), so where PyAV is missing it
rarely works; OpenCV's FFmpeg build decodes H.264/AV1 mp4s on machines with neither.
Files are opened read-only.
"""

from __future__ import annotations

import functools
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .._util import ReaderError, cpu_count, install_hint, require
from .layout import FrameSpec
from .source import VideoSource, count_in_spans, span_bounds

BACKENDS = ("pyav", "opencv", "torchvision")


_MODULES = {"pyav": "av", "opencv": "cv2", "torchvision": "torchvision.io"}


def _usable(name: str) -> bool:
    try:
        mod = __import__(_MODULES[name], fromlist=["_"])
    except ImportError:
        return False
    # torchvision >= 0.26 dropped io.read_video: importable is not the same as usable
    return name != "torchvision" or hasattr(mod, "read_video")


def available_backends() -> list[str]:
    """Backends importable here, in "auto" order (each one is imported to find out)."""
    return [name for name in BACKENDS if _usable(name)]


def resolve_backend(backend: str = "auto") -> str:
    """The backend to decode with: "auto" is the first usable one, and only the modules up to it are
    imported (torchvision and OpenCV take seconds to import on a GPU machine: every load paid for them)."""
    if backend == "auto":
        name = next((n for n in BACKENDS if _usable(n)), None)
        if name is None:
            raise ImportError(f"decoding videos needs PyAV, OpenCV or torchvision: {install_hint('lerobot')} "
                              f"(installs av), or pass load_video=False")
        return name
    if backend not in BACKENDS:
        raise ValueError(f"video_backend must be 'auto' or one of {BACKENDS}, got {backend!r}")
    return backend


def check_resize(resize):
    if resize is None:
        return None
    try:
        h, w = (int(x) for x in resize)
    except (TypeError, ValueError):
        raise ValueError(f"video_resize must be (height, width), got {resize!r}") from None
    if h <= 0 or w <= 0:
        raise ValueError(f"video_resize must be positive, got {resize!r}")
    return h, w


# ---------------------------------------------------------------------------------------------
# metadata without decoding: probe_video, codec names, the color facts of PyAV's RGB conversion

CODEC_NAMES = {"av1": "AV1", "h264": "H.264", "hevc": "H.265/HEVC", "vp9": "VP9", "vp8": "VP8",
               "mpeg4": "MPEG-4 Part 2", "mjpeg": "Motion JPEG", "ffv1": "FFV1", "prores": "ProRes"}

# mp4/mov sample-entry and AVI/OpenCV fourccs -> FFmpeg codec names
_FOURCC_CODECS = {"av01": "av1", "avc1": "h264", "avc3": "h264", "h264": "h264", "x264": "h264",
                  "hvc1": "hevc", "hev1": "hevc", "hevc": "hevc", "h265": "hevc", "vp09": "vp9", "vp90": "vp9",
                  "vp08": "vp8", "vp80": "vp8", "mp4v": "mpeg4", "fmp4": "mpeg4", "xvid": "mpeg4",
                  "divx": "mpeg4", "mjpg": "mjpeg", "ffv1": "ffv1", "apcn": "prores", "apch": "prores"}

# pixel formats a decoder hands back as RGB-family planes: stored as "rgb" (never through YUV)
RGB_PIX_FMTS = frozenset({"rgb24", "bgr24", "rgba", "bgra", "argb", "abgr", "rgb0", "bgr0", "0rgb", "0bgr",
                          "gbrp", "gbrap", "gbrp10le", "gbrp12le", "gbrp16le", "rgb48le", "rgba64le",
                          "bgr48le", "pal8"})

# the matrices a stream's frames are converted with, as (Kr, Kb) of Y = Kr R + (1-Kr-Kb) G + Kb B
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}


@dataclass
class VideoInfo:
    """What a video file says about itself, read without decoding (``probe_video``).

    codec      FFmpeg's name of the codec ("av1", "h264", "hevc", ...); "" when unknown
    width, height
    frames     the frame count the container declares (mp4: the sample count), 0 when it declares none
    fps        average frame rate, 0.0 when unknown
    pix_fmt    the decoder's pixel format ("yuv420p", "yuvj420p", "yuv420p10le", ...); "" when the
               backend does not say (OpenCV)
    matrix     "bt601" | "bt709" | "bt2020": the matrix PyAV's ``frame.to_ndarray(format="rgb24")``
               applies to this stream's frames ("" for backends that convert to RGB themselves)
    full_range True when that conversion treats Y/U/V as full range (0-255), False for limited (16-235)
    backend    the backend that read it
    """

    path: str
    codec: str
    width: int
    height: int
    frames: int
    fps: float
    pix_fmt: str
    matrix: str
    full_range: bool
    backend: str


def codec_label(codec: str) -> str:
    """"av1" -> "AV1": the name users know."""
    return CODEC_NAMES.get(codec, codec.upper() if codec else "of an unknown codec")


def mp4_fourcc(path) -> str:
    """Sample-entry type of the first video track of an mp4/mov file ("av01", "avc1"...), "" when
    the file is not one or has none: the codec without any decoder, for error messages."""
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            return _mp4_walk(f, 0, end, {"boxes": 0}) or ""
    except (OSError, struct.error, ValueError):
        return ""


_MP4_PARENTS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}


def _mp4_walk(f, pos, end, state):
    while pos + 8 <= end:
        state["boxes"] += 1
        if state["boxes"] > 100_000:  # a hostile file: stop rather than loop
            return None
        f.seek(pos)
        size, kind = struct.unpack(">I4s", f.read(8))
        head = 8
        if size == 1:
            size, head = struct.unpack(">Q", f.read(8))[0], 16
        elif size == 0:
            size = end - pos
        if size < head or pos + size > end:
            return None
        if kind == b"trak":
            state["handler"] = None
        if kind in _MP4_PARENTS:
            found = _mp4_walk(f, pos + head, pos + size, state)
            if found:
                return found
        elif kind == b"hdlr":  # full box: version/flags, pre_defined, handler_type
            f.seek(pos + head + 8)
            state["handler"] = f.read(4)
        elif kind == b"stsd" and state.get("handler") == b"vide":
            f.seek(pos + head + 8)  # version/flags, entry_count, then the first entry's size and type
            entry = f.read(8)
            if len(entry) == 8:
                return entry[4:].decode("latin-1").strip().lower()
        pos += size
    return None


def _fourcc_codec(fourcc: str) -> str:
    fourcc = fourcc.strip("\x00 ").lower()
    return _FOURCC_CODECS.get(fourcc, fourcc)


def opencv_codec(cv2, cap, path) -> str:
    code = int(cap.get(cv2.CAP_PROP_FOURCC) or 0) if cap is not None else 0
    fourcc = "".join(chr((code >> 8 * i) & 0xFF) for i in range(4)) if code > 0 else ""
    if not fourcc.strip("\x00 "):
        fourcc = mp4_fourcc(path)
    return _fourcc_codec(fourcc) if fourcc else ""


def _codec_hint(path, codec) -> str:
    return f" (the file is {codec_label(codec)})" if codec else ""


def opencv_codec_error(path, codec: str, declared: int) -> str:
    """The message when OpenCV opened a file that declares frames but decoded none of them."""
    if codec == "av1":
        # opencv-python(-headless) wheels build FFmpeg without dav1d/libaom: the file is fine
        return (f"{path}: the video is AV1; OpenCV here cannot decode it (it opened the file, which declares "
                f"{declared} frames, and decoded none: the opencv-python wheels ship no AV1 decoder); "
                f"pip install av (PyAV bundles the dav1d AV1 decoder) and use the 'pyav' backend "
                f"(video_backend='pyav')")
    label = codec_label(codec)
    return (f"{path}: the video is {label} and declares {declared} frames, but OpenCV decoded none of them: "
            f"this OpenCV build cannot decode {label}, or the file is corrupt or truncated; pip install av "
            f"(PyAV bundles FFmpeg's decoders, dav1d for AV1) and use the 'pyav' backend (video_backend='pyav')")


def yuv_to_rgb_reference(y, u, v, matrix: str, full_range: bool) -> np.ndarray:
    """Float RGB [..., 3] (unclipped, unrounded) of Y, U, V sample values (any equal shapes): the textbook
    conversion, for checking which matrix a converter applies. Not a fast path."""
    kr, kb = MATRICES[matrix]
    y, u, v = (np.asarray(a, np.float64) for a in (y, u, v))
    if full_range:
        y, u, v = y, u - 128.0, v - 128.0
    else:
        y, u, v = (y - 16.0) * 255.0 / 219.0, (u - 128.0) * 255.0 / 224.0, (v - 128.0) * 255.0 / 224.0
    r = y + 2.0 * (1.0 - kr) * v
    b = y + 2.0 * (1.0 - kb) * u
    g = (y - kr * r - kb * b) / (1.0 - kr - kb)
    return np.stack([r, g, b], axis=-1)


def _tag_rule(colorspace: int, color_range: int, pix_fmt: str) -> tuple[str, bool]:
    """The rule PyAV 18 was measured to follow (see docs/frames-ingest.md): the frame's own tags,
    BT.601 when untagged (whatever the resolution), full range for yuvj* or a JPEG range tag."""
    matrix = {1: "bt709", 9: "bt2020", 10: "bt2020"}.get(colorspace, "bt601")
    return matrix, bool(pix_fmt.startswith("yuvj") or color_range == 2)


@functools.lru_cache(maxsize=None)
def pyav_rgb_colors(colorspace: int, color_range: int, pix_fmt: str = "yuv420p") -> tuple[str, bool]:
    """(matrix, full_range) that PyAV's ``to_ndarray(format="rgb24")`` applies to a 4:2:0 frame with
    these tags (FFmpeg's AVColorSpace and AVColorRange numbers).

    Found by asking the installed PyAV, not by assuming: a small frame with known Y/U/V and these
    tags is converted and compared with each candidate; PyAV versions differ (those built on
    ``sws_scale_frame``, 17+, follow the tags; older ones used swscale's defaults). Falls back to the
    measured PyAV 18 rule when PyAV cannot build such a frame.
    """
    try:
        import av
        fmt = "yuvj420p" if pix_fmt.startswith("yuvj") else "yuv420p"
        h, w = 8, 16
        yy = np.tile(np.linspace(20, 230, w).round().astype(np.uint8), (h, 1))
        errors = {}
        rgbs = []
        for uu, vv in ((90, 200), (210, 60)):
            # chroma constant over the frame: any chroma upsampling gives the same result
            planes = np.concatenate([yy.ravel(), np.full(h * w // 2, uu, np.uint8)])
            planes[h * w + h * w // 4:] = vv
            frame = av.VideoFrame.from_ndarray(planes.reshape(h * 3 // 2, w), format=fmt)
            frame.colorspace = colorspace
            frame.color_range = color_range
            rgbs.append((frame.to_ndarray(format="rgb24").astype(np.float64), uu, vv))
        for matrix in MATRICES:
            for full in (False, True):
                errors[(matrix, full)] = max(
                    np.abs(np.clip(yuv_to_rgb_reference(yy, uu, vv, matrix, full), 0, 255) - rgb).mean()
                    for rgb, uu, vv in rgbs)
        best = min(errors, key=lambda k: errors[k])
        if errors[best] < 2.0:
            return best
    except Exception:  # no PyAV, or one too old to tag frames: the measured rule
        pass
    return _tag_rule(colorspace, color_range, pix_fmt)


def _pyav_codec_name(cc) -> str:
    codec = getattr(cc, "codec", None)
    name = str(getattr(codec, "canonical_name", None) or getattr(codec, "name", None) or getattr(cc, "name", "") or "")
    # decoder names that are not codec names (older PyAV has no canonical_name)
    return {"libdav1d": "av1", "libaom-av1": "av1", "av1_cuvid": "av1", "h264_cuvid": "h264",
            "libopenh264": "h264", "hevc_cuvid": "hevc", "libvpx-vp9": "vp9"}.get(name, name)


def _probe_pyav(path, backend="pyav", stream_index: int = 0) -> VideoInfo:
    av = require("av", "lerobot", "video probing with PyAV")
    try:
        with av.open(path, mode="r") as container:
            stream = _video_stream(container, path, stream_index)
            cc = stream.codec_context
            width, height, pix = int(cc.width or 0), int(cc.height or 0), cc.pix_fmt or ""
            colorspace = int(getattr(cc, "colorspace", 2) or 2)
            color_range = int(getattr(cc, "color_range", 0) or 0)
            if not (width and height and pix):
                # a container without codec parameters: the first frame tells (rare; mp4/mkv carry them)
                frame = next(container.decode(stream), None)
                if frame is None:
                    raise ReaderError(f"{path}: no frame could be decoded (pyav); the file is empty, corrupt "
                                      f"or truncated")
                width, height, pix = frame.width, frame.height, frame.format.name
                colorspace = int(getattr(frame, "colorspace", 2) or 2)
                color_range = int(getattr(frame, "color_range", 0) or 0)
            frames = int(stream.frames or 0)
            rate = stream.average_rate or getattr(stream, "guessed_rate", None)
            fps = float(rate) if rate else 0.0
            codec = _pyav_codec_name(cc)
    except ReaderError:
        raise
    except Exception as e:  # av.error.*, OSError
        raise ReaderError(f"{path}: cannot read the video with PyAV: {e}") from e
    matrix, full = pyav_rgb_colors(colorspace, color_range, pix)
    return VideoInfo(path=path, codec=codec, width=width, height=height, frames=frames, fps=fps, pix_fmt=pix,
                     matrix=matrix, full_range=full, backend=backend)


def _probe_opencv(path) -> VideoInfo:
    cv2 = require("cv2", "lerobot", "video probing with OpenCV (pip install opencv-python-headless)")
    cap = cv2.VideoCapture(path)
    try:
        if not cap.isOpened():
            raise ReaderError(f"{path}: OpenCV cannot open the video (corrupt or truncated?)"
                              + _codec_hint(path, opencv_codec(cv2, None, path)))
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        codec = opencv_codec(cv2, cap, path)
    finally:
        cap.release()
    return VideoInfo(path=path, codec=codec, width=width, height=height, frames=max(frames, 0), fps=fps,
                     pix_fmt="", matrix="", full_range=False, backend="opencv")


def probe_video(path, *, backend: str = "auto", stream: int = 0) -> VideoInfo:
    """A video file's metadata (codec, size, declared frame count, rate, pixel format, color facts)
    without decoding it: the container is opened and its header read.

    ``backend``: "auto" (the first of ``available_backends()``), "pyav", "opencv" or "torchvision"
    (built on PyAV: probed through PyAV); ``stream``: which video stream (OpenCV reads the first only).
    Raises ReaderError naming the file when it is missing or cannot be read.
    """
    path = os.fspath(path)
    name = resolve_backend(backend)
    if not os.path.isfile(path):
        raise ReaderError(f"{path}: video file not found")
    if name == "opencv":
        return _probe_opencv(path)
    return _probe_pyav(path, backend=name, stream_index=stream)


def _video_stream(container, path, index: int):
    if len(container.streams.video) <= index:
        raise ReaderError(f"{path}: no video stream {index} (the file has {len(container.streams.video)})")
    return container.streams.video[index]


def count_frames(path, stream: int = 0) -> int:
    """Frames of a file whose container declares no count (some mkv/webm): its video packets, read
    without decoding. Needs PyAV."""
    return len(frame_times(path, stream))


def frame_times(path, stream: int = 0) -> np.ndarray:
    """float64 [F], sorted: the presentation time (seconds) of every frame of a video stream, from its
    packets, without decoding (a demux of a 5 MB AV1 file takes milliseconds). The decoder gives each
    frame its packet's time, so a span's frames are counted here exactly as the decoder keeps them.
    Needs PyAV (OpenCV: the frames are grabbed, which decodes them)."""
    path = os.fspath(path)
    try:
        av = require("av", "lerobot", "reading video frame times with PyAV")
    except ImportError:
        return _frame_times_opencv(path)
    try:
        with av.open(path, mode="r") as container:
            st = _video_stream(container, path, stream)
            tb = float(st.time_base) if st.time_base else None
            pts = [p.pts for p in container.demux(st) if p.size and p.pts is not None]
    except ReaderError:
        raise
    except Exception as e:
        raise ReaderError(f"{path}: cannot read the video with PyAV: {e}") from e
    if tb is None:
        raise ReaderError(f"{path}: the video stream has no time base; its frames have no times")
    return np.sort(np.asarray(pts, np.int64)) * tb


def _frame_times_opencv(path) -> np.ndarray:
    cv2 = require("cv2", "lerobot", "reading video frame times (pip install av)")
    cap = cv2.VideoCapture(path)
    try:
        if not cap.isOpened():
            raise ReaderError(f"{path}: OpenCV cannot open the video (corrupt or truncated?)")
        times = []
        while cap.grab():
            times.append(cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0)
    finally:
        cap.release()
    return np.asarray(times, np.float64)


# ---------------------------------------------------------------------------------------------
# the sources of one stream: their frame format and counts, before anything is decoded


def output_format(info: VideoInfo, backend: str) -> str:
    """What the decoder stores: "yuv420" (PyAV's 4:2:0 planes) or "rgb" (OpenCV and torchvision convert
    to RGB themselves; RGB-family sources, lossless RGB codecs, would lose color through 4:2:0; every
    other source, 10-bit, 4:2:2, 4:4:4, is reformatted by swscale to yuv420p)."""
    if backend != "pyav":
        return "rgb"
    return "rgb" if info.pix_fmt in RGB_PIX_FMTS else "yuv420"


def _file_spec(info: VideoInfo, resize, backend: str) -> FrameSpec:
    h, w = resize if resize is not None else (info.height, info.width)
    if not (h > 0 and w > 0):
        raise ReaderError(f"{info.path}: the video reports a frame size of {info.width}x{info.height}")
    return FrameSpec.make(output_format(info, backend), h, w, info.matrix, info.full_range)


def as_sources(sources) -> list[VideoSource]:
    """Every source a VideoSource (paths: whole files); each file present."""
    if isinstance(sources, (str, bytes, os.PathLike, VideoSource)):
        raise TypeError("sources must be a list of video files or VideoSources (one per episode), not one")
    out = [VideoSource.of(s) for s in sources]
    if not out:
        raise ValueError("sources is empty: pass one video file or VideoSource per episode")
    lost = sorted({s.path for s in out if not os.path.isfile(s.path)})
    if lost:
        more = f" ({len(lost)} of {len({s.path for s in out})} files are missing)" if len(lost) > 1 else ""
        raise ReaderError(f"{lost[0]}: video file not found{more}")
    return out


def probe_sources(sources, *, resize=None, backend: str = "auto", workers: int | None = None
                  ) -> tuple[FrameSpec, np.ndarray, list[VideoInfo]]:
    """Metadata of every source of ONE stream (one per episode), read without decoding.

    Returns (spec, counts, infos): the frames' geometry after ``resize``, the frames each source will
    give (int64 [S]: a whole file's declared count, or its packets counted where it declares none; a
    span's frames counted from the file's packet times, ``span_bounds``), and each source's file's
    ``VideoInfo``. A file shared by several sources is opened once. Raises ReaderError naming the file
    when a file is missing or unreadable, when its size (without ``resize``), format or color facts
    differ from the first file's, or when a source holds no frame.
    """
    sources = as_sources(sources)
    resize = check_resize(resize)
    name = resolve_backend(backend)
    files = list(dict.fromkeys((s.path, s.stream) for s in sources))
    spanned = {f for f, s in zip(((s.path, s.stream) for s in sources), sources) if not s.whole}

    def probe(f):
        path, stream = f
        info = probe_video(path, backend=name, stream=stream)
        times = frame_times(path, stream) if f in spanned or (info.frames <= 0 and name != "opencv") else None
        return info, times

    workers = min(len(files), workers or max(4, cpu_count()), 32)  # opening containers is mostly waiting on I/O
    if workers > 1:
        with ThreadPoolExecutor(workers, thread_name_prefix="robocache-probe") as pool:
            probed = dict(zip(files, pool.map(probe, files)))
    else:
        probed = {f: probe(f) for f in files}
    specs = {f: _file_spec(info, resize, name) for f, (info, _) in probed.items()}
    first = specs[files[0]]
    for f, spec in specs.items():
        if spec != first:
            diff = ", ".join(f"{k} {getattr(spec, k)!r} (first file: {getattr(first, k)!r})"
                             for k in ("format", "height", "width", "matrix", "full_range")
                             if getattr(spec, k) != getattr(first, k))
            hint = " (pass resize=(height, width) to bring every file to one size)" \
                if spec.height != first.height or spec.width != first.width else ""
            raise ReaderError(f"{f[0]}: {diff}; every file of one stream must give frames of one size "
                              f"and format as {files[0][0]} does{hint}")
    counts = np.empty(len(sources), np.int64)
    for i, s in enumerate(sources):
        info, times = probed[(s.path, s.stream)]
        if s.whole:
            counts[i] = info.frames if info.frames > 0 else (len(times) if times is not None else 0)
            if counts[i] <= 0:
                raise ReaderError(f"{s.path}: the container declares no frames ({name}); the file is empty, "
                                  f"corrupt or truncated")
        else:
            counts[i] = count_in_spans(times, span_bounds([s], info.fps))[0]
            if counts[i] <= 0:
                last = f"{times[-1]:.3f} s" if len(times) else "no frame"
                raise ReaderError(f"{s}: no frame of the video falls in the span (the file's frames run from "
                                  f"{times[0] if len(times) else 0:.3f} to {last})")
    return first, counts, [probed[(s.path, s.stream)][0] for s in sources]
