"""Video decoding for the readers: a whole file to uint8 frames [F, H, W, 3] (RGB) plus frame times.

Backends, in the order "auto" tries them: PyAV (``av``), OpenCV (``cv2``), torchvision.io.
torchvision.io.read_video is itself built on PyAV (and deprecated), so where PyAV is missing it
rarely works; OpenCV's FFmpeg build decodes H.264/AV1 mp4s on machines with neither.
Frame times come from the stream's pts (seconds); where a backend gives none, index / fps.
Files are opened read-only; many files decode in threads (the decoders release the GIL).

``probe_video`` reads a file's metadata (codec, size, declared frame count, rate, pixel format and
the color matrix/range PyAV's RGB conversion applies) without decoding: the memory plan and
robocache.frames.ingest (frames kept as YUV 4:2:0, converted on the GPU) start from it.
"""

from __future__ import annotations

import functools
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ._common import ReaderError, progress, require

BACKENDS = ("pyav", "opencv", "torchvision")


def available_backends() -> list[str]:
    """Backends importable here, in "auto" order."""
    names = []
    for name, module in (("pyav", "av"), ("opencv", "cv2"), ("torchvision", "torchvision.io")):
        try:
            mod = __import__(module, fromlist=["_"])
        except ImportError:
            continue
        # torchvision >= 0.26 dropped io.read_video: importable is not the same as usable
        if name != "torchvision" or hasattr(mod, "read_video"):
            names.append(name)
    return names


def resolve_backend(backend: str = "auto") -> str:
    if backend == "auto":
        names = available_backends()
        if not names:
            raise ImportError("decoding videos needs PyAV, OpenCV or torchvision: pip install robocache[lerobot] "
                              "(installs av), or pass load_video=False")
        return names[0]
    if backend not in BACKENDS:
        raise ValueError(f"video_backend must be 'auto' or one of {BACKENDS}, got {backend!r}")
    return backend


def _check_resize(resize):
    if resize is None:
        return None
    try:
        h, w = (int(x) for x in resize)
    except (TypeError, ValueError):
        raise ValueError(f"video_resize must be (height, width), got {resize!r}") from None
    if h <= 0 or w <= 0:
        raise ValueError(f"video_resize must be positive, got {resize!r}")
    return h, w


def _times_or_index(times, n, fps, path):
    """pts times when every frame had one and they increase; else index / fps."""
    t = np.asarray(times, dtype=np.float64)
    if len(t) == n and np.all(np.isfinite(t)) and (n < 2 or np.all(np.diff(t) > 0)):
        return t
    if not fps or not fps > 0:
        raise ReaderError(f"{path}: the video has no usable frame timestamps and no frame rate")
    return np.arange(n, dtype=np.float64) / float(fps)


def _decode_pyav(path, resize):
    av = require("av", "lerobot", "video decoding with PyAV")
    frames, times = [], []
    try:
        with av.open(path, mode="r") as container:
            if not container.streams.video:
                raise ReaderError(f"{path}: no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            expected = stream.frames
            fps = float(stream.average_rate) if stream.average_rate else None
            for frame in container.decode(stream):
                if resize is not None:
                    frame = frame.reformat(width=resize[1], height=resize[0], format="rgb24")
                frames.append(frame.to_ndarray(format="rgb24"))
                times.append(frame.time if frame.time is not None else np.nan)
    except ReaderError:
        raise
    except Exception as e:  # av.error.* (InvalidDataError, EOFError...), OSError
        raise ReaderError(f"{path}: cannot decode video with PyAV: {e}") from e
    return frames, times, fps, expected


def _decode_opencv(path, resize):
    cv2 = require("cv2", "lerobot", "video decoding with OpenCV (pip install opencv-python-headless)")
    if not os.path.isfile(path):
        raise ReaderError(f"{path}: video file not found")
    cap = cv2.VideoCapture(path)
    try:
        if not cap.isOpened():
            raise ReaderError(f"{path}: OpenCV cannot open the video (corrupt or truncated?)"
                              + _codec_hint(path, _opencv_codec(cv2, cap, path)))
        fps = cap.get(cv2.CAP_PROP_FPS) or None
        expected = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        codec = _opencv_codec(cv2, cap, path)
        frames, times = [], []
        while True:
            ok, img = cap.read()
            if not ok or img is None:
                break
            times.append(cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0)
            if resize is not None:
                img = cv2.resize(img, (resize[1], resize[0]), interpolation=cv2.INTER_AREA)
            frames.append(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))
    finally:
        cap.release()
    if not frames and expected:
        # the container opened and declares frames, yet the first one did not decode: name the codec,
        # the usual cause (opencv-python wheels ship FFmpeg without an AV1 decoder)
        raise ReaderError(opencv_codec_error(path, codec, expected))
    return frames, times, fps, expected


def _decode_torchvision(path, resize):
    io = require("torchvision.io", "lerobot", "video decoding with torchvision")
    try:
        video, _, info = io.read_video(path, pts_unit="sec", output_format="THWC")
        pts, fps = io.read_video_timestamps(path, pts_unit="sec")
    except Exception as e:
        raise ReaderError(f"{path}: cannot decode video with torchvision.io: {e}") from e
    if resize is not None:
        import torch.nn.functional as F

        x = video.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=resize, mode="bilinear", antialias=True, align_corners=False)
        video = x.round().clamp(0, 255).to(video.dtype).permute(0, 2, 3, 1)
    frames = video.numpy()
    return list(frames), [float(p) for p in pts], fps or info.get("video_fps"), 0


_DECODERS = {"pyav": _decode_pyav, "opencv": _decode_opencv, "torchvision": _decode_torchvision}


def decode_video(path, *, resize=None, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Decode every frame of one video file.

    Parameters
    ----------
    path : str or PathLike
    resize : (height, width), optional
        Resize each frame while decoding (the backend's own scaler: PyAV/swscale bilinear,
        OpenCV INTER_AREA, torchvision antialiased bilinear).
    backend : "auto", "pyav", "opencv" or "torchvision"

    Returns
    -------
    frames : uint8 array [F, H, W, 3], RGB
    times : float64 array [F], seconds (frame pts, or index / fps)

    Raises ReaderError naming the file when it is missing, corrupt or truncated (fewer frames
    decoded than the container declares).
    """
    path = os.fspath(path)
    resize = _check_resize(resize)
    name = resolve_backend(backend)
    if not os.path.isfile(path):
        raise ReaderError(f"{path}: video file not found")
    frames, times, fps, expected = _DECODERS[name](path, resize)
    if not frames:
        raise ReaderError(f"{path}: no frame could be decoded ({name}); the file is empty, corrupt or truncated")
    if expected and len(frames) < expected:
        raise ReaderError(f"{path}: decoded {len(frames)} of the {expected} frames the container declares "
                          f"({name}); the file is truncated or corrupt")
    times = _times_or_index(times, len(frames), fps, path)
    return np.stack(frames), times


def decode_videos(paths, *, resize=None, backend: str = "auto", max_workers: int | None = None,
                  show_progress: bool | None = None, desc: str = "decoding videos"):
    """decode_video over many files in threads; results in the order of `paths`."""
    paths = [os.fspath(p) for p in paths]
    name = resolve_backend(backend)
    if not paths:
        return []
    workers = max_workers or min(len(paths), max(1, os.cpu_count() or 1), 16)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="robocache-video") as pool:
        futures = [pool.submit(decode_video, p, resize=resize, backend=name) for p in paths]
        results = []
        for f in progress(futures, total=len(futures), desc=desc, enable=show_progress):
            results.append(f.result())
    return results


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


def _opencv_codec(cv2, cap, path) -> str:
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
        best = min(errors, key=errors.get)
        if errors[best] < 2.0:
            return best
    except Exception:  # no PyAV, or one too old to tag frames: the measured rule
        pass
    return _tag_rule(colorspace, color_range, pix_fmt)


def _pyav_codec_name(cc) -> str:
    codec = getattr(cc, "codec", None)
    name = getattr(codec, "canonical_name", None) or getattr(codec, "name", None) or getattr(cc, "name", "")
    # decoder names that are not codec names (older PyAV has no canonical_name)
    return {"libdav1d": "av1", "libaom-av1": "av1", "av1_cuvid": "av1", "h264_cuvid": "h264",
            "libopenh264": "h264", "hevc_cuvid": "hevc", "libvpx-vp9": "vp9"}.get(name, name or "")


def _probe_pyav(path, backend="pyav") -> VideoInfo:
    av = require("av", "lerobot", "video probing with PyAV")
    try:
        with av.open(path, mode="r") as container:
            if not container.streams.video:
                raise ReaderError(f"{path}: no video stream")
            stream = container.streams.video[0]
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
                              + _codec_hint(path, _opencv_codec(cv2, None, path)))
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        codec = _opencv_codec(cv2, cap, path)
    finally:
        cap.release()
    return VideoInfo(path=path, codec=codec, width=width, height=height, frames=max(frames, 0), fps=fps,
                     pix_fmt="", matrix="", full_range=False, backend="opencv")


def probe_video(path, *, backend: str = "auto") -> VideoInfo:
    """A video file's metadata (codec, size, declared frame count, rate, pixel format, color facts)
    without decoding it: the container is opened and its header read.

    ``backend``: "auto" (the first of ``available_backends()``), "pyav", "opencv" or "torchvision"
    (built on PyAV: probed through PyAV). Raises ReaderError naming the file when it is missing or
    cannot be read.
    """
    path = os.fspath(path)
    name = resolve_backend(backend)
    if not os.path.isfile(path):
        raise ReaderError(f"{path}: video file not found")
    if name == "opencv":
        return _probe_opencv(path)
    return _probe_pyav(path, backend=name)


def count_frames(path) -> int:
    """Frames of a file whose container declares no count (some mkv/webm): its video packets, read
    without decoding. Needs PyAV."""
    av = require("av", "lerobot", "counting video frames with PyAV")
    try:
        with av.open(os.fspath(path), mode="r") as container:
            stream = container.streams.video[0]
            return sum(1 for packet in container.demux(stream) if packet.size)
    except Exception as e:
        raise ReaderError(f"{path}: cannot read the video with PyAV: {e}") from e
