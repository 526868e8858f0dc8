"""robocache.Dataset core: ragged storage, stream metadata, statistics, validation, display.

Synthetic multi-rate episodes (joints 200 Hz, camera 30 Hz uint8 frames, point clouds 10 Hz,
a discrete int stream, text) and the real EuRoC IMU 200 Hz + camera 20 Hz timestamps (int64
epoch nanoseconds). CPU here; the `cuda` test checks the GPU-resident copy against it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import Dataset, Stream  # noqa: E402
from robocache.data import stats as rstats  # noqa: E402
from robocache._util import progress  # noqa: E402

RATES = {"joints": 200.0, "camera": 30.0, "cloud": 10.0, "gripper": 200.0, "task": 10.0}


def np_(t):
    return t.detach().cpu().numpy()


def grid(rng, rate, duration):
    """Sample times at `rate` Hz with a little jitter, starting at a random offset."""
    n = max(int(duration * rate), 0)
    t = rng.uniform(0, 0.01) + np.arange(n) / rate
    return t + rng.uniform(-0.05, 0.05, n) / rate


def make_episodes(rng, E=4, empty=(2,), missing=None):
    """Episodes of the multi-rate set; episodes in `empty` have no samples at all (every stream
    present, zero length) and `missing` = (episode, stream) drops one stream from one episode."""
    eps = []
    for e in range(E):
        dur = 0.0 if e in empty else rng.uniform(0.5, 1.5)
        tj, tc, tp = grid(rng, 200, dur), grid(rng, 30, dur), grid(rng, 10, dur)
        ep = {
            "joints": (rng.standard_normal((len(tj), 7)).astype(np.float32), tj),
            "camera": (rng.integers(0, 256, (len(tc), 6, 5, 3), dtype=np.uint8), tc),
            "cloud": ([rng.standard_normal((int(rng.integers(0, 40)), 4)).astype(np.float32) for _ in tp], tp),
            "gripper": (rng.integers(0, 3, len(tj)).astype(np.int32), tj.copy()),
            "task": (np.array(["reach", "grasp", "lift"])[np.arange(len(tp)) // 2 % 3], tp.copy()),
        }
        if missing and missing[0] == e:
            del ep[missing[1]]
        eps.append(ep)
    return eps


@pytest.fixture
def episodes(rng):
    return make_episodes(rng, missing=(3, "gripper"))


@pytest.fixture
def ds(episodes):
    return Dataset.from_episodes(episodes, tasks=["pick", "place", "pick", ["pick", "stack"]],
                                 feature_names={"joints": [f"j{i}" for i in range(7)]}, device="cpu",
                                 source="synthetic")


# ----------------------------------------------------------------------------
# import and construction


def test_import_needs_numpy_only():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import robocache\n"
            "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
            "try:\n"
            "    robocache.Dataset.from_episodes([])\n"
            "except ImportError as e:\n"
            "    assert 'pip install torch' in str(e), e\n"
            "else:\n"
            "    raise SystemExit('no ImportError')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_storage_is_ragged_on_one_device(ds, episodes):
    assert len(ds) == 4 and list(ds.streams) == ["joints", "camera", "cloud", "gripper", "task"]
    assert ds.device == torch.device("cpu") and ds.anchor == "joints"
    for name, s in ds.streams.items():
        assert isinstance(s, Stream) and s.name == name
        assert s.times.dtype == torch.float64 and s.offsets.dtype == torch.int64
        assert s.offsets.shape == (len(ds) + 1,) and int(s.offsets[0]) == 0
        assert int(s.offsets[-1]) == s.times.shape[0] == s.num_samples
        values = s.frames.data if s.frames is not None else s.values   # image frames: their store's rows
        for t in (values, s.times, s.offsets):
            assert t.device == ds.device and t.is_contiguous()
        for e, ep in enumerate(episodes):
            a, b = int(s.offsets[e]), int(s.offsets[e + 1])
            if name not in ep:
                assert a == b, "a stream missing from an episode is empty there"
                continue
            np.testing.assert_array_equal(np_(s.times[a:b]), ep[name][1])
            if s.kind not in ("pointcloud", "text"):
                np.testing.assert_array_equal(np_(s.values[a:b]), ep[name][0])


def test_kinds_modes_dtypes_shapes(ds):
    expect = {"joints": ("continuous", "linear", torch.float32, (7,)),
              "camera": ("image", "nearest", torch.uint8, (6, 5, 3)),
              "cloud": ("pointcloud", "nearest", torch.float32, (4,)),
              "gripper": ("discrete", "nearest", torch.int32, ()),
              "task": ("text", "previous", torch.int64, ())}
    for name, (kind, mode, dtype, shape) in expect.items():
        s = ds.streams[name]
        assert (s.kind, s.mode, s.dtype, s.shape) == (kind, mode, dtype, shape), name
    assert ds.streams["joints"].feature_names == [f"j{i}" for i in range(7)]
    assert ds.streams["camera"].feature_names is None


def test_measured_rates_and_durations(ds, episodes):
    for name, rate in RATES.items():
        # 1 / the median (the lower middle one: torch's) of the positive intervals within episodes, from the
        # written times; and, whatever the draw, within grid()'s jitter of the nominal rate (each interval
        # within +-10% of 1 / rate)
        gaps = np.sort(np.concatenate([np.diff(ep[name][1]) for ep in episodes if name in ep]))
        gaps = gaps[gaps > 0]
        assert ds.streams[name].rate == pytest.approx(1 / gaps[(len(gaps) - 1) // 2], rel=1e-9), name
        assert rate / 1.1 <= ds.streams[name].rate <= rate / 0.9, name
    for name, s in ds.streams.items():
        want = [ep[name][1][-1] - ep[name][1][0] if name in ep and len(ep[name][1]) else 0.0 for ep in episodes]
        d = s.durations
        assert d.dtype == torch.float64 and d.device == ds.device
        np.testing.assert_allclose(np_(d), want, rtol=0, atol=1e-12)
        assert s.duration == pytest.approx(sum(want))
    spans = []
    for ep in episodes:
        ts = [v[1] for v in ep.values() if len(v[1])]
        spans.append(max(t[-1] for t in ts) - min(t[0] for t in ts) if ts else 0.0)
    np.testing.assert_allclose(np_(ds.durations), spans, atol=1e-12)


def test_rate_ignores_episode_gaps_and_duplicates():
    t = [np.arange(10) * 0.1, 50 + np.arange(10) * 0.1, np.repeat(np.arange(5) * 0.1, 3)]
    ds = Dataset.from_episodes([{"x": (np.zeros(len(x)), x)} for x in t], device="cpu")
    assert ds.streams["x"].rate == pytest.approx(10.0)
    one = Dataset.from_episodes([{"x": (np.zeros(1), [0.0])}], rates={"x": 15.0}, device="cpu")
    assert one.streams["x"].rate == 15.0 and one.streams["x"].nominal_rate == 15.0
    assert Dataset.from_episodes([{"x": (np.zeros(1), [0.0])}], device="cpu").streams["x"].rate is None


def test_empty_episodes(ds):
    assert ds.episodes[2].length == 0 and all(n == 0 for n in ds.episodes[2].lengths.values())
    for name, (v, t) in ds.episode(2).items():
        assert t.shape == (0,)
        if name != "cloud":
            assert v.shape[0] == 0
    pc, t = ds.episode(2)["cloud"]
    assert len(pc) == 0 and pc.points.shape == (0, 4)
    # an empty episode resamples to zeros with is_pad everywhere
    out, pad = ds.resample("joints", torch.tensor([2, 0]), torch.full((2, 3), 0.2, dtype=torch.float64),
                           return_mask=True)
    assert (out[0] == 0).all() and pad[0].all() and not pad[1].any()


def test_dataset_of_empty_episodes_only():
    ds = Dataset.from_episodes([{"x": (np.zeros((0, 3), np.float32), np.zeros(0))}, {}], device="cpu")
    s = ds.streams["x"]
    assert len(ds) == 2 and s.shape == (3,) and s.dtype == torch.float32 and s.num_samples == 0
    assert s.rate is None and s.duration == 0.0 and np.isnan(np_(s.stats["mean"])).all()
    assert "x" in repr(ds)


def test_episode_metadata_and_tasks(ds):
    assert [ep.index for ep in ds.episodes] == [0, 1, 2, 3]
    assert ds.tasks == ["pick", "place", "stack"]
    assert ds.episodes[3].tasks == ["pick", "stack"] and ds.episodes[0].tasks == ["pick"]
    s = ds.streams["joints"]
    assert [ep.length for ep in ds.episodes] == list(s.lengths)
    assert ds.episodes[3].lengths["gripper"] == 0
    with pytest.raises(ValueError, match="tasks has 1 entries for 2 episodes"):
        Dataset.from_episodes([{}, {}], tasks=["a"], device="cpu")


def test_episode_views_share_storage(ds, episodes):
    s = ds.streams["joints"]
    v, t = ds.episode(1)["joints"]
    assert v.untyped_storage().data_ptr() == s.values.untyped_storage().data_ptr()
    assert t.untyped_storage().data_ptr() == s.times.untyped_storage().data_ptr()
    np.testing.assert_array_equal(np_(v), episodes[1]["joints"][0])
    np.testing.assert_array_equal(np_(ds.episode(-1)["camera"][0]), episodes[3]["camera"][0])
    with pytest.raises(IndexError, match="episode 4 out of range for 4 episodes"):
        ds.episode(4)


# ----------------------------------------------------------------------------
# point clouds and text


def test_pointcloud_representation(ds, episodes):
    s = ds.streams["cloud"]
    frames = [f for ep in episodes for f in ep["cloud"][0]]
    sizes = [len(f) for f in frames]
    assert s.frame_offsets.dtype == torch.int64 and s.frame_offsets.shape == (len(frames) + 1,)
    np.testing.assert_array_equal(np_(s.frame_offsets), np.concatenate([[0], np.cumsum(sizes)]))
    assert s.values.shape == (sum(sizes), 4) and s.times.shape == (len(frames),)
    for e, ep in enumerate(episodes):
        pc, t = ds.episode(e)["cloud"]
        assert len(pc) == len(ep["cloud"][0]) == t.shape[0]
        assert int(pc.offsets[0]) == 0 and int(pc.offsets[-1]) == pc.points.shape[0]
        for m, f in enumerate(ep["cloud"][0]):
            np.testing.assert_array_equal(np_(pc[m]), f)
    assert s.nbytes == s.values.numel() * 4 + s.times.numel() * 8 + (len(ds) + 1) * 8 + (len(frames) + 1) * 8


def test_pointcloud_resample_gives_frame_indices(ds, episodes):
    s = ds.streams["cloud"]
    idx = torch.tensor([0, 1, 3, 1])
    x = torch.stack([torch.linspace(-0.1, 1.6, 9, dtype=torch.float64)] * 4)
    fi = ds.resample("cloud", idx, x)
    assert fi.dtype == torch.int64 and fi.shape == (4, 9)
    for b, e in enumerate(idx.tolist()):
        a, z = int(s.offsets[e]), int(s.offsets[e + 1])
        assert ((fi[b] >= a) & (fi[b] < z)).all()
        want = np.abs(np_(s.times[a:z])[None, :] - np_(x[b])[:, None]).argmin(1) + a  # nearest frame
        got = np_(fi[b])
        ok = np.isclose(np_(s.times)[got], np_(s.times)[want]) | (np.abs(np_(s.times)[got] - np_(x[b]))
                                                                  == np.abs(np_(s.times)[want] - np_(x[b])))
        assert ok.all()


def test_pointcloud_dict_and_dense_forms():
    pts = np.arange(30, dtype=np.float32).reshape(10, 3)
    ds = Dataset.from_episodes([{"pc": ({"points": pts, "frame_offsets": [0, 4, 4, 10]}, [0.0, 0.1, 0.2])},
                                {"pc": (np.ones((2, 5, 3), np.float32), [0.0, 0.1])}],
                               kinds={"pc": "pointcloud"}, device="cpu")
    s = ds.streams["pc"]
    np.testing.assert_array_equal(np_(s.frame_offsets), [0, 4, 4, 10, 15, 20])
    np.testing.assert_array_equal(np_(s.offsets), [0, 3, 5])
    pc, _ = ds.episode(1)["pc"]
    assert len(pc) == 2 and pc[1].shape == (5, 3) and len(ds.episode(0)["pc"][0][1]) == 0
    with pytest.raises(ValueError, match=r"episode 0, stream 'pc': frame_offsets must rise from 0 to 10"):
        Dataset.from_episodes([{"pc": ({"points": pts, "frame_offsets": [0, 6, 4, 10]}, [0.0, 0.1, 0.2])}],
                              device="cpu")
    with pytest.raises(ValueError, match=r"episode 0, stream 'pc': 2 point-cloud frames but 3 times"):
        Dataset.from_episodes([{"pc": ([pts, pts], [0.0, 0.1, 0.2])}], device="cpu")


def test_text_stream(ds, episodes):
    s = ds.streams["task"]
    assert s.vocab == ["reach", "grasp", "lift"] and s.stats == {}
    e = 1
    words = episodes[e]["task"][0]
    np.testing.assert_array_equal(np.array(s.vocab)[np_(ds.episode(e)["task"][0])], words)
    t = episodes[e]["task"][1]
    got = ds.resample("task", torch.tensor([e]), torch.from_numpy(t[None, :] + 1e-6))
    np.testing.assert_array_equal(np.array(s.vocab)[np_(got[0])], words)  # previous: hold the label


# ----------------------------------------------------------------------------
# resample over the ragged storage


def test_resample_matches_per_episode_interp(ds, episodes):
    idx = torch.tensor([1, 0, 3, 1, 0])
    x = torch.rand(5, 11, dtype=torch.float64) * 1.7 - 0.1
    out, pad = ds.resample("joints", idx, x, return_mask=True)
    assert out.shape == (5, 11, 7) and out.dtype == torch.float32 and pad.dtype == torch.bool
    for b, e in enumerate(idx.tolist()):
        v, t = episodes[e]["joints"]
        ref = np.stack([np.interp(np_(x[b]), t, v[:, d].astype(np.float64)) for d in range(7)], 1)
        np.testing.assert_allclose(np_(out[b]), ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np_(pad[b]), (np_(x[b]) < t[0] - 1e-4) | (np_(x[b]) > t[-1] + 1e-4))
    # the same call through robocache.resample, and argument conveniences
    s = ds.streams["joints"]
    direct = robocache.resample(s.values, s.times, x, offsets=s.offsets, index=idx)
    assert torch.equal(out, direct)
    x32 = x.float()  # float32 targets and a list of episodes are converted
    assert torch.equal(ds.resample("joints", idx.tolist(), x32),
                       robocache.resample(s.values, s.times, x32.double(), offsets=s.offsets, index=idx))
    img = ds.resample("camera", idx[:2], x[:2, :4])
    assert img.shape == (2, 4, 6, 5, 3) and img.dtype == torch.uint8
    prev = ds.resample("gripper", idx, x, mode="previous")
    assert prev.dtype == torch.int32 and prev.shape == (5, 11)


def test_slerp_stream():
    q = np.random.default_rng(1).standard_normal((20, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    ds = Dataset.from_episodes([{"quat": (q, np.arange(20) * 0.05)}], modes={"quat": "slerp"}, device="cpu")
    out = ds.resample("quat", torch.tensor([0]), torch.tensor([[0.0125, 0.5]], dtype=torch.float64))
    assert ds.streams["quat"].mode == "slerp"
    np.testing.assert_allclose(np.linalg.norm(np_(out[0]), axis=-1), 1.0, atol=1e-12)


# ----------------------------------------------------------------------------
# EuRoC: real IMU 200 Hz + camera 20 Hz, int64 epoch nanoseconds


def test_euroc_multirate(euroc):
    imu_t, imu_v, cam_t = euroc
    frames = np.zeros((len(cam_t), 2, 2, 1), np.uint8)  # stand-in camera frames, the real timestamps
    ds = Dataset.from_episodes([{"imu": (imu_v, imu_t), "cam0": (frames, cam_t)}], device="cpu",
                               source="EuRoC V1_01")
    t0 = int(min(imu_t.min(), cam_t.min()))
    assert ds.time_origin_ns == t0 == int(imu_t[0])
    imu, cam = ds.streams["imu"], ds.streams["cam0"]
    # float64 seconds since the origin keep every nanosecond (spans < 104 days)
    np.testing.assert_array_equal(np.round(np_(imu.times) * 1e9).astype(np.int64), imu_t - t0)
    np.testing.assert_array_equal(np.round(np_(cam.times) * 1e9).astype(np.int64), cam_t - t0)
    # the median interval is a measured one: 4,999,936 ns for this IMU, not 5 ms
    med = lambda t: float(np.median(np.diff(t))) / 1e9
    assert imu.rate == pytest.approx(1 / med(imu_t), rel=1e-12) and cam.rate == pytest.approx(1 / med(cam_t), rel=1e-12)
    assert imu.rate == pytest.approx(200.0, rel=1e-4) and cam.rate == pytest.approx(20.0, rel=1e-4)
    assert imu.kind == "continuous" and cam.kind == "image"
    assert imu.duration == pytest.approx((imu_t[-1] - imu_t[0]) / 1e9, abs=1e-9)
    assert cam.duration == pytest.approx((cam_t[-1] - cam_t[0]) / 1e9, abs=1e-9)
    # N samples at the measured rate span (N - 1) intervals (the IMU drops none over the flight)
    assert imu.duration == pytest.approx((len(imu_t) - 1) / imu.rate, rel=1e-3)

    # IMU onto the camera times == np.interp in float64 on times relative to the first IMU sample
    out = ds.resample("imu", torch.tensor([0]), cam.times[None, :])
    rel = lambda a: (a - imu_t[0]).astype(np.float64)
    ref = np.stack([np.interp(rel(cam_t), rel(imu_t), imu_v[:, d]) for d in range(6)], 1)
    np.testing.assert_allclose(np_(out[0]), ref, rtol=1e-12, atol=1e-12)
    # every camera time is an IMU time: the resampled values are exactly those samples
    np.testing.assert_array_equal(np_(out[0]), imu_v[np.searchsorted(imu_t, cam_t)])


def test_euroc_split_into_episodes(euroc):
    """Three episodes cut from the recording: ragged rows read their own episode."""
    imu_t, imu_v, cam_t = euroc
    cuts = [imu_t[0], imu_t[9000], imu_t[20000], imu_t[-1] + 1]
    eps = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        i, c = (imu_t >= a) & (imu_t < b), (cam_t >= a) & (cam_t < b)
        eps.append({"imu": (imu_v[i], imu_t[i]), "cam_index": (np.flatnonzero(c).astype(np.int64), cam_t[c])})
    ds = Dataset.from_episodes(eps, device="cpu")
    assert ds.streams["imu"].rate == pytest.approx(200.0, rel=1e-4)
    assert ds.streams["cam_index"].rate == pytest.approx(20.0, rel=1e-4)
    assert ds.streams["cam_index"].kind == "discrete"
    rel = lambda a: (a - imu_t[0]).astype(np.float64)
    for e, ep in enumerate(eps):
        ct = ep["cam_index"][1]
        out = ds.resample("imu", torch.tensor([e]), torch.from_numpy(rel(ct)[None, :] / 1e9))
        v, t = ep["imu"]
        ref = np.stack([np.interp(rel(ct), rel(t), v[:, d]) for d in range(6)], 1)
        np.testing.assert_allclose(np_(out[0]), ref, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------
# statistics


def test_stats_match_numpy(ds, episodes):
    j = np.concatenate([ep["joints"][0] for ep in episodes]).astype(np.float64)
    st = ds.streams["joints"].stats
    assert set(st) == {"min", "max", "mean", "std", "q01", "q99"}
    for k, v in st.items():
        assert v.dtype == torch.float64 and v.shape == (7,) and v.device == ds.device, k
    np.testing.assert_array_equal(np_(st["min"]), j.min(0))
    np.testing.assert_array_equal(np_(st["max"]), j.max(0))
    np.testing.assert_allclose(np_(st["mean"]), j.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np_(st["std"]), j.std(0), rtol=1e-12)
    np.testing.assert_allclose(np_(st["q01"]), np.quantile(j, 0.01, axis=0), rtol=1e-12)
    np.testing.assert_allclose(np_(st["q99"]), np.quantile(j, 0.99, axis=0), rtol=1e-12)
    # images: per channel; point clouds: per channel over all points
    c = np.concatenate([ep["camera"][0] for ep in episodes]).reshape(-1, 3).astype(np.float64)
    sc = ds.streams["camera"].stats
    assert sc["mean"].shape == (3,)
    np.testing.assert_allclose(np_(sc["mean"]), c.mean(0), rtol=1e-12)
    np.testing.assert_allclose(np_(sc["std"]), c.std(0), rtol=1e-12)
    np.testing.assert_array_equal(np_(sc["q99"]), np.quantile(c, 0.99, axis=0))
    p = np.concatenate([f for ep in episodes for f in ep["cloud"][0]]).astype(np.float64)
    np.testing.assert_allclose(np_(ds.streams["cloud"].stats["std"]), p.std(0), rtol=1e-12)
    g = np.concatenate([ep["gripper"][0] for ep in episodes if "gripper" in ep]).astype(np.float64)
    assert ds.streams["gripper"].stats["mean"].shape == ()
    assert float(ds.streams["gripper"].stats["mean"]) == pytest.approx(g.mean(), rel=1e-12)
    assert ds.stats["joints"] is st  # computed once


def test_stats_chunked_and_subsampled(monkeypatch, rng):
    """Large streams: mean/std combined over chunks stay exact-ish; q01/q99 come from an evenly
    spaced subsample and stay close."""
    monkeypatch.setattr(rstats, "STATS_CHUNK", 3 * 1000)
    monkeypatch.setattr(rstats, "QUANTILE_ROWS", 5000)
    x = (rng.standard_normal((20011, 3)) * [1, 10, 100] + [0, 5, -50]).astype(np.float32)
    ds = Dataset.from_episodes([{"x": (x[:7000], np.arange(7000.0))}, {"x": (x[7000:], np.arange(13011.0))}],
                               device="cpu")
    st = ds.streams["x"].stats
    xd = x.astype(np.float64)
    np.testing.assert_allclose(np_(st["mean"]), xd.mean(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np_(st["std"]), xd.std(0), rtol=1e-10)
    np.testing.assert_array_equal(np_(st["min"]), xd.min(0))
    for q, k in ((0.01, "q01"), (0.99, "q99")):
        ref = np.quantile(xd, q, axis=0)
        assert (np.abs(np_(st[k]) - ref) <= 0.3 * xd.std(0)).all(), (k, np_(st[k]), ref)
        # deterministic: the documented subsample
        pick = np.round(np.linspace(0, len(x) - 1, 5000)).astype(np.int64)
        np.testing.assert_allclose(np_(st[k]), np.quantile(xd[pick], q, axis=0), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "bool"])
def test_stats_8bit_histogram_exact(monkeypatch, rng, dtype):
    """8-bit streams: histogram statistics, exact over every row (no subsample) and equal to numpy,
    quantiles interpolated between order statistics."""
    monkeypatch.setattr(rstats, "STATS_CHUNK", 64)
    monkeypatch.setattr(rstats, "QUANTILE_ROWS", 10)
    n = int(rng.integers(30, 400))
    if dtype == "bool":
        x = rng.random((n, 2)) < [0.3, 0.995]
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (n, 2), endpoint=True).astype(dtype)
    ds = Dataset.from_episodes([{"x": (x, np.arange(n) * 0.1)}], device="cpu")
    st = ds.streams["x"].stats
    xd = x.astype(np.float64)
    ref = {"min": xd.min(0), "max": xd.max(0), "mean": xd.mean(0), "std": xd.std(0),
           "q01": np.quantile(xd, 0.01, axis=0), "q99": np.quantile(xd, 0.99, axis=0)}
    for k, v in ref.items():
        assert st[k].dtype == torch.float64 and st[k].shape == (2,)
        np.testing.assert_allclose(np_(st[k]), v, rtol=1e-12, atol=1e-12, err_msg=k)


def test_source_statistics_win_and_computed_ones_fill_the_rest(episodes):
    """The source's dataset-level statistics are the stream's (LeRobot normalizes with them, whatever
    episodes are loaded); what the source lacks (here min/max, q01/q99) is computed; images keep their own."""
    given = {"joints": {"mean": [0.0] * 7, "std": np.ones(7), "count": [123]}}
    ds = Dataset.from_episodes(episodes, stats=given, device="cpu")
    s = ds.streams["joints"]
    fs = s.file_stats
    assert isinstance(fs["std"], torch.Tensor) and fs["std"].dtype == torch.float64
    np.testing.assert_array_equal(np_(fs["std"]), np.ones(7))
    assert torch.equal(s.stats["std"], fs["std"]) and torch.equal(s.stats["mean"], fs["mean"])
    v = np_(s.values).astype(np.float64)
    np.testing.assert_array_equal(np_(s.stats["min"]), v.min(0))
    assert s.stats_source == "dataset" and ds.streams["camera"].stats_source == "computed"
    assert ds.streams["camera"].file_stats is None


# ----------------------------------------------------------------------------
# validation at load


def one(times, values=None, name="observation.state", **kw):
    times = np.asarray(times, np.float64)
    values = np.zeros((len(times), 2), np.float32) if values is None else values
    good = {name: (np.zeros((3, 2), np.float32), np.array([0.0, 0.1, 0.2]))}
    return Dataset.from_episodes([good, good, good, {name: (values, times)}], source="/x/data.hdf5",
                                 device="cpu", **kw)


def test_unsorted_times_named():
    t = np.arange(20) * 0.05
    t[17] = 0.80
    t[16] = 0.85
    msg = "/x/data.hdf5: episode 3, stream 'observation.state': times decrease at index 17 (0.85 -> 0.8)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        one(t)
    ds = one(t, validate=False)  # the caller's promise; nothing checked
    assert ds.streams["observation.state"].num_samples == 29


def test_nan_time_named():
    t = np.arange(10) * 0.1
    t[4] = np.nan
    with pytest.raises(ValueError, match=re.escape("episode 3, stream 'observation.state': time at index 4 is "
                                                   "not finite (nan)")):
        one(t)
    t[4] = np.inf
    with pytest.raises(ValueError, match="time at index 4 is not finite"):
        one(t)


def test_earliest_problem_is_reported():
    t = np.arange(10) * 0.1
    t[2], t[6] = 0.0, np.nan
    with pytest.raises(ValueError, match="times decrease at index 2"):
        one(t)


def test_episodes_may_restart_time():
    eps = [{"x": (np.zeros(3), [5.0, 6.0, 7.0])}, {"x": (np.zeros(3), [0.0, 1.0, 2.0])},
           {"x": (np.zeros(0), [])}, {"x": (np.zeros(2), [0.0, 0.0])}]
    ds = Dataset.from_episodes(eps, device="cpu")  # no error: order is per episode, duplicates allowed
    assert len(ds) == 4 and ds.streams["x"].lengths.tolist() == [3, 3, 0, 2]
    for e, ep in enumerate(eps):
        np.testing.assert_array_equal(np.asarray(ds.episode(e)["x"][1]), np.asarray(ep["x"][1], np.float64))


def test_length_mismatch_named():
    with pytest.raises(ValueError, match=re.escape("/x/data.hdf5: episode 3, stream 'observation.state': "
                                                   "5 values but 6 times")):
        one(np.arange(6) * 0.1, np.zeros((5, 2), np.float32))


def test_shape_mismatch_named():
    with pytest.raises(ValueError, match=re.escape("episode 3, stream 'observation.state': sample shape (3,) "
                                                   "differs from (2,) in episode 0")):
        one(np.arange(6) * 0.1, np.zeros((6, 3), np.float32))


def test_dtype_mismatch_named():
    with pytest.raises(ValueError, match=re.escape("episode 3, stream 'observation.state': dtype float64 "
                                                   "differs from float32 in episode 0")):
        one(np.arange(6) * 0.1, np.zeros((6, 2), np.float64))


def test_other_bad_input():
    with pytest.raises(ValueError, match="times mix int64 nanoseconds"):
        Dataset.from_episodes([{"a": (np.zeros(2), np.array([1, 2])), "b": (np.zeros(2), np.array([0.0, 1.0]))}],
                              device="cpu")
    with pytest.raises(ValueError, match="times must be 1-D"):
        Dataset.from_episodes([{"a": (np.zeros(2), np.zeros((2, 1)))}], device="cpu")
    with pytest.raises(TypeError, match=r"episode 0, stream 'a': expected a \(values, times\) pair"):
        Dataset.from_episodes([{"a": np.zeros(2)}], device="cpu")
    with pytest.raises(ValueError, match="options name streams that no episode has: \\['b'\\]"):
        Dataset.from_episodes([{"a": (np.zeros(2), [0.0, 1.0])}], kinds={"b": "image"}, device="cpu")
    with pytest.raises(ValueError, match="kind 'video' is not one of"):
        Dataset.from_episodes([{"a": (np.zeros(2), [0.0, 1.0])}], kinds={"a": "video"}, device="cpu")
    with pytest.raises(ValueError, match=r"'a' \(int64 values\): mode must be one of"):
        Dataset.from_episodes([{"a": (np.zeros(2, np.int64), [0.0, 1.0])}], modes={"a": "linear"}, device="cpu")
    with pytest.raises(ValueError, match="slerp needs quaternions"):
        Dataset.from_episodes([{"a": (np.zeros((2, 3)), [0.0, 1.0])}], modes={"a": "slerp"}, device="cpu")
    with pytest.raises(ValueError, match="episode 1, stream 'a': values are arrays but strings in episode 0"):
        Dataset.from_episodes([{"a": (["x", "y"], [0.0, 1.0])}, {"a": (np.zeros(2), [0.0, 1.0])}], device="cpu")


# ----------------------------------------------------------------------------
# memory, devices, display


def test_memory_figures(ds):
    for s in ds.streams.values():
        values = s.frames.data if s.frames is not None else s.values
        want = sum(t.numel() * t.element_size() for t in (values, s.times, s.offsets, s.frame_offsets)
                   if t is not None)
        assert s.nbytes == want
    cam = ds.streams["camera"]
    assert cam.nbytes == cam.num_samples * (6 * 5 * 3 + 8) + (len(ds) + 1) * 8
    assert ds.nbytes == sum(s.nbytes for s in ds.streams.values())


def test_to_same_device_is_identity(ds):
    assert ds.to("cpu") is ds and ds.streams["joints"].to(torch.device("cpu")) is ds.streams["joints"]


def test_repr_and_html(ds):
    r = repr(ds)
    lines = r.splitlines()
    assert lines[0].startswith("Dataset('synthetic', 4 episodes, 5 streams, ")
    assert "device cpu" in lines[0] and len(lines) == 3 + len(ds.streams)
    assert lines[-1] == "  statistics: computed on use (joints, camera, cloud, gripper)"   # no source stats here
    lines = lines[:-1]
    # column headers above the rows, each over its column
    assert lines[1].split() == ["stream", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes",
                                "duration", "memory", "storage"]
    assert lines[1].index("kind") == lines[2].index(lines[2].split()[1])
    lines = lines[:1] + lines[2:]
    for line, (name, s) in zip(lines[1:], ds.streams.items()):
        assert line.split()[:3] == [name, s.kind, str(s.dtype).replace("torch.", "")]
        assert "Hz" in line and "ep" in line and "B" in line
    assert "[6,5,3]" in lines[2] and re.search(r" (29|30)\.\d Hz ", lines[2]) and "3/4 ep" in lines[2]
    assert "[P,4]" in lines[3]
    assert "2/4 ep" in lines[4]  # gripper: one empty episode, one missing
    h = ds._repr_html_()
    assert h.count("<tr>") == 1 + len(ds.streams) and "<table>" in h and "<th>stream</th>" in h
    for word in ("episodes", "frames", "duration", "memory", "device", "uint8", "pointcloud", "joints"):
        assert word in h
    assert "Stream('joints', continuous float32 [7], mode linear" in repr(ds.streams["joints"])


def test_repr_counts_in_the_singular():
    one = robocache.Dataset.from_episodes([{"x": (np.zeros((1, 2), np.float32), np.zeros(1))}], device="cpu")
    assert repr(one).splitlines()[0].startswith("Dataset(1 episode, 1 stream, 1 frame, ")
    assert "<b>1</b> episode &middot; <b>1</b> frame &middot;" in one._repr_html_()
    assert repr(one.frames_view) == "FramesView(1 frame of 'x', 1 episode)"


def test_progress_is_silent_without_a_terminal():
    it = range(5)
    assert progress(it, 5, "x") is it  # pytest's stderr is not a TTY


@pytest.mark.cuda
def test_cuda_resident_and_equal_to_cpu(rng):
    eps = make_episodes(rng)
    cpu = Dataset.from_episodes(eps, device="cpu")
    gpu = Dataset.from_episodes(eps)  # default device: the GPU
    assert gpu.device.type == "cuda"
    for s in gpu.streams.values():
        for t in (s.values, s.times, s.offsets) + ((s.frame_offsets,) if s.frame_offsets is not None else ()):
            assert t.is_cuda
        assert s.rate == pytest.approx(cpu.streams[s.name].rate)
    moved = cpu.to("cuda")
    assert moved is not cpu and all(s.values.is_cuda for s in moved.streams.values())
    assert all(not s.values.is_cuda for s in cpu.streams.values())
    idx = torch.tensor([0, 1, 3, 2, 1])
    x = torch.rand(5, 16, dtype=torch.float64) * 1.6 - 0.1
    for name in gpu.streams:
        for ds in (gpu, moved):
            out, pad = ds.resample(name, idx.cuda(), x.cuda(), return_mask=True)
            ref, ref_pad = cpu.resample(name, idx, x, return_mask=True)
            assert out.is_cuda and torch.equal(out.cpu(), ref) and torch.equal(pad.cpu(), ref_pad), name
    for k, v in gpu.streams["joints"].stats.items():
        assert v.is_cuda
        torch.testing.assert_close(v.cpu(), cpu.streams["joints"].stats[k], rtol=1e-10, atol=1e-10)
    assert moved.to("cpu").streams["joints"].values.device.type == "cpu"


def test_nonfinite_values_warn_once_at_load(rng):
    """NaN/inf state values loaded silently; now one warning per stream naming the source, episode, stream
    and the first bad sample, pointing at the user's call. Images, integers and clean streams: none."""
    x = rng.normal(size=(10, 3)).astype(np.float32)
    x[4, 1], x[7] = np.nan, np.inf
    eps = [{"state": (rng.normal(size=(5, 3)).astype(np.float32), np.arange(5.0)),
            "image": (rng.integers(0, 255, (5, 8, 8, 3), dtype=np.uint8), np.arange(5.0)),
            "count": (np.arange(5), np.arange(5.0))},
           {"state": (x, np.arange(10.0)), "action": (np.full((10, 2), np.nan), np.arange(10.0)),
            "clean": (rng.normal(size=(10, 2)), np.arange(10.0))}]
    with pytest.warns(UserWarning) as rec:
        Dataset.from_episodes(eps, device="cpu", source="/data/demo.hdf5")
    msgs = sorted(str(w.message) for w in rec)
    assert len(msgs) == 2, msgs
    assert msgs[0].startswith("/data/demo.hdf5: episode 1, stream 'action': 10 of 10 samples hold NaN or inf "
                              "values, the first at index 0 ([nan, nan])")
    assert msgs[1].startswith("/data/demo.hdf5: episode 1, stream 'state': 2 of 15 samples hold NaN or inf values, "
                              "the first at index 4 (")
    assert {w.filename for w in rec} == {__file__}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Dataset.from_episodes(eps, device="cpu", validate=False)   # validate=False: the caller checked


def test_nonfinite_values_warning_from_a_reader(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "nan.hdf5"
    with h5py.File(path, "w") as f:
        for i, n in enumerate((4, 6)):
            g = f.create_group(f"data/demo_{i}")
            g.attrs["num_samples"] = n
            pos = np.zeros((n, 3))
            if i == 1:
                pos[5, 2] = np.nan
            g.create_dataset("obs/eef_pos", data=pos)
            g.create_dataset("actions", data=np.zeros((n, 7), np.float32))
    with pytest.warns(UserWarning, match=rf"{re.escape(str(path))}: episode 1, stream 'obs/eef_pos': 1 of 10 samples "
                                         rf"hold NaN or inf values, the first at index 5") as rec:
        Dataset.from_robomimic(path, device="cpu")
    assert [w.filename for w in rec] == [__file__]
