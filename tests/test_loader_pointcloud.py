"""DataLoader point-cloud windows (voxelized per sample) and pad="zero", on the CPU, against a
per-sample NumPy reference: pick each target's frame (nearest/previous), voxelize its points
with tests/reference.py's voxelize_ref."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from pairs import paired  # noqa: E402
from reference import voxelize_ref  # noqa: E402
from test_loader import host_episode, ref_window  # noqa: E402

GRID = (12, 8, 5)                      # non-cubic, anisotropic voxels: a transposed index fails
VOXEL = dict(grid=GRID, voxel_size=(0.25, 0.375, 0.5), origin=(-1.5, -1.5, -1.0))


def make_episodes(rng, E=6):
    """joints 100 Hz, lidar 10 Hz: [n_i, 4] float32 (x, y, z, intensity), varying sizes, some
    frames empty, some points outside the grid; episode 2 has no lidar at all."""
    eps = []
    for e in range(E):
        dur = rng.uniform(0.5, 1.6)
        tj = np.arange(int(dur * 100)) / 100
        j = rng.standard_normal((len(tj), 5)).astype(np.float32)
        tl = 0.02 + np.arange(int(dur * 10)) / 10 if e != 2 else np.zeros(0)
        frames = []
        for m in range(len(tl)):
            n = 0 if m % 4 == 3 else int(rng.integers(1, 300))
            xyz = rng.uniform(-1.8, 1.8, (n, 3))
            xyz[:, 2] = rng.uniform(-1.2, 1.7, n)
            inten = rng.uniform(-1, 1, (n, 1))
            frames.append(np.concatenate([xyz, inten], 1).astype(np.float32))
        eps.append({"joints": (j, tj), "lidar": (frames, tl)})
    return eps


@pytest.fixture
def clouds(rng):
    return robocache.Dataset.from_episodes(make_episodes(rng), device="cpu")


def cloud_ref(ds, offsets, mode, vox_mode, zero_pad=False):
    """(grids [T, ...], is_pad [T]) for one sample."""
    offsets = np.asarray(offsets, np.float64)

    def ref(e, t):
        pcs, times = ds.episode(e)["lidar"]
        times = times.numpy()
        n = len(times)
        frame, pad = ref_window(times, np.arange(n), t + offsets, mode)
        grids = []
        for i, m in enumerate(frame):
            pts = pcs[int(m)].numpy() if n and not (zero_pad and pad[i]) else np.zeros((0, 4), np.float32)
            feat = pts[:, 3:] if vox_mode in ("sum", "mean", "max") else None
            g, _ = voxelize_ref(pts[None, :, :3], features=None if feat is None else feat[None],
                                mode=vox_mode, **VOXEL)
            grids.append(g[0])
        return np.stack(grids), pad
    return ref


def check(loader, refs):
    order = loader.order().numpy()
    ep_all, t_all = (x.numpy() for x in loader.samples)
    B = loader.batch_size
    seen = 0
    for k, batch in enumerate(loader):
        for b, i in enumerate(order[k * B:(k + 1) * B]):
            for key, ref in refs.items():
                want, want_pad = ref(int(ep_all[i]), float(t_all[i]))
                got = batch[key][b].numpy()
                assert got.shape == want.shape, (key, got.shape, want.shape)
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{key} batch {k} row {b}")
                np.testing.assert_array_equal(batch[key + "_is_pad"][b].numpy(), want_pad)
                seen += 1
    assert seen == loader.num_samples * len(refs)


@pytest.mark.parametrize("vox_mode", ["occupancy", "count", "mean", "max"])
def test_voxel_windows_equal_reference(clouds, vox_mode):
    offs = [-0.3, -0.1, 0.0, 0.25]
    loader = DataLoader(clouds, 9, shuffle=True, seed=1, windows={
        "grid": Window("lidar", offsets=offs, voxel=dict(VOXEL, mode=vox_mode)),
        "joints": Window("joints"),
    })
    b = next(iter(DataLoader(clouds, 9, shuffle=True, windows=loader.windows)))
    want_shape = (9, 4) + ((1,) if vox_mode in ("mean", "max") else ()) + GRID
    assert b["grid"].shape == want_shape and b["grid_is_pad"].shape == (9, 4)
    assert b["grid"].dtype == (torch.int32 if vox_mode == "count" else torch.float32)
    check(loader, {"grid": cloud_ref(clouds, offs, "nearest", vox_mode)})


def test_voxel_windows_previous_zero_pad_and_dtype(clouds):
    offs = np.arange(-3, 3) / 10
    loader = DataLoader(clouds, 16, shuffle=False, windows={
        "grid": Window("lidar", offsets=offs, mode="previous", pad="zero",
                       voxel=dict(VOXEL, dtype=torch.uint8)),
    })
    # the anchor is the 100 Hz joints: windows run past both ends of every episode
    check(loader, {"grid": cloud_ref(clouds, offs, "previous", "occupancy", zero_pad=True)})
    pads = torch.cat([b["grid_is_pad"] for b in DataLoader(clouds, 64, shuffle=True, windows=loader.windows)])
    assert pads.any() and not pads.all()


def test_voxel_window_indices_at_lidar_rate(clouds):
    loader = DataLoader(clouds, 5, shuffle=True, windows={"grid": Window("lidar", indices=range(-2, 1), rate=10,
                                                           voxel=dict(VOXEL, mode="count"))})
    check(loader, {"grid": cloud_ref(clouds, np.arange(-2, 1) / 10, "nearest", "count")})


def test_pad_zero_matches_groot_relative_rule(rng):
    """pad="zero": padded steps hold zeros in stored units, before normalization (GR00T pads
    relative keys with zeros, absolute keys with the first/last value)."""
    ds = robocache.Dataset.from_episodes(make_episodes(rng, 4), device="cpu")
    idx = range(-4, 12)
    loader = DataLoader(ds, 32, shuffle=False, windows={
        "edge": Window("joints", indices=idx, rate=100),
        "zero": Window("joints", indices=idx, rate=100, pad="zero"),
        "zero_norm": Window("joints", indices=idx, rate=100, pad="zero", normalize="mean_std"),
    })
    st = ds.streams["joints"].stats
    mean, std = st["mean"].numpy(), st["std"].numpy()
    ep_all, t_all = (x.numpy() for x in loader.samples)
    n = 0
    for k, b in enumerate(loader):
        for r in range(b["edge"].shape[0]):
            i = k * 32 + r
            t, v = host_episode(ds, "joints", int(ep_all[i]))
            want, pad = ref_window(t, v, t_all[i] + np.asarray(idx) / 100, "nearest")
            np.testing.assert_array_equal(b["edge"][r].numpy(), want)
            zero = np.where(pad[:, None], 0, want)
            np.testing.assert_array_equal(b["zero"][r].numpy(), zero)
            np.testing.assert_allclose(b["zero_norm"][r].numpy(), (zero - mean) / std, rtol=1e-5, atol=1e-5)
            n += int(pad.any())
    assert n > 0


def test_voxel_window_bad_input(clouds):
    with pytest.raises(ValueError, match="needs voxel=dict"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("lidar")})
    with pytest.raises(ValueError, match="voxel is for point-cloud streams"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("joints", voxel=VOXEL)})
    with pytest.raises(ValueError, match=r"windows\['g'\]: voxel: .*voxel_size"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("lidar", voxel=dict(VOXEL, voxel_size=-1.0))})
    with pytest.raises(ValueError, match="unknown keys"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("lidar", voxel=dict(VOXEL, features=True))})
    with pytest.raises(ValueError, match="pick a frame"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("lidar", mode="linear", voxel=VOXEL)})
    with pytest.raises(ValueError, match="cannot be fused"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window(["lidar", "joints"], voxel=VOXEL)})
    with pytest.raises(ValueError, match="not for point clouds"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("lidar", normalize="min_max", voxel=VOXEL)})
    with pytest.raises(ValueError, match="pad 'reflect'"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": Window("joints", pad="reflect")})
    with pytest.raises(ValueError, match="point-cloud stream"):
        DataLoader(clouds, 4, shuffle=True, windows={"g": "joints"}, anchor="lidar")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torch_reference_gives_the_same_batches(clouds, num_workers):
    """The plain torch.utils.data baseline of the loader benchmark reproduces voxel windows and
    pad="zero" exactly (occupancy, count)."""
    from robocache.bench.torch_loader import make_torch_loader
    w = {"occ": Window("lidar", offsets=[-0.1, 0.0], voxel=VOXEL),
         "count": Window("lidar", indices=range(-1, 2), rate=10, pad="zero", voxel=dict(VOXEL, mode="count")),
         "joints": Window("joints", indices=range(-2, 3), rate=100, pad="zero", normalize="min_max")}
    ours = DataLoader(clouds, 13, shuffle=True, seed=6, windows=w)
    ours.set_epoch(2)
    theirs = make_torch_loader(clouds, w, 13, seed=6, epoch=2, num_workers=num_workers)
    n = 0
    for a, b in paired(ours, theirs):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        n += 1
    assert n == len(ours) == len(theirs)
