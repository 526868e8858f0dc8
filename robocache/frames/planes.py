"""Helpers under every frame module: a decoder's plane into an I420 row, and the cores a decode may use."""

from __future__ import annotations

import os

import numpy as np


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def copy_plane(plane, dst: np.ndarray, h: int, w: int) -> None:
    """A decoder plane (rows of line_size >= w bytes, alignment padding at the end) into dst [h*w]."""
    src = np.frombuffer(plane, np.uint8)
    ls = plane.line_size
    if ls == w:
        dst[:] = src[:h * w]
        return
    if len(src) < (h - 1) * ls + w:
        raise ValueError(f"plane of {len(src)} bytes is short for {h} rows of {w} (line size {ls})")
    np.copyto(dst.reshape(h, w), np.lib.stride_tricks.as_strided(src, (h, w), (ls, 1)))
