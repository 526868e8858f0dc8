"""Small H.264 files, the cache and ingest tests' episodes: of uniform noise (no frame predicts another,
so each decoded frame tells which one it is), or of given I420 rows."""

from __future__ import annotations

import numpy as np


def write_noise_h264(path: str, frames: int, rng: np.random.Generator, height: int = 32, width: int = 48,
                     rate: int = 10) -> str:
    """``frames`` frames of ``height x width`` RGB noise from ``rng``, coded as yuv420p H.264 at ``rate``."""
    import av   # here: a test module that skips without PyAV can import this one
    with av.open(path, "w") as c:
        s = c.add_stream("libx264", rate=rate)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            img = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    return path


def write_noise_clips(root, frames, rng: np.random.Generator, name: str = "c") -> list[str]:
    """One noise clip per entry of ``frames`` (its frame count) in the folder ``root``, named ``{name}{i}.mp4``,
    32x48, drawn from ``rng`` in turn: the paths."""
    return [write_noise_h264(str(root / f"{name}{i}.mp4"), n, rng) for i, n in enumerate(frames)]


def write_i420_h264(path, rows: np.ndarray, height: int, width: int, rate: int = 10) -> str:
    """I420 ``rows`` ``[n, height * width * 3 // 2]`` (even sizes) coded as yuv420p H.264 at ``rate``: the path."""
    import av
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=rate)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        for r in rows:
            for pkt in s.encode(av.VideoFrame.from_ndarray(r.reshape(height * 3 // 2, width), format="yuv420p")):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    return str(path)
