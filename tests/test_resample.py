"""robocache.resample on the CPU, numpy arrays and torch CPU tensors, against
tests/reference.py (which follows docs/resample.md) and numpy.interp.

Every test draws fresh random inputs (see the `rng` fixture for the seed) and
writes into outputs poisoned with 0xFF bytes, so unwritten elements show.
"""

from __future__ import annotations


import numpy as np
import pytest

import robocache
from conftest import run_in_threads
from reference import (ALL_DTYPES, COPY_MODES, FLOAT_MODES, SLERP_ATOL, TIME_DTYPES, assert_close,
                       assert_equal, dtype_name, interp_ref, modes_for, poisoned, resample_ref, snapshot, to_numpy)

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=needs_torch)]
EPOCH_NS = 1_700_000_000_000_000_000


def as_fw(a, fw):
    """A numpy array in framework fw (CPU); None stays None."""
    if a is None or fw == "numpy":
        return a
    return torch.from_numpy(np.ascontiguousarray(a))


def matrix():
    for fw in ("numpy", "torch"):
        for vd in ALL_DTYPES:
            if fw == "numpy" and vd == "bfloat16":  # numpy has no bfloat16
                continue
            for mode in modes_for(vd):
                for td in TIME_DTYPES:
                    yield pytest.param(fw, vd, mode, td, id=f"{fw}-{vd}-{mode}-{td}",
                                       marks=[needs_torch] if fw == "torch" else [])


# ----------------------------------------------------------------------------
# every dtype x mode x times dtype, dense (with lengths) and ragged


@pytest.mark.parametrize("fw,vdtype,mode,tdtype", list(matrix()))
def test_dtype_mode_matrix(fw, vdtype, mode, tdtype, make_case):
    make_case("dense", vdtype, tdtype, mode, B=6, S=20, T=24, lengths=True).check(fw)
    make_case("ragged", vdtype, tdtype, mode, B=8, T=12, episodes=12, max_len=30).check(fw)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["dense", "row", "ragged"])
def test_linear_matches_numpy_interp(fw, form, vdtype, tdtype, make_case):
    """An independent check of the linear formula: numpy.interp per row and feature."""
    case = make_case(form, vdtype, tdtype, "linear", B=6, S=40, T=50, dup=0.0)
    args = case.inputs(fw)
    out = robocache.resample(args["values"], args["times"], args["new_times"], **case.kwargs(args))
    want = interp_ref(**args)
    if vdtype == "float64":
        # float32 times round w to 24 bits; |v| < ~20 here
        atol = 2e-6 if tdtype == "float32" else 1e-12
        assert_close(out, want, rtol=1e-12, atol=atol, msg=case.msg)
    else:
        assert_close(out, want, rtol=1e-6, atol=1e-5, msg=case.msg)


# ----------------------------------------------------------------------------
# hand-computed answers: times with a duplicate at 1.0, targets before, on,
# between, tied and after. Every number is exact in binary.

HAND_T = [0.0, 1.0, 1.0, 3.0, 4.0]
HAND_V = [0, 10, 20, 40, 80]
HAND_X = [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5, 4.0, 5.0]
HAND = {
    "previous": [0, 0, 0, 20, 20, 20, 20, 40, 40, 40, 80, 80],
    "next": [0, 0, 10, 20, 40, 40, 40, 40, 80, 80, 80, 80],
    "nearest": [0, 0, 0, 20, 20, 20, 40, 40, 40, 40, 80, 80],  # 0.5, 2.0, 3.5 are ties -> earlier (LeRobot's)
    "linear": [0, 0, 5, 20, 25, 30, 35, 40, 50, 60, 80, 80],
}
HAND_PAD = [True] + [False] * 10 + [True]


def hand_inputs(tdtype):
    t, x = np.array(HAND_T), np.array(HAND_X)
    if tdtype == "int64":  # whole seconds at epoch scale in ns: every target is an integer
        return (EPOCH_NS + (t * 1e9).astype(np.int64)), (EPOCH_NS + (x * 1e9).astype(np.int64))
    return t.astype(tdtype), x.astype(tdtype)


def test_reference_matches_hand_answers():
    for tdtype in TIME_DTYPES:
        t, x = hand_inputs(tdtype)
        for mode, want in HAND.items():
            out, pad = resample_ref(np.array(HAND_V, np.float64), t, x, mode)
            assert out.tolist() == want, (mode, tdtype)
            assert pad.tolist() == HAND_PAD


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype,mode", [(vd, m) for vd in ("float64", "float32", "float16", "int32", "uint8")
                                         for m in HAND if m in modes_for(vd)])
def test_hand_answers(fw, vdtype, mode, tdtype):
    t, x = hand_inputs(tdtype)
    v = np.array(HAND_V, vdtype)
    out, pad = robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), mode=mode, return_mask=True)
    assert dtype_name(out) == vdtype
    assert to_numpy(out).tolist() == HAND[mode]
    assert to_numpy(pad).tolist() == HAND_PAD
    # the same row batched twice, and as a 2-sample-feature signal
    v2 = np.stack([v, v[::-1]], axis=-1)
    out2 = robocache.resample(as_fw(np.stack([v2, v2]), fw), as_fw(np.stack([t, t]), fw),
                              as_fw(np.stack([x, x]), fw), mode=mode)
    assert tuple(out2.shape) == (2, len(HAND_X), 2)
    assert to_numpy(out2)[:, :, 0].tolist() == [HAND[mode]] * 2


# ----------------------------------------------------------------------------
# shapes and forms


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("feat", [(), (3,), (2, 3), (4, 5, 3)], ids=lambda f: "x".join(map(str, f)) or "scalar")
@pytest.mark.parametrize("form", ["row", "dense", "ragged"])
def test_trailing_dims(fw, form, feat, make_case):
    case = make_case(form, "float32", "float64", "linear", B=3, S=15, T=9, feat=feat)
    out = case.check(fw)
    T = case.new_times.shape[-1]
    lead = (T,) if form == "row" else (case.new_times.shape[0], T)
    assert tuple(out.shape) == lead + feat


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", COPY_MODES)
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_images_uint8(fw, form, mode, make_case):
    """[S, H, W, C] uint8 frames picked by time, the loader's video case."""
    make_case(form, "uint8", "float64", mode, B=3, S=8, T=6, feat=(6, 5, 3), episodes=5, max_len=8).check(fw)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", ["linear", "previous", "nearest", "slerp"])
def test_full_lengths_equal_no_lengths(fw, mode, make_case):
    case = make_case("dense", "float32", "float64", mode, B=4, S=10, T=12)
    args = case.inputs(fw)
    v, t, x = args["values"], args["times"], args["new_times"]
    full = as_fw(np.full(4, 10, np.int64), fw)
    a = robocache.resample(v, t, x, mode=mode)
    b = robocache.resample(v, t, x, mode=mode, lengths=full)
    assert_equal(b, to_numpy(a), msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype,mode,tdtype", [("float32", "linear", "float64"), ("float32", "slerp", "float64"),
                                                ("int16", "previous", "float32"), ("float64", "nearest", "int64"),
                                                ("bool", "next", "int64"), ("float16", "linear", "int64")])
def test_ragged_many_episodes(fw, vdtype, mode, tdtype, make_case):
    """The loader's form: 300 episodes of 0..500 samples back to back, rows
    picking random episodes (empty and one-sample ones included)."""
    case = make_case("ragged", vdtype, tdtype, mode, B=200, T=16, episodes=300, max_len=500)
    n = np.diff(case.offsets)
    assert (n[case.index] == 0).any() and (n[case.index] == 1).any()
    case.check(fw)


# ----------------------------------------------------------------------------
# edge cases


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("int8", "nearest"), ("float64", "slerp")])
@pytest.mark.parametrize("form,sizes", [
    ("dense", dict(B=0)), ("dense", dict(T=0)), ("dense", dict(S=0)), ("dense", dict(B=0, S=0, T=0)),
    ("row", dict(S=0)), ("row", dict(T=0)), ("row", dict(S=0, T=0)),
    ("ragged", dict(B=0)), ("ragged", dict(T=0)), ("ragged", dict(max_len=0)), ("ragged", dict(episodes=1, max_len=0)),
], ids=lambda p: p if isinstance(p, str) else ",".join(f"{k}={v}" for k, v in p.items()))
def test_zero_sizes(fw, form, sizes, vdtype, mode, make_case):
    out = make_case(form, vdtype, "float64", mode, **sizes).check(fw)
    if sizes.get("S") == 0 or sizes.get("max_len") == 0:
        assert not to_numpy(out).any(), "rows without samples must give zeros"


@pytest.mark.parametrize("fw,vdtype", [pytest.param(fw, vd, marks=[needs_torch] if fw == "torch" else [])
                                       for fw in ("numpy", "torch") for vd in ALL_DTYPES
                                       if not (fw == "numpy" and vd == "bfloat16")])
def test_empty_rows_give_zeros_and_pad(fw, vdtype, make_case):
    mode = "previous"
    case = make_case("dense", vdtype, "float64", mode, B=5, S=7, T=6)
    case.lengths = np.array([0, 7, 0, 1, 3], np.int64)
    args = case.inputs(fw)
    buf = poisoned(case.new_times.shape + (3,), vdtype, args["values"])
    out, pad = robocache.resample(args["values"], args["times"], args["new_times"], mode=mode,
                                  lengths=args["lengths"], out=buf, return_mask=True)
    o, p = to_numpy(out), to_numpy(pad)
    for b in (0, 2):
        assert np.ascontiguousarray(o[b]).view(np.uint8).tolist() == np.zeros_like(o[b]).view(np.uint8).tolist(), \
            f"row {b} (no samples) must be all zero bytes, {case.msg}"
        assert p[b].all()
    assert_equal(out, case.reference()[0], msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_one_sample_rows(fw, mode, tdtype, make_case):
    """A row with one sample returns that sample everywhere (slerp: normalized)."""
    case = make_case("dense", "float64", tdtype, mode, B=4, S=1, T=10)
    out = to_numpy(case.check(fw))
    want = np.broadcast_to(case.values[:, :1], out.shape)
    if mode == "slerp":
        assert_close(out, want, atol=1e-12, msg=case.msg)
    else:
        assert_equal(out, want, msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_many_duplicate_timestamps(fw, mode, tdtype, make_case):
    """Half the timestamps repeat: no NaN, and the later sample of a run wins."""
    case = make_case("dense", "float32", tdtype, mode, B=6, S=30, T=40, dup=0.5)
    out = to_numpy(case.check(fw))
    assert np.isfinite(out).all()


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_all_timestamps_equal(fw, mode):
    q = np.array([[0, 0, 0, 1], [0, 1, 0, 0], [0.6, 0, 0, 0.8]], np.float64)
    v = q if mode == "slerp" else np.array([[1.0], [2.0], [3.0]])
    t = np.array([5.0, 5.0, 5.0])
    x = np.array([4.0, 5.0, 6.0, 5.0 - 1e-9])
    out = to_numpy(robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), mode=mode))
    assert np.isfinite(out).all()
    want = np.stack([v[0], v[2], v[2], v[0]])  # before the run: first; at or after it: the last
    assert_close(out, want, atol=1e-15)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype", ["float64", "float32", "float16", "int64", "bool"])
def test_targets_on_samples_return_samples(fw, vdtype, tdtype, make_case):
    """Without duplicates, a target equal to t[i] gives v[i] exactly in every mode."""
    case = make_case("row", vdtype, tdtype, "previous", S=30, dup=0.0)
    perm = np.random.default_rng(case.seed).permutation(30)
    for mode in modes_for(vdtype):
        if mode == "slerp":
            continue
        out = robocache.resample(as_fw(case.values, fw), as_fw(case.times, fw), as_fw(case.times[perm], fw),
                                 mode=mode)
        assert_equal(out, case.values[perm], msg=f"{mode} {case.msg}")


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
def test_nearest_ties_go_to_earlier_sample(fw, tdtype):
    """LeRobot picks the first of equally near frames (argmin); robocache's one rule for every kind."""
    t = np.array([0, 2, 4, 6], np.float64)
    x = np.array([1, 3, 5, 0.5, 5.5])
    if tdtype == "int64":
        t, x = (EPOCH_NS + (t * 1e9).astype(np.int64)), (EPOCH_NS + (x * 1e9).astype(np.int64))
    v = np.array([10, 20, 30, 40], np.int32)
    out = robocache.resample(as_fw(v, fw), as_fw(t.astype(tdtype), fw), as_fw(x.astype(tdtype), fw), mode="nearest")
    assert to_numpy(out).tolist() == [10, 20, 30, 10, 40]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_outside_span_takes_edge_values(fw, mode, make_case):
    case = make_case("dense", "float64", "float64", mode, B=3, S=12, T=4)
    x = np.stack([case.times[:, 0] - 100, case.times[:, 0] - 1e-9, case.times[:, -1] + 1e-9,
                  case.times[:, -1] + 1e3], axis=1)
    out = to_numpy(robocache.resample(as_fw(case.values, fw), as_fw(case.times, fw), as_fw(x, fw), mode=mode))
    first, last = case.values[:, 0], case.values[:, -1]
    want = np.stack([first, first, last, last], axis=1)
    if mode == "slerp":
        want = want / np.linalg.norm(want, axis=-1, keepdims=True)
        assert_close(out, want, atol=1e-12, msg=case.msg)
    else:
        assert_equal(out, want, msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_new_times_need_not_be_sorted(fw, make_case):
    case = make_case("dense", "float32", "float64", "linear", B=3, S=20, T=30)
    args = case.inputs(fw)
    a = to_numpy(robocache.resample(args["values"], args["times"], args["new_times"]))
    rev = as_fw(np.ascontiguousarray(case.new_times[:, ::-1]), fw)
    b = to_numpy(robocache.resample(args["values"], args["times"], rev))
    assert_equal(b, a[:, ::-1], msg=case.msg)


# ----------------------------------------------------------------------------
# is_pad and tolerance


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_return_mask_false_returns_only_out(fw, make_case):
    args = make_case("dense").inputs(fw)
    out = robocache.resample(args["values"], args["times"], args["new_times"])
    assert not isinstance(out, tuple)
    buf = poisoned(out.shape, "float32", args["values"])
    assert robocache.resample(args["values"], args["times"], args["new_times"], out=buf) is buf


# (targets, tolerance, expected is_pad) for times [1.0, 2.0]; dyadic numbers
# so the boundary is exact whatever order an implementation subtracts in.
FLOAT_PAD_CASES = [
    ([0.75 - 2**-20, 0.75, 1.0, 1.5, 2.0, 2.25, 2.25 + 2**-20], 0.25, [1, 0, 0, 0, 0, 0, 1]),
    ([1 - 2**-20, 1.0, 2.0, 2 + 2**-20], 0.0, [1, 0, 0, 1]),
    ([1 - 5e-5, 1 - 2e-4, 2 + 5e-5, 2 + 2e-4, -1e9, 1e9], None, [0, 1, 0, 1, 1, 1]),  # default 1e-4 s
]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", ["float64", "float32"])
@pytest.mark.parametrize("targets,tol,want", FLOAT_PAD_CASES)
def test_is_pad_tolerance_float_times(fw, tdtype, targets, tol, want):
    t = np.array([1.0, 1.5, 2.0], tdtype)
    x = np.array(targets, tdtype)
    v = np.array([1.0, 2.0, 3.0])
    kw = {} if tol is None else {"tolerance": tol}
    out, pad = robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), return_mask=True, **kw)
    assert to_numpy(pad).tolist() == [bool(w) for w in want]
    # outside or not, the values are numpy.interp's edge values
    assert_equal(out, np.interp(x.astype(np.float64), t.astype(np.float64), v))


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tol,tol_ns", [(1e-4, 100_000), (2e-3, 2_000_000), (0.0, 0), (1.0, 1_000_000_000)])
def test_is_pad_tolerance_int64_times(fw, tol, tol_ns):
    """tolerance is seconds, scaled by 1e9 for int64 ns; at epoch scale (> 2**53)
    the boundary must be exact to the nanosecond, which float64 cannot do."""
    t = EPOCH_NS + np.array([0, 500_000_000, 1_000_000_000], np.int64)
    lo, hi = int(t[0]), int(t[-1])
    x = np.array([lo - tol_ns - 1, lo - tol_ns, lo, hi, hi + tol_ns, hi + tol_ns + 1], np.int64)
    v = np.array([1.0, 2.0, 3.0])
    out, pad = robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), tolerance=tol, return_mask=True)
    assert to_numpy(pad).tolist() == [True, False, False, False, False, True]
    assert to_numpy(out).tolist() == [1.0, 1.0, 1.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("tol", [0.0, 1e-3, 0.05])
def test_is_pad_random(fw, tdtype, tol, make_case):
    make_case("dense", "float32", tdtype, "nearest", B=6, S=15, T=40, lengths=True, tolerance=tol).check(fw)
    make_case("ragged", "float32", tdtype, "linear", B=6, T=20, tolerance=tol).check(fw)


# ----------------------------------------------------------------------------
# strides: views are read through their strides (or copied once), never
# misread. The reference runs on contiguous copies.


def place(a, layout):
    """A view with the contents of `a` and the given memory layout."""
    a = np.asarray(a)
    if a.ndim == 0 or layout == "contiguous":
        return a
    if layout == "step":  # every other element along every axis
        buf = np.empty(tuple(2 * n for n in a.shape), a.dtype)
        view = buf[tuple(slice(None, None, 2) for _ in a.shape)]
    elif layout == "reversed":  # negative strides along the first axis
        buf = np.empty(a.shape, a.dtype)
        view = buf[::-1]
    elif layout == "fortran":  # reversed axis order: features before samples in memory
        view = np.empty(a.shape, a.dtype, order="F")
    elif layout == "offset":  # not at the start of its allocation
        buf = np.empty(a.size * a.itemsize + a.itemsize, np.uint8)
        view = buf[a.itemsize:].view(a.dtype).reshape(a.shape)
    else:
        raise ValueError(layout)
    view[...] = a[::-1] if layout == "reversed" else a
    if layout == "reversed":
        view = view[::-1]  # back to a's order, with negative strides
    assert np.array_equal(view, a, equal_nan=a.dtype.kind == "f")
    return view


@pytest.mark.parametrize("layout", ["step", "reversed", "fortran", "offset"])
@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("float64", "slerp"), ("int16", "nearest"),
                                         ("uint8", "previous")])
@pytest.mark.parametrize("form", ["dense", "row", "ragged"])
def test_strided_numpy_inputs(form, vdtype, mode, layout, make_case):
    feat = (2, 4) if mode == "slerp" else (3, 2)
    case = make_case(form, vdtype, "float64", mode, B=4, S=12, T=9, feat=feat, lengths=form == "dense")
    args = case.inputs("numpy")
    ref, ref_pad = case.reference()
    views = {k: (None if a is None else place(a, layout)) for k, a in args.items()}
    before = snapshot(views)
    out, pad = robocache.resample(views["values"], views["times"], views["new_times"], return_mask=True,
                                  **case.kwargs(views))
    case.assert_matches(out, ref, views["values"])
    assert_equal(pad, ref_pad)
    assert snapshot(views) == before


@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("uint8", "nearest")])
def test_images_with_unflattenable_strides(vdtype, mode, make_case):
    """[B, S, H, W, C] frames cropped in W: the trailing dims cannot be one
    strided dim, so the data must be copied or walked correctly."""
    case = make_case("dense", vdtype, "float64", mode, B=3, S=6, T=5, feat=(4, 10, 3))
    crop = case.values[:, :, :, 1:9:2]
    ref, _ = resample_ref(np.ascontiguousarray(crop), case.times, case.new_times, mode)
    out = robocache.resample(crop, case.times, case.new_times, mode=mode)
    assert_equal(out, ref, msg=case.msg)
    if torch is not None:
        tcrop = torch.from_numpy(case.values)[:, :, :, 1:9:2]
        out = robocache.resample(tcrop, torch.from_numpy(case.times), torch.from_numpy(case.new_times), mode=mode)
        assert_equal(out, ref, msg=case.msg)


@needs_torch
@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("bfloat16", "linear"), ("float64", "slerp"),
                                         ("int32", "next")])
def test_strided_torch_inputs(vdtype, mode, make_case):
    # .t(): one row [S, D] that is the transpose of a [D, S] tensor
    case = make_case("row", vdtype, "float64", mode, S=20, T=11, feat=(4,))
    a = case.inputs("torch")
    vt = a["values"].t().contiguous().t()
    assert not vt.is_contiguous()
    ref, _ = case.reference()
    case.assert_matches(robocache.resample(vt, a["times"], a["new_times"], mode=mode), ref, a["values"])

    # .expand: one row of times/values/targets shared by 5 rows (stride 0)
    case = make_case("dense", vdtype, "float32", mode, B=1, S=20, T=11, feat=(4,))
    a = case.inputs("torch")
    v, t, x = a["values"].expand(5, -1, -1), a["times"].expand(5, -1), a["new_times"].expand(5, -1)
    assert v.stride(0) == 0 and t.stride(0) == 0
    ref, _ = resample_ref(v.contiguous(), t.contiguous(), x.contiguous(), mode)
    case.assert_matches(robocache.resample(v, t, x, mode=mode), ref, a["values"])

    # slices with steps, and samples/features transposed in memory
    case = make_case("dense", vdtype, "int64", mode, B=3, S=30, T=20, feat=(4,))
    a = case.inputs("torch")
    v = a["values"].transpose(1, 2).contiguous().transpose(1, 2)[:, ::3]
    t, x = a["times"][:, ::3], a["new_times"][::2, ::2]
    v, t = v[::2], t[::2]
    ref, _ = resample_ref(v.contiguous(), t.contiguous(), x.contiguous(), mode)
    case.assert_matches(robocache.resample(v, t, x, mode=mode), ref, a["values"])


# ----------------------------------------------------------------------------
# precision


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype", ["float64", "float32"])
def test_epoch_scale_float64_times(fw, vdtype, rng):
    """Absolute epoch seconds (1.7e9 s, 1 kHz) keep sub-millisecond weights:
    float64 times must never pass through float32 (whose step there is 128 s)."""
    S = 2000
    t0 = 1.7e9 + rng.uniform(0, 1e6)
    t = t0 + np.arange(S) * 1e-3
    x = rng.permutation((t[:-1] + t[1:]) / 2)
    v = (rng.standard_normal((S, 3)) * 5).astype(vdtype)
    out = to_numpy(robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw)))
    ref, _ = resample_ref(v, t, x, "linear")
    assert_equal(out, ref, msg=f"seed={rng.seed}")
    want = interp_ref(v, t - t0, x - t0)  # the same times relative to t0: exact differences
    rtol, atol = (1e-9, 1e-9) if vdtype == "float64" else (1e-6, 1e-5)
    assert_close(out, want, rtol=rtol, atol=atol, msg=f"seed={rng.seed}")
    # and it is a midpoint: w = 0.5 up to the 2.4e-7 s spacing of float64 at 1.7e9
    j = np.searchsorted(t, x) - 1
    mid = (v[j].astype(np.float64) + v[j + 1]) / 2
    assert_close(out, mid, atol=3e-4 * np.abs(v[j + 1] - v[j].astype(np.float64)).max() + atol)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_int64_weight_uses_exact_nanoseconds(fw):
    """t = [T0, T0 + 3 ns], x = T0 + 1 ns at T0 > 2**60: w must be exactly 1/3,
    which float64 times (step 256 ns there) could not give."""
    T0 = 2**60 + 12345
    t = np.array([T0, T0 + 3], np.int64)
    x = np.array([T0 + 1, T0 + 2], np.int64)
    v = np.array([0.0, 3.0])
    out = to_numpy(robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw)))
    assert out.tolist() == [0.0 + (1 / 3) * 3.0, 0.0 + (2 / 3) * 3.0]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_float32_times_weight_in_float32(fw):
    """float32 times: w = (x - t0) / (t1 - t0) rounded to float32, then the
    lerp in float64 for float64 values (so 1/3 is float32(1/3), not 1/3)."""
    t = np.array([0.0, 3.0], np.float32)
    x = np.array([1.0], np.float32)
    v = np.array([0.0, 1.0])
    out = to_numpy(robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw)))
    assert out.tolist() == [float(np.float32(1) / np.float32(3))]


# ----------------------------------------------------------------------------
# slerp


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("vdtype", ["float64", "float32"])
def test_slerp_known_rotations(fw, vdtype):
    """Halfway between identity and 90 deg about z is 45 deg about z, whichever
    sign the second quaternion has (shortest arc)."""
    s, c = np.sin(np.pi / 4), np.cos(np.pi / 4)
    t, x = np.array([0.0, 1.0]), np.array([0.5, 0.25])
    want = [[0, 0, np.sin(np.pi / 8), np.cos(np.pi / 8)], [0, 0, np.sin(np.pi / 16), np.cos(np.pi / 16)]]
    for q1 in ([0, 0, s, c], [0, 0, -s, -c]):
        v = np.array([[0, 0, 0, 1], q1], vdtype)
        out = robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), mode="slerp")
        assert_close(out, want, atol=SLERP_ATOL[vdtype])


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype", ["float64", "float32", "float16"])
def test_slerp_sign_flips_give_same_rotation(fw, vdtype, tdtype, make_case, rng):
    """q and -q are the same rotation: flipping any input samples may flip
    output signs but never changes the rotation."""
    case = make_case("dense", vdtype, tdtype, "slerp", B=4, S=20, T=30, feat=(2, 4))
    a = case.inputs(fw)
    out1 = to_numpy(robocache.resample(a["values"], a["times"], a["new_times"], mode="slerp")).astype(np.float64)
    flip = rng.random(case.values.shape[:-1] + (1,)) < 0.5
    flipped = np.where(flip, -case.values, case.values)
    out2 = to_numpy(robocache.resample(as_fw(flipped, fw), a["times"], a["new_times"], mode="slerp"))
    dots = np.abs(np.sum(out1 * out2.astype(np.float64), axis=-1))
    assert_close(dots, np.ones_like(dots), atol=4 * SLERP_ATOL[vdtype], msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_slerp_normalizes_edge_and_single_samples(fw):
    v = np.array([[0, 0, 0, 2.0], [0, 3.0, 0, 0]])
    t, x = np.array([0.0, 1.0]), np.array([-1.0, 0.0, 1.0, 2.0])
    out = to_numpy(robocache.resample(as_fw(v, fw), as_fw(t, fw), as_fw(x, fw), mode="slerp"))
    assert_close(out, [[0, 0, 0, 1], [0, 0, 0, 1], [0, 1, 0, 0], [0, 1, 0, 0]], atol=1e-12)
    out = to_numpy(robocache.resample(as_fw(v[:1], fw), as_fw(t[:1], fw), as_fw(x, fw), mode="slerp"))
    assert_close(out, [[0, 0, 0, 1]] * 4, atol=1e-12)


# ----------------------------------------------------------------------------
# API behaviour


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_out_is_written_in_place(fw, make_case):
    case = make_case("ragged", "float64", "int64", "linear", B=5, T=7)
    a = case.inputs(fw)
    buf = poisoned((5, 7, 3), "float64", a["values"])
    alias = buf[:]  # a second view on the same memory sees the result
    res = robocache.resample(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"], out=buf)
    assert res is buf
    assert_equal(alias, case.reference()[0], msg=case.msg)
    # and the fresh output never aliases an input
    out = robocache.resample(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    for k in ("values", "times", "new_times"):
        assert not np.shares_memory(to_numpy(out), to_numpy(a[k]))


def test_mixed_numpy_and_torch_arguments_rejected(make_case):
    """DESIGN: arrays from different frameworks are rejected, naming the argument; the
    same framework through another type (nn.Parameter) is fine."""
    if torch is None:
        pytest.skip("torch is not installed")
    case = make_case("ragged", "float32", "float64", "linear", B=6, T=9)
    ref, _ = case.reference()
    n, t = case.inputs("numpy"), case.inputs("torch")
    with pytest.raises(TypeError, match=r"times is a torch array but values is a numpy array"):
        robocache.resample(n["values"], t["times"], n["new_times"], offsets=n["offsets"], index=n["index"])
    with pytest.raises(TypeError, match=r"index is a numpy array but values is a torch array"):
        robocache.resample(t["values"], t["times"], t["new_times"], offsets=t["offsets"], index=n["index"])
    param = torch.nn.Parameter(t["values"], requires_grad=False)
    out = robocache.resample(param, t["times"], t["new_times"], offsets=t["offsets"], index=t["index"])
    assert_equal(out, ref)


def test_read_only_numpy_inputs(make_case):
    """Memory-mapped or frozen arrays are inputs users have; they must work."""
    case = make_case("ragged", "float32", "int64", "nearest", B=5, T=8)
    args = case.inputs("numpy")
    for a in args.values():
        if a is not None:
            a.flags.writeable = False
    out = robocache.resample(args["values"], args["times"], args["new_times"], **case.kwargs(args))
    assert_equal(out, case.reference()[0], msg=case.msg)


@pytest.mark.parametrize("check", [None, True, False])
def test_check_argument_accepted_on_cpu(check, make_case):
    case = make_case("dense", "float32", "float64", "linear")
    a = case.inputs("numpy")
    out = robocache.resample(a["values"], a["times"], a["new_times"], check=check)
    assert_equal(out, case.reference()[0], msg=case.msg)


def test_build_info_and_error_type():
    info = robocache.build_info()
    assert {"version", "cuda", "archs", "devices"} <= set(info)
    assert isinstance(info["cuda"], bool) and isinstance(info["archs"], str) and isinstance(info["devices"], list)
    assert issubclass(robocache.CudaError, RuntimeError)


@pytest.fixture
def restore_threads():
    n = robocache.get_num_threads()
    yield
    robocache.set_num_threads(n)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_thread_count_does_not_change_results(fw, make_case, restore_threads):
    case = make_case("ragged", "float32", "float64", "linear", B=256, T=64, episodes=50, max_len=200)
    a = case.inputs(fw)
    results = []
    for n in (1, 2, 4):
        robocache.set_num_threads(n)
        assert robocache.get_num_threads() == n
        results.append(to_numpy(robocache.resample(a["values"], a["times"], a["new_times"], **case.kwargs(a))))
    assert_equal(results[0], case.reference()[0], msg=case.msg)
    for r in results[1:]:
        assert_equal(r, results[0], msg=case.msg)


def test_concurrent_calls_from_python_threads(make_case, restore_threads):
    """Loader threads call resample at once (the GIL is released): results stay
    right and each thread's error names its own argument."""
    robocache.set_num_threads(2)
    cases = [make_case("ragged", "float32", "float64", "linear", B=64, T=32, episodes=30, max_len=100)
             for _ in range(4)]
    refs = [c.reference()[0] for c in cases]
    bad_t = np.array([0.0, 2.0, 1.0])
    failures = []

    def work(k):
        try:
            a = cases[k].inputs("numpy")
            for i in range(60):
                if i % 3 == k % 3:  # interleave errors with good calls
                    try:
                        robocache.resample(np.zeros(3), bad_t, np.zeros(2)) if k % 2 else \
                            robocache.resample(np.zeros(3), np.zeros(3), np.zeros(2), mode="cubic")
                    except ValueError as e:
                        want = "times" if k % 2 else "mode"
                        if want not in str(e):
                            failures.append(f"thread {k}: message {e!r} does not name {want}")
                    else:
                        failures.append(f"thread {k}: no error")
                out = robocache.resample(a["values"], a["times"], a["new_times"], **cases[k].kwargs(a))
                if not np.array_equal(out, refs[k]):
                    failures.append(f"thread {k}: wrong result at call {i}")
        except Exception as e:  # noqa: BLE001 - reported below with its thread
            failures.append(f"thread {k}: {e!r}")

    run_in_threads(work, [(k,) for k in range(4)])
    assert not failures, failures[:5]
