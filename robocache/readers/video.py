"""Video decoding for the readers: a whole file to uint8 frames [F, H, W, 3] (RGB) plus frame times.

Backends, in the order "auto" tries them: PyAV (``av``), OpenCV (``cv2``), torchvision.io.
torchvision.io.read_video is itself built on PyAV (and deprecated), so where PyAV is missing it
rarely works; OpenCV's FFmpeg build decodes H.264/AV1 mp4s on machines with neither.
Frame times come from the stream's pts (seconds); where a backend gives none, index / fps.
Files are opened read-only; many files decode in threads (the decoders release the GIL).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

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
            raise ReaderError(f"{path}: OpenCV cannot open the video (corrupt or truncated?)")
        fps = cap.get(cv2.CAP_PROP_FPS) or None
        expected = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
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
