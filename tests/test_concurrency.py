"""Concurrency: Python threads calling resample, voxelize and fuse at once (the C code releases
the GIL and shares one persistent pthread pool, csrc/cpu/parallel.c), set_num_threads changing
under running calls, and threads iterating their own DataLoaders, all give exactly the serial
results. GPU (marked `cuda`, needs 2 GPUs): two threads driving one device each.

Inputs are sized so each call splits into several pool blocks (the pool is contended: one job
at a time owns it, the others run inline on their own thread). 8 threads x 40 calls each here;
ROBOCACHE_LONG=1 makes it 400.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

import robocache
from pairs import paired
from conftest import run_in_threads
from reference import resample_ref, to_numpy, voxelize_ref

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
LONG = os.environ.get("ROBOCACHE_LONG") == "1"
ROUNDS = 400 if LONG else 40
THREADS = 8


@pytest.fixture
def restore_threads():
    n = robocache.get_num_threads()
    yield
    robocache.set_num_threads(n)


def as_bytes(r):
    """Comparable bytes of a result (a tuple's parts concatenated)."""
    parts = r if isinstance(r, tuple) else (r,)
    return b"".join(np.ascontiguousarray(to_numpy(p)).tobytes() for p in parts)


# ----------------------------------------------------------------------------
# 8 different jobs, each large enough to use the pool


def ragged(rng, E, max_len, D, tdtype="float64"):
    n = rng.integers(0, max_len + 1, E)
    off = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    if tdtype == "int64":
        t = np.concatenate([np.sort(rng.integers(0, 10**10, k)) for k in n]).astype(np.int64) + 1_700_000_000 * 10**9
    else:
        t = np.concatenate([np.sort(rng.uniform(0, 10, k)) for k in n])
    return rng.standard_normal((int(off[-1]),) + D).astype(np.float32), t, off


def make_arrays(rng):
    """numpy inputs of the 8 jobs (drawn once, so CPU and GPU versions see the same numbers)."""
    a = {}
    a["v"], a["t"], a["off"] = ragged(rng, 40, 400, (3,))
    a["idx"], a["x"] = rng.integers(0, 40, 256).astype(np.int64), rng.uniform(-1, 11, (256, 64))
    a["v2"], a["t2"], a["off2"] = ragged(rng, 30, 300, (6,), "int64")
    a["idx2"] = rng.integers(0, 30, 200).astype(np.int64)
    a["x2"] = rng.integers(1_700_000_000 * 10**9 - 10**9, 1_700_000_000 * 10**9 + 11 * 10**9, (200, 50))
    q = rng.standard_normal((8, 500, 2, 4))
    a["q"], a["tq"], a["xq"] = q / np.linalg.norm(q, axis=-1, keepdims=True), \
        np.sort(rng.uniform(0, 5, (8, 500)), axis=1), rng.uniform(0, 5, (8, 1200))
    a["img"] = rng.integers(0, 255, (1, 60, 8, 8, 3), dtype=np.uint8)
    a["ti"], a["xi"] = np.sort(rng.uniform(0, 2, 60))[None], rng.uniform(0, 2, (1, 3000))
    a["pts"] = rng.uniform(-1, 9, (40_000, 3)).astype(np.float32)
    a["feats"] = rng.standard_normal((40_000, 2)).astype(np.float32)
    a["coff"] = np.array([0, 10_000, 10_000, 25_000, 40_000], np.int64)
    a["lens"] = np.array([10_000, 0, 7_000, 9_999], np.int64)
    a["s1"], a["s2"] = ragged(rng, 20, 500, (4,)), ragged(rng, 20, 200, (2, 3))
    a["idx3"], a["x3"] = rng.integers(0, 20, 128).astype(np.int64), rng.uniform(-1, 11, (128, 80))
    a["d1"] = (rng.standard_normal((16, 300, 5)).astype(np.float32), np.sort(rng.uniform(0, 3, (16, 300)), 1))
    a["d2"] = (rng.standard_normal((16, 90, 2)).astype(np.float32), np.sort(rng.uniform(0, 3, (16, 90)), 1))
    a["x4"] = rng.uniform(0, 3, (16, 400))
    return a


GEOM = dict(grid=(20, 12, 6), voxel_size=(0.4, 0.6, 1.2), origin=(0.0, 0.0, 0.0))


def make_jobs(a, device=None):
    """[(name, fn)]: fn() runs one op on its own inputs and returns its result. device=None:
    the 'numpy' jobs take numpy arrays and the 'torch' ones torch CPU tensors; device='cuda:k':
    every job takes torch tensors on that device."""
    def wrap(fw):
        if device is not None:
            return lambda x: move(x, device)
        if fw == "torch" and torch is not None:
            return lambda x: move(x, "cpu")
        return lambda x: x
    N, T = wrap("numpy"), wrap("torch")

    v, t, off, idx, x = N((a["v"], a["t"], a["off"], a["idx"], a["x"]))
    v2, t2, off2, idx2, x2 = T((a["v2"], a["t2"], a["off2"], a["idx2"], a["x2"]))
    q, tq, xq = N((a["q"], a["tq"], a["xq"]))
    img, ti, xi = T((a["img"], a["ti"], a["xi"]))
    pts, feats, coff = N((a["pts"], a["feats"], a["coff"]))
    pts4, lens = T((a["pts"].reshape(4, 10_000, 3), a["lens"]))
    s1, s2, idx3, x3 = N((a["s1"], a["s2"], a["idx3"], a["x3"]))
    d1, d2, x4 = T((a["d1"], a["d2"], a["x4"]))
    return [
        ("resample numpy linear", lambda: robocache.resample(v, t, x, offsets=off, index=idx, return_mask=True)),
        ("resample torch int64 nearest", lambda: robocache.resample(v2, t2, x2, offsets=off2, index=idx2,
                                                                     mode="nearest")),
        ("resample numpy dense slerp", lambda: robocache.resample(q, tq, xq, mode="slerp")),
        ("resample torch uint8 frames", lambda: robocache.resample(img, ti, xi, mode="previous")),
        ("voxelize numpy mean", lambda: robocache.voxelize(pts, features=feats, offsets=coff, mode="mean",
                                                           return_dropped=True, **GEOM)),
        ("voxelize torch count", lambda: robocache.voxelize(pts4, lengths=lens, mode="count", **GEOM)),
        ("fuse numpy ragged", lambda: robocache.fuse([s1, s2], x3, index=idx3, modes=["linear", "next"],
                                                     return_mask=True)),
        ("fuse torch dense", lambda: robocache.fuse([d1, d2], x4, modes=["previous", "linear"])),
    ]


def move(obj, dev):
    """numpy arrays to torch tensors on dev; tuples recursively."""
    if isinstance(obj, tuple):
        return tuple(move(o, dev) for o in obj)
    return torch.from_numpy(np.ascontiguousarray(obj)).to(dev)


def references(a):
    """NumPy-reference bytes of the jobs the references cover exactly."""
    r = {}
    out, pad = resample_ref(a["v"], a["t"], a["x"], offsets=a["off"], index=a["idx"])
    r["resample numpy linear"] = as_bytes((out, pad))
    r["resample torch int64 nearest"] = as_bytes(resample_ref(a["v2"], a["t2"], a["x2"], "nearest",
                                                              offsets=a["off2"], index=a["idx2"])[0])
    r["resample torch uint8 frames"] = as_bytes(resample_ref(a["img"], a["ti"], a["xi"], "previous")[0])
    r["voxelize torch count"] = as_bytes(voxelize_ref(a["pts"].reshape(4, 10_000, 3), lengths=a["lens"],
                                                      mode="count", **GEOM)[0])
    parts, pads = [], []
    for (v, t, off), mode in zip((a["s1"], a["s2"]), ("linear", "next")):
        o, p = resample_ref(v, t, a["x3"], mode, offsets=off, index=a["idx3"])
        parts.append(o.reshape(128, 80, -1))
        pads.append(p)
    r["fuse numpy ragged"] = as_bytes((np.concatenate(parts, -1), np.stack(pads, -1)))
    return r


def run_threads(jobs, rounds, expected, side=None, until=None):
    """Each job on its own thread, `rounds` calls, all started together (plus `side(stop)` on
    one more thread until the jobs are done); with `until` (an Event), the jobs go on calling
    past `rounds` until it is set. Returns the failures."""
    failures = []
    barrier = threading.Barrier(len(jobs) + (side is not None))
    stop = threading.Event()

    def work(k):
        name, fn = jobs[k]
        try:
            barrier.wait()
            i = 0
            while i < rounds or (until is not None and not until.is_set()):
                if as_bytes(fn()) != expected[k]:
                    failures.append(f"{name}: result differs from the serial one at call {i}")
                    return
                i += 1
        except Exception as e:  # noqa: BLE001 - reported with its thread
            failures.append(f"{name}: {e!r}")

    def side_work():
        barrier.wait()
        side(stop)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    extra = [threading.Thread(target=side_work)] if side is not None else []
    for th in workers + extra:
        th.start()
    for th in workers:
        th.join(timeout=600)
    stop.set()
    for th in extra:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in workers + extra), "a thread hung (deadlock in the pool?)"
    return failures


def test_jobs_are_right(rng):
    """The serial results the threads are held to are the NumPy references' (where exact)."""
    a = make_arrays(rng)
    refs = references(a)
    for name, fn in make_jobs(a):
        if name in refs:
            assert as_bytes(fn()) == refs[name], f"{name}: != reference"
    assert len(refs) == 5


@pytest.mark.parametrize("nthreads", [1, 4])
def test_eight_threads_equal_serial(nthreads, rng, restore_threads):
    robocache.set_num_threads(nthreads)
    jobs = make_jobs(make_arrays(rng))
    expected = [as_bytes(fn()) for _, fn in jobs]
    t0 = time.perf_counter()
    failures = run_threads(jobs, ROUNDS, expected)
    print(f"{THREADS} threads x {ROUNDS} calls, pool of {nthreads}: {time.perf_counter() - t0:.2f} s")
    assert not failures, failures[:5]


def test_set_num_threads_while_calls_run(rng, restore_threads):
    """A ninth thread keeps changing the pool size (1..16, growing the pool mid-run) while the
    eight call ops: every result still equals the serial one."""
    robocache.set_num_threads(2)
    jobs = make_jobs(make_arrays(rng))
    expected = [as_bytes(fn()) for _, fn in jobs]
    changes = [0]
    sizes = [1, 3, 16, 2, 8, 1, 5, 4]
    # The calls go on until every size was set twice: on a loaded 2-core machine a change waits
    # for the pool to be free, and 40 rounds once saw only 8 changes.
    cycled = threading.Event()

    def toggler(stop):
        while not stop.is_set():
            robocache.set_num_threads(sizes[changes[0] % len(sizes)])
            changes[0] += 1
            if changes[0] >= 2 * len(sizes):
                cycled.set()
            time.sleep(0.0005)

    failures = run_threads(jobs, ROUNDS, expected, side=toggler, until=cycled)
    assert changes[0] >= 2 * len(sizes), "the pool size barely changed during the run"
    assert not failures, failures[:5]


def test_mixed_small_and_large_jobs_hammer_the_pool(rng, restore_threads):
    """Many threads submitting jobs of random sizes (inline ones and pool ones, different
    thread counts): 2000 calls, every one checked against the reference."""
    robocache.set_num_threads(4)
    cases = []
    for _ in range(12):
        B, T = int(rng.integers(1, 300)), int(rng.integers(1, 80))
        v, t, off = ragged(rng, 10, int(rng.integers(1, 200)), (int(rng.integers(1, 6)),))
        idx = rng.integers(0, 10, B).astype(np.int64)
        x = rng.uniform(-1, 11, (B, T))
        cases.append(((v, t, x, off, idx), resample_ref(v, t, x, offsets=off, index=idx)[0]))
    failures = []
    barrier = threading.Barrier(THREADS)

    def work(k):
        r = np.random.default_rng(k)
        barrier.wait()
        for i in range(ROUNDS * 6):
            (v, t, x, off, idx), ref = cases[int(r.integers(0, len(cases)))]
            if k == 0 and i % 10 == 0:
                robocache.set_num_threads(int(r.integers(1, 6)))
            out = robocache.resample(v, t, x, offsets=off, index=idx)
            if not np.array_equal(out, ref):
                failures.append(f"thread {k} call {i}: wrong result")
                return

    run_in_threads(work, [(k,) for k in range(THREADS)])
    assert not failures, failures[:5]


# ----------------------------------------------------------------------------
# the caller's floating-point environment reaches the pool's threads


@needs_torch
@pytest.mark.parametrize("op", ["resample", "voxelize", "fuse"])
def test_flush_denormal_applies_to_every_pool_thread(op, rng, restore_threads):
    """torch.set_flush_denormal(True) (robocache's own CPU demo sets it) turns on flush-to-zero /
    denormals-are-zero in the calling thread only. The pool's workers must compute in the
    caller's environment, or the blocks they run come out unflushed: results then depended on
    the thread count and on which thread took which block (seen: rows 8-15 of 64 unflushed with
    2 threads). Bits are compared as integers: a float compare would itself be flushed."""
    B, S, T = 64, 50, 4000
    if op == "voxelize":
        pts = rng.uniform(0, 4, (200_000, 3)).astype(np.float32)
        f = (rng.standard_normal((200_000, 2)) * 1e-39).astype(np.float32)
        coff = np.linspace(0, 200_000, 17).astype(np.int64)
        call = lambda: robocache.voxelize(pts, features=f, offsets=coff, grid=(8, 8, 8), voxel_size=0.5,  # noqa: E731
                                          origin=(0, 0, 0), mode="mean", deterministic=False)
    else:
        t = np.sort(rng.uniform(0, 1, (B, S)), 1)
        x = rng.uniform(0, 1, (B, T))
        v = (rng.standard_normal((B, S, 4)) * 1e-39).astype(np.float32)  # float32 subnormals
        if op == "resample":
            call = lambda: robocache.resample(v, t, x)  # noqa: E731
        else:
            call = lambda: robocache.fuse([(v, t), (v[:, :, :2], t)], x)  # noqa: E731

    def bits():
        r = call()
        return np.ascontiguousarray(r).view(np.uint32 if r.dtype == np.float32 else np.uint8).copy()

    robocache.set_num_threads(4)
    call()  # the pool's workers exist before the environment changes (as in a training script)
    plain = bits()
    flushed = {}
    try:
        torch.set_flush_denormal(True)
        for n in (1, 4, 2):
            robocache.set_num_threads(n)
            flushed[n] = bits()
    finally:
        torch.set_flush_denormal(False)
    assert not np.array_equal(flushed[1], plain), "flush-to-zero changed nothing: the test tests nothing"
    for n in (4, 2):
        assert np.array_equal(flushed[n], flushed[1]), (f"{op}: with denormals flushed in the caller, {n} threads "
                                                        f"differ from 1 in {int((flushed[n] != flushed[1]).sum())} "
                                                        "elements: a pool thread ignored the caller's FP mode")
    assert np.array_equal(bits(), plain), "the environment did not come back"


# ----------------------------------------------------------------------------
# the GIL is released around the kernels


def ran_during(call, calls: int = 500) -> bool:
    """Whether this thread ran Python while another thread was inside `call`. The switch interval
    is raised so far that a thread holding the GIL is never made to hand it over: this thread can
    then run only when the other releases the GIL (inside a call) or ends. The other thread makes
    up to `calls` calls and stops at the first that this thread saw from the inside. Many calls: a
    released GIL is only a chance for this thread, which a loaded machine may not schedule within one
    short kernel (5 calls of a 0.1 ms resample once passed unseen on a busy 2-core machine)."""
    started, seen, made = threading.Event(), threading.Event(), [0]

    def worker():
        started.set()
        while made[0] < calls and not seen.is_set():
            call()
            made[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        th = threading.Thread(target=worker)
        th.start()
        started.wait()
        inside = made[0] < calls      # here only once the worker released the GIL, or ended
        seen.set()
    finally:
        sys.setswitchinterval(old)
    th.join()
    return inside


@pytest.mark.parametrize("op", ["resample", "voxelize", "fuse"])
def test_gil_released_during_kernels(op, rng, restore_threads):
    """While one thread is inside a CPU kernel (content check included), another Python thread
    runs. No timing: with the GIL held through the call (a C call is never preempted) the other
    thread could not run at all until the calls were over (ran_during)."""
    robocache.set_num_threads(1)
    if op == "voxelize":
        pts = rng.uniform(0, 10, (200_000, 3)).astype(np.float32)
        f = rng.standard_normal((200_000, 1)).astype(np.float32)
        call = lambda: robocache.voxelize(pts, features=f, grid=(50, 50, 10), voxel_size=0.2,  # noqa: E731
                                          origin=(0, 0, 0), mode="mean")
    else:
        v, t, off = ragged(rng, 4, 20_000, (8,))
        idx = rng.integers(0, 4, 200 if op == "resample" else 100).astype(np.int64)
        x = rng.uniform(0, 10, (len(idx), 200))
        if op == "resample":
            call = lambda: robocache.resample(v, t, x, offsets=off, index=idx)  # noqa: E731
        else:
            call = lambda: robocache.fuse([(v, t, off), (v, t, off)], x, index=idx)  # noqa: E731
    call()
    assert ran_during(call), f"{op}: no other Python thread ran while it was inside its kernels: the GIL was held"


def test_ran_during_sees_a_call_that_holds_the_gil():
    """The check above can fail: a call that keeps the GIL (a pure-Python loop, never preempted
    under the raised switch interval) is not seen from the inside; one that sleeps is."""
    assert not ran_during(lambda: sum(range(200_000)), calls=5)
    assert ran_during(lambda: time.sleep(0.001))


# ----------------------------------------------------------------------------
# DataLoaders on threads


def loader_episodes(rng, E):
    """joints 100 Hz, camera 30 Hz, actions 50 Hz: test_loader's multi-rate episodes."""
    from test_loader import make_episodes  # needs torch; the op tests here do not
    return make_episodes(rng, E)


def loader_windows(k):
    W = robocache.Window
    wins = [
        {"j": W("joints", offsets=[-0.02, 0.0, 0.03]), "a": W("actions", indices=range(8), rate=50)},
        {"s": W(["joints", "actions"], offsets=[0.0, 0.05], normalize="mean_std"), "c": W("camera", offsets=[0.0])},
        {"j": W("joints", offsets=[0.0], normalize="min_max", max_dim=10), "c": W("camera", offsets=[-0.1, 0.0],
                                                                                  layout="BTCHW")},
        {"a": W("actions", indices=range(16), rate=50, normalize="q01_q99")},
    ]
    return wins[k % len(wins)]


def epoch(loader):
    return [{key: v.clone() for key, v in b.items()} for b in loader]


@needs_torch
def test_threads_iterating_their_own_loaders_equal_serial(rng, restore_threads):
    """8 threads, each iterating its own DataLoader (4 datasets, 2 loaders each, different
    seeds and windows, normalization statistics computed lazily by whichever thread gets there
    first) for two epochs, while the ops above also run: batch for batch the serial result."""
    robocache.set_num_threads(2)
    datasets = [robocache.Dataset.from_episodes(loader_episodes(rng, 6), device="cpu") for _ in range(4)]

    def make(k):
        return robocache.DataLoader(datasets[k % 4], 8 + k, shuffle=True, seed=100 + k, windows=loader_windows(k))

    got, failures = [None] * THREADS, []
    barrier = threading.Barrier(THREADS)

    def work(k):
        try:
            loader = make(k)
            barrier.wait()
            got[k] = epoch(loader) + epoch(loader)
        except Exception as e:  # noqa: BLE001
            failures.append(f"loader {k}: {e!r}")

    run_in_threads(work, [(k,) for k in range(THREADS)])
    assert not failures, failures
    for k in range(THREADS):
        loader = make(k)
        want = epoch(loader) + epoch(loader)
        assert len(got[k]) == len(want) == 2 * len(loader)
        for i, (a, b) in enumerate(paired(got[k], want)):
            assert a.keys() == b.keys()
            for key in a:
                assert torch.equal(a[key], b[key]), f"loader {k} batch {i} key {key}: threaded != serial"


# ----------------------------------------------------------------------------
# two GPUs from two threads (run on a machine with >= 2 GPUs: pytest -m cuda tests/test_concurrency.py)


@pytest.mark.cuda
@pytest.mark.usefixtures("two_gpus")
def test_two_gpus_from_two_threads_equal_cpu(rng):
    """Thread t0 drives cuda:0 and t1 cuda:1 with their current device left at 0 (so robocache
    must switch to the inputs' device and restore it); t2 alternates devices. Every result
    equals the CPU kernel's bit for bit (the slerp job is left out: CUDA's sinf/acosf differ
    from libm in the last bits)."""
    a = make_arrays(rng)
    cpu = [(n, fn) for n, fn in make_jobs(a) if "slerp" not in n]
    expected = {n: as_bytes(fn()) for n, fn in cpu}
    failures = []

    def drive(tag, devices):
        try:
            torch.cuda.set_device(0)
            per_dev = {d: [(n, fn) for n, fn in make_jobs(a, d) if n in expected] for d in devices}
            for d in devices:
                torch.cuda.synchronize(d)
            for i in range(ROUNDS):
                d = devices[i % len(devices)]
                for name, fn in per_dev[d]:
                    r = fn()
                    parts = r if isinstance(r, tuple) else (r,)
                    if any(p.device != torch.device(d) for p in parts):
                        failures.append(f"{tag} {name}: output not on {d}")
                    elif as_bytes(r) != expected[name]:
                        failures.append(f"{tag} {name} on {d}: differs from the CPU result (call {i})")
                    elif torch.cuda.current_device() != 0:
                        failures.append(f"{tag} {name} on {d}: current device left at {torch.cuda.current_device()}")
                    if failures:
                        return
        except Exception as e:  # noqa: BLE001
            failures.append(f"{tag}: {e!r}")

    run_in_threads(drive, [("t0", ["cuda:0"]), ("t1", ["cuda:1"]), ("t2", ["cuda:1", "cuda:0"])])
    assert not failures, failures[:5]
