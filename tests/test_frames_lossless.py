"""The lossless frame tier (frames="lossless"): batches bit-identical to the host tier's, its cache, the plan.

CPU (CI): loader batches and direct indexing from a lossless store equal the host tier's on generated
frames (every window option: layouts, resize, zero padding, subsets) and on the real CR5 sets (LeRobot
v2.1 AV1 and v3.0); the second load reads the cache; a damaged entry is rebuilt; auto prefers lossless over
JPEG where it fits and keeps every other choice. GPU (`cuda`): batches equal the CPU host tier's, from
pinned memory (graph replays, no host ids) and from a store mapped from its cache file (host staging); an
epoch without a host sync.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pairs import paired
from conftest import same_batches
from reference import lossless_size_bound
import robocache
from robocache import DataLoader, Window
from robocache.frames import cache as fcache
from robocache.frames import plan as fplan
from robocache.frames.compress import ingest_compressed
from robocache.frames.store import FrameStore, yuv420_bytes

pytestmark = pytest.mark.usefixtures("cache_env")

H, W = 21, 38   # odd: chroma planes of ceil(H/2) x ceil(W/2)
WINDOWS = {
    "hwc": Window("cam", offsets=[-0.1, 0.0, 0.05]),
    "chw": Window("cam", offsets=[0.0, 0.15], layout="BTCHW"),
    "small": Window("cam", offsets=[0.0], layout="BTCHW", resize=(9, 13)),
    "big": Window("cam", offsets=[0.0], resize=(30, 50)),
    "zero": Window("cam", offsets=[-0.4, 0.0, 0.4], pad="zero", mode="previous"),
    "state": Window("state", offsets=[0.0]),
}
KEY = "observation.images.top"


def camera_rows(rng, n, h=H, w=W):
    """I420 rows of moving smooth fields with edges and sensor noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    ch, cw = (h + 1) // 2, (w + 1) // 2
    out = np.empty((n, yuv420_bytes(h, w)), np.uint8)
    for i in range(n):
        Y = 120 + 80 * np.sin(x / 4 + i) * np.cos(y / 6) + 30 * (x > w / 2) + rng.normal(0, 3, (h, w))
        C = [128 + 50 * np.cos(np.arange(cw)[None] / 3 + i + k) + rng.normal(0, 2, (ch, cw)) for k in (0, 2)]
        out[i] = np.concatenate([np.clip(p, 0, 255).astype(np.uint8).ravel() for p in [Y] + C])
    return out


def _datasets(rng, device="cpu", E=5):
    """(lossless-tier dataset on `device`, the CPU host-tier dataset of the same frames)."""
    eps, ctimes = [], []
    for e in range(E):
        n = int(rng.integers(3, 9))
        eps.append({"state": (rng.normal(size=(n * 2, 3)).astype(np.float32), np.linspace(e, e + 1, n * 2))})
        ctimes.append(np.sort(rng.uniform(e, e + 1, int(rng.integers(2, 7)))))
    rows = camera_rows(rng, sum(len(t) for t in ctimes))
    ll = FrameStore.create(rows, format="yuv420", height=H, width=W, tier="lossless", device=device, matrix="bt709")
    ref = FrameStore.create(rows, format="yuv420", height=H, width=W, tier="cpu", device="cpu", matrix="bt709")
    return (robocache.Dataset.from_episodes(eps, device=device, frames={"cam": (ll, ctimes)}),
            robocache.Dataset.from_episodes(eps, device="cpu", frames={"cam": (ref, ctimes)}))


def _batches(ds, windows=WINDOWS, batch=4, **kw):
    return [{k: v.cpu() for k, v in b.items()} for b in DataLoader(ds, batch, shuffle=True, seed=3, windows=windows,
                                                                    **kw)]


def test_lossless_batches_equal_the_host_tier(rng):
    ll, ref = _datasets(rng)
    f = ll.streams["cam"].frames
    assert f.tier == "lossless" and f.format == "lossless" and not f.host_staged
    assert f.nbytes < ref.streams["cam"].frames.nbytes
    assert "lossless" in repr(ll)
    same_batches(_batches(ref), _batches(ll))
    sub_l, sub_r = ll.subset([4, 0, 2]), ref.subset([4, 0, 2])
    assert sub_l.streams["cam"].frames.data.nbytes < f.data.nbytes     # its own bytes
    same_batches(_batches(sub_r), _batches(sub_l))
    ids = torch.tensor([[2, -1], [0, len(f) - 1]])
    assert torch.equal(f.gather(ids, layout="BTCHW", size=(7, 11)), ref.streams["cam"].frames.gather(ids, layout="BTCHW",
                                                                                                     size=(7, 11)))
    assert torch.equal(f[3], ref.streams["cam"].frames[3])


def _real(DATA, name):
    root = DATA / name
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    return root


@pytest.mark.parametrize("name,episodes", [("cr5_flashdrive_av1", [0, 5]), ("cr5_v30", [1, 2])])
def test_real_sets_lossless_equal_host(DATA, name, episodes):
    """The real arm's AV1 footage (LeRobot v2.1 and v3.0): the lossless tier's batches are the host
    tier's, bit for bit; the second load reads the cache entry instead of coding."""
    pytest.importorskip("av")
    root = _real(DATA, name)
    host = robocache.Dataset.from_lerobot(root, episodes=episodes, device="cpu", frames="host")
    ll = robocache.Dataset.from_lerobot(root, episodes=episodes, device="cpu", frames="lossless")
    f, h = ll.streams[KEY].frames, host.streams[KEY].frames
    assert f.tier == "lossless" and len(f) == len(h)
    ids = torch.arange(0, len(f), 5)
    assert torch.equal(f[ids], h[ids])
    # each sampled frame within what its MED residuals' entropy allows (reference.lossless_size_bound),
    # not a ratio measured on this footage (5.9x over I420 at 480x640: benchmarks/bench_lossless.py)
    sizes = np.diff(np.asarray(f.offsets, np.int64))[ids.numpy()]
    bounds = np.array([lossless_size_bound(r, f.height, f.width) for r in np.asarray(h.data)[ids.numpy()]])
    assert (sizes <= bounds).all(), (sizes, bounds.round())
    assert f.nbytes < h.nbytes
    windows = {"img": Window(KEY, offsets=[-0.1, 0.0], layout="BTCHW", resize=(96, 128)),
               "raw": Window(KEY, offsets=[0.0])}
    a = _batches(host, windows, batch=16)[:3]
    assert all(torch.equal(x[k], y[k]) for x, y in paired(a, _batches(ll, windows, batch=16)[:3]) for k in x)
    again = robocache.Dataset.from_lerobot(root, episodes=episodes, device="cpu", frames="lossless")
    g = again.streams[KEY].frames
    assert np.array_equal(g.data, f.data) and np.array_equal(g.offsets, f.offsets)
    assert torch.equal(g[ids], h[ids])


# ----------------------------------------------------------------------------
# cache


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    av = pytest.importorskip("av")
    root = tmp_path_factory.mktemp("llclips")
    paths, rng = [], np.random.default_rng(7)
    for i, n in enumerate((6, 9)):
        p = str(root / f"c{i}.mp4")
        with av.open(p, "w") as c:
            s = c.add_stream("libx264", rate=10)
            s.width, s.height, s.pix_fmt = 40, 24, "yuv420p"
            for r in camera_rows(rng, n, 24, 40):
                for pk in s.encode(av.VideoFrame.from_ndarray(r.reshape(36, 40), format="yuv420p")):
                    c.mux(pk)
            for pk in s.encode():
                c.mux(pk)
        paths.append(p)
    return paths


def test_cache_hit_mapped_and_damaged(clips, cache_env):
    from robocache.frames.ingest import ingest_videos
    first = ingest_compressed(clips, codec="lossless")
    assert not first.from_cache and first.codec == "lossless" and first.qscale is None and len(first.offsets) == 16
    assert "lossless" in repr(first)
    decoded = ingest_videos(clips, tier="host", cache=False).data.numpy()
    store = FrameStore(first.data, format="lossless", height=24, width=40, channels=3, tier="lossless", device="cpu",
                       offsets=first.offsets)
    ref = FrameStore(torch.from_numpy(decoded), format="yuv420", height=24, width=40, channels=3, tier="cpu",
                     device="cpu")
    assert torch.equal(store[torch.arange(15)], ref[torch.arange(15)])       # the decoder's frames, exactly
    hit = ingest_compressed(clips, codec="lossless")
    assert hit.from_cache and np.array_equal(hit.data, first.data) and np.array_equal(hit.offsets, first.offsets)
    jpeg = ingest_compressed(clips)                       # the JPEG entry of the same files is another one
    assert not jpeg.from_cache and jpeg.codec == "jpeg"
    mapped = ingest_compressed(clips, codec="lossless", host_budget=16)
    assert mapped.mapped and isinstance(mapped.data, np.memmap)
    m = FrameStore(mapped.data, format="lossless", height=24, width=40, channels=3, tier="lossless", device="cpu",
                   offsets=mapped.offsets)
    sub = m.subset(np.array([14, 3]))                    # a row map over the file
    assert isinstance(sub.data, np.memmap) and torch.equal(sub[0], ref[14])
    with open(first.cache_path, "r+b") as f:             # a sampled frame damaged: rebuilt
        f.seek(int(first.offsets[0]) + 60)
        b = f.read(1)
        f.seek(int(first.offsets[0]) + 60)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.warns(fcache.CacheWarning, match="checksum"):
        again = ingest_compressed(clips, codec="lossless")
    assert not again.from_cache and np.array_equal(again.data, first.data)
    with pytest.raises(ValueError, match="codec"):
        ingest_compressed(clips, codec="png")


# ----------------------------------------------------------------------------
# the plan


def _need(frames=1000, h=480, w=640):
    return fplan.Need("cam", frames, yuv420_bytes(h, w), h, w)


def test_plan_auto_prefers_lossless_over_jpeg():
    n = _need()
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    gb = 1 << 30
    assert n.compressed_bytes < n.lossless_bytes < n.nbytes
    # decoded tiers first, as before
    assert fplan.plan([n], "auto", fplan.Budgets(gb, gb, gb), device=cuda) == {"cam": "device"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, gb, gb), device=cuda) == {"cam": "host"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, 0, gb), device=cuda) == {"cam": "disk"}
    # no decoded tier fits: lossless where its estimate fits host RAM or disk, else JPEG
    fits = n.lossless_bytes + 1
    assert fplan.plan([n], "auto", fplan.Budgets(0, fits, 0), device=cuda) == {"cam": "lossless"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, 0, fits), device=cuda) == {"cam": "lossless"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, fits - 2, 0), device=cuda) == {"cam": "compressed"}
    assert fplan.plan([n], "auto", fplan.Budgets(0, fits, 0), device=cpu) == {"cam": "lossless"}
    # asked for by name, whatever fits
    assert fplan.plan([n], "lossless", fplan.Budgets(gb, gb, gb), device=cuda) == {"cam": "lossless"}
    assert fplan.plan([n], {"cam": "lossless"}, fplan.Budgets(gb, gb, gb), device=cpu) == {"cam": "lossless"}
    with pytest.raises(MemoryError, match="frames='lossless'"):
        fplan.plan([n], "auto", fplan.Budgets(0, 0, 0), device=cuda)


def test_lossless_store_rejects_other_formats(rng):
    with pytest.raises(ValueError, match="tier 'lossless' codes yuv420"):
        FrameStore.create(np.zeros((2, 4, 4, 3), np.uint8), format="rgb", height=4, width=4, tier="lossless",
                          device="cpu")
    with pytest.raises(ValueError, match="take offsets"):
        FrameStore(np.zeros(16, np.uint8), format="lossless", height=4, width=4, channels=3, tier="lossless",
                   device="cpu")


# ----------------------------------------------------------------------------
# GPU


@pytest.mark.cuda
def test_gpu_lossless_batches_equal_the_host_tier(rng):
    gpu, ref = _datasets(rng, "cuda")
    f = gpu.streams["cam"].frames
    assert f.gpu is not None and f.gpu.data.is_pinned() and not f.host_staged
    want = _batches(ref)
    same_batches(want, _batches(gpu))
    same_batches(want, _batches(gpu, cuda_graph=False))
    sub_g, sub_r = gpu.subset([3, 1]), ref.subset([3, 1])
    same_batches(_batches(sub_r), _batches(sub_g))


@pytest.mark.cuda
def test_gpu_lossless_mapped_store_stages_on_the_host(rng, clips):
    ingest_compressed(clips, codec="lossless")      # coded into the cache (only a cache entry is mapped)
    got = ingest_compressed(clips, codec="lossless", host_budget=16)
    assert got.mapped
    kw = dict(format="lossless", height=24, width=40, channels=3, tier="lossless", offsets=got.offsets)
    cpu = FrameStore(got.data, device="cpu", **kw)
    gpu = FrameStore(got.data, device="cuda", **kw)
    assert gpu.gpu is None and gpu.host_staged
    ids = torch.tensor([14, -1, 0, 7, 7])
    for kw in ({}, {"layout": "BTCHW", "size": (12, 20)}):
        want = cpu.gather(ids, **kw)
        assert torch.equal(gpu.gather(ids.cuda(), host_ids=ids.numpy(), **kw).cpu(), want)
        assert torch.equal(gpu.gather(ids.cuda(), **kw).cpu(), want)


@pytest.mark.cuda
def test_gpu_lossless_epoch_without_sync(rng):
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
def test_gpu_real_set_lossless_equals_host(DATA):
    pytest.importorskip("av")
    root = _real(DATA, "cr5_flashdrive_av1")
    host = robocache.Dataset.from_lerobot(root, episodes=[0], device="cpu", frames="host")
    ll = robocache.Dataset.from_lerobot(root, episodes=[0], device="cuda", frames="lossless")
    windows = {"img": Window(KEY, offsets=[-0.1, 0.0], layout="BTCHW", resize=(180, 320))}
    same_batches(_batches(host, windows, batch=8), _batches(ll, windows, batch=8))
