"""Property tests (hypothesis): robocache.resample, voxelize and fuse on the CPU against the NumPy
references of tests/reference.py, on inputs hypothesis draws and shrinks.

What is drawn, per example: the framework (numpy / torch CPU), value and time dtypes, modes,
form (one row, dense with or without `lengths`, ragged offsets/index), every size from 0 up
(B, S, T, episodes, features, grid axes, streams), the memory layout of every input
(contiguous, every-other-element, negative strides, Fortran order, misaligned start), and the
magnitude class of values and times: ordinary, huge (1e30 values, 1e300 / 2**100 times),
subnormal (values and times), epoch-scale float64 seconds, int64 nanoseconds at epoch scale
and near 2**62, runs of duplicate timestamps, NaN/inf values and points. Outputs are poisoned
(0xFF bytes) and passed as `out=`, so an unwritten element shows.

Comparisons are the existing suites' rules: resample is bit for bit (copy modes compare raw
bytes, so NaN payloads count; linear compares values with NaN where the reference has NaN),
slerp within SLERP_ATOL; voxelize uses test_voxelize.assert_voxels (exact for occupancy, count,
max; the fixed-point bound for sum/mean); fuse equals separate resamples bit for bit and each
stream's columns equal the reference.

CI runs a fixed, derandomized set of examples (reproducible). ROBOCACHE_LONG=1 runs 25 times
as many examples with fresh random draws each run (hypothesis prints a reproducer on failure).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import robocache  # noqa: E402
from conftest import place_targets  # noqa: E402
from reference import (ALL_DTYPES, COPY_MODES, FLOAT_DTYPES, SLERP_ATOL, TIME_DTYPES, assert_close,  # noqa: E402
                       bf16_round, dtype_name, modes_for, poisoned, resample_ref, snapshot, to_numpy, voxelize_ref)
from test_voxelize import assert_voxels  # noqa: E402  (the voxelize suite's tolerance rules)

try:
    import torch
except ModuleNotFoundError:
    torch = None

LONG = os.environ.get("ROBOCACHE_LONG") == "1"
# inf/NaN/overflow in the references' arithmetic is intended here (extreme values)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def profile(n):
    """n examples in CI (derandomized: the same examples every run), 25 n fresh ones with
    ROBOCACHE_LONG=1. No example database: nothing is written into the repository."""
    return settings(max_examples=25 * n if LONG else n, deadline=None, derandomize=not LONG, database=None,
                    print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


FRAMEWORKS = ("numpy", "torch") if torch is not None else ("numpy",)
NUMPY_LAYOUTS = ("contiguous", "step", "reversed", "fortran", "offset")
TORCH_LAYOUTS = ("contiguous", "step", "fortran", "offset")  # torch has no negative strides
EPOCH_NS = 1_700_000_000_000_000_000


# ----------------------------------------------------------------------------
# layouts: the same contents in another memory layout


def place(a: np.ndarray, layout: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim == 0 or layout == "contiguous":
        return a.copy()
    if layout == "step":  # every other element along every axis
        buf = np.zeros(tuple(2 * n for n in a.shape), a.dtype)
        view = buf[tuple(slice(None, None, 2) for _ in a.shape)]
        view[...] = a
    elif layout == "reversed":  # negative stride on the first axis
        buf = np.zeros(a.shape, a.dtype)
        buf[...] = a[::-1]
        view = buf[::-1]
    elif layout == "fortran":
        view = np.empty(a.shape, a.dtype, order="F")
        view[...] = a
    elif layout == "offset":  # one element past the start of its allocation (misaligned for 16-byte loads)
        buf = np.zeros(a.size * a.itemsize + a.itemsize, np.uint8)
        view = buf[a.itemsize:].view(a.dtype).reshape(a.shape)
        view[...] = a
    else:
        raise ValueError(layout)
    assert view.tobytes() == np.ascontiguousarray(a).tobytes()
    return view


def as_fw(a, fw, layout="contiguous", bf16=False):
    """numpy array -> framework fw in `layout`; bf16=True makes a torch bfloat16 tensor from
    a float32 array holding bfloat16-exact values (after placing, so strides survive)."""
    if a is None:
        return None
    if fw == "numpy":
        assert not bf16
        return place(a, layout)
    if bf16:
        base = torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16)
        if layout == "step":
            buf = torch.zeros(tuple(2 * n for n in a.shape), dtype=torch.bfloat16)
            view = buf[tuple(slice(None, None, 2) for _ in a.shape)]
        elif layout == "fortran" and a.ndim >= 2:
            view = torch.zeros(tuple(reversed(a.shape)), dtype=torch.bfloat16).permute(*reversed(range(a.ndim)))
        elif layout == "offset":
            view = torch.zeros(a.size + 1, dtype=torch.bfloat16)[1:].view(a.shape)
        else:
            view = torch.zeros(a.shape, dtype=torch.bfloat16)
        view.copy_(base)
        return view
    return torch.from_numpy(place(a, layout))


def layouts(fw):
    return st.sampled_from(NUMPY_LAYOUTS if fw == "numpy" else TORCH_LAYOUTS)


# ----------------------------------------------------------------------------
# times: every kind is a sorted lattice base + step * k (k int64, duplicates allowed) with
# targets on the half lattice, or continuous seconds, so the reference's arithmetic and the
# kernel's see the same exactly representable numbers


TIME_KINDS = {
    "float64": ("seconds", "epoch_seconds", "huge", "subnormal", "negative"),
    "float32": ("grid", "huge", "subnormal", "arbitrary"),
    "int64": ("epoch_ns", "small_ns", "near_2_62"),
}


def time_lattice(kind, tdtype):
    """(base, step) with base + step * k/2 exact for |k| < 2**20 (floats), or ints."""
    if tdtype == "int64":
        return {"epoch_ns": (EPOCH_NS, 1_000_000), "small_ns": (-40, 2), "near_2_62": (2**62 - 2**45, 2**20)}[kind]
    if kind == "huge":  # one binade, so every difference is exact
        return (2.0**996, 2.0**(996 - 30)) if tdtype == "float64" else (2.0**100, 2.0**(100 - 20))
    if kind == "subnormal":  # multiples of the smallest subnormal
        return (0.0, 2.0**-1073) if tdtype == "float64" else (0.0, 2.0**-148)
    if kind == "grid":  # float32 times on a 2**-10 grid (conftest.make_times)
        return (-2.0, 2.0**-10)
    return None  # continuous kinds


def make_row_times(rng, n, tdtype, kind, dup):
    """n non-decreasing times; about `dup` of the steps are zero (duplicates)."""
    lat = time_lattice(kind, tdtype)
    steps = rng.integers(1, 30, n)
    steps[rng.random(n) < dup] = 0
    if n:
        steps[0] = rng.integers(0, 50)
    k = np.cumsum(steps)
    if lat is not None:
        base, step = lat
        if tdtype == "int64":
            return (np.int64(base) + k.astype(np.int64) * np.int64(step)).astype(np.int64)
        return (np.float64(base) + k.astype(np.float64) * 2 * np.float64(step)).astype(tdtype)
    if kind == "seconds":
        t = rng.uniform(-2, 2) + k * 0.01 + rng.uniform(0, 0.004, n) * (steps > 0)
    elif kind == "epoch_seconds":  # absolute Unix time in float64, ~1 ms steps
        t = 1.7e9 + rng.uniform(0, 1e6) + k * 1e-3
    elif kind == "negative":
        t = -1e4 + k * 0.37
    elif kind == "arbitrary":  # float32 numbers with no special structure
        t = rng.uniform(-100, 100) + k * rng.uniform(0.001, 0.3)
    else:
        raise ValueError(kind)
    t = t.astype(tdtype)
    return np.maximum.accumulate(t)  # rounding must not unsort them


def make_row_targets(rng, t, T, tdtype, kind):
    """T unsorted targets: in and around the span, exactly on samples, midpoints, far outside."""
    lat = time_lattice(kind, tdtype)
    if tdtype == "int64":
        lo, hi = (int(t[0]), int(t[-1])) if len(t) else (lat[0], lat[0] + 100 * lat[1])
        margin = (hi - lo) // 10 + 3 * lat[1]
        x = rng.integers(lo - margin, hi + margin, T, endpoint=True).astype(np.int64)
        far = np.array([lo - 10 * margin, hi + 10 * margin], np.int64)
    else:
        t64 = t.astype(np.float64)
        if lat is not None:  # stay on the half lattice
            base, step = lat
            klo = int(round((t64[0] - base) / step)) if len(t) else 0
            khi = int(round((t64[-1] - base) / step)) if len(t) else 100
            m = (khi - klo) // 10 + 3
            x = base + rng.integers(klo - m, khi + m, T, endpoint=True).astype(np.float64) * step
            far = base + np.array([klo - 10 * m, khi + 10 * m], np.float64) * step
            if kind == "subnormal":
                x, far = np.abs(x), np.abs(far)  # stay >= 0 near the smallest numbers
        else:
            lo, hi = (t64[0], t64[-1]) if len(t) else (0.0, 1.0)
            margin = (hi - lo) / 10 + 0.01
            x = rng.uniform(lo - margin, hi + margin, T)
            far = np.array([lo - 10 * margin, hi + 10 * margin])
        x = x.astype(tdtype)
    return place_targets(rng, x, t, far, tdtype, p=[0.4, 0.25, 0.25, 0.1])


# ----------------------------------------------------------------------------
# values: magnitude classes per dtype


VALUE_KINDS = ("normal", "huge", "tiny", "special")
HUGE = {"float64": 1e300, "float32": 1e30, "float16": 3e4, "bfloat16": 1e30}
TINY = {"float64": 1e-310, "float32": 1e-40, "float16": 1e-6, "bfloat16": 1e-40}  # all subnormal


def make_values(rng, shape, vdtype, mode, kind):
    """Values of `shape`; bfloat16 as float32 holding bfloat16-exact values. Integers avoid
    the all-ones bit pattern (the poison)."""
    if mode == "slerp":
        q = rng.standard_normal(shape)
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        for i in range(1, shape[0]):  # small steps (nlerp branch) and exact repeats
            r = rng.random()
            if r < 0.3:
                s = q[i - 1] + rng.uniform(0, 0.03) * rng.standard_normal(shape[1:])
                q[i] = s / np.linalg.norm(s, axis=-1, keepdims=True)
            elif r < 0.4:
                q[i] = q[i - 1]
        flip = rng.random(shape[:-1]) < 0.3
        q[flip] = -q[flip]
        return bf16_round(q) if vdtype == "bfloat16" else q.astype(vdtype)
    if vdtype in FLOAT_DTYPES:
        x = rng.standard_normal(shape) * 4
        if kind == "huge":
            x = x / 4 * HUGE[vdtype]
        elif kind == "tiny":
            x = x / 4 * TINY[vdtype]
        elif kind == "special":  # a mix of everything, ±0, ±inf and NaN
            pick = rng.choice(7, shape)
            x = np.choose(pick, [x, x * HUGE[vdtype] / 4, x * TINY[vdtype] / 4, np.zeros(shape),
                                 -np.zeros(shape), np.full(shape, np.inf) * np.sign(x), np.full(shape, np.nan)])
        with np.errstate(over="ignore"):
            return bf16_round(x) if vdtype == "bfloat16" else x.astype(vdtype)
    if vdtype == "bool":
        return rng.random(shape) < 0.5
    info = np.iinfo(vdtype)
    if kind in ("huge", "special"):  # the extremes of the type
        x = rng.choice(np.array([info.min, info.max, 0, 1], vdtype), shape)
    else:
        x = rng.integers(info.min, info.max, shape, dtype=vdtype, endpoint=True)
    x[x == np.array(-1).astype(vdtype)] = 0
    return x


# ----------------------------------------------------------------------------
# comparisons


def assert_resampled(out, ref, vdtype, mode, msg):
    """Copy modes: raw bytes (NaN payloads, -0.0, bool bytes). linear: equal values, NaN where
    the reference has NaN. slerp: SLERP_ATOL."""
    got = np.ascontiguousarray(to_numpy(out))
    ref = np.ascontiguousarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape} {msg}"
    if mode == "slerp":
        assert_close(got, ref, atol=SLERP_ATOL[vdtype], msg=msg)
        return
    if mode in COPY_MODES:
        r = ref.astype(bool) if vdtype == "bool" else ref
        size = got.dtype.itemsize
        g8 = got.reshape(-1).view(np.uint8).reshape(-1, size)
        r8 = r.reshape(-1).view(np.uint8).reshape(-1, size)
        bad = (g8 != r8).any(axis=1)
        if bad.any():
            i = np.unravel_index(int(np.flatnonzero(bad)[0]), got.shape)
            raise AssertionError(f"{int(bad.sum())} of {bad.size} elements differ in their bytes: first at {i}: "
                                 f"got {got[i]!r}, want {ref[i]!r} {msg}")
        return
    nan_g, nan_r = np.isnan(got.astype(np.float64)), np.isnan(ref.astype(np.float64))
    assert np.array_equal(nan_g, nan_r), f"NaN at {np.argwhere(nan_g != nan_r)[:5].tolist()} {msg}"
    bad = ~nan_r & ~(got == ref)
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} elements differ: at {tuple(np.argwhere(bad)[0])} got "
                           f"{got[tuple(np.argwhere(bad)[0])]!r}, want {ref[tuple(np.argwhere(bad)[0])]!r} {msg}")


# ----------------------------------------------------------------------------
# resample


@st.composite
def resample_cases(draw):
    fw = draw(st.sampled_from(FRAMEWORKS))
    vdtype = draw(st.sampled_from([d for d in ALL_DTYPES if fw == "torch" or d != "bfloat16"]))
    mode = draw(st.sampled_from(modes_for(vdtype)))
    tdtype = draw(st.sampled_from(TIME_DTYPES))
    tkind = draw(st.sampled_from(TIME_KINDS[tdtype]))
    vkind = draw(st.sampled_from(VALUE_KINDS))
    form = draw(st.sampled_from(["row", "dense", "ragged"]))
    if mode == "slerp":
        feat = draw(st.sampled_from([(4,), (2, 4), (1, 4)]))
    else:
        feat = draw(st.sampled_from([(), (1,), (3,), (2, 3), (0,)]))
    B = draw(st.integers(0, 5))
    S = draw(st.integers(0, 12))
    T = draw(st.integers(0, 9))
    E = draw(st.integers(1, 6))
    dup = draw(st.sampled_from([0.0, 0.3, 0.9]))
    tolerance = draw(st.sampled_from([1e-4, 0.0, 0.05, 1e3]))
    use_lengths = form == "dense" and draw(st.booleans())
    lay = {k: draw(layouts(fw)) for k in ("values", "times", "new_times", "lengths", "offsets", "index")}
    return_mask = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(fw=fw, vdtype=vdtype, mode=mode, tdtype=tdtype, tkind=tkind, vkind=vkind, form=form, feat=feat,
                B=B, S=S, T=T, E=E, dup=dup, tolerance=tolerance, use_lengths=use_lengths, layouts=lay,
                return_mask=return_mask, seed=seed)


def build_resample(p):
    """numpy arrays (values, times, new_times, lengths, offsets, index) for case p."""
    rng = np.random.default_rng(p["seed"])
    vd, td, mode, feat = p["vdtype"], p["tdtype"], p["mode"], p["feat"]
    lengths = offsets = index = None
    if p["form"] == "row":
        t = make_row_times(rng, p["S"], td, p["tkind"], p["dup"])
        v = make_values(rng, (p["S"],) + feat, vd, mode, p["vkind"])
        x = make_row_targets(rng, t, p["T"], td, p["tkind"])
    elif p["form"] == "dense":
        B, S = p["B"], p["S"]
        n = rng.integers(0, S + 1, B) if p["use_lengths"] else np.full(B, S)
        t = np.zeros((B, S), td)  # padding as users write it: zeros (unsorted) and garbage values
        v = make_values(rng, (B, S) + feat, vd, mode, p["vkind"])
        x = np.zeros((B, p["T"]), td)
        for b in range(B):
            row = make_row_times(rng, int(n[b]), td, p["tkind"], p["dup"])
            t[b, : n[b]] = row
            if vd in FLOAT_DTYPES and n[b] < S:
                v[b, n[b]:] = np.nan
            x[b] = make_row_targets(rng, row, p["T"], td, p["tkind"])
        if p["use_lengths"]:
            lengths = n.astype(np.int64)
    else:
        E = p["E"]
        n = rng.integers(0, p["S"] + 1, E)
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        t = np.concatenate([make_row_times(rng, int(k), td, p["tkind"], p["dup"]) for k in n]).astype(td)
        v = make_values(rng, (int(offsets[-1]),) + feat, vd, mode, p["vkind"])
        index = rng.integers(0, E, p["B"]).astype(np.int64)
        x = np.zeros((p["B"], p["T"]), td)
        for b, e in enumerate(index):
            x[b] = make_row_targets(rng, t[offsets[e]:offsets[e + 1]], p["T"], td, p["tkind"])
    return dict(values=v, times=t, new_times=x, lengths=lengths, offsets=offsets, index=index)


@profile(1500)
@given(p=resample_cases())
def test_resample_matches_reference(p):
    arrays = build_resample(p)
    fw, vd = p["fw"], p["vdtype"]
    msg = f"{ {k: v for k, v in p.items() if k != 'layouts'} } layouts={p['layouts']}"
    bf16 = vd == "bfloat16"
    ref_in = dict(arrays)
    if bf16:
        ref_in["values"] = torch.from_numpy(arrays["values"]).to(torch.bfloat16)
    ref, ref_pad = resample_ref(ref_in["values"], ref_in["times"], ref_in["new_times"], p["mode"],
                                lengths=arrays["lengths"], offsets=arrays["offsets"], index=arrays["index"],
                                tolerance=p["tolerance"])
    args = {k: as_fw(a, fw, p["layouts"][k], bf16=bf16 and k == "values") for k, a in arrays.items()}
    before = snapshot(args)
    kw = {k: args[k] for k in ("lengths", "offsets", "index") if args[k] is not None}
    kw.update(mode=p["mode"], tolerance=p["tolerance"])

    buf = poisoned(ref.shape, vd, args["values"])
    res = robocache.resample(args["values"], args["times"], args["new_times"], out=buf,
                             return_mask=p["return_mask"], **kw)
    out = res[0] if p["return_mask"] else res
    assert out is buf, "out= must be written in place and returned"
    assert dtype_name(out) == vd
    assert_resampled(out, ref, vd, p["mode"], msg)
    if p["return_mask"]:
        pad = to_numpy(res[1])
        assert pad.dtype == np.bool_ and pad.shape == ref_pad.shape
        assert np.array_equal(pad.view(np.uint8), ref_pad.view(np.uint8)), f"is_pad {msg}"
    # allocating call: same result
    fresh = robocache.resample(args["values"], args["times"], args["new_times"], **kw)
    assert type(fresh) is type(args["values"]) and dtype_name(fresh) == vd
    assert_resampled(fresh, ref, vd, p["mode"], msg)
    assert snapshot(args) == before, "resample modified its inputs " + msg


# ----------------------------------------------------------------------------
# voxelize


VOX_MODES = ("occupancy", "count", "sum", "mean", "max")
FLOATS = ("float32", "float64", "float16", "bfloat16")
GEOMETRIES = ("normal", "huge", "tiny")


def vox_geometry(kind, grid, rng):
    """(voxel_size (3,), origin (3,)) for a geometry class; dyadic, so faces are exact."""
    if kind == "huge":
        return 2.0 ** rng.integers(90, 96, 3).astype(np.float64), -(2.0**97) * np.array([1.0, 0.5, 0.25])
    if kind == "tiny":  # subnormal voxels and coordinates
        return 2.0 ** rng.integers(-1070, -1060, 3).astype(np.float64), np.array([0.0, -(2.0**-1066), 2.0**-1070])
    return 2.0 ** rng.integers(-3, 2, 3).astype(np.float64), rng.integers(-8, 8, 3) / 4.0


def vox_points(rng, n, pdtype, grid, vs, origin, special):
    """[n, 3] float64 points (rounded through pdtype): inside, on faces, outside, and with
    `special` also NaN/inf/±1e30."""
    g = np.asarray(grid, np.float64)
    p = origin + rng.uniform(-0.3, 1.3, (n, 3)) * g * vs
    kind = rng.choice(5, n, p=[0.55, 0.25, 0.1, 0.05, 0.05] if special else [0.6, 0.3, 0.1, 0, 0])
    face = kind == 1
    p[face] = origin + rng.integers(0, np.asarray(grid) + 1, (face.sum(), 3)) * vs
    edge = kind == 2
    p[edge] = np.where(rng.random((edge.sum(), 1)) < 0.5, origin, origin + g * vs)
    bad = kind == 3
    p[bad, rng.integers(0, 3, bad.sum())] = rng.choice([np.nan, np.inf, -np.inf], bad.sum())
    far = kind == 4
    p[far] = rng.choice([-1e30, 1e30], (far.sum(), 3))
    with np.errstate(over="ignore"):
        return bf16_round(p) if pdtype == "bfloat16" else p.astype(pdtype)


@st.composite
def voxelize_cases(draw):
    fw = draw(st.sampled_from(FRAMEWORKS))
    floats = [d for d in FLOATS if fw == "torch" or d != "bfloat16"]
    pdtype = draw(st.sampled_from(floats))
    mode = draw(st.sampled_from(VOX_MODES))
    fdtype = draw(st.sampled_from(floats))
    form = draw(st.sampled_from(["single", "dense", "ragged"]))
    grid = tuple(draw(st.integers(1, 6)) for _ in range(3))
    geometry = draw(st.sampled_from(GEOMETRIES))
    fkind = draw(st.sampled_from(VALUE_KINDS))
    dtype = None
    if mode == "occupancy":
        dtype = draw(st.sampled_from([None, "uint8", "bool", "float16", "float64"] +
                                     (["bfloat16"] if fw == "torch" else [])))
    elif mode == "count":
        dtype = draw(st.sampled_from([None, "int64"]))
    elif draw(st.booleans()):
        dtype = draw(st.sampled_from(["float32", "float64"]))
    return dict(fw=fw, pdtype=pdtype, fdtype=fdtype, mode=mode, form=form, grid=grid, geometry=geometry,
                fkind=fkind, dtype=dtype, B=draw(st.integers(0, 4)), N=draw(st.integers(0, 40)),
                F=draw(st.integers(1, 3)), use_lengths=draw(st.booleans()), special=draw(st.booleans()),
                scalar_voxel=draw(st.booleans()), deterministic=draw(st.sampled_from([True, True, False])),
                players=draw(layouts(fw)), flayout=draw(layouts(fw)), xyzf=draw(st.booleans()),
                seed=draw(st.integers(0, 2**32 - 1)))


@profile(1000)
@given(p=voxelize_cases())
def test_voxelize_matches_reference(p):
    rng = np.random.default_rng(p["seed"])
    fw, pd, fd, mode = p["fw"], p["pdtype"], p["fdtype"], p["mode"]
    feat = mode in ("sum", "mean", "max")
    vs, origin = vox_geometry(p["geometry"], p["grid"], rng)
    if p["scalar_voxel"]:
        vs = np.full(3, vs[0])
    B, N, F = p["B"], p["N"], p["F"]
    lengths = offsets = None
    if p["form"] == "single":
        pts = vox_points(rng, N, pd, p["grid"], vs, origin, p["special"])
        f = make_values(rng, (N, F), fd, "linear", p["fkind"])
    elif p["form"] == "dense":
        pts = np.stack([vox_points(rng, N, pd, p["grid"], vs, origin, p["special"]) for _ in range(B)]) \
            if B else np.zeros((0, N, 3), "float32" if pd == "bfloat16" else pd)
        f = make_values(rng, (B, N, F), fd, "linear", p["fkind"])
        if p["use_lengths"]:
            lengths = rng.integers(0, N + 1, B).astype(np.int64)
            for b in range(B):  # padding: in-grid garbage points, NaN features
                pts[b, lengths[b]:] = origin.astype(pts.dtype)
                if fd in FLOAT_DTYPES:
                    f[b, lengths[b]:] = np.nan
    else:
        n = rng.integers(0, N + 1, B)
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        pts = vox_points(rng, int(offsets[-1]), pd, p["grid"], vs, origin, p["special"])
        f = make_values(rng, (int(offsets[-1]), F), fd, "linear", p["fkind"])
    if not feat:
        f = None
    grid, vsz, org = p["grid"], (float(vs[0]) if p["scalar_voxel"] else tuple(vs.tolist())), tuple(origin.tolist())
    msg = f"{p}"

    # the reference reads bfloat16 through torch (the arrays hold bfloat16-exact float32)
    ref_p = torch.from_numpy(pts).to(torch.bfloat16) if pd == "bfloat16" else pts
    ref_f = torch.from_numpy(f).to(torch.bfloat16) if f is not None and fd == "bfloat16" else f
    out_dtype = p["dtype"] or {"occupancy": "float32", "count": "int32"}.get(mode, "float64" if fd == "float64"
                                                                                 else "float32")
    if not p["deterministic"] and mode in ("sum", "mean") and out_dtype == "float32" and fd == "float64":
        # docs/voxelize.md: deterministic=False sums in the output precision, so each float64
        # feature is rounded to float32 first (1e300 and -1e300 become inf + -inf = NaN, where
        # the exact float64 sum rounds to a single inf)
        with np.errstate(over="ignore"):
            ref_f = f.astype(np.float32)
    ref, ref_dropped = voxelize_ref(ref_p, features=ref_f, lengths=lengths,
                                    offsets=offsets, grid=grid, voxel_size=vsz, origin=org, mode=mode,
                                    dtype=p["dtype"])

    if p["xyzf"] and f is not None and pd == fd:
        # the KITTI layout: xyz and features sliced out of one [..., 3 + F] array
        both = np.concatenate([pts, f], axis=-1)
        both = as_fw(both, fw, p["players"], bf16=pd == "bfloat16")
        P, Fv = both[..., :3], both[..., 3:]
    else:
        P = as_fw(pts, fw, p["players"], bf16=pd == "bfloat16")
        Fv = as_fw(f, fw, p["flayout"], bf16=fd == "bfloat16")
    args = {"points": P, "features": Fv, "lengths": as_fw(lengths, fw), "offsets": as_fw(offsets, fw)}
    before = snapshot(args)
    kw = {k: a for k, a in args.items() if a is not None and k != "points"}
    kw.update(grid=grid, voxel_size=vsz, origin=org, mode=mode, deterministic=p["deterministic"])
    if p["dtype"] is not None:
        kw["dtype"] = p["dtype"]
    buf = poisoned(ref.shape, out_dtype, P)
    out, dropped = robocache.voxelize(P, out=buf, return_dropped=True, **kw)
    assert out is buf
    assert dtype_name(out) == out_dtype, msg
    assert_voxels(out, ref, mode, Fv, p["deterministic"], msg)
    assert np.array_equal(np.reshape(to_numpy(dropped), -1), np.reshape(ref_dropped, -1)), f"dropped {msg}"
    fresh = robocache.voxelize(P, **kw)
    assert_voxels(fresh, ref, mode, Fv, p["deterministic"], msg)
    if p["deterministic"]:
        assert np.ascontiguousarray(to_numpy(fresh)).tobytes() == np.ascontiguousarray(to_numpy(out)).tobytes(), \
            "deterministic=True but two runs differ " + msg
    assert snapshot(args) == before, "voxelize modified its inputs " + msg


# ----------------------------------------------------------------------------
# fuse


@st.composite
def fuse_cases(draw):
    fw = draw(st.sampled_from(FRAMEWORKS))
    vdtype = draw(st.sampled_from([d for d in ALL_DTYPES if fw == "torch" or d != "bfloat16"]))
    tdtype = draw(st.sampled_from(TIME_DTYPES))
    K = draw(st.integers(1, 4))
    modes = [draw(st.sampled_from(modes_for(vdtype))) for _ in range(K)]
    feats = [draw(st.sampled_from([(4,), (2, 4)])) if m == "slerp" else draw(st.sampled_from([(), (1,), (3,), (0,),
                                                                                             (2, 2)]))
             for m in modes]
    return dict(fw=fw, vdtype=vdtype, tdtype=tdtype, tkind=draw(st.sampled_from(TIME_KINDS[tdtype])),
                vkind=draw(st.sampled_from(VALUE_KINDS)), form=draw(st.sampled_from(["row", "dense", "ragged"])),
                modes=modes, feats=feats, B=draw(st.integers(0, 4)), S=[draw(st.integers(0, 10)) for _ in range(K)],
                T=draw(st.integers(0, 8)), E=draw(st.integers(1, 5)), dup=draw(st.sampled_from([0.0, 0.3, 0.9])),
                tolerance=draw(st.sampled_from([1e-4, 0.0, 0.05])), as_dict=draw(st.booleans()),
                layouts=[draw(layouts(fw)) for _ in range(K)], xlayout=draw(layouts(fw)),
                seed=draw(st.integers(0, 2**32 - 1)))


@profile(800)
@given(p=fuse_cases())
def test_fuse_matches_separate_resamples_and_reference(p):
    rng = np.random.default_rng(p["seed"])
    fw, vd, td, form = p["fw"], p["vdtype"], p["tdtype"], p["form"]
    K, B, T = len(p["modes"]), p["B"], p["T"]
    bf16 = vd == "bfloat16"
    streams, row_times = [], []  # numpy; per stream the times of each output row
    index = rng.integers(0, p["E"], B).astype(np.int64) if form == "ragged" else None
    for k, (mode, feat) in enumerate(zip(p["modes"], p["feats"])):
        S = p["S"][k]
        if form == "row":
            t = make_row_times(rng, S, td, p["tkind"], p["dup"])
            streams.append((make_values(rng, (S,) + feat, vd, mode, p["vkind"]), t))
            row_times.append([t])
        elif form == "dense":
            t = np.stack([make_row_times(rng, S, td, p["tkind"], p["dup"]) for _ in range(B)]) if B \
                else np.zeros((0, S), td)
            streams.append((make_values(rng, (B, S) + feat, vd, mode, p["vkind"]), t))
            row_times.append(list(t))
        else:
            n = rng.integers(0, S + 1, p["E"])
            off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
            t = np.concatenate([make_row_times(rng, int(c), td, p["tkind"], p["dup"]) for c in n]).astype(td)
            streams.append((make_values(rng, (int(off[-1]),) + feat, vd, mode, p["vkind"]), t, off))
            row_times.append([t[off[e]:off[e + 1]] for e in index])
    nrows = 1 if form == "row" else B
    x = np.zeros((nrows, T), td)
    for b in range(nrows):  # targets around a random stream's span
        k = int(rng.integers(0, K))
        x[b] = make_row_targets(rng, row_times[k][b], T, td, p["tkind"])
    x = x[0] if form == "row" else x
    msg = f"{p}"

    # reference per stream, concatenated
    refs, pads = [], []
    for parts, mode in zip(streams, p["modes"]):
        v = torch.from_numpy(parts[0]).to(torch.bfloat16) if bf16 else parts[0]
        kw = {"offsets": parts[2], "index": index} if form == "ragged" else {}
        o, pd = resample_ref(v, parts[1], x, mode, tolerance=p["tolerance"], **kw)
        refs.append(o.reshape(o.shape[:x.ndim] + (math.prod(parts[0].shape[1 if form != "dense" else 2:]),)))
        pads.append(pd)
    ref_pad = np.stack(pads, -1)

    conv = [tuple(as_fw(a, fw, p["layouts"][k], bf16=bf16 and i == 0) for i, a in enumerate(parts))
            for k, parts in enumerate(streams)]
    X = as_fw(x, fw, p["xlayout"])
    I = as_fw(index, fw)
    arg_streams = {f"s{k}": s for k, s in enumerate(conv)} if p["as_dict"] else conv
    kw = {"modes": dict(zip(arg_streams, p["modes"])) if p["as_dict"] else p["modes"], "tolerance": p["tolerance"]}
    if I is not None:
        kw["index"] = I
    before = snapshot({f"{k}.{i}": a for k, s in enumerate(conv) for i, a in enumerate(s)} | {"x": X})

    F = sum(r.shape[-1] for r in refs)
    buf = poisoned(x.shape + (F,), vd, X)
    out, pad = robocache.fuse(arg_streams, X, out=buf, return_mask=True, **kw)
    assert out is buf and dtype_name(out) == vd
    assert np.array_equal(to_numpy(pad).view(np.uint8), ref_pad.view(np.uint8)), "is_pad " + msg

    # the contract: columns of stream k == robocache.resample of stream k alone, bit for bit
    got = np.ascontiguousarray(to_numpy(out))
    col = 0
    for k, (parts, mode) in enumerate(zip(conv, p["modes"])):
        rkw = {"offsets": parts[2], "index": I} if form == "ragged" else {}
        alone = to_numpy(robocache.resample(parts[0], parts[1], X, mode=mode, tolerance=p["tolerance"], **rkw))
        d = refs[k].shape[-1]
        alone = np.ascontiguousarray(alone).reshape(got.shape[:-1] + (d,))
        part = np.ascontiguousarray(got[..., col:col + d])
        assert part.tobytes() == alone.tobytes(), f"stream {k} columns != resample of it alone {msg}"
        assert_resampled(part, refs[k], vd, mode, f"stream {k} vs reference {msg}")
        col += d
    assert col == F
    fresh = robocache.fuse(arg_streams, X, **kw)
    assert np.ascontiguousarray(to_numpy(fresh)).tobytes() == got.tobytes(), msg
    after = snapshot({f"{k}.{i}": a for k, s in enumerate(conv) for i, a in enumerate(s)} | {"x": X})
    assert after == before, "fuse modified its inputs " + msg


# ----------------------------------------------------------------------------
# the generators themselves: every class they promise shows up (a property test whose
# generator quietly stopped producing subnormals would test nothing)


def test_generators_cover_the_extremes():
    rng = np.random.default_rng(0)
    t = make_row_times(rng, 50, "float64", "subnormal", 0.3)
    assert (t[t > 0] < 2.2250738585072014e-308).all() and (np.diff(t) >= 0).all() and (np.diff(t) == 0).any()
    t = make_row_times(rng, 50, "float32", "subnormal", 0.0)
    assert (t[t > 0] < np.finfo(np.float32).tiny).all() and (np.diff(t) > 0).all()
    t = make_row_times(rng, 50, "int64", "near_2_62", 0.0)
    assert t.dtype == np.int64 and t[0] > 2**61 and (np.diff(t) > 0).all()
    x = make_row_targets(rng, t, 200, "int64", "near_2_62")
    assert x.max() < 2**63 - 1 and x.min() > 0
    t = make_row_times(rng, 50, "float64", "epoch_seconds", 0.0)
    assert t[0] > 1.6e9 and (np.diff(t) > 0).all()
    t = make_row_times(rng, 50, "float32", "huge", 0.0)
    assert t.dtype == np.float32 and t[0] >= 2.0**100 and (np.diff(t) > 0).all()
    v = make_values(rng, (200,), "float32", "linear", "tiny")
    assert (np.abs(v[v != 0]) < np.finfo(np.float32).tiny).all()
    v = make_values(rng, (400,), "float64", "linear", "special")
    assert np.isnan(v).any() and np.isinf(v).any() and (np.signbit(v) & (v == 0)).any()
    v = make_values(rng, (50,), "float32", "linear", "huge")
    assert np.abs(v).max() > 1e29
    # a layout really is non-contiguous
    a = np.arange(12.0).reshape(3, 4)
    for lay in ("step", "reversed", "fortran"):
        assert not place(a, lay).flags.c_contiguous
    assert place(a, "offset").ctypes.data % 16 != 0  # misaligned for 16-byte loads
    assert math.isfinite(float(make_row_targets(rng, np.zeros(0, np.float64), 5, "float64", "seconds")[0]))
