"""What users get wrong: every bad argument raises the documented exception
type with a message naming the argument, leaves the caller's arrays as they
were, and the next good call still works.

What is asserted about frameworks: numpy and torch arguments may not be mixed, a TypeError
naming the argument (test_resample.py::test_mixed_numpy_and_torch_arguments_rejected);
arguments on another device than `values` are a ValueError naming the argument
(test_resample_cuda.py, since it needs a GPU).
"""

from __future__ import annotations

import numpy as np
import pytest

import robocache
from reference import assert_equal, poisoned, resample_ref, snapshot

try:
    import torch
except ModuleNotFoundError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

# messages must name the argument; \b keeps "times" from matching "new_times"
VALUES, TIMES, NEW_TIMES = r"\bvalues\b", r"\btimes\b", r"\bnew_times\b"
OFFSETS, INDEX, LENGTHS, OUT, MODE = r"\boffsets\b", r"\bindex\b", r"\blengths\b", r"\bout\b", r"\bmode\b"


class Base:
    """A valid dense call (B=2, S=6, T=5, D=3) and a valid ragged one (E=3, N=10)."""

    def __init__(self, rng):
        self.v = rng.standard_normal((2, 6, 3))
        self.t = np.sort(rng.uniform(0, 1, (2, 6)), axis=1)
        self.x = rng.uniform(-0.1, 1.1, (2, 5))
        self.rv = rng.standard_normal((10, 3))
        self.rt = np.concatenate([np.sort(rng.uniform(0, 1, 4)), np.sort(rng.uniform(0, 1, 6))])
        self.off = np.array([0, 4, 4, 10], np.int64)
        self.idx = np.array([2, 0], np.int64)
        self.q = rng.standard_normal((2, 6, 4))
        self.q /= np.linalg.norm(self.q, axis=-1, keepdims=True)

    def ragged(self, **kw):
        args = (self.rv, self.rt, self.x)
        return args, {"offsets": self.off, "index": self.idx, **kw}


def unsorted(t):
    t = t.copy()
    t[..., [2, 3]] = t[..., [3, 2]]
    return t


def with_value(a, pos, val):
    a = a.copy()
    a[pos] = val
    return a


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


# (id, exception, message pattern, builder(base) -> (args, kwargs))
CASES = [
    # ---- types and dtypes: TypeError
    ("int-values-linear", TypeError, rf"{VALUES}|{MODE}|linear",
     lambda b: ((b.v.astype(np.int32), b.t, b.x), {"mode": "linear"})),
    ("bool-values-linear", TypeError, rf"{VALUES}|{MODE}|linear",
     lambda b: ((b.v > 0, b.t, b.x), {})),
    ("int-values-slerp", TypeError, rf"{VALUES}|{MODE}|slerp",
     lambda b: ((b.q.astype(np.int16), b.t, b.x), {"mode": "slerp"})),
    ("new_times-float32-vs-float64", TypeError, NEW_TIMES,
     lambda b: ((b.v, b.t, b.x.astype(np.float32)), {})),
    ("new_times-int64-vs-float64", TypeError, NEW_TIMES,
     lambda b: ((b.v, b.t, (b.x * 1e9).astype(np.int64)), {})),
    ("times-int32", TypeError, TIMES,
     lambda b: ((b.v, (b.t * 1e6).astype(np.int32), (b.x * 1e6).astype(np.int32)), {})),
    ("times-float16", TypeError, TIMES,
     lambda b: ((b.v, b.t.astype(np.float16), b.x.astype(np.float16)), {})),
    ("times-uint64", TypeError, TIMES,
     lambda b: ((b.v, (b.t * 1e9).astype(np.uint64), (b.x * 1e9).astype(np.uint64)), {})),
    ("offsets-int32", TypeError, OFFSETS,
     lambda b: b.ragged(offsets=b.off.astype(np.int32))),
    ("index-int32", TypeError, INDEX,
     lambda b: b.ragged(index=b.idx.astype(np.int32))),
    ("index-float64", TypeError, INDEX,
     lambda b: b.ragged(index=b.idx.astype(np.float64))),
    ("lengths-int32", TypeError, LENGTHS,
     lambda b: ((b.v, b.t, b.x), {"lengths": np.array([6, 3], np.int32)})),
    ("values-complex64", (TypeError, BufferError), VALUES,
     lambda b: ((b.v.astype(np.complex64), b.t, b.x), {"mode": "nearest"})),
    ("values-big-endian", (TypeError, BufferError), VALUES,
     lambda b: ((b.v.astype(">f8"), b.t, b.x), {})),
    ("values-list", TypeError, VALUES, lambda b: ((b.v.tolist(), b.t, b.x), {})),
    ("values-None", TypeError, VALUES, lambda b: ((None, b.t, b.x), {})),
    ("times-list", TypeError, TIMES, lambda b: ((b.v, b.t.tolist(), b.x), {})),
    ("new_times-None", TypeError, NEW_TIMES, lambda b: ((b.v, b.t, None), {})),
    ("new_times-list", TypeError, NEW_TIMES, lambda b: ((b.v, b.t, b.x.tolist()), {})),
    ("offsets-list", TypeError, OFFSETS, lambda b: b.ragged(offsets=[0, 4, 4, 10])),
    ("index-list", TypeError, INDEX, lambda b: b.ragged(index=[2, 0])),
    ("lengths-list", TypeError, LENGTHS, lambda b: ((b.v, b.t, b.x), {"lengths": [6, 3]})),
    ("mode-not-str", TypeError, MODE, lambda b: ((b.v, b.t, b.x), {"mode": 1})),
    ("out-wrong-dtype", TypeError, OUT,
     lambda b: ((b.v, b.t, b.x), {"out": np.empty((2, 5, 3), np.float32)})),
    ("out-list", TypeError, OUT, lambda b: ((b.v, b.t, b.x), {"out": [[0.0] * 3] * 10})),
    ("unknown-keyword-mask-out", TypeError, r"mask|is_pad|keyword",
     lambda b: ((b.v, b.t, b.x), {"is_pad": np.empty((2, 5), bool)})),
    # ---- shapes: ValueError
    ("times-values-length-mismatch", ValueError, rf"{TIMES}|{VALUES}",
     lambda b: ((b.v[:, :5], b.t, b.x), {})),
    ("times-values-batch-mismatch", ValueError, rf"{TIMES}|{VALUES}",
     lambda b: ((b.v[:1], b.t, b.x), {})),
    ("row-times-values-mismatch", ValueError, rf"{TIMES}|{VALUES}",
     lambda b: ((b.v[0, :5], b.t[0], b.x[0]), {})),
    ("new_times-batch-mismatch", ValueError, NEW_TIMES,
     lambda b: ((b.v, b.t, np.concatenate([b.x, b.x])), {})),
    ("new_times-1d-with-batched-times", ValueError, NEW_TIMES,
     lambda b: ((b.v, b.t, b.x[0]), {})),
    ("times-3d", ValueError, TIMES, lambda b: ((b.v[..., None], b.t[..., None], b.x), {})),
    ("values-0d", ValueError, rf"{VALUES}|{TIMES}", lambda b: ((np.array(1.0), b.t[0], b.x[0]), {})),
    ("slerp-last-dim-3", ValueError, rf"{VALUES}|slerp|4", lambda b: ((b.v, b.t, b.x), {"mode": "slerp"})),
    ("slerp-no-feature-dim", ValueError, rf"{VALUES}|slerp|4",
     lambda b: ((b.v[..., 0], b.t, b.x), {"mode": "slerp"})),
    ("lengths-wrong-length", ValueError, LENGTHS,
     lambda b: ((b.v, b.t, b.x), {"lengths": np.array([6, 3, 1], np.int64)})),
    ("lengths-2d", ValueError, LENGTHS,
     lambda b: ((b.v, b.t, b.x), {"lengths": np.array([[6, 3]], np.int64)})),
    ("lengths-with-one-row", ValueError, LENGTHS,
     lambda b: ((b.v[0], b.t[0], b.x[0]), {"lengths": np.array([6], np.int64)})),
    ("offsets-2d", ValueError, OFFSETS, lambda b: b.ragged(offsets=b.off[None])),
    ("offsets-empty", ValueError, OFFSETS, lambda b: b.ragged(offsets=np.zeros(0, np.int64))),
    ("index-wrong-length", ValueError, rf"{INDEX}|{NEW_TIMES}",
     lambda b: b.ragged(index=np.array([0, 1, 2], np.int64))),
    ("index-2d", ValueError, INDEX, lambda b: b.ragged(index=b.idx[None])),
    ("ragged-times-2d", ValueError, rf"{TIMES}|{OFFSETS}",
     lambda b: ((b.v, b.t, b.x), {"offsets": np.array([0, 1, 2], np.int64), "index": b.idx})),
    ("ragged-values-times-mismatch", ValueError, rf"{TIMES}|{VALUES}",
     lambda b: ((b.rv[:9], b.rt, b.x), {"offsets": b.off, "index": b.idx})),
    ("ragged-new_times-1d", ValueError, NEW_TIMES,
     lambda b: ((b.rv, b.rt, b.x[0]), {"offsets": b.off, "index": b.idx[:1]})),
    ("lengths-with-offsets", ValueError, LENGTHS, lambda b: b.ragged(lengths=np.array([1, 1], np.int64))),
    ("offsets-without-index", ValueError, rf"{INDEX}|{OFFSETS}",
     lambda b: ((b.rv, b.rt, b.x), {"offsets": b.off})),
    ("index-without-offsets", ValueError, rf"{INDEX}|{OFFSETS}",
     lambda b: ((b.rv, b.rt, b.x), {"index": b.idx})),
    ("unknown-mode", ValueError, MODE, lambda b: ((b.v, b.t, b.x), {"mode": "cubic"})),
    ("out-wrong-shape", ValueError, OUT, lambda b: ((b.v, b.t, b.x), {"out": np.empty((2, 5, 4))})),
    ("out-wrong-ndim", ValueError, OUT, lambda b: ((b.v, b.t, b.x), {"out": np.empty((10, 3))})),
    ("out-read-only", ValueError, OUT, lambda b: ((b.v, b.t, b.x), {"out": read_only(np.zeros((2, 5, 3)))})),
    ("out-not-contiguous", ValueError, OUT,
     lambda b: ((b.v, b.t, b.x), {"out": np.zeros((2, 5, 6))[:, :, ::2]})),
    # ---- content, always checked on the CPU: ValueError
    ("times-unsorted", ValueError, TIMES, lambda b: ((b.v, unsorted(b.t), b.x), {})),
    ("times-unsorted-row", ValueError, TIMES, lambda b: ((b.v[1], unsorted(b.t[1]), b.x[1]), {})),
    ("times-unsorted-int64", ValueError, TIMES,
     lambda b: ((b.v, unsorted((b.t * 1e9).astype(np.int64)), (b.x * 1e9).astype(np.int64)), {})),
    ("times-unsorted-float32", ValueError, TIMES,
     lambda b: ((b.v, unsorted(b.t).astype(np.float32), b.x.astype(np.float32)), {})),
    ("times-nan", ValueError, TIMES, lambda b: ((b.v, with_value(b.t, (1, 3), np.nan), b.x), {})),
    ("times-nan-first", ValueError, TIMES, lambda b: ((b.v, with_value(b.t, (0, 0), np.nan), b.x), {})),
    ("times-inf-last", ValueError, TIMES, lambda b: ((b.v, with_value(b.t, (0, 5), np.inf), b.x), {})),
    ("times-minus-inf", ValueError, TIMES, lambda b: ((b.v, with_value(b.t, (1, 0), -np.inf), b.x), {})),
    ("times-unsorted-in-episode", ValueError, TIMES,
     lambda b: ((b.rv, with_value(b.rt, 8, -5.0), b.x), {"offsets": b.off, "index": b.idx})),
    ("times-unsorted-inside-lengths", ValueError, TIMES,
     lambda b: ((b.v, unsorted(b.t), b.x), {"lengths": np.array([6, 4], np.int64)})),
    ("offsets-decreasing", ValueError, OFFSETS, lambda b: b.ragged(offsets=np.array([0, 5, 4, 10], np.int64))),
    ("offsets-not-from-0", ValueError, OFFSETS, lambda b: b.ragged(offsets=np.array([1, 4, 4, 10], np.int64))),
    ("offsets-short-of-N", ValueError, OFFSETS, lambda b: b.ragged(offsets=np.array([0, 4, 4, 9], np.int64))),
    ("offsets-past-N", ValueError, OFFSETS, lambda b: b.ragged(offsets=np.array([0, 4, 4, 11], np.int64))),
    ("index-negative", ValueError, INDEX, lambda b: b.ragged(index=np.array([0, -1], np.int64))),
    ("index-equal-E", ValueError, INDEX, lambda b: b.ragged(index=np.array([3, 0], np.int64))),
    ("index-huge", ValueError, INDEX, lambda b: b.ragged(index=np.array([0, 2**62], np.int64))),
    ("lengths-past-S", ValueError, LENGTHS, lambda b: ((b.v, b.t, b.x), {"lengths": np.array([6, 7], np.int64)})),
    ("lengths-negative", ValueError, LENGTHS,
     lambda b: ((b.v, b.t, b.x), {"lengths": np.array([-1, 3], np.int64)})),
]


def to_torch(a):
    if isinstance(a, np.ndarray) and a.dtype.isnative and a.dtype.kind != "c" and a.dtype != np.uint64:
        # keep the layout: a non-contiguous `out` must stay non-contiguous
        return torch.from_numpy(a.copy() if a.flags.c_contiguous else a)
    return a


def call_and_check(exc, match, args, kwargs, base):
    arrays = {f"arg{i}": a for i, a in enumerate(args) if hasattr(a, "shape")}
    arrays.update({k: a for k, a in kwargs.items() if hasattr(a, "shape") and k != "out"})
    before = snapshot(arrays)
    with pytest.raises(exc, match=match):
        robocache.resample(*args, **kwargs)
    assert snapshot(arrays) == before, "a failed call modified its inputs"
    # the error left nothing behind: the next good call works and is right
    out = robocache.resample(base.v, base.t, base.x, mode="linear")
    assert_equal(out, resample_ref(base.v, base.t, base.x, "linear")[0])


@pytest.mark.parametrize("exc,match,build", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_argument_numpy(exc, match, build, rng):
    base = Base(rng)
    args, kwargs = build(base)
    call_and_check(exc, match, args, kwargs, base)


TORCH_CASES = [c for c in CASES if c[0] not in (
    "values-complex64", "values-big-endian", "times-uint64",  # no torch equivalent worth asserting
    "out-read-only",  # torch tensors have no read-only flag
)]


@needs_torch
@pytest.mark.parametrize("exc,match,build", [pytest.param(*c[1:], id=c[0]) for c in TORCH_CASES])
def test_bad_argument_torch(exc, match, build, rng):
    base = Base(rng)
    args, kwargs = build(base)
    args = tuple(to_torch(a) for a in args)
    kwargs = {k: to_torch(a) for k, a in kwargs.items()}
    call_and_check(exc, match, args, kwargs, base)


@needs_torch
def test_torch_out_errors(rng):
    base = Base(rng)
    v, t, x = (torch.from_numpy(a) for a in (base.v, base.t, base.x))
    with pytest.raises(TypeError, match=OUT):
        robocache.resample(v, t, x, out=torch.empty(2, 5, 3, dtype=torch.float32))
    with pytest.raises(ValueError, match=OUT):
        robocache.resample(v, t, x, out=torch.empty(2, 5, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=OUT):
        robocache.resample(v, t, x, out=torch.empty(2, 3, 5, dtype=torch.float64).transpose(1, 2))


@pytest.mark.parametrize("check", [None, True, False])
def test_cpu_content_checks_do_not_depend_on_check(check, rng):
    """docs: content is checked always on the CPU; `check` only matters on a GPU."""
    base = Base(rng)
    with pytest.raises(ValueError, match=TIMES):
        robocache.resample(base.v, unsorted(base.t), base.x, check=check)
    with pytest.raises(ValueError, match=INDEX):
        robocache.resample(base.rv, base.rt, base.x, offsets=base.off, index=np.array([0, 3]), check=check)


def test_padding_past_lengths_is_not_validated(rng):
    """Padded batches hold zeros (or anything) past lengths[b]; only the valid
    prefix must be sorted and finite."""
    base = Base(rng)
    t = base.t.copy()
    t[0, 4:] = [0.0, np.nan]
    t[1, 2:] = -1.0
    lengths = np.array([4, 2], np.int64)
    out = robocache.resample(base.v, t, base.x, lengths=lengths)
    assert_equal(out, resample_ref(base.v, t, base.x, "linear", lengths=lengths)[0])


def test_out_left_untouched_by_argument_errors(rng):
    """An argument error is found before anything is written."""
    base = Base(rng)
    buf = poisoned((2, 5, 3), "float64", base.v)
    before = buf.tobytes()
    with pytest.raises(TypeError, match=NEW_TIMES):
        robocache.resample(base.v, base.t, base.x.astype(np.float32), out=buf)
    with pytest.raises(ValueError, match=MODE):
        robocache.resample(base.v, base.t, base.x, mode="cubic", out=buf)
    assert buf.tobytes() == before


def test_ragged_content_check_reports_the_first_row_that_reads_a_bad_episode(rng):
    """The CPU content check scans an episode's times once per call, not once per row that reads
    it (what that costs is benchmarks/bench_resample_check.py's to show: a timing is no test's
    claim). The verdict is unchanged: a bad episode is still reported at the first row that reads
    it, however many rows read it, and the rows of good episodes come out right."""
    N = 400_000
    t = np.sort(rng.uniform(0, 100, N))
    v = rng.standard_normal((N, 2)).astype(np.float32)
    idx, x = np.zeros(2000, np.int64), rng.uniform(0, 100, (2000, 1))
    out = robocache.resample(v, t, x, offsets=np.array([0, N], np.int64), index=idx)
    np.testing.assert_allclose(out, resample_ref(v, t, x, offsets=np.array([0, N], np.int64), index=idx)[0],
                               rtol=1e-6, atol=1e-6)

    bad = t.copy()
    bad[[1000, 1001]] = bad[[1001, 1000]]
    off3 = np.array([0, N // 2, N // 2, N], np.int64)  # episodes 0 (bad at 1001), 1 (empty), 2
    idx = np.array([2, 1, 2, 0, 0, 2], np.int64)
    with pytest.raises(ValueError, match=r"\btimes\b.*episode 0 \(output row 3\) decreases at sample 1001"):
        robocache.resample(v, bad, rng.uniform(0, 100, (6, 4)), offsets=off3, index=idx)
