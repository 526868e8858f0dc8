"""robocache.voxelize on the CPU, numpy arrays and torch CPU tensors, against
tests/reference.py::voxelize_ref (np.floor binning in float64, np.add.at /
np.maximum.at), which follows docs/voxelize.md.

Every test draws fresh random inputs (see the `rng` fixture for the seed) and
writes into outputs poisoned with 0xFF bytes (NaN for floats), so unwritten
voxels show. Grids are never cubic and voxels never isotropic unless a test
says so: a transposed index (out[b, z, y, x]) or a swapped voxel size cannot
pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

import robocache
from conftest import run_in_threads
from reference import (assert_close, assert_equal, bf16_round, dtype_name, is_torch, poisoned, snapshot, to_numpy,
                       voxel_index_ref, voxelize_ref)

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=needs_torch)]
FLOATS = ("float32", "float64", "float16", "bfloat16")
MODES = ("occupancy", "count", "sum", "mean", "max")
FEATURE_MODES = ("sum", "mean", "max")
FORMS = ("dense", "ragged", "single")

# a non-cubic grid with anisotropic voxels whose faces are exact in float16
GRID = (7, 5, 3)
VOXEL = (0.5, 0.25, 1.0)
ORIGIN = (-1.5, 0.75, -2.0)

# messages must name the argument
POINTS, FEATURES, LENGTHS, OFFSETS, OUT = r"\bpoints\b", r"\bfeatures\b", r"\blengths\b", r"\boffsets\b", r"\bout\b"
GRID_RE, VOXEL_RE, ORIGIN_RE, MODE_RE, DTYPE_RE = r"\bgrid\b", r"\bvoxel_size\b", r"\borigin\b", r"\bmode\b", r"\bdtype\b"


# ----------------------------------------------------------------------------
# inputs


def as_fw(a, fw, dtype=None):
    """numpy -> framework fw (CPU); dtype 'bfloat16' converts the (bf16-exact)
    float32 array to a torch bfloat16 tensor. None stays None."""
    if a is None:
        return None
    if fw == "numpy":
        assert dtype != "bfloat16", "numpy has no bfloat16"
        return a.copy()
    t = torch.from_numpy(np.ascontiguousarray(a).copy())
    return t.to(torch.bfloat16) if dtype == "bfloat16" else t


def in_dtype(x, dtype):
    """x (float64) as `dtype`; bfloat16 is held as float32 with bf16-exact values."""
    return bf16_round(x) if dtype == "bfloat16" else np.asarray(x).astype(dtype)


def make_points(rng, n, dtype, grid=GRID, voxel=VOXEL, origin=ORIGIN, special=True):
    """[n, 3] points: most inside the grid, some outside, some exactly on voxel
    faces (lower faces are inside, the upper bound is outside), a few NaN/inf."""
    g, v, o = np.asarray(grid, float), np.asarray(voxel, float), np.asarray(origin, float)
    lo, hi = o - 0.3 * g * v, o + 1.3 * g * v
    p = rng.uniform(lo, hi, (n, 3))
    if special and n:
        kind = rng.choice(5, n, p=[0.6, 0.2, 0.1, 0.06, 0.04])
        face = kind == 1  # exactly on a face: origin + k * voxel, k in 0..grid (grid is outside)
        k = rng.integers(0, np.asarray(grid) + 1, (face.sum(), 3))
        p[face] = o + k * v
        edge = kind == 2  # the very corners: origin (inside) and origin + grid * voxel (outside)
        p[edge] = np.where(rng.random((edge.sum(), 1)) < 0.5, o, o + g * v)
        bad = kind == 3
        p[bad, rng.integers(0, 3, bad.sum())] = rng.choice([np.nan, np.inf, -np.inf], bad.sum())
        far = kind == 4
        p[far] = rng.choice([-1e30, 1e30], (far.sum(), 3))
    if dtype == "float16":
        p = np.clip(p, -60000, 60000)  # stay finite in float16 (inf is tested on purpose above)
        p[~np.isfinite(p)] = np.nan
    return in_dtype(p, dtype)


def make_features(rng, n, F, dtype, negative=False):
    x = rng.standard_normal((n, F)) * 3
    if negative:
        x = -np.abs(x) - 0.5
    return in_dtype(x, dtype)


@dataclass
class VoxCase:
    points: np.ndarray
    pdtype: str
    mode: str
    seed: int
    features: np.ndarray | None = None
    fdtype: str = "float32"
    lengths: np.ndarray | None = None
    offsets: np.ndarray | None = None
    grid: tuple = GRID
    voxel_size: tuple | float = VOXEL
    origin: tuple = ORIGIN
    dtype: str | None = None
    extra: dict = field(default_factory=dict)

    def arrays(self, fw):
        return {"points": as_fw(self.points, fw, self.pdtype),
                "features": as_fw(self.features, fw, self.fdtype),
                "lengths": as_fw(self.lengths, fw), "offsets": as_fw(self.offsets, fw)}

    def kwargs(self, arrays, **more):
        kw = {k: v for k, v in arrays.items() if v is not None and k != "points"}
        kw.update(grid=self.grid, voxel_size=self.voxel_size, origin=self.origin, mode=self.mode)
        if self.dtype is not None:
            kw["dtype"] = self.dtype
        kw.update(more)
        return kw

    def reference(self, arrays=None):
        a = arrays or self.arrays("torch" if "bfloat16" in (self.pdtype, self.fdtype) else "numpy")
        return voxelize_ref(a["points"], features=a["features"], lengths=a["lengths"], offsets=a["offsets"],
                            grid=self.grid, voxel_size=self.voxel_size, origin=self.origin, mode=self.mode,
                            dtype=self.dtype)

    @property
    def out_dtype(self):
        if self.dtype is not None:
            return self.dtype
        if self.mode == "occupancy":
            return "float32"
        if self.mode == "count":
            return "int32"
        return "float64" if self.fdtype == "float64" else "float32"

    @property
    def msg(self):
        return (f"(mode={self.mode}, points {self.pdtype}, features {self.fdtype if self.features is not None else None}, "
                f"out {self.out_dtype}, seed={self.seed})")

    def assert_matches(self, out, ref, like, deterministic=True):
        assert type(out) is type(like), f"output is {type(out).__name__}, points were {type(like).__name__}"
        assert dtype_name(out) == self.out_dtype, f"output dtype {dtype_name(out)} {self.msg}"
        assert tuple(out.shape) == ref.shape, f"shape {tuple(out.shape)} != {ref.shape} {self.msg}"
        assert_voxels(out, ref, self.mode, self.features, deterministic, self.msg)

    def check(self, fw="numpy"):
        """Fresh allocation and a poisoned out= both equal the reference; dropped
        counts too; the inputs are left alone. Returns the output."""
        a = self.arrays(fw)
        before = snapshot(a)
        ref, ref_dropped = self.reference()
        out = robocache.voxelize(a["points"], **self.kwargs(a))
        self.assert_matches(out, ref, a["points"])
        buf = poisoned(ref.shape, self.out_dtype, a["points"])
        res = robocache.voxelize(a["points"], **self.kwargs(a, out=buf, return_dropped=True))
        assert isinstance(res, tuple) and len(res) == 2, "return_dropped=True must return (out, dropped)"
        assert res[0] is buf, "out= must be written in place and returned"
        self.assert_matches(buf, ref, a["points"])
        dropped = res[1]
        assert type(dropped) is type(a["points"]) and dtype_name(dropped) == "int64"
        assert tuple(dropped.shape) == np.shape(ref_dropped), f"dropped shape {tuple(dropped.shape)} {self.msg}"
        assert_equal(to_numpy(dropped).reshape(-1), np.reshape(ref_dropped, -1), msg="dropped " + self.msg)
        assert snapshot(a) == before, "voxelize modified its inputs " + self.msg
        return out


def assert_voxels(out, ref, mode, features, deterministic=True, msg=""):
    """occupancy/count/max: exact. sum/mean: within the fixed-point error (far
    below one float32 ulp) plus one rounding of the output dtype; NaN where the
    reference has NaN."""
    if mode in ("occupancy", "count", "max"):
        got = to_numpy(out)
        nan = np.isnan(ref) if ref.dtype.kind == "f" else np.zeros(ref.shape, bool)
        if nan.any():
            assert np.array_equal(np.isnan(got), nan), f"NaN voxels differ {msg}"
            got, ref = np.where(nan, 0, got), np.where(nan, 0, ref)
        assert_equal(got, ref, msg=msg)
        return
    got = np.asarray(to_numpy(out), np.float64)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"NaN voxels differ: {np.argwhere(np.isnan(got) != nan)[:5]} {msg}"
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite & ~nan], ref[~finite & ~nan]), f"inf voxels differ {msg}"
    f = np.asarray(to_numpy(features), np.float64)
    scale = np.nanmax(np.abs(np.where(np.isfinite(f), f, 0))) if f.size else 1.0
    if dtype_name(out) == "float64":
        rtol, atol = 1e-13, 1e-11 * scale
    else:
        rtol, atol = 2.4e-7, 1e-9 * scale
    if not deterministic:  # float32 atomics / sequential float32 sums
        rtol, atol = 1e-5, 1e-5 * scale
    assert_close(np.where(finite, got, 0), np.where(finite, ref, 0), rtol=rtol, atol=atol, msg=msg)


@pytest.fixture
def make_vox(rng):
    """make_vox(form, pdtype, mode, ...) -> VoxCase. Dense clouds are padded with
    NaN/garbage beyond lengths (so reading padding shows); ragged batches always
    contain an empty cloud."""

    def make(form="dense", pdtype="float32", mode="occupancy", *, B=4, N=300, F=3, fdtype="float32",
             lengths=True, negative=False, **kw):
        feat = mode in FEATURE_MODES
        extra = {}
        if form == "dense":
            n = np.full(B, N)
            if lengths and B:
                n = rng.integers(0, N + 1, B)
                n[0] = 0
                n[-1] = N
                rng.shuffle(n)
            pts = np.stack([make_points(rng, N, pdtype) for _ in range(B)]) if B else np.zeros((0, N, 3), pdtype if pdtype != "bfloat16" else "float32")
            f = np.stack([make_features(rng, N, F, fdtype, negative) for _ in range(B)]) if B else np.zeros((0, N, F), "float32" if fdtype == "bfloat16" else fdtype)
            if lengths and B:
                for b in range(B):  # padding: in-grid garbage points and NaN features
                    pts[b, n[b]:] = in_dtype(np.asarray(ORIGIN) + 0.01, pdtype)
                    f[b, n[b]:] = np.nan
                extra["lengths"] = n.astype(np.int64)
        elif form == "ragged":
            n = rng.integers(0, N + 1, B)
            if B:
                n[rng.integers(0, B)] = 0
            extra["offsets"] = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
            P = int(n.sum())
            pts = make_points(rng, P, pdtype)
            f = make_features(rng, P, F, fdtype, negative)
        elif form == "single":
            pts = make_points(rng, N, pdtype)
            f = make_features(rng, N, F, fdtype, negative)
        else:
            raise ValueError(form)
        return VoxCase(points=pts, pdtype=pdtype, mode=mode, seed=rng.seed, features=f if feat else None,
                       fdtype=fdtype, **extra, **kw)

    return make


def matrix():
    for fw in ("numpy", "torch"):
        for pd in FLOATS:
            if fw == "numpy" and pd == "bfloat16":
                continue
            for mode in MODES:
                yield pytest.param(fw, pd, mode, id=f"{fw}-{pd}-{mode}", marks=[needs_torch] if fw == "torch" else [])


# ----------------------------------------------------------------------------
# every points dtype x mode x form, against the reference


@pytest.mark.parametrize("fw,pdtype,mode", list(matrix()))
def test_dtype_mode_matrix(fw, pdtype, mode, make_vox):
    for form in FORMS:
        make_vox(form, pdtype, mode, fdtype=pdtype).check(fw)
    if mode in FEATURE_MODES:  # features in another dtype than the points
        make_vox("ragged", pdtype, mode, fdtype="float64" if pdtype != "float64" else "float16").check(fw)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_many_points_per_voxel(fw, mode, make_vox):
    """Dense collisions: every voxel reduces many points (atomics/ordering matter)."""
    make_vox("dense", "float32", mode, B=3, N=5000, F=2, lengths=False).check(fw)


def fw_params(values, name):
    """(fw, value) pairs; numpy has no bfloat16."""
    return [pytest.param(fw, v, id=f"{fw}-{v}", marks=[needs_torch] if fw == "torch" else [])
            for fw in ("numpy", "torch") for v in values if not (fw == "numpy" and "bfloat16" in str(v))]


@pytest.mark.parametrize("fw,dtype", fw_params(["float32", "float64", "float16", "bfloat16", "uint8", "bool"], "dtype"))
def test_occupancy_dtypes(fw, dtype, make_vox):
    out = make_vox("ragged", "float32", "occupancy", dtype=dtype).check(fw)
    assert set(np.unique(to_numpy(out).astype(np.float64))) <= {0.0, 1.0}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_count_int64(fw, make_vox):
    make_vox("dense", "float64", "count", dtype="int64").check(fw)


@pytest.mark.parametrize("mode", FEATURE_MODES)
@pytest.mark.parametrize("fw,dtypes", fw_params([("float32", "float64"), ("float64", "float32"), ("float16", None),
                                                 ("bfloat16", "float64")], "dtypes"))
def test_feature_output_dtypes(fw, mode, dtypes, make_vox):
    fdtype, dtype = dtypes
    make_vox("dense", "float32", mode, fdtype=fdtype, dtype=dtype).check(fw)


def test_dtype_spellings(make_vox):
    case = make_vox("single", "float32", "occupancy", dtype="uint8")
    ref = case.reference()[0]
    a = case.arrays("numpy")
    for spelling in ("uint8", np.uint8, np.dtype("uint8")) + ((torch.uint8,) if torch is not None else ()):
        out = robocache.voxelize(a["points"], **case.kwargs(a, dtype=spelling))
        assert out.dtype == np.uint8, spelling
        assert_equal(out, ref)
    for spelling in ("bool", bool, np.bool_) + ((torch.bool,) if torch is not None else ()):
        out = robocache.voxelize(a["points"], **case.kwargs(a, dtype=spelling))
        assert out.dtype == np.bool_, spelling
        assert_equal(out, ref.astype(bool))


# ----------------------------------------------------------------------------
# layout and binning, by hand


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_layout_is_b_x_y_z_row_major(fw):
    """One point per cloud at a known voxel of a non-cubic, anisotropic grid:
    only out[b, ix, iy, iz] is set, and in the flat buffer at ((b*X + ix)*Y + iy)*Z + iz."""
    X, Y, Z = GRID
    want = [(6, 0, 2), (1, 4, 0), (3, 2, 1)]
    pts = np.array([[ORIGIN[k] + (w[k] + 0.5) * VOXEL[k] for k in range(3)] for w in want], np.float32)[:, None, :]
    out = to_numpy(robocache.voxelize(as_fw(pts, fw), grid=GRID, voxel_size=VOXEL, origin=ORIGIN))
    assert out.shape == (3, X, Y, Z)
    for b, (ix, iy, iz) in enumerate(want):
        assert out[b, ix, iy, iz] == 1.0
        assert out[b].sum() == 1.0
        assert out.reshape(-1)[((b * X + ix) * Y + iy) * Z + iz] == 1.0
    # channel-first features: out[b, c, x, y, z]
    f = np.array([[[10.0, -20.0]], [[30.0, -40.0]], [[50.0, -60.0]]], np.float32)
    out = to_numpy(robocache.voxelize(as_fw(pts, fw), features=as_fw(f, fw), grid=GRID, voxel_size=VOXEL,
                                      origin=ORIGIN, mode="max"))
    assert out.shape == (3, 2, X, Y, Z)
    for b, (ix, iy, iz) in enumerate(want):
        assert out[b, 0, ix, iy, iz] == f[b, 0, 0] and out[b, 1, ix, iy, iz] == f[b, 0, 1]
        assert np.count_nonzero(out[b]) == 2


@pytest.mark.parametrize("fw,pdtype", fw_params(FLOATS, "pdtype"))
def test_faces_lower_included_upper_excluded(fw, pdtype):
    X, Y, Z = GRID
    o, v = np.asarray(ORIGIN), np.asarray(VOXEL)
    pts = np.array([
        o,                                   # lower corner: voxel (0, 0, 0)
        o + v * [1, 2, 1],                   # on faces: voxel (1, 2, 1), not (0, 1, 0)
        o + v * [X - 1, Y - 1, Z - 1],       # last voxel's lower corner: inside
        o + v * [X, 0, 0],                   # x on the upper bound: dropped
        o + v * [0, Y, 0],                   # y on the upper bound: dropped
        o + v * [0, 0, Z],                   # z on the upper bound: dropped
        o - [0.0, 0.0, 1 / 64],              # just below the lower bound in z: dropped
        o + v * [X, Y, Z] - [1 / 64, 1 / 64, 1 / 64],  # just inside the upper corner
    ])
    out, dropped = robocache.voxelize(as_fw(in_dtype(pts, pdtype), fw, pdtype), grid=GRID, voxel_size=VOXEL,
                                      origin=ORIGIN, mode="count", return_dropped=True)
    out = to_numpy(out)
    want = np.zeros(GRID, np.int32)
    want[0, 0, 0] = 1
    want[1, 2, 1] = 1
    want[X - 1, Y - 1, Z - 1] = 2
    assert_equal(out, want)
    assert int(dropped) == 4


def test_binning_is_float64(rng):
    """float32 points binned in float64: the reference's formula exactly, even
    where float32 arithmetic would round across a face."""
    origin, size = (-40.0, -40.0, -3.0), (0.2, 0.2, 0.1)
    # points within a float32 ulp of faces, where the rounding mode decides
    k = rng.integers(0, 400, (20000, 3)).astype(np.float64)
    p = (np.asarray(origin) + k * np.asarray(size)).astype(np.float32)
    p = np.nextafter(p, rng.choice([-np.inf, np.inf], p.shape).astype(np.float32))
    grid = (400, 400, 60)
    idx = voxel_index_ref(p, size, origin)
    f32 = np.floor((p - np.float32(origin)) / np.float32(size)).astype(np.float64)
    assert (idx != f32).any(), "test data should contain points where float32 binning differs"
    ref, _ = voxelize_ref(p, grid=grid, voxel_size=size, origin=origin, mode="count")
    assert_equal(robocache.voxelize(p, grid=grid, voxel_size=size, origin=origin, mode="count"), ref)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_nonfinite_and_far_points_are_dropped(fw):
    pts = np.array([[[0.1, 0.1, 0.1], [np.nan, 0.1, 0.1], [0.1, np.inf, 0.1], [0.1, 0.1, -np.inf],
                     [1e38, 0.1, 0.1], [-1e38, 0.1, 0.1], [0.2, 0.2, 0.2]]], np.float32)
    f = np.ones((1, 7, 1), np.float32)
    for mode in MODES:
        kw = {"features": as_fw(f, fw)} if mode in FEATURE_MODES else {}
        out, dropped = robocache.voxelize(as_fw(pts, fw), grid=(2, 3, 4), voxel_size=0.5, origin=(0, 0, 0),
                                          mode=mode, return_dropped=True, **kw)
        out = to_numpy(out)
        assert int(dropped[0]) == 5, mode
        want = {"occupancy": 1, "count": 2, "sum": 2, "mean": 1, "max": 1}[mode]
        assert out.reshape(-1)[0] == want and np.count_nonzero(out) == 1, mode


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_scalar_and_anisotropic_voxel_size(fw, make_vox):
    make_vox("dense", "float32", "count", voxel_size=0.5).check(fw)
    make_vox("dense", "float32", "count", voxel_size=[0.5, 0.25, 1.0]).check(fw)
    make_vox("dense", "float32", "count", voxel_size=np.array([0.5, 0.25, 1.0])).check(fw)


def test_cubic_grid_as_one_int(make_vox):
    case = make_vox("single", "float32", "occupancy", grid=4, voxel_size=0.5)
    out = case.check("numpy")
    assert out.shape == (4, 4, 4)


# ----------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("fdtype", ["float32", "float64", "float16"])
def test_max_of_negative_features(fw, fdtype, make_vox):
    """Voxels whose every feature is negative keep their (negative) max; empty voxels are 0."""
    case = make_vox("dense", "float32", "max", fdtype=fdtype, negative=True)
    out = to_numpy(case.check(fw))
    ref, _ = case.reference()
    occupied = case.reference()[0] != 0
    assert (out[occupied] < 0).all(), "max of negative values must stay negative"
    assert (out[~occupied] == 0).all()
    assert (ref[occupied] < 0).all()


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_empty_voxels_are_zero_in_every_mode(fw, rng):
    pts = np.array([[[0.1, 0.1, 0.1], [0.1, 0.2, 0.3]]], np.float32)  # one voxel
    f = np.array([[[-5.0], [-7.0]]], np.float32)
    for mode in MODES:
        kw = {"features": as_fw(f, fw)} if mode in FEATURE_MODES else {}
        shape = (1, 1, 3, 4, 2) if mode in FEATURE_MODES else (1, 3, 4, 2)
        dt = {"occupancy": "float32", "count": "int32"}.get(mode, "float32")
        buf = poisoned(shape, dt, as_fw(pts, fw))
        robocache.voxelize(as_fw(pts, fw), grid=(3, 4, 2), voxel_size=1.0, origin=(0, 0, 0), mode=mode, out=buf, **kw)
        got = to_numpy(buf).reshape(-1)
        want = {"occupancy": 1, "count": 2, "sum": -12, "mean": -6, "max": -5}[mode]
        assert got[0] == want, mode
        assert (got[1:] == 0).all(), mode


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_nonfinite_features_propagate_like_float_addition(fw):
    """sum/mean: NaN anywhere -> NaN, +inf and -inf together -> NaN, one sign of
    inf -> that inf; max: NaN wins (numpy.maximum), inf is the max."""
    inf, nan = np.inf, np.nan
    neg_nan = float(np.array([0xFFC00000], np.uint32).view(np.float32)[0])  # sign bit set
    voxels = [[1.0, inf], [-inf, 2.0], [inf, -inf], [nan, 1.0], [3.0, 4.0], [-inf, -inf], [2.0, neg_nan]]
    pts, f = [], []
    for i, vals in enumerate(voxels):
        for x in vals:
            pts.append([i + 0.5, 0.5, 0.5])
            f.append([x])
    pts = np.array(pts, np.float32)
    f = np.array(f, np.float32)
    for mode in FEATURE_MODES:
        out = robocache.voxelize(as_fw(pts, fw), features=as_fw(f, fw), grid=(7, 1, 1), voxel_size=1.0,
                                 origin=(0, 0, 0), mode=mode)
        ref, _ = voxelize_ref(pts, features=f, grid=(7, 1, 1), voxel_size=1.0, origin=(0, 0, 0), mode=mode)
        got = to_numpy(out).reshape(-1)
        want = ref.reshape(-1)
        assert np.array_equal(np.isnan(got), np.isnan(want)), (mode, got, want)
        ok = ~np.isnan(want)
        assert np.array_equal(got[ok], want[ok]), (mode, got, want)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("magnitude", [1e-30, 1e-6, 1.0, 1e6, 1e30])
def test_fixed_point_keeps_float_precision_at_any_magnitude(fw, magnitude, rng, make_vox):
    """The per-(cloud, channel) scale adapts: tiny and huge features are summed
    to float32 precision, with no saturation."""
    case = make_vox("ragged", "float32", "sum", F=2, N=2000)
    case.features = (case.features.astype(np.float64) * magnitude).astype(np.float32)
    case.check(fw)
    case.mode = "mean"
    case.check(fw)


def fixed_point_model(values_per_voxel, kept, m):
    """docs/voxelize.md's fixed point, with Python ints: S = 62 - e - L,
    q = rint(f * 2^S) (half to even), sum * 2^-S."""
    e = math.frexp(m)[1]  # m < 2^e
    L = (kept - 1).bit_length() if kept > 1 else 0
    S = 62 - e - L
    out = []
    for vals in values_per_voxel:
        q = sum(int(np.rint(math.ldexp(v, S))) for v in vals)
        out.append(math.ldexp(float(q), -S))
    return out


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_fixed_point_quantization_is_exactly_as_documented(fw):
    """Values far below the channel's largest one are quantized to 2^-S with
    round-half-to-even: ties at 0.5, 1.5 and 2.5 steps (S = 59 here: m = 1, 4 points)."""
    step = 2.0 ** -59
    vals = [[1.0], [0.5 * step], [1.5 * step], [2.5 * step]]
    pts = np.array([[i + 0.5, 0.5, 0.5] for i in range(4)])
    f = np.array([v for vs in vals for v in vs])[:, None]
    out = robocache.voxelize(as_fw(pts, fw), features=as_fw(f, fw), grid=(4, 1, 1), voxel_size=1.0,
                             origin=(0, 0, 0), mode="sum")
    got = to_numpy(out).reshape(-1).tolist()
    want = fixed_point_model(vals, kept=4, m=1.0)
    assert want == [1.0, 0.0, 2 * step, 2 * step]
    assert got == want


def test_mixed_magnitudes_in_one_channel(rng):
    """Documented precision: the error bound is relative to the largest |feature|
    of the cloud's channel, not to each voxel's own values."""
    n = 4000
    pts = rng.uniform(0, 4, (n, 3)).astype(np.float32)
    f = rng.standard_normal((n, 1))
    f[0] = 1e6
    out = robocache.voxelize(pts, features=f, grid=(4, 4, 4), voxel_size=1.0, origin=(0, 0, 0), mode="sum")
    ref, _ = voxelize_ref(pts, features=f, grid=(4, 4, 4), voxel_size=1.0, origin=(0, 0, 0), mode="sum")
    # bound of docs/voxelize.md: count * 2^(L - 62) * 2^e, e = 20 (1e6 < 2^20), L = 12 (n <= 2^12)
    counts = voxelize_ref(pts, grid=(4, 4, 4), voxel_size=1.0, origin=(0, 0, 0), mode="count")[0]
    bound = counts.astype(np.float64) * 2.0 ** (12 - 62 + 20)
    assert (np.abs(to_numpy(out) - ref) <= bound + 1e-300).all()


# ----------------------------------------------------------------------------
# forms: empty clouds, padding, ragged, one cloud


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_empty_clouds(fw, mode, make_vox):
    make_vox("dense", "float32", mode, B=3, N=0, lengths=False).check(fw)
    make_vox("ragged", "float32", mode, B=5, N=0).check(fw)  # every cloud empty
    make_vox("ragged", "float32", mode, B=0, N=10).check(fw)  # no clouds at all
    make_vox("dense", "float32", mode, B=0, N=10, lengths=False).check(fw)
    make_vox("single", "float32", mode, N=0).check(fw)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_ragged_with_empty_members(fw, mode, rng, make_vox):
    case = make_vox("ragged", "float64", mode, B=8, N=50)
    n = np.diff(case.offsets)
    n[[0, 3, 7]] = 0  # first, middle and last clouds empty
    P = int(n.sum())
    case.offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    case.points = case.points[:P]
    if case.features is not None:
        case.features = case.features[:P]
    out = to_numpy(case.check(fw))
    for b in (0, 3, 7):
        assert (out[b] == 0).all()


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_padding_is_ignored_with_lengths(fw, mode, make_vox):
    """Cloud b of a padded batch equals the same cloud voxelized alone."""
    case = make_vox("dense", "float32", mode, B=5, N=120)
    a = case.arrays(fw)
    out = to_numpy(robocache.voxelize(a["points"], **case.kwargs(a)))
    for b in range(5):
        n = int(case.lengths[b])
        kw = {"features": as_fw(case.features[b, :n], fw)} if case.features is not None else {}
        alone = robocache.voxelize(as_fw(case.points[b, :n], fw), grid=GRID, voxel_size=VOXEL, origin=ORIGIN,
                                   mode=mode, **kw)
        assert_equal(out[b], to_numpy(alone), msg=case.msg)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_full_lengths_equal_no_lengths(fw, make_vox):
    case = make_vox("dense", "float32", "mean", lengths=False)
    a = case.arrays(fw)
    out1 = robocache.voxelize(a["points"], **case.kwargs(a))
    full = as_fw(np.full(case.points.shape[0], case.points.shape[1], np.int64), fw)
    out2 = robocache.voxelize(a["points"], **case.kwargs(a, lengths=full))
    assert_equal(out1, to_numpy(out2))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_single_cloud_shapes(fw, make_vox):
    case = make_vox("single", "float32", "mean", F=2)
    out = case.check(fw)
    assert tuple(out.shape) == (2,) + GRID
    a = case.arrays(fw)
    _, dropped = robocache.voxelize(a["points"], **case.kwargs(a, return_dropped=True))
    assert tuple(dropped.shape) == ()


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_dense_and_ragged_agree(fw, make_vox):
    case = make_vox("dense", "float32", "mean", B=4, N=80)
    n = case.lengths
    pts = np.concatenate([case.points[b, : n[b]] for b in range(4)])
    f = np.concatenate([case.features[b, : n[b]] for b in range(4)])
    off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    a = case.arrays(fw)
    dense = to_numpy(robocache.voxelize(a["points"], **case.kwargs(a)))
    ragged = robocache.voxelize(as_fw(pts, fw), features=as_fw(f, fw), offsets=as_fw(off, fw), grid=GRID,
                                voxel_size=VOXEL, origin=ORIGIN, mode="mean")
    assert_equal(dense, to_numpy(ragged))


# ----------------------------------------------------------------------------
# strided inputs


def test_strided_numpy_inputs(rng, make_vox):
    """xyz and a feature sliced out of one [N, 4] array (the KITTI layout),
    transposed storage, and reversed rows."""
    case = make_vox("ragged", "float32", "mean", F=1, B=6, N=100)
    P = case.points.shape[0]
    xyzr = np.empty((P, 4), np.float32)
    xyzr[:, :3], xyzr[:, 3] = case.points, case.features[:, 0]
    pts, f = xyzr[:, :3], xyzr[:, 3:]
    assert not pts.flags.c_contiguous
    kw = dict(offsets=case.offsets, grid=GRID, voxel_size=VOXEL, origin=ORIGIN, mode="mean")
    ref, _ = case.reference()
    assert_voxels(robocache.voxelize(pts, features=f, **kw), ref, "mean", f)
    t = np.asfortranarray(case.points)  # column-major [P, 3]
    assert_voxels(robocache.voxelize(t, features=np.asfortranarray(case.features), **kw), ref, "mean", f)
    dense = make_vox("dense", "float64", "max", B=3, N=60, F=2)
    ref, _ = dense.reference()
    pts = np.ascontiguousarray(dense.points.transpose(1, 0, 2)).transpose(1, 0, 2)  # [B, N, 3] with N outermost
    feats = np.ascontiguousarray(dense.features[:, :, ::-1])[:, :, ::-1]  # negative channel stride
    out = robocache.voxelize(pts, features=feats, lengths=dense.lengths, grid=GRID, voxel_size=VOXEL, origin=ORIGIN,
                             mode="max")
    assert_voxels(out, ref, "max", feats)


@needs_torch
def test_strided_torch_inputs(make_vox):
    case = make_vox("dense", "float32", "sum", B=3, N=70, F=2)
    ref, _ = case.reference()
    big = torch.zeros(3, 70, 8)
    big[:, :, 1:4] = torch.from_numpy(case.points)
    big[:, :, 5:7] = torch.from_numpy(case.features)
    out = robocache.voxelize(big[:, :, 1:4], features=big[:, :, 5:7], lengths=torch.from_numpy(case.lengths),
                             grid=GRID, voxel_size=VOXEL, origin=ORIGIN, mode="sum")
    assert_voxels(out, ref, "sum", case.features)
    lengths_strided = torch.from_numpy(np.repeat(case.lengths, 2))[::2]
    out = robocache.voxelize(big[:, :, 1:4], features=big[:, :, 5:7], lengths=lengths_strided, grid=GRID,
                             voxel_size=VOXEL, origin=ORIGIN, mode="sum")
    assert_voxels(out, ref, "sum", case.features)


# ----------------------------------------------------------------------------
# determinism


@pytest.fixture
def restore_threads():
    n = robocache.get_num_threads()
    yield
    robocache.set_num_threads(n)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_bitwise_identical_runs_and_thread_counts(fw, mode, make_vox, restore_threads):
    case = make_vox("ragged", "float32", mode, B=24, N=3000, F=3)
    a = case.arrays(fw)
    results = []
    for n in (1, 2, 4, 7):
        robocache.set_num_threads(n)
        for _ in range(2):
            out = to_numpy(robocache.voxelize(a["points"], **case.kwargs(a)))
            results.append(np.ascontiguousarray(out).view(np.uint8).copy())
    for r in results[1:]:
        assert np.array_equal(r, results[0]), f"results differ between runs or thread counts {case.msg}"
    case.assert_matches(robocache.voxelize(a["points"], **case.kwargs(a)), case.reference()[0], a["points"])


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_deterministic_false_is_close(fw, mode, make_vox):
    case = make_vox("dense", "float32", mode, B=3, N=2000, F=2)
    a = case.arrays(fw)
    out = robocache.voxelize(a["points"], **case.kwargs(a, deterministic=False))
    case.assert_matches(out, case.reference()[0], a["points"], deterministic=False)


def test_mean_result_is_batch_invariant(make_vox):
    """A cloud's result does not depend on the other clouds of the batch (the
    fixed-point scale is per cloud and channel)."""
    case = make_vox("ragged", "float32", "mean", B=4, N=200)
    out = robocache.voxelize(case.points, **case.kwargs(case.arrays("numpy")))
    off = case.offsets
    for b in range(4):
        alone = robocache.voxelize(case.points[off[b]:off[b + 1]], features=case.features[off[b]:off[b + 1]],
                                   grid=GRID, voxel_size=VOXEL, origin=ORIGIN, mode="mean")
        assert np.array_equal(out[b].view(np.uint8), alone.view(np.uint8))


# ----------------------------------------------------------------------------
# real data: a KITTI lidar scan


@pytest.fixture(scope="module")
def kitti(DATA):
    path = DATA / "pointclouds" / "kitti_000008.bin"
    if not path.is_file():
        pytest.skip(f"KITTI scan {path} is not present")
    scan = np.fromfile(path, np.float32).reshape(-1, 4)
    assert scan.shape == (17238, 4)
    return scan


KITTI = dict(grid=(400, 400, 30), voxel_size=0.2, origin=(0.0, -40.0, -3.0))  # x 0..80, y -40..40, z -3..3


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
def test_kitti_scan(fw, mode, kitti):
    pts, refl = kitti[:, :3], kitti[:, 3:]  # strided views of the [N, 4] file layout
    kw = dict(KITTI, mode=mode)
    if mode in FEATURE_MODES:
        kw["features"] = as_fw(refl, fw) if fw == "torch" else refl
    out, dropped = robocache.voxelize(as_fw(pts, fw) if fw == "torch" else pts, return_dropped=True, **kw)
    ref, ref_dropped = voxelize_ref(pts, features=refl if mode in FEATURE_MODES else None, **KITTI, mode=mode)
    assert_voxels(out, ref, mode, refl, msg=f"KITTI {mode}")
    assert int(dropped) == int(ref_dropped)
    assert 0 < int(dropped) < len(pts)  # the scan covers more than the ego box
    if mode == "count":
        assert int(to_numpy(out).sum()) == len(pts) - int(dropped)


def test_kitti_batch_anisotropic(kitti):
    """Two copies of the scan (one mirrored in y) in a ragged batch, anisotropic
    voxels on a non-cubic grid."""
    a = kitti[:, :3]
    b = a * np.array([1, -1, 1], np.float32)
    pts = np.concatenate([a, b])
    f = np.concatenate([kitti[:, 3:], kitti[:, 3:] * 2]).astype(np.float32)
    off = np.array([0, len(a), 2 * len(a)], np.int64)
    kw = dict(grid=(352, 400, 12), voxel_size=(0.25, 0.2, 0.5), origin=(0.0, -40.0, -3.0), mode="mean")
    out = robocache.voxelize(pts, features=f, offsets=off, **kw)
    ref, _ = voxelize_ref(pts, features=f, offsets=off, **kw)
    assert_voxels(out, ref, "mean", f)


# ----------------------------------------------------------------------------
# API behaviour


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_out_is_written_in_place(fw, make_vox):
    case = make_vox("ragged", "float32", "mean")
    a = case.arrays(fw)
    ref, _ = case.reference()
    buf = poisoned(ref.shape, "float32", a["points"])
    alias = buf[:]
    res = robocache.voxelize(a["points"], **case.kwargs(a, out=buf))
    assert res is buf
    assert_voxels(alias, ref, "mean", case.features)
    out = robocache.voxelize(a["points"], **case.kwargs(a))
    for k in ("points", "features"):
        assert not np.shares_memory(to_numpy(out), to_numpy(a[k]))


@needs_torch
def test_mixed_numpy_and_torch_arguments_rejected(make_vox):
    """DESIGN: arrays from different frameworks are rejected with the argument named."""
    case = make_vox("ragged", "float32", "sum")
    n, t = case.arrays("numpy"), case.arrays("torch")
    with pytest.raises(TypeError, match=r"features is a torch array but points is a numpy array"):
        robocache.voxelize(n["points"], features=t["features"], offsets=n["offsets"], grid=GRID, voxel_size=VOXEL,
                           origin=ORIGIN, mode="sum")
    with pytest.raises(TypeError, match=r"offsets is a numpy array but points is a torch array"):
        robocache.voxelize(t["points"], features=t["features"], offsets=n["offsets"], grid=GRID, voxel_size=VOXEL,
                           origin=ORIGIN, mode="sum")


def test_read_only_inputs(make_vox):
    case = make_vox("dense", "float32", "max")
    a = case.arrays("numpy")
    for v in a.values():
        if v is not None:
            v.flags.writeable = False
    case.assert_matches(robocache.voxelize(a["points"], **case.kwargs(a)), case.reference()[0], a["points"])


@pytest.mark.parametrize("check", [None, True, False])
def test_check_argument_accepted_on_cpu(check, make_vox):
    case = make_vox("ragged", "float32", "count")
    a = case.arrays("numpy")
    case.assert_matches(robocache.voxelize(a["points"], **case.kwargs(a, check=check)), case.reference()[0],
                        a["points"])


def test_docstring_and_signature():
    doc = robocache.voxelize.__doc__
    for word in ("points", "features", "lengths", "offsets", "grid", "voxel_size", "origin", "mode", "dtype",
                 "deterministic", "return_dropped", "out[b, x, y, z]"):
        assert word in doc, word


def test_concurrent_calls_from_python_threads(make_vox, restore_threads):
    robocache.set_num_threads(2)
    cases = [make_vox("ragged", "float32", m, B=16, N=400) for m in ("mean", "count", "max", "sum")]
    refs = [c.reference()[0] for c in cases]
    failures = []

    def work(k):
        try:
            a = cases[k].arrays("numpy")
            for i in range(40):
                if i % 4 == k:
                    try:
                        robocache.voxelize(np.zeros((3, 2), np.float32), grid=GRID, voxel_size=VOXEL, origin=ORIGIN)
                    except ValueError as e:
                        if "points" not in str(e):
                            failures.append(f"thread {k}: {e!r} does not name points")
                    else:
                        failures.append(f"thread {k}: no error")
                out = robocache.voxelize(a["points"], **cases[k].kwargs(a))
                assert_voxels(out, refs[k], cases[k].mode, cases[k].features)
        except Exception as e:  # noqa: BLE001 - reported below with its thread
            failures.append(f"thread {k}: {e!r}")

    run_in_threads(work, [(k,) for k in range(4)])
    assert not failures, failures[:5]


# ----------------------------------------------------------------------------
# bad input: the documented exception, naming the argument; inputs untouched;
# the next good call still works


P3 = np.zeros((2, 5, 3), np.float32)
F2 = np.zeros((2, 5, 2), np.float32)
GOOD = dict(grid=GRID, voxel_size=VOXEL, origin=ORIGIN)


def call(points=P3, **kw):
    args = dict(GOOD)
    args.update(kw)
    return robocache.voxelize(points, **args)


BAD = [
    # (id, exception, message regex, kwargs)
    ("last-dim-2", ValueError, POINTS, dict(points=np.zeros((2, 5, 2), np.float32))),
    ("last-dim-4", ValueError, POINTS, dict(points=np.zeros((5, 4), np.float32))),
    ("points-1d", ValueError, POINTS, dict(points=np.zeros(9, np.float32))),
    ("points-4d", ValueError, POINTS, dict(points=np.zeros((1, 2, 5, 3), np.float32))),
    ("points-int", TypeError, POINTS, dict(points=np.zeros((2, 5, 3), np.int32))),
    ("points-list", TypeError, POINTS, dict(points=[[0.0, 0.0, 0.0]])),
    ("voxel-zero", ValueError, VOXEL_RE, dict(voxel_size=0.0)),
    ("voxel-negative", ValueError, VOXEL_RE, dict(voxel_size=(0.5, -0.25, 1.0))),
    ("voxel-nan", ValueError, VOXEL_RE, dict(voxel_size=float("nan"))),
    ("voxel-inf", ValueError, VOXEL_RE, dict(voxel_size=(0.5, float("inf"), 1.0))),
    ("voxel-len2", TypeError, VOXEL_RE, dict(voxel_size=(0.5, 0.25))),
    ("voxel-str", TypeError, VOXEL_RE, dict(voxel_size="0.5")),
    ("origin-len2", TypeError, ORIGIN_RE, dict(origin=(0.0, 0.0))),
    ("origin-scalar", TypeError, ORIGIN_RE, dict(origin=0.0)),
    ("origin-nan", ValueError, ORIGIN_RE, dict(origin=(0.0, float("nan"), 0.0))),
    ("grid-zero", ValueError, GRID_RE, dict(grid=(4, 0, 4))),
    ("grid-negative", ValueError, GRID_RE, dict(grid=-3)),
    ("grid-float", TypeError, GRID_RE, dict(grid=(4.0, 4, 4))),
    ("grid-len2", TypeError, GRID_RE, dict(grid=(4, 4))),
    ("mode-unknown", ValueError, MODE_RE, dict(mode="median")),
    ("mode-not-str", TypeError, MODE_RE, dict(mode=1)),
    ("sum-no-features", ValueError, FEATURES, dict(mode="sum")),
    ("mean-no-features", ValueError, FEATURES, dict(mode="mean")),
    ("max-no-features", ValueError, FEATURES, dict(mode="max")),
    ("features-with-occupancy", ValueError, FEATURES, dict(features=F2)),
    ("features-wrong-n", ValueError, FEATURES, dict(mode="mean", features=np.zeros((2, 4, 2), np.float32))),
    ("features-no-channel-dim", ValueError, FEATURES, dict(mode="mean", features=np.zeros((2, 5), np.float32))),
    ("features-int", TypeError, FEATURES, dict(mode="sum", features=np.zeros((2, 5, 2), np.int64))),
    ("offsets-not-from-0", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([1, 5], np.int64))),
    ("offsets-decreasing", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([0, 4, 2, 5], np.int64))),
    ("offsets-short", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([0, 2, 4], np.int64))),
    ("offsets-past-end", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([0, 2, 9], np.int64))),
    ("offsets-int32", TypeError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([0, 5], np.int32))),
    ("offsets-2d", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([[0, 5]], np.int64))),
    ("offsets-empty", ValueError, OFFSETS, dict(points=np.zeros((5, 3), np.float32), offsets=np.zeros(0, np.int64))),
    ("offsets-with-dense", ValueError, POINTS, dict(offsets=np.array([0, 5], np.int64))),
    ("offsets-and-lengths", ValueError, LENGTHS, dict(points=np.zeros((5, 3), np.float32), offsets=np.array([0, 5], np.int64),
                                                      lengths=np.array([5], np.int64))),
    ("lengths-over-n", ValueError, LENGTHS, dict(lengths=np.array([5, 6], np.int64))),
    ("lengths-negative", ValueError, LENGTHS, dict(lengths=np.array([-1, 2], np.int64))),
    ("lengths-wrong-b", ValueError, LENGTHS, dict(lengths=np.array([5, 5, 5], np.int64))),
    ("lengths-float", TypeError, LENGTHS, dict(lengths=np.array([5.0, 5.0]))),
    ("lengths-single-cloud", ValueError, LENGTHS, dict(points=np.zeros((5, 3), np.float32), lengths=np.array([5], np.int64))),
    ("grid-too-large", (ValueError, MemoryError), GRID_RE, dict(grid=(100_000, 100_000, 100_000))),
    ("grid-far-too-large", (ValueError, MemoryError), GRID_RE, dict(grid=(2**40, 2**40, 2**40))),
    ("grid-too-large-features", (ValueError, MemoryError), GRID_RE,
     dict(grid=(20_000, 20_000, 20_000), mode="mean", features=F2)),
    ("dtype-unknown", TypeError, DTYPE_RE, dict(dtype="float8")),
    ("dtype-int-occupancy", TypeError, DTYPE_RE, dict(dtype="int32")),
    ("dtype-float-count", TypeError, DTYPE_RE, dict(mode="count", dtype="float32")),
    ("dtype-half-mean", TypeError, DTYPE_RE, dict(mode="mean", features=F2, dtype="float16")),
    ("out-dtype", TypeError, OUT, dict(out=np.zeros((2,) + GRID, np.float64))),
    ("out-dtype-vs-dtype", TypeError, OUT, dict(dtype="uint8", out=np.zeros((2,) + GRID, np.float32))),
    ("out-dtype-count", TypeError, OUT, dict(mode="count", out=np.zeros((2,) + GRID, np.int64))),
    ("out-shape", ValueError, OUT, dict(out=np.zeros((2,) + GRID[::-1], np.float32))),
    ("out-shape-features", ValueError, OUT, dict(mode="sum", features=F2, out=np.zeros((2,) + GRID, np.float32))),
    ("out-not-contiguous", ValueError, OUT, dict(out=np.zeros((2, 7, 5, 6), np.float32)[..., ::2])),
    ("out-not-array", TypeError, OUT, dict(out=[0.0])),
    ("unknown-keyword", TypeError, "colour", dict(colour="red")),
]


@pytest.mark.parametrize("exc,match,kw", [pytest.param(e, m, k, id=i) for i, e, m, k in BAD])
def test_bad_input_raises_clearly(exc, match, kw):
    inputs = {k: v for k, v in kw.items() if isinstance(v, np.ndarray)}
    before = snapshot(inputs)
    with pytest.raises(exc, match=match):
        call(**kw)
    assert snapshot(inputs) == before
    assert call().shape == (2,) + GRID  # the process and the module are fine


def test_out_read_only():
    buf = np.zeros((2,) + GRID, np.float32)
    buf.flags.writeable = False
    with pytest.raises(ValueError, match=OUT):
        call(out=buf)
    assert (buf == 0).all()


def test_argument_errors():
    with pytest.raises(TypeError, match="positional"):
        robocache.voxelize(P3, GRID, VOXEL, ORIGIN)
    for missing in ("grid", "voxel_size", "origin"):
        kw = dict(GOOD)
        del kw[missing]
        with pytest.raises(TypeError, match=missing):
            robocache.voxelize(P3, **kw)
    with pytest.raises(TypeError, match="points"):
        robocache.voxelize(grid=GRID, voxel_size=VOXEL, origin=ORIGIN)
    with pytest.raises(TypeError, match="multiple"):
        robocache.voxelize(P3, points=P3, **GOOD)


@needs_torch
def test_bad_torch_out():
    t = torch.zeros(2, 5, 3)
    with pytest.raises(TypeError, match=OUT):
        robocache.voxelize(t, out=torch.zeros((2,) + GRID, dtype=torch.float16), **GOOD)
    with pytest.raises(ValueError, match=OUT):
        robocache.voxelize(t, out=torch.zeros((2,) + GRID).transpose(1, 2), **GOOD)
    with pytest.raises((ValueError, MemoryError), match=GRID_RE):
        robocache.voxelize(t, grid=(100_000, 100_000, 100_000), voxel_size=0.1, origin=(0, 0, 0))


def test_large_grid_that_fits(rng):
    """A big but reasonable grid (B=2, 256 x 192 x 32 float32, 25 MB) works and
    is fully zeroed (poisoned out=)."""
    pts = rng.uniform(-1, 30, (2, 5000, 3)).astype(np.float32)
    grid = (256, 192, 32)
    buf = poisoned((2,) + grid, "float32", pts)
    robocache.voxelize(pts, grid=grid, voxel_size=(0.1, 0.125, 0.75), origin=(0, 0, 0), out=buf)
    ref, _ = voxelize_ref(pts, grid=grid, voxel_size=(0.1, 0.125, 0.75), origin=(0, 0, 0))
    assert_equal(buf, ref)
