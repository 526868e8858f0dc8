"""The compressed tier's atlas (robocache.frames.atlas): the cameras of a timestep coded as one JPEG.

CPU (CI): the layout round-trips every camera's planes at odd sizes; a camera's decoded pixels depend
only on its own frame (MCU padding); three video cameras with the same frame counts share one atlas,
whose batches equal, bit for bit, batches over FFmpeg's decode of the atlases split per camera; one
decode per batch serves all cameras; the PSNR is the per-camera JPEG's; subsets share one copy; the
cache entry covers the group; cameras whose times differ are coded one by one. GPU (`cuda`): nvJPEG's
atlas batches against the CPU's within the JPEG tolerance, and an epoch without a host sync.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pairs import paired
from conftest import same_batches
from noise_clips import write_i420_h264
import robocache
from robocache import DataLoader, Window
from robocache.frames import atlas as fatlas
from robocache.frames import jpeg as fjpeg
from robocache.frames.atlas import AtlasLayout
from robocache.frames.jpeg import decode_rows_cpu, encode_all, pack
from robocache.frames.store import FrameStore, yuv420_bytes
from robocache.frames.videos import load_videos
from test_frames_compressed import PLANE_ATOL, natural_rows

av = pytest.importorskip("av")
pytestmark = pytest.mark.usefixtures("cache_env")

H, W = 24, 40
CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
CAMS = ("left", "right", "wrist")
COUNTS = (7, 11, 5)
WINDOWS = {c: Window(c, offsets=[-0.1, 0.0], layout="BTCHW") for c in CAMS}
WINDOWS["state"] = Window("state", offsets=[0.0])


def _random_rows(rng, n, h, w):
    return rng.integers(0, 256, (n, yuv420_bytes(h, w)), dtype=np.uint8)


@pytest.mark.parametrize("k,h,w", [(1, H, W), (3, 17, 31), (2, 16, 8), (3, 180, 320), (4, 1, 3)])
def test_layout_round_trips_and_pads_with_the_last_row(rng, k, h, w):
    lay = AtlasLayout(k, h, w)
    assert lay.pad_height % 16 == 0 and h <= lay.pad_height < h + 16
    cams = [_random_rows(rng, 5, h, w) for _ in range(k)]
    out = lay.compose(cams)
    assert out.shape == (5, yuv420_bytes(lay.atlas_height, w))
    for c in range(k):
        poisoned = np.full((5, yuv420_bytes(h, w)), 0xAB, np.uint8)
        assert lay.split(out, c, out=poisoned) is poisoned and np.array_equal(poisoned, cams[c])
        got = lay.split(torch.from_numpy(out), c)
        assert np.array_equal(got.numpy(), cams[c])
    # the padding rows repeat the camera's last luma row
    Y = out[:, :lay.atlas_height * w].reshape(5, k, lay.pad_height, w)
    last = cams[-1][:, (h - 1) * w:h * w]
    assert (Y[:, -1, h:] == last[:, None]).all()
    with pytest.raises(ValueError, match="cameras"):
        lay.compose(cams[:-1] if k > 1 else cams * 2)
    with pytest.raises(ValueError, match="camera 0"):
        lay.compose([c[:, 1:] for c in cams])


def test_a_cameras_pixels_depend_only_on_its_own_frame(rng):
    """MCU padding: no 8x8 block holds two cameras, so camera 0 decodes the same next to any neighbour."""
    h, w = 21, 40                                      # not a multiple of the MCU
    lay = AtlasLayout(2, h, w)
    a, b, c = (natural_rows(rng, 4, h, w) for _ in range(3))
    decoded = []
    for other in (b, c):
        data, offsets = pack(encode_all(lay.compose([a, other]), lay.atlas_height, w, 2))
        out = np.empty((4, lay.atlas_bytes), np.uint8)
        decode_rows_cpu(data, offsets, np.arange(4), out, lay.atlas_height, w)
        decoded.append(lay.split(out, 0))
    assert np.array_equal(decoded[0], decoded[1])


# ----------------------------------------------------------------------------
# three cameras from video files


@pytest.fixture(scope="module")
def cameras(tmp_path_factory):
    """{camera: [one clip per episode]}: three cameras, episodes of COUNTS frames, different content."""
    root = tmp_path_factory.mktemp("atlas")
    rng = np.random.default_rng(11)
    return {c: [write_i420_h264(root / f"{c}{e}.mp4", natural_rows(rng, n), H, W) for e, n in enumerate(COUNTS)]
            for c in CAMS}


def _dataset(loaded: dict, device="cpu"):
    rng = np.random.default_rng(0)
    eps = [{"state": (rng.normal(size=(2 * n, 3)).astype(np.float32), np.arange(2 * n) / 20.0)} for n in COUNTS]
    return robocache.Dataset.from_episodes(eps, device=device, frames=loaded)


def _reference(loaded: dict) -> dict:
    """The atlas stores' frames as FFmpeg decodes the atlases, split per camera, in a CPU store each."""
    store = loaded[CAMS[0]][0]
    lay = store.atlas.atlas.layout
    n = len(store.offsets) - 1
    whole = np.empty((n, lay.atlas_bytes), np.uint8)
    decode_rows_cpu(store.data, store.offsets, np.arange(n), whole, lay.atlas_height, W)
    return {c: (FrameStore.create(lay.split(whole, k), format="yuv420", height=H, width=W, tier="cpu",
                                  device="cpu", matrix=store.matrix, full_range=store.full_range), times)
            for k, (c, (_, times)) in enumerate(loaded.items())}


def _batches(ds, **kw):
    return [{k: v.cpu() for k, v in b.items()}
            for b in DataLoader(ds, 4, shuffle=True, seed=3, windows=WINDOWS, **kw)]


def test_three_cameras_share_one_atlas(cameras, monkeypatch):
    loaded = load_videos(cameras, device=CPU, frames="compressed")
    stores = [loaded[c][0] for c in CAMS]
    shared = stores[0].atlas.atlas
    assert [s.atlas.camera for s in stores] == [0, 1, 2]
    assert all(s.atlas.atlas is shared and s.data is shared.data for s in stores)
    assert len(shared) == sum(COUNTS) and shared.layout == AtlasLayout(3, H, W)
    assert sum(s.nbytes for s in stores) <= shared.data.nbytes + shared.offsets.nbytes
    assert "camera 1 of an atlas of 3" in repr(stores[1])
    ds = _dataset(loaded)
    same_batches(_batches(_dataset(_reference(loaded))), _batches(ds))
    same_batches(_batches(ds), _batches(ds))                           # deterministic

    # one decode per batch serves the three cameras
    calls = []
    real = fjpeg.decode_rows_cpu
    monkeypatch.setattr(fjpeg, "decode_rows_cpu", lambda *a, **k: (calls.append(len(a[2])), real(*a, **k))[1])
    got = _batches(ds)
    assert len(calls) == len(got)


def test_atlas_quality_is_the_per_camera_jpegs(cameras, monkeypatch):
    host = load_videos(cameras, device=CPU, frames="host")
    atlas = load_videos(cameras, device=CPU, frames="compressed")
    monkeypatch.setenv("ROBOCACHE_JPEG_ATLAS", "0")
    single = load_videos(cameras, device=CPU, frames="compressed")
    assert all(single[c][0].atlas is None for c in CAMS)
    for c in CAMS:
        ids = torch.arange(sum(COUNTS))
        want = host[c][0][ids].double()
        psnr = [10 * np.log10(255 ** 2 / ((s[c][0][ids].double() - want) ** 2).mean().item()) for s in (atlas, single)]
        assert psnr[0] > 35 and abs(psnr[0] - psnr[1]) < 0.5, (c, psnr)
        assert [len(t) for t in atlas[c][1]] == list(COUNTS)
        for a, b in paired(atlas[c][1], host[c][1]):
            assert np.array_equal(a, b)


def test_subsets_share_one_copy(cameras):
    ds = _dataset(load_videos(cameras, device=CPU, frames="compressed"))
    sub = ds.subset([2, 0])
    stores = [sub.streams[c].frames for c in CAMS]
    assert all(s.data is stores[0].data for s in stores)
    assert stores[0].data.nbytes < ds.streams[CAMS[0]].frames.data.nbytes
    assert stores[0].atlas.atlas.layout.cameras == 3
    # the subset's batches are the full set's frames of those episodes
    ref = _dataset(_reference(load_videos(cameras, device=CPU, frames="compressed"))).subset([2, 0])
    same_batches(_batches(ref), _batches(sub))


def test_the_cache_entry_covers_the_group(cameras, cache_env, monkeypatch):
    first = load_videos(cameras, device=CPU, frames="compressed")
    monkeypatch.setattr(fatlas, "decode_job", lambda *a, **k: pytest.fail("a cached atlas was decoded again"))
    again = load_videos(cameras, device=CPU, frames="compressed")
    assert np.array_equal(again[CAMS[0]][0].data, first[CAMS[0]][0].data)
    # another camera order is another atlas (another entry)
    monkeypatch.undo()
    swapped = load_videos({c: cameras[c] for c in reversed(CAMS)}, device=CPU, frames="compressed")
    assert swapped[CAMS[2]][0].atlas.camera == 0
    ds = _dataset({c: swapped[c] for c in CAMS})
    same_batches(_batches(_dataset(first)), _batches(ds))


def test_only_matching_cameras_are_grouped(cameras, tmp_path):
    rng = np.random.default_rng(4)
    other = {"big": [write_i420_h264(tmp_path / f"big{e}.mp4", natural_rows(rng, n, 32, 48), 32, 48)
                     for e, n in enumerate(COUNTS)]}
    loaded = load_videos({**cameras, **other}, device=CPU, frames="compressed")
    assert loaded["big"][0].atlas is None and loaded[CAMS[0]][0].atlas is not None
    # other tiers are never grouped
    assert all(s.atlas is None for s, _ in load_videos(cameras, device=CPU, frames="host").values())


def test_cameras_whose_times_differ_are_coded_one_by_one(cameras, tmp_path):
    rng = np.random.default_rng(5)
    slow = [write_i420_h264(tmp_path / f"slow{e}.mp4", natural_rows(rng, n), H, W, rate=5)
            for e, n in enumerate(COUNTS)]
    with pytest.warns(UserWarning, match="not the same frame times"):
        loaded = load_videos({"left": cameras["left"], "slow": slow}, device=CPU, frames="compressed")
    assert loaded["left"][0].atlas is None and loaded["slow"][0].atlas is None


# ----------------------------------------------------------------------------
# GPU


@pytest.mark.cuda
def test_gpu_atlas_batches(cameras):
    cpu = load_videos(cameras, device=CPU, frames="compressed")
    gpu = load_videos(cameras, device=CUDA, frames="compressed")
    assert gpu[CAMS[0]][0].atlas is not None and gpu[CAMS[0]][0].host_staged
    # nvJPEG reads the atlases' bytes from pinned memory: one copy (the cache file's pages) for all cameras
    data = [gpu[c][0].data for c in CAMS]
    assert all(d is data[0] for d in data) and torch.from_numpy(data[0]).is_pinned()
    want, got = _batches(_dataset(cpu)), _batches(_dataset(gpu, "cuda"))
    same_batches(got, _batches(_dataset(gpu, "cuda")))
    for x, y in paired(want, got):
        for k in x:
            assert x[k].shape == y[k].shape and x[k].dtype == y[k].dtype, k
            d = (x[k].double() - y[k].double()).abs().max().item()
            tol = 0 if k.startswith("state") or k.endswith("_is_pad") else 5 * PLANE_ATOL / 255 + 1e-3
            assert d <= tol, (k, d)


@pytest.mark.cuda
def test_gpu_atlas_epoch_without_sync(cameras):
    ds = _dataset(load_videos(cameras, device=CUDA, frames="compressed"), "cuda")
    loader = DataLoader(ds, 4, shuffle=True, seed=2, windows=WINDOWS)
    first = [{c: b[c].clone() for c in CAMS} for b in loader]
    torch.cuda.synchronize()
    loader.set_epoch(0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = [{c: b[c].clone() for c in CAMS} for b in loader]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(again) == len(first)
    assert all(torch.equal(a[c], b[c]) for a, b in paired(first, again) for c in CAMS)


# ----------------------------------------------------------------------------
# a LeRobot set with two cameras, v2.1 and v3.0


def _two_camera_copy(src, dst, episodes):
    """The CR5 v2.1 set (``episodes`` of it) with a second camera, ``observation.images.side``: the same
    videos as ``observation.images.top`` (links), so both cameras' frames are the same pictures."""
    import json
    import os
    info = json.loads((src / "meta/info.json").read_text())
    info["features"]["observation.images.side"] = info["features"]["observation.images.top"]
    (dst / "meta").mkdir(parents=True)
    (dst / "meta/info.json").write_text(json.dumps(info))
    for name in ("episodes.jsonl", "tasks.jsonl"):
        os.symlink(src / "meta" / name, dst / "meta" / name)
    lines = []
    for line in (src / "meta/episodes_stats.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            rec["stats"]["observation.images.side"] = rec["stats"].get("observation.images.top", {})
            lines.append(json.dumps(rec))
    (dst / "meta/episodes_stats.jsonl").write_text("\n".join(lines) + "\n")
    os.symlink(src / "data", dst / "data")
    (dst / "videos/chunk-000").mkdir(parents=True)
    for cam in ("top", "side"):
        os.symlink(src / "videos/chunk-000/observation.images.top", dst / f"videos/chunk-000/observation.images.{cam}")
    return dst


def test_lerobot_cameras_share_atlases_in_v21_and_v30(cr5_v21, tmp_path):
    import warnings
    from lerobot_forge import convert_v21_to_v30
    two = _two_camera_copy(cr5_v21, tmp_path / "v21", range(3))
    v30 = tmp_path / "v30"
    convert_v21_to_v30(two, v30, [1, 2], per_data_file=2, per_video_file=2)   # both episodes spans of one mp4
    kw = dict(device="cpu", video_resize=(120, 160))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = robocache.Dataset.from_lerobot(two, episodes=[1, 2], frames="compressed", **kw)
        b = robocache.Dataset.from_lerobot(v30, frames="compressed", **kw)
        host = robocache.Dataset.from_lerobot(v30, frames="host", **kw)
    top, side = "observation.images.top", "observation.images.side"
    for ds in (a, b):
        st, ss = ds.streams[top].frames, ds.streams[side].frames
        assert st.atlas is not None and st.atlas.atlas is ss.atlas.atlas and st.atlas.atlas.layout.cameras == 2
        ids = torch.arange(len(st))
        # the same pictures in their own MCU rows: the same decoded frames, bit for bit
        assert torch.equal(st[ids], ss[ids])
    # v2.1 files and v3.0 spans of the same frames: the same atlases
    assert np.array_equal(a.streams[top].frames.data, b.streams[top].frames.data)
    want = host.streams[top].frames[torch.arange(len(host.streams[top].frames))].double()
    got = b.streams[side].frames[torch.arange(len(want))].double()
    assert 10 * np.log10(255 ** 2 / ((got - want) ** 2).mean().item()) > 38
    windows = {"top": Window(top, indices=[-1, 0], layout="BTCHW"), "side": Window(side, indices=[0])}
    for x, y in paired(DataLoader(a, 8, shuffle=True, seed=1, windows=windows),
                    DataLoader(b, 8, shuffle=True, seed=1, windows=windows)):
        assert torch.equal(x["top"], y["top"]) and torch.equal(x["side"], y["side"])
        assert torch.equal(x["top"][:, 1], y["side"][:, 0].permute(0, 3, 1, 2).float() / 255)
