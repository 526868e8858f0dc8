"""robocache._C.gather_frames on the CPU: reference -> CPU kernel on fresh random
inputs, YUV storage equal to RGB storage of its decoded frames, the color
conversion against PyAV's rgb24 on H.264 and AV1 video (encoded here, and real
files), torch's bilinear resize, and an error for every bad argument.
The CUDA kernel is held to this CPU kernel in test_frames_cuda.py.
"""

from __future__ import annotations

import glob
import platform

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from robocache import _C  # noqa: E402
from pyav_colors import applied  # noqa: E402
from reference import (assert_close, assert_equal, gather_frames_ref, pack_i420, poisoned,  # noqa: E402
                       split_i420, to_numpy, yuv420_to_rgb_ref)

OUT_DTYPES = ("uint8", "float32", "float16", "bfloat16")
# (format, storage dtype, channels)
SOURCES = [("rgb", "uint8", 1), ("rgb", "uint8", 3), ("rgb", "uint8", 4), ("rgb", "float32", 1),
           ("rgb", "float32", 3), ("rgb", "float32", 4), ("yuv420", "uint8", 3)]
# swscale's x86 converter is what PyAV runs on x86-64; elsewhere PyAV may round differently
EXACT_PYAV = platform.machine().lower() in ("x86_64", "amd64")


# ----------------------------------------------------------------------------
# inputs


def i420_size(h, w):
    return h * w + 2 * ((h + 1) // 2) * ((w + 1) // 2)


def make_storage(rng, fmt, dtype, n, h, w, c):
    """Random frames: uint8 bytes, float32 values in [-20, 280) (so uint8 out
    clamps), or I420 rows."""
    if fmt == "yuv420":
        return torch.from_numpy(rng.integers(0, 256, (n, i420_size(h, w)), dtype=np.uint8))
    if dtype == "uint8":
        return torch.from_numpy(rng.integers(0, 256, (n, h, w, c), dtype=np.uint8))
    return torch.from_numpy(rng.uniform(-20, 280, (n, h, w, c)).astype(np.float32))


def make_ids(rng, n, m):
    ids = rng.integers(0, n, m)
    ids[rng.random(m) < 0.25] = -1  # padded steps of a window
    ids[0] = n - 1
    return torch.from_numpy(ids.astype(np.int64))


def make_out(m, oh, ow, c, dtype, layout, device="cpu"):
    """A poisoned out of shape [M, H', W', C]: interleaved, planar (a permuted
    [M, C, H', W']) or strided (a slice of a wider padded buffer)."""
    like = torch.empty(0, device=device)
    if layout == "interleaved":
        return poisoned((m, oh, ow, c), dtype, like)
    if layout == "planar":
        return poisoned((m, c, oh, ow), dtype, like).permute(0, 2, 3, 1)
    # padded rows and a channel stride of 2: neither interleaved nor planar
    return poisoned((m, oh, ow + 3, 2 * c), dtype, like)[:, :, 1:ow + 1, ::2]


def gather(storage, ids, out, fmt, h, w, c, **kw):
    return _C.gather_frames(storage, ids, out, format=fmt, height=h, width=w, channels=c, **kw)


def check(storage, ids, out, fmt, h, w, c, msg="", **kw):
    res = gather(storage, ids, out, fmt, h, w, c, **kw)
    assert res is out
    ref = gather_frames_ref(storage, ids, tuple(out.shape[1:3]), format=fmt, height=h, width=w,
                            channels=c, out_dtype=str(out.dtype).removeprefix("torch."), **kw)
    assert_equal(out, ref, msg=msg)


# ----------------------------------------------------------------------------
# results against the reference


SIZES = {"same": None, "down": (4, 5), "up": (13, 17), "wide": (5, 19)}


@pytest.mark.parametrize("fmt,sdtype,c", SOURCES, ids=[f"{f}-{d}-c{c}" for f, d, c in SOURCES])
@pytest.mark.parametrize("odtype", OUT_DTYPES)
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("layout", ["interleaved", "planar", "strided"])
def test_matches_reference(fmt, sdtype, c, odtype, size, layout, rng):
    h, w = (7, 9) if rng.random() < 0.5 else (8, 10)  # odd and even sizes
    n, m = 6, 5
    storage = make_storage(rng, fmt, sdtype, n, h, w, c)
    ids = make_ids(rng, n, m)
    oh, ow = SIZES[size] or (h, w)
    out = make_out(m, oh, ow, c, odtype, layout)
    scale = 255.0 if (odtype != "uint8" and rng.random() < 0.5) else None
    check(storage, ids, out, fmt, h, w, c, scale=scale,
          msg=f"{fmt} {sdtype} c={c} {h}x{w} -> {oh}x{ow} {odtype} {layout} scale={scale} {rng}")


@pytest.mark.parametrize("matrix", ["bt601", "bt709", "bt2020"])
@pytest.mark.parametrize("full_range", [False, True])
def test_yuv_matrices(matrix, full_range, rng):
    h, w = 9, 14
    storage = make_storage(rng, "yuv420", "uint8", 4, h, w, 3)
    ids = torch.tensor([3, 0, -1, 2])
    check(storage, ids, make_out(4, h, w, 3, "uint8", "interleaved"), "yuv420", h, w, 3,
          matrix=matrix, full_range=full_range)
    check(storage, ids, make_out(4, 5, 6, 3, "float32", "planar"), "yuv420", h, w, 3,
          matrix=matrix, full_range=full_range, scale=255.0)


def test_every_uv_pair_and_luma():
    """All 65,536 (U, V) pairs, every luma value, both ranges: the conversion
    table in C equals the one reference.py derives from Kr and Kb."""
    h, w = 256, 512
    u = np.repeat(np.arange(256, dtype=np.uint8)[None, :], 128, 0)
    v = np.repeat((np.arange(128, dtype=np.uint8) * 2)[:, None], 256, 1)
    y = (np.arange(h * w) % 256).astype(np.uint8).reshape(h, w)
    storage = torch.from_numpy(np.stack([pack_i420(y, u, v), pack_i420(y, u, v + 1)]))
    for matrix in ("bt601", "bt709", "bt2020"):
        for full in (False, True):
            out = make_out(2, h, w, 3, "uint8", "interleaved")
            gather(storage, torch.tensor([0, 1]), out, "yuv420", h, w, 3, matrix=matrix, full_range=full)
            for k in range(2):
                want = yuv420_to_rgb_ref(*split_i420(storage[k].numpy(), h, w), matrix, full)
                assert_equal(out[k], want, msg=f"{matrix} full_range={full}")


def test_uint8_copy_is_exact(rng):
    storage = make_storage(rng, "rgb", "uint8", 10, 12, 16, 3)
    ids = torch.tensor([4, 9, 0, 4])
    out = make_out(4, 12, 16, 3, "uint8", "interleaved")
    gather(storage, ids, out, "rgb", 12, 16, 3)
    assert torch.equal(out, storage[ids])


def test_float_out_divides_like_torch(rng):
    """scale=255 is a true division (x / 255.0), not a multiply by 1/255."""
    storage = torch.arange(256, dtype=torch.uint8).reshape(1, 16, 16, 1)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        out = torch.empty(1, 16, 16, 1, dtype=dt)
        gather(storage, torch.tensor([0]), out, "rgb", 16, 16, 1, scale=255.0)
        assert torch.equal(out, (storage.float() / 255.0).to(dt))


def test_yuv_storage_equals_rgb_storage(rng):
    """A frame stored as I420 gives the batch its decoded RGB frame would, bit for
    bit, with and without resize, in every out dtype and layout."""
    for h, w in ((8, 12), (7, 11)):
        yuv = make_storage(rng, "yuv420", "uint8", 5, h, w, 3)
        rgb = torch.from_numpy(np.stack([yuv420_to_rgb_ref(*split_i420(r, h, w)) for r in yuv.numpy()]))
        ids = make_ids(rng, 5, 7)
        for size in ((h, w), (5, 9), (15, 20)):
            for odtype in OUT_DTYPES:
                for layout in ("interleaved", "planar"):
                    a = make_out(7, *size, 3, odtype, layout)
                    b = make_out(7, *size, 3, odtype, layout)
                    scale = None if odtype == "uint8" else 255.0
                    gather(yuv, ids, a, "yuv420", h, w, 3, scale=scale)
                    gather(rgb, ids, b, "rgb", h, w, 3, scale=scale)
                    assert_equal(a, to_numpy(b), msg=f"{h}x{w} -> {size} {odtype} {layout}")


def test_resize_matches_torch_on_the_loader_data(rng):
    """tests/test_loader.py::test_image_layouts_and_resize compares uint8 resize
    output exactly with torch's interpolate + round: 6x8 -> 3x4 and friends."""
    for (h, w), (oh, ow) in [((6, 8), (3, 4)), ((6, 8), (12, 16)), ((4, 4), (2, 2)), ((6, 8), (6, 4))]:
        frames = torch.from_numpy(rng.integers(0, 256, (12, h, w, 3), dtype=np.uint8))
        ids = torch.arange(12)
        ref = torch.nn.functional.interpolate(frames.permute(0, 3, 1, 2).float(), size=(oh, ow),
                                              mode="bilinear", align_corners=False, antialias=False)
        out8 = make_out(12, oh, ow, 3, "uint8", "interleaved")
        gather(frames, ids, out8, "rgb", h, w, 3)
        assert torch.equal(out8, ref.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1))
        outf = make_out(12, oh, ow, 3, "float32", "planar")
        gather(frames, ids, outf, "rgb", h, w, 3, scale=255.0)
        torch.testing.assert_close(outf.permute(0, 3, 1, 2), ref / 255, rtol=1e-6, atol=1e-6)


def test_resize_close_to_torch_at_camera_sizes(rng):
    """480x640 -> 224x224 (and 256 -> 224): within 4 ulps of torch's own float32
    result (torch's CPU kernel orders its multiply-adds its own way: 3 ulps seen at 143.06 for
    one seed); uint8 differs only where torch's value sits within that of a .5."""
    for (h, w), (oh, ow) in [((48, 64), (22, 23)), ((480, 640), (224, 224)), ((256, 256), (224, 224))]:
        frames = torch.from_numpy(rng.integers(0, 256, (2, h, w, 3), dtype=np.uint8))
        ref = torch.nn.functional.interpolate(frames.permute(0, 3, 1, 2).float(), size=(oh, ow),
                                              mode="bilinear", align_corners=False, antialias=False)
        out = make_out(2, oh, ow, 3, "float32", "planar")
        gather(frames, torch.arange(2), out, "rgb", h, w, 3)
        assert_close(out.permute(0, 3, 1, 2), ref.numpy(), rtol=4.8e-7, atol=1e-6)


def test_forms_of_storage_and_ids(rng):
    h, w, c = 5, 6, 3
    frames = make_storage(rng, "rgb", "uint8", 8, h, w, c)
    ids = torch.tensor([[1, -1], [7, 2]])  # any shape: flattened
    want = gather_frames_ref(frames, ids, (h, w), format="rgb", height=h, width=w, channels=c, out_dtype="uint8")
    out = make_out(4, h, w, c, "uint8", "interleaved")
    gather(frames.reshape(8, -1), ids, out, "rgb", h, w, c)  # flattened rows
    assert_equal(out, want)
    # frames spaced apart in a bigger buffer (a slice), and ids with a stride
    big = torch.zeros(8, h * w * c + 13, dtype=torch.uint8)
    big[:, 5:5 + h * w * c] = frames.reshape(8, -1)
    strided_ids = torch.tensor([1, 0, -1, 0, 7, 0, 2, 0])[::2]
    out = make_out(4, h, w, c, "uint8", "planar")
    gather(big[:, 5:5 + h * w * c], strided_ids, out, "rgb", h, w, c)
    assert_equal(out, want)
    # numpy arrays work too
    out_np = np.full((4, h, w, c), 0xFF, np.uint8)
    assert _C.gather_frames(frames.numpy(), ids.numpy(), out_np, format="rgb", height=h, width=w,
                            channels=c) is out_np
    assert_equal(out_np, want)


def test_empty_batches():
    frames = torch.zeros(3, 4, 4, 3, dtype=torch.uint8)
    out = torch.empty(0, 4, 4, 3, dtype=torch.uint8)
    gather(frames, torch.empty(0, dtype=torch.int64), out, "rgb", 4, 4, 3)
    out = torch.empty(2, 0, 4, 3, dtype=torch.float32)
    gather(frames, torch.tensor([0, 1]), out, "rgb", 4, 4, 3)
    # no frames at all: every id must be padding
    out = torch.full((2, 4, 4, 3), 7, dtype=torch.uint8)
    gather(torch.zeros(0, 4, 4, 3, dtype=torch.uint8), torch.tensor([-1, -5]), out, "rgb", 4, 4, 3)
    assert not out.any()


def test_threads_do_not_change_the_result(rng):
    frames = make_storage(rng, "yuv420", "uint8", 9, 31, 45, 3)
    ids = make_ids(rng, 9, 40)
    outs = []
    before = _C.get_num_threads()
    try:
        for nt in (1, 3):
            _C.set_num_threads(nt)
            out = make_out(40, 17, 23, 3, "float16", "planar")
            gather(frames, ids, out, "yuv420", 31, 45, 3, scale=255.0)
            outs.append(out)
    finally:
        _C.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


# ----------------------------------------------------------------------------
# against PyAV's rgb24 on real video


def _natural_frames(n, h, w, seed=0):
    """Smooth color gradients, moving shapes and sensor-like noise (not flat colors)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    frames = []
    for t in range(n):
        r = 128 + 100 * np.sin(xx / w * 3 + t * 0.3)
        g = 128 + 100 * np.cos(yy / h * 4 - t * 0.2)
        b = 128 + 90 * np.sin((xx + yy) / (h + w) * 5 + t * 0.5)
        img = np.stack([r, g, b], -1)
        cy, cx = h / 2 + h / 4 * np.sin(t / 2), w / 2 + w / 4 * np.cos(t / 3)
        disk = (yy - cy) ** 2 + (xx - cx) ** 2 < (min(h, w) / 5) ** 2
        img[disk] = [230, 40, 60]
        img[int(h * 0.6):int(h * 0.8), (3 * t) % w:(3 * t) % w + w // 6] = [30, 200, 90]
        img += rng.normal(0, 6, img.shape)
        frames.append(np.clip(img, 0, 255).astype(np.uint8))
    return frames


def _encode(path, codec, frames, options, colorspace=None, color_range=None):
    pytest.importorskip("av", reason="PyAV is not installed (pip install av)")
    from robocache.video.encode import encode_mp4
    # PyAV's wheels ship both encoders used here (libx264, libsvtav1): one missing is a broken install, and
    # its error fails the test rather than turning into a skip (STYLE.md). AV1 encodes in a child, with a deadline.
    encode_mp4(path, np.stack(frames), codec, 10, options, colorspace=colorspace, color_range=color_range)


def matrix_of(frame):
    """The matrix and range PyAV's rgb24 uses for a decoded frame (measured,
    docs/frames.md): BT.709 (1) and BT.2020 NCL (9) tags are honored; untagged (2),
    BT.470BG (5) and SMPTE 170M (6) are BT.601 (FCC and SMPTE 240M have matrices
    of their own, which gather_frames does not offer); color_range JPEG (2) is
    full range, anything else limited. PyAV before 17 ignores the tags: BT.601, limited
    (tests/pyav_colors.py)."""
    import av   # the frame is PyAV's: it is there
    matrix = {1: "bt709", 9: "bt2020"}.get(int(frame.colorspace), "bt601")
    return applied(av, matrix, int(frame.color_range) == 2)


def decode_both(path, limit=None):
    """(I420 rows [N, bytes], PyAV rgb24 frames [N, H, W, 3], height, width, (matrix, full))."""
    av = pytest.importorskip("av", reason="PyAV is not installed (pip install av)")
    rows, rgbs, tags = [], [], set()
    with av.open(str(path)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            if limit is not None and k >= limit:
                break
            assert frame.format.name == "yuv420p", frame.format.name
            h, w = frame.height, frame.width
            planes = []
            for i, (ph, pw) in enumerate([(h, w), ((h + 1) // 2, (w + 1) // 2), ((h + 1) // 2, (w + 1) // 2)]):
                p = frame.planes[i]
                planes.append(np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:ph, :pw])
            rows.append(pack_i420(*planes))
            rgbs.append(frame.to_ndarray(format="rgb24"))
            tags.add(matrix_of(frame))
    assert len(tags) == 1, tags
    return np.stack(rows), np.stack(rgbs), h, w, tags.pop()


def assert_matches_pyav(path, limit=None):
    rows, rgb, h, w, (matrix, full) = decode_both(path, limit)
    n = len(rows)
    out = make_out(n, h, w, 3, "uint8", "interleaved")
    gather(torch.from_numpy(rows), torch.arange(n), out, "yuv420", h, w, 3, matrix=matrix, full_range=full)
    diff = np.abs(out.numpy().astype(np.int16) - rgb.astype(np.int16))
    assert diff.max() <= 1, f"{path}: max difference {diff.max()} from PyAV rgb24 ({matrix}, full={full})"
    if EXACT_PYAV:  # the measured claim in docs/frames.md: bit for bit on x86-64
        assert diff.max() == 0, f"{path}: {int((diff > 0).sum())} bytes differ from PyAV rgb24"
    return matrix, full


@pytest.mark.parametrize("codec,options", [
    ("libx264", {"crf": "23", "preset": "veryfast"}),
    ("libsvtav1", {"g": "2", "crf": "30", "preset": "12"}),  # LeRobot's AV1 settings
])
def test_encoded_video_matches_pyav(codec, options, tmp_path):
    path = tmp_path / f"clip_{codec}.mp4"
    _encode(path, codec, _natural_frames(10, 64, 96), options)
    assert assert_matches_pyav(path) == ("bt601", False)  # untagged: BT.601, limited


def test_bt709_tagged_video_matches_pyav(tmp_path):
    path = tmp_path / "clip_709.mp4"
    _encode(path, "libx264", _natural_frames(6, 48, 64, seed=1), {"crf": "20", "preset": "veryfast"},
            colorspace=1, color_range=1)
    assert assert_matches_pyav(path) == applied(pytest.importorskip("av"), "bt709", False)


def test_frame_tags_pick_the_matrix():
    """What PyAV applies for each colorspace / color_range tag of a frame, on every
    (U, V) pair: the rule matrix_of states (and docs/frames.md)."""
    av = pytest.importorskip("av", reason="PyAV is not installed (pip install av)")
    h, w = 256, 512
    u = np.repeat(np.arange(256, dtype=np.uint8)[None, :], 128, 0)
    v = np.repeat((np.arange(128, dtype=np.uint8) * 2)[:, None], 256, 1)
    y = np.random.default_rng(0).integers(0, 256, (h, w), dtype=np.uint8)
    storage = torch.from_numpy(pack_i420(y, u, v)[None])
    for colorspace in (2, 1, 5, 6, 9):  # unspecified, bt709, bt470bg, smpte170m, bt2020nc
        for color_range in (0, 1, 2):  # unspecified, mpeg (limited), jpeg (full)
            frame = av.VideoFrame(w, h, "yuv420p")
            for i, a in enumerate((y, u, v)):
                p = frame.planes[i]
                np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:a.shape[0], :a.shape[1]] = a
            frame.colorspace, frame.color_range = colorspace, color_range
            matrix, full = matrix_of(frame)
            out = make_out(1, h, w, 3, "uint8", "interleaved")
            gather(storage, torch.tensor([0]), out, "yuv420", h, w, 3, matrix=matrix, full_range=full)
            diff = np.abs(out[0].numpy().astype(int) - frame.to_ndarray(format="rgb24").astype(int))
            assert diff.max() <= (0 if EXACT_PYAV else 1), (colorspace, color_range, matrix, full, diff.max())


def test_real_av1_and_h264_files_match_pyav(DATA):
    av1 = sorted(glob.glob(str(DATA / "cr5_flashdrive_av1" / "videos" / "*" / "*" / "*.mp4")))
    h264 = sorted(glob.glob(str(DATA / "groot_picknplace" / "videos" / "*" / "*" / "*.mp4")))
    assert av1 and h264, "the real-data videos are missing"
    assert assert_matches_pyav(av1[0], limit=6) == ("bt601", False)  # untagged, range MPEG
    assert assert_matches_pyav(h264[0], limit=6) == ("bt601", False)  # untagged, range unspecified


# ----------------------------------------------------------------------------
# errors: every bad argument names itself


def _good():
    return dict(storage=torch.zeros(4, 6, 8, 3, dtype=torch.uint8), ids=torch.tensor([0, 3, -1]),
                out=torch.empty(3, 6, 8, 3, dtype=torch.uint8), format="rgb", height=6, width=8, channels=3)


def call(**changes):
    kw = _good()
    kw.update(changes)
    kw = {k: v for k, v in kw.items() if v is not _MISSING}
    storage, ids, out = kw.pop("storage"), kw.pop("ids"), kw.pop("out")
    return _C.gather_frames(storage, ids, out, **kw)


_MISSING = object()


def test_good_call_passes():
    """The call every error case below changes one argument of: it runs and writes the frames (id -1: zeros)."""
    kw = _good()
    kw["storage"] = torch.randint(0, 256, (4, 6, 8, 3), dtype=torch.uint8)
    kw["out"].fill_(0xAB)
    call(storage=kw["storage"], out=kw["out"])
    assert torch.equal(kw["out"][:2], kw["storage"][[0, 3]]) and not kw["out"][2].any()


@pytest.mark.parametrize("changes,exc,match", [
    (dict(format="rgb24"), ValueError, "format: expected 'rgb' or 'yuv420'"),
    (dict(format=3), TypeError, "format: expected a str"),
    (dict(matrix="bt470"), ValueError, "matrix: expected 'bt601', 'bt709' or 'bt2020'"),
    (dict(height=0), ValueError, r"height: expected an int in \[1,"),
    (dict(width=-3), ValueError, "width: expected an int"),
    (dict(width=8.0), TypeError, "width: expected an int, got float"),
    (dict(channels=5), ValueError, r"channels: expected an int in \[1, 4\]"),
    (dict(height=_MISSING), TypeError, "missing required argument 'height'"),
    (dict(scale=0.0), ValueError, "scale: expected a finite number > 0"),
    (dict(scale=float("nan"), out=torch.empty(3, 6, 8, 3)), ValueError, "scale: expected a finite"),
    (dict(scale="255"), TypeError, "scale: expected a number, got str"),
    (dict(scale=255.0), ValueError, "scale: only for float out"),
    (dict(colour=1), TypeError, "unexpected keyword argument 'colour'"),
    # storage
    (dict(storage=torch.zeros(4, 6, 8, 3, dtype=torch.int16)), TypeError, "storage: format 'rgb' needs uint8 or float32"),
    (dict(storage=torch.zeros(4, 6, 8, 4, dtype=torch.uint8)), ValueError, r"storage: format 'rgb' .* expects \[N, 6, 8, 3\]"),
    (dict(storage=torch.zeros(4, 143, dtype=torch.uint8)), ValueError, r"storage: .* or \[N, 144\]"),
    (dict(storage=torch.zeros(4, 8, 6, 3, dtype=torch.uint8).transpose(1, 2)), ValueError, "storage: each frame must be C-contiguous"),
    (dict(storage=torch.zeros(4, 71, dtype=torch.uint8), format="yuv420"), ValueError,
     r"storage: format 'yuv420' with height 6, width 8 expects \[N, 72\] \(Y 6x8, then U and V 3x4\)"),
    (dict(storage=torch.zeros(4, 6, 8, 3, dtype=torch.uint8), format="yuv420"), ValueError, r"expects \[N, 72\]"),
    (dict(storage=torch.zeros(4, 72, dtype=torch.float32), format="yuv420"), TypeError, "needs uint8 planes"),
    (dict(storage=torch.zeros(4, 72, dtype=torch.uint8), format="yuv420", channels=4,
          out=torch.empty(3, 6, 8, 4, dtype=torch.uint8)), ValueError, "channels: format 'yuv420' decodes to 3"),
    (dict(storage=[1, 2, 3]), TypeError, "storage: expected an array supporting DLPack"),
    # ids
    (dict(ids=torch.tensor([0, 1, 2], dtype=torch.int32)), TypeError, "ids: expected dtype int64"),
    (dict(ids=torch.tensor([0, 4, -1])), ValueError, r"ids\[1\] = 4 is out of range for storage of 4 frames"),
    (dict(ids=torch.tensor([0, 1])), ValueError, r"out: expected \[M, H', W', C\] with M = 2"),
    # out
    (dict(out=torch.empty(3, 6, 8, 3, dtype=torch.int32)), TypeError, "out: expected uint8, float32, float16 or bfloat16"),
    (dict(out=torch.empty(3, 6, 8, 4, dtype=torch.uint8)), ValueError, "C = 3 .channels."),
    (dict(out=torch.empty(3, 3, 6, 8, dtype=torch.uint8)), ValueError, "pass a permuted view"),
    (dict(out=torch.empty(3, 6, 8, dtype=torch.uint8)), ValueError, r"out: expected \[M, H', W', C\]"),
    (dict(out=torch.empty(3, 6, 1, 3, dtype=torch.uint8).expand(3, 6, 8, 3)), ValueError, "out: strides .* overlap"),
    (dict(out=np.zeros((3, 6, 8, 3), np.uint8)), TypeError, "out is a numpy array but ids is a torch array"),
])
def test_bad_arguments(changes, exc, match):
    with pytest.raises(exc, match=match):
        call(**changes)


def test_negative_strides():
    st = np.zeros((4, 6, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="out: negative strides are not supported"):
        _C.gather_frames(st, np.array([0, 1, 2]), np.zeros((3, 6, 8, 3), np.uint8)[:, ::-1], format="rgb",
                         height=6, width=8, channels=3)
    with pytest.raises(ValueError, match="storage: negative frame stride"):
        _C.gather_frames(st[::-1], np.array([0, 1, 2]), np.zeros((3, 6, 8, 3), np.uint8), format="rgb",
                         height=6, width=8, channels=3)


def test_out_must_be_writable_and_separate():
    ro = np.zeros((3, 6, 8, 3), np.uint8)
    ro.flags.writeable = False
    st = np.zeros((4, 6, 8, 3), np.uint8)
    with pytest.raises((ValueError, BufferError), match="out"):
        _C.gather_frames(st, np.array([0, 1, 2]), ro, format="rgb", height=6, width=8, channels=3)
    storage = torch.zeros(4, 6, 8, 3, dtype=torch.uint8)
    with pytest.raises(ValueError, match="out overlaps the memory of storage"):
        call(storage=storage, out=storage[:3])
    ids = torch.zeros(200, dtype=torch.int64)
    with pytest.raises(ValueError, match="out overlaps the memory of ids"):
        call(ids=ids[:3], out=ids.view(torch.uint8)[:3 * 144].view(3, 6, 8, 3))


def test_cuda_arguments_on_a_cpu_machine():
    """Storage on CUDA with CPU ids/out is a device mismatch whatever the build."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to make a CUDA tensor (test_frames_cuda.py has the rest)")
    with pytest.raises(ValueError, match="storage is on cuda:0 but ids and out are on cpu"):
        call(storage=torch.zeros(4, 6, 8, 3, dtype=torch.uint8, device="cuda"))
