"""A video source: one episode's frames in a video file, ``(file, stream, [start, end) of its span)``.

LeRobot v2.x keeps one file per episode and camera (the span is the whole file); v3.0 keeps many
episodes back to back in one mp4, each the span ``[from_timestamp, to_timestamp)`` of the file's
presentation times. Readers return sources, never frames; ``robocache.frames`` turns them into a frame
store. The rule that puts a frame in a span is written once (``span_bounds``), for the probe that counts
a span's frames from the packets and for the decoder that keeps them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VideoSource:
    """One episode's frames in a video file.

    path    the file (absolute)
    stream  index among the file's video streams (0: the first)
    start, end  seconds of the file's presentation times: the episode is the frames whose time t is in
            ``[start, end)`` up to half a frame (see span_bounds); None, None: every frame of the file.
            Frame times of the episode are ``t - start``, so they line up with its parquet timestamps.
    """

    path: str
    stream: int = 0
    start: float | None = None
    end: float | None = None

    @classmethod
    def of(cls, src) -> VideoSource:
        """A VideoSource as is, or the whole-file source of a path."""
        if isinstance(src, VideoSource):
            return src
        if isinstance(src, (str, bytes, os.PathLike)):
            return cls(os.path.abspath(os.fsdecode(src)))
        raise TypeError(f"a video source is a VideoSource or a path, got {type(src).__name__}")

    def __post_init__(self):
        object.__setattr__(self, "path", os.path.abspath(os.fspath(self.path)))
        if (self.start is None) != (self.end is None):
            raise ValueError(f"{self.path}: a span needs both start and end, got [{self.start}, {self.end})")
        if self.start is not None:
            s, e = float(self.start), float(self.end)
            if not (math.isfinite(s) and math.isfinite(e) and 0 <= s < e):
                raise ValueError(f"{self.path}: span [{self.start}, {self.end}) must be finite with 0 <= start < end")
            object.__setattr__(self, "start", s)
            object.__setattr__(self, "end", e)

    @property
    def whole(self) -> bool:
        return self.start is None

    @property
    def offset(self) -> float:
        """What is subtracted from the file's frame times: the span's start (0 for a whole file)."""
        return 0.0 if self.start is None else self.start

    def key(self) -> list:
        """What the cache key records of the source besides its file's stat."""
        return [self.stream, self.start, self.end]

    def __str__(self):
        return self.path if self.whole else f"{self.path} [{self.start:g}, {self.end:g}) s"


def span_bounds(sources, fps: float) -> np.ndarray:
    """float64 [S, 2]: the frame times ``[lo, hi)`` each span keeps, half a frame before its start and end
    (the frames of an episode of n frames at fps are start + k / fps, k < n, and end = start + n / fps, as
    LeRobot writes it; half a frame absorbs the rounding of timestamps to the stream's time base).
    A whole-file source keeps everything: [-inf, inf)."""
    half = 0.5 / fps if fps and fps > 0 else 0.0
    out = np.empty((len(sources), 2), np.float64)
    for i, s in enumerate(sources):
        out[i] = (-np.inf, np.inf) if s.whole else (s.start - half, s.end - half)
    return out


def count_in_spans(times: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """int64 [S]: how many of the (sorted) frame times fall in each span of ``bounds``."""
    t = np.sort(np.asarray(times, np.float64))
    lo = np.searchsorted(t, bounds[:, 0], side="left")
    hi = np.searchsorted(t, bounds[:, 1], side="left")
    return (hi - lo).astype(np.int64)
