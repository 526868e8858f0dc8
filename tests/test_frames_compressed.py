"""The compressed frame tier: JPEG coding of I420 planes, its cache, the plan's last resort, batches.

CPU (CI): the encoder keeps the planes' layout and is deterministic; a batch from the compressed tier
equals, bit for bit, the lossless-tier batch of the same frames decoded by FFmpeg's MJPEG decoder (the
tier's reference); quality (PSNR) on the real AV1 arm set; cache hit, stale, corrupted; the plan;
the header checks of decode_jpeg. GPU (`cuda`): nvJPEG's planes (every backend) against FFmpeg's within the stated
tolerance, loader batches against the CPU tier's, deterministic epochs, an epoch without a host sync.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from pairs import paired
from conftest import mapped_file, same_batches
from noise_clips import write_i420_h264
import robocache
from robocache import DataLoader, Window
from robocache.frames import cache as fcache
from robocache.frames import plan as fplan
from robocache.frames.compress import ingest_compressed
from robocache.frames.jpeg import Encoder, decode_rows_cpu, encode_all, pack
from robocache.frames.jpeg_check import seal
from robocache.frames.pinned import file_pages
from robocache.frames.store import FrameStore, yuv420_bytes

av = pytest.importorskip("av")
pytestmark = pytest.mark.usefixtures("cache_env")

H, W = 24, 40
REAL = "cr5_flashdrive_av1"
# nvJPEG's IDCT is not FFmpeg's: the planes they decode from the same bytes differ by a level here
# and there (H100, nvJPEG 13.0 hardware backend: max 1, mean 0.024); the RGB batch inherits it
# through the conversion
PLANE_ATOL, PLANE_MEAN = 1, 0.1

WINDOWS = {
    "hwc": Window("cam", offsets=[-0.1, 0.0, 0.05]),
    "chw": Window("cam", offsets=[0.0, 0.15], layout="BTCHW"),
    "small": Window("cam", offsets=[0.0], layout="BTCHW", resize=(9, 13)),
    "zero": Window("cam", offsets=[-0.4, 0.0, 0.4], pad="zero", mode="previous"),
    "state": Window("state", offsets=[0.0]),
}


def natural_rows(rng, n, h=H, w=W):
    """I420 rows of smooth moving fields plus noise: they code like camera footage."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    ch, cw = (h + 1) // 2, (w + 1) // 2
    out = np.empty((n, yuv420_bytes(h, w)), np.uint8)
    for i in range(n):
        ph = rng.uniform(0, 6)
        Y = 128 + 90 * np.sin(x / 5 + ph) * np.cos(y / 7 - i * 0.3) + rng.normal(0, 4, (h, w))
        U = 128 + 60 * np.cos(np.arange(cw)[None] / 4 + ph) + rng.normal(0, 3, (ch, cw))
        V = 128 + 60 * np.sin(np.arange(ch)[:, None] / 3 - ph) + rng.normal(0, 3, (ch, cw))
        out[i] = np.concatenate([np.clip(p, 16, 240).astype(np.uint8).ravel() for p in (Y, U, V)])
    return out


def _episodes(rng, E=5):
    eps, ctimes = [], []
    for e in range(E):
        n = int(rng.integers(3, 9))
        eps.append({"state": (rng.normal(size=(n * 2, 3)).astype(np.float32), np.linspace(e, e + 1, n * 2))})
        ctimes.append(np.sort(rng.uniform(e, e + 1, int(rng.integers(2, 7)))))
    return eps, ctimes


def _batches(ds, **kw):
    return [{k: v.cpu() for k, v in b.items()} for b in DataLoader(ds, 4, shuffle=True, seed=3, windows=WINDOWS, **kw)]


def _decoded_reference(store: FrameStore) -> np.ndarray:
    """Every frame of a compressed store decoded by FFmpeg's MJPEG decoder: I420 rows."""
    n = len(store.offsets) - 1
    out = np.empty((n, store.yuv_bytes), np.uint8)
    decode_rows_cpu(store.data, store.offsets, np.arange(n), out, store.height, store.width)
    return out


def _psnr(a, b) -> float:
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


@pytest.fixture(scope="module")
def real(DATA):
    root = DATA / REAL / "videos" / "chunk-000" / "observation.images.top"
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    return [str(root / "episode_000007.mp4"), str(root / "episode_000008.mp4")]


# ----------------------------------------------------------------------------
# the codec


@pytest.mark.parametrize("h,w", [(H, W), (17, 31), (480, 640)])
def test_encode_keeps_planes_and_is_deterministic(rng, h, w):
    rows = natural_rows(rng, 6, h, w)
    a = encode_all(rows, h, w, 2)
    assert encode_all(rows, h, w, 2) == a                      # same bytes every run
    assert seal(Encoder(h, w, 2).encode(rows[3])) == a[3]      # a fresh encoder too, then the CRC segment
    data, offsets = pack(a)
    assert offsets[0] == 0 and offsets[-1] == data.nbytes and (np.diff(offsets) > 0).all()
    out = np.full((6, yuv420_bytes(h, w)), 0xAB, np.uint8)     # poisoned
    decode_rows_cpu(data, offsets, np.arange(6), out, h, w)
    # each plane comes back in its place (a swapped or resampled chroma plane would cost > 10 dB)
    y_end = h * w
    assert _psnr(out[:, :y_end], rows[:, :y_end]) > 38
    assert _psnr(out[:, y_end:], rows[:, y_end:]) > 38
    # coarser quantizers give fewer bytes and lower quality
    coarse = pack(encode_all(rows, h, w, 12))
    assert coarse[0].nbytes < data.nbytes


def test_quality_on_the_real_arm_video(real):
    """PSNR per setting on real AV1 footage (the figures docs/frame-storage.md quotes)."""
    from robocache.frames.ingest import ingest_videos
    got = ingest_videos(real[:1], tier="host", cache=False)
    rows = got.data.numpy()[::8]
    h, w = got.spec.height, got.spec.width
    prev = np.inf
    for q in (2, 4, 8):
        data, offsets = pack(encode_all(rows, h, w, q))
        out = np.empty_like(rows)
        decode_rows_cpu(data, offsets, np.arange(len(rows)), out, h, w)
        psnr = _psnr(out, rows)
        assert psnr < prev
        prev = psnr
        if q == 2:
            assert psnr > 45 and data.nbytes * 15 < rows.nbytes   # >= 15x smaller than I420 (30x RGB)
    assert prev > 38


def test_qscale_is_checked():
    for bad in (0, 32, 2.0, True, "2"):
        with pytest.raises(ValueError, match="jpeg_qscale"):
            encode_all(np.zeros((1, yuv420_bytes(H, W)), np.uint8), H, W, bad)


# ----------------------------------------------------------------------------
# batches


def _datasets(rng, device="cpu"):
    """(compressed-tier dataset on `device`, the CPU lossless-tier dataset of its FFmpeg-decoded frames)."""
    eps, ctimes = _episodes(rng)
    rows = natural_rows(rng, sum(len(t) for t in ctimes))
    comp = FrameStore.create(rows, format="yuv420", height=H, width=W, tier="compressed", device=device,
                             matrix="bt709", qscale=3)
    ref = FrameStore.create(_decoded_reference(comp), format="yuv420", height=H, width=W, tier="cpu", device="cpu",
                            matrix="bt709")
    return (robocache.Dataset.from_episodes(eps, device=device, frames={"cam": (comp, ctimes)}),
            robocache.Dataset.from_episodes(eps, device="cpu", frames={"cam": (ref, ctimes)}))


def test_compressed_batches_equal_the_decoded_reference(rng):
    comp, ref = _datasets(rng)
    assert comp.streams["cam"].frames.tier == "compressed"
    assert "compressed, jpeg" in repr(comp)
    same_batches(_batches(ref), _batches(comp))
    same_batches(_batches(comp), _batches(comp))                      # deterministic across epochs/runs
    sub_c, sub_r = comp.subset([4, 0, 2]), ref.subset([4, 0, 2])
    assert sub_c.streams["cam"].frames.data.nbytes < comp.streams["cam"].frames.data.nbytes   # its own bytes
    same_batches(_batches(sub_r), _batches(sub_c))
    # direct indexing decodes too
    assert torch.equal(comp.streams["cam"].frames[2], ref.streams["cam"].frames[2])


def test_real_set_compressed_against_lossless(DATA):
    root = DATA / REAL
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    lossless = robocache.Dataset.from_lerobot(root, episodes=[7], device="cpu", frames="host")
    comp = robocache.Dataset.from_lerobot(root, episodes=[7], device="cpu", frames="compressed")
    key = "observation.images.top"
    f = comp.streams[key].frames
    assert f.format == "jpeg" and f.qscale == 2 and f.nbytes * 15 < lossless.streams[key].frames.nbytes
    ids = torch.arange(0, len(f), 7)
    a, b = lossless.streams[key].frames[ids], f[ids]
    assert _psnr(a.numpy(), b.numpy()) > 40
    # the second load reads the cache (no coding)
    again = robocache.Dataset.from_lerobot(root, episodes=[7], device="cpu", frames="compressed")
    assert np.array_equal(again.streams[key].frames.data, f.data)


# ----------------------------------------------------------------------------
# cache


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("jclips")
    paths = []
    rng = np.random.default_rng(5)
    for i, n in enumerate((7, 11)):
        paths.append(write_i420_h264(root / f"c{i}.mp4", natural_rows(rng, n), H, W))
    return paths


def test_cache_hit_stale_and_corrupt(clips, cache_env, monkeypatch):
    first = ingest_compressed(clips)
    assert not first.from_cache and first.cache_path and len(first.offsets) == 19
    hit = ingest_compressed(clips)
    assert hit.from_cache and np.array_equal(hit.data, first.data) and np.array_equal(hit.offsets, first.offsets)
    assert [len(t) for t in hit.times] == [7, 11]
    if os.path.exists("/proc/self/maps") and file_pages(hit.cache_path, (1,)) is not None:
        backing = mapped_file(hit.data.ctypes.data)            # in RAM as the cache file's own pages
        assert backing is not None and os.path.samefile(backing, hit.cache_path)
    mapped = ingest_compressed(clips, host_budget=16)
    assert mapped.mapped and isinstance(mapped.data, np.memmap) and np.array_equal(mapped.data, first.data)
    # another quality is another entry
    assert not ingest_compressed(clips, qscale=5).from_cache
    # a sampled frame damaged: detected, warned about, rebuilt
    data_path = first.cache_path
    with open(data_path, "r+b") as f:
        f.seek(int(first.offsets[0]) + 200)
        b = f.read(1)
        f.seek(int(first.offsets[0]) + 200)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.warns(fcache.CacheWarning, match="checksum"):
        again = ingest_compressed(clips)
    assert not again.from_cache and np.array_equal(again.data, first.data)
    # a damaged offsets file
    off = [p for p in os.listdir(cache_env / "frames") if p.endswith(".offsets.npy")]
    for p in off:
        np.save(cache_env / "frames" / p, np.arange(5, dtype=np.int64))
    with pytest.warns(fcache.CacheWarning, match="offsets"):
        assert not ingest_compressed(clips).from_cache
    # a source that changed: stale
    st = os.stat(clips[0])
    os.utime(clips[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.warns(fcache.CacheWarning, match="stale"):
        assert not ingest_compressed(clips).from_cache
    assert any(e["status"] == "ok" for e in fcache.list_entries())


# ----------------------------------------------------------------------------
# the plan


def _need(frames=1000, h=480, w=640):
    return fplan.Need("cam", frames, yuv420_bytes(h, w), h, w)


def test_plan_compressed_is_the_last_resort():
    n = _need()
    cuda = torch.device("cuda", 0)
    gb = 1 << 30
    assert fplan.plan([n], "auto", fplan.Budgets(gb, gb, gb), device=cuda) == {"cam": "device"}
    # nothing lossless fits: compressed, in host RAM or (too big for it) mapped from disk
    small = n.compressed_bytes + 1
    assert fplan.plan([n], "auto", fplan.Budgets(0, small, 0), device=cuda) == {"cam": "compressed"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, 0, small), device=cuda) == {"cam": "compressed"}
    assert fplan.plan([n], "compressed", fplan.Budgets(gb, gb, gb), device=cuda) == {"cam": "compressed"}
    with pytest.raises(MemoryError, match="frames='compressed'"):
        fplan.plan([n], "auto", fplan.Budgets(0, 0, 0), device=cuda)
    assert n.compressed_bytes < n.nbytes // 10


def test_auto_warns_with_the_quality(DATA, monkeypatch):
    root = DATA / REAL
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    monkeypatch.setattr(fplan, "disk_free", lambda path: 0)     # no room on disk: lossless tiers are full
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        # 20 MB: the JPEG estimate fits, the lossless one (auto's choice before JPEG) does not
        ds = robocache.Dataset.from_lerobot(root, episodes=[8], device="cpu", host_memory=20_000_000,
                                            jpeg_qscale=4)
    assert ds.streams["observation.images.top"].frames.qscale == 4
    msg = [str(w.message) for w in ws if "compressed as JPEG" in str(w.message)]
    assert msg and "jpeg_qscale=4" in msg[0]
    with pytest.raises(ValueError, match="jpeg_qscale"):
        robocache.Dataset.from_lerobot(root, episodes=[8], device="cpu", jpeg_qscale=0)


# ----------------------------------------------------------------------------
# decode_jpeg's checks (before any GPU work: they run on a CPU build too)


def test_decode_jpeg_rejects_bad_input(rng):
    from robocache._C import decode_jpeg
    rows = natural_rows(rng, 2)
    data, offsets = pack(encode_all(rows, H, W, 2))
    out = np.zeros((2, yuv420_bytes(H, W)), np.uint8)
    ids = np.array([0, 1], np.int64)
    with pytest.raises(ValueError, match="another size"):
        decode_jpeg(data, offsets, ids, np.zeros((2, yuv420_bytes(H, W + 2)), np.uint8), height=H, width=W + 2)
    with pytest.raises(ValueError, match="out of range"):
        decode_jpeg(data, offsets, np.array([2], np.int64), out[:1], height=H, width=W)
    bad = data.copy()
    bad[0] = 0
    with pytest.raises(ValueError, match="no SOI"):
        decode_jpeg(bad, offsets, ids, out, height=H, width=W)
    with pytest.raises(ValueError, match="truncated"):
        decode_jpeg(data, np.array([0, 40, offsets[-1]], np.int64), ids, out, height=H, width=W)
    with pytest.raises(ValueError, match="span"):
        decode_jpeg(data, np.array([0, 10**9, 5], np.int64), ids, out, height=H, width=W)
    # 4:4:4 is not what the tier stores
    e = av.CodecContext.create("mjpeg", "w")
    e.width, e.height, e.pix_fmt = W, H, "yuvj444p"
    b444 = bytes(e.encode(av.VideoFrame(W, H, "yuvj444p"))[0])
    with pytest.raises(ValueError, match="4:2:0"):
        decode_jpeg(np.frombuffer(b444, np.uint8), np.array([0, len(b444)], np.int64), ids[:1], out[:1],
                    height=H, width=W)
    with pytest.raises(TypeError, match="offsets"):
        decode_jpeg(data, offsets.astype(np.int32), ids, out, height=H, width=W)
    with pytest.raises(ValueError, match="CUDA"):
        decode_jpeg(data, offsets, ids, out, height=H, width=W)
    with pytest.raises(ValueError, match="backend: expected 'auto', 'hardware'"):
        decode_jpeg(data, offsets, ids, out, height=H, width=W, backend="nvdec")
    with pytest.raises(TypeError, match="backend"):
        decode_jpeg(data, offsets, ids, out, height=H, width=W, backend=3)
    assert (out == 0).all()                                   # nothing written


def test_backend_env_is_checked(monkeypatch):
    from robocache.frames.jpeg import backend_choice
    monkeypatch.delenv("ROBOCACHE_NVJPEG_BACKEND", raising=False)
    assert backend_choice() == "auto"
    monkeypatch.setenv("ROBOCACHE_NVJPEG_BACKEND", " gpu_hybrid ")
    assert backend_choice() == "gpu_hybrid"
    monkeypatch.setenv("ROBOCACHE_NVJPEG_BACKEND", "gpu")
    with pytest.raises(ValueError, match="ROBOCACHE_NVJPEG_BACKEND='gpu': expected one of auto, hardware"):
        backend_choice()


# ----------------------------------------------------------------------------
# GPU


def _backend_or_skip(name):
    """The decoder of ``name`` on GPU 0, or a skip where this GPU or library lacks that backend."""
    from robocache._C import jpeg_backend
    from robocache.frames.jpeg import _library
    try:
        return jpeg_backend(0, _library(), name)
    except Exception as e:                  # noqa: BLE001 - the message says which backend is missing
        if "nvJPEG has no" in str(e):
            pytest.skip(str(e))
        raise


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["auto", "hardware", "gpu_hybrid", "hybrid", "default"])
def test_nvjpeg_planes_match_ffmpeg(rng, name):
    from robocache._C import decode_jpeg
    print("nvJPEG:", _backend_or_skip(name))
    for h, w in ((H, W), (17, 31), (480, 640)):
        rows = natural_rows(rng, 9, h, w)
        data, offsets = pack(encode_all(rows, h, w, 2))
        ids = rng.permutation(9)[:7].astype(np.int64)
        want = np.empty((7, yuv420_bytes(h, w)), np.uint8)
        decode_rows_cpu(data, offsets, ids, want, h, w)
        out = torch.full((7, yuv420_bytes(h, w)), 0xAB, dtype=torch.uint8, device="cuda")
        decode_jpeg(data, offsets, ids, out, height=h, width=w, backend=name)
        d = np.abs(out.cpu().numpy().astype(np.int32) - want)
        print(f"{h}x{w}: max {d.max()}, mean {d.mean():.3f}")
        assert d.max() <= PLANE_ATOL and d.mean() <= PLANE_MEAN


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["auto", "gpu_hybrid"])
def test_gpu_compressed_batches(rng, name, monkeypatch):
    _backend_or_skip(name)
    monkeypatch.setenv("ROBOCACHE_NVJPEG_BACKEND", name)
    gpu, ref = _datasets(rng, "cuda")
    assert gpu.streams["cam"].frames.host_staged
    want = _batches(ref)                    # the lossless tier over FFmpeg's decode of the same bytes
    got = _batches(gpu)
    same_batches(got, _batches(gpu))               # deterministic: the same bytes every epoch
    for x, y in paired(want, got):
        for k in x:
            assert x[k].shape == y[k].shape and x[k].dtype == y[k].dtype, k
            d = (x[k].double() - y[k].double()).abs().max().item()
            # one level in Y and in a chroma plane moves an RGB channel by up to 1.16 + 1.83 levels
            # (BT.709, limited range), plus the rounding: 4 (H100: 4 seen)
            tol = 0 if k == "state" else 5 * PLANE_ATOL * (1 if x[k].dtype == torch.uint8 else 1 / 255 + 1e-3)
            assert d <= tol, (k, d)


@pytest.mark.cuda
def test_compressed_epoch_without_sync(rng):
    ds, _ = _datasets(rng, "cuda")
    loader = DataLoader(ds, 4, shuffle=True, seed=2, windows=WINDOWS)
    first = [b["hwc"].clone() for b in loader]
    torch.cuda.synchronize()
    loader.set_epoch(0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = [b["hwc"].clone() for b in loader]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(again) == len(loader) and all(torch.equal(a, b) for a, b in paired(first, again))


@pytest.mark.cuda
def test_concurrent_decodes(rng):
    """Cameras decode from several threads at once (a decoder per thread on the device)."""
    from concurrent.futures import ThreadPoolExecutor
    from robocache._C import decode_jpeg
    rows = natural_rows(rng, 40)
    data, offsets = pack(encode_all(rows, H, W, 2))
    jobs = [rng.integers(0, 40, 16 + k).astype(np.int64) for k in range(12)]

    def run(ids):
        out = torch.full((len(ids), yuv420_bytes(H, W)), 0xAB, dtype=torch.uint8, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            decode_jpeg(data, offsets, ids, out, height=H, width=W)
        stream.synchronize()
        return out.cpu().numpy()

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(run, jobs))
    for ids, g in zip(jobs, got):
        want = np.empty_like(g)
        decode_rows_cpu(data, offsets, ids, want, H, W)
        assert np.abs(g.astype(np.int32) - want).max() <= PLANE_ATOL


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["auto", "gpu_hybrid"])
def test_decode_waits_for_work_queued_on_its_output(rng, name):
    """nvJPEG's JPEG engines write when the call is made, not after the work queued on its stream
    (torchcodec#1634). Here a kernel queued behind ~50 ms of spinning still has to read the block
    handed to the decode as its output (as the caching allocator hands a freed block on while its
    reads are queued): the read must see the old bytes, and the decode its frames (decode_jpeg waits
    for the stream from the host before the engines write)."""
    if not torch.cuda.is_available() or not robocache.build_info()["cuda"]:
        pytest.skip("needs a GPU and a CUDA build")
    from robocache._C import decode_jpeg
    rows = natural_rows(rng, 32)
    data, offsets = pack(encode_all(rows, H, W, 2))
    ids = np.arange(32, dtype=np.int64)
    want = np.empty((32, yuv420_bytes(H, W)), np.uint8)
    decode_rows_cpu(data, offsets, ids, want, H, W)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            out = torch.full((32, yuv420_bytes(H, W)), 7, dtype=torch.uint8, device="cuda")
            torch.cuda._sleep(100_000_000)                   # ~50 ms of queued work before the read
            total = out.sum(dtype=torch.int64)               # queued: reads the block the decode writes
            decode_jpeg(data, offsets, ids, out, height=H, width=W, backend=name)
            stream.synchronize()
            assert int(total) == 7 * out.numel()
            assert np.abs(out.cpu().numpy().astype(np.int32) - want).max() <= PLANE_ATOL


@pytest.mark.cuda
def test_abandoned_iterators_then_an_epoch(rng):
    """Host-staged batches are made on the loader's thread, one ahead: iterators dropped after a batch
    (their prefetched batch still in flight) leave the next epoch whole and equal."""
    ds, _ = _datasets(rng, "cuda")
    loader = DataLoader(ds, 4, shuffle=True, seed=5, windows=WINDOWS)
    whole = [b["hwc"].clone() for b in loader]
    for _ in range(3):
        loader.set_epoch(0)
        next(iter(loader))
    loader.set_epoch(0)
    again = [b["hwc"].clone() for b in loader]
    assert len(again) == len(whole) == len(loader)
    assert all(torch.equal(a, b) for a, b in paired(whole, again))


# ----------------------------------------------------------------------------
# ranks


@pytest.mark.parametrize("world", [2, 3])
def test_shard_episodes_balances_compressed_bytes(rng, world):
    """Episodes of equal length whose frames code to very different sizes (flat vs noisy): the ranks'
    shards balance the bytes they hold as well as the sample counts (whole episodes go by bytes; when
    that leaves the samples unbalanced, runs of samples cut from the episodes laid out that way)."""
    E, n = 7, 6
    eps, ctimes, rows = [], [], []
    for e in range(E):
        eps.append({"state": (rng.normal(size=(n, 3)).astype(np.float32), np.arange(n) / 10 + e)})
        ctimes.append(np.arange(n) / 10 + e)
        r = natural_rows(rng, n)
        if e % 2:      # flat frames: a fraction of the bytes
            r[:] = 128
        rows.append(r)
    store = FrameStore.create(np.concatenate(rows), format="yuv420", height=H, width=W, tier="compressed",
                              device="cpu", qscale=2)
    ds = robocache.Dataset.from_episodes(eps, device="cpu", frames={"cam": (store, ctimes)})
    per_ep = store.episode_bytes(ds.streams["cam"].offsets_host)
    assert per_ep.sum() == store.offsets[-1] and per_ep[1] * 3 < per_ep[0]
    w = {"cam": Window("cam", offsets=[0.0]), "state": Window("state", offsets=[0.0])}
    loaders = [DataLoader(ds, 2, shuffle=True, windows=w, rank=r, world_size=world, shard_episodes=True, seed=1)
               for r in range(world)]
    held = [ld.dataset.episode_index.tolist() for ld in loaders]
    assert sorted(set(e for h in held for e in h)) == list(range(E))  # complete
    assert sum(len(h) for h in held) <= E + world - 1                  # a cut episode is on two ranks
    got = [int(per_ep[h].sum()) for h in held]
    assert max(got) - min(got) <= 2 * per_ep.max()                     # balanced by bytes, to an episode or two
    assert len({ld.num_samples for ld in loaders}) == 1 and loaders[0].num_samples * world - E * n < world
    for ld, h in zip(loaders, held):
        # a compressed store in RAM is copied down to the rank's own bitstreams
        assert ld.dataset.streams["cam"].frames.data.nbytes == int(per_ep[h].sum())
        assert int(ld.dataset.streams["cam"].frames.episode_bytes(
            ld.dataset.streams["cam"].offsets_host).sum()) == int(per_ep[h].sum())
        assert len({len(x) for x in loaders}) == 1 and sum(1 for _ in ld) == len(ld)


def test_mapped_store_subset_is_a_row_map(clips):
    """A compressed store too big for the host budget maps the cache file: its subsets keep the map
    (a row map, no copy) and decode the same frames as the in-RAM store's."""
    ram = ingest_compressed(clips)
    mapped = ingest_compressed(clips, host_budget=16)
    assert mapped.mapped and not ram.mapped
    mk = lambda got: FrameStore(got.data, format="jpeg", height=H, width=W, channels=3, tier="compressed",  # noqa: E731
                                device="cpu", offsets=got.offsets, qscale=2)
    a, b = mk(ram).subset(np.arange(9, 15)), mk(mapped).subset(np.arange(9, 15))
    assert b.data is mapped.data and b.rows is not None and a.rows is None
    ids = torch.tensor([0, 5, -1, 3])
    assert torch.equal(a.gather(ids), b.gather(ids))
    assert np.array_equal(a.episode_bytes([0, 2, 6]), b.episode_bytes([0, 2, 6]))


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_decode_jpeg_errors_leave_refcounts_flat(rng, fw):
    """decode_jpeg's failing calls (a frame header refused; a CPU out, after every check) import three
    groups of arrays: each is released on the way out."""
    import gc
    import sys
    from robocache._C import decode_jpeg
    data, offsets = pack(encode_all(natural_rows(rng, 3), H, W, 2))
    bad = data.copy()
    bad[offsets[1]] = 0                                     # frame 1 is not a JPEG
    ids = np.array([0, 1, 2], np.int64)
    out = np.zeros((3, yuv420_bytes(H, W)), np.uint8)
    if fw == "torch":
        data, bad, offsets, ids, out = (torch.from_numpy(np.array(a)) for a in (data, bad, offsets, ids, out))
    cases = [(bad, ValueError, "frame 1"), (data, ValueError, "CUDA")]
    gc.collect()
    gc.disable()
    try:
        for storage, exc, match in cases:
            objs = (storage, offsets, ids, out)
            with pytest.raises(exc, match=match):
                decode_jpeg(storage, offsets, ids, out, height=H, width=W)
            before = [sys.getrefcount(o) for o in objs]
            for _ in range(3000):
                try:
                    decode_jpeg(storage, offsets, ids, out, height=H, width=W)
                except exc:
                    pass
            assert [sys.getrefcount(o) for o in objs] == before
    finally:
        gc.enable()
