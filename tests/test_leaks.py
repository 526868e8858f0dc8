"""Leaks and lifetimes: 100,000 calls of every op (tiny inputs, numpy and torch CPU, allocating
and out=, through the DLPack C exchange API and through __dlpack__ capsules) leave resident
memory, tracemalloc's traced Python memory and the reference counts of every input where they
were; arrays that crossed frameworks through DLPack keep their owners alive exactly as long as
needed. GPU lifetimes (marked `cuda`): inputs and robocache's own temporaries freed right after
a call stay valid until the queued kernel has run, and a DataLoader gives its device memory
back when deleted.

100,000 tiny calls take a few seconds per op (2-20 us each); ROBOCACHE_LEAK_CALLS overrides
the count. tests/test_refcount.py covers reference counts over resample's error paths.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
import weakref

import numpy as np
import pytest

import robocache
from reference import resample_ref, to_numpy, voxelize_ref

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=needs_torch)]
CALLS = int(os.environ.get("ROBOCACHE_LEAK_CALLS", 100_000))
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# bounds: a leak of one tiny output (~100 bytes) or one Python object (>= 16 bytes) per call
# is >= 1.6 MB over 100,000 calls; allocator noise is far below these
RSS_BOUND = 4 * 2**20
TRACED_BOUND = 128 * 2**10  # over the last 20,000 calls: >= 7 bytes per call


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc/self/statm")


# ----------------------------------------------------------------------------
# tiny inputs for every op


def tiny_inputs(rng):
    """numpy arrays for one small call of each op (ragged resample/fuse, ragged voxelize)."""
    off = np.array([0, 7, 7, 20], np.int64)  # an empty episode in the middle
    t = np.concatenate([np.sort(rng.uniform(0, 1, 7)), np.sort(rng.uniform(0, 1, 13))])
    points = rng.uniform(-0.2, 1.2, (30, 3)).astype(np.float32)
    points[0] = rng.uniform(0.0, 0.99, 3)   # cloud 0 keeps a point in the grid (else ~1% of seeds: none)
    return {
        "values": rng.standard_normal((20, 3)).astype(np.float32),
        "quats": (lambda q: (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))(
            rng.standard_normal((20, 4))),
        "times": t, "offsets": off, "index": np.array([0, 1, 2, 0], np.int64),
        "new_times": rng.uniform(-0.1, 1.1, (4, 5)),
        "points": points,
        "features": rng.standard_normal((30, 2)).astype(np.float32),
        "cloud_offsets": np.array([0, 10, 10, 30], np.int64),
    }


GEOM = dict(grid=(4, 3, 2), voxel_size=(0.25, 1 / 3, 0.5), origin=(0.0, 0.0, 0.0))


def op_calls(op, a, out_like):
    """[(name, zero-argument call)] for op on the arrays dict a (one framework)."""
    v, q, t, off, idx, x = a["values"], a["quats"], a["times"], a["offsets"], a["index"], a["new_times"]
    p, f, coff = a["points"], a["features"], a["cloud_offsets"]
    if op == "resample":
        out, outq = out_like((4, 5, 3)), out_like((4, 5, 4))
        return [("allocate", lambda: robocache.resample(v, t, x, offsets=off, index=idx)),
                ("out", lambda: robocache.resample(v, t, x, offsets=off, index=idx, out=out)),
                ("mask+slerp", lambda: robocache.resample(q, t, x, offsets=off, index=idx, mode="slerp", out=outq,
                                                          return_mask=True))]
    if op == "voxelize":
        occ, mean = out_like((3, 4, 3, 2)), out_like((3, 2, 4, 3, 2))
        return [("occupancy", lambda: robocache.voxelize(p, offsets=coff, **GEOM)),
                ("occupancy-out", lambda: robocache.voxelize(p, offsets=coff, out=occ, **GEOM)),
                ("mean-out+dropped", lambda: robocache.voxelize(p, features=f, offsets=coff, mode="mean", out=mean,
                                                                return_dropped=True, **GEOM))]
    if op == "fuse":
        out = out_like((4, 5, 7))
        streams = [(v, t, off), (q, t, off)]
        return [("allocate", lambda: robocache.fuse(streams, x, index=idx, modes=["linear", "slerp"])),
                ("out+mask", lambda: robocache.fuse(streams, x, index=idx, modes=["nearest", "slerp"], out=out,
                                                    return_mask=True))]
    raise ValueError(op)


def in_framework(arrays, fw):
    if fw == "numpy":
        return dict(arrays), (lambda s: np.zeros(s, np.float32))
    return {k: torch.from_numpy(a.copy()) for k, a in arrays.items()}, (lambda s: torch.zeros(s))


def result(fn):
    """A numpy copy of a call's (first) result."""
    r = fn()
    return np.array(to_numpy(r[0] if isinstance(r, tuple) else r))


def run_flat(calls, watched, n=CALLS):
    """Runs the calls round-robin n times in all; returns (rss growth over all n, tracemalloc
    growth over the last n/5, seconds, refcount changes). Refcounts and memory are read after a
    warm-up (caches filled). The process's RSS can also grow once for reasons outside the calls
    (in the full suite, a thread an earlier test left, a lazy import): an RSS growth over the
    bound is measured again over as many calls, and a leak grows again where that does not."""
    for _ in range(200):
        for _, fn in calls:
            fn()
    gc.collect()
    def calls_from(lo, hi):
        for i in range(lo, hi):
            calls[i % len(calls)][1]()

    refs0 = [sys.getrefcount(o) for o in watched]
    r0 = rss()
    t0 = time.perf_counter()
    traced_from = n - n // 5  # tracemalloc makes Python allocations ~3x slower: the last 20% only
    calls_from(0, traced_from)
    tracemalloc.start()
    m0 = tracemalloc.get_traced_memory()[0]
    calls_from(traced_from, n)
    m1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    dt = time.perf_counter() - t0
    gc.collect()
    r1 = rss()
    refs1 = [sys.getrefcount(o) for o in watched]
    moved = [(i, a, b) for i, (a, b) in enumerate(zip(refs0, refs1)) if a != b]
    grown = r1 - r0
    if grown >= RSS_BOUND:
        r0 = rss()
        calls_from(0, n)
        gc.collect()
        grown = min(grown, rss() - r0)
    return grown, m1 - m0, dt, moved


# ----------------------------------------------------------------------------
# 100,000 calls per op and framework


@linux_only
@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("op", ["resample", "voxelize", "fuse"])
def test_many_calls_are_flat(op, fw, rng):
    arrays, out_like = in_framework(tiny_inputs(rng), fw)
    calls = op_calls(op, arrays, out_like)
    watched = list(arrays.values())
    # the results are right before and after (a leak fix that breaks results must not pass)
    first = [result(fn) for _, fn in calls]
    grown, traced, dt, moved = run_flat(calls, watched)
    last = [result(fn) for _, fn in calls]
    for (name, _), a, b in zip(calls, first, last):
        assert np.array_equal(a, b, equal_nan=True), f"{op} {name}: result changed over {CALLS} calls"
    print(f"{op} {fw}: {CALLS} calls in {dt:.2f} s ({dt / CALLS * 1e6:.1f} us/call), rss {grown / 2**20:+.2f} MiB, "
          f"traced {traced / 2**10:+.1f} KiB")
    assert not moved, f"{op} {fw}: input refcounts moved over {CALLS} calls: {moved}"
    assert traced < TRACED_BOUND, (f"{op} {fw}: tracemalloc grew {traced / 2**10:.0f} KiB over the last "
                                   f"{CALLS // 5} calls")
    assert grown < RSS_BOUND, f"{op} {fw}: resident memory grew {grown / 2**20:.1f} MiB over {CALLS} calls"


@linux_only
def test_strided_copies_and_error_paths_are_flat(make_case):
    """C-side buffers (strided copies, error paths) are freed: 20,000 calls on a ~200 KB input
    that has to be copied do not grow the process. Here, not in test_refcount.py, because CI's
    sanitizer suite runs this file with ASan's quarantine off (it holds freed blocks by design)."""
    case = make_case("dense", "float32", "float64", "linear", B=8, S=64, T=32, feat=(10, 10, 1))
    v = np.repeat(case.values, 2, axis=3)[:, :, :, ::2]  # trailing dims not flattenable: a copy per call
    bad = case.times.copy()
    bad[:, [3, 4]] = bad[:, [4, 3]]
    for _ in range(200):
        robocache.resample(v, case.times, case.new_times)
    r0 = rss()
    for i in range(20_000):
        robocache.resample(v, case.times, case.new_times)
        if i % 4 == 0:
            with pytest.raises(ValueError):
                robocache.resample(v, bad, case.new_times)
    grown = rss() - r0
    assert grown < 32 * 2**20, f"resident memory grew {grown / 2**20:.1f} MiB over 20,000 calls"


@linux_only
def test_results_of_the_tiny_calls_are_right(rng):
    """The inputs the leak tests hammer give the reference's answers (so the loops above call
    the real paths, not early-out error paths)."""
    a = tiny_inputs(rng)
    out = robocache.resample(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    ref, _ = resample_ref(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    assert np.array_equal(out, ref)
    occ = robocache.voxelize(a["points"], offsets=a["cloud_offsets"], **GEOM)
    assert np.array_equal(occ, voxelize_ref(a["points"], offsets=a["cloud_offsets"], **GEOM)[0])
    assert occ[1].sum() == 0 and occ[0].sum() > 0  # the empty cloud, and a real one
    fused = robocache.fuse([(a["values"], a["times"], a["offsets"])], a["new_times"], index=a["index"])
    assert np.array_equal(fused, ref.reshape(4, 5, 3))


# ----------------------------------------------------------------------------
# DLPack round trips: arrays owned by one framework, seen through the other


def storage_uses(t):
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    return use_count(t.untyped_storage()._cdata) if use_count else None


@linux_only
@needs_torch
def test_dlpack_round_trips_are_flat(rng):
    """numpy arrays wrapped as torch tensors (torch.from_dlpack) and torch tensors wrapped as
    numpy arrays (np.from_dlpack) as inputs and as out=, outputs exported back through DLPack:
    owners' refcounts and torch storage use counts stay put, memory stays flat, results are right."""
    a = tiny_inputs(rng)
    ref, _ = resample_ref(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    np_owned = {k: a[k].copy() for k in ("values", "times", "new_times", "offsets", "index")}
    th_owned = {k: torch.from_numpy(a[k].copy()) for k in np_owned}
    as_torch = {k: torch.from_dlpack(v) for k, v in np_owned.items()}     # torch views of numpy memory
    as_numpy = {k: np.from_dlpack(v) for k, v in th_owned.items()}        # numpy views of torch memory
    np_buf, th_buf = np.full((4, 5, 3), np.nan, np.float32), torch.full((4, 5, 3), float("nan"))
    out_torch_view, out_numpy_view = torch.from_dlpack(np_buf), np.from_dlpack(th_buf)

    def res(d, **kw):
        return robocache.resample(d["values"], d["times"], d["new_times"], offsets=d["offsets"], index=d["index"], **kw)

    calls = [
        ("torch view of numpy", lambda: res(as_torch)),
        ("numpy view of torch", lambda: res(as_numpy)),
        ("out= torch view of numpy", lambda: res(as_torch, out=out_torch_view)),
        ("out= numpy view of torch", lambda: res(as_numpy, out=out_numpy_view)),
        ("output to numpy", lambda: np.from_dlpack(res(th_owned))),
        ("output to torch", lambda: torch.from_dlpack(res(np_owned))),
        ("voxelize torch view", lambda: robocache.voxelize(torch.from_dlpack(a["points"]), **GEOM)),
        ("fuse numpy view", lambda: robocache.fuse([(as_numpy["values"], as_numpy["times"], as_numpy["offsets"])],
                                                   as_numpy["new_times"], index=as_numpy["index"])),
    ]
    for name, fn in calls:
        got = fn()
        if name.startswith(("voxelize",)):
            assert np.array_equal(to_numpy(got), voxelize_ref(a["points"], **GEOM)[0]), name
        else:
            assert np.array_equal(to_numpy(got).reshape(ref.shape), ref), name
    assert np.array_equal(np_buf, ref) and np.array_equal(th_buf.numpy(), ref), "out= views did not reach the owner"

    watched = (list(np_owned.values()) + list(th_owned.values()) + list(as_torch.values())
               + list(as_numpy.values()) + [np_buf, th_buf, out_torch_view, out_numpy_view])
    uses0 = [storage_uses(t) for t in th_owned.values()] + [storage_uses(th_buf)]
    grown, traced, dt, moved = run_flat(calls, watched)
    uses1 = [storage_uses(t) for t in th_owned.values()] + [storage_uses(th_buf)]
    print(f"dlpack round trips: {CALLS} calls in {dt:.2f} s, rss {grown / 2**20:+.2f} MiB, "
          f"traced {traced / 2**10:+.1f} KiB")
    assert not moved, f"refcounts moved over {CALLS} DLPack round trips: {moved}"
    assert uses0 == uses1, f"torch storage use counts moved: {uses0} -> {uses1} (a DLPack deleter not called)"
    assert traced < TRACED_BOUND, f"tracemalloc grew {traced / 2**10:.0f} KiB"
    assert grown < RSS_BOUND, f"resident memory grew {grown / 2**20:.1f} MiB"


@needs_torch
def test_dlpack_views_keep_owners_alive_and_let_them_go():
    """An output exported through DLPack keeps its memory alive after robocache's reference is
    gone, and frees it when the last view goes (weakrefs see both)."""
    rng = np.random.default_rng(1)
    a = tiny_inputs(rng)
    ref, _ = resample_ref(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    out = robocache.resample(*(torch.from_numpy(a[k]) for k in ("values", "times", "new_times")),
                             offsets=torch.from_numpy(a["offsets"]), index=torch.from_numpy(a["index"]))
    view = np.from_dlpack(out)
    del out
    gc.collect()
    junk = [torch.full((4, 5, 3), 7.0) for _ in range(50)]  # would reuse freed memory
    assert np.array_equal(view, ref), "the numpy view lost its memory when the torch output was dropped"
    del junk
    # an input seen through a DLPack view while robocache runs: the owner may be dropped by the
    # caller; the view keeps the memory
    owner = torch.from_numpy(a["values"].copy())
    v = np.from_dlpack(owner)
    owner_ref = weakref.ref(owner)
    del owner
    gc.collect()
    junk = [torch.full((20, 3), 9.0) for _ in range(50)]
    got = robocache.resample(v, a["times"], a["new_times"], offsets=a["offsets"], index=a["index"])
    assert np.array_equal(got, ref)
    del v, junk
    gc.collect()
    assert owner_ref() is None, "the torch tensor outlived its last DLPack view"


# ----------------------------------------------------------------------------
# the loader and dataset free what they hold (CPU); GPU memory below


def _episodes(rng, E=4):
    eps = []
    for _ in range(E):
        n = int(rng.integers(20, 60))
        t = np.sort(rng.uniform(0, 2, n))
        eps.append({"joints": (rng.standard_normal((n, 6)).astype(np.float32), t),
                    "camera": (rng.integers(0, 255, (n // 3, 8, 8, 3), dtype=np.uint8), t[::3][: n // 3])})
    return eps


@needs_torch
def test_loader_and_dataset_are_freed_when_deleted(rng):
    """No module-level cache keeps a Dataset (or its tensors) alive after the loader and dataset
    are deleted, also with an iterator stopped mid-epoch."""
    ds = robocache.Dataset.from_episodes(_episodes(rng), device="cpu")
    loader = robocache.DataLoader(ds, 8, shuffle=True, windows={"j": robocache.Window("joints", offsets=[0.0, 0.05]),
                                                  "c": robocache.Window("camera", offsets=[0.0])})
    it = iter(loader)
    batch = next(it)
    refs = [weakref.ref(ds), weakref.ref(loader), weakref.ref(ds.streams["joints"].values),
            weakref.ref(ds.streams["camera"].values)]
    del ds, loader, it, batch
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"still alive after del + gc.collect(): {alive} (0 dataset, 1 loader, 2-3 storage)"


# ----------------------------------------------------------------------------
# GPU lifetimes (run on a GPU machine: pytest -m cuda tests/test_leaks.py)


def _gpu_resample_case(rng, N=1 << 20, D=16, E=64, B=4096, T=32):
    """Host arrays for a ragged resample big enough to take a while: values [N, D] float32,
    times, targets [B, T], offsets, index."""
    n = np.full(E, N // E)
    off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    t = np.concatenate([np.sort(rng.uniform(0, 10, k)) for k in n])
    v = rng.standard_normal((N, D)).astype(np.float32)
    idx = rng.integers(0, E, B).astype(np.int64)
    x = rng.uniform(-0.5, 10.5, (B, T))
    return v, t, x, off, idx


def cropped(v):
    """v [N, 16] as a view [N, 2, 8] into a [N, 2, 12] buffer: its trailing dims cannot be one
    strided dim (stride 12 != 8 * 1), so robocache has the framework make a contiguous copy."""
    wide = torch.full((v.shape[0], 2, 12), float("nan"), device=v.device)
    wide[:, :, :8] = v.view(-1, 2, 8)
    return wide[:, :, :8]


def test_cropped_view_needs_a_copy():
    """The view the GPU tests below rely on is the kind robocache copies (checked on the CPU)."""
    if torch is None:
        pytest.skip("torch is not installed")
    v = torch.arange(32.0).view(2, 16)
    c = cropped(v)
    assert not c.is_contiguous() and torch.equal(c.reshape(2, 16), v)
    assert c.stride() == (24, 12, 1)  # 12 != 8 * 1: not flattenable into one feature dim
    x = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    out = robocache.resample(c, x[[0, 2]], x)
    assert torch.equal(out.reshape(3, 16), torch.stack([v[0], (v[0] + v[1]) / 2, v[1]]))


@pytest.mark.cuda
@pytest.mark.parametrize("copy", [False, True], ids=["in-place", "strided-copy"])
def test_gpu_inputs_freed_by_caller_stay_valid_until_the_kernel_ran(copy, rng):
    """The current stream is held (tests/gpu_gate.py); resample is called on freshly made device tensors (and, with
    copy, on a view robocache must copy), the caller deletes them at once and fills new
    tensors of the same sizes (the caching allocator hands the freed blocks out again); after
    a synchronize the result is still the reference's."""
    v, t, x, off, idx = _gpu_resample_case(rng)
    ref, _ = resample_ref(v, t, x, offsets=off, index=idx)
    dev = torch.device("cuda")
    base = {k: torch.from_numpy(a).to(dev) for k, a in dict(v=v, t=t, x=x, off=off, idx=idx).items()}
    from gpu_gate import hold
    warm = [torch.full_like(a, -7) for a in base.values()]   # the kernels used below, loaded before the hold
    robocache.resample(cropped(base["v"]) if copy else base["v"], base["t"], base["x"], offsets=base["off"],
                       index=base["idx"])
    del warm
    torch.cuda.synchronize()
    with hold() as gate:                                 # the current stream waits for the test
        fresh = {k: a.clone() for k, a in base.items()}  # queued behind the gate
        values = fresh["v"]
        if copy:
            values = cropped(fresh["v"])
            assert not values.is_contiguous()
        out = robocache.resample(values, fresh["t"], fresh["x"], offsets=fresh["off"], index=fresh["idx"])
        assert gate.pending(), "the stream was past the gate when resample returned: the test tested nothing"
        del values, fresh
        junk = [torch.full_like(a, -7) for a in base.values() for _ in range(3)]  # reuses the freed blocks
        junk += [torch.full((v.shape[0], 2, 12), -7.0, device=dev) for _ in range(2)]
    torch.cuda.synchronize()
    got = out.cpu().numpy().reshape(ref.shape)
    assert np.array_equal(got, ref), "resample read memory the caller had freed and reused"
    del junk


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["resample-copy", "fuse-copy", "voxelize-workspace"])
def test_gpu_temporaries_with_explicit_stream(op, rng):
    """stream= names a stream other than the current one, and robocache needs a temporary
    (a contiguous copy of a strided input made by torch on the current stream, or voxelize's
    workspace from torch's allocator). The temporary is freed to the current stream's pool when
    the call returns; new work on the current stream reuses it while the kernel still waits on
    the held stream (tests/gpu_gate.py). The result must still be right (robocache must record
    the stream, wait, or copy on the kernel's stream). A call that waits on the host for the
    held stream (voxelize's workspace on another stream, documented) returns once the gate has
    opened by itself."""
    from gpu_gate import hold
    dev = torch.device("cuda")
    s = torch.cuda.Stream()
    if op == "voxelize-workspace":
        pts = rng.uniform(0, 8, (1 << 20, 3)).astype(np.float32)
        feats = rng.standard_normal((1 << 20, 4)).astype(np.float32)
        coff = np.array([0, 1 << 19, 1 << 20], np.int64)
        geom = dict(grid=(16, 8, 4), voxel_size=(0.5, 1.0, 2.0), origin=(0.0, 0.0, 0.0))
        ref, _ = voxelize_ref(pts, features=feats, offsets=coff, mode="mean", **geom)
        P, F, O = (torch.from_numpy(a).to(dev) for a in (pts, feats, coff))
        robocache.voxelize(P, features=F, offsets=O, mode="mean", **geom)     # warm-up: module load
        torch.cuda.synchronize()
        with hold(s, let_go_after=2):
            out = robocache.voxelize(P, features=F, offsets=O, mode="mean", stream=s, **geom)
            junk = [torch.full((1 << 20, 16), -7.0, device=dev) for _ in range(4)]
        torch.cuda.synchronize()
        got = out.cpu().numpy()
        from test_voxelize import assert_voxels
        assert_voxels(got, ref, "mean", feats, True, "voxelize(stream=s) workspace reused early")
        return
    v, t, x, off, idx = _gpu_resample_case(rng)
    ref, _ = resample_ref(v, t, x, offsets=off, index=idx)
    values = cropped(torch.from_numpy(v).to(dev))  # robocache asks torch for a contiguous copy
    T, X, O, I = (torch.from_numpy(a).to(dev) for a in (t, x, off, idx))
    call = {"resample-copy": lambda: robocache.resample(values, T, X, offsets=O, index=I, stream=s),
            "fuse-copy": lambda: robocache.fuse([(values, T, O)], X, index=I, stream=s)}[op]
    call()                                         # warm-up: module load
    torch.cuda.synchronize()
    with hold(s, let_go_after=2):                  # should the call wait on the host for s, s opens by itself
        out = call()
        junk = [torch.full((v.shape[0], v.shape[1]), -7.0, device=dev) for _ in range(4)]  # current stream
    torch.cuda.synchronize()
    got = out.cpu().numpy().reshape(ref.shape)
    assert np.array_equal(got, ref), (f"{op}: the kernel on stream= read a temporary that the current stream "
                                      "had already reused")
    del junk


@pytest.mark.cuda
@pytest.mark.parametrize("stop", ["finished", "mid-epoch"])
def test_gpu_loader_releases_device_memory(stop, rng):
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    ds = robocache.Dataset.from_episodes(_episodes(rng, E=16), device="cuda")
    loader = robocache.DataLoader(ds, 8, shuffle=True, windows={"j": robocache.Window("joints", offsets=[0.0, 0.05]),
                                                  "c": robocache.Window("camera", offsets=[0.0], layout="BTCHW")})
    it = iter(loader)
    batches = [next(it) for _ in range(2 if stop == "mid-epoch" else len(loader))]
    assert torch.cuda.memory_allocated() > base
    del batches, it, loader, ds
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == base, (f"{torch.cuda.memory_allocated() - base} bytes still "
                                                   "allocated after del loader, dataset")
