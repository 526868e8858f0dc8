"""Video ingest into frame buffers (robocache.frames.ingest) and the decoded-frame cache (frames.cache).

Clips are encoded here with PyAV: AV1 with LeRobot's settings (libsvtav1, g=2, crf=30, yuv420p) and
H.264 (libx264), tagged and untagged, plus the real AV1 episodes of ../shared/data/cr5_flashdrive_av1.
The stored YUV rows must equal PyAV's own ``to_ndarray(format="yuv420p")`` bit for bit, in every tier
and from the cache; every test gets its own cache directory (ROBOCACHE_CACHE_DIR).
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
pytestmark = pytest.mark.usefixtures("cache_env")
torch = pytest.importorskip("torch")

from conftest import mapped_file  # noqa: E402
from pyav_colors import applied, follows_tags  # noqa: E402
from robocache.frames import buffers as rc_buffers  # noqa: E402
from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames import entry as rc_entry  # noqa: E402
from robocache.frames import ingest as rc_ingest  # noqa: E402
from robocache.frames import processes as rc_processes  # noqa: E402
from robocache.frames import writes as rc_writes  # noqa: E402
from robocache.frames.ingest import FrameSpec, ingest_videos  # noqa: E402
from robocache.readers import ReaderError, decode_video  # noqa: E402
from robocache.video import decode as rc_decode  # noqa: E402
from robocache.video import probe as rc_video  # noqa: E402
from robocache.video import probe_sources as probe_videos  # noqa: E402
from robocache.video.encode import encode_mp4  # noqa: E402

REAL = "cr5_flashdrive_av1/videos/chunk-000/observation.images.top"
AV1_OPTS = {"g": "2", "crf": "30"}  # LeRobot's encoder settings (libsvtav1, yuv420p)


# ---------------------------------------------------------------------------------------------
# clips


def natural_frames(n, h, w, seed):
    """Smooth moving color fields plus sensor-like noise: compresses like camera footage, and every
    channel varies so a wrong matrix or plane order shows."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for i in range(n):
        r = 127 + 110 * np.sin(x / 9 + i * 0.4 + seed) * np.cos(y / 13)
        g = 127 + 110 * np.sin((x + y) / 17 - i * 0.3)
        b = 127 + 110 * np.cos(x / 7 - y / 11 + i * 0.2 + seed)
        img = np.stack([r, g, b], -1) + rng.normal(0, 5, (h, w, 3))
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def encode(path, codec, n, h=64, w=96, pix="yuv420p", seed=0, colorspace=None, color_range=None, opts=None):
    """n natural frames into ``path`` (robocache's writer: an AV1 encode in a child with a deadline)."""
    encode_mp4(path, np.stack(natural_frames(n, h, w, seed)), codec, 10, dict(opts or {}), pix_fmt=pix,
               colorspace=colorspace, color_range=color_range)
    return str(path)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """{name: [paths]}: 3-file streams (12, 17, 10 frames, 64x96) and single tagged clips."""
    root = tmp_path_factory.mktemp("clips")
    out = {
        "av1": [encode(root / f"av1_{i}.mp4", "libsvtav1", n, seed=i, opts=AV1_OPTS)
                for i, n in enumerate((12, 17, 10))],
        "h264": [encode(root / f"h264_{i}.mp4", "libx264", n, seed=10 + i) for i, n in enumerate((12, 17, 10))],
        "av1_bt709": [encode(root / "av1_709.mp4", "libsvtav1", 6, opts=AV1_OPTS, colorspace=1)],
        "av1_full": [encode(root / "av1_full.mp4", "libsvtav1", 6, opts=AV1_OPTS, color_range=2)],
        "h264_bt709": [encode(root / "h264_709.mp4", "libx264", 6, colorspace=1)],
        "h264_bt2020": [encode(root / "h264_2020.mp4", "libx264", 6, colorspace=9)],
        "h264_yuvj": [encode(root / "h264_j.mp4", "libx264", 6, pix="yuvj420p")],
        "h264_big": [encode(root / "h264_big.mp4", "libx264", 5, h=80, w=112)],
    }
    return out


@pytest.fixture(scope="module")
def real(DATA):
    """The two shortest real AV1 episodes (182 + 196 frames, 480x640), hashed before and after."""
    root = DATA / REAL
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    paths = [root / "episode_000007.mp4", root / "episode_000008.mp4"]
    before = [p.stat().st_mtime_ns for p in paths]
    yield [str(p) for p in paths]
    assert [p.stat().st_mtime_ns for p in paths] == before


def pyav_yuv(path):
    """PyAV's own YUV planes of every frame, flattened, and the frame times."""
    with av.open(str(path)) as c:
        frames = [(f.to_ndarray(format="yuv420p").ravel(), f.time) for f in c.decode(c.streams.video[0])]
    return np.stack([a for a, _ in frames]), np.array([t for _, t in frames], np.float64)


def rows(res, i):
    return res.data.numpy().reshape(len(res.data), -1)[res.offsets[i]:res.offsets[i + 1]]


def entry_files(cache_env):
    d = cache_env / "frames"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def only_entry(cache_env):
    entries = rc_cache.list_entries()
    assert len(entries) == 1, entries
    e = rc_cache.Entry(entries[0]["name"], cache_env / "frames")
    return e, json.loads(e.meta_path.read_text())


def no_decoding(monkeypatch):
    """Makes any decode or demux fail, and any probe but one header read (the check of a cache entry reads
    its first file's, for the frame size and color facts the entry records): a result must then come from
    the cache. Returns the files whose header was read."""
    def boom(*a, **k):
        raise AssertionError("decoded although a valid cache entry exists")
    monkeypatch.setattr(rc_decode, "DECODERS", {k: boom for k in rc_decode.DECODERS})
    monkeypatch.setattr(rc_video, "frame_times", boom)
    headers, real = [], rc_video.probe_video

    def header(path, **k):
        headers.append(path)
        return real(path, **k) if len(headers) == 1 else boom()
    monkeypatch.setattr(rc_video, "probe_video", header)
    return headers


# ---------------------------------------------------------------------------------------------
# probe and color facts


def test_probe_video_facts(clips):
    info = rc_video.probe_video(clips["av1"][1])
    assert (info.codec, info.width, info.height, info.frames, info.fps, info.pix_fmt) == \
        ("av1", 96, 64, 17, 10.0, "yuv420p")
    assert (info.matrix, info.full_range, info.backend) == ("bt601", False, "pyav")
    h = rc_video.probe_video(clips["h264"][0])
    assert (h.codec, h.frames) == ("h264", 12)
    assert rc_video.mp4_fourcc(clips["av1"][0]) == "av01" and rc_video.mp4_fourcc(clips["h264"][0]) == "avc1"
    # tags: what the files say, and what PyAV's rgb24 conversion makes of them (next test)
    facts = {k: (rc_video.probe_video(clips[k][0]).matrix, rc_video.probe_video(clips[k][0]).full_range)
             for k in ("av1_bt709", "av1_full", "h264_bt709", "h264_bt2020", "h264_yuvj")}
    assert facts == {"av1_bt709": applied(av, "bt709", False), "av1_full": applied(av, "bt601", True),
                     "h264_bt709": applied(av, "bt709", False), "h264_bt2020": applied(av, "bt2020", False),
                     "h264_yuvj": applied(av, "bt601", True, yuvj=True)}


def _rgb_errors(path):
    """Mean |reference(yuv, matrix, range) - PyAV rgb24| of a file's first frame for every candidate."""
    with av.open(str(path)) as c:
        f = next(c.decode(c.streams.video[0]))
        rgb = f.to_ndarray(format="rgb24").astype(np.float64)
        yuv = f.to_ndarray(format="yuv420p").ravel()
    h, w = f.height, f.width
    ch, cw = (h + 1) // 2, (w + 1) // 2
    y = yuv[:h * w].reshape(h, w)
    # nearest chroma upsampling: swscale's default yuv420p -> rgb24 path
    u = yuv[h * w:h * w + ch * cw].reshape(ch, cw).repeat(2, 0).repeat(2, 1)[:h, :w]
    v = yuv[h * w + ch * cw:].reshape(ch, cw).repeat(2, 0).repeat(2, 1)[:h, :w]
    return {(m, full): np.abs(np.clip(rc_video.yuv_to_rgb_reference(y, u, v, m, full), 0, 255) - rgb).mean()
            for m in rc_video.MATRICES for full in (False, True)}


@pytest.mark.parametrize("name", ["av1", "h264", "av1_bt709", "av1_full", "h264_bt709", "h264_bt2020", "h264_yuvj",
                                  "real"])
def test_recorded_matrix_is_the_one_pyav_applies(name, clips, DATA):
    """The finding the YUV->RGB kernel relies on: the (matrix, range) probe_video records is the one
    PyAV's to_ndarray(format="rgb24") applies, checked on decoded frames (untagged -> BT.601 limited,
    bt709 tag -> BT.709, bt2020 -> BT.2020, JPEG range tag or yuvj420p -> full range)."""
    path = clips[name][0] if name != "real" else DATA / REAL / "episode_000007.mp4"
    if not Path(path).exists():
        pytest.skip(f"{path} is not present")
    info = rc_video.probe_video(path)
    errors = _rgb_errors(path)
    if name == "real":
        # a real, weakly saturated scene cannot tell the matrices apart (all within 0.1), only the range
        assert info.matrix == "bt601" and not info.full_range
        assert errors[("bt601", False)] < 1.5 and min(v for k, v in errors.items() if k[1]) > 5, errors
        return
    best = min(errors, key=errors.get)
    if name == "h264_yuvj" and int(av.__version__.split(".")[0]) < 17:
        # PyAV before 17 converts yuvj420p to RGB with the limited range (seen with 15.1 and 16.0, the releases
        # LeRobot 0.4 pins), against the file's own tag; robocache follows the tag, as PyAV 17 and FFmpeg do
        assert info.full_range and best == ("bt601", False), (info, errors)
        return
    assert best == (info.matrix, info.full_range), f"PyAV applies {best}, probe recorded {info}: {errors}"
    others = sorted(v for k, v in errors.items() if k != best)
    assert errors[best] < 1.5 and others[0] > errors[best] + 1.0, errors


# ---------------------------------------------------------------------------------------------
# decoded bytes


@pytest.mark.parametrize("name", ["av1", "h264"])
def test_yuv_rows_equal_pyav_planes_and_times_equal_decode_video(name, clips):
    paths = clips[name]
    res = ingest_videos(paths, tier="host", workers=2)
    assert res.spec == FrameSpec("yuv420", 64, 96, 3, "bt601", False, 64 * 96 * 3 // 2)
    assert res.counts.tolist() == [12, 17, 10] and res.offsets.tolist() == [0, 12, 29, 39]
    assert res.data.dtype == torch.uint8 and tuple(res.data.shape) == (39, res.spec.frame_bytes)
    assert not res.from_cache and res.cache_path and res.frames_per_s > 0
    for i, p in enumerate(paths):
        ref, _ = pyav_yuv(p)
        np.testing.assert_array_equal(rows(res, i), ref)
        _, t = decode_video(p)
        np.testing.assert_array_equal(res.times[i], t)


def test_real_av1_rows_equal_pyav(real):
    res = ingest_videos(real, tier="host")
    assert res.spec.format == "yuv420" and (res.spec.height, res.spec.width) == (480, 640)
    assert res.counts.tolist() == [182, 196] and res.spec.frame_bytes == 480 * 640 * 3 // 2
    for i, p in enumerate(real):
        ref, t = pyav_yuv(p)
        np.testing.assert_array_equal(rows(res, i), ref)
        np.testing.assert_array_equal(res.times[i], t)  # the pts, as decode_video reports them
        np.testing.assert_allclose(res.times[i], np.arange(len(t)) / 10.0, atol=1e-3)


def test_tiers_give_identical_bytes(clips, cache_env):
    paths = clips["av1"]
    host = ingest_videos(paths, tier="host")
    disk = ingest_videos(paths, tier="disk", cache=False)
    assert not any(".tmp" in n for n in entry_files(cache_env))  # its file is gone from the directory
    for other in (disk, ingest_videos(paths, tier="disk"), ingest_videos(paths, tier="host")):
        assert torch.equal(host.data, other.data)
        assert all(np.array_equal(a, b) for a, b in zip(host.times, other.times))
        assert other.spec == host.spec
    assert disk.cache_path is None and not disk.from_cache


@pytest.mark.parametrize("tier", ["disk", "host"])
def test_staging_ring_wraps(clips, monkeypatch, tier):
    """Tiers disk (and device) decode through a ring of a few rows per worker: a ring smaller than a
    file hands its rows over several times per file, and the bytes come out the same."""
    host = ingest_videos(clips["av1"], tier="host", cache=False)
    monkeypatch.setattr(rc_ingest, "STAGE_BYTES", 5 * host.spec.frame_bytes)  # 12, 17, 10 frames: 5 + 5 + 2...
    res = ingest_videos(clips["av1"], tier=tier)
    assert torch.equal(res.data, host.data)
    assert torch.equal(ingest_videos(clips["av1"], tier="host").data, host.data)  # the cache file too


@pytest.mark.parametrize("chunk", [3, 0], ids=["chunks-of-3", "whole-files"])
@pytest.mark.parametrize("direct", ["o_direct", "refused", "page_cache"])
def test_host_cache_written_as_it_is_decoded(clips, monkeypatch, direct, chunk):
    """The host tier writes its cache file from the final buffer a chunk of rows at a time as each
    file decodes, in whatever order the chunks complete: whole blocks through O_DIRECT (the buffer
    is page-aligned), the partial blocks at a chunk's ends through the page cache; a filesystem
    refusing O_DIRECT (EINVAL) falls back to the page cache."""
    monkeypatch.setattr(rc_buffers, "POPULATE_MIN_BYTES", 0)  # small clips get a page-aligned map too
    fb = 64 * 96 * 3 // 2  # 9216 bytes: chunks of 3 rows start off block boundaries
    if chunk:
        monkeypatch.setattr(rc_ingest, "STAGE_BYTES", 2 * chunk * fb)
    # (by default O_DIRECT only for entries large against the RAM)
    monkeypatch.setenv("ROBOCACHE_CACHE_DIRECT", "0" if direct == "page_cache" else "1")
    used, buffered = [], []
    real_direct, real_write = rc_cache.EntryWriter.write_direct, rc_cache.EntryWriter.write

    def spy(self, offset, data):
        used.append((offset, len(memoryview(data).cast("B"))))
        if direct == "refused":
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_direct(self, offset, data)

    def spy_write(self, offset, data):
        buffered.append((offset, len(memoryview(data).cast("B"))))
        return real_write(self, offset, data)

    monkeypatch.setattr(rc_cache.EntryWriter, "write_direct", spy)
    monkeypatch.setattr(rc_cache.EntryWriter, "write", spy_write)
    res = ingest_videos(clips["av1"], tier="host", workers=2)
    assert (not used) if direct == "page_cache" else (used and all(o % 4096 == 0 and n % 4096 == 0 for o, n in used))
    # every chunk: its aligned interior direct (o_direct), everything else through the page cache
    spans = []
    for start, n in zip(res.offsets[:-1], res.counts):
        step = chunk or int(n)
        spans += [(int(start + r) * fb, int(start + min(r + step, n)) * fb) for r in range(0, int(n), step)]
    interior = sorted((-(-s // 4096) * 4096, e // 4096 * 4096) for s, e in spans if e // 4096 > -(-s // 4096))
    if direct == "o_direct":
        assert sorted((o, o + n) for o, n in used) == interior
    wrote = sorted([(o, o + n) for o, n in buffered] + ([(o, o + n) for o, n in used] if direct == "o_direct" else []))
    assert wrote[0][0] == 0 and all(a[1] == b[0] for a, b in zip(wrote, wrote[1:])) and wrote[-1][1] == res.data.numel()
    assert len(wrote) >= len(spans)
    monkeypatch.setattr(rc_cache.EntryWriter, "write_direct", real_direct)
    monkeypatch.setattr(rc_cache.EntryWriter, "write", real_write)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hit = ingest_videos(clips["av1"], tier="disk")
    assert hit.from_cache and torch.equal(hit.data, res.data)


def test_disk_tier_maps_the_cache_file(clips):
    res = ingest_videos(clips["h264"], tier="disk")
    assert res.cache_path and os.path.getsize(res.cache_path) == res.data.numel()
    # a stray write changes this process's copy only, never the cache file
    before = Path(res.cache_path).read_bytes()[:64]
    res.data[0, :64] = 7
    assert Path(res.cache_path).read_bytes()[:64] == before
    again = ingest_videos(clips["h264"], tier="disk")
    assert again.from_cache and again.data[0, :64].tolist() == list(before)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the pages are pinned read-only (cuda test)")
def test_host_tier_from_the_cache_is_the_files_pages(clips):
    """Without a GPU, loaded from the cache, the host tier is the cache file's own pages (no fresh
    memory, no copy: one copy of the frames in RAM), copy-on-write: a stray write never reaches the
    file. (With a GPU they are pinned in place, read-only: test_frames_ingest_cuda.py.)"""
    first = ingest_videos(clips["h264"], tier="host")
    hit = ingest_videos(clips["h264"], tier="host")
    assert hit.from_cache and torch.equal(hit.data, first.data)
    if mapped_file(hit.data.data_ptr()) is None:
        pytest.skip("this kernel has no MADV_POPULATE_READ: the host tier is read into fresh memory")
    assert os.path.samefile(mapped_file(hit.data.data_ptr()), hit.cache_path)
    assert mapped_file(first.data.data_ptr()) != hit.cache_path          # the cold load decoded into RAM
    before = Path(hit.cache_path).read_bytes()[:64]
    hit.data[0, :64] = 7
    assert Path(hit.cache_path).read_bytes()[:64] == before


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_host_tier_from_the_cache_read_into_fresh_memory(clips, monkeypatch):
    """Where the file's pages cannot be had (a kernel without MADV_POPULATE_READ), the cache is read
    into fresh memory by parallel readers (with a GPU: where the driver refuses to pin them in place):
    equal bytes."""
    first = ingest_videos(clips["h264"], tier="host")
    monkeypatch.setattr(rc_buffers, "file_pages", lambda *a: None)
    monkeypatch.setattr(rc_buffers, "pinned_file", lambda *a: None)
    hit = ingest_videos(clips["h264"], tier="host")
    assert hit.from_cache and torch.equal(hit.data, first.data)
    assert mapped_file(hit.data.data_ptr()) != hit.cache_path


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/self/status")
def test_file_pages_are_populated_without_anonymous_memory(tmp_path, rng):
    from robocache.frames.pinned import file_pages

    def anon_kb():
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("RssAnon:"))

    data = rng.integers(0, 256, 48 << 20, dtype=np.uint8)
    path = tmp_path / "rows.bin"
    data.tofile(path)
    a0 = anon_kb()
    t = file_pages(path, (48, 1 << 20))
    if t is None:
        pytest.skip("this kernel has no MADV_POPULATE_READ")
    assert anon_kb() - a0 < 8 << 10                           # 48 MB populated, not copied
    assert np.array_equal(t.numpy().reshape(-1), data)
    assert file_pages(path, (0, 16)) is None       # nothing to map


def test_resize_odd_size(clips):
    res = ingest_videos(clips["h264"], tier="host", resize=(47, 61))
    spec = res.spec
    assert (spec.height, spec.width, spec.chroma_shape) == (47, 61, (24, 31))
    assert spec.frame_bytes == 47 * 61 + 2 * 24 * 31
    from av.video.reformatter import VideoReformatter
    r = VideoReformatter()
    with av.open(clips["h264"][1]) as c:
        for k, f in enumerate(c.decode(c.streams.video[0])):
            g = r.reformat(f, width=61, height=47, format="yuv420p", dst_color_range=1)
            want = np.concatenate([np.asarray(pl, np.uint8).reshape(-1, pl.line_size)[:h, :w].ravel()
                                   for pl, (h, w) in zip(g.planes, [(47, 61), (24, 31), (24, 31)])])
            np.testing.assert_array_equal(rows(res, 1)[k], want)


def test_sources_of_other_formats(tmp_path):
    """RGB-family sources are kept as rgb rows; 10-bit / 4:4:4 ones are reformatted to yuv420p;
    a container that declares no frame count (mkv) has its packets counted."""
    rgb = [encode(tmp_path / "rgb.mkv", "ffv1", 7, pix="bgr0")]
    res = ingest_videos(rgb, tier="host")
    assert res.spec.format == "rgb" and tuple(res.data.shape) == (7, 64, 96, 3) and res.counts.tolist() == [7]
    with av.open(rgb[0]) as c:
        ref = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])])
    np.testing.assert_array_equal(res.data.numpy(), ref)

    for pix, codec in (("yuv420p10le", "libsvtav1"), ("yuv444p", "libx264")):
        p = [encode(tmp_path / f"{pix}.mp4", codec, 5, pix=pix, opts=AV1_OPTS if codec == "libsvtav1" else None)]
        res = ingest_videos(p, tier="host")
        assert res.spec.format == "yuv420" and res.spec.frame_bytes == 64 * 96 * 3 // 2
        with av.open(p[0]) as c:
            ref = np.stack([f.reformat(format="yuv420p").to_ndarray().ravel() for f in c.decode(c.streams.video[0])])
        np.testing.assert_array_equal(rows(res, 0), ref)


# ---------------------------------------------------------------------------------------------
# the cache


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_cache_hit_does_not_decode(clips, tier, monkeypatch):
    paths = clips["av1"]
    first = ingest_videos(paths, tier="host")
    assert not first.from_cache
    headers = no_decoding(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a valid entry: no warning either
        hit = ingest_videos(paths, tier=tier)
    assert hit.from_cache and hit.cache_path == first.cache_path and headers == [paths[0]]
    assert torch.equal(hit.data, first.data) and hit.spec == first.spec
    assert all(np.array_equal(a, b) for a, b in zip(hit.times, first.times))
    # the caller's plan (spec, counts) matching the entry: still a hit
    assert ingest_videos(paths, tier=tier, spec=first.spec, counts=first.counts).from_cache
    assert headers == [paths[0]]      # the plan's spec: no file read at all


def test_cache_miss_on_other_options(clips, monkeypatch):
    paths = clips["h264"]
    ingest_videos(paths, tier="host")
    again = ingest_videos(paths, tier="host", resize=(32, 48))
    assert not again.from_cache and again.spec.height == 32
    sub = ingest_videos(paths[:2], tier="host")       # another slot, its files' frames copied (reuse.py)
    assert sub.reused == 2 and sub.cache_path != again.cache_path
    assert len(rc_cache.list_entries()) == 3


def test_cache_false_neither_reads_nor_writes(clips, cache_env, monkeypatch):
    paths = clips["h264"]
    res = ingest_videos(paths, tier="host", cache=False)
    assert not res.from_cache and res.cache_path is None and entry_files(cache_env) == []
    ingest_videos(paths, tier="host")
    files = entry_files(cache_env)
    monkeypatch.setattr(rc_entry, "check", lambda *a, **k: pytest.fail("cache=False read the cache"))
    res = ingest_videos(paths, tier="host", cache=False)
    assert not res.from_cache and entry_files(cache_env) == files


def _rebuilt(paths, match, tier="host"):
    with pytest.warns(rc_cache.CacheWarning, match=match) as record:
        res = ingest_videos(paths, tier=tier)
    assert len([w for w in record if issubclass(w.category, rc_cache.CacheWarning)]) == 1, "warned once"
    assert not res.from_cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ingest_videos(paths, tier=tier).from_cache  # rebuilt: valid again
    return res


@pytest.mark.parametrize("change", ["touch", "rewrite"])
def test_stale_entry_when_a_source_changes(clips, tmp_path, change):
    paths = [str(tmp_path / f"s{i}.mp4") for i in range(3)]
    for src, dst in zip(clips["av1"], paths):
        Path(dst).write_bytes(Path(src).read_bytes())
    ingest_videos(paths, tier="host")
    if change == "touch":
        st = os.stat(paths[1])
        os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    else:  # another clip (different frames, same size and count) under the same name
        Path(paths[1]).write_bytes(Path(clips["h264"][1]).read_bytes())
    res = _rebuilt(paths, "stale")
    ref, _ = pyav_yuv(paths[1])
    np.testing.assert_array_equal(rows(res, 1), ref)
    assert len(rc_cache.list_entries()) == 1  # rebuilt in its slot, not next to it


def test_truncated_data_file(clips, cache_env):
    ingest_videos(clips["av1"], tier="host")
    e, meta = only_entry(cache_env)
    with open(e.data_path, "r+b") as f:
        f.truncate(meta["total_bytes"] - 100)
    res = _rebuilt(clips["av1"], "truncated", tier="disk")
    np.testing.assert_array_equal(rows(res, 2), pyav_yuv(clips["av1"][2])[0])


@pytest.mark.parametrize("damage", ["garbage", "empty", "counts", "incomplete", "version", "no-data", "times"])
def test_corrupted_entry_is_rebuilt(clips, cache_env, damage):
    ingest_videos(clips["h264"], tier="host")
    e, meta = only_entry(cache_env)
    if damage == "garbage":
        e.meta_path.write_bytes(b'{"complete": tr\x00\xff')
    elif damage == "empty":
        e.meta_path.write_text("")
    elif damage == "counts":  # sums to the same total: only the checksum can tell
        meta["counts"] = [13, 16, 10]
        e.meta_path.write_text(json.dumps(meta))
    elif damage == "incomplete":
        meta["complete"] = False
        e.meta_path.write_text(json.dumps(meta))
    elif damage == "version":
        meta["version"] = 0
        e.meta_path.write_text(json.dumps(meta))
    elif damage == "no-data":
        e.data_path.unlink()
    elif damage == "times":
        t = np.load(e.times_path)
        t[5] += 0.5
        np.save(e.times_path, t)
    match = {"garbage": "corrupted metadata", "empty": "corrupted metadata", "counts": "stale|checksum",
             "incomplete": "incomplete", "version": "format", "no-data": "missing its data",
             "times": "checksum"}[damage]
    res = _rebuilt(clips["h264"], match)
    np.testing.assert_array_equal(rows(res, 1), pyav_yuv(clips["h264"][1])[0])


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_checksum_catches_a_changed_sampled_frame(clips, cache_env, which):
    """What the checksum promises: the first, middle and last frame of every file are covered (a
    change elsewhere is not: see docs/frames-ingest.md); sizes catch truncation."""
    ingest_videos(clips["av1"], tier="host")
    e, meta = only_entry(cache_env)
    counts = meta["counts"]
    row = 12 + {"first": 0, "middle": counts[1] // 2, "last": counts[1] - 1}[which]  # file 1's rows
    assert row in rc_cache.sample_rows(counts)
    fb = meta["spec"]["frame_bytes"]
    with open(e.data_path, "r+b") as f:
        f.seek(row * fb + fb // 3)
        b = f.read(1)
        f.seek(row * fb + fb // 3)
        f.write(bytes([b[0] ^ 0x5A]))
    res = _rebuilt(clips["av1"], "checksum", tier="disk")
    np.testing.assert_array_equal(rows(res, 1), pyav_yuv(clips["av1"][1])[0])


def test_spec_or_counts_from_the_plan_differ(clips):
    first = ingest_videos(clips["h264"], tier="host")
    spec = FrameSpec.make("yuv420", 64, 96, "bt709", False)
    with pytest.warns(rc_cache.CacheWarning, match="stale"):
        res = ingest_videos(clips["h264"], tier="host", spec=spec, counts=first.counts)
    assert not res.from_cache and res.spec == spec  # the caller's spec is used as given


def test_failed_ingest_leaves_no_entry(clips, cache_env, monkeypatch):
    real_decode = rc_decode.DECODERS["pyav"]

    def failing(job, *a, **k):
        if job.path.endswith("_2.mp4"):
            raise ReaderError(f"{job.path}: injected failure")
        return real_decode(job, *a, **k)

    monkeypatch.setitem(rc_decode.DECODERS, "pyav", failing)
    with pytest.raises(ReaderError, match="_2.mp4: injected"):
        ingest_videos(clips["h264"], tier="host")
    with pytest.raises(ReaderError, match="_2.mp4: injected"):
        ingest_videos(clips["h264"], tier="disk")
    assert [n for n in entry_files(cache_env) if not n.endswith(".lock")] == []
    monkeypatch.undo()
    assert not ingest_videos(clips["h264"], tier="host").from_cache


def test_orphans_of_a_killed_build_are_removed(clips, cache_env):
    """A temporary file whose writer holds no flock on it is an orphan, whatever pid its name records
    (a dead one, 1, this process's own: a job that is pid 1 in its container sees pid 1 alive after
    every crash); one whose writer holds the lock is a live build and stays."""
    import fcntl

    res = ingest_videos(clips["h264"], tier="host")
    name = Path(res.cache_path).name.split(".")[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    root = cache_env / "frames"
    orphans = [root / f"{name}.{kind}.{pid}.{tag}.{ext}" for pid, tag in ((dead, "0a0b0c0d"), (1, "0e0f1011"),
                                                                         (os.getpid(), "12131415"))
               for kind, ext in (("frames", "tmp"), ("times", "tmp.npy"), ("json", "tmp"))]
    live = root / f"{name}.frames.{os.getpid()}.01020304.tmp"
    for p in orphans + [live]:
        p.write_bytes(b"partial")
    fd = os.open(live, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                 # as EntryWriter holds it while it writes
        assert {e["status"] for e in rc_cache.list_entries()} == {"ok"}  # leftovers counted in its bytes
        Path(res.cache_path).unlink()  # forces a rebuild, which clears the orphans
        with pytest.warns(rc_cache.CacheWarning, match="missing its data"):
            ingest_videos(clips["h264"], tier="host")
        assert [p.name for p in orphans if p.exists()] == [] and live.exists()
    finally:
        os.close(fd)


def test_unwritable_cache_dir(clips, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(rc_cache.CacheWarning, match="without a cache"):
        res = ingest_videos(clips["h264"], tier="host")
    assert not res.from_cache and res.cache_path is None
    np.testing.assert_array_equal(rows(res, 0), pyav_yuv(clips["h264"][0])[0])
    with pytest.raises(rc_cache.CacheError, match=r"tier='disk' needs .*\(\d+ bytes\).*a-file/cache"):
        ingest_videos(clips["h264"], tier="disk")


def test_disk_full(clips, cache_env, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.warns(rc_cache.CacheWarning, match="No space left"):
        assert not ingest_videos(clips["av1"], tier="host").from_cache
    with pytest.raises(rc_cache.CacheError, match=rf"\({39 * 9216} bytes\).*{re.escape(str(cache_env))}.*No space"):
        ingest_videos(clips["av1"], tier="disk")
    monkeypatch.undo()

    # the disk fills up while writing: the host tier goes on, the disk tier stops with the same words
    def write_fails(self, offset, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rc_cache.EntryWriter, "write", write_fails)
    with pytest.warns(rc_cache.CacheWarning, match="No space left"):
        res = ingest_videos(clips["av1"], tier="host")
    np.testing.assert_array_equal(rows(res, 1), pyav_yuv(clips["av1"][1])[0])
    with pytest.raises(rc_cache.CacheError, match=r"tier='disk' could not write .*No space left"):
        ingest_videos(clips["av1"], tier="disk")
    assert [n for n in entry_files(cache_env) if not n.endswith(".lock")] == []


def test_cache_dir_conventions(monkeypatch, tmp_path):
    monkeypatch.delenv("ROBOCACHE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rc_cache.cache_dir() == tmp_path / "xdg" / "robocache"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rc_cache.cache_dir() == tmp_path / "home" / ".cache" / "robocache"


def test_list_and_clear(clips, cache_env, capsys):
    from robocache.__main__ import main

    a = ingest_videos(clips["av1"], tier="host", desc="observation.images.top")
    ingest_videos(clips["h264"], tier="host")
    entries = {e["name"]: e for e in rc_cache.list_entries()}
    assert len(entries) == 2 and all(e["status"] == "ok" for e in entries.values())
    name = Path(a.cache_path).name.split(".")[0]
    assert name.startswith("observation_images_top-")
    assert entries[name]["frames"] == 39 and entries[name]["sources"] == [os.path.abspath(p) for p in clips["av1"]]
    assert entries[name]["bytes"] > 39 * 9216 and entries[name]["created"]

    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert name in out and "2 entries" in out
    assert main(["cache", "list", "--json"]) == 0
    assert {e["name"] for e in json.loads(capsys.readouterr().out)} == set(entries)
    assert main(["cache", "clear", "nothing-like-this"]) == 1
    assert main(["cache", "clear", name.rsplit("-", 1)[1][:8]]) == 0  # the hash part alone
    assert [e["name"] for e in rc_cache.list_entries()] != [name] and len(rc_cache.list_entries()) == 1
    assert main(["cache", "clear", "--all"]) == 0
    assert rc_cache.list_entries() == [] and entry_files(cache_env) == []
    with pytest.raises(SystemExit):
        main(["cache", "clear"])


# ---------------------------------------------------------------------------------------------
# errors


def test_missing_files(clips, tmp_path):
    gone = [str(tmp_path / "nope_a.mp4"), str(tmp_path / "nope_b.mp4")]
    with pytest.raises(ReaderError, match=r"nope_a\.mp4: video file not found \(2 of 4 files are missing\)"):
        ingest_videos([clips["h264"][0], *gone, clips["h264"][1]], tier="host")
    with pytest.raises(ReaderError, match=r"nope_b\.mp4: video file not found"):
        probe_videos([gone[1]])


def test_files_of_a_stream_must_agree(clips):
    mixed = [clips["h264"][0], clips["h264_big"][0]]
    with pytest.raises(ReaderError, match=r"h264_big\.mp4: height 80 \(first file: 64\).*resize="):
        probe_videos(mixed)
    res = ingest_videos(mixed, tier="host", resize=(64, 96))
    assert res.counts.tolist() == [12, 5]
    with pytest.raises(ReaderError, match=r"h264_j\.mp4: full_range True \(first file: False\)"):
        probe_videos([clips["h264"][0], clips["h264_yuvj"][0]])
    if follows_tags(av):        # older PyAV converts both as BT.601: they agree
        with pytest.raises(ReaderError, match=r"av1_709\.mp4: matrix 'bt709' \(first file: 'bt601'\)"):
            probe_videos([clips["av1"][0], clips["av1_bt709"][0]])


def test_frame_count_disagrees_with_the_container(clips):
    spec, counts, _ = probe_videos(clips["h264"])
    with pytest.raises(ReaderError, match=r"h264_1\.mp4: decoded 17 of the 18 frames the container declares"):
        ingest_videos(clips["h264"], tier="host", spec=spec, counts=counts + [0, 1, 0], cache=False)
    with pytest.raises(ReaderError, match=r"h264_0\.mp4: decodes to more than the 11 frames"):
        ingest_videos(clips["h264"], tier="host", spec=spec, counts=counts - [1, 0, 0], cache=False)


def test_bad_arguments(clips):
    p = clips["h264"]
    with pytest.raises(ValueError, match="tier must be one of"):
        ingest_videos(p, tier="gpu")
    with pytest.raises(TypeError, match="sources must be a list"):
        ingest_videos(p[0], tier="host")
    with pytest.raises(ValueError, match="sources is empty"):
        ingest_videos([], tier="host")
    with pytest.raises(ValueError, match="video_resize must be"):
        ingest_videos(p, tier="host", resize=(0, 4))
    with pytest.raises(ValueError, match="spec and counts together"):
        ingest_videos(p, tier="host", counts=[1, 2, 3])
    spec, counts, _ = probe_videos(p)
    with pytest.raises(ValueError, match="counts must hold one positive frame count per source"):
        ingest_videos(p, tier="host", spec=spec, counts=counts[:2])
    with pytest.raises(ValueError, match="device=.* is for tier='device'"):
        ingest_videos(p, tier="host", device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="tier='device' needs a CUDA device; torch sees none"):
            ingest_videos(p, tier="device")


class _FakeCapture:
    """cv2.VideoCapture over a file OpenCV opens but cannot decode (its FFmpeg lacks the codec)."""

    def __init__(self, path, fourcc="av01"):
        self.fourcc = fourcc

    def isOpened(self):
        return True

    def get(self, prop):
        return {1: 0.0, 3: 96.0, 4: 64.0, 5: 10.0, 6: float(int.from_bytes(self.fourcc.encode(), "little")),
                7: 12.0}.get(prop, 0.0)

    def read(self):
        return False, None

    def release(self):
        pass


def _fake_cv2():
    return types.SimpleNamespace(VideoCapture=_FakeCapture, CAP_PROP_POS_MSEC=0, CAP_PROP_FRAME_WIDTH=3,
                                 CAP_PROP_FRAME_HEIGHT=4, CAP_PROP_FPS=5, CAP_PROP_FOURCC=6, CAP_PROP_FRAME_COUNT=7,
                                 COLOR_BGR2RGB=4, INTER_AREA=3)


def test_codec_error_names_av1_and_the_fix(clips, monkeypatch):
    """OpenCV opens an AV1 mp4 but has no decoder for it: the message names the codec (from the
    container) and the fix, for ingest and for decode_video alike."""
    monkeypatch.setitem(sys.modules, "cv2", _fake_cv2())
    want = r"av1_\d\.mp4: the video is AV1; OpenCV here cannot decode it .*pip install av \(PyAV bundles the dav1d"
    with pytest.raises(ReaderError, match=want):
        ingest_videos(clips["av1"], tier="host", backend="opencv")
    with pytest.raises(ReaderError, match=want):
        decode_video(clips["av1"][0], backend="opencv")
    info = rc_video.probe_video(clips["av1"][0], backend="opencv")
    assert (info.codec, info.frames, info.backend) == ("av1", 12, "opencv")
    # no fourcc from OpenCV: the codec comes from the mp4 sample entry
    monkeypatch.setattr(_FakeCapture, "__init__", lambda self, path: setattr(self, "fourcc", "\0\0\0\0"))
    # (every file fails; whichever worker fails first stops the others: any of them may be named)
    with pytest.raises(ReaderError, match=r"h264_\d\.mp4: the video is H\.264 .*OpenCV decoded none"):
        ingest_videos(clips["h264"], tier="host", backend="opencv")


def test_codec_error_with_real_opencv(real):
    cv2 = pytest.importorskip("cv2")
    cap = cv2.VideoCapture(real[0])
    ok = cap.isOpened() and cap.read()[0]
    cap.release()
    if ok:
        pytest.skip("this OpenCV decodes AV1")
    with pytest.raises(ReaderError, match=r"the video is AV1; OpenCV here cannot decode it.*pip install av"):
        ingest_videos(real, tier="host", backend="opencv", cache=False)


# ---------------------------------------------------------------------------------------------
# memory


RSS_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np, torch
    from robocache.frames.ingest import ingest_videos
    from robocache.video import probe_sources as probe_videos

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    paths, tier, workers = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    spec, counts, _ = probe_videos(paths)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS: the peak below is the ingest's own
    base = status("VmRSS:")
    res = ingest_videos(paths, tier=tier, cache=False, workers=workers, spec=spec, counts=counts)
    print(json.dumps({"growth": status("VmHWM:") - base, "frame_bytes": spec.frame_bytes,
                      "counts": counts.tolist(), "frames": int(res.offsets[-1])}))
""")


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_ingest_peak_rss(real, tier, tmp_path):
    """Peak RSS growth <= 1.25 x (frames kept in host memory + the files in flight): host keeps every
    frame (decoded in place), disk none (a staging file per worker, written to the mapped file)."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc/self/clear_refs")
    script = tmp_path / "rss.py"
    script.write_text(RSS_SCRIPT)
    workers = 2
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(script), ",".join(real), tier, str(workers)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    fb, counts = r["frame_bytes"], r["counts"]
    kept = sum(counts) * fb if tier == "host" else 0
    in_flight = workers * max(counts) * fb
    bound = 1.25 * (kept + in_flight)
    assert r["frames"] == sum(counts)
    assert r["growth"] <= bound, f"peak RSS grew {r['growth'] / 2**20:.0f} MiB > {bound / 2**20:.0f} MiB ({r})"
    if tier == "host":
        assert r["growth"] >= 0.9 * kept, r  # the measurement sees the frames


def test_opencv_backend_gives_rgb_rows(clips):
    cv2 = pytest.importorskip("cv2")  # noqa: F841
    res = ingest_videos(clips["h264"], tier="host", backend="opencv")
    assert res.spec.format == "rgb" and tuple(res.data.shape) == (39, 64, 96, 3)
    for i, p in enumerate(clips["h264"]):
        frames, times = decode_video(p, backend="opencv")
        np.testing.assert_array_equal(res.data.numpy()[res.offsets[i]:res.offsets[i + 1]], frames)
        np.testing.assert_array_equal(res.times[i], times)
    assert ingest_videos(clips["h264"], tier="disk", backend="opencv").from_cache


def test_source_changing_during_ingest_is_not_cached(clips, tmp_path, monkeypatch):
    paths = [str(tmp_path / f"s{i}.mp4") for i in range(2)]
    for src, dst in zip(clips["h264"], paths):
        Path(dst).write_bytes(Path(src).read_bytes())
    real_decode = rc_decode.DECODERS["pyav"]

    def touching(job, *a, **k):
        times = real_decode(job, *a, **k)
        st = os.stat(paths[0])
        os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return times

    monkeypatch.setitem(rc_decode.DECODERS, "pyav", touching)
    for tier in ("host", "disk"):
        with pytest.warns(rc_cache.CacheWarning, match="changed while it was decoded"):
            res = ingest_videos(paths, tier=tier)
        assert res.cache_path is None and rc_cache.list_entries() == []
        np.testing.assert_array_equal(rows(res, 1), pyav_yuv(paths[1])[0])


def test_direct_writes_only_for_entries_large_against_the_ram(monkeypatch):
    monkeypatch.delenv("ROBOCACHE_CACHE_DIRECT", raising=False)
    monkeypatch.setattr(rc_writes, "available_host_memory", lambda: 400)
    assert rc_writes.write_direct(101) and not rc_writes.write_direct(100)
    monkeypatch.setenv("ROBOCACHE_CACHE_DIRECT", "0")
    assert not rc_writes.write_direct(10**12)
    monkeypatch.setenv("ROBOCACHE_CACHE_DIRECT", "1")
    assert rc_writes.write_direct(1)


def test_decoder_threads_follow_the_files_in_flight(clips, monkeypatch):
    """Auto threads per decoder while fewer files than cores decode at once, 2 once every core has a
    file; ROBOCACHE_DECODER_THREADS (DECODER_THREADS) wins over both."""
    seen = []
    real = rc_decode.DECODERS["pyav"]

    def spy(job, out, spec, threads, tick, stop):
        seen.append(threads)
        return real(job, out, spec, threads, tick, stop)

    monkeypatch.setitem(rc_decode.DECODERS, "pyav", spy)
    monkeypatch.setattr(rc_ingest, "DECODER_THREADS", None)
    monkeypatch.setattr(rc_ingest, "cpu_count", lambda: 4)
    ingest_videos(clips["av1"], tier="host", cache=False)  # 3 files, 4 cores
    assert seen == [0, 0, 0]
    monkeypatch.setattr(rc_ingest, "cpu_count", lambda: 2)
    seen.clear()
    res = ingest_videos(clips["av1"], tier="host", cache=False, workers=2)
    assert seen == [2, 2, 2]
    np.testing.assert_array_equal(rows(res, 1), pyav_yuv(clips["av1"][1])[0])
    monkeypatch.setattr(rc_ingest, "DECODER_THREADS", 1)
    seen.clear()
    ingest_videos(clips["av1"], tier="host", cache=False, workers=2)
    assert seen == [1, 1, 1]


# ---------------------------------------------------------------------------------------------
# decoding in processes


def test_processes_only_for_pyav_and_many_files(monkeypatch):
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", None)
    assert rc_processes.decode_in_processes(rc_processes.PROCESS_MIN_WORKERS, "pyav")
    assert not rc_processes.decode_in_processes(rc_processes.PROCESS_MIN_WORKERS - 1, "pyav")
    assert not rc_processes.decode_in_processes(16, "opencv")
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    assert rc_processes.decode_in_processes(2, "pyav") and not rc_processes.decode_in_processes(1, "pyav")
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", False)
    assert not rc_processes.decode_in_processes(64, "pyav")


@pytest.mark.parametrize("tier", ["host", "disk"])
@pytest.mark.parametrize("cache", [True, False], ids=["cache", "nocache"])
def test_processes_give_the_bytes_threads_give(clips, cache_env, monkeypatch, tier, cache):
    """Decoded in processes (each writes its files' rows into the entry's file from a ring that
    wraps several times per file), every tier holds the bytes and times the threads decode, the
    cache entry is the same, and cache=False leaves no file behind."""
    paths = clips["av1"]
    ref = ingest_videos(paths, tier="host", cache=False)
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setattr(rc_ingest, "STAGE_BYTES", 6 * ref.spec.frame_bytes)  # 12, 17, 10 frames: 3 + 3 + ...
    res = ingest_videos(paths, tier=tier, cache=cache, workers=2, show_progress=False)
    assert not res.from_cache and res.spec == ref.spec
    assert torch.equal(res.data, ref.data)
    assert all(np.array_equal(a, b) for a, b in zip(res.times, ref.times))
    if cache:
        assert res.cache_path and mapped_file(res.data.data_ptr()) in (None, res.cache_path)
        monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", False)
        no_decoding(monkeypatch)
        hit = ingest_videos(paths, tier="host")
        assert hit.from_cache and torch.equal(hit.data, ref.data)
    else:
        assert res.cache_path is None and entry_files(cache_env) == []


def test_a_failing_file_in_a_process_names_it_and_leaves_no_entry(clips, cache_env, monkeypatch):
    """A decode process's error reaches the caller as it was raised (the file named), the other
    processes stop, and no entry or temporary file is left."""
    real_decode = rc_decode.DECODERS["pyav"]

    def failing(job, *a, **k):  # the decode processes are forks: they run this too
        if job.path.endswith("_1.mp4"):
            raise ReaderError(f"{job.path}: injected failure")
        return real_decode(job, *a, **k)

    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setitem(rc_decode.DECODERS, "pyav", failing)
    for tier in ("host", "disk"):
        with pytest.raises(ReaderError, match="_1.mp4: injected"):
            ingest_videos(clips["h264"], tier=tier, workers=2)
    assert [n for n in entry_files(cache_env) if not n.endswith(".lock")] == []


def test_processes_count_frames_for_the_progress_bar(clips, monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    bars = []

    class Bar(tqdm.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            bars.append(self)

    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setattr(rc_ingest, "progress_bar", lambda total, desc, enable: Bar(total=total, disable=False))
    res = ingest_videos(clips["av1"], tier="disk", cache=False, workers=2)
    assert len(bars) == 1 and bars[0].n == bars[0].total == res.offsets[-1]


def test_processes_and_a_full_disk(clips, cache_env, monkeypatch):
    """No room for the file at the start: the threads decode instead, with one warning (theirs).
    The disk filling up while the processes write: CacheError naming the way out, no entry left."""
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = ingest_videos(clips["av1"], tier="host", workers=2)
    assert len(seen) == 1 and seen[0].category is rc_cache.CacheWarning and "No space left" in str(seen[0].message)
    np.testing.assert_array_equal(rows(res, 1), pyav_yuv(clips["av1"][1])[0])
    monkeypatch.undo()
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)

    def write_fails(fd, rows, offset):  # the decode processes are forks: they run this
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rc_processes, "pwrite", write_fails)
    for tier in ("host", "disk"):
        with pytest.raises(rc_cache.CacheError, match=r"in processes .*No space left.*ROBOCACHE_DECODE_PROCESSES=0"):
            ingest_videos(clips["av1"], tier=tier, workers=2)
    assert [n for n in entry_files(cache_env) if not n.endswith(".lock")] == []


def test_a_refused_buffer_is_the_plans_memory_error(clips, monkeypatch):
    """The host buffer or the disk tier's map refused by the system (ENOMEM: memory taken since the plan,
    a limit it could not see): a MemoryError with the sizes and the ways out, not a bare OSError."""
    def refuse(*a, **k):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(rc_buffers, "POPULATE_MIN_BYTES", 0)
    monkeypatch.setattr(rc_buffers.mmap, "mmap", refuse)
    monkeypatch.setattr(rc_buffers.torch_or_error(), "cuda", type("NoCuda", (), {"is_available": staticmethod(lambda: False)}))
    with pytest.raises(MemoryError, match=r"could not allocate the decoded frames in host memory: .* host tier "
                                          r".*Ways out: frames='disk'"):
        ingest_videos(clips["h264"], tier="host", cache=False)
    monkeypatch.setattr(rc_buffers.np, "memmap", refuse)
    with pytest.raises(MemoryError, match=r"could not allocate a map of the decoded frames' file"):
        ingest_videos(clips["h264"], tier="disk", cache=False)
