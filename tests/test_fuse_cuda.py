"""robocache.fuse on CUDA: CUDA == CPU (bit for bit; slerp within a few ulps), exactly ONE
kernel launch for all streams, the caller's stream, no host sync unless check=True.

The CPU side is proven equal to separate resamples in tests/test_fuse.py, so CUDA == CPU here
closes the chain reference -> CPU -> CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from gpu_gate import hold  # noqa: E402
from reference import (ALL_DTYPES, FLOAT_DTYPES, TIME_DTYPES, assert_close, assert_equal,  # noqa: E402
                       poisoned, to_numpy)
from test_fuse import FLOAT_MIX, INT_MIX, Fuse  # noqa: E402

pytestmark = pytest.mark.cuda

# CUDA vs CPU slerp: a few ulps of float32/float64 math, or one ulp of the half type
SLERP_CUDA_CPU_ATOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}


def on(device, streams, x, index):
    streams = [tuple(a.to(device) for a in s) for s in streams]
    return streams, x.to(device), None if index is None else index.to(device)


def assert_cuda_equals_cpu(case, streams_cpu, go, gp, co, cp):
    """Column block by column block: slerp streams within SLERP_CUDA_CPU_ATOL, the rest bitwise."""
    assert go.is_cuda and gp.is_cuda and not co.is_cuda
    g, c = to_numpy(go), to_numpy(co)
    col = 0
    for k, (s, mode) in enumerate(zip(streams_cpu, case.modes)):
        lead = 1 if case.form == "ragged" or s[1].dim() == 1 else 2
        d = int(np.prod(s[0].shape[lead:], dtype=np.int64))
        if mode == "slerp":
            assert_close(g[..., col:col + d], c[..., col:col + d].astype(np.float64),
                         atol=SLERP_CUDA_CPU_ATOL[case.vdtype], msg=f"stream {k} {case.msg}")
        else:
            assert_equal(g[..., col:col + d], c[..., col:col + d], msg=f"CUDA != CPU, stream {k} {case.msg}")
        col += d
    assert col == g.shape[-1]
    assert_equal(gp, to_numpy(cp), msg="is_pad CUDA != CPU " + case.msg)


def run_case(case, **kw):
    streams, x, index = case.args("torch")
    extra = {"index": index} if index is not None else {}
    co, cp = robocache.fuse(streams, x, modes=case.modes, return_mask=True, **extra, **kw)
    gs, gx, gi = on("cuda", streams, x, index)
    extra = {"index": gi} if gi is not None else {}
    go, gp = robocache.fuse(gs, gx, modes=case.modes, return_mask=True, **extra, **kw)
    assert_cuda_equals_cpu(case, streams, go, gp, co, cp)
    buf = poisoned(tuple(co.shape), case.vdtype, gx)
    res = robocache.fuse(gs, gx, modes=case.modes, out=buf, **extra, **kw)
    assert res is buf
    assert_cuda_equals_cpu(case, streams, buf, gp, co, cp)
    return go, co


@pytest.mark.parametrize("form", ["dense", "row", "ragged"])
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
@pytest.mark.parametrize("vdtype", ALL_DTYPES)
def test_cuda_equals_cpu(vdtype, tdtype, form, rng):
    modes = FLOAT_MIX if vdtype in FLOAT_DTYPES else INT_MIX
    run_case(Fuse(rng, form, vdtype, tdtype, modes))


@pytest.mark.parametrize("vdtype", ["float32", "bfloat16", "float64", "uint8"])
def test_cuda_vector_and_scalar_paths(vdtype, rng):
    """Widths that allow 16-byte units at 16-byte-aligned columns (512, 64 floats), one that
    breaks the alignment of every later stream (12 + 3), and long rows (> 128 samples: the
    splitter stage), in one launch: each stream picks its own path."""
    modes = ["linear", "linear", "linear", "nearest"] if vdtype != "uint8" else ["nearest", "previous", "next", "nearest"]
    case = Fuse(rng, "dense", vdtype, "float64", modes, feats=[(512,), (64,), (12,), (3,)],
                B=16, T_per=30, max_s=2000)
    run_case(case)
    case = Fuse(rng, "ragged", vdtype, "int64", modes[::-1], feats=[(3,), (64,), (12,), (512,)],
                B=40, T_per=20, E=50, max_s=600)
    run_case(case)


@pytest.mark.parametrize("form", ["dense", "ragged"])
@pytest.mark.parametrize("tdtype", TIME_DTYPES)
def test_cuda_long_streams(tdtype, form, rng):
    """Streams of up to 20,000 samples with unsorted targets spread over each: the splitters
    and the lane-group search over long rows, in one launch."""
    run_case(Fuse(rng, form, "float32", tdtype, ["linear", "nearest", "previous"], B=40, T_per=200,
                  E=12, max_s=20000))


@pytest.mark.parametrize("B,T_per", [(1, 1), (3, 0), (300, 2), (2, 700)])
def test_cuda_sizes(B, T_per, rng):
    run_case(Fuse(rng, "dense", "float32", "float32", ["linear", "next", "slerp"], B=B, T_per=T_per))


def test_cuda_sixteen_streams(rng):
    modes = [FLOAT_MIX[k % 5] for k in range(16)]
    feats = [(k % 3 + 1, 4) for k in range(16)]  # slerp streams need a last dim of 4
    run_case(Fuse(rng, "ragged", "float32", "float64", modes, feats=feats, B=20, T_per=4))


def test_cuda_strided_inputs(rng):
    case = Fuse(rng, "dense", "float32", "float64", ["linear", "nearest"], feats=[(8,), (3,)], B=6)
    streams, x, _ = case.args("torch")
    want = robocache.fuse(streams, x, modes=case.modes)
    g = [(s[0].cuda().repeat_interleave(2, dim=2)[:, :, ::2], s[1].cuda().repeat_interleave(2, dim=1)[:, ::2])
         for s in streams]
    gx = x.cuda().repeat_interleave(3, dim=1)[:, ::3]
    assert not g[0][0].is_contiguous()
    assert_equal(robocache.fuse(g, gx, modes=case.modes), to_numpy(want))


# ----------------------------------------------------------------------------
# one launch


def kernel_names(fn):
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm-up: module load, allocator
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("form", ["dense", "ragged"])
def test_exactly_one_kernel_launch(form, rng):
    """Five streams, five modes, with the mask: one kernel, and it is fuse's."""
    case = Fuse(rng, form, "float32", "float64", FLOAT_MIX, B=8)
    streams, x, index = on("cuda", *case.args("torch"))
    extra = {"index": index} if index is not None else {}
    names = kernel_names(lambda: robocache.fuse(streams, x, modes=case.modes, return_mask=True, **extra))
    assert len(names) == 1 and "fuse_kernel" in names[0], f"kernels launched: {names}"
    # the alternative it replaces launches one kernel per stream
    names = kernel_names(lambda: separate_cuda(streams, x, case.modes, index))
    assert sum("resample_kernel" in n for n in names) == len(streams)


def separate_cuda(streams, x, modes, index):
    outs = []
    for s, m in zip(streams, modes):
        kw = {} if len(s) == 2 else {"offsets": s[2], "index": index}
        o = robocache.resample(s[0], s[1], x, mode=m, **kw)
        outs.append(o.reshape(o.shape[:x.dim()] + (-1,)))
    return torch.cat(outs, dim=-1)


def test_equals_separate_cuda_resamples(rng):
    case = Fuse(rng, "ragged", "bfloat16", "int64", ["linear", "nearest", "previous", "next"], B=32)
    streams, x, index = on("cuda", *case.args("torch"))
    out = robocache.fuse(streams, x, modes=case.modes, index=index)
    assert_equal(out, to_numpy(separate_cuda(streams, x, case.modes, index)))


# ----------------------------------------------------------------------------
# streams and syncs


def stream_setup(rng):
    case = Fuse(rng, "dense", "float32", "float64", ["previous", "linear"], feats=[(5,), (3,)], B=8)
    streams, x, _ = on("cuda", *case.args("torch"))
    fresh = streams[0][0]
    v = torch.zeros_like(fresh)  # what any other stream sees until s has written
    live = [(v, streams[0][1]), streams[1]]
    robocache.fuse(live, x, modes=case.modes)  # warm-up
    torch.cuda.synchronize()
    want = to_numpy(robocache.fuse(streams, x, modes=case.modes))
    return case, fresh, v, live, x, want


def test_runs_on_current_stream(rng):
    case, fresh, v, live, x, want = stream_setup(rng)
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            v.copy_(fresh)  # lands on s only once the gate opens
            out = robocache.fuse(live, x, modes=case.modes)
        assert gate.pending(), "stream s had passed the gate when fuse returned: fuse synchronized with it"
        assert torch.cuda.default_stream().query(), "fuse put work on (or made wait) the default stream"
    s.synchronize()
    assert_equal(out, want, msg="kernel not ordered after the writes on the current stream")


@pytest.mark.parametrize("handle", ["stream", "int"])
def test_runs_on_explicit_stream(handle, rng):
    case, fresh, v, live, x, want = stream_setup(rng)
    s = torch.cuda.Stream()
    with hold(s) as gate:
        with torch.cuda.stream(s):
            v.copy_(fresh)  # lands on s only once the gate opens
        out = robocache.fuse(live, x, modes=case.modes, stream=s if handle == "stream" else s.cuda_stream)
        assert gate.pending(), "stream s had passed the gate when fuse returned: fuse synchronized with it"
        assert torch.cuda.default_stream().query(), "fuse(stream=s) put work on (or made wait) the default stream"
    s.synchronize()
    assert_equal(out, want, msg="kernel not ordered after the writes on stream=s")


def test_check_none_does_not_sync(rng):
    case = Fuse(rng, "ragged", "float32", "float64", FLOAT_MIX, B=32)
    streams, x, index = on("cuda", *case.args("torch"))
    robocache.fuse(streams, x, modes=case.modes, index=index)  # warm-up: module load, first launch
    torch.cuda.synchronize()
    with hold() as gate:  # a host sync in the call would wait for the gate: the block fails saying so
        robocache.fuse(streams, x, modes=case.modes, index=index)
        assert gate.pending(), "fuse(check=None) waited for the GPU: a host sync on the hot path"
    torch.cuda.synchronize()


@pytest.mark.parametrize("what", ["unsorted", "nan", "offsets", "index"])
def test_check_true_names_the_stream(what, rng):
    case = Fuse(rng, "ragged", "float64", "float64", ["linear", "nearest"], feats=[(2,), (3,)], B=4)
    streams, x, index = case.args("torch")
    v, t, off = (a.clone() for a in streams[1])
    if what in ("unsorted", "nan"):
        # row 0 reads an episode with 2+ samples in stream 1, whatever the draw
        e = next(e for e in range(off.numel() - 1) if int(off[e + 1] - off[e]) >= 2)
        index = index.clone()
        index[0] = e
        t[off[e] + 1] = t[off[e]] - 1.0 if what == "unsorted" else float("nan")
        match = r"streams\[1\] times must be"
    elif what == "offsets":
        off[1] = off[-1] + 1
        match = r"streams\[1\] offsets must start at 0"
    else:
        index = index.clone()
        index[2] = off.numel() + 3
        match = r"index\[2\] is outside"
    gs, gx, gi = on("cuda", [streams[0], (v, t, off)], x, index)
    with pytest.raises(ValueError, match=match):
        robocache.fuse(gs, gx, modes=case.modes, index=gi, check=True)
    torch.cuda.synchronize()  # the context survived


def test_arguments_on_another_device_or_host(rng):
    case = Fuse(rng, "dense", "float32", "float64", ["linear", "linear"], feats=[(2,), (3,)])
    streams, x, _ = case.args("torch")
    gs, gx, _ = on("cuda", streams, x, None)
    with pytest.raises(ValueError, match=r"streams\[1\] times is on cpu:0 but streams\[0\] values is on cuda"):
        robocache.fuse([gs[0], (gs[1][0], streams[1][1])], gx)
    with pytest.raises(ValueError, match=r"new_times is on cpu"):
        robocache.fuse(gs, x)
