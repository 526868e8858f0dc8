"""robocache.fuse on the CPU: K streams at their own rates resampled onto one timeline and
concatenated on the feature axis must EQUAL a separate robocache.resample per stream followed
by a concatenation, bit for bit (slerp included: the CPU runs the same libm calls), and each
stream's columns must match the NumPy reference of docs/resample.md.

Every dtype x mode mix, dense / one row / ragged, list and dict streams, streams with different
trailing shapes and sample counts, empty episodes, T=0, B=0, strided inputs, outputs poisoned
before the call, the real EuRoC IMU (200 Hz) + camera (20 Hz) onto a 10 Hz timeline, and bad
input that must name the stream and argument. The CUDA suite is tests/test_fuse_cuda.py.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import robocache
from conftest import make_targets, make_times, make_values
from reference import (ALL_DTYPES, FLOAT_DTYPES, SLERP_ATOL, TIME_DTYPES, assert_close, assert_equal,
                       dtype_name, poisoned, resample_ref, snapshot, to_numpy)

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

# trailing shapes per mode: scalars, vectors, images-like 2-D features, quaternion sets
FEATS = {"linear": (3,), "nearest": (2, 5), "previous": (), "next": (1,), "slerp": (2, 4)}
FLOAT_MIX = ("linear", "nearest", "previous", "next", "slerp")
INT_MIX = ("nearest", "previous", "next")


# ----------------------------------------------------------------------------
# random multi-stream inputs


class Fuse:
    """One random fuse call as numpy arrays: streams [(values, times[, offsets])], new_times,
    modes, index (ragged). bfloat16 values are float32 holding bfloat16-exact contents."""

    def __init__(self, rng, form, vdtype, tdtype, modes, *, B=3, T_per=5, E=10, feats=None,
                 max_s=30):
        self.form, self.vdtype, self.tdtype, self.modes = form, vdtype, tdtype, list(modes)
        self.seed = rng.seed
        K = len(modes)
        feats = feats or [FEATS[m] for m in modes]
        self.index = rng.integers(0, E, B).astype(np.int64) if form == "ragged" else None
        self.streams = []
        rows = []  # per stream: the times of each output row, for the targets
        for k, mode in enumerate(modes):
            feat = tuple(feats[k])
            if form == "row":
                S = int(rng.integers(1, max_s))
                t = make_times(rng, S, tdtype)
                v = make_values(rng, (S,) + feat, vdtype, mode)
                self.streams.append((v, t))
                rows.append([t])
            elif form == "dense":
                S = int(rng.integers(1, max_s))
                t = np.stack([make_times(rng, S, tdtype) for _ in range(B)]) if B else np.zeros((0, S), tdtype)
                v = make_values(rng, (B * S,) + feat, vdtype, mode).reshape((B, S) + feat)
                self.streams.append((v, t))
                rows.append(list(t))
            else:
                n = rng.integers(0, max_s, E)
                n[rng.integers(0, E)] = 0  # every stream has an empty episode...
                if B:
                    n[self.index[k % B]] = 0  # ...and some output row reads one
                    n[self.index[(k + 1) % B]] = 1
                off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
                t = np.concatenate([make_times(rng, int(c), tdtype) for c in n]).astype(tdtype)
                v = make_values(rng, (int(off[-1]),) + feat, vdtype, mode)
                self.streams.append((v, t, off))
                rows.append([t[off[e]:off[e + 1]] for e in self.index])
        # each row's targets: some in every stream's span (interior, exact samples, midpoints)
        nrows = 1 if form == "row" else B
        x = np.zeros((nrows, K * T_per), tdtype)
        for b in range(nrows):
            xb = np.concatenate([make_targets(rng, rows[k][b], T_per, tdtype) for k in range(K)])
            x[b] = rng.permutation(xb)
        self.new_times = x[0] if form == "row" else x

    def args(self, fw="numpy", as_dict=False):
        """(streams, new_times, index) as fresh numpy arrays or torch CPU tensors."""
        def conv(a, is_values=False):
            a = a.copy()
            if fw == "numpy":
                return a
            t = torch.from_numpy(a)
            return t.to(torch.bfloat16) if is_values and self.vdtype == "bfloat16" else t
        streams = [tuple(conv(a, i == 0) for i, a in enumerate(s)) for s in self.streams]
        if as_dict:
            streams = {f"s{k}": s for k, s in enumerate(streams)}
        index = None if self.index is None else conv(self.index)
        return streams, conv(self.new_times), index

    @property
    def msg(self):
        return f"(form={self.form}, values {self.vdtype}, times {self.tdtype}, modes={self.modes}, seed={self.seed})"


def separate(streams, new_times, modes, index=None):
    """What fuse replaces: one robocache.resample per stream, then a concatenation.
    Returns numpy (out [..., F], is_pad [..., K]); bfloat16 comes back as exact float32."""
    if isinstance(streams, dict):
        streams = list(streams.values())
    outs, pads = [], []
    for parts, mode in zip(streams, modes):
        kw = {} if len(parts) == 2 else {"offsets": parts[2], "index": index}
        o, p = robocache.resample(parts[0], parts[1], new_times, mode=mode, return_mask=True, **kw)
        o = to_numpy(o)
        outs.append(o.reshape(o.shape[:new_times.ndim] + (-1,)))
        pads.append(to_numpy(p))
    return np.concatenate(outs, axis=-1), np.stack(pads, axis=-1)


def reference(case: Fuse):
    """The NumPy reference (tests/reference.py) per stream, concatenated: independent of robocache."""
    fw = "torch" if case.vdtype == "bfloat16" else "numpy"
    streams, x, index = case.args(fw)
    outs, pads = [], []
    for parts, mode in zip(streams, case.modes):
        kw = {} if len(parts) == 2 else {"offsets": parts[2], "index": index}
        o, p = resample_ref(parts[0], parts[1], x, mode, **kw)
        outs.append(o.reshape(o.shape[:x.ndim] + (-1,)))
        pads.append(p)
    return outs, np.stack(pads, axis=-1)


def check_case(case: Fuse, fw="numpy", as_dict=False):
    """fuse == separate resamples (bitwise) == the NumPy reference; allocated and into a
    poisoned out=; inputs untouched. Returns the fused output."""
    streams, x, index = case.args(fw, as_dict)
    before = snapshot({f"{k}{i}": a for k, s in enumerate(streams.values() if as_dict else streams)
                       for i, a in enumerate(s)} | {"x": x})
    kw = {"modes": case.modes if not as_dict else dict(zip(streams, case.modes))}
    if index is not None:
        kw["index"] = index
    want, want_pad = separate(streams, x, case.modes, index)

    out = robocache.fuse(streams, x, **kw)
    assert type(out) is type(x), f"output is {type(out).__name__} {case.msg}"
    assert dtype_name(out) == case.vdtype, f"dtype {dtype_name(out)} {case.msg}"
    assert tuple(out.shape) == want.shape, f"shape {tuple(out.shape)} != {want.shape} {case.msg}"
    assert_equal(out, want, msg="fuse != separate resamples " + case.msg)

    buf = poisoned(want.shape, case.vdtype, x if fw == "torch" else np.empty(0))
    res = robocache.fuse(streams, x, out=buf, return_mask=True, **kw)
    assert isinstance(res, tuple) and len(res) == 2 and res[0] is buf
    assert_equal(buf, want, msg="fuse(out=poisoned) " + case.msg)
    assert dtype_name(res[1]) == "bool" and type(res[1]) is type(x)
    assert_equal(res[1], want_pad, msg="is_pad " + case.msg)

    # and each stream's columns against the NumPy reference
    ref_outs, ref_pad = reference(case)
    got = to_numpy(out)
    col = 0
    for k, (r, mode) in enumerate(zip(ref_outs, case.modes)):
        d = r.shape[-1]
        part = got[..., col:col + d]
        if mode == "slerp":
            assert_close(part, r, atol=SLERP_ATOL[case.vdtype], msg=f"stream {k} {case.msg}")
        else:
            assert_equal(part, r, msg=f"stream {k} vs reference {case.msg}")
        col += d
    assert col == got.shape[-1]
    assert_equal(res[1], ref_pad, msg="is_pad vs reference " + case.msg)

    after = snapshot({f"{k}{i}": a for k, s in enumerate(streams.values() if as_dict else streams)
                      for i, a in enumerate(s)} | {"x": x})
    assert after == before, "fuse modified its inputs " + case.msg
    return out


# ----------------------------------------------------------------------------
# equals separate resamples: every dtype x mode mix x times dtype x form


@pytest.mark.parametrize("form", ["dense", "row", "ragged"])
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype", ALL_DTYPES)
def test_equals_separate_resamples(vdtype, tdtype, form, rng):
    if vdtype == "bfloat16" and torch is None:
        pytest.skip("bfloat16 needs torch")
    modes = FLOAT_MIX if vdtype in FLOAT_DTYPES else INT_MIX
    case = Fuse(rng, form, vdtype, tdtype, modes)
    check_case(case, "torch" if vdtype == "bfloat16" else "numpy")


@pytest.mark.parametrize("mode", ["linear", "nearest", "previous", "next", "slerp"])
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_one_mode_for_all_streams(mode, form, rng):
    """modes='slerp' (a str) applies to every stream; 3 streams of different widths."""
    feats = [(4,), (3, 4), (1, 4)] if mode == "slerp" else [(7,), (), (2, 3)]
    case = Fuse(rng, form, "float32", "float64", [mode] * 3, feats=feats)
    streams, x, index = case.args()
    kw = {"index": index} if index is not None else {}
    out = robocache.fuse(streams, x, modes=mode, **kw)
    assert_equal(out, separate(streams, x, [mode] * 3, index)[0], msg=case.msg)


@needs_torch
@pytest.mark.parametrize("vdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_torch_cpu_tensors(vdtype, form, rng):
    case = Fuse(rng, form, vdtype, "float64", FLOAT_MIX)
    out = check_case(case, "torch")
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"


def test_default_modes_are_linear(rng):
    case = Fuse(rng, "dense", "float64", "float64", ["linear"] * 3, feats=[(2,), (5,), (1,)])
    streams, x, _ = case.args()
    assert_equal(robocache.fuse(streams, x), separate(streams, x, ["linear"] * 3)[0])


@pytest.mark.parametrize("K", [1, 2, 16])
def test_stream_counts(K, rng):
    """One stream is plain resample; 16 (the maximum) fit one call."""
    modes = [FLOAT_MIX[k % 4] for k in range(K)]  # no slerp: feats below are not quaternions
    feats = [(int(rng.integers(0, 5)),) for _ in range(K)]
    case = Fuse(rng, "ragged", "float32", "int64", modes, feats=feats, B=5, T_per=3)
    check_case(case)


# ----------------------------------------------------------------------------
# dict streams


def test_dict_equals_list_in_dict_order(rng):
    case = Fuse(rng, "dense", "float32", "float64", FLOAT_MIX)
    check_case(case, as_dict=True)
    streams, x, _ = case.args()
    fused = robocache.fuse(streams, x, modes=case.modes)
    names = ["cam", "joints", "gripper", "force", "orientation"]
    as_dict = dict(zip(names, streams))
    assert_equal(robocache.fuse(as_dict, x, modes=dict(zip(names, case.modes))), fused)
    # reversed insertion order: reversed column blocks
    rev = dict(reversed(list(as_dict.items())))
    got = to_numpy(robocache.fuse(rev, x, modes=dict(zip(names, case.modes))))
    want = separate(list(rev.values()), x, list(reversed(case.modes)))[0]
    assert_equal(got, want, msg="dict order is the concatenation order")


def test_dict_modes_default_to_linear(rng):
    case = Fuse(rng, "dense", "float64", "float64", ["linear", "previous", "linear"],
                feats=[(2,), (3,), (1,)])
    streams, x, _ = case.args()
    named = {"a": streams[0], "b": streams[1], "c": streams[2]}
    out = robocache.fuse(named, x, modes={"b": "previous"})
    assert_equal(out, separate(streams, x, ["linear", "previous", "linear"])[0])


def test_ragged_dict(rng):
    case = Fuse(rng, "ragged", "float16", "float32", ["linear", "nearest"], feats=[(3,), (2,)])
    check_case(case, as_dict=True)


# ----------------------------------------------------------------------------
# shapes and edge cases


def test_layout_columns_and_mask_axis(rng):
    """out[..., column_k:column_k + D_k] is stream k; is_pad[..., k] is stream k's mask. Built
    by hand so that a swapped or transposed layout cannot pass."""
    t_a = np.array([0.0, 1.0, 2.0])           # stream a: D=2
    v_a = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    t_b = np.array([0.5, 1.5])                # stream b: D=3 as [3], only from 0.5 s
    v_b = np.array([[5.0, 6.0, 7.0], [15.0, 16.0, 17.0]])
    x = np.array([0.0, 0.5, 1.25, 3.0])
    out, pad = robocache.fuse([(v_a, t_a), (v_b, t_b)], x, modes=["linear", "previous"],
                              return_mask=True)
    assert out.shape == (4, 5) and pad.shape == (4, 2)
    assert_equal(out, [[0.0, 10.0, 5.0, 6.0, 7.0],
                       [0.5, 10.5, 5.0, 6.0, 7.0],
                       [1.25, 11.25, 5.0, 6.0, 7.0],
                       [2.0, 12.0, 15.0, 16.0, 17.0]])
    assert_equal(pad, [[False, True], [False, False], [False, False], [True, True]])


@pytest.mark.parametrize("form", ["dense", "row", "ragged"])
def test_zero_targets(form, rng):
    case = Fuse(rng, form, "float32", "float64", ["linear", "next"], T_per=0)
    streams, x, index = case.args()
    kw = {"index": index} if index is not None else {}
    out, pad = robocache.fuse(streams, x, modes=case.modes, return_mask=True, **kw)
    lead = (0,) if form == "row" else (3, 0)
    assert out.shape == lead + (3 + 1,) and pad.shape == lead + (2,)


@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_zero_rows(form, rng):
    case = Fuse(rng, form, "float32", "int64", ["linear", "previous"], B=0)
    streams, x, index = case.args()
    kw = {"index": index} if index is not None else {}
    out, pad = robocache.fuse(streams, x, modes=case.modes, return_mask=True, **kw)
    assert out.shape == (0, 10, 4) and pad.shape == (0, 10, 2)


def test_zero_width_stream(rng):
    """A stream with no features still reports its is_pad and takes no columns."""
    case = Fuse(rng, "dense", "float32", "float64", ["linear", "nearest", "linear"],
                feats=[(2,), (0,), (3,)])
    out = check_case(case)
    assert out.shape[-1] == 5


def test_empty_episodes_give_zeros_and_pad(rng):
    """Episode 1 is empty in stream b only: its columns are 0 and is_pad true there, while
    stream a's columns of the same rows are resampled normally."""
    va, ta = np.arange(6.0).reshape(3, 2), np.array([0.0, 1.0, 0.0])
    oa = np.array([0, 2, 3], np.int64)        # episode 0: 2 samples, episode 1: 1 sample
    vb, tb = np.array([[7.0]]), np.array([0.5])
    ob = np.array([0, 1, 1], np.int64)        # episode 1 empty
    x = np.array([[0.5, 2.0], [0.0, 1.0]])
    idx = np.array([0, 1], np.int64)
    out = poisoned((2, 2, 3), "float64", np.empty(0))
    _, pad = robocache.fuse([(va, ta, oa), (vb, tb, ob)], x, index=idx, out=out, return_mask=True)
    assert_equal(out, [[[1.0, 2.0, 7.0], [2.0, 3.0, 7.0]], [[4.0, 5.0, 0.0], [4.0, 5.0, 0.0]]])
    assert_equal(pad, [[[False, False], [True, True]], [[False, True], [True, True]]])


def test_strided_and_permuted_inputs(rng):
    """Sliced values/times/new_times are read through their strides; a permuted image-like
    stream (trailing dims that do not flatten to one stride) is copied once."""
    case = Fuse(rng, "dense", "float32", "float64", ["linear", "nearest", "previous"],
                feats=[(6,), (3, 4), (2,)], B=4)
    streams, x, _ = case.args()
    strided = [
        (np.repeat(streams[0][0], 2, axis=2)[:, :, ::2], np.repeat(streams[0][1], 2, axis=1)[:, ::2]),
        (np.ascontiguousarray(streams[1][0].transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2), streams[1][1]),
        (np.asfortranarray(streams[2][0]), np.asfortranarray(streams[2][1])),
    ]
    assert not strided[1][0].flags.c_contiguous and not strided[0][0].flags.c_contiguous
    xs = np.repeat(x, 3, axis=1)[:, ::3]
    out = robocache.fuse(strided, xs, modes=case.modes)
    assert_equal(out, separate(streams, x, case.modes)[0])


def test_result_independent_of_thread_count(rng):
    case = Fuse(rng, "ragged", "float32", "float64", FLOAT_MIX, B=64, T_per=40, E=30, max_s=200)
    streams, x, index = case.args()
    n = robocache.get_num_threads()
    try:
        robocache.set_num_threads(1)
        one = robocache.fuse(streams, x, modes=case.modes, index=index)
        robocache.set_num_threads(7)
        many = robocache.fuse(streams, x, modes=case.modes, index=index)
    finally:
        robocache.set_num_threads(n)
    assert_equal(many, one)
    assert_equal(one, separate(streams, x, case.modes, index)[0])


def test_tolerance_applies_to_every_stream(rng):
    ta, tb = np.array([0.0, 1.0]), np.array([0.2, 0.4])
    va, vb = np.zeros((2, 1)), np.zeros((2, 1))
    x = np.array([-0.05, 0.15, 0.45])
    _, pad = robocache.fuse([(va, ta), (vb, tb)], x, return_mask=True, tolerance=0.1)
    assert_equal(pad, [[False, True], [False, False], [False, False]])
    # int64 ns times: tolerance stays in seconds
    ns = lambda a: (np.asarray(a) * 1e9).round().astype(np.int64)
    _, pad = robocache.fuse([(va, ns(ta)), (vb, ns(tb))], ns(x), return_mask=True, tolerance=0.1)
    assert_equal(pad, [[False, True], [False, False], [False, False]])


# ----------------------------------------------------------------------------
# real data: EuRoC V1_01 IMU (200 Hz) + camera (20 Hz) onto a 10 Hz timeline


@pytest.mark.parametrize("fw", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_euroc_imu_and_camera_onto_10hz(euroc, fw):
    """Two real streams at 200 Hz and 20 Hz: IMU (gyro, accel) linear, the camera frame number
    nearest, onto a 10 Hz timeline that starts 0.25 s before the recording (padding)."""
    imu_t, imu_v, cam_t = euroc
    frame = np.arange(len(cam_t), dtype=np.float64)[:, None]
    start = max(imu_t[0], cam_t[0]) - 250_000_000
    grid = start + np.arange(0, min(imu_t[-1], cam_t[-1]) - start, 100_000_000, dtype=np.int64)
    assert 500 < len(grid) < 2000
    conv = (lambda a: torch.from_numpy(a)) if fw == "torch" else (lambda a: a)
    streams = {"imu": (conv(imu_v), conv(imu_t)), "camera": (conv(frame), conv(cam_t))}
    out, pad = robocache.fuse(streams, conv(grid), modes={"camera": "nearest"}, return_mask=True)
    out, pad = to_numpy(out), to_numpy(pad)
    assert out.shape == (len(grid), 7) and pad.shape == (len(grid), 2)

    # bit for bit the two separate resamples
    want, want_pad = separate([(imu_v, imu_t), (frame, cam_t)], grid, ["linear", "nearest"])
    assert_equal(out, want)
    assert_equal(pad, want_pad)
    # IMU: numpy.interp on times relative to the first sample (exact in int64)
    rel = lambda a: (a - imu_t[0]).astype(np.float64)
    interp = np.stack([np.interp(rel(grid), rel(imu_t), imu_v[:, d]) for d in range(6)], axis=1)
    assert_close(out[:, :6], interp, rtol=1e-12, atol=1e-12)
    # camera: the nearest frame (ties to the later one), clamped at the ends
    j = np.clip(np.searchsorted(cam_t, grid, side="right") - 1, 0, len(cam_t) - 1)
    j1 = np.minimum(j + 1, len(cam_t) - 1)
    nearest = np.where((cam_t[j1] - grid) <= (grid - cam_t[j]), j1, j)
    nearest[grid < cam_t[0]] = 0
    assert_equal(out[:, 6], nearest.astype(np.float64))
    # padding: only the targets before the recording (0.25 s lead-in at 10 Hz)
    first = max(imu_t[0], cam_t[0])
    assert_equal(pad[:, 0], (grid - imu_t[0]) < -100_000)
    assert_equal(pad[:, 1], (grid - cam_t[0]) < -100_000)
    assert pad[:, 1].sum() >= 2 and not pad[grid >= first].any()


# ----------------------------------------------------------------------------
# bad input: the exception names the stream and argument, and nothing is written


class Base:
    def __init__(self, rng):
        self.a = (rng.standard_normal((2, 6, 3)), np.sort(rng.uniform(0, 1, (2, 6)), axis=1))
        self.b = (rng.standard_normal((2, 9, 2)), np.sort(rng.uniform(0, 1, (2, 9)), axis=1))
        self.x = rng.uniform(-0.1, 1.1, (2, 5))
        off = np.array([0, 4, 4, 10], np.int64)
        self.ra = (rng.standard_normal((10, 3)), np.concatenate([np.sort(rng.uniform(0, 1, 4)),
                                                                np.sort(rng.uniform(0, 1, 6))]), off)
        self.rb = (rng.standard_normal((5, 2)), np.sort(rng.uniform(0, 1, 5)), np.array([0, 2, 5, 5], np.int64))
        self.idx = np.array([0, 2], np.int64)


@pytest.fixture
def base(rng):
    return Base(rng)


def raises(exc, match, *args, **kw):
    with pytest.raises(exc, match=match):
        robocache.fuse(*args, **kw)


def test_mismatched_value_dtypes(base):
    raises(TypeError, r"streams\[1\] values: dtype float32 differs from streams\[0\] values \(float64\)",
           [base.a, (base.b[0].astype(np.float32), base.b[1])], base.x)
    raises(TypeError, r"streams\['force'\] values: dtype int32",
           {"joints": base.a, "force": (base.b[0].astype(np.int32), base.b[1])}, base.x,
           modes="previous")


def test_mismatched_times_dtypes(base):
    raises(TypeError, r"streams\[1\] times: expected the dtype of new_times \(float64\), got float32",
           [base.a, (base.b[0], base.b[1].astype(np.float32))], base.x)
    raises(TypeError, r"new_times: expected float64 or float32 seconds, or int64",
           [base.a], base.x.astype(np.int32))


def test_wrong_shapes(base):
    raises(ValueError, r"streams\[1\] values: shape \[2, 8, 2\] does not start with the shape of its times \[2, 9\]",
           [base.a, (base.b[0][:, :8], base.b[1])], base.x)
    raises(ValueError, r"streams\[1\] times: expected 2 rows \(the rows of new_times\)",
           [base.a, (base.b[0][:1], base.b[1][:1])], base.x)
    raises(ValueError, r"streams\[0\] times: expected \[S\] \(new_times is \[T\]\)", [base.a], base.x[0])
    raises(ValueError, r"streams\[1\] times: expected \[B, S\]",
           [base.a, (base.b[0][0], base.b[1][0])], base.x)
    raises(ValueError, r"new_times: expected \[B, T\] or \[T\]", [base.a], base.x[None])
    raises(ValueError, r"streams\[0\] values: expected at least 2 dims", [(base.a[0][:, :, 0].ravel()[:2], base.a[1])], base.x)


def test_too_many_and_no_streams(base):
    raises(ValueError, r"streams: 17 streams, at most 16", [base.a] * 17, base.x)
    raises(ValueError, r"streams: 17 streams, at most 16", {str(k): base.a for k in range(17)}, base.x)
    raises(ValueError, r"streams: expected at least one stream", [], base.x)
    raises(ValueError, r"streams: expected at least one stream", {}, base.x)


def test_bad_stream_containers(base):
    raises(TypeError, r"streams: expected a list of \(values, times\) pairs or a dict", base.a[0], base.x)
    raises(TypeError, r"streams\[1\]: expected a \(values, times\) pair", [base.a, base.b[0]], base.x)
    raises(TypeError, r"streams\['b'\]: expected a \(values, times\) pair .* of another length",
           {"a": base.a, "b": (base.b[0],)}, base.x)
    raises(ValueError, r"streams\[1\]: a triple, but streams\[0\] is a pair",
           [base.a, base.ra], base.x)


def test_bad_modes(base):
    raises(ValueError, r"modes: expected 'linear', 'nearest', 'previous', 'next' or 'slerp', got 'cubic'",
           [base.a, base.b], base.x, modes="cubic")
    raises(ValueError, r"modes\[1\]: expected 'linear'.* got 'lerp'", [base.a, base.b], base.x,
           modes=["linear", "lerp"])
    raises(ValueError, r"modes: expected 2 modes \(one per stream\), got 3", [base.a, base.b], base.x,
           modes=["linear"] * 3)
    raises(ValueError, r"modes: expected 2 modes \(one per stream\), got 1", [base.a, base.b], base.x,
           modes=("linear",))
    raises(TypeError, r"modes\[0\]: expected a str", [base.a, base.b], base.x, modes=[1, "linear"])
    raises(TypeError, r"modes: expected None, a str, a list", [base.a], base.x, modes=3)
    raises(ValueError, r"modes: 'c' is not the name of a stream", {"a": base.a, "b": base.b}, base.x,
           modes={"c": "linear"})
    raises(ValueError, r"modes for streams\['b'\]: expected 'linear'", {"a": base.a, "b": base.b},
           base.x, modes={"b": "bogus"})
    raises(TypeError, r"modes: a dict of modes needs streams given as a dict", [base.a], base.x,
           modes={0: "linear"})


def test_mode_dtype_rules(base):
    ints = (base.a[0].astype(np.int16), base.a[1])
    raises(TypeError, r"streams\[1\] values: mode 'linear' needs a floating dtype, got int16",
           [(base.b[0].astype(np.int16), base.b[1]), ints], base.x, modes=["previous", "linear"])
    raises(ValueError, r"streams\[0\] values: mode 'slerp' needs quaternions .* got shape \[2, 6, 3\]",
           [base.a], base.x, modes="slerp")


def test_ragged_arguments(base):
    raises(ValueError, r"index: ragged streams .* need index \[B\]", [base.ra, base.rb], base.x)
    raises(ValueError, r"index: only for ragged streams", [base.a], base.x, index=base.idx)
    raises(ValueError, r"streams\[1\] offsets: expected \[4\] like streams\[0\] offsets .* got \[3\]",
           [base.ra, (base.rb[0], base.rb[1], base.rb[2][:3].copy())], base.x, index=base.idx)
    raises(TypeError, r"streams\[1\] offsets: expected dtype int64, got int32",
           [base.ra, (base.rb[0], base.rb[1], base.rb[2].astype(np.int32))], base.x, index=base.idx)
    raises(TypeError, r"index: expected dtype int64", [base.ra], base.x, index=base.idx.astype(np.int32))
    raises(ValueError, r"new_times: expected 3 rows \(len\(index\)\)", [base.ra], base.x,
           index=np.array([0, 1, 2], np.int64))
    raises(ValueError, r"streams\[0\] times: expected \[N\] for a ragged stream",
           [(base.a[0], base.a[1], base.ra[2])], base.x, index=base.idx)


def test_bad_content_names_the_stream(base):
    t = base.b[1].copy()
    t[1, 4] = t[1, 3] - 0.5
    raises(ValueError, r"streams\[1\] times must be non-decreasing per row: row 1 decreases at sample 4",
           [base.a, (base.b[0], t)], base.x)
    t[1, 4] = np.nan
    raises(ValueError, r"streams\['imu'\] times must be finite: row 1 has NaN/inf at sample 4",
           {"cam": base.a, "imu": (base.b[0], t)}, base.x)
    off = base.rb[2].copy()
    off[1] = 6
    raises(ValueError, r"streams\[1\] offsets must start at 0, never decrease and end at N=5",
           [base.ra, (base.rb[0], base.rb[1], off)], base.x, index=base.idx)
    raises(ValueError, r"index\[1\] is outside \[0, 3\)", [base.ra, base.rb], base.x,
           index=np.array([0, 3], np.int64))


def test_bad_out(base):
    raises(ValueError, r"out: expected shape \[2, 5, 5\], got \[2, 5, 3\]", [base.a, base.b], base.x,
           out=np.empty((2, 5, 3)))
    raises(TypeError, r"out: expected dtype float64, got float32", [base.a, base.b], base.x,
           out=np.empty((2, 5, 5), np.float32))
    raises(ValueError, r"out: must be C-contiguous", [base.a, base.b], base.x,
           out=np.empty((2, 5, 10))[:, :, ::2])
    ro = np.empty((2, 5, 5))
    ro.flags.writeable = False
    raises((ValueError, BufferError), r"\bout\b", [base.a, base.b], base.x, out=ro)


def test_bad_keywords_and_tolerance(base):
    raises(TypeError, r"unexpected keyword argument 'mode'", [base.a], base.x, mode="linear")
    raises(TypeError, r"missing required argument 'new_times'", [base.a])
    raises(TypeError, r"takes 2 positional arguments", [base.a], base.x, None)
    raises(ValueError, r"tolerance: expected a number >= 0", [base.a], base.x, tolerance=-1.0)


@needs_torch
def test_mixed_frameworks_rejected(base):
    raises(TypeError, r"streams\[1\] values is a torch array but streams\[0\] values is a numpy array",
           [base.a, (torch.from_numpy(base.b[0]), base.b[1])], base.x)
    raises(TypeError, r"new_times is a torch array", [base.a], torch.from_numpy(base.x))


def test_bad_call_writes_nothing_and_next_call_works(base):
    out = poisoned((2, 5, 5), "float64", np.empty(0))
    keep = out.copy()
    t = base.b[1].copy()
    t[0, 2] = np.inf
    with pytest.raises(ValueError):
        robocache.fuse([base.a, (base.b[0], t)], base.x, out=out)
    assert out.tobytes() == keep.tobytes(), "a rejected call wrote into out"
    robocache.fuse([base.a, base.b], base.x, out=out)
    assert_equal(out, separate([base.a, base.b], base.x, ["linear", "linear"])[0])


# ----------------------------------------------------------------------------
# references: nothing leaks on success or failure


@pytest.mark.parametrize("bad", [False, True])
def test_refcounts_stable(base, bad):
    streams = {"a": base.ra, "b": base.rb}
    objs = [*base.ra, *base.rb, base.x, base.idx, streams]
    x = base.x
    kw = {"index": base.idx if not bad else np.array([0, 9], np.int64), "modes": {"a": "nearest"},
          "return_mask": True}
    def call():
        if bad:  # the bad index is reported on every call
            with pytest.raises(ValueError, match="index"):
                robocache.fuse(streams, x, **kw)
        else:
            robocache.fuse(streams, x, **kw)

    for _ in range(3):  # warm caches (exchange-API lookups, interned names)
        call()
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(50):
        call()
    assert [sys.getrefcount(o) for o in objs] == before
