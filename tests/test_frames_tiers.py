"""Every frame tier gives the same batches, bit for bit, for every image window option; the memory plan.

On the CPU: plain memory ("cpu") against a memory-mapped file ("disk"), RGB and YUV 4:2:0 frames.
Under the cuda marker: device, pinned host and disk tiers against the CPU batches.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from conftest import same_batches
import robocache
from robocache import DataLoader, Window
from robocache.frames import plan as fplan
from robocache.frames.store import FrameStore, yuv420_bytes

H, W = 10, 14

WINDOWS = {
    "hwc": Window("cam", offsets=[-0.1, 0.0, 0.05]),
    "chw": Window("cam", offsets=[0.0, 0.15], layout="BTCHW"),
    "small": Window("cam", offsets=[0.0], layout="BTCHW", resize=(6, 9)),
    "big8": Window("cam", offsets=[0.0, 0.3], resize=(13, 17)),
    "zero": Window("cam", offsets=[-0.4, 0.0, 0.4], pad="zero", mode="previous"),
    "half": Window("cam", indices=[0, 1], rate=10, layout="BTCHW", dtype=torch.float16),
    "state": Window("state", offsets=[0.0]),
}


def _episodes(rng, E=5):
    eps, cams, ctimes = [], [], []
    for e in range(E):
        n = int(rng.integers(3, 9))
        eps.append({"state": (rng.normal(size=(n * 2, 3)).astype(np.float32), np.linspace(e, e + 1, n * 2))})
        cams.append(int(rng.integers(2, 7)))
        ctimes.append(np.sort(rng.uniform(e, e + 1, cams[-1])))
    return eps, ctimes


def _rows(rng, n, fmt):
    if fmt == "rgb":
        return rng.integers(0, 256, (n, H, W, 3), dtype=np.uint8)
    return rng.integers(16, 240, (n, yuv420_bytes(H, W)), dtype=np.uint8)


def _dataset(eps, ctimes, rows, fmt, tier, device, tmp_path):
    store = FrameStore.create(rows, format=fmt, height=H, width=W, channels=3, tier=tier, device=device,
                              path=tmp_path / f"{fmt}-{tier}.npy" if tier == "disk" else None, matrix="bt709")
    return robocache.Dataset.from_episodes(eps, device=device, frames={"cam": (store, ctimes)})


def _batches(ds, **kw):
    return [{k: v.cpu() for k, v in b.items()} for b in DataLoader(ds, 4, shuffle=True, seed=3, windows=WINDOWS, **kw)]


@pytest.mark.parametrize("fmt", ["rgb", "yuv420"])
def test_disk_tier_equals_memory_on_cpu(rng, tmp_path, fmt):
    eps, ctimes = _episodes(rng)
    rows = _rows(rng, sum(len(t) for t in ctimes), fmt)
    mem = _dataset(eps, ctimes, rows, fmt, "cpu", "cpu", tmp_path)
    disk = _dataset(eps, ctimes, rows, fmt, "disk", "cpu", tmp_path)
    assert mem.streams["cam"].frames.tier == "cpu" and disk.streams["cam"].frames.tier == "disk"
    same_batches(_batches(mem), _batches(disk), strides=True)
    # a subset of a disk store maps the same file (a row map, no copy) and still agrees
    sub_m, sub_d = mem.subset([3, 1]), disk.subset([3, 1])
    assert sub_d.streams["cam"].frames.data.data_ptr() == disk.streams["cam"].frames.data.data_ptr()
    same_batches(_batches(sub_m), _batches(sub_d), strides=True)


@pytest.mark.parametrize("rows", [[], [5], [3, 4, 5, 0, 1, 9], [7, 6, 5], [2, 2, 3, 3], list(range(12)),
                                  [11, 0, 1, 2, 10, 11]])
@pytest.mark.parametrize("tier", ["cpu", "host"])
def test_subset_copies_the_rows_asked_for(rng, rows, tier):
    """FrameStore.subset copies runs of consecutive rows as slices (issue 31 item 2: index_select moved
    wide frame rows at 67 MB/s); any order, repeats and the empty selection give data[rows]."""
    data = torch.from_numpy(rng.integers(0, 256, (12, yuv420_bytes(6, 8)), dtype=np.uint8))
    store = FrameStore(data.clone(), format="yuv420", height=6, width=8, channels=3, tier=tier, device="cpu",
                       matrix="bt601")
    sub = store.subset(np.asarray(rows, np.int64))
    assert sub.tier == tier and sub.data.data_ptr() != store.data.data_ptr()
    assert torch.equal(sub.data, data[torch.as_tensor(rows, dtype=torch.int64)])


def test_rgb_window_values(rng, tmp_path):
    """The window options against plain torch on the stored RGB frames (the frames' meaning)."""
    eps, ctimes = _episodes(rng)
    rows = _rows(rng, sum(len(t) for t in ctimes), "rgb")
    ds = _dataset(eps, ctimes, rows, "rgb", "disk", "cpu", tmp_path)
    s = ds.streams["cam"]
    for b in DataLoader(ds, 4, shuffle=True, seed=1, windows=WINDOWS):
        B = b["hwc"].shape[0]
        hwc = b["hwc"]
        assert hwc.shape == (B, 3, H, W, 3) and hwc.dtype == torch.uint8
        chw = b["chw"]
        assert chw.shape == (B, 2, 3, H, W) and chw.dtype == torch.float32
        assert chw.permute(0, 1, 3, 4, 2).is_contiguous()          # channels-last memory, as before
        assert b["small"].shape == (B, 1, 3, 6, 9) and b["small"].is_contiguous()
        assert b["big8"].shape == (B, 2, 13, 17, 3) and b["big8"].dtype == torch.uint8
        assert b["half"].dtype == torch.float16
        z = b["zero"]
        assert torch.all(z[b["zero_is_pad"]] == 0)
        # every frame in the batch is one of the stored frames
        stored = torch.from_numpy(rows)
        for f in hwc.reshape(-1, H, W, 3):
            assert (stored == f).all(dim=(1, 2, 3)).any()
        assert len(s.frames) == rows.shape[0]


@pytest.mark.parametrize("tier", ["cpu", "disk"])
def test_rgb_frames_of_an_unknown_matrix_gather(rng, tmp_path, tier):
    """OpenCV decodes to RGB and says nothing of the color matrix (FrameSpec.matrix ''): the matrix is
    not needed for RGB storage, and a batch gathers (it raised "matrix: expected 'bt601', ..." before)."""
    rows = _rows(rng, 5, "rgb")
    store = FrameStore.create(rows, format="rgb", height=H, width=W, channels=3, tier=tier, device="cpu",
                              path=tmp_path / "f.npy", matrix="")
    assert store.matrix == "" and store.gather_matrix is None
    assert torch.equal(store.gather(torch.tensor([3, 1])), torch.from_numpy(rows[[3, 1]]))


def test_store_indexing_and_stats(rng, tmp_path):
    eps, ctimes = _episodes(rng)
    n = sum(len(t) for t in ctimes)
    rows = _rows(rng, n, "rgb")
    ds = _dataset(eps, ctimes, rows, "rgb", "disk", "cpu", tmp_path)
    s = ds.streams["cam"]
    assert s.shape == (H, W, 3) and s.dtype == torch.uint8 and s.kind == "image"
    np.testing.assert_array_equal(s.frames[2:5].numpy(), rows[2:5])
    np.testing.assert_array_equal(s.frames[-1].numpy(), rows[-1])
    v, t = ds.episode(1)["cam"]
    a, b = int(s.offsets[1]), int(s.offsets[2])
    np.testing.assert_array_equal(v.numpy(), rows[a:b])
    # statistics decoded chunk by chunk equal numpy's over every pixel
    px = rows.reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(s.stats["mean"].numpy(), px.mean(0), rtol=1e-12)
    np.testing.assert_array_equal(s.stats["max"].numpy(), px.max(0))
    assert "disk" in repr(ds)
    with pytest.raises(IndexError):
        s.frames[n]


# ----------------------------------------------------------------------------
# the memory plan


def _needs():
    return [fplan.Need("a", 100, 10), fplan.Need("b", 50, 10), fplan.Need("c", 10, 10)]


def test_plan_auto_fills_device_then_host_then_disk():
    b = fplan.Budgets(device=1100, host=600, disk=10_000, disk_dir="/tmp")
    got = fplan.plan(_needs(), "auto", b, device=torch.device("cuda", 0))
    assert got == {"a": "device", "b": "host", "c": "device"}
    b = fplan.Budgets(device=0, host=0, disk=2000, disk_dir="/tmp")
    assert set(fplan.plan(_needs(), "auto", b, device=torch.device("cuda", 0)).values()) == {"disk"}


def test_plan_explicit_tiers_and_cpu():
    b = fplan.Budgets(device=10**6, host=10**6, disk=10**6, disk_dir="/tmp")
    assert fplan.plan(_needs(), "host", b, device=torch.device("cuda", 0)) == dict.fromkeys("abc", "host")
    got = fplan.plan(_needs(), {"b": "disk"}, b, device=torch.device("cuda", 0))
    assert got == {"a": "device", "b": "disk", "c": "device"}
    assert fplan.plan(_needs(), "auto", b, device=torch.device("cpu")) == dict.fromkeys("abc", "cpu")
    assert fplan.plan(_needs(), "disk", b, device=torch.device("cpu"))["a"] == "disk"
    with pytest.raises(ValueError, match="frames must be one of"):
        fplan.plan(_needs(), "gpu", b, device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"frames\['a'\]"):
        fplan.plan(_needs(), {"a": "ram"}, b, device=torch.device("cpu"))


def test_plan_error_names_bytes_and_ways_out():
    b = fplan.Budgets(device=500, host=300, disk=200, disk_dir="/scratch/cache")
    with pytest.raises(MemoryError) as e:
        fplan.plan(_needs(), "auto", b, device=torch.device("cuda", 0), hint="set: ")
    msg = str(e.value)
    assert "set: frames of stream 'a' need 0.00 GB (100 frames x 10 bytes" in msg
    for word in ("video_resize", "episodes=", "frames='disk'", "shard_episodes", "/scratch/cache", "host_memory"):
        assert word in msg
    with pytest.raises(MemoryError, match="in the tier asked for"):
        fplan.plan(_needs(), "device", fplan.Budgets(10, 10**6, 10**6, "/tmp"), device=torch.device("cuda", 0))


def test_plan_frames_names_an_unknown_stream():
    b = fplan.Budgets(device=10**6, host=10**6, disk=10**6, disk_dir="/tmp")
    with pytest.raises(ValueError, match=r"set: frames names 'typo', not an image stream of this dataset; "
                                         r"its image streams are \['a', 'b', 'c'\]"):
        fplan.plan(_needs(), {"typo": "disk", "a": "disk"}, b, device=torch.device("cpu"), hint="set: ")


@pytest.mark.parametrize("arg", ["device_memory", "host_memory"])
def test_budget_arguments_are_checked(tmp_path, arg):
    for bad in ("lots", [1], True, None.__class__):
        with pytest.raises(TypeError, match=f"{arg} must be a number of bytes .*got {re.escape(repr(bad))}"):
            fplan.budgets(torch.device("cpu"), disk_dir=tmp_path, **{arg: bad})
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"{arg} must be a finite number of bytes >= 0, got {re.escape(repr(bad))}"):
            fplan.budgets(torch.device("cpu"), disk_dir=tmp_path, **{arg: bad})
    b = fplan.budgets(torch.device("cpu"), disk_dir=tmp_path, **{arg: np.int64(5e9)})
    assert b.host == 5 * 10**9 if arg == "host_memory" else b.device == 0     # the CPU has no device budget


def test_from_lerobot_checks_frames_and_budgets(DATA):
    src = DATA / "groot_picknplace"
    if not src.is_dir():
        pytest.skip(f"{src} is not present")
    with pytest.warns(UserWarning, match="egoview"), \
            pytest.raises(ValueError, match=r"groot_picknplace: frames names 'typo'.*\['observation\.images\.ego_view'\]"):
        robocache.Dataset.from_lerobot(src, device="cpu", frames={"typo": "disk"})
    with pytest.warns(UserWarning, match="egoview"), pytest.raises(TypeError, match="host_memory must be a number"):
        robocache.Dataset.from_lerobot(src, device="cpu", host_memory="lots")


def test_budgets_defaults(tmp_path):
    b = fplan.budgets(torch.device("cpu"), disk_dir=tmp_path)
    assert b.device == 0 and b.host > 0 and b.disk_dir == str(tmp_path)
    b = fplan.budgets(torch.device("cpu"), host_memory=123, disk_dir=tmp_path)
    assert b.host == 123


# ----------------------------------------------------------------------------
# GPU tiers


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["rgb", "yuv420"])
def test_gpu_tiers_equal_cpu(rng, tmp_path, fmt):
    if not torch.cuda.is_available() or not robocache.build_info()["cuda"]:
        pytest.skip("needs a GPU and a CUDA build")
    eps, ctimes = _episodes(rng)
    rows = _rows(rng, sum(len(t) for t in ctimes), fmt)
    want = _batches(_dataset(eps, ctimes, rows, fmt, "cpu", "cpu", tmp_path))
    for tier in ("device", "host", "disk"):
        ds = _dataset(eps, ctimes, rows, fmt, tier, "cuda", tmp_path)
        assert ds.streams["cam"].frames.tier == tier
        for graph in (True, False):
            same_batches(want, _batches(ds, cuda_graph=graph), strides=True)


@pytest.mark.cuda
def test_host_tier_epoch_without_sync(rng, tmp_path):
    if not torch.cuda.is_available() or not robocache.build_info()["cuda"]:
        pytest.skip("needs a GPU and a CUDA build")
    eps, ctimes = _episodes(rng, E=8)
    rows = _rows(rng, sum(len(t) for t in ctimes), "yuv420")
    ds = _dataset(eps, ctimes, rows, "yuv420", "host", "cuda", tmp_path)
    assert ds.streams["cam"].frames.data.is_pinned()
    loader = DataLoader(ds, 4, shuffle=True, seed=2, windows=WINDOWS)
    for _ in loader:                          # warm-up: lazy tables, graph capture
        pass
    torch.cuda.synchronize()
    loader.set_epoch(1)
    n = 0
    torch.cuda.set_sync_debug_mode("error")
    try:
        for b in loader:
            b["hwc"].float().mul_(2)
            n += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert n == len(loader) and loader._batches.graph is not None


@pytest.mark.cuda
@pytest.mark.parametrize("tier", ["cpu", "host", "disk"])
def test_subset_onto_the_gpu_copies_once(rng, tmp_path, monkeypatch, tier):
    """``ds.subset(eps, device="cuda")`` (a rank's shard, issue 31 item 2) equals ``ds.subset(eps).to("cuda")``
    and copies the frames once, straight to where they live: a host-tier shard into pinned memory (never
    plain memory pinned after), a CPU one into GPU memory (device tier)."""
    if not torch.cuda.is_available() or not robocache.build_info()["cuda"]:
        pytest.skip("needs a GPU and a CUDA build")
    from robocache.frames import pinned
    eps, ctimes = _episodes(rng, E=6)
    rows = _rows(rng, sum(len(t) for t in ctimes), "yuv420")
    if tier == "host":      # in plain memory, as a set built on the CPU before the loader shards it
        store = FrameStore(torch.from_numpy(rows), format="yuv420", height=H, width=W, channels=3, tier="host",
                           device="cpu", matrix="bt709")
        ds = robocache.Dataset.from_episodes(eps, device="cpu", frames={"cam": (store, ctimes)})
        assert not ds.streams["cam"].frames.data.is_pinned()
    else:
        ds = _dataset(eps, ctimes, rows, "yuv420", tier, "cpu", tmp_path)
    mine = [4, 1, 2]
    want = _batches(ds.subset(mine).to("cuda"))
    monkeypatch.setattr(pinned, "pin", lambda t: pytest.fail("the shard was copied twice (pinned after)"))
    sub = ds.subset(mine, device="cuda")
    f = sub.streams["cam"].frames
    assert sub.device.type == "cuda" and all(s.device.type == "cuda" for s in sub.streams.values())
    assert f.tier == {"cpu": "device", "host": "host", "disk": "disk"}[tier]
    if tier == "host":
        assert f.data.is_pinned() and f.device.type == "cuda"
    same_batches(want, _batches(sub), strides=True)
    same_batches(_batches(ds.subset(mine)), _batches(sub), strides=True)


def test_a_new_tier_is_one_class_and_one_registration(rng, monkeypatch):
    """Issue 45 item 1: a tier written as one class and registered with one line works everywhere a tier
    name is taken (FrameStore.create, the store's memory, gather, subset, the move), with nothing else taught
    about it: here plain (unpinned) host memory, its batches equal the cpu tier's frame for frame."""
    from robocache.frames import tiers
    from robocache.frames.tiers.base import Tier

    class PlainTier(Tier):
        name = "plain_test"
        holds = "frames in plain host memory"

        def make(self, a, *, format, height, width, path, qscale, device):
            return torch.from_numpy(a.copy()), {}

    monkeypatch.setattr(tiers, "REGISTRY", dict(tiers.REGISTRY))     # the registration undone after the test
    tiers.register(PlainTier)
    rows = rng.integers(0, 256, (12, yuv420_bytes(6, 8)), dtype=np.uint8)
    kw = dict(format="yuv420", height=6, width=8, device="cpu")
    new, ref = FrameStore.create(rows, tier="plain_test", **kw), FrameStore.create(rows, tier="cpu", **kw)
    assert new.tier == "plain_test" and new.nbytes == ref.nbytes == rows.nbytes
    ids = torch.as_tensor([3, 0, 11, -1, 5])
    assert torch.equal(new.gather(ids), ref.gather(ids))
    sub = new.subset(np.asarray([4, 2, 9]))
    assert sub.tier == "plain_test" and torch.equal(sub[:], ref[[4, 2, 9]])
    with pytest.raises(ValueError, match="tier must be one of"):
        FrameStore.create(rows, tier="no_such_tier", **kw)
