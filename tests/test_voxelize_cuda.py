"""robocache.voxelize on CUDA: reference == CPU kernel == CUDA kernel, the
caller's stream, no host sync, devices, memory.

In deterministic mode (the default) the CUDA kernels and the CPU kernel share
csrc/voxelize_math.h (float64 binning, 64-bit fixed-point sums, order-preserving
max keys), so every mode must agree bit for bit with the CPU, and be bitwise
reproducible run to run however the atomics interleave.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from gpu_gate import hold  # noqa: E402
from reference import assert_equal, poisoned, to_numpy, voxelize_ref  # noqa: E402
from test_voxelize import (FEATURE_MODES, FLOATS, GRID, KITTI, MODES, ORIGIN, VOXEL, VoxCase, assert_voxels,  # noqa: E402,F401
                           in_dtype, kitti, make_features, make_points, make_vox)

pytestmark = pytest.mark.cuda


def on(a, device):
    """numpy -> torch on device (bfloat16 handled by VoxCase.arrays)."""
    return None if a is None else a.to(device)


def gpu_and_cpu(case: VoxCase, device="cuda", **more):
    """(cuda result, cpu result) of the same call, each (out, dropped) as numpy."""
    t = case.arrays("torch")
    g = {k: on(v, device) for k, v in t.items()}
    go, gd = robocache.voxelize(g["points"], **case.kwargs(g, return_dropped=True, **more))
    assert go.device == g["points"].device and gd.device == g["points"].device
    co, cd = robocache.voxelize(t["points"], **case.kwargs(t, return_dropped=True, **more))
    return (go, gd), (co, cd)


def assert_bitwise(a, b, msg=""):
    a, b = np.ascontiguousarray(to_numpy(a)), np.ascontiguousarray(to_numpy(b))
    assert a.shape == b.shape and a.dtype == b.dtype, f"{a.shape} {a.dtype} vs {b.shape} {b.dtype} {msg}"
    bad = a.view(np.uint8) != b.view(np.uint8)
    assert not bad.any(), f"{int(bad.sum())} bytes differ between CUDA and CPU {msg}"


def bitwise_nan_canonical(a, b, msg=""):
    """Bitwise, except that NaN payloads may differ only if both are NaN."""
    a, b = to_numpy(a), to_numpy(b)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        assert np.array_equal(nan, np.isnan(b)), f"NaN voxels differ {msg}"
        a, b = np.where(nan, 0, a), np.where(nan, 0, b)
    assert_bitwise(a, b, msg)


def cuda_equals_cpu_and_reference(case):
    """CUDA == CPU bit for bit and == the reference, dropped counts too. Returns (out, ref)."""
    (go, gd), (co, cd) = gpu_and_cpu(case)
    bitwise_nan_canonical(go, co, case.msg)
    assert_equal(to_numpy(gd).reshape(-1), to_numpy(cd).reshape(-1), msg="dropped " + case.msg)
    ref, ref_dropped = case.reference()
    case.assert_matches(go, ref, go)
    assert_equal(to_numpy(gd).reshape(-1), np.reshape(ref_dropped, -1), msg="dropped " + case.msg)
    return go, ref


# ----------------------------------------------------------------------------
# CUDA == CPU (bitwise) == reference


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pdtype", FLOATS)
@pytest.mark.parametrize("form", ["dense", "ragged", "single"])
def test_cuda_equals_cpu_and_reference(form, pdtype, mode, make_vox):
    cuda_equals_cpu_and_reference(make_vox(form, pdtype, mode, fdtype=pdtype, B=6, N=700))


@pytest.mark.parametrize("mode", FEATURE_MODES)
@pytest.mark.parametrize("fdtype,dtype", [("float32", None), ("float64", None), ("float32", "float64"),
                                          ("float64", "float32"), ("float16", None), ("bfloat16", None)])
def test_cuda_feature_dtypes(mode, fdtype, dtype, make_vox):
    case = make_vox("ragged", "float32", mode, fdtype=fdtype, dtype=dtype, B=5, N=900, F=5)
    (go, _), (co, _) = gpu_and_cpu(case)
    bitwise_nan_canonical(go, co, case.msg)
    case.assert_matches(go, case.reference()[0], go)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "uint8", "bool"])
def test_cuda_occupancy_dtypes(dtype, make_vox):
    case = make_vox("dense", "float32", "occupancy", dtype=dtype)
    (go, _), (co, _) = gpu_and_cpu(case)
    assert_bitwise(go, co, case.msg)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_cuda_count_dtypes(dtype, make_vox):
    case = make_vox("dense", "float32", "count", dtype=dtype, N=3000)
    (go, _), (co, _) = gpu_and_cpu(case)
    assert_bitwise(go, co, case.msg)


@pytest.mark.parametrize("mode", MODES)
def test_cuda_heavy_collisions_are_deterministic(mode, make_vox):
    """Thousands of points per voxel: atomics interleave differently every run,
    the bits must not change, and must equal the CPU's."""
    case = make_vox("dense", "float32", mode, B=4, N=60_000, F=3, lengths=False, grid=(3, 2, 2),
                    voxel_size=(1.5, 2.5, 1.0))
    t = case.arrays("torch")
    g = {k: on(v, "cuda") for k, v in t.items()}
    runs = [robocache.voxelize(g["points"], **case.kwargs(g)) for _ in range(5)]
    for r in runs[1:]:
        assert_bitwise(r, runs[0], case.msg)
    cpu = robocache.voxelize(t["points"], **case.kwargs(t))
    bitwise_nan_canonical(runs[0], cpu, case.msg)
    case.assert_matches(runs[0], case.reference()[0], runs[0])


@pytest.mark.parametrize("mode", MODES)
def test_cuda_deterministic_false_is_close(mode, make_vox):
    case = make_vox("dense", "float32", mode, B=4, N=20_000, F=2, grid=(4, 3, 2), voxel_size=(1.0, 1.5, 2.0))
    t = case.arrays("torch")
    g = {k: on(v, "cuda") for k, v in t.items()}
    out = robocache.voxelize(g["points"], **case.kwargs(g, deterministic=False))
    case.assert_matches(out, case.reference()[0], out, deterministic=False)


@pytest.mark.parametrize("mode", MODES)
def test_cuda_kitti(mode, kitti):
    pts = torch.from_numpy(kitti)[:, :3]  # strided view of the [N, 4] layout
    refl = torch.from_numpy(kitti)[:, 3:]
    kw = dict(KITTI, mode=mode, return_dropped=True)
    if mode in FEATURE_MODES:
        kw["features"] = refl
    co, cd = robocache.voxelize(pts, **kw)
    if mode in FEATURE_MODES:
        kw["features"] = refl.cuda()
    go, gd = robocache.voxelize(pts.cuda(), **kw)
    assert_bitwise(go, co, f"KITTI {mode}")
    assert int(gd) == int(cd)
    # a 16-scan batch (as benchmarked), contiguous points: the 16-byte load path
    B = 16
    batch = torch.from_numpy(np.ascontiguousarray(kitti[:, :3])).cuda().expand(B, -1, -1).contiguous()
    feats = refl.cuda().expand(B, -1, -1).contiguous()
    kwb = dict(KITTI, mode=mode)
    if mode in FEATURE_MODES:
        kwb["features"] = feats
    out = robocache.voxelize(batch, **kwb)
    for b in (0, B - 1):
        assert_bitwise(out[b], go, f"KITTI batch {mode}")


BENCH = [  # the benchmark configurations (issue 3), smaller where the CPU would be slow
    ("occupancy", 8, 4096, 64, 0), ("mean", 8, 4096, 64, 4), ("occupancy", 32, 16384, 128, 0),
    ("mean", 8, 16384, 128, 4), ("occupancy", 4, 65536, 256, 0),
]


@pytest.mark.parametrize("mode,B,N,G,F", BENCH, ids=[f"{m}-B{b}-N{n}-{g}^3" for m, b, n, g, _ in BENCH])
def test_cuda_benchmark_configs(mode, B, N, G, F, rng):
    pts = torch.from_numpy(rng.uniform(-0.05, 1.05, (B, N, 3)).astype(np.float32))
    kw = dict(grid=(G, G, G), voxel_size=1.0 / G, origin=(0.0, 0.0, 0.0), mode=mode)
    if F:
        kw["features"] = torch.from_numpy(rng.standard_normal((B, N, F)).astype(np.float32))
    co = robocache.voxelize(pts, **kw)
    if F:
        kw["features"] = kw["features"].cuda()
    go = robocache.voxelize(pts.cuda(), **kw)
    assert_bitwise(go, co, f"{mode} B{B} N{N} {G}^3")


@pytest.mark.parametrize("pdtype", ["float64", "float32"])
def test_cuda_binning_at_cell_faces(pdtype, rng):
    """Coordinates a few ulps either side of every cell face, for sizes that are not powers of
    two: the GPU's float64 binning (csrc/voxelize_math.h, explicit _rn intrinsics so nvcc
    cannot contract or approximate) must put each point in the CPU's voxel."""
    size, origin, grid = np.array([0.1, 1 / 3, 0.07]), np.array([-0.35, 0.2, -1.1]), (40, 30, 50)
    k = rng.integers(-2, np.array(grid) + 3, (100_000, 3))
    p = origin + k * size
    p = p + rng.integers(-4, 5, p.shape) * np.spacing(p)
    p = np.concatenate([p, rng.uniform(origin - 1, origin + size * grid + 1, (100_000, 3))])
    pts = torch.from_numpy(p.astype(pdtype)).reshape(4, -1, 3)
    kw = dict(grid=grid, voxel_size=tuple(size), origin=tuple(origin), mode="count")
    co = robocache.voxelize(pts, **kw)
    go = robocache.voxelize(pts.cuda(), **kw)
    assert_bitwise(go, co, pdtype)
    assert_equal(co, voxelize_ref(pts.numpy(), **kw)[0])


@pytest.mark.parametrize("layout", ["contiguous", "unaligned", "strided", "odd-n", "transposed"])
def test_cuda_point_layouts(layout, make_vox):
    """The 16-byte vector loads apply only to contiguous, aligned float32 points;
    every other layout takes the scalar path and must give the same bits."""
    case = make_vox("dense", "float32", "sum", B=5, N=301 if layout == "odd-n" else 300, F=2)
    t = case.arrays("torch")
    pts = t["points"].cuda()
    if layout == "unaligned":
        flat = torch.cat([torch.zeros(3, device="cuda"), pts.reshape(-1)])
        pts = flat[3:].reshape(pts.shape)  # 12 bytes past a 16-byte boundary
        assert pts.data_ptr() % 16 != 0
    elif layout == "strided":
        pts = torch.cat([pts, torch.zeros_like(pts[..., :1])], -1)[..., :3]
    elif layout == "transposed":
        pts = pts.transpose(0, 1).contiguous().transpose(0, 1)
    go = robocache.voxelize(pts, **case.kwargs({k: on(v, "cuda") for k, v in t.items() if k != "points"}))
    co = robocache.voxelize(t["points"], **case.kwargs(t))
    assert_bitwise(go, co, layout)


def test_cuda_ragged_unaligned_offsets(rng):
    """Clouds starting at any point index (groups of 4 straddle clouds)."""
    n = np.array([1, 2, 3, 0, 5, 7, 4, 1, 0, 13], np.int64)
    off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    pts = rng.uniform(-2, 4, (int(off[-1]), 3)).astype(np.float32)
    kw = dict(grid=(5, 4, 3), voxel_size=(1.0, 1.5, 2.0), origin=(-1.0, -1.0, -1.0), mode="count")
    co = robocache.voxelize(torch.from_numpy(pts), offsets=torch.from_numpy(off), **kw)
    go = robocache.voxelize(torch.from_numpy(pts).cuda(), offsets=torch.from_numpy(off).cuda(), **kw)
    assert_bitwise(go, co)
    assert_equal(go, voxelize_ref(pts, offsets=off, **kw)[0])


@pytest.mark.parametrize("mode", MODES)
def test_cuda_empty_and_zero_sizes(mode, make_vox):
    for case in (make_vox("dense", "float32", mode, B=3, N=0, lengths=False),
                 make_vox("ragged", "float32", mode, B=4, N=0),
                 make_vox("ragged", "float32", mode, B=0),
                 make_vox("single", "float32", mode, N=0),
                 make_vox("dense", "float32", mode, B=5, N=50)):  # lengths with empty clouds
        (go, gd), (co, cd) = gpu_and_cpu(case)
        assert_bitwise(go, co, case.msg)
        assert_equal(to_numpy(gd).reshape(-1), to_numpy(cd).reshape(-1))
    # zero feature channels
    pts = torch.rand(2, 10, 3, device="cuda")
    out, dropped = robocache.voxelize(pts, features=torch.zeros(2, 10, 0, device="cuda"), grid=GRID,
                                      voxel_size=VOXEL, origin=ORIGIN, mode="sum", return_dropped=True)
    assert out.shape == (2, 0) + GRID and dropped.shape == (2,)


def test_cuda_out_poison_written_everywhere(make_vox):
    for mode in MODES:
        case = make_vox("ragged", "float32", mode)
        t = case.arrays("torch")
        g = {k: on(v, "cuda") for k, v in t.items()}
        ref, _ = case.reference()
        buf = poisoned(ref.shape, case.out_dtype, g["points"])
        assert robocache.voxelize(g["points"], **case.kwargs(g, out=buf)) is buf
        case.assert_matches(buf, ref, buf)


# ----------------------------------------------------------------------------
# the CUDA paths of cuda/voxelize.cu on grids bigger than GRID. Occupancy of a grid under
# 32 MiB: blocks of 2048-65536 voxels set shared bits and write their slab, unless a slab would
# write under 6 bytes per point of its cloud even at 65536 voxels (then memset + scatter). V a
# multiple of 16 takes the 16-byte stores, an odd V the scalar ones. sum/mean/max: per-point
# slots, few or many channels, clouds of a few thousand points or of 70k.

GRID_X16 = (37, 20, 12)   # V = 8880 = 16 * 555
GRID_ODD = (37, 21, 13)   # V = 10101
PATH_VOXEL, PATH_ORIGIN = (0.05, 0.1, 0.025), (-1.0, 0.5, -0.2)


def path_case(rng, mode, form, *, B, N, F=3, grid=GRID_X16, dtype=None):
    """Dense clouds padded past lengths (in-grid points, NaN features), or ragged with an empty
    cloud; points on faces, outside, non-finite; negative features."""
    pts_of = lambda n: make_points(rng, n, "float32", grid, PATH_VOXEL, PATH_ORIGIN)  # noqa: E731
    extra = {}
    if form == "ragged":
        n = rng.integers(N // 2, N + 1, B)
        n[0] = 0
        extra["offsets"] = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        pts, feats = pts_of(int(n.sum())), make_features(rng, int(n.sum()), F, "float32", True)
    else:
        pts = np.stack([pts_of(N) for _ in range(B)])
        feats = np.stack([make_features(rng, N, F, "float32", True) for _ in range(B)])
        n = rng.integers(N // 2, N + 1, B).astype(np.int64)
        n[-1] = N
        for b in range(B):
            pts[b, n[b]:] = np.asarray(PATH_ORIGIN, np.float32)
            feats[b, n[b]:] = np.nan
        extra["lengths"] = n
    return VoxCase(points=pts, pdtype="float32", mode=mode, seed=rng.seed,
                   features=feats if mode in FEATURE_MODES else None, grid=grid,
                   voxel_size=PATH_VOXEL, origin=PATH_ORIGIN, dtype=dtype, **extra)


def check_path(case):
    """As cuda_equals_cpu_and_reference, and a poisoned out= is fully written."""
    go, ref = cuda_equals_cpu_and_reference(case)
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    buf = poisoned(ref.shape, case.out_dtype, g["points"])
    robocache.voxelize(g["points"], **case.kwargs(g, out=buf))
    bitwise_nan_canonical(buf, go, "out= " + case.msg)


@pytest.mark.parametrize("grid", [GRID_X16, GRID_ODD], ids=["x16", "odd"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "uint8", "bool"])
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_cuda_occupancy_slabs(form, dtype, grid, rng):
    """B=5 clouds of <= 2000 points: float32 slabs of 4096 voxels (3 per cloud), uint8 one."""
    check_path(path_case(rng, "occupancy", form, B=5, N=2000, grid=grid, dtype=dtype))


@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_cuda_occupancy_scatter_fallback(form, rng):
    """50k points in an 84000-voxel grid: a 65536-voxel float32 slab writes 256 KiB < 6 bytes
    x 50k points, so the memset + scatter path runs."""
    check_path(path_case(rng, "occupancy", form, B=2, N=50_000, grid=(70, 40, 30)))


@pytest.mark.parametrize("grid", [GRID_X16, GRID_ODD], ids=["x16", "odd"])
@pytest.mark.parametrize("mode", FEATURE_MODES)
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_cuda_feature_modes_bigger_grids(form, mode, grid, rng):
    check_path(path_case(rng, mode, form, B=5, N=3000, grid=grid))


@pytest.mark.parametrize("mode", FEATURE_MODES)
def test_cuda_feature_modes_float64_out(mode, rng):
    check_path(path_case(rng, mode, "dense", B=3, N=3000, F=5, dtype="float64"))


@pytest.mark.parametrize("mode", FEATURE_MODES)
@pytest.mark.parametrize("N,F", [(400, 48), (70_000, 2)], ids=["48 channels", "70k points"])
def test_cuda_feature_modes_many_channels_or_points(N, F, mode, rng):
    check_path(path_case(rng, mode, "dense", B=2, N=N, F=F))


# ----------------------------------------------------------------------------
# occupancy of big grids: outputs of RC_VOX_BITMAP_MIN bytes or more take the L2
# bitmap path (cuda/voxelize.cu: atomic OR into a B*X*Y*Z-bit bitmap, then one
# kernel expands it into the whole output with 16-byte stores, a scalar tail,
# and a scalar loop for a misaligned out=). Same bits as the CPU, every dtype.

BITMAP_MIN = 32 << 20  # RC_VOX_BITMAP_MIN, csrc/voxelize_math.h
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "uint8": 1, "bool": 1}
BIG_VOXEL = (0.05, 0.1, 0.025)  # anisotropic; the grids below are never cubic unless a test says so
BIG_ORIGIN = (-4.0, -5.0, -1.5)


def big_points(rng, n, grid, voxel, origin, pdtype):
    """[n, 3]: half from make_points over the whole grid (faces, NaN/inf, far
    points: mostly lone bits), half packed into a 4 x 4 x 160-voxel rod along z
    (the fastest axis), so that runs of whole 32-voxel bitmap words are set too."""
    m = n // 2
    g = np.asarray(grid, np.int64)
    v, o = np.broadcast_to(np.asarray(voxel, np.float64), (3,)), np.asarray(origin, np.float64)
    ext = np.minimum([4, 4, 160], g)
    corner = rng.integers(0, g - ext + 1)
    box = o + (corner + rng.uniform(0, ext, (m, 3))) * v
    p = np.concatenate([make_points(rng, n - m, pdtype, grid, voxel, origin), in_dtype(box, pdtype)])
    rng.shuffle(p)
    return p


def big_case(rng, form, grid, *, B=4, N=40_000, dtype=None, pdtype="float32", voxel=BIG_VOXEL,
             origin=BIG_ORIGIN):
    """An occupancy VoxCase over a big grid. Dense: lengths with an empty cloud
    (B > 1) and in-grid padding after them; ragged: an empty cloud."""
    extra = {}
    if form == "dense":
        n = rng.integers(0, N + 1, B)
        n[-1] = N
        if B > 1:
            n[0] = 0
        rng.shuffle(n)
        pts = np.stack([big_points(rng, N, grid, voxel, origin, pdtype) for _ in range(B)])
        pad = in_dtype(np.asarray(origin) + 0.01 * np.asarray(voxel), pdtype)  # voxel (0,0,0) if read
        for b in range(B):
            pts[b, n[b]:] = pad
        extra["lengths"] = n.astype(np.int64)
    elif form == "ragged":
        n = rng.integers(0, N + 1, B)
        n[rng.integers(0, B)] = 0
        extra["offsets"] = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        pts = big_points(rng, int(n.sum()), grid, voxel, origin, pdtype)
    else:
        assert form == "single" and B == 1
        pts = big_points(rng, N, grid, voxel, origin, pdtype)
    case = VoxCase(points=pts, pdtype=pdtype, mode="occupancy", seed=rng.seed, grid=grid, voxel_size=voxel,
                   origin=origin, dtype=dtype, **extra)
    assert B * math.prod(grid) * ITEMSIZE[case.out_dtype] >= BITMAP_MIN, "too small for the bitmap path"
    return case


def check_big(case):
    """CUDA (fresh output, then a poisoned out=) == CPU bit for bit == reference,
    dropped counts too. Returns the CUDA arrays."""
    t = case.arrays("torch")
    g = {k: on(v, "cuda") for k, v in t.items()}
    ref, ref_dropped = case.reference()
    co, cd = robocache.voxelize(t["points"], **case.kwargs(t, return_dropped=True))
    go, gd = robocache.voxelize(g["points"], **case.kwargs(g, return_dropped=True))
    assert go.device == g["points"].device
    assert_bitwise(go, co, case.msg)
    case.assert_matches(go, ref, go)
    assert_equal(to_numpy(gd).reshape(-1), np.reshape(ref_dropped, -1), msg="dropped " + case.msg)
    assert_equal(to_numpy(cd).reshape(-1), np.reshape(ref_dropped, -1), msg="CPU dropped " + case.msg)
    buf = poisoned(ref.shape, case.out_dtype, g["points"])
    assert robocache.voxelize(g["points"], **case.kwargs(g, out=buf)) is buf
    assert_bitwise(buf, co, "out= " + case.msg)
    return g, go


BIG_DTYPES = [  # (out dtype, B, grid): >= 32 MiB each; odd B*X*Y*Z leave a tail of < 16 bytes
    ("float32", 4, (128, 128, 128)), ("float32", 1, (205, 205, 201)),
    ("float64", 2, (128, 128, 128)), ("float64", 1, (129, 127, 257)),
    ("float16", 8, (128, 128, 128)), ("float16", 1, (181, 181, 513)),
    ("bfloat16", 8, (128, 128, 128)), ("bfloat16", 1, (181, 181, 513)),
    ("uint8", 1, (256, 256, 520)), ("uint8", 1, (257, 255, 513)), ("uint8", 2, (256, 256, 256)),  # the last: exactly 32 MiB
    ("bool", 16, (128, 128, 128)),
]


@pytest.mark.parametrize("dtype,B,grid", BIG_DTYPES, ids=[f"{d}-B{b}-{'x'.join(map(str, g))}" for d, b, g in BIG_DTYPES])
def test_cuda_big_occupancy_dtypes(dtype, B, grid, rng):
    check_big(big_case(rng, "dense", grid, B=B, N=20_000 if B > 4 else 40_000, dtype=dtype))


@pytest.mark.parametrize("pdtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("form", ["dense", "ragged", "single"])
def test_cuda_big_occupancy_forms(form, pdtype, rng):
    """Non-cubic grids with anisotropic voxels, lengths padding, ragged batches
    with an empty cloud, one unbatched cloud; every points dtype (float32 ones
    contiguous: the 16-byte point loads)."""
    B, grid = (1, (256, 192, 176)) if form == "single" else (4, (160, 96, 144))
    check_big(big_case(rng, form, grid, B=B, pdtype=pdtype))


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
def test_cuda_big_occupancy_unaligned_out(dtype, rng):
    """out= one element into a buffer (not 16-byte aligned): the scalar store
    loop, same bits; the elements either side of the view stay untouched."""
    B = {"uint8": 1, "float16": 1, "float32": 4, "float64": 1}[dtype]
    grid = {"uint8": (257, 255, 513), "float16": (181, 181, 513), "float32": (160, 96, 144),
            "float64": (129, 127, 257)}[dtype]
    case = big_case(rng, "ragged", grid, B=B, dtype=dtype)
    t = case.arrays("torch")
    g = {k: on(v, "cuda") for k, v in t.items()}
    ref, ref_dropped = case.reference()
    numel = math.prod(ref.shape)
    flat = poisoned((numel + 2,), dtype, g["points"])
    buf = flat[1:numel + 1].view(ref.shape)
    assert buf.data_ptr() % 16 != 0
    out, dropped = robocache.voxelize(g["points"], **case.kwargs(g, out=buf, return_dropped=True))
    assert out is buf
    case.assert_matches(buf, ref, buf)
    assert_bitwise(buf, robocache.voxelize(t["points"], **case.kwargs(t)), "unaligned out= " + case.msg)
    assert_equal(to_numpy(dropped).reshape(-1), np.reshape(ref_dropped, -1), msg="dropped " + case.msg)
    raw, es = flat.view(torch.uint8), flat.element_size()
    assert bool((raw[:es] == 0xFF).all()) and bool((raw[-es:] == 0xFF).all()), "wrote outside out="


def test_cuda_big_occupancy_all_points_dropped(rng):
    """NaN, inf and out-of-range points only: a poisoned out= becomes all zero,
    every point is counted as dropped."""
    B, N, grid = 4, 5000, (160, 96, 144)
    o, v = np.asarray(BIG_ORIGIN), np.asarray(BIG_VOXEL)
    g3 = np.asarray(grid)
    p = o + rng.uniform(0, 1, (B, N, 3)) * g3 * v
    axis = rng.integers(0, 3, (B, N))
    kind = rng.integers(0, 4, (B, N))
    below, above = (o - 0.5 * v)[axis], (o + (g3 + 0.5) * v)[axis]  # half a voxel outside either end
    bad = np.choose(kind, [below, above, np.full((B, N), np.nan), np.full((B, N), np.inf)])
    np.put_along_axis(p, axis[..., None], bad[..., None], axis=2)
    pts = torch.from_numpy(p.astype(np.float32)).cuda()
    kw = dict(grid=grid, voxel_size=BIG_VOXEL, origin=BIG_ORIGIN)
    buf = poisoned((B,) + grid, "float32", pts)
    out, dropped = robocache.voxelize(pts, out=buf, return_dropped=True, **kw)
    assert out is buf
    assert not bool(buf.any()), "voxels set (or poison left) although every point was dropped"
    assert dropped.tolist() == [N] * B
    ref, ref_dropped = voxelize_ref(p.astype(np.float32), **kw)
    assert_equal(buf, ref)
    assert_equal(dropped, ref_dropped)


def test_cuda_big_occupancy_repeatable_and_frees_its_bitmap(rng):
    """Runs agree bit for bit; the bitmap workspace goes back to torch: after the
    call only the output is held."""
    case = big_case(rng, "ragged", (128, 128, 128), B=4, N=100_000)
    g, first = check_big(case)
    kw = case.kwargs(g)
    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    out = robocache.voxelize(g["points"], **kw)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - m0 == out.numel() * out.element_size(), "bitmap workspace still held"
    assert_bitwise(out, first, case.msg)


# ----------------------------------------------------------------------------
# content checks


@pytest.mark.parametrize("offsets,match", [([1, 3, 5], r"\boffsets\b"), ([0, 4, 2, 5], r"\boffsets\b"),
                                           ([0, 2, 4], r"\boffsets\b")])
def test_check_true_finds_bad_offsets(offsets, match):
    pts = torch.rand(5, 3, device="cuda")
    with pytest.raises(ValueError, match=match):
        robocache.voxelize(pts, offsets=torch.tensor(offsets, device="cuda"), grid=GRID, voxel_size=VOXEL,
                           origin=ORIGIN, check=True)
    torch.cuda.synchronize()


@pytest.mark.parametrize("lengths", [[6, 5], [-1, 2]])
def test_check_true_finds_bad_lengths(lengths):
    pts = torch.rand(2, 5, 3, device="cuda")
    with pytest.raises(ValueError, match=r"\blengths\b"):
        robocache.voxelize(pts, lengths=torch.tensor(lengths, device="cuda"), grid=GRID, voxel_size=VOXEL,
                           origin=ORIGIN, check=True)
    torch.cuda.synchronize()


@pytest.mark.parametrize("mode", ["count", "mean"])
def test_check_none_bad_offsets_stay_in_bounds(mode):
    """Without check the GPU does not read offsets on the host; garbage offsets
    are clamped in the kernel, never read or written out of bounds."""
    pts = torch.rand(10, 3, device="cuda")
    f = torch.rand(10, 2, device="cuda")
    for bad in ([5, 2, 100, -7], [-3, 4, 4, 11], [0, 2**40, 3, 10]):
        kw = {"features": f} if mode == "mean" else {}
        out = robocache.voxelize(pts, offsets=torch.tensor(bad, device="cuda"), grid=(2, 3, 4), voxel_size=0.5,
                                 origin=(0, 0, 0), mode=mode, **kw)
        torch.cuda.synchronize()
        assert out.shape[0] == 3
    out = robocache.voxelize(pts.reshape(2, 5, 3), lengths=torch.tensor([99, -4], device="cuda"), grid=(2, 3, 4),
                             voxel_size=0.5, origin=(0, 0, 0), mode="count")
    torch.cuda.synchronize()
    assert int(out[1].sum()) == 0


# ----------------------------------------------------------------------------
# streams


@pytest.mark.parametrize("form,mode", [("dense", "occupancy"), ("dense-lengths", "count"), ("ragged", "mean"),
                                       ("ragged", "max")])
def test_check_none_does_not_sync(form, mode, make_vox):
    case = make_vox(form.split("-")[0], "float32", mode, B=16, N=500, lengths=form == "dense-lengths")
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    kw = case.kwargs(g, return_dropped=True)
    robocache.voxelize(g["points"], **kw)  # warm-up
    torch.cuda.synchronize()
    with hold() as gate:  # a host sync in the call would wait for the gate: the block fails saying so
        out, dropped = robocache.voxelize(g["points"], **kw)
        assert gate.pending(), "voxelize waited for the GPU: a host sync on the hot path"
    torch.cuda.synchronize()
    ref, ref_dropped = case.reference()
    case.assert_matches(out, ref, out)
    assert_equal(dropped.cpu().reshape(-1), np.reshape(ref_dropped, -1))


@pytest.mark.parametrize("mode", ["occupancy", "mean"])
def test_runs_on_current_stream(mode, make_vox):
    case = make_vox("ragged", "float32", mode, B=8, N=400)
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    fresh = g["points"]
    pts = torch.full_like(fresh, float("nan"))  # what another stream sees until s has written
    robocache.voxelize(pts, **case.kwargs(g))  # warm-up
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            pts.copy_(fresh)  # lands on s only once the gate opens
            out = robocache.voxelize(pts, **case.kwargs(g))
        assert gate.pending(), "stream s had passed the gate when voxelize returned: voxelize synchronized with it"
        assert torch.cuda.default_stream().query(), "voxelize put work on (or made wait) the default stream"
    s.synchronize()
    case.assert_matches(out, case.reference()[0], out)


@pytest.mark.parametrize("handle", ["stream", "int"])
def test_runs_on_explicit_stream(handle, make_vox):
    case = make_vox("ragged", "float32", "count", B=8, N=400)
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    fresh = g["points"]
    pts = torch.full_like(fresh, float("nan"))
    robocache.voxelize(pts, **case.kwargs(g))
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            pts.copy_(fresh)  # lands on s only once the gate opens
        out = robocache.voxelize(pts, **case.kwargs(g, stream=s if handle == "stream" else s.cuda_stream))
        assert gate.pending(), "voxelize(stream=s) synchronized with s (occupancy/count need no workspace)"
        assert torch.cuda.default_stream().query(), "voxelize(stream=s) put work on the default stream"
    s.synchronize()
    case.assert_matches(out, case.reference()[0], out)


@pytest.mark.parametrize("which", ["mean", "big occupancy"])
def test_explicit_other_stream_with_workspace_is_safe(which, rng, make_vox):
    """sum/mean/max and big-grid occupancy (its L2 bitmap) borrow a workspace from torch's
    allocator, which orders its reuse on the current stream: on another stream= the call waits
    for its kernels (documented), so later allocations cannot overwrite it; on the current
    stream it does not wait."""
    if which == "mean":
        case = make_vox("ragged", "float32", "mean", B=8, N=400)
    else:
        case = big_case(rng, "dense", (128, 128, 128), B=4, N=5000)
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    ref = case.reference()[0]
    robocache.voxelize(g["points"], **case.kwargs(g))  # warm-up
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with hold(s, let_go_after=2) as gate:  # s opens only by itself: a call that waits for s returns after
        out = robocache.voxelize(g["points"], **case.kwargs(g, stream=s))
        assert not gate.pending(), "the call returned with stream s still held: its workspace was released early"
        junk = torch.full((1 << 22,), float("nan"), device="cuda")  # reuses freed blocks at once
        del junk
    case.assert_matches(out, ref, out)
    with hold(s) as gate, torch.cuda.stream(s):
        out = robocache.voxelize(g["points"], **case.kwargs(g, stream=s))
        assert gate.pending(), "stream= equal to the current stream must not sync"
    s.synchronize()
    case.assert_matches(out, ref, out)


# ----------------------------------------------------------------------------
# devices, frameworks, memory


@pytest.mark.parametrize("moved", ["features", "lengths", "out"])
def test_arguments_on_other_device(moved, make_vox):
    case = make_vox("dense", "float32", "mean", B=3, N=20)
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    kw = case.kwargs(g)
    if moved == "out":
        kw["out"] = torch.empty(case.reference()[0].shape)
    else:
        kw[moved] = kw[moved].cpu()
    with pytest.raises(ValueError, match=rf"\b{moved}\b"):
        robocache.voxelize(g["points"], **kw)


def test_points_on_cpu_features_on_gpu(make_vox):
    case = make_vox("ragged", "float32", "sum", B=3, N=20)
    t = case.arrays("torch")
    with pytest.raises(ValueError, match=r"\bfeatures\b|\boffsets\b"):
        robocache.voxelize(t["points"], **case.kwargs({**t, "features": t["features"].cuda()}))


@pytest.mark.usefixtures("two_gpus")
def test_second_gpu(make_vox):
    case = make_vox("ragged", "float32", "mean", B=6, N=300)
    torch.cuda.set_device(0)
    g = {k: on(v, "cuda:1") for k, v in case.arrays("torch").items()}
    out = robocache.voxelize(g["points"], **case.kwargs(g))
    assert out.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0, "voxelize did not restore the current device"
    case.assert_matches(out, case.reference()[0], out)
    s = torch.cuda.Stream(device=1)
    with torch.cuda.stream(s):
        out = robocache.voxelize(g["points"], **case.kwargs(g))
    s.synchronize()
    case.assert_matches(out, case.reference()[0], out)


def test_cupy_arrays(make_vox):
    cupy = pytest.importorskip("cupy")
    case = make_vox("ragged", "float32", "max", B=5, N=200)
    a = {k: (None if v is None else cupy.asarray(v)) for k, v in case.arrays("numpy").items()}
    out, dropped = robocache.voxelize(a["points"], **case.kwargs(a, return_dropped=True))
    assert isinstance(out, cupy.ndarray) and isinstance(dropped, cupy.ndarray)
    ref, ref_dropped = case.reference()
    case.assert_matches(out.get(), ref, out.get())
    assert_equal(dropped.get(), ref_dropped)


def test_pinned_host_tensors_run_on_cpu(make_vox):
    case = make_vox("ragged", "float32", "mean", B=5, N=200)
    t = {k: (None if v is None else v.pin_memory()) for k, v in case.arrays("torch").items()}
    out = robocache.voxelize(t["points"], **case.kwargs(t))
    assert out.device.type == "cpu"
    case.assert_matches(out, case.reference()[0], out)


def test_outputs_and_workspace_come_from_torch_and_are_freed(make_vox):
    case = make_vox("ragged", "float32", "mean", B=32, N=2000, F=4, grid=(32, 24, 16))
    g = {k: on(v, "cuda") for k, v in case.arrays("torch").items()}
    kw = case.kwargs(g)
    robocache.voxelize(g["points"], **kw)
    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    out = robocache.voxelize(g["points"], **kw)
    assert torch.cuda.memory_allocated() - m0 >= out.numel() * out.element_size()
    del out
    for _ in range(500):
        robocache.voxelize(g["points"], **kw, return_dropped=True)
        with pytest.raises(ValueError, match="mode"):
            robocache.voxelize(g["points"], **{**kw, "mode": "median"})
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == m0, "GPU memory (output or workspace) still held"


def test_grid_too_large_on_gpu_raises_and_context_survives():
    pts = torch.rand(2, 10, 3, device="cuda")
    free, _ = torch.cuda.mem_get_info()
    side = int((free / 4) ** (1 / 3)) + 64  # one cloud's grid alone exceeds free memory
    with pytest.raises((MemoryError, ValueError), match=r"\bgrid\b"):
        robocache.voxelize(pts, grid=(side, side, side), voxel_size=0.01, origin=(0, 0, 0))
    with pytest.raises((MemoryError, ValueError), match=r"\bgrid\b"):
        robocache.voxelize(pts, grid=(100_000, 100_000, 100_000), voxel_size=0.01, origin=(0, 0, 0))
    torch.cuda.synchronize()
    out = robocache.voxelize(pts, grid=(4, 4, 4), voxel_size=0.25, origin=(0, 0, 0), mode="count")
    assert int(out.sum()) == 20
