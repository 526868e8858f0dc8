"""robocache._C.gather_frames on CUDA: CUDA == CPU bit for bit (the CPU kernel is
held to the reference in test_frames.py), from device storage and from pinned
host storage read over the bus, inside a CUDA graph, without a host sync, on
the caller's stream; pageable host storage is rejected.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from robocache import _C  # noqa: E402
from gpu_gate import hold  # noqa: E402
from reference import assert_equal, to_numpy  # noqa: E402
from test_frames import OUT_DTYPES, SOURCES, make_ids, make_out, make_storage  # noqa: E402

pytestmark = pytest.mark.cuda

PLACES = ("device", "pinned")


def place(storage, where):
    return storage.cuda() if where == "device" else storage.pin_memory()


def both(storage, ids, out_cuda, fmt, h, w, c, where="device", dev_storage=None, **kw):
    """Runs the CUDA op (storage placed `where`, or dev_storage as given) and the CPU op
    on the same inputs; asserts they agree bit for bit and returns the CUDA out."""
    out_cpu = torch.empty_strided(out_cuda.shape, out_cuda.stride(), dtype=out_cuda.dtype)
    args = dict(format=fmt, height=h, width=w, channels=c, **kw)
    _C.gather_frames(storage, ids, out_cpu, **args)
    res = _C.gather_frames(place(storage, where) if dev_storage is None else dev_storage, ids.cuda(), out_cuda,
                           **args)
    assert res is out_cuda
    torch.cuda.synchronize()
    assert_equal(out_cuda, to_numpy(out_cpu), msg=f"CUDA != CPU: {fmt} {h}x{w}x{c} -> "
                 f"{tuple(out_cuda.shape)} {out_cuda.dtype} {where} {kw}")
    return out_cuda


@pytest.mark.parametrize("fmt,sdtype,c", SOURCES, ids=[f"{f}-{d}-c{c}" for f, d, c in SOURCES])
@pytest.mark.parametrize("odtype", OUT_DTYPES)
@pytest.mark.parametrize("where", PLACES)
def test_cuda_equals_cpu(fmt, sdtype, c, odtype, where, rng):
    for h, w in ((7, 9), (8, 10), (33, 47)):
        storage = make_storage(rng, fmt, sdtype, 6, h, w, c)
        ids = make_ids(rng, 6, 5)
        for size in ((h, w), (4, 5), (13, 17), (5, 19)):
            for layout in ("interleaved", "planar", "strided"):
                out = make_out(5, *size, c, odtype, layout, device="cuda")
                scale = 255.0 if odtype != "uint8" and rng.random() < 0.5 else None
                both(storage, ids, out, fmt, h, w, c, where, scale=scale)


@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("fmt,sdtype", [("rgb", "uint8"), ("rgb", "float32"), ("yuv420", "uint8")])
def test_camera_frames(fmt, sdtype, where, rng):
    """480x640 frames: bands of many rows, 16-byte loads and stores, 224x224 resize."""
    h, w, c = 480, 640, 3
    storage = make_storage(rng, fmt, sdtype, 12, h, w, c)
    ids = make_ids(rng, 12, 9)
    for size, odtype, layout in [((h, w), "uint8", "interleaved"), ((h, w), "float32", "planar"),
                                 ((224, 224), "uint8", "interleaved"), ((224, 224), "float32", "planar"),
                                 ((224, 224), "bfloat16", "planar"), ((720, 960), "float16", "interleaved"),
                                 ((h, w), "float32", "interleaved"), ((h, w), "bfloat16", "interleaved")]:
        out = make_out(9, *size, c, odtype, layout, device="cuda")
        both(storage, ids, out, fmt, h, w, c, where, scale=None if odtype == "uint8" else 255.0)


def test_unaligned_rows_frames_and_out(rng):
    """Rows, frames and out starting off 16-byte boundaries: the staged windows and
    the partial units at line ends."""
    for fmt, h, w in (("rgb", 11, 37), ("yuv420", 13, 29), ("yuv420", 64, 96)):
        rowbytes = h * w * 3 if fmt == "rgb" else h * w + 2 * ((h + 1) // 2) * ((w + 1) // 2)
        big = torch.from_numpy(rng.integers(0, 256, (7, rowbytes + 5), dtype=np.uint8))
        # frame stride rowbytes + 5, first byte at 3 (sliced where it lives: .cuda() would compact it)
        storage, dev_storage = big[:, 3:3 + rowbytes], big.cuda()[:, 3:3 + rowbytes]
        if fmt == "rgb":
            storage, dev_storage = storage.reshape(7, h, w, 3), dev_storage.reshape(7, h, w, 3)
        assert dev_storage.stride(0) == rowbytes + 5
        ids = make_ids(rng, 7, 6)
        for size in ((h, w), (h + 3, w - 2)):
            for odtype in OUT_DTYPES:
                flat = torch.empty(6 * size[0] * size[1] * 3 + 1, dtype=getattr(torch, odtype), device="cuda")
                flat.view(torch.uint8).fill_(0xFF)
                out = flat[1:].view(6, *size, 3)  # one element past an aligned start
                both(storage, ids, out, fmt, h, w, 3, dev_storage=dev_storage,
                     scale=None if odtype == "uint8" else 255.0)


@pytest.mark.parametrize("fmt,sdtype", [("rgb", "uint8"), ("rgb", "float32"), ("yuv420", "uint8")])
@pytest.mark.parametrize("odtype", ["float32", "float16", "uint8"])
def test_interleaved_runs_through_the_warp_transpose(fmt, sdtype, odtype, rng):
    """Interleaved out without resize goes through a per-warp shared-memory transpose: warps
    whose 32 runs span row ends and tail groups (widths that are not a multiple of the run),
    rows padded past the width, padded steps (id -1)."""
    for h, w in ((9, 52), (6, 61), (5, 130)):
        storage = make_storage(rng, fmt, sdtype, 5, h, w, 3)
        ids = torch.tensor([3, -1, 0, 4, 3, 1, 2])
        both(storage, ids, make_out(7, h, w, 3, odtype, "interleaved", device="cuda"), fmt, h, w, 3,
             scale=None if odtype == "uint8" else 255.0)
        # rows padded to a 16-byte multiple of the width: still the transposed path
        el = torch.empty(0, dtype=getattr(torch, odtype)).element_size()
        pad = next(p for p in range(1, 64) if ((w + p) * 3 * el) % 16 == 0)
        padded = torch.empty(7, h, w + pad, 3, dtype=getattr(torch, odtype), device="cuda")
        padded.view(torch.uint8).fill_(0xFF)
        both(storage, ids, padded[:, :, :w], fmt, h, w, 3, scale=None if odtype == "uint8" else 255.0)
        assert (padded[:, :, w:].contiguous().view(torch.uint8) == 0xFF).all(), "the padding past the width was written"


def test_rows_too_long_to_stage(rng):
    """A frame row beyond the shared-memory stage is read in place."""
    storage = make_storage(rng, "rgb", "float32", 3, 4, 4000, 4)  # 64 KB rows
    ids = torch.tensor([2, -1, 0])
    both(storage, ids, make_out(3, 4, 4000, 4, "float32", "planar", device="cuda"), "rgb", 4, 4000, 4)
    both(storage, ids, make_out(3, 3, 1001, 4, "float16", "interleaved", device="cuda"), "rgb", 4, 4000, 4,
         scale=255.0)
    # 3 channels, no resize: the warps' transpose scratch alone in shared memory
    storage = make_storage(rng, "rgb", "float32", 3, 4, 4000, 3)
    both(storage, ids, make_out(3, 4, 4000, 3, "float16", "interleaved", device="cuda"), "rgb", 4, 4000, 3,
         scale=255.0)


def test_ids_past_the_storage_write_zeros(rng):
    """CUDA cannot raise for ids >= N without a sync: those frames come out zero
    (the CPU raises, tested in test_frames.py)."""
    storage = make_storage(rng, "rgb", "uint8", 4, 6, 8, 3).cuda()
    out = torch.full((3, 6, 8, 3), 7, dtype=torch.uint8, device="cuda")
    _C.gather_frames(storage, torch.tensor([1, 4, 1000], device="cuda"), out, format="rgb", height=6, width=8,
                     channels=3)
    assert torch.equal(out[0], storage[1]) and not out[1:].any()


@pytest.mark.parametrize("where", PLACES)
def test_graph_capture_and_no_sync(where, rng):
    """The loader's use: captured once in a CUDA graph, replayed with new ids, under
    set_sync_debug_mode('error')."""
    h, w = 48, 64
    cpu = make_storage(rng, "yuv420", "uint8", 10, h, w, 3)
    storage = place(cpu, where)
    ids = torch.zeros(6, dtype=torch.int64, device="cuda")
    out = torch.empty(6, 3, 24, 32, device="cuda").permute(0, 2, 3, 1)
    args = dict(format="yuv420", height=h, width=w, channels=3, scale=255.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture
        _C.gather_frames(storage, ids, out, **args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.graph(graph):
            _C.gather_frames(storage, ids, out, **args)
        for _ in range(3):
            new = make_ids(rng, 10, 6)
            ids.copy_(new.pin_memory(), non_blocking=True)
            graph.replay()
            got = out.clone()
            want = torch.empty(6, 3, 24, 32).permute(0, 2, 3, 1)
            _C.gather_frames(cpu, new, want, **args)
            torch.cuda.set_sync_debug_mode(0)
            assert_equal(got, to_numpy(want))
            torch.cuda.set_sync_debug_mode("error")
        # and a plain call, on the caller's stream
        _C.gather_frames(storage, ids, out, **args)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_runs_on_the_given_stream(rng):
    storage = make_storage(rng, "rgb", "uint8", 8, 32, 48, 3).cuda()
    ids = torch.tensor([3, 1, 7, -1], device="cuda")
    out = torch.full((4, 32, 48, 3), 0xAB, dtype=torch.uint8, device="cuda")   # poisoned: unwritten shows
    _C.gather_frames(storage, ids, torch.empty_like(out), format="rgb", height=32, width=48, channels=3)  # warm-up
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with hold(s):  # a held stream: a kernel put on any other stream would run meanwhile
        with torch.cuda.stream(s):
            _C.gather_frames(storage, ids, out, format="rgb", height=32, width=48, channels=3)
        torch.cuda.default_stream().synchronize()
        assert (out.cpu() == 0xAB).all(), "gather_frames wrote before the caller's stream reached it"
    s.synchronize()
    assert torch.equal(out[:3], storage[ids[:3]]) and not out[3].any()
    out2 = torch.empty_like(out)
    _C.gather_frames(storage, ids, out2, format="rgb", height=32, width=48, channels=3, stream=s)
    s.synchronize()
    assert torch.equal(out2, out)


def test_pageable_host_storage_is_rejected():
    storage = torch.zeros(4, 6, 8, 3, dtype=torch.uint8)  # pageable
    out = torch.empty(2, 6, 8, 3, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match=r"storage is pageable host memory; pin it \(tensor.pin_memory\(\)"):
        _C.gather_frames(storage, torch.tensor([0, 1], device="cuda"), out, format="rgb", height=6, width=8,
                         channels=3)


def test_device_mismatches():
    storage = torch.zeros(4, 6, 8, 3, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="storage is on cuda:0 but ids and out are on cpu"):
        _C.gather_frames(storage, torch.tensor([0]), torch.empty(1, 6, 8, 3, dtype=torch.uint8),
                         format="rgb", height=6, width=8, channels=3)
    with pytest.raises(ValueError, match="out is on cuda:0 but ids is on cpu:0"):
        _C.gather_frames(storage, torch.tensor([0]), torch.empty(1, 6, 8, 3, dtype=torch.uint8, device="cuda"),
                         format="rgb", height=6, width=8, channels=3)
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="storage is on cuda:1 but ids and out are on cuda:0"):
            _C.gather_frames(storage.to("cuda:1"), torch.tensor([0], device="cuda"),
                             torch.empty(1, 6, 8, 3, dtype=torch.uint8, device="cuda"),
                             format="rgb", height=6, width=8, channels=3)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device_keeps_the_current_device(rng):
    cpu = make_storage(rng, "rgb", "uint8", 4, 6, 8, 3)
    ids = torch.tensor([2, 0])
    out = torch.empty(2, 6, 8, 3, dtype=torch.uint8, device="cuda:1")
    before = torch.cuda.current_device()
    _C.gather_frames(cpu.to("cuda:1"), ids.to("cuda:1"), out, format="rgb", height=6, width=8, channels=3)
    assert torch.cuda.current_device() == before
    assert torch.equal(out.cpu(), cpu[ids])


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.cuda
def test_pinned_memory_is_not_copied_into_forked_children():
    """Linux copies page-locked anonymous pages into every forked child: a torch DataLoader's 16 workers
    forked beside a 36 GB pinned set would copy it 16 times. robocache's pinned buffers are not inherited."""
    from robocache.frames.pinned import pinned_empty
    torch.cuda.init()       # (is_pinned() is False for registered memory before torch's CUDA state exists)
    t = pinned_empty((8 << 20,))
    assert t.is_pinned()
    assert "dc" in _vm_flags(t.data_ptr())      # VM_DONTCOPY: MADV_DONTFORK
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    t.fill_(7)                                   # the parent's pages are untouched by the fork
    assert int(t[-1]) == 7
