"""robocache._C.copy_planes, a decoded frame's planes into its row at ingest: against NumPy
slicing on fresh random planes with and without line padding (the real PyAV planes are covered
by test_frames_ingest.py), and what a caller can get wrong."""

from __future__ import annotations

import numpy as np
import pytest

from robocache import _C
from robocache.video.layout import copy_planes, yuv420_geometry


class Plane(bytearray):
    """A decoder plane as PyAV hands it over: a buffer of rows line_size bytes apart."""

    def __init__(self, data: np.ndarray, line_size: int):
        super().__init__(data.tobytes())
        self.line_size = line_size


def random_planes(rng, geometry, pad):
    planes, want = [], []
    for rows, row_bytes in geometry:
        ls = row_bytes + pad
        full = rng.integers(0, 256, (rows, ls), dtype=np.uint8)
        # the last row may end at row_bytes, as FFmpeg's buffers may
        planes.append(Plane(full.reshape(-1)[:max(0, (rows - 1) * ls + row_bytes)], ls))
        want.append(full[:, :row_bytes].reshape(-1))
    return planes, np.concatenate(want)


@pytest.mark.parametrize("h,w", [(480, 640), (47, 61), (1, 1), (2, 3)])
@pytest.mark.parametrize("pad", [0, 3, 64])
def test_equals_numpy_slicing(h, w, pad, rng):
    geometry = yuv420_geometry(h, w)
    planes, want = random_planes(rng, geometry, pad)
    dst = np.full(len(want) + 8, 0xAB, np.uint8)
    copy_planes(planes, dst[4:-4], geometry)
    np.testing.assert_array_equal(dst[4:-4], want)
    assert (dst[:4] == 0xAB).all() and (dst[-4:] == 0xAB).all(), "written outside dst"


def test_one_rgb_plane(rng):
    planes, want = random_planes(rng, ((5, 3 * 7),), pad=11)
    dst = np.zeros(len(want), np.uint8)
    copy_planes(planes, dst, ((5, 21),))
    np.testing.assert_array_equal(dst, want)


def test_bad_arguments(rng):
    geometry = yuv420_geometry(4, 6)
    planes, want = random_planes(rng, geometry, pad=2)
    dst = np.zeros(len(want), np.uint8)
    cases = [
        ((dst, planes[:2], geometry), ValueError, "planes: expected 1..4 planes, one per geometry entry"),
        ((dst, planes, 5), TypeError, "geometry: expected a sequence"),
        ((dst, 7, geometry), TypeError, "planes: expected a sequence"),
        ((dst[:-1], planes, geometry), ValueError, r"dst: expected 36 bytes .* got 35"),
        ((bytes(len(want)), planes, geometry), TypeError, "dst: expected a writable C-contiguous buffer"),
        ((np.zeros((len(want), 2), np.uint8)[:, 0], planes, geometry), TypeError, "dst: expected a writable C"),
        ((dst, planes, ((4, 6), (2, 3), (2,))), TypeError, r"geometry\[2\]: expected \(rows, row_bytes\)"),
        ((dst, planes, ((4, 6), (2, 3), (2, -3))), ValueError, r"geometry\[2\]: rows and row_bytes must be >= 0"),
        ((dst, planes, ((4, 6), (3, 3), (1, 3))), ValueError, r"planes\[1\]: 8 bytes in lines of 5 cannot hold 3 rows"),
        ((dst, planes, ((4, 6), (2, 6), (2, 0))), ValueError, r"planes\[1\]: .* lines of 5 cannot hold 2 rows of 6"),
        ((dst, [planes[0], b"xx", planes[2]], geometry), TypeError,
         r"planes\[1\]: expected a plane with an int line_size"),
        ((dst, _C.copy_planes, geometry), TypeError, "planes: expected a sequence"),
    ]
    for args, exc, match in cases:
        before = dst.copy()
        with pytest.raises(exc, match=match):
            _C.copy_planes(*args)
        np.testing.assert_array_equal(dst, before)  # nothing written before the checks passed
    with pytest.raises(TypeError, match="expected 3 arguments"):
        _C.copy_planes(dst, planes)


def test_plane_without_the_buffer_protocol():
    class NoBuffer:
        line_size = 4

    with pytest.raises(TypeError, match=r"planes\[0\]: expected an object with the buffer protocol"):
        _C.copy_planes(np.zeros(4, np.uint8), [NoBuffer()], ((1, 4),))
