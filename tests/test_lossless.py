"""The lossless frame tier's coder (robocache._C.encode_lossless / decode_lossless; csrc/lossless_math.h).

CPU (CI): round trips on random, constant, smooth and noise frames of odd sizes (1x1, odd H/W, chroma of
one pixel, chunks shorter than a warp's 32 rows), every band; the coded bytes read by a plain-Python
decoder of the documented format (tests/reference.py) whose symbols equal a NumPy MED predictor's;
deterministic bytes; damaged frames and bad arguments raise naming what is wrong; real CR5 frames.
GPU (`cuda`): the CUDA decoder equals the CPU reference bit for bit, from device memory and from pinned
host memory through the scratch copy, on random and real frames.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference import lossless_decode_ref, lossless_size_bound, med_symbols, split_i420
from robocache._C import decode_lossless, encode_lossless, lossless_bound

SIZES = [(1, 1), (1, 2), (2, 1), (3, 5), (17, 31), (33, 65), (64, 96), (65, 1), (1, 300), (90, 40)]


def i420_bytes(h, w):
    return h * w + 2 * ((h + 1) // 2) * ((w + 1) // 2)


def frames(rng, kind, n, h, w):
    fb = i420_bytes(h, w)
    if kind == "noise":
        return rng.integers(0, 256, (n, fb), dtype=np.uint8)
    if kind == "constant":
        return np.repeat(rng.integers(0, 256, (n, 1), dtype=np.uint8), fb, 1)
    # smooth fields with a little noise and hard edges: what a camera gives
    out = np.empty((n, fb), np.uint8)
    for i in range(n):
        planes = []
        for ph, pw in ((h, w), ((h + 1) // 2, (w + 1) // 2), ((h + 1) // 2, (w + 1) // 2)):
            y, x = np.mgrid[0:ph, 0:pw]
            f = 128 + 70 * np.sin(x / 6 + rng.uniform(0, 6)) * np.cos(y / 5) + rng.normal(0, 2, (ph, pw))
            f[:, pw // 2:] += 40
            planes.append(np.clip(f, 0, 255).astype(np.uint8).ravel())
        out[i] = np.concatenate(planes)
    return out


def encode(rows, h, w, band=None, threads=None):
    """(data, offsets) of the rows coded back to back."""
    n = len(rows)
    coded = np.full((n, lossless_bound(h, w, band)), 0xEE, np.uint8)
    sizes = np.full(n, -7, np.int64)
    assert encode_lossless(coded, sizes, rows, height=h, width=w, band=band, threads=threads) is sizes
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return np.concatenate([coded[i, :sizes[i]] for i in range(n)] or [np.zeros(0, np.uint8)]), offsets


def decode(data, offsets, ids, h, w):
    out = np.full((len(ids), i420_bytes(h, w)), 0xAB, np.uint8)      # poisoned
    assert decode_lossless(out, data, offsets, np.asarray(ids, np.int64), height=h, width=w) is out
    return out


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("kind", ["noise", "constant", "smooth"])
def test_round_trip(rng, h, w, kind):
    rows = frames(rng, kind, 4, h, w)
    for band in (None, 32, 64):
        data, offsets = encode(rows, h, w, band)
        assert (np.diff(offsets) % 16 == 0).all() and (np.diff(offsets) > 0).all()
        ids = np.array([3, 0, 0, 2, 1])                      # any order, repeats
        assert np.array_equal(decode(data, offsets, ids, h, w), rows[ids])


def test_skipped_ids_leave_their_rows(rng):
    rows = frames(rng, "smooth", 3, 9, 14)
    data, offsets = encode(rows, 9, 14)
    out = decode(data, offsets, [2, -1, 0], 9, 14)
    assert np.array_equal(out[[0, 2]], rows[[2, 0]]) and (out[1] == 0xAB).all()
    assert decode(data, offsets, [], 9, 14).shape == (0, i420_bytes(9, 14))


@pytest.mark.parametrize("h,w,band", [(17, 31, 32), (70, 23, 32), (64, 96, 64), (5, 3, 32), (40, 9, 96)])
def test_bytes_follow_the_documented_format(rng, h, w, band):
    """A plain-Python decoder of the format gives the frame back, and its symbols are a NumPy MED
    predictor's residuals (each plane's table holds exactly the symbols that occur)."""
    rows = frames(rng, "smooth", 2, h, w)
    rows[1, :7] = [0, 255, 0, 255, 1, 254, 128][:min(7, rows.shape[1])]   # wrap-around residuals
    data, offsets = encode(rows, h, w, band)
    for i in range(2):
        got, syms = lossless_decode_ref(data[offsets[i]:offsets[i + 1]], h, w)
        assert np.array_equal(got, rows[i])
        for plane, sym in zip(split_i420(rows[i], h, w), syms):
            assert np.array_equal(sym, med_symbols(plane, band))


def test_deterministic_and_thread_independent(rng):
    rows = frames(rng, "smooth", 9, 40, 50)
    a = encode(rows, 40, 50, threads=1)
    b = encode(rows, 40, 50, threads=3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_constant_chunks_have_no_words_and_noise_stays_near_raw(rng):
    h, w = 100, 64              # bands of 32: luma chunks of 32, 32, 32, 4 rows, chroma of 32, 18 (twice)
    grey = np.full((1, i420_bytes(h, w)), 128, np.uint8)     # every residual 0, the first pixel's too
    data, offsets = encode(grey, h, w, 32)
    # header, 3 one-symbol tables (4 bytes each), 8 directory entries, then the states alone: no words
    states = 4 * (32 + 32 + 32 + 4) + 2 * 4 * (32 + 18)
    assert len(data) == 20 + 12 + 8 * 4 + states
    assert np.array_equal(decode(data, offsets, [0, 0], h, w), grey[[0, 0]])
    noise = frames(rng, "noise", 2, h, w)
    data, _ = encode(noise, h, w, 32)
    # ~8 bits a pixel (12-bit frequencies of ~16 each lose little) plus the states, tables, directory
    assert len(data) < 2 * (noise.shape[1] * 1.02 + states + 3 * 512 + 64)


def test_damaged_frames_raise_naming_them(rng):
    h, w = 40, 36
    rows = frames(rng, "smooth", 3, h, w)
    data, offsets = encode(rows, h, w, 32)
    ids = np.array([0, 1, 2])
    for at, what in ((offsets[1] + 1, "not a lossless frame"), (offsets[1] + 12, "not a lossless frame"),
                     (offsets[1] + 40, "not a lossless frame"), (offsets[2] - 40, "does not decode")):
        bad = data.copy()
        bad[at] ^= 0x5A
        with pytest.raises(ValueError, match=rf"frame 1 \(ids\[1\]\).*|chunk \d+ of frame 1"):
            decode(bad, offsets, ids, h, w)
        with pytest.raises(ValueError, match=what):
            decode(bad, offsets, ids, h, w)
    with pytest.raises(ValueError, match="not a lossless frame of 40x37"):
        decode(data, offsets, ids, h, w + 1)
    short = offsets.copy()
    short[-1] += 16
    with pytest.raises(ValueError, match=r"offsets\[2:4\]"):
        decode(data, short, ids, h, w)
    with pytest.raises(ValueError, match=r"ids\[1\] = 3 is out of range for 3 frames"):
        decode(data, offsets, [0, 3], h, w)


def test_bad_arguments(rng):
    rows = frames(rng, "smooth", 2, 8, 8)
    fb, cap = i420_bytes(8, 8), lossless_bound(8, 8)
    sizes = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="band: expected a multiple of 32"):
        encode_lossless(np.zeros((2, cap), np.uint8), sizes, rows, height=8, width=8, band=48)
    with pytest.raises(ValueError, match=r"out: rows of 10 bytes cannot hold every frame"):
        encode_lossless(np.zeros((2, 10), np.uint8), sizes, rows, height=8, width=8)
    with pytest.raises(ValueError, match=r"rows: expected a C-contiguous uint8 \[n, 112\]"):
        encode_lossless(np.zeros((2, cap), np.uint8), sizes, rows, height=8, width=9)
    with pytest.raises(TypeError, match="sizes"):
        encode_lossless(np.zeros((2, cap), np.uint8), sizes.astype(np.int32), rows, height=8, width=8)
    with pytest.raises(ValueError, match="height"):
        lossless_bound(0, 8)
    data, offsets = encode(rows, 8, 8)
    out = np.zeros((2, fb), np.uint8)
    with pytest.raises(ValueError, match=r"out: expected a C-contiguous uint8 \[2, 96\]"):
        decode_lossless(out[:, :-1], data, offsets, np.arange(2), height=8, width=8)
    with pytest.raises(TypeError, match="ids"):
        decode_lossless(out, data, offsets, np.arange(2, dtype=np.int32), height=8, width=8)
    with pytest.raises(ValueError, match="scratch: only for CUDA"):
        decode_lossless(out, data, offsets, np.arange(2), height=8, width=8, scratch=np.zeros((2, 64), np.uint8))
    with pytest.raises(ValueError, match="out overlaps"):
        decode_lossless(out, out.reshape(-1), offsets, np.arange(2), height=8, width=8)


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_calls_leave_refcounts_flat(rng, fw):
    """encode and decode, succeeding and failing (a damaged frame, found after every import; a bad
    band, before any), release every array they import."""
    import gc
    import sys
    torch = pytest.importorskip("torch")
    h, w = 12, 10
    rows = frames(rng, "smooth", 3, h, w)
    data, offsets = encode(rows, h, w)
    bad = data.copy()
    bad[offsets[1] + 30] ^= 0xFF
    ids, out = np.array([0, 1, 2]), np.zeros((3, i420_bytes(h, w)), np.uint8)
    coded, sizes = np.zeros((3, lossless_bound(h, w)), np.uint8), np.zeros(3, np.int64)
    arrays = [rows, data, bad, offsets, ids, out, coded, sizes]
    if fw == "torch":
        arrays = [torch.from_numpy(np.array(a)) for a in arrays]
    rows, data, bad, offsets, ids, out, coded, sizes = arrays
    calls = [(lambda: decode_lossless(out, data, offsets, ids, height=h, width=w), None),
             (lambda: decode_lossless(out, bad, offsets, ids, height=h, width=w), ValueError),
             (lambda: encode_lossless(coded, sizes, rows, height=h, width=w), None),
             (lambda: encode_lossless(coded, sizes, rows, height=h, width=w, band=33), ValueError)]
    gc.collect()
    gc.disable()
    try:
        for call, exc in calls:
            before = [sys.getrefcount(a) for a in arrays]
            for _ in range(2000):
                if exc is None:
                    call()
                else:  # the error is raised every time, not only caught when it happens to be
                    with pytest.raises(exc):
                        call()
            assert [sys.getrefcount(a) for a in arrays] == before
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def real_rows(DATA):
    """Frames of the real CR5 arm video (AV1, 480x640) as the host tier stores them, full size and 180x320."""
    pytest.importorskip("av")
    from robocache.frames.ingest import ingest_videos
    src = DATA / "cr5_flashdrive_av1" / "videos" / "chunk-000" / "observation.images.top" / "episode_000003.mp4"
    if not src.exists():
        pytest.skip(f"{src} is not present")
    out = {}
    for size in (None, (180, 320)):
        got = ingest_videos([str(src)], tier="host", cache=False, resize=size, show_progress=False)
        out[(got.spec.height, got.spec.width)] = got.data.numpy()[::25].copy()
    return out


def test_real_frames_round_trip_and_compress(real_rows):
    for (h, w), rows in real_rows.items():
        data, offsets = encode(rows, h, w)
        assert np.array_equal(decode(data, offsets, np.arange(len(rows))[::-1], h, w), rows[::-1])
        # each frame within what its MED residuals' entropy allows (reference.lossless_size_bound), not
        # a ratio measured on this footage (5.9x and 4.6x over I420: benchmarks/bench_lossless.py)
        sizes = np.diff(offsets)
        bounds = np.array([lossless_size_bound(r, h, w) for r in rows])
        assert (sizes <= bounds).all(), (h, w, sizes, bounds.round())
        assert bounds.sum() < rows.nbytes, "this footage is not compressible: the check above says little"


# ----------------------------------------------------------------------------
# GPU: the CUDA decoder against the CPU reference


def _gpu_decode(torch, data, offsets, ids, h, w, *, pinned):
    from robocache.frames.pinned import pin
    dev = torch.device("cuda")
    ids_d = torch.as_tensor(np.ascontiguousarray(ids, np.int64), device=dev)
    off_d = torch.as_tensor(offsets, device=dev)
    out = torch.full((len(ids), i420_bytes(h, w)), 0xAB, dtype=torch.uint8, device=dev)
    if pinned:
        src = pin(torch.from_numpy(data))
        scratch = torch.empty((len(ids), int(np.diff(offsets).max())), dtype=torch.uint8, device=dev)
        decode_lossless(out, src, off_d, ids_d, height=h, width=w, scratch=scratch)
    else:
        decode_lossless(out, torch.from_numpy(data).to(dev), off_d, ids_d, height=h, width=w)
    return out.cpu().numpy()


@pytest.mark.cuda
@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("h,w", [(1, 1), (17, 31), (65, 1), (90, 40), (180, 320)])
@pytest.mark.parametrize("kind", ["noise", "constant", "smooth"])
def test_gpu_decode_equals_cpu(rng, h, w, kind, pinned):
    torch = pytest.importorskip("torch")
    rows = frames(rng, kind, 5, h, w)
    for band in (None, 32, 96):
        data, offsets = encode(rows, h, w, band)
        ids = np.array([4, 0, -1, 2, 2, 1, 3])
        want = decode(data, offsets, ids, h, w)
        assert np.array_equal(_gpu_decode(torch, data, offsets, ids, h, w, pinned=pinned), want)


@pytest.mark.cuda
def test_gpu_decode_real_frames(real_rows):
    torch = pytest.importorskip("torch")
    for (h, w), rows in real_rows.items():
        data, offsets = encode(rows, h, w)
        ids = np.arange(len(rows))[::-1]
        for pinned in (False, True):
            assert np.array_equal(_gpu_decode(torch, data, offsets, ids, h, w, pinned=pinned), rows[ids])
