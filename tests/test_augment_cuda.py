"""Augmentation on CUDA: the augmented gather equals the CPU kernel bit for bit (device and pinned host
storage, every output dtype), the parameter rows drawn on the GPU equal the CPU's, a loader epoch runs
with no host sync (torch.cuda.set_sync_debug_mode("error")) and replays a captured CUDA graph whose
batches equal the eager ones, and every tier (pinned host, disk, lossless; JPEG within its quality) gives
the device tier's augmented batches.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache.augment as A  # noqa: E402
from robocache import DataLoader, Window, _C  # noqa: E402
from pairs import paired  # noqa: E402
from test_augment import H, PIPELINES, W, _dataset, _windows, frames  # noqa: E402

pytestmark = pytest.mark.cuda


def _rows(aug, n, device, seed=5):
    key = torch.tensor([A.epoch_key(seed, 1)], device=device)
    return aug.params(key, torch.arange(n, device=device),
                      torch.linspace(0, 3, n, dtype=torch.float64, device=device), 2, H, W)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_gpu_draws_equal_cpu_draws(name):
    aug = PIPELINES[name]()
    cpu, gpu = _rows(aug, 4096, "cpu"), _rows(aug, 4096, "cuda")
    assert torch.equal(cpu, gpu.cpu()), f"{name}: {(cpu != gpu.cpu()).any(1).sum()} rows differ"


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("fmt", ["rgb", "yuv420"])
@pytest.mark.parametrize("where", ["device", "pinned"])
def test_cuda_equals_cpu_bit_for_bit(rng, name, fmt, where):
    aug = PIPELINES[name]()
    lay = aug.layout(H, W)
    n, T = 8, 2
    st, _ = frames(rng, 5, fmt)
    rows = _rows(aug, n, "cpu", seed=int(rng.integers(1 << 30)))
    ids = torch.from_numpy(rng.integers(-1, 5, n * T)).to(torch.int64)
    norm = dict(mean=lay.normalize.mean, std=lay.normalize.std) if lay.normalize else {}
    for dtype in (torch.float32, torch.bfloat16, torch.uint8) if not norm else (torch.float32, torch.float16):
        outs = []
        for dev in ("cpu", "cuda"):
            storage = torch.from_numpy(st)
            storage = storage.cuda() if dev == "cuda" and where == "device" else (
                storage.pin_memory() if dev == "cuda" else storage)
            out = torch.full((n * T, *lay.out, 3), 77, dtype=dtype, device=dev)      # poisoned
            M, (h, w) = n * T, lay.out
            scratch = torch.full((M * (h + 1) + (3 * M * h * w + 1) // 2,), float("nan"), dtype=torch.float64,
                                 device=dev)
            _C.gather_frames(storage, ids.to(dev), out, format=fmt, height=H, width=W, channels=3,
                             augment=rows.to(dev), augment_group=T, scratch=scratch, antialias=lay.antialias, **norm)
            outs.append(out.cpu())
        torch.cuda.synchronize()
        a, b = outs
        assert torch.equal(a.view(torch.uint8) if dtype != torch.uint8 else a,
                           b.view(torch.uint8) if dtype != torch.uint8 else b), \
            f"{name} {fmt} {where} {dtype}: max diff {(a.float() - b.float()).abs().max()}"


def test_loader_epoch_without_host_sync_and_graph_replay(rng, tmp_path):
    ds = _dataset(rng, "yuv420", "cpu", tmp_path, cams=("a", "b")).to("cuda")
    aug = PIPELINES["rrc_flip_rotate"]()
    graphed = DataLoader(ds, 6, windows=_windows(aug, ("a", "b")), seed=3, drop_last=True)
    eager = DataLoader(ds, 6, windows=_windows(aug, ("a", "b")), seed=3, drop_last=True, cuda_graph=False)
    next(iter(graphed))                                # warm: kernels loaded, graph captured on this epoch
    graphed.set_epoch(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [{k: v.clone() for k, v in b.items()} for b in graphed]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert graphed.cuda_graph
    want = [{k: v.clone() for k, v in b.items()} for b in eager]
    assert len(got) == len(want) == len(graphed) > 2
    for x, y in paired(got, want):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_normalized_float_batch_on_gpu_matches_cpu_loader(rng, tmp_path):
    seed = int(rng.integers(1 << 30))
    cpu = _dataset(np.random.default_rng(seed), "rgb", "cpu", tmp_path)
    gpu = _dataset(np.random.default_rng(seed), "rgb", "cpu", tmp_path).to("cuda")
    aug = PIPELINES["crop_resize_crop_affine_flip"]()
    w = lambda: {"cam": Window("cam", layout="BTCHW", augment=aug), "state": Window("state")}  # noqa: E731
    a = [b["cam"] for b in DataLoader(cpu, 9, windows=w(), seed=8)]
    b = [b["cam"].cpu() for b in DataLoader(gpu, 9, windows=w(), seed=8)]
    assert len(a) == len(b) > 0
    for x, y in paired(a, b):
        assert torch.equal(x, y)


def _smooth_yuv(n, seed):
    """I420 rows of smooth frames (JPEG codes them well), with a little noise."""
    from robocache.video.layout import yuv420_bytes
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    rows = np.empty((n, yuv420_bytes(H, W)), np.uint8)
    ch, cw = (H + 1) // 2, (W + 1) // 2
    for i in range(n):
        y = 60 + 120 * (0.5 + 0.5 * np.sin(xx / (5 + i % 7) + yy / 9.0)) + g.integers(0, 6, (H, W))
        u = 128 + 40 * np.sin(np.arange(ch * cw).reshape(ch, cw) / (11.0 + i % 3))
        v = 128 + 40 * np.cos(np.arange(ch * cw).reshape(ch, cw) / (13.0 + i % 5))
        rows[i] = np.concatenate([np.clip(a, 0, 255).astype(np.uint8).ravel() for a in (y, u, v)])
    return rows


@pytest.mark.parametrize("tier", ["host", "disk", "lossless", "compressed"])
def test_every_tier_gives_the_device_tiers_augmented_batches(rng, tmp_path, tier):
    import robocache
    from robocache.frames.store import FrameStore
    if tier == "compressed":
        pytest.importorskip("av")                 # the tier's JPEG encoder
    rows = _smooth_yuv(36, int(rng.integers(1 << 30)))
    times = [e + np.arange(12) / 10.0 for e in range(3)]

    def ds(t):
        store = FrameStore.create(rows, format="yuv420", height=H, width=W, channels=3, tier=t, device="cuda",
                                  path=tmp_path / f"{t}.npy" if t == "disk" else None)
        return robocache.Dataset.from_episodes(
            [{"state": (np.zeros((12, 2), np.float32), times[e])} for e in range(3)], device="cuda",
            frames={"cam": (store, times)})

    aug = PIPELINES["rrc_flip_rotate"]()
    a = [b["cam"].cpu() for b in DataLoader(ds("device"), 6, windows=_windows(aug), seed=5)]
    b = [b["cam"].cpu() for b in DataLoader(ds(tier), 6, windows=_windows(aug), seed=5)]
    assert len(a) == len(b) > 0
    for x, y in paired(a, b):
        assert x.shape == y.shape
        if tier == "compressed":                  # lossy: within the tier's stated quality
            mse = float(((x - y) ** 2).mean())
            assert 10 * np.log10(1.0 / max(mse, 1e-12)) > 35, mse
        else:
            assert torch.equal(x, y)
