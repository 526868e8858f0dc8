"""Benchmark of robocache.voxelize, run by the harness in harness.py.

    python -m robocache bench --op voxelize [--quick] [--device auto|cpu|cuda] [--json PATH]
    python benchmarks/bench_voxelize.py --quick

Configs (issue 3, item 6): occupancy and mean (F=4) at B8 N4096 64^3 and B32 N16384 128^3,
occupancy at B4 N65536 256^3, and the real KITTI scan (../shared/data/pointclouds/
kitti_000008.bin, 17,238 points) replicated to B=16 with a little jitter per copy, 0.1 m voxels
over x 0..80, y -40..40, z -3..3 (an 800x800x60 grid), mode count. `--quick` shrinks them so the
whole op runs on a 2-core CPU in seconds.

Synthetic clouds are lidar-like: about half the points in Gaussian clusters (objects), half
uniform over the grid's box grown by 3% per side, so that ~7% of the points fall outside the grid
and are dropped. Points are float32 [B,N,3], features float32 [B,N,F] (standard normal). The
KITTI points are the xyz columns of a [B,N,4] xyzr array, read in place (strided).

Contenders (GPU run; a CPU run has robocache on the CPU, its deterministic=False row, and torch on
CPU tensors):

- robocache:    robocache.voxelize on CUDA, deterministic=True (the default).
- robocache nd: the same with deterministic=False (sum/mean only: occupancy and count are exact
                integers and run the same kernel either way, so they get one row). The cost of
                determinism, deterministic / non-deterministic time, is written to the result's
                "determinism" entry (JSON) and to the note of the robocache nd row.
- torch:        the best plain-PyTorch version (`torch_voxelize`): float64 floor binning (the
                semantics robocache documents: float32 binning would move points that lie within
                an ulp of a face), a validity mask, a flat channel-first index sent to a sink
                element past the end for dropped points (so no boolean indexing and no host sync),
                then index_fill_ (occupancy) or index_add_ (count; sum and count for mean, then
                sum / clamp(count, 1)). The index is built channel-first, so the result is already
                robocache's [B,F,X,Y,Z] layout without a permute copy.
- cpu:          robocache on the CPU (all threads), deterministic=True.

Correctness first: the robocache CPU result (deterministic) is the reference. It is itself
checked against an independent NumPy reference (float64 np.floor binning, np.unique/np.bincount
over the kept points; every other voxel must be zero). Every other contender is compared with it:
exactly for occupancy/count (tolerance 0: the fraction of differing voxels), by relative error
norm for sum/mean; robocache is also run with out= pre-filled with NaN (count: -1). Whether
robocache CUDA deterministic is bitwise equal to the CPU is recorded under "checks".

Floor: (output bytes, written once + point bytes + feature bytes, each read once) / the copy
bandwidth measured in the same run (read + write). Points count 3 coordinates each, also for the
strided KITTI layout, so the floor is a lower bound.

The cost of determinism is added to each voxelize result by `determinism_cost`, the
op's `summarize` step (OpBench), after the harness's ratios.
"""

from __future__ import annotations

import functools
import os
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .harness import (TOLERANCE, Case, Contender, Env, OpBench, fmt_us, robocache_package, rotation_sets,
                      torch_or_none)

KITTI_SCAN = (Path(os.environ.get("ROBOCACHE_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
              / "pointclouds" / "kitti_000008.bin")
KITTI_JITTER_M = 0.02          # std of the per-copy jitter of the replicated scan (copy 0 is the raw scan)
OUTSIDE_MARGIN = 0.03          # uniform points fill the grid's box grown by this fraction per side
CLUSTERED_FRACTION = 0.5       # the rest are uniform
CLUSTERS = 24                  # per cloud
CLUSTER_SIGMA = 0.03           # of the box's extent
FEATURE_MODES = ("sum", "mean")
EXACT_MODES = ("occupancy", "count")
OUT_DTYPE = {"occupancy": "float32", "count": "int32", "sum": "float32", "mean": "float32"}
COMPARE_CHUNK = 1 << 24        # elements per chunk of the float64 error norm


# ----------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------

@dataclass(frozen=True)
class VoxelizeConfig:
    mode: str                                   # occupancy | count | sum | mean
    B: int                                      # clouds
    N: int                                      # points per cloud (KITTI: the scan's)
    grid: tuple[int, int, int]                  # (X, Y, Z)
    voxel_size: tuple[float, float, float]
    origin: tuple[float, float, float]
    F: int = 0                                  # feature channels (sum/mean)
    kitti: bool = False                         # the real scan, replicated B times
    dtype: str = "float32"                      # points and features

    @property
    def shape(self) -> str:
        X, Y, Z = self.grid
        g = f"{X}^3" if X == Y == Z else f"{X}x{Y}x{Z}"
        f = f" F{self.F}" if self.F else ""
        if self.kitti:
            return f"{self.mode}{f} KITTI B{self.B} N{self.N} {g} @{self.voxel_size[0]:g} m"
        return f"{self.mode}{f} B{self.B} N{self.N} {g}"


def _cube(mode: str, B: int, N: int, g: int, F: int = 0) -> VoxelizeConfig:
    """A g^3 grid over a 3.2 m cube (a manipulation workspace), origin at its corner."""
    vs = 3.2 / g
    return VoxelizeConfig(mode=mode, B=B, N=N, grid=(g, g, g), voxel_size=(vs, vs, vs),
                          origin=(-1.6, -1.6, -0.4), F=F)


def _kitti(B: int, vs: float) -> VoxelizeConfig:
    """Ego range x 0..80, y -40..40, z -3..3 at `vs` metres: a non-cubic grid."""
    grid = (round(80 / vs), round(80 / vs), round(6 / vs))
    return VoxelizeConfig(mode="count", B=B, N=17238, grid=grid, voxel_size=(vs, vs, vs),
                          origin=(0.0, -40.0, -3.0), kitti=True)


def voxelize_configs(quick: bool) -> list[VoxelizeConfig]:
    if quick:   # CPU-sized: the whole op runs in seconds on 2 cores
        return [
            _cube("occupancy", B=4, N=4096, g=32),
            _cube("mean", B=4, N=4096, g=32, F=4),
            _cube("occupancy", B=2, N=16384, g=64),
            _kitti(B=2, vs=0.2),
        ]
    return [
        _cube("occupancy", B=8, N=4096, g=64),
        _cube("mean", B=8, N=4096, g=64, F=4),
        _cube("occupancy", B=32, N=16384, g=128),
        _cube("mean", B=32, N=16384, g=128, F=4),
        _cube("occupancy", B=4, N=65536, g=256),
        _kitti(B=16, vs=0.1),
    ]


# ----------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------

@dataclass
class VoxelizeData:
    """Host arrays of one config. `points` [B,N,3] float32 (KITTI: a strided view of `base`
    [B,N,4] xyzr), `features` [B,N,F] float32 or None."""
    points: np.ndarray
    features: np.ndarray | None
    base: np.ndarray                 # the array that owns the points (copied per rotation set)


def synthetic_clouds(cfg: VoxelizeConfig, rng) -> VoxelizeData:
    """Lidar-like clouds: CLUSTERED_FRACTION of the points in Gaussian clusters around
    CLUSTERS centres inside the grid's box, the rest uniform over the box grown by
    OUTSIDE_MARGIN per side (those beyond the box are dropped)."""
    B, N = cfg.B, cfg.N
    lo = np.asarray(cfg.origin, np.float64)
    ext = np.asarray(cfg.grid, np.float64) * np.asarray(cfg.voxel_size, np.float64)
    nc = int(N * CLUSTERED_FRACTION)
    centres = lo + ext * rng.uniform(0.05, 0.95, size=(B, CLUSTERS, 3))
    which = rng.integers(0, CLUSTERS, size=(B, nc))
    clustered = np.take_along_axis(centres, which[..., None], axis=1) \
        + rng.standard_normal((B, nc, 3)) * (CLUSTER_SIGMA * ext)
    uniform = lo - OUTSIDE_MARGIN * ext + rng.uniform(0.0, 1.0, size=(B, N - nc, 3)) \
        * ((1 + 2 * OUTSIDE_MARGIN) * ext)
    pts = np.concatenate([clustered, uniform], axis=1)
    pts = np.take_along_axis(pts, rng.permuted(np.tile(np.arange(N), (B, 1)), axis=1)[..., None], axis=1)
    pts = np.ascontiguousarray(pts, dtype=np.float32)
    feats = rng.standard_normal((B, N, cfg.F), dtype=np.float32) if cfg.F else None
    return VoxelizeData(points=pts, features=feats, base=pts)


def kitti_clouds(cfg: VoxelizeConfig, rng, path: Path = KITTI_SCAN) -> VoxelizeData:
    """The scan (float32 x, y, z, reflectance) replicated B times; copies 1.. get Gaussian
    jitter of KITTI_JITTER_M on x, y, z so that the clouds differ."""
    scan = np.fromfile(path, dtype=np.float32).reshape(-1, 4)
    base = np.repeat(scan[None], cfg.B, axis=0)
    base[1:, :, :3] += (rng.standard_normal(base[1:, :, :3].shape) * KITTI_JITTER_M).astype(np.float32)
    return VoxelizeData(points=base[..., :3], features=None, base=base)


# ----------------------------------------------------------------------------
# Independent NumPy reference (sparse: only the occupied voxels)
# ----------------------------------------------------------------------------

@dataclass
class SparseRef:
    """The occupied voxels of a config: flat indices into [B,X,Y,Z], their point counts and
    (feature modes) float64 feature sums [U,F]; dropped points per cloud."""
    flat: np.ndarray
    counts: np.ndarray
    sums: np.ndarray | None
    dropped: np.ndarray


def sparse_reference(cfg: VoxelizeConfig, data: VoxelizeData) -> SparseRef:
    """docs/voxelize.md binning: i_k = floor((double(p_k) - origin_k) / voxel_size_k) in
    float64, kept when 0 <= i_k < grid_k on every axis (NaN/inf compare false)."""
    f = np.floor((data.points.astype(np.float64) - np.asarray(cfg.origin, np.float64))
                 / np.asarray(cfg.voxel_size, np.float64))
    valid = np.all((f >= 0) & (f < np.asarray(cfg.grid, np.float64)), axis=-1)   # [B,N]
    X, Y, Z = cfg.grid
    b = np.broadcast_to(np.arange(cfg.B)[:, None], valid.shape)[valid]
    ijk = f[valid].astype(np.int64)
    lin = ((b * X + ijk[:, 0]) * Y + ijk[:, 1]) * Z + ijk[:, 2]
    flat, inv, counts = np.unique(lin, return_inverse=True, return_counts=True)
    sums = None
    if cfg.mode in FEATURE_MODES:
        fv = data.features[valid].astype(np.float64)
        sums = np.stack([np.bincount(inv, weights=fv[:, c], minlength=flat.size)
                         for c in range(cfg.F)], axis=1)
    return SparseRef(flat=flat, counts=counts, sums=sums, dropped=(~valid).sum(axis=1))


def _host_numpy(x) -> np.ndarray:
    torch = torch_or_none()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def sparse_error(out, ref: SparseRef, cfg: VoxelizeConfig) -> float:
    """Error of a dense output against the sparse reference. Exact modes: the fraction of
    voxels that differ (values at the occupied voxels, plus nonzeros anywhere else).
    Feature modes: relative error norm at the occupied voxels, inf when a voxel outside
    them is nonzero or a value is NaN."""
    out = _host_numpy(out)
    B, F = cfg.B, cfg.F
    X, Y, Z = cfg.grid
    V = X * Y * Z
    want = (B, F, X, Y, Z) if cfg.mode in FEATURE_MODES else (B, X, Y, Z)
    if out.shape != want:
        raise ValueError(f"output shape {out.shape}, expected {want}")
    if cfg.mode in EXACT_MODES:
        flat = out.reshape(-1)
        expect = 1 if cfg.mode == "occupancy" else ref.counts
        bad = int(np.count_nonzero(flat[ref.flat] != expect))
        outside = int(np.count_nonzero(flat)) - int(np.count_nonzero(flat[ref.flat]))
        return (bad + outside) / flat.size
    got = out.reshape(B, F, V)[ref.flat // V, :, ref.flat % V].astype(np.float64)   # [U, F]
    exp = ref.sums if cfg.mode == "sum" else ref.sums / ref.counts[:, None]
    if int(np.count_nonzero(out)) != int(np.count_nonzero(got)):
        return float("inf")         # something written outside the occupied voxels
    den = float(np.linalg.norm(exp))
    err = float(np.linalg.norm(got - exp)) / (den if den > 0 else 1.0)
    return err if math.isfinite(err) else float("inf")


# ----------------------------------------------------------------------------
# Dense comparison with the robocache CPU result (on the output's device)
# ----------------------------------------------------------------------------

def dense_error(out, ref, exact: bool) -> float:
    """Exact: fraction of elements that differ (NaN differs from everything). Otherwise
    ||out - ref|| / ||ref|| in float64, in chunks; inf for NaN/inf. `ref` is on the
    device of `out` (torch) or a NumPy array (NumPy `out`)."""
    torch = torch_or_none()
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    is_torch = torch is not None and isinstance(out, torch.Tensor)
    o, r = out.reshape(-1), ref.reshape(-1)
    n = int(o.shape[0])
    if exact:
        bad = int((o != r).sum()) if is_torch else int(np.count_nonzero(o != r))
        return bad / max(n, 1)
    num = den = 0.0
    for s in range(0, n, COMPARE_CHUNK):
        if is_torch:
            oc, rc = o[s:s + COMPARE_CHUNK].double(), r[s:s + COMPARE_CHUNK].double()
            d = oc - rc
            num += float(torch.dot(d, d))
            den += float(torch.dot(rc, rc))
        else:
            oc, rc = o[s:s + COMPARE_CHUNK].astype(np.float64), r[s:s + COMPARE_CHUNK].astype(np.float64)
            d = oc - rc
            num += float(d @ d)
            den += float(rc @ rc)
    err = math.sqrt(num) / (math.sqrt(den) if den > 0 else 1.0)
    return err if math.isfinite(err) else float("inf")


# ----------------------------------------------------------------------------
# Plain PyTorch
# ----------------------------------------------------------------------------

class TorchVoxelizer:
    """robocache.voxelize's dense batched semantics in plain PyTorch, as a skilled user
    writes it (the small constant tensors are built once, like a module's buffers):

        f     = floor((points.double() - origin) / voxel_size)        # [B,N,3], float64
        valid = all(0 <= f < grid)                                     # NaN/inf: False
        v     = (f.long() * (Y*Z, Z, 1)).sum(-1)                       # x*Y*Z + y*Z + z
        index = where(valid, b*V + v, B*V)                             # dropped -> sink
        buf   = zeros(B*V + 1); buf.index_fill_(0, index, 1)           # occupancy
                                buf.index_add_(0, index, ones)         # count
        return buf[:-1].view(B, X, Y, Z)

    sum/mean index channel-first, ((b*F + c)*V + v), so the sums land in [B,F,X,Y,Z] with no
    permute copy; mean divides in place by clamp(count, 1) (float32 counts, exact to 2^24).
    No step waits for the GPU."""

    def __init__(self, cfg: VoxelizeConfig, device):
        torch = torch_or_none()
        self.torch, self.cfg = torch, cfg
        X, Y, Z = cfg.grid
        self.V = V = X * Y * Z
        B, N, F = cfg.B, cfg.N, cfg.F
        f64 = dict(dtype=torch.float64, device=device)
        self.origin = torch.tensor(cfg.origin, **f64)
        self.voxel_size = torch.tensor(cfg.voxel_size, **f64)
        self.upper = torch.tensor(cfg.grid, **f64)
        self.strides = torch.tensor([Y * Z, Z, 1], dtype=torch.int64, device=device)
        cloud = torch.arange(B, dtype=torch.int64, device=device)
        self.cloud_base = (cloud * V)[:, None]                           # [B,1]
        self.sink = B * V
        if cfg.mode in FEATURE_MODES:
            chan = torch.arange(F, dtype=torch.int64, device=device) * V
            self.feat_base = (cloud * (F * V))[:, None, None] + chan     # [B,1,F]
            self.feat_sink = B * F * V
        dt = torch.int32 if cfg.mode == "count" else torch.float32
        self.ones = torch.ones(B * N, dtype=dt, device=device)
        self.device = device

    def __call__(self, points, features=None):
        torch, cfg = self.torch, self.cfg
        B, F = cfg.B, cfg.F
        X, Y, Z = cfg.grid
        f = torch.floor((points.double() - self.origin) / self.voxel_size)
        valid = ((f >= 0) & (f < self.upper)).all(-1)                   # [B,N]
        v = (f.long() * self.strides).sum(-1)                           # garbage where not valid
        index = torch.where(valid, v + self.cloud_base, self.sink).view(-1)
        if cfg.mode == "occupancy":
            buf = torch.zeros(B * self.V + 1, dtype=torch.float32, device=self.device)
            buf.index_fill_(0, index, 1.0)
            return buf[:-1].view(B, X, Y, Z)
        if cfg.mode == "count":
            buf = torch.zeros(B * self.V + 1, dtype=torch.int32, device=self.device)
            buf.index_add_(0, index, self.ones)
            return buf[:-1].view(B, X, Y, Z)
        findex = torch.where(valid.unsqueeze(-1), v.unsqueeze(-1) + self.feat_base,
                             self.feat_sink).view(-1)                  # [B*N*F]
        sums = torch.zeros(B * F * self.V + 1, dtype=torch.float32, device=self.device)
        sums.index_add_(0, findex, features.reshape(-1).to(torch.float32))
        out = sums[:-1].view(B, F, self.V)
        if cfg.mode == "mean":
            count = torch.zeros(B * self.V + 1, dtype=torch.float32, device=self.device)
            count.index_add_(0, index, self.ones)
            out.div_(count[:-1].view(B, 1, self.V).clamp_(min=1.0))
        return out.view(B, F, X, Y, Z)


# ----------------------------------------------------------------------------
# Building the case
# ----------------------------------------------------------------------------

def voxelize_min_bytes(cfg: VoxelizeConfig) -> dict:
    """Fewest bytes any implementation moves: the dense output written once, the points'
    three coordinates and the features read once."""
    X, Y, Z = cfg.grid
    out_elems = cfg.B * (cfg.F if cfg.mode in FEATURE_MODES else 1) * X * Y * Z
    parts = {"output": out_elems * np.dtype(OUT_DTYPE[cfg.mode]).itemsize,
             "points": cfg.B * cfg.N * 3 * 4,
             "features": cfg.B * cfg.N * cfg.F * 4}
    parts["total"] = sum(parts.values())
    return parts


def _input_sets(data: VoxelizeData, device, n: int) -> list[tuple]:
    """n (points, features) copies as torch tensors on `device` (KITTI: views of a copied
    [B,N,4] array, so the points stay strided as in the file's layout)."""
    torch = torch_or_none()
    base = torch.from_numpy(data.base).to(device)
    feats = torch.from_numpy(data.features).to(device) if data.features is not None else None
    sets = []
    for i in range(n):
        b = base if i == 0 else base.clone()
        f = feats if (i == 0 or feats is None) else feats.clone()
        sets.append((b[..., :3] if data.base.shape[-1] == 4 else b, f))
    return sets


def _numpy_sets(data: VoxelizeData, n: int) -> list[tuple]:
    """The same as NumPy arrays (robocache's CPU path without torch)."""
    sets = []
    for i in range(n):
        b = data.base if i == 0 else data.base.copy()
        f = data.features if (i == 0 or data.features is None) else data.features.copy()
        sets.append((b[..., :3] if data.base.shape[-1] == 4 else b, f))
    return sets


def _rc_calls(cfg: VoxelizeConfig, sets, deterministic: bool) -> list:
    rc = robocache_package()
    kw = dict(grid=cfg.grid, voxel_size=cfg.voxel_size, origin=cfg.origin, mode=cfg.mode,
              deterministic=deterministic)
    return [functools.partial(rc.voxelize, p, features=f, **kw) for p, f in sets]


def _out_shape(cfg: VoxelizeConfig) -> tuple:
    X, Y, Z = cfg.grid
    return (cfg.B, cfg.F, X, Y, Z) if cfg.mode in FEATURE_MODES else (cfg.B, X, Y, Z)


def _poison_like(cfg: VoxelizeConfig, device):
    """An out= array of the output's shape and dtype holding a value robocache must
    overwrite: NaN (float modes), -1 (count)."""
    torch = torch_or_none()
    fill = -1 if cfg.mode == "count" else float("nan")
    if device is None:      # NumPy
        return lambda: np.full(_out_shape(cfg), fill, dtype=OUT_DTYPE[cfg.mode])
    return lambda: torch.full(_out_shape(cfg), fill, dtype=getattr(torch, OUT_DTYPE[cfg.mode]),
                              device=device)


def _torch_note(cfg: VoxelizeConfig) -> str:
    how = {"occupancy": "index_fill_", "count": "index_add_ of ones",
           "sum": "index_add_ channel-first", "mean": "index_add_ sums and counts, / clamp(count, 1)"}
    return f"float64 binning; {how[cfg.mode]} into a buffer with a sink element"


def _robocache_contender(name, calls, verify, tol, device, poison, note="") -> Contender:
    return Contender(name=name, device=device, call=lambda i: calls[i % len(calls)](),
                     verify=verify, tol=tol, nsets=len(calls),
                     poisoned=lambda: calls[0](out=poison()), note=note)


def build_voxelize_case(cfg: VoxelizeConfig, env: Env) -> Case:
    torch = env.torch
    case = Case(op="voxelize", config=cfg.shape, shape=cfg.shape, dtype=cfg.dtype)
    if cfg.kitti and not KITTI_SCAN.is_file():
        case.skipped = f"KITTI scan not found at {KITTI_SCAN}"
        return case
    rng = np.random.default_rng([env.seed, zlib.crc32(case.config.encode())])
    data = kitti_clouds(cfg, rng) if cfg.kitti else synthetic_clouds(cfg, rng)
    if cfg.kitti and data.points.shape[1] != cfg.N:
        cfg = VoxelizeConfig(**{**cfg.__dict__, "N": int(data.points.shape[1])})

    sref = sparse_reference(cfg, data)
    min_bytes = voxelize_min_bytes(cfg)
    case.min_bytes = min_bytes["total"]
    exact = cfg.mode in EXACT_MODES
    tol = 0.0 if exact else TOLERANCE[cfg.dtype]
    kept = cfg.B * cfg.N - int(sref.dropped.sum())
    checks: dict = {}          # shared with the result dict (filled while checking)
    case.extra = {
        "mode": cfg.mode, "grid": list(cfg.grid), "voxel_size": list(cfg.voxel_size),
        "origin": list(cfg.origin), "B": cfg.B, "N": cfg.N, "F": cfg.F,
        "points": (f"KITTI {KITTI_SCAN.name} replicated x{cfg.B}, jitter {KITTI_JITTER_M} m, "
                   "xyz strided in [B,N,4]") if cfg.kitti else
                  (f"{CLUSTERED_FRACTION:.0%} in {CLUSTERS} Gaussian clusters, the rest uniform "
                   f"over the box grown {OUTSIDE_MARGIN:.0%} per side"),
        "kept_fraction": kept / (cfg.B * cfg.N), "occupied_voxels": int(sref.flat.size),
        "min_bytes_detail": min_bytes, "checks": checks,
        "reference": "robocache CPU deterministic, itself checked against a NumPy reference",
    }
    per_set = data.base.nbytes + (data.features.nbytes if data.features is not None else 0)
    host_sets, dev_sets = rotation_sets(case, per_set, env)

    # The reference: robocache on the CPU, deterministic, checked against NumPy below.
    if torch is not None:
        cpu_sets = _input_sets(data, "cpu", host_sets)
        cpu_poison = _poison_like(cfg, "cpu")
    else:
        cpu_sets = _numpy_sets(data, host_sets)
        cpu_poison = _poison_like(cfg, None)
    ref = _rc_calls(cfg, cpu_sets[:1], True)[0]()
    ref_err = sparse_error(ref, sref, cfg)
    checks["cpu_vs_numpy"] = ref_err
    verify_sparse = lambda out: sparse_error(out, sref, cfg)

    def verify_dense(out, ref_dev, key=None):
        err = dense_error(out, ref_dev, exact)
        if key is not None:    # bitwise equal to the CPU result? (exact check as well)
            bits = err == 0.0 if exact else dense_error(out, ref_dev, True) == 0.0
            checks[key] = bool(bits and checks.get(key, True))
        return err

    if env.device == "cuda":
        dev = env.torch_device
        sets = _input_sets(data, dev, dev_sets)
        ref_dev = ref.to(dev)
        poison = _poison_like(cfg, dev)
        if env.rc_cuda:
            case.contenders.append(_robocache_contender(
                "robocache", _rc_calls(cfg, sets, True),
                lambda out: verify_dense(out, ref_dev, "cuda_deterministic_bitwise_equal_cpu"),
                tol, "cuda", poison,
                note="deterministic=True" + ("" if not exact else
                                             " (exact mode: deterministic=False is the same kernel)")))
            if not exact:
                case.contenders.append(_robocache_contender(
                    "robocache nd", _rc_calls(cfg, sets, False),
                    lambda out: verify_dense(out, ref_dev), tol, "cuda", poison,
                    note="deterministic=False"))
        else:
            case.extra["robocache_cuda"] = "robocache built without CUDA"
        tv = TorchVoxelizer(cfg, dev)
        torch_calls = [functools.partial(tv, p, f) for p, f in sets]
        case.contenders.append(Contender(
            "torch", "cuda", lambda i: torch_calls[i % len(torch_calls)](),
            lambda out: verify_dense(out, ref_dev), tol, nsets=len(torch_calls),
            note=_torch_note(cfg)))
        case.contenders.append(_robocache_contender(
            "cpu", _rc_calls(cfg, cpu_sets, True), verify_sparse, tol, "cpu", cpu_poison,
            note="robocache CPU, deterministic=True; checked against NumPy"))
        return case

    case.extra["sets"] = {"cpu": host_sets, "touched_per_rotation_bytes": host_sets * case.min_bytes}
    case.contenders.append(_robocache_contender(
        "robocache", _rc_calls(cfg, cpu_sets, True), verify_sparse, tol, "cpu", cpu_poison,
        note="deterministic=True; checked against NumPy"))
    if not exact:
        case.contenders.append(_robocache_contender(
            "robocache nd", _rc_calls(cfg, cpu_sets, False),
            lambda out: verify_dense(out, ref), tol, "cpu", cpu_poison,
            note="deterministic=False"))
    if torch is not None:
        tv = TorchVoxelizer(cfg, "cpu")
        torch_calls = [functools.partial(tv, p, f) for p, f in cpu_sets]
        case.contenders.append(Contender(
            "torch", "cpu", lambda i: torch_calls[i % len(torch_calls)](),
            lambda out: verify_dense(out, ref), tol, nsets=len(torch_calls),
            note=_torch_note(cfg)))
    else:
        case.extra["torch"] = "torch not installed"
    return case


# ----------------------------------------------------------------------------
# The cost of determinism, added after the harness summarizes a result
# ----------------------------------------------------------------------------

def determinism_cost(res: dict) -> None:
    """res["determinism"]: deterministic vs deterministic=False robocache times of this run
    (sum/mean), or why there is one row (occupancy/count); the ratio also goes into the
    note of the robocache nd row."""
    det, nd = res["contenders"].get("robocache"), res["contenders"].get("robocache nd")
    if res.get("mode") in EXACT_MODES:
        res["determinism"] = {"note": "exact mode: deterministic=True and False run the same kernel"}
        return
    if not (det and nd and det.get("status") == "ok" and nd.get("status") == "ok"):
        return
    d, n = det["time_us"]["median"], nd["time_us"]["median"]
    res["determinism"] = {"device": det["device"], "deterministic_us": d, "nondeterministic_us": n,
                          "det_over_nondet": d / n}
    nd["note"] = "; ".join(x for x in (nd.get("note"), f"determinism costs {d / n:.2f}x "
                                       f"(deterministic {fmt_us(d)} us)") if x)


OP = OpBench(configs=voxelize_configs, build=build_voxelize_case, summarize=determinism_cost)
