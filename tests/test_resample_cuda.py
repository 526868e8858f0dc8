"""robocache.resample on CUDA: reference == CPU kernel == CUDA kernel, the
caller's stream, no host sync unless check=True, devices.

The CUDA and CPU kernels use the same formula without FMA contraction, so
every mode but slerp must agree bit for bit; slerp goes through sin/acos,
whose CUDA and libm versions differ in the last bits.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from conftest import Case, make_targets, make_times, make_values, place_targets  # noqa: E402
from gpu_gate import hold  # noqa: E402
from reference import (ALL_DTYPES, TIME_DTYPES, assert_close, assert_equal, modes_for,  # noqa: E402
                       poisoned, resample_ref, to_numpy)

pytestmark = pytest.mark.cuda

# CUDA vs CPU slerp: a few ulps of float32/float64 math, or one ulp of the
# half type after the final rounding
SLERP_CUDA_CPU_ATOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}


def run_both(case):
    """(cuda out, cuda is_pad, cpu out, cpu is_pad) for the same inputs."""
    g, c = case.inputs("torch", "cuda"), case.inputs("torch")
    go, gp = robocache.resample(g["values"], g["times"], g["new_times"], return_mask=True, **case.kwargs(g))
    co, cp = robocache.resample(c["values"], c["times"], c["new_times"], return_mask=True, **case.kwargs(c))
    return go, gp, co, cp


def assert_cuda_equals_cpu(case, go, gp, co, cp):
    assert go.is_cuda and gp.is_cuda and not co.is_cuda
    if case.mode == "slerp":
        assert_close(go, to_numpy(co).astype(np.float64), atol=SLERP_CUDA_CPU_ATOL[case.vdtype], msg=case.msg)
    else:
        assert_equal(go, to_numpy(co), msg="CUDA != CPU " + case.msg)
    assert_equal(gp, to_numpy(cp), msg="is_pad CUDA != CPU " + case.msg)


def matrix():
    for vd in ALL_DTYPES:
        for mode in modes_for(vd):
            for td in TIME_DTYPES:
                for form in ("dense", "ragged"):
                    yield pytest.param(vd, mode, td, form, id=f"{vd}-{mode}-{td}-{form}")


# ----------------------------------------------------------------------------
# results


@pytest.mark.parametrize("vdtype,mode,tdtype,form", list(matrix()))
def test_cuda_equals_cpu_and_reference(vdtype, mode, tdtype, form, make_case):
    case = make_case(form, vdtype, tdtype, mode, B=6, S=20, T=24, lengths=form == "dense", episodes=12, max_len=30)
    case.check("torch", "cuda")  # reference, poisoned out=, is_pad, inputs untouched
    assert_cuda_equals_cpu(case, *run_both(case))


@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("bfloat16", "linear"), ("float16", "slerp"),
                                         ("uint8", "nearest")])
@pytest.mark.parametrize("form,feat", [("row", ()), ("row", (3,)), ("dense", (2, 4)), ("dense", (6, 5, 4)),
                                       ("ragged", (6, 5, 4))])
def test_cuda_shapes(form, feat, vdtype, mode, make_case):
    if mode == "slerp" and feat[-1:] != (4,):
        feat = feat + (4,)
    case = make_case(form, vdtype, "float64", mode, B=3, S=12, T=9, feat=feat)
    case.check("torch", "cuda")
    assert_cuda_equals_cpu(case, *run_both(case))


@pytest.mark.parametrize("form,sizes", [
    ("dense", dict(B=0)), ("dense", dict(T=0)), ("dense", dict(S=0)), ("row", dict(S=0)), ("row", dict(T=0)),
    ("ragged", dict(B=0)), ("ragged", dict(T=0)), ("ragged", dict(max_len=0)),
], ids=lambda p: p if isinstance(p, str) else ",".join(f"{k}={v}" for k, v in p.items()))
def test_cuda_zero_sizes(form, sizes, make_case):
    """An empty grid is not a launch error."""
    case = make_case(form, "float32", "int64", "linear", **sizes)
    case.check("torch", "cuda")
    torch.cuda.synchronize()


@pytest.mark.parametrize("vdtype,mode,tdtype", [("float32", "linear", "float64"), ("bfloat16", "linear", "int64"),
                                                ("float64", "slerp", "float32"), ("int64", "previous", "int64")])
def test_cuda_large_batch(vdtype, mode, tdtype, make_case):
    """More rows and targets than one block: the launcher's grid math."""
    case = make_case("ragged", vdtype, tdtype, mode, B=3000, T=70, episodes=200, max_len=300,
                     feat=(7, 4) if mode == "slerp" else (7,))
    go, gp, co, cp = run_both(case)
    assert_cuda_equals_cpu(case, go, gp, co, cp)
    ref, ref_pad = case.reference()
    case.assert_matches(go, ref, go)
    assert_equal(gp, ref_pad)


@pytest.mark.parametrize("vdtype,mode", [("float32", "linear"), ("int32", "next"), ("float64", "slerp")])
def test_cuda_strided_inputs(vdtype, mode, make_case):
    case = make_case("row", vdtype, "float64", mode, S=20, T=11, feat=(4,))
    a = case.inputs("torch", "cuda")
    vt = a["values"].t().contiguous().t()
    ref, _ = case.reference()
    case.assert_matches(robocache.resample(vt, a["times"], a["new_times"], mode=mode), ref, vt)

    case = make_case("dense", vdtype, "int64", mode, B=1, S=20, T=11, feat=(4,))
    a = case.inputs("torch", "cuda")
    v, t, x = a["values"].expand(5, -1, -1), a["times"].expand(5, -1), a["new_times"].expand(5, -1)
    ref, _ = resample_ref(v.contiguous(), t.contiguous(), x.contiguous(), mode)
    case.assert_matches(robocache.resample(v, t, x, mode=mode), ref, v)

    case = make_case("dense", vdtype, "float32", mode, B=4, S=30, T=20, feat=(4,))
    a = case.inputs("torch", "cuda")
    v = a["values"].transpose(1, 2).contiguous().transpose(1, 2)[::2, ::3]
    t, x = a["times"][::2, ::3], a["new_times"][::2, ::2]
    ref, _ = resample_ref(v.contiguous(), t.contiguous(), x.contiguous(), mode)
    case.assert_matches(robocache.resample(v, t, x, mode=mode), ref, v)


def test_cuda_images_cropped(make_case):
    case = make_case("dense", "uint8", "float64", "nearest", B=3, S=6, T=5, feat=(4, 10, 3))
    a = case.inputs("torch", "cuda")
    crop = a["values"][:, :, :, 1:9:2]
    ref, _ = resample_ref(crop.contiguous(), case.times, case.new_times, "nearest")
    assert_equal(robocache.resample(crop, a["times"], a["new_times"], mode="nearest"), ref)


@pytest.mark.parametrize("vdtype,mode,feat", [
    ("uint8", "nearest", (64, 96, 3)),       # camera frames: vectorized, split over blockIdx.y
    ("uint8", "previous", (65, 97, 3)),      # odd row size: scalar path, split
    ("float32", "linear", (12289,)),         # a split that does not divide the row
    ("bfloat16", "linear", (8192, 2)),
    ("float64", "slerp", (4096, 4)),         # slerp keeps whole rows
])
@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_cuda_few_long_rows(vdtype, mode, feat, form, make_case):
    """Few outputs of long rows: the launcher splits each row's features across blocks; every
    element (and is_pad once) must be written, CUDA == CPU == reference."""
    case = make_case(form, vdtype, "float64", mode, B=3, S=7, T=2, feat=feat, episodes=4, max_len=8)
    case.check("torch", "cuda")
    assert_cuda_equals_cpu(case, *run_both(case))


def long_row_targets(rng, t, T, tdtype, kind):
    """T targets for one long row: "episode" sorted over the whole row at a lower rate (a
    quarter of them exact samples, a quarter midpoints); "spread" unsorted with far outliers
    (make_targets); "episode+outliers" the sorted ones with a few far outside the row."""
    if kind == "spread":
        return make_targets(rng, t, T, tdtype)
    if tdtype == "float32":  # the 2**-11 grid of make_targets
        x = rng.integers(int(t[0] * 2048), int(t[-1] * 2048), T, endpoint=True) / 2048
    elif tdtype == "int64":
        x = rng.integers(int(t[0]), int(t[-1]), T, endpoint=True)
    else:
        x = rng.uniform(t[0], t[-1], T)
    x = place_targets(rng, x.astype(tdtype), t, np.array([t[0], t[-1]]), tdtype, p=[0.5, 0.25, 0.25, 0.0])
    x = np.sort(x)
    if kind == "episode+outliers":
        span = t[-1] - t[0]
        x[rng.integers(0, T, 3)] = np.array([t[0] - span, t[-1] + span, t[0] - 1]).astype(tdtype)
    return x


@pytest.mark.parametrize("kind", ["episode", "spread", "episode+outliers"])
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype,mode,feat", [("bfloat16", "linear", (64,)), ("float32", "nearest", (3,)),
                                              ("int64", "next", (2,))])
def test_cuda_long_rows(vdtype, mode, feat, tdtype, kind, rng):
    """Rows longer than a block's stage of times, in 128- and 256-target tiles: sorted targets
    end their search in the run of times staged in shared memory, spread or unsorted ones (and
    tiles holding an outlier) search global memory. Both must give the CPU's answer, duplicate
    times and exact hits included."""
    B, S, T = 34, 8192, 4096
    t = np.stack([make_times(rng, S, tdtype) for _ in range(B)])
    v = make_values(rng, (B * S,) + feat, vdtype, mode).reshape((B, S) + feat)
    x = np.stack([long_row_targets(rng, t[b], T, tdtype, kind) for b in range(B)])
    case = Case(values=v, times=t, new_times=x, vdtype=vdtype, mode=mode, seed=rng.seed)
    case.check("torch", "cuda")
    assert_cuda_equals_cpu(case, *run_both(case))


# ----------------------------------------------------------------------------
# check=True on the GPU


def bad_ragged(rng, what):
    """A ragged call on the GPU whose content is wrong in one way."""
    t = np.concatenate([np.sort(rng.uniform(0, 1, 5)), np.sort(rng.uniform(0, 1, 7))])
    offsets, index = np.array([0, 5, 5, 12], np.int64), np.array([0, 2, 1], np.int64)
    if what == "unsorted":
        t[[7, 8]] = t[[8, 7]]
    elif what == "nan":
        t[9] = np.nan
    elif what == "inf":
        t[4] = np.inf
    elif what == "index-negative":
        index[1] = -1
    elif what == "index-E":
        index[1] = 3
    elif what == "offsets-decreasing":
        offsets[1:3] = [6, 5]
    elif what == "offsets-not-N":
        offsets[3] = 11
    v = rng.standard_normal((12, 3)).astype(np.float32)
    x = rng.uniform(-0.1, 1.1, (3, 4))
    cu = lambda a: torch.from_numpy(a).cuda()
    return (cu(v), cu(t), cu(x)), {"offsets": cu(offsets), "index": cu(index)}


CHECKS = [("unsorted", r"\btimes\b"), ("nan", r"\btimes\b"), ("inf", r"\btimes\b"),
          ("index-negative", r"\bindex\b"), ("index-E", r"\bindex\b"), ("offsets-decreasing", r"\boffsets\b"),
          ("offsets-not-N", r"\boffsets\b")]


@pytest.mark.parametrize("what,match", CHECKS, ids=[c[0] for c in CHECKS])
def test_check_true_finds_bad_content(what, match, rng):
    args, kw = bad_ragged(rng, what)
    with pytest.raises(ValueError, match=match):
        robocache.resample(*args, check=True, **kw)
    torch.cuda.synchronize()  # the context survived
    good_args, good_kw = bad_ragged(rng, "none")
    out = robocache.resample(*good_args, **good_kw)
    ref, _ = resample_ref(*good_args, "linear", **good_kw)
    assert_equal(out, ref)


@pytest.mark.parametrize("lengths", [[6, 7], [-1, 2]])
def test_check_true_finds_bad_lengths(lengths):
    v = torch.randn(2, 6, 3, device="cuda")
    t = torch.sort(torch.rand(2, 6, device="cuda", dtype=torch.float64), dim=1).values
    x = torch.rand(2, 5, device="cuda", dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\blengths\b"):
        robocache.resample(v, t, x, lengths=torch.tensor(lengths, device="cuda"), check=True)
    torch.cuda.synchronize()


@pytest.mark.parametrize("what", ["unsorted", "nan", "inf"])
def test_check_none_bad_times_stay_in_bounds(what, rng):
    """Without check the GPU does not look at content, but garbage times must
    still not make the kernel read or write out of bounds."""
    args, kw = bad_ragged(rng, what)
    out = robocache.resample(*args, **kw)
    torch.cuda.synchronize()
    assert out.shape == (3, 4, 3)


@pytest.mark.parametrize("form", ["dense", "dense-lengths", "ragged"])
def test_check_none_does_not_sync(form, make_case):
    """Also with lengths and offsets, where reading them on the host would be a sync."""
    case = make_case(form.split("-")[0], "float32", "float64", "linear", B=64, T=32, lengths=form == "dense-lengths")
    a = case.inputs("torch", "cuda")
    v, t, x, kw = a["values"], a["times"], a["new_times"], case.kwargs(a)
    robocache.resample(v, t, x, **kw)  # warm-up: module load, first launch
    torch.cuda.synchronize()
    with hold() as gate:  # a host sync in the call would wait for the gate: the block fails saying so
        out = robocache.resample(v, t, x, **kw)
        assert gate.pending(), "resample(check=None) waited for the GPU: a host sync on the hot path"
    torch.cuda.synchronize()
    assert_equal(out, case.reference()[0], msg=case.msg)


# ----------------------------------------------------------------------------
# streams: the kernel must run on the caller's stream


def stream_setup(make_case):
    case = make_case("dense", "float32", "float64", "previous", B=8, S=64, T=32)
    a = case.inputs("torch", "cuda")
    fresh = a["values"]
    v = torch.zeros_like(fresh)  # what any other stream sees until s has written
    robocache.resample(v, a["times"], a["new_times"], mode="previous")  # warm-up
    torch.cuda.synchronize()
    return case, fresh, v, a["times"], a["new_times"]


def test_runs_on_current_stream(make_case):
    case, fresh, v, t, x = stream_setup(make_case)
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            v.copy_(fresh)  # lands on s only once the gate opens
            out = robocache.resample(v, t, x, mode="previous")
        assert gate.pending(), "stream s had passed the gate when resample returned: resample synchronized with it"
        assert torch.cuda.default_stream().query(), "resample put work on (or made wait) the default stream"
    s.synchronize()
    assert_equal(out, case.reference()[0], msg="kernel not ordered after the writes on the current stream")


@pytest.mark.parametrize("handle", ["stream", "int"])
def test_runs_on_explicit_stream(handle, make_case):
    case, fresh, v, t, x = stream_setup(make_case)
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            v.copy_(fresh)  # lands on s only once the gate opens
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        out = robocache.resample(v, t, x, mode="previous", stream=s if handle == "stream" else s.cuda_stream)
        assert gate.pending(), "stream s had passed the gate when resample returned: resample synchronized with it"
        assert torch.cuda.default_stream().query(), "resample(stream=s) put work on (or made wait) the default stream"
    s.synchronize()
    assert_equal(out, case.reference()[0], msg="kernel not ordered after the writes on stream=s")


# ----------------------------------------------------------------------------
# devices and frameworks


def cpu(a):
    return a.cpu()


DEVICE_MISMATCH = [
    ("times", lambda a: (a["values"], cpu(a["times"]), a["new_times"]), {}),
    ("new_times", lambda a: (a["values"], a["times"], cpu(a["new_times"])), {}),
    ("times", lambda a: (cpu(a["values"]), a["times"], cpu(a["new_times"])), {}),  # values on the CPU
    ("offsets", lambda a: (a["values"], a["times"], a["new_times"]), {"offsets": "cpu"}),
    ("index", lambda a: (a["values"], a["times"], a["new_times"]), {"index": "cpu"}),
    ("out", lambda a: (a["values"], a["times"], a["new_times"]), {"out": "cpu"}),
]


def test_numpy_argument_with_cuda_values_is_a_framework_error(make_case):
    a = make_case("dense", "float32", "float64", "linear", B=3, T=5).inputs("torch", "cuda")
    with pytest.raises(TypeError, match=r"new_times is a numpy array but values is a torch array"):
        robocache.resample(a["values"], a["times"], cpu(a["new_times"]).numpy())


@pytest.mark.parametrize("name,build,moved", DEVICE_MISMATCH, ids=[f"{d[0]}-{i}" for i, d in enumerate(DEVICE_MISMATCH)])
def test_arguments_on_other_device(name, build, moved, make_case):
    case = make_case("ragged", "float32", "float64", "linear", B=4, T=6)
    a = case.inputs("torch", "cuda")
    kw = {"offsets": a["offsets"], "index": a["index"]}
    for k in moved:
        kw[k] = torch.empty(4, 6, 3) if k == "out" else cpu(a[k])
    args = build(a)
    match = r"\btimes\b|\bvalues\b" if name == "times" else rf"\b{name}\b"
    with pytest.raises(ValueError, match=match):
        robocache.resample(*args, **kw)


@pytest.mark.usefixtures("two_gpus")
def test_second_gpu(make_case):
    case = make_case("ragged", "float32", "int64", "linear", B=16, T=12)
    torch.cuda.set_device(0)
    a = case.inputs("torch", "cuda:1")
    out = robocache.resample(a["values"], a["times"], a["new_times"], **case.kwargs(a))
    assert out.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0, "resample did not restore the current device"
    assert_equal(out, case.reference()[0], msg=case.msg)
    # and on device 1's current stream, not device 0's
    s = torch.cuda.Stream(device=1)
    with torch.cuda.stream(s):
        out = robocache.resample(a["values"], a["times"], a["new_times"], **case.kwargs(a))
    s.synchronize()
    assert_equal(out, case.reference()[0], msg=case.msg)
    assert torch.cuda.current_device() == 0
    b = case.inputs("torch", "cuda:0")
    with pytest.raises(ValueError, match=r"\btimes\b|\bvalues\b"):
        robocache.resample(a["values"], b["times"], a["new_times"], **case.kwargs(a))


def test_cupy_arrays(make_case):
    cupy = pytest.importorskip("cupy")
    case = make_case("ragged", "float32", "int64", "linear", B=8, T=10)
    a = {k: (None if v is None else cupy.asarray(v)) for k, v in case.inputs("numpy").items()}
    ref, ref_pad = case.reference()
    out, pad = robocache.resample(a["values"], a["times"], a["new_times"], return_mask=True, **case.kwargs(a))
    assert isinstance(out, cupy.ndarray) and isinstance(pad, cupy.ndarray)
    assert_equal(out.get(), ref, msg=case.msg)
    assert_equal(pad.get(), ref_pad)
    buf = cupy.empty(ref.shape, cupy.float32)
    buf.view(cupy.uint8).fill(0xFF)
    assert robocache.resample(a["values"], a["times"], a["new_times"], out=buf, **case.kwargs(a)) is buf
    assert_equal(buf.get(), ref, msg=case.msg)


def test_pinned_host_tensors_run_on_cpu(make_case):
    case = make_case("ragged", "float32", "float64", "linear", B=8, T=10)
    a = {k: (None if v is None else v.pin_memory()) for k, v in case.inputs("torch").items()}
    out = robocache.resample(a["values"], a["times"], a["new_times"], **case.kwargs(a))
    assert out.device.type == "cpu"
    assert_equal(out, case.reference()[0], msg=case.msg)


# ----------------------------------------------------------------------------
# memory


def test_outputs_come_from_torch_allocator_and_are_freed(make_case):
    case = make_case("ragged", "float32", "float64", "linear", B=256, T=256, feat=(8,))
    a = case.inputs("torch", "cuda")
    args, kw = (a["values"], a["times"], a["new_times"]), case.kwargs(a)
    robocache.resample(*args, **kw)
    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    out = robocache.resample(*args, **kw)
    assert torch.cuda.memory_allocated() - m0 >= out.numel() * out.element_size(), \
        "output not allocated through torch's caching allocator"
    del out
    before = [sys.getrefcount(x) for x in args]
    for _ in range(2000):
        robocache.resample(*args, return_mask=True, **kw)
        with pytest.raises(ValueError, match="mode"):
            robocache.resample(*args, **{**kw, "mode": "cubic"})
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == m0, "GPU memory still held after the outputs were dropped"
    assert [sys.getrefcount(x) for x in args] == before


def test_out_poison_written_everywhere_on_gpu(make_case):
    case = make_case("dense", "bool", "int64", "next", B=5, S=9, T=33, lengths=True)
    a = case.inputs("torch", "cuda")
    buf = poisoned(case.new_times.shape + (3,), "bool", a["values"])
    robocache.resample(a["values"], a["times"], a["new_times"], out=buf, **case.kwargs(a))
    assert_equal(buf, case.reference()[0], msg=case.msg)
