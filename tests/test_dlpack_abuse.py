"""DLPack abuse: robocache against producers that break the protocol, and arrays at the edges.

Every array argument of resample, voxelize and fuse is fed through a forged producer
(tests/dlpack_forge.py: handcrafted DLManagedTensor[Versioned] capsules built with ctypes) that
gets one thing wrong. Each case checks the four promises of docs/reliability.md:

- the right exception type, with a message naming the argument (`values`, `out`,
  `streams[0] offsets`, ...): BufferError for DLPack protocol faults (capsule names, versions,
  lanes, device types, NULL pointers, negative sizes, a producer method that raised: its own
  exception is the __cause__), TypeError for dtypes, ValueError for shapes, sizes and strides
  beyond int64, read-only or aliasing out=, robocache.CudaError for CUDA arrays in a CPU build or without a GPU;
- the process stays alive;
- every managed tensor handed out is released exactly once (the deleter of each export is
  counted, whether robocache or the capsule's destructor called it);
- the caller's data is unchanged (out= included, when the call fails).

Behaviours defined here:
- out= sharing any byte with an input is a ValueError ("out overlaps the memory of values"):
  the kernels read inputs while writing out and run on several threads, so in-place results
  would depend on scheduling. Adjacent, non-overlapping memory is fine.
- Inputs whose data is not aligned to their element size (np.frombuffer(..., offset=1)) are
  copied once; a misaligned out= is a BufferError.
- Element counts and strides are int64 throughout: a ragged stream past 2^31 samples and a
  voxel grid past 2^31 voxels give exact results; sizes whose byte extent overflows int64 are
  a ValueError naming the argument.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import robocache
from dlpack_forge import (BFLOAT, BOOL, COMPLEX, CPU, CUDA, CUDA_HOST, CUDA_MANAGED, FLOAT, INT, METAL, OPAQUE,
                          OPENCL, READ_ONLY, UINT, VULKAN, Forged, dl_dtype, forged_type_with_exchange)

try:
    import torch
except ModuleNotFoundError:
    torch = None


# ----------------------------------------------------------------------------
# forged arguments, released and unchanged


@pytest.fixture
def forge():
    """forge(array, **faults) -> Forged; after the test every export was deleted exactly once and
    every array not marked `may_change` holds its original bytes."""
    made = []

    def make(array, cls=Forged, **faults):
        f = cls(array, **faults)
        f.may_change = False
        made.append(f)
        return f

    yield make
    for f in made:
        f.release()  # capsules die by reference count: no gc.collect needed (and it is slow)
    for f in made:
        counts = f.deleter_counts()
        assert all(c == 1 for c in counts), f"deleter calls per export: {counts} (each must be 1)"
        if not f.may_change:
            assert f.unchanged(), "robocache modified an array it was given"


def names(label):
    """A regex matching `label` as a whole argument name (times, not new_times)."""
    return rf"(?<![\w\[]){re.escape(label)}(?![\w\]])"


# ----------------------------------------------------------------------------
# one small valid problem per op, every array argument named

F32, F64, I64 = np.float32, np.float64, np.int64


def problem(op):
    """(numpy arrays by argument, keyword options, argument labels used in messages)."""
    if op == "resample":  # ragged: 3 episodes (one empty), 2 output rows, 3 targets, 2 features
        a = {"values": np.arange(14, dtype=F32).reshape(7, 2), "times": np.array([0, 1, 2, 0, .5, 1, 4], F64),
             "new_times": np.array([[0, .25, 9], [-1, 1.5, 2]], F64), "offsets": np.array([0, 3, 3, 7], I64),
             "index": np.array([2, 0], I64), "out": np.full((2, 3, 2), -7, F32)}
        return a, {}, {k: k for k in a}
    if op == "resample-lengths":  # dense with lengths
        a = {"values": np.arange(30, dtype=F64).reshape(2, 5, 3), "times": np.tile(np.arange(5, dtype=F64), (2, 1)),
             "new_times": np.array([[0.5, 3], [1, 2.5]], F64), "lengths": np.array([5, 2], I64),
             "out": np.full((2, 2, 3), -7, F64)}
        return a, {}, {k: k for k in a}
    if op == "voxelize":  # ragged, mean of 2 features, grid 2x3x4
        a = {"points": np.array([[.1, .1, .1], [.6, 1.1, 1.9], [.2, .3, .4], [.9, .2, 1.6], [.1, .1, .1],
                                 [5, 5, 5]], F32),
             "features": np.arange(12, dtype=F32).reshape(6, 2), "offsets": np.array([0, 2, 6], I64),
             "out": np.full((2, 2, 2, 3, 4), -7, F32)}
        return a, {"grid": (2, 3, 4), "voxel_size": 0.5, "origin": (0, 0, 0), "mode": "mean"}, {k: k for k in a}
    if op == "voxelize-lengths":
        a = {"points": np.array([[[.1, .1, .1], [.6, .6, .6], [9, 9, 9]], [[.3, .3, .3], [0, 0, 0], [1, 1, 1]]], F64),
             "lengths": np.array([2, 3], I64), "out": np.full((2, 2, 2, 2), -7, F32)}
        return a, {"grid": 2, "voxel_size": 0.5, "origin": (0, 0, 0)}, {k: k for k in a}
    if op == "fuse":  # two ragged streams, 3 episodes each
        a = {"v0": np.arange(14, dtype=F32).reshape(7, 2), "t0": np.array([0, 1, 2, 0, .5, 1, 4], F64),
             "o0": np.array([0, 3, 3, 7], I64), "v1": np.arange(5, dtype=F32).reshape(5, 1),
             "t1": np.array([0, 3, 1, 2, 3], F64), "o1": np.array([0, 2, 2, 5], I64),
             "index": np.array([2, 0], I64), "new_times": np.array([[0, .25, 9], [-1, 1.5, 2]], F64),
             "out": np.full((2, 3, 3), -7, F32)}
        labels = {"v0": "streams[0] values", "t0": "streams[0] times", "o0": "streams[0] offsets",
                  "v1": "streams[1] values", "t1": "streams[1] times", "o1": "streams[1] offsets",
                  "index": "index", "new_times": "new_times", "out": "out"}
        return a, {"modes": ["linear", "previous"]}, labels
    raise ValueError(op)


def run(op, args, kw):
    """robocache.<op> on argument objects (forged or numpy) named as in problem()."""
    a = dict(args)
    if op.startswith("resample"):
        return robocache.resample(a.pop("values"), a.pop("times"), a.pop("new_times"), **a, **kw)
    if op.startswith("voxelize"):
        return robocache.voxelize(a.pop("points"), **a, **kw)
    streams = [(a.pop("v0"), a.pop("t0"), a.pop("o0")), (a.pop("v1"), a.pop("t1"), a.pop("o1"))]
    return robocache.fuse(streams, a.pop("new_times"), **a, **kw)


def expected(op):
    """The op's result on the plain numpy problem (out= left out)."""
    a, kw, _ = problem(op)
    a.pop("out")
    return run(op, a, kw)


def call_with(op, forge, arg, replace=None, **faults):
    """Runs op with every array forged, `arg` with `faults` (or given as the object `replace`)."""
    a, kw, _ = problem(op)
    args = {}
    for k, v in a.items():
        if k == arg and replace is not None:
            args[k] = replace
        else:
            args[k] = forge(v, **(faults if k == arg else {}))
    return run(op, args, kw), args


OP_ARGS = [(op, arg) for op in ("resample", "resample-lengths", "voxelize", "voxelize-lengths", "fuse")
           for arg in problem(op)[0]]
OP_ARG_IDS = [f"{op}-{arg}" for op, arg in OP_ARGS]


def label_of(op, arg):
    return problem(op)[2][arg]


# ----------------------------------------------------------------------------
# faults that every array argument must reject the same way


class Boom(BaseException):
    """Not an Exception: must pass through robocache unchanged (like KeyboardInterrupt)."""


PROTOCOL_FAULTS = {
    # capsule names and versions
    "name-foo": (dict(capsule_name=b"foo"), BufferError, "capsule named"),
    "name-null": (dict(capsule_name=None), BufferError, "capsule named NULL"),
    "name-used": (dict(capsule_name=b"used_dltensor_versioned"), BufferError, "not an unused"),
    "name-legacy-used": (dict(versioned=False, capsule_name=b"used_dltensor"), BufferError, "not an unused"),
    "name-swapped": (dict(versioned=False, capsule_name=b"dltensor_versioned"), None, None),  # see below
    "version-0": (dict(version=(0, 8)), BufferError, "version 0.8"),
    "version-2": (dict(version=(2, 0)), BufferError, "version 2.0"),
    "version-max": (dict(version=(2**32 - 1, 0)), BufferError, "version 4294967295"),
    # __dlpack__ raising or returning junk
    "dlpack-bufferror": (dict(dlpack_raises=BufferError("cannot export")), BufferError, "cannot export"),
    "dlpack-runtimeerror": (dict(dlpack_raises=RuntimeError("device lost\nC++ backtrace")), BufferError,
                            "__dlpack__\\(\\) raised RuntimeError: device lost$"),
    "dlpack-valueerror": (dict(dlpack_raises=ValueError("bad")), BufferError, "raised ValueError: bad"),
    "dlpack-typeerror": (dict(dlpack_raises=TypeError("no stream")), BufferError, "raised TypeError: no stream"),
    "dlpack-int": (dict(dlpack_returns=42), BufferError, "returned int, not a DLPack capsule"),
    "dlpack-none": (dict(dlpack_returns=None), BufferError, "returned NoneType"),
    "dlpack-tuple": (dict(dlpack_returns=(1, 2)), BufferError, "returned tuple"),
    # __dlpack_device__ raising or returning junk
    "device-raises": (dict(device_raises=RuntimeError("no device")), BufferError,
                      "__dlpack_device__\\(\\) raised RuntimeError: no device"),
    "device-none": (dict(device_returns=None), BufferError, "__dlpack_device__\\(\\) returned None"),
    "device-short": (dict(device_returns=(1,)), BufferError, "returned \\(1,\\)"),
    "device-long": (dict(device_returns=(1, 0, 0)), BufferError, "returned"),
    "device-list": (dict(device_returns=[1, 0]), BufferError, "returned \\[1, 0\\]"),
    "device-str": (dict(device_returns=("cpu", 0)), BufferError, "returned"),
    "device-float": (dict(device_returns=(1.0, 0)), BufferError, "returned"),
    "device-negative": (dict(device_returns=(-1, 0)), BufferError, "returned"),
    "device-huge": (dict(device_returns=(2**32 + 1, 0)), BufferError, "returned"),  # must not wrap to 1 (CPU)
    "device-id-negative": (dict(device_returns=(1, -3)), BufferError, "returned"),
    "device-mismatch": (dict(device_returns=(CPU, 0), device=(CUDA_HOST, 0)), BufferError,
                        "said \\(1, 0\\) but __dlpack__\\(\\) exported a tensor on \\(3, 0\\)"),
    # unsupported dtypes, lanes, devices
    "dtype-complex": (dict(dtype=(COMPLEX, 64, 1)), TypeError, "unsupported dtype \\(DLPack type code 5, 64"),
    "dtype-opaque": (dict(dtype=(OPAQUE, 64, 1)), TypeError, "unsupported dtype"),
    "dtype-float8": (dict(dtype=(FLOAT, 8, 1)), TypeError, "unsupported dtype"),
    "dtype-float128": (dict(dtype=(FLOAT, 128, 1)), TypeError, "unsupported dtype"),
    "dtype-int128": (dict(dtype=(INT, 128, 1)), TypeError, "unsupported dtype"),
    "dtype-uint1": (dict(dtype=(UINT, 1, 1)), TypeError, "unsupported dtype"),
    "dtype-bool32": (dict(dtype=(BOOL, 32, 1)), TypeError, "unsupported dtype"),
    "dtype-bfloat32": (dict(dtype=(BFLOAT, 32, 1)), TypeError, "unsupported dtype"),
    "dtype-code-99": (dict(dtype=(99, 32, 1)), TypeError, "unsupported dtype"),
    "lanes-0": (dict(dtype=(FLOAT, 32, 0)), BufferError, "lanes=0"),
    "lanes-4": (dict(dtype=(FLOAT, 32, 4)), BufferError, "lanes=4"),
    "device-opencl": (dict(device=(OPENCL, 0)), BufferError, "device type 4"),
    "device-vulkan": (dict(device=(VULKAN, 0)), BufferError, "device type 7"),
    "device-metal": (dict(device=(METAL, 0)), BufferError, "device type 8"),
    "device-0": (dict(device=(0, 0)), BufferError, "device type 0"),
    "device-99": (dict(device=(99, 0)), BufferError, "device type 99"),
    # malformed tensors
    "ndim-negative": (dict(ndim=-1), BufferError, "ndim -1"),
    "ndim-9": (dict(ndim=9, shape=[1] * 9, strides=[1] * 9), ValueError, "9 dimensions"),
    "ndim-huge": (dict(ndim=2**31 - 1), ValueError, "dimensions"),
    "shape-null": (dict(shape=None), BufferError, "no shape array"),
    "shape-negative": (dict(shape=[-1, 2]), BufferError, "negative size -1"),
    "data-null": (dict(data=0), BufferError, "data pointer is NULL"),
    "count-overflow": (dict(shape=[2**40, 2**40, 2**40], strides=[0, 0, 0]), ValueError,
                       "more elements than robocache can index"),
    "strides-overflow": (dict(shape=[3, 3], strides=[2**62, 1]), ValueError, "reach beyond 2\\^63 bytes"),
    "strides-wrap-below-0": (dict(shape=[3, 2], strides=[-(2**58), 1]), BufferError, "outside the address space"),
    "byte-offset-huge": (dict(byte_offset=2**64 - 8), BufferError, "byte_offset"),
    "byte-offset-2^63": (dict(byte_offset=2**63), BufferError, "byte_offset"),
}
# a legacy struct in a capsule that claims to be versioned: the versioned layout read from a
# legacy struct is garbage; robocache cannot detect that in general, so the case is left out
del PROTOCOL_FAULTS["name-swapped"]


@pytest.mark.parametrize("fault", list(PROTOCOL_FAULTS))
@pytest.mark.parametrize("op,arg", OP_ARGS, ids=OP_ARG_IDS)
def test_protocol_fault(op, arg, fault, forge):
    faults, exc, match = PROTOCOL_FAULTS[fault]
    with pytest.raises(exc, match=names(label_of(op, arg))) as info:
        call_with(op, forge, arg, **faults)
    assert re.search(match, str(info.value)), f"{info.value!r} does not say {match!r}"
    if fault.startswith(("dlpack-runtime", "dlpack-value", "dlpack-type", "device-raises")):
        assert info.value.__cause__ is not None, "the producer's exception must be the __cause__"


@pytest.mark.parametrize("op,arg", OP_ARGS, ids=OP_ARG_IDS)
@pytest.mark.parametrize("exc", [MemoryError("out of host memory"), Boom("stop")], ids=["MemoryError", "BaseException"])
def test_producer_exceptions_that_pass_unchanged(op, arg, exc, forge):
    with pytest.raises(type(exc)) as info:
        call_with(op, forge, arg, dlpack_raises=exc)
    assert info.value is exc


@pytest.mark.parametrize("op,arg", OP_ARGS, ids=OP_ARG_IDS)
def test_zero_dim(op, arg, forge):
    """0-d tensors (ndim 0, NULL shape and strides, as the spec allows) are rejected by shape."""
    with pytest.raises(ValueError, match=names(label_of(op, arg))):
        call_with(op, forge, arg, replace=None, ndim=0, shape=None, strides=None)


@pytest.mark.parametrize("op,arg", OP_ARGS, ids=OP_ARG_IDS)
def test_cuda_arrays_without_a_cuda_device(op, arg, forge):
    """A CPU build, or a CUDA build on a machine without GPUs: CudaError naming the argument,
    before robocache asks any framework for a CUDA stream."""
    if robocache.cuda_available():
        pytest.skip("a GPU is visible: a forged CUDA array would point the kernel at host memory")
    for device in [(CUDA, 0), (CUDA_MANAGED, 1)]:
        with pytest.raises(robocache.CudaError, match=names(label_of(op, arg))):
            call_with(op, forge, arg, device=device)


# ----------------------------------------------------------------------------
# faults robocache accepts: the result equals the plain numpy call


def equal(got, want):
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            equal(g, w)
        return
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def accepted_variants(array):
    """name -> faults that describe `array` differently but correctly."""
    a = np.ascontiguousarray(array)
    n, item = a.size, a.itemsize
    pad = 5
    backing = np.zeros(n + pad, a.dtype)  # a: elements [pad, pad + n) of a bigger buffer
    backing[pad:] = a.ravel()
    rev = np.ascontiguousarray(a.ravel()[::-1])  # read backwards from its last element
    raw = bytearray(n * item + item + 1)  # a copy of a whose first element is misaligned
    mis = np.frombuffer(raw, a.dtype, n, offset=1)
    mis[:] = a.ravel()
    compact = dict(shape=a.shape, strides=None)
    return {
        "legacy": (a, dict(versioned=False)),
        "legacy-only-producer": (a, dict(legacy_only=True)),
        "null-deleter": (a, dict(null_deleter=True)),
        "legacy-null-deleter": (a, dict(versioned=False, null_deleter=True)),
        "version-1.999": (a, dict(version=(1, 999))),
        "flags-unknown": (a, dict(flags=0xFFFF_FFFF_FFFF_FFF0)),  # reserved bits: read-only bit clear
        "strides-null": (a, compact),
        "cuda-host-memory": (a, dict(device=(CUDA_HOST, 0))),
        "byte-offset": (backing, dict(byte_offset=pad * item, **compact)),
        "negative-strides": (rev, dict(data=rev.ctypes.data + (n - 1) * item, shape=a.shape,
                                      strides=[-s // item for s in a.strides])),
        "misaligned": (mis, dict(**compact)),
        "read-only-input": (a, dict(flags=READ_ONLY)),
        "same-array-twice": (a, {}),
    }


ACCEPTED = [pytest.param(op, arg, variant, id=f"{op}-{arg}-{variant}") for op, arg in OP_ARGS
            for variant in accepted_variants(np.zeros(2)) if not (arg == "out" and variant == "same-array-twice")]


@pytest.mark.parametrize("op,arg,variant", ACCEPTED)
def test_accepted_variants(op, arg, variant, forge):
    """Correct-but-unusual exports give the plain numpy result; for out= the written array is
    the result, except where writing is refused (read-only, misaligned, negative strides)."""
    a, kw, _ = problem(op)
    base, faults = accepted_variants(a[arg])[variant]
    if arg == "out":
        if variant in ("read-only-input", "misaligned", "negative-strides"):
            exc = BufferError if variant == "misaligned" else ValueError
            with pytest.raises(exc, match=names("out")):
                call_with(op, forge, arg, replace=forge(base, **faults))
            return
        target = forge(base, **faults)
        target.may_change = True
        res, _ = call_with(op, forge, arg, replace=target)
        want = expected(op)
        first = res[0] if isinstance(res, tuple) else res
        assert first is target, "out= must be returned"
        n = int(np.prod(want.shape))
        start = faults.get("byte_offset", 0) // base.itemsize
        equal(base.ravel()[start:start + n].reshape(want.shape), want)
        return
    if variant == "same-array-twice":  # one producer object in two calls: two exports, each released
        args = {k: forge(v) for k, v in a.items() if k != "out"}
        equal(run(op, args, kw), expected(op))
        equal(run(op, args, kw), expected(op))
        assert len(args[arg].exports) == 2
        return
    args = {k: (forge(base, **faults) if k == arg else forge(v)) for k, v in a.items() if k != "out"}
    equal(run(op, args, kw), expected(op))


def test_one_object_for_two_arguments(forge):
    """The same producer for times and new_times: two exports, both released."""
    t = forge(np.arange(5, dtype=F64))
    v = forge(np.arange(10, dtype=F32).reshape(5, 2))
    out = robocache.resample(v, t, t)
    equal(out, np.arange(10, dtype=F32).reshape(5, 2))
    assert len(t.exports) == 2


def test_capsule_consumed_twice(forge):
    """A producer returning one capsule for every call: the second import finds it used."""
    v = forge(np.arange(10, dtype=F32).reshape(5, 2))
    t = forge(np.arange(5, dtype=F64), reuse_capsule=True)
    with pytest.raises(BufferError, match=r"^new_times.*capsule named \"used_dltensor_versioned\""):
        robocache.resample(v, t, t)
    assert t.deleter_counts() == [1]  # by robocache, at the end of the failed call


def test_raw_capsule_is_not_an_array():
    cap = np.arange(5.0).__dlpack__(max_version=(1, 0))
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    with pytest.raises(TypeError, match=r"^values: expected an array supporting DLPack"):
        robocache.resample(cap, np.arange(5.0), np.arange(2.0))
    assert get_name(cap) == b"dltensor_versioned", "robocache must not consume a capsule it rejects"


@pytest.mark.parametrize("kind", ["int", "wrong-name", "old", "future", "null-functions", "cycle"])
def test_junk_exchange_api_falls_back_to_dlpack(kind, forge):
    """A type attribute __dlpack_c_exchange_api__ that is junk, of another version, all-NULL, or a
    prev_api cycle: robocache imports through __dlpack__ instead."""
    cls = forged_type_with_exchange(kind)
    a, kw, _ = problem("resample")
    args = {k: forge(v, cls=cls) for k, v in a.items() if k != "out"}
    equal(run("resample", args, kw), expected("resample"))


# ----------------------------------------------------------------------------
# read-only and aliasing outputs


def test_read_only_numpy_out_and_inputs():
    v, t, x = np.arange(10.0).reshape(5, 2), np.arange(5.0), np.array([0.5, 2.5])
    for a in (v, t, x):
        a.flags.writeable = False
    equal(robocache.resample(v, t, x), np.array([[1, 2], [5, 6]], F64))  # read-only inputs are fine
    out = np.full((2, 2), -7.0)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out is read-only"):
        robocache.resample(v, t, x, out=out)
    assert (out == -7).all()


def test_out_aliasing_an_input_is_an_error():
    v = np.arange(15.0).reshape(5, 3)
    t = np.arange(5.0)
    before = v.copy()
    with pytest.raises(ValueError, match=r"^out overlaps the memory of values"):
        robocache.resample(v, t, t, out=v)
    equal(v, before)

    # out's tail overlaps times' head in one buffer; out right after times is fine
    buf = np.zeros(5 + 2 * 3 + 1)
    times = buf[:5]
    times[:] = np.arange(5.0)
    over = buf[4:4 + 6].reshape(2, 3)
    with pytest.raises(ValueError, match=r"^out overlaps the memory of times"):
        robocache.resample(v, times, np.array([0.5, 1.5]), out=over)
    assert (buf[:5] == np.arange(5.0)).all()
    beside = buf[5:5 + 6].reshape(2, 3)
    robocache.resample(v, times, np.array([0.5, 1.5]), out=beside)
    equal(beside, np.array([[1.5, 2.5, 3.5], [4.5, 5.5, 6.5]]))


def test_out_aliasing_in_voxelize_and_fuse():
    pts = np.random.default_rng(0).uniform(0, 1, (10, 3))
    feats = np.zeros((10, 64))  # big enough to hold the [1, 2, 2, 2] ... output bytes
    out = feats.reshape(-1)[:1 * 64 * 8].reshape(64, 2, 2, 2)
    with pytest.raises(ValueError, match=r"^out overlaps the memory of features"):
        robocache.voxelize(pts, features=feats, grid=2, voxel_size=0.5, origin=(0, 0, 0), mode="sum", out=out)
    raw = np.zeros(64, np.uint8)
    new_times = raw[:16].view(F64)  # [2]
    new_times[:] = [0.25, 0.75]
    out = raw[8:16].view(F32).reshape(2, 1)  # shares bytes 8..16 with new_times[1]
    with pytest.raises(ValueError, match=r"^out overlaps the memory of new_times"):
        robocache.fuse([(np.arange(3, dtype=F32), np.arange(3.0))], new_times, out=out)
    assert (new_times == [0.25, 0.75]).all()


# ----------------------------------------------------------------------------
# sizes past 2^31 and huge views


def test_ragged_stream_past_2_31_samples():
    """Episode 1 lives at samples [2^31 + 1, 2^31 + 8): 64-bit element offsets or wrong values.
    np.zeros maps untouched zero pages, so this costs ~10 GB of address space and no memory."""
    N = 2**31 + 8
    values = np.zeros((N, 1), np.uint8)
    times = np.zeros(N, np.float32)
    times[2**31 + 1:] = np.arange(7)
    values[2**31 + 1:, 0] = np.arange(10, 17)
    offsets = np.array([0, 2**31 + 1, N], I64)
    out = robocache.resample(values, times, np.array([[0, 2.4, 5.6, 99]], np.float32), mode="nearest",
                             offsets=offsets, index=np.array([1], I64))
    equal(out, np.array([[[10], [12], [16], [16]]], np.uint8))


def test_voxel_grid_past_2_31_voxels():
    """A [1, 2, 1024, 2^20 + 1] occupancy grid (2^31 + 2048 voxels, 2 GiB of bool): the last voxel
    has a linear index past 2^31."""
    grid = (2, 1024, 2**20 + 1)
    pts = np.array([[1.5, 1023.5, 2**20 + 0.5], [0.5, 0.5, 0.5]], F64)
    out, dropped = robocache.voxelize(pts, grid=grid, voxel_size=1.0, origin=(0, 0, 0), dtype="bool",
                                      return_dropped=True)
    assert out.shape == grid and int(dropped) == 0
    assert out[1, 1023, 2**20] and out[0, 0, 0]
    assert np.count_nonzero(out) == 2
    del out


def test_huge_broadcast_views():
    """as_strided views with ~2^40 rows over a few bytes: imported without copies or overflow."""
    row = np.array([1.0, 2.0, 3.0])
    values = as_strided(row, shape=(2**40, 3), strides=(0, 8))
    times = as_strided(np.zeros(1), shape=(2**40,), strides=(0,))
    out = robocache.resample(values, times, np.array([[0.0, 1.0]]), offsets=np.array([0, 4, 2**40], I64),
                             index=np.array([0], I64))
    equal(out, np.array([[row, row]]))

    pts = as_strided(np.array([0.25, 0.25, 0.25]), shape=(2, 2**33, 3), strides=(0, 0, 8))
    occ = robocache.voxelize(pts, lengths=np.array([3, 0], I64), grid=2, voxel_size=0.5, origin=(0, 0, 0))
    assert occ[0, 0, 0, 0] == 1 and occ.sum() == 1
    feats = as_strided(np.ones(1, F32), shape=(2, 2**33, 1), strides=(0, 0, 4))
    with pytest.raises(ValueError, match=r"^points: .* fewer than 2\^31"):
        robocache.voxelize(pts, features=feats, lengths=np.array([3, 0], I64), grid=2, voxel_size=0.5,
                           origin=(0, 0, 0), mode="mean")


# ----------------------------------------------------------------------------
# torch tensors torch cannot export


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("kind", ["sparse", "meta"])
def test_torch_tensors_without_dlpack(kind):
    t = torch.arange(5, dtype=torch.float64)
    bad = t.to_sparse() if kind == "sparse" else torch.empty(5, device="meta")
    with pytest.raises(BufferError, match=r"^values: the DLPack exchange API raised") as info:
        robocache.resample(bad, t, t)
    assert "\n" not in str(info.value), "torch's C++ backtrace belongs in __cause__, not the message"
    assert info.value.__cause__ is not None


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_tensor_requiring_grad_is_read():
    t = torch.arange(5, dtype=torch.float64)
    v = torch.arange(5.0, requires_grad=True)
    equal(robocache.resample(v, t, torch.tensor([0.5, 3.5], dtype=torch.float64)).detach().numpy(),
          np.array([0.5, 3.5], F32))
