"""Real multi-rate data: EuRoC MAV V1_01 IMU (200 Hz) resampled onto the
camera timestamps (20 Hz), both int64 nanoseconds since the epoch (> 2**53,
so they cannot pass through float64 without losing nanoseconds).

Expected values: numpy.interp in float64 on times relative to the first IMU
sample, which is exact in int64 before the conversion.
"""

from __future__ import annotations

import numpy as np
import pytest

import robocache
from reference import assert_close, assert_equal, interp_ref, resample_ref, to_numpy

try:
    import torch
except ModuleNotFoundError:
    torch = None

FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=pytest.mark.skipif(torch is None,
                                                                                      reason="torch is not installed"))]


def as_fw(a, fw):
    return torch.from_numpy(np.ascontiguousarray(a)) if fw == "torch" else a


def interp_relative(imu_t, imu_v, x):
    rel = lambda a: (a - imu_t[0]).astype(np.float64)  # exact in int64, then < 2**53 ns
    return np.stack([np.interp(rel(x), rel(imu_t), imu_v[:, d]) for d in range(imu_v.shape[1])], axis=1)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype", ["float64", "float32"])
def test_linear_onto_camera_times(euroc, fw, vdtype):
    imu_t, imu_v, cam_t = euroc
    v = imu_v.astype(vdtype)
    out, pad = robocache.resample(as_fw(v, fw), as_fw(imu_t, fw), as_fw(cam_t, fw), mode="linear",
                                  return_mask=True)
    assert tuple(out.shape) == (len(cam_t), 6)
    want = interp_relative(imu_t, v.astype(np.float64), cam_t)
    if vdtype == "float64":
        assert_close(out, want, rtol=1e-12, atol=1e-12)
    else:
        assert_close(out, want, rtol=1e-6, atol=1e-6)
    # camera times are IMU times: w = 0 and the lerp returns the sample exactly
    assert_equal(out, v[np.searchsorted(imu_t, cam_t)])
    assert not to_numpy(pad).any()


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", ["nearest", "previous", "next"])
def test_copy_modes_return_imu_rows_at_camera_times(euroc, fw, mode):
    imu_t, imu_v, cam_t = euroc
    out = robocache.resample(as_fw(imu_v, fw), as_fw(imu_t, fw), as_fw(cam_t, fw), mode=mode)
    assert_equal(out, imu_v[np.searchsorted(imu_t, cam_t)])


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype", ["float64", "float32"])
def test_linear_between_samples(euroc, fw, vdtype):
    """Camera times + 2.5 ms fall between IMU samples (about 5 ms apart)."""
    imu_t, imu_v, cam_t = euroc
    x = cam_t + 2_500_000
    assert not np.isin(x, imu_t).any() and x[-1] <= imu_t[-1]
    v = imu_v.astype(vdtype)
    out = robocache.resample(as_fw(v, fw), as_fw(imu_t, fw), as_fw(x, fw))
    want = interp_relative(imu_t, v.astype(np.float64), x)
    if vdtype == "float64":
        assert_close(out, want, rtol=1e-12, atol=1e-12)
    else:
        assert_close(out, want, rtol=1e-6, atol=1e-5)
    assert_equal(out, resample_ref(v, imu_t, x, "linear")[0])  # the documented formula, to the bit
    for mode in ("nearest", "previous", "next"):
        got = robocache.resample(as_fw(v, fw), as_fw(imu_t, fw), as_fw(x, fw), mode=mode)
        assert_equal(got, resample_ref(v, imu_t, x, mode)[0], msg=mode)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_ragged_flight_segments(euroc, fw):
    """The IMU cut into 10 episodes (as a Dataset stores it), each row reading
    its episode at that episode's camera times (+1.25 ms)."""
    imu_t, imu_v, cam_t = euroc
    cuts = np.linspace(0, len(imu_t), 11).astype(np.int64)
    offsets = cuts.copy()
    rows = []
    for e in range(10):
        lo, hi = imu_t[cuts[e]], imu_t[cuts[e + 1] - 1]
        rows.append(cam_t[(cam_t >= lo) & (cam_t <= hi)] + 1_250_000)
    T = min(len(r) for r in rows)
    x = np.stack([r[:T] for r in rows])
    index = np.arange(10, dtype=np.int64)[::-1].copy()
    x = x[index]
    out, pad = robocache.resample(as_fw(imu_v, fw), as_fw(imu_t, fw), as_fw(x, fw), offsets=as_fw(offsets, fw),
                                  index=as_fw(index, fw), return_mask=True)
    ref, ref_pad = resample_ref(imu_v, imu_t, x, "linear", offsets=offsets, index=index)
    assert_equal(out, ref)
    assert_equal(pad, ref_pad)
    assert_close(out, interp_ref(imu_v, imu_t, x, offsets=offsets, index=index), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_is_pad_to_the_nanosecond_at_epoch_scale(euroc, fw):
    """tolerance 1e-4 s = 100,000 ns around 1.4e18 ns: float64 there steps
    by 256 ns, so only an int64 comparison gets these right."""
    imu_t, imu_v, _ = euroc
    lo, hi = int(imu_t[0]), int(imu_t[-1])
    x = np.array([lo - 100_001, lo - 100_000, lo - 1, hi + 1, hi + 100_000, hi + 100_001], np.int64)
    out, pad = robocache.resample(as_fw(imu_v, fw), as_fw(imu_t, fw), as_fw(x, fw), return_mask=True)
    assert to_numpy(pad).tolist() == [True, False, False, False, False, True]
    assert_equal(out, imu_v[[0, 0, 0, -1, -1, -1]])
