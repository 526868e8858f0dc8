"""Reference counts and memory stay flat over many calls, good and failing.

A C extension that forgets a Py_DECREF (or a DLPack deleter) leaks one
reference per call: invisible in one call, obvious over 10,000. Everything
here holds with the garbage collector off, so nothing relies on gc to clean up.
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

import robocache

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=needs_torch)]
N = 10_000


@pytest.fixture
def gc_off():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def calls(case, fw):
    """name -> (zero-argument call, objects whose refcounts must not move)."""
    a = case.inputs(fw)
    v, t, x, off, idx = a["values"], a["times"], a["new_times"], a["offsets"], a["index"]
    B, T = x.shape
    mk = (lambda *s: torch.zeros(s, dtype=v.dtype)) if fw == "torch" else (lambda *s: np.zeros(s, v.dtype))
    out = mk(B, T, *v.shape[1:])
    bad_t = t.clone() if fw == "torch" else t.copy()
    bad_t[1], bad_t[2] = t[2] + 1, t[1]  # unsorted in the first non-trivial episode
    bad_idx = idx.clone() if fw == "torch" else idx.copy()
    bad_idx[0] = 10**6
    wrong_dtype_out = mk(B, T, *v.shape[1:]).to(torch.float64) if fw == "torch" else out.astype(np.float64)
    # fresh, non-interned objects: their counts would show a leaked reference
    mode = "".join(["lin", "ear"])
    tol = float("0.000123")

    def resample(*args, **kw):
        return robocache.resample(*args, **kw)

    def raises(exc, *args, **kw):
        try:
            robocache.resample(*args, **kw)
        except exc:
            return
        raise AssertionError("expected an error")

    common = (v, t, x, off, idx, mode, tol)
    return {
        "allocate": (lambda: resample(v, t, x, offsets=off, index=idx, mode=mode), common),
        "out": (lambda: resample(v, t, x, offsets=off, index=idx, mode=mode, out=out), common + (out,)),
        "mask": (lambda: resample(v, t, x, offsets=off, index=idx, mode=mode, tolerance=tol, return_mask=True,
                                  out=out), common + (out,)),
        "content-error": (lambda: raises(ValueError, v, bad_t, x, offsets=off, index=idx, mode=mode),
                          common + (bad_t,)),
        "index-error": (lambda: raises(ValueError, v, t, x, offsets=off, index=bad_idx, mode=mode),
                        common + (bad_idx,)),
        "dtype-error": (lambda: raises(TypeError, v, t, x, offsets=off, index=idx, out=wrong_dtype_out),
                        common + (wrong_dtype_out,)),
        "mode-error": (lambda: raises(ValueError, v, t, x, offsets=off, index=idx, mode="cubic"), common),
        "type-error": (lambda: raises(TypeError, v, [0.0, 1.0], x, offsets=off, index=idx), common),
    }


def ragged_case(make_case):
    # offsets[1] >= 3 so that bad_t above is unsorted inside episode 0
    case = make_case("ragged", "float32", "float64", "linear", B=4, T=8, episodes=6, max_len=12)
    while case.offsets[1] < 3:
        case = make_case("ragged", "float32", "float64", "linear", B=4, T=8, episodes=6, max_len=12)
    case.index[0] = 0
    return case


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["allocate", "out", "mask", "content-error", "index-error", "dtype-error",
                                  "mode-error", "type-error"])
def test_refcounts_stable(fw, kind, make_case, gc_off):
    table = calls(ragged_case(make_case), fw)
    fn, objs = table[kind]
    fn()  # first call may fill caches (e.g. per-type DLPack lookups)
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(N):
        fn()
    after = [sys.getrefcount(o) for o in objs]
    assert after == before, f"refcounts moved over {N} calls ({kind}): {before} -> {after}"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_no_objects_left_behind(fw, make_case, gc_off):
    table = calls(ragged_case(make_case), fw)
    for fn, _ in table.values():
        fn()
    n0 = len(gc.get_objects())
    for i in range(N):
        for fn, _ in table.values():
            if i % 8 == 0 or fn is table["out"][0]:
                fn()
    grown = len(gc.get_objects()) - n0
    assert grown < 100, f"{grown} more gc-tracked objects after {N} rounds of calls"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_outputs_are_freed_when_dropped(fw, make_case, gc_off):
    """The caller holds the only reference to a fresh output and mask."""
    case = ragged_case(make_case)
    a = case.inputs(fw)
    out, pad = robocache.resample(a["values"], a["times"], a["new_times"], offsets=a["offsets"], index=a["index"],
                                  return_mask=True)
    assert sys.getrefcount(out) == 2 and sys.getrefcount(pad) == 2  # ours + getrefcount's argument
    refs = [weakref.ref(out), weakref.ref(pad)]
    del out, pad
    assert all(r() is None for r in refs), "output kept alive by a hidden reference"


@needs_torch
def test_torch_storages_released(make_case, gc_off):
    """A DLPack tensor never deleted keeps its torch storage alive without
    touching the Python refcount; the storage's own use count shows it."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        pytest.skip("this torch has no torch._C._storage_Use_Count")
    table = calls(ragged_case(make_case), "torch")
    fn, objs = table["mask"]
    tensors = [o for o in objs if isinstance(o, torch.Tensor)]
    fn()
    before = [use_count(o.untyped_storage()._cdata) for o in tensors]
    for _ in range(2000):
        for kind in ("allocate", "mask", "content-error", "dtype-error"):
            table[kind][0]()
    after = [use_count(o.untyped_storage()._cdata) for o in tensors]
    assert after == before
