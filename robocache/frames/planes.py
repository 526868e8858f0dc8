"""Helpers under every frame module: a decoder's planes into an I420 row, and the cores a decode may use."""

from __future__ import annotations

import os

import numpy as np

from .. import _C


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def yuv420_geometry(h: int, w: int) -> tuple:
    """_C.copy_planes' geometry of an I420 row: Y [h, w], U and V [ceil(h/2), ceil(w/2)]."""
    ch, cw = (h + 1) // 2, (w + 1) // 2
    return ((h, w), (ch, cw), (ch, cw))


def copy_planes(planes, dst: np.ndarray, geometry) -> None:
    """A decoder's planes (rows of line_size >= row_bytes bytes, alignment padding at the end) into
    dst, their rows back to back: one C call per frame, which releases the GIL once for all of them
    (_C.copy_planes; three NumPy copies were three GIL hand-overs per frame for 16 decode workers)."""
    _C.copy_planes(dst, planes, geometry)
