"""File readers on the real fixtures (GR00T PickNPlace, PushT zarr) and on files the tests write
(a robomimic HDF5, a LeRobot v3.0 folder), plus corrupted copies: every bad file raises a clear
error naming it, and the original fixtures stay byte-identical."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import robocache
from robocache.readers import (ReaderError, available_backends, decode_video, read_lerobot, read_robomimic,
                               read_zarr)

GROOT_LENGTHS = [416, 470, 470, 412, 328]
VIDEO = "observation.images.ego_view"


@pytest.fixture(scope="module")
def groot_eps(groot):
    pytest.importorskip("pyarrow")
    if not available_backends():
        pytest.skip("no video backend (PyAV, OpenCV, torchvision) installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_lerobot(groot)


def _direct_table(groot, e):
    pq = pytest.importorskip("pyarrow.parquet")
    return pq.read_table(groot / f"data/chunk-000/episode_{e:06d}.parquet")


# ----------------------------------------------------------------------------
# GR00T PickNPlace (LeRobot v2.0 + modality.json)


def test_groot_episodes_and_lengths(groot_eps):
    r = groot_eps
    assert len(r) == 5 and r.extra["episode_index"] == [0, 1, 2, 3, 4]
    lengths = [len(ep["observation.state"][1]) for ep in r.episodes]
    assert lengths == GROOT_LENGTHS and sum(lengths) == 2096
    assert r.rates["observation.state"] == r.rates["action"] == r.rates[VIDEO] == 20.0
    for ep in r.episodes:
        assert ep["observation.state"][0].shape[1] == 44 and ep["action"][0].shape[1] == 44
    v = r.extra["videos"][VIDEO]
    assert v["rows"] == GROOT_LENGTHS and v["fps"] == 20.0
    assert [Path(s.path).name for s in v["sources"]] == [f"episode_{e:06d}.mp4" for e in range(5)]
    assert all(s.whole for s in v["sources"])  # v2.x: one file per episode, never decoded by the reader
    assert r.kinds[VIDEO] == "image" and r.kinds["observation.state"] == "continuous"
    assert r.tasks[0] == ["pick the pear from the counter and place it in the plate", "valid"]
    assert r.feature_names["observation.state"][:2] == ["motor_0", "motor_1"]


def test_groot_quirks(groot):
    pytest.importorskip("pyarrow")
    # the info.json video key with no files is skipped with a warning, not an error
    with pytest.warns(UserWarning, match="observation.images.egoview"):
        r = read_lerobot(groot, load_video=True) if available_backends() else read_lerobot(groot, load_video=False)
    assert "observation.images.egoview" not in r.episodes[0]
    # timestamps start at 0.05 (float32-rounded) and step 0.05
    t = r.episodes[0]["action"][1]
    assert t.dtype == np.float64 and abs(t[0] - 0.05) < 1e-6 and np.allclose(np.diff(t), 0.05, atol=1e-5)


def test_groot_values_equal_pyarrow(groot, groot_eps):
    for e in range(5):
        tab = _direct_table(groot, e)
        ep = groot_eps.episodes[e]
        for key in ("observation.state", "action"):
            direct = np.array(tab.column(key).to_pylist())
            assert ep[key][0].dtype == direct.dtype and np.array_equal(ep[key][0], direct), (e, key)
        assert np.array_equal(ep["action"][1], tab.column("timestamp").to_numpy())
        assert np.array_equal(ep["next.reward"][0], tab.column("next.reward").to_numpy())
        assert np.array_equal(ep["task_index"][0], tab.column("task_index").to_numpy())


def test_groot_modality_subkeys(groot, groot_eps):
    modality = json.loads((groot / "meta/modality.json").read_text())
    for group, parent in (("state", "observation.state"), ("action", "action")):
        for sub, sl in modality[group].items():
            for ep in groot_eps.episodes:
                v, t = ep[f"{group}.{sub}"]
                assert np.array_equal(v, ep[parent][0][:, sl["start"]:sl["end"]])
                assert t is ep[parent][1]
    assert groot_eps.extra["aliases"]["video.ego_view"][0] == VIDEO


def test_groot_annotations(groot, groot_eps):
    table = groot_eps.extra["task_table"]
    for e, ep in enumerate(groot_eps.episodes):
        idx = _direct_table(groot, e).column("annotation.human.action.task_description").to_numpy()
        expect = [table[int(i)] for i in idx]
        assert list(ep["annotation.human.coarse_action"][0]) == expect
        assert list(ep["annotation.human.action.task_description"][0]) == expect
        assert groot_eps.kinds["annotation.human.coarse_action"] == "text"
    r = read_lerobot(groot, load_video=False, annotations="index")
    assert r.episodes[0]["annotation.human.action.task_description"][0].dtype == np.int64


def test_groot_stats_from_file(groot, groot_eps):
    shipped = json.loads((groot / "meta/stats.json").read_text())
    for key in ("observation.state", "action"):
        for s in ("min", "max", "mean", "std", "q01", "q99"):
            assert np.array_equal(groot_eps.stats[key][s], np.asarray(shipped[key][s])), (key, s)
    assert np.array_equal(groot_eps.stats["state.right_arm"]["mean"], np.asarray(shipped["observation.state"]["mean"][22:29]))
    # and the shipped stats describe the data we read (float32-rounded in the file)
    allstate = np.concatenate([ep["observation.state"][0] for ep in groot_eps.episodes])
    np.testing.assert_allclose(allstate.min(0), shipped["observation.state"]["min"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(allstate.max(0), shipped["observation.state"]["max"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(allstate.mean(0), shipped["observation.state"]["mean"], rtol=1e-4, atol=1e-5)


def stored_frames(ds, key, e):
    """Episode position e's frames of an image stream as RGB uint8 [F, H, W, 3] and their times (numpy)."""
    s = ds.streams[key]
    lo, hi = (int(x) for x in s.offsets[e:e + 2])
    return s.frames[lo:hi].cpu().numpy(), s.times[lo:hi].cpu().numpy()


def _direct_decode(path, backend):
    """Frames decoded without robocache, with the same library."""
    if backend == "pyav":
        import av
        with av.open(str(path)) as c:
            return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])])
    if backend == "opencv":
        import cv2
        cap, out = cv2.VideoCapture(str(path)), []
        while True:
            ok, img = cap.read()
            if not ok:
                break
            out.append(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))
        cap.release()
        return np.stack(out)
    import torchvision.io
    return torchvision.io.read_video(str(path), pts_unit="sec", output_format="THWC")[0].numpy()


@pytest.mark.parametrize("backend", ["pyav", "opencv", "torchvision"])
def test_groot_video_backends(groot, backend):
    pytest.importorskip("pyarrow")
    pytest.importorskip({"pyav": "av", "opencv": "cv2", "torchvision": "torchvision.io"}[backend])
    if backend not in available_backends():
        pytest.skip(f"{backend} is importable but cannot decode here (torchvision.io without read_video)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_lerobot(groot, video_backend=backend, episodes=[4, 1], device="cpu",
                                            frames="host", cache=False)
    assert ds.episode_index.tolist() == [4, 1]
    for i, e in enumerate([4, 1]):
        frames, times = stored_frames(ds, VIDEO, i)
        assert frames.dtype == np.uint8 and frames.shape == (GROOT_LENGTHS[e], 256, 256, 3)
        # frame times are the pts: i / 20 s from 0 (the parquet rows start at 0.05, see docs)
        np.testing.assert_allclose(times, np.arange(GROOT_LENGTHS[e]) / 20.0, atol=1e-6)
        direct = _direct_decode(groot / f"videos/chunk-000/{VIDEO}/episode_{e:06d}.mp4", backend)
        assert direct.shape == frames.shape
        for k in (0, 57, GROOT_LENGTHS[e] - 1):
            assert np.array_equal(frames[k], direct[k]), (e, k)
        assert frames[100, 128, 128].tolist() == direct[100, 128, 128].tolist()


def test_groot_video_options(groot):
    pytest.importorskip("pyarrow")
    if not available_backends():
        pytest.skip("no video backend")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_lerobot(groot, episodes=[3], video_resize=(64, 48), video_timestamps="parquet",
                                            device="cpu", cache=False)
        frames, times = stored_frames(ds, VIDEO, 0)
        assert frames.shape == (412, 64, 48, 3) and frames.dtype == np.uint8
        assert np.array_equal(times, ds.episode(0)["action"][1].numpy())
        r = read_lerobot(groot, load_video=False)
    assert VIDEO not in r.episodes[0] and r.extra["videos"] == {}
    with pytest.raises(ValueError, match=r"episodes \[7\]"):
        read_lerobot(groot, episodes=[7], load_video=False)
    with pytest.raises(ValueError, match="video_resize"):
        decode_video(groot / f"videos/chunk-000/{VIDEO}/episode_000000.mp4", resize=(0, 3))


def test_groot_dataset(groot):
    pytest.importorskip("torch")
    pytest.importorskip("pyarrow")
    from robocache.data.dataset import Dataset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = Dataset.from_lerobot(groot, device="cpu", load_video=bool(available_backends()))
    assert len(ds) == 5
    st = ds.streams["observation.state"]
    assert st.values.shape == (2096, 44)
    tab = _direct_table(groot, 2)
    v, t = ds.episode(2)["action"]
    assert np.array_equal(np.asarray(v), np.array(tab.column("action").to_pylist()))
    assert "state.left_hand" in ds.streams


# ----------------------------------------------------------------------------
# PushT zarr (diffusion-policy ReplayBuffer)


@pytest.fixture(scope="module")
def pusht_eps(pusht):
    pytest.importorskip("zarr")
    return read_zarr(pusht)


def test_pusht_episodes(pusht, pusht_eps):
    zarr = pytest.importorskip("zarr")
    z = zarr.open(str(pusht), mode="r")
    ends = z["meta/episode_ends"][:]
    r = pusht_eps
    assert len(r) == 206 and int(ends[-1]) == 25650
    assert np.array_equal(r.extra["episode_ends"], ends)
    lengths = [len(ep["state"][1]) for ep in r.episodes]
    assert np.array_equal(np.cumsum(lengths), ends)
    assert set(r.episodes[0]) == {"action", "img", "keypoint", "n_contacts", "state"}
    assert r.kinds["img"] == "image" and r.episodes[0]["img"][0].dtype == np.float32
    np.testing.assert_array_equal(r.episodes[5]["state"][1], np.arange(lengths[5]) / 10.0)
    for key in ("state", "action", "keypoint", "n_contacts", "img"):
        direct = z[f"data/{key}"][:]
        got = np.concatenate([ep[key][0] for ep in r.episodes])
        assert got.dtype == direct.dtype and np.array_equal(got, direct), key


def test_pusht_zarr_path_equals_fast_path(pusht, pusht_eps):
    slow = read_zarr(pusht, keys=["state", "keypoint"], fast=False, rate=5.0)
    for a, b in zip(slow.episodes, pusht_eps.episodes):
        assert np.array_equal(a["keypoint"][0], b["keypoint"][0])
        assert np.array_equal(a["state"][1], b["state"][1] * 2)
    with pytest.raises(KeyError, match="nope"):
        read_zarr(pusht, keys=["nope"])


def test_pusht_dataset(pusht):
    pytest.importorskip("torch")
    pytest.importorskip("zarr")
    from robocache.data.dataset import Dataset
    ds = Dataset.from_zarr(pusht, keys=["state", "action"], device="cpu")
    assert len(ds) == 206 and ds.streams["state"].values.shape == (25650, 5)


# ----------------------------------------------------------------------------
# robomimic HDF5 (written here)


def _write_robomimic(path, h5py, rng, lengths=(5, 7, 3, 4), control_freq=15):
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "env_kwargs": {"control_freq": control_freq}})
        names = [f"demo_{i}" for i in (0, 1, 10, 2)]  # numeric order is 0, 1, 2, 10
        for name, n in zip(names, lengths):
            g = data.create_group(name)
            g.attrs["num_samples"] = n
            g.create_dataset("obs/robot0_eef_pos", data=rng.standard_normal((n, 3)))
            g.create_dataset("obs/agentview_image", data=rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8))
            g.create_dataset("next_obs/robot0_eef_pos", data=rng.standard_normal((n, 3)))
            g.create_dataset("actions", data=rng.standard_normal((n, 7)).astype(np.float32))
            g.create_dataset("rewards", data=np.zeros(n))
            g.create_dataset("dones", data=(np.arange(n) == n - 1).astype(np.int64))
        f.create_dataset("mask/train", data=np.array([b"demo_10", b"demo_0"]))
        f.create_dataset("mask/valid", data=np.array([b"demo_1", b"demo_2"]))
    return dict(zip(names, lengths))


def test_robomimic(tmp_path, rng):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "demo.hdf5"
    _write_robomimic(path, h5py, rng)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    r = read_robomimic(path)
    assert r.extra["demos"] == ["demo_0", "demo_1", "demo_2", "demo_10"] and r.extra["rate"] == 15.0
    assert set(r.episodes[0]) == {"obs/agentview_image", "obs/robot0_eef_pos", "actions", "rewards", "dones"}
    assert r.kinds["obs/agentview_image"] == "image" and r.kinds["dones"] == "discrete"
    with h5py.File(path, "r") as f:
        for name, ep in zip(r.extra["demos"], r.episodes):
            for key in ("obs/robot0_eef_pos", "obs/agentview_image", "actions", "dones"):
                direct = f[f"data/{name}/{key}"][()]
                assert ep[key][0].dtype == direct.dtype and np.array_equal(ep[key][0], direct)
            np.testing.assert_array_equal(ep["actions"][1], np.arange(len(direct)) / 15.0)
    r = read_robomimic(path, obs_keys=["robot0_eef_pos"], filter_key="train", rate=20.0)
    assert r.extra["demos"] == ["demo_0", "demo_10"] and len(r) == 2
    assert "obs/agentview_image" not in r.episodes[0] and r.rates["actions"] == 20.0
    assert r.episodes[1]["actions"][1][1] == 1 / 20.0
    r = read_robomimic(path, obs_keys=["robot0_eef_pos"], include_next_obs=True)
    assert "next_obs/robot0_eef_pos" in r.episodes[0]
    with pytest.raises(ReaderError, match="no filter key 'test'.*train"):
        read_robomimic(path, filter_key="test")
    with pytest.raises(ReaderError, match="has no 'obs/wrist'"):
        read_robomimic(path, obs_keys=["wrist"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_robomimic_dataset(tmp_path, rng):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("torch")
    from robocache.data.dataset import Dataset
    path = tmp_path / "demo.hdf5"
    lengths = _write_robomimic(path, h5py, rng)
    ds = Dataset.from_robomimic(path, filter_key="valid", device="cpu")
    assert len(ds) == 2 and ds.streams["actions"].values.shape == (lengths["demo_1"] + lengths["demo_2"], 7)


def test_robomimic_inconsistent(tmp_path, rng):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "bad.hdf5"
    _write_robomimic(path, h5py, rng)
    with h5py.File(path, "a") as f:
        del f["data/demo_2/actions"]
        f["data/demo_2/actions"] = np.zeros((9, 7))
    with pytest.raises(ReaderError, match=r"bad.hdf5: data/demo_2/actions has 9 steps"):
        read_robomimic(path)


# ----------------------------------------------------------------------------
# LeRobot v3.0 (written here: two data files, one video file holding every episode)


def _encode_video(path, frames, fps):
    try:
        import av
    except ImportError:
        av = None
    if av is not None:
        with av.open(str(path), "w") as c:
            s = c.add_stream("mpeg4", rate=fps)
            s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
            s.options = {"qscale": "1"}
            for img in frames:
                for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    c.mux(p)
            for p in s.encode():
                c.mux(p)
        return
    cv2 = pytest.importorskip("cv2")
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (frames.shape[2], frames.shape[1]))
    for img in frames:
        w.write(cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    w.release()


def _write_v3(root: Path, rng, lengths=(5, 7, 4), fps=10):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    key = "observation.images.cam"
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    (root / f"videos/{key}/chunk-000").mkdir(parents=True)
    info = {"codebase_version": "v3.0", "fps": fps, "chunks_size": 1000,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": {"observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
                         "action": {"dtype": "float32", "shape": [2]},
                         key: {"dtype": "video", "shape": [32, 32, 3], "info": {"video.fps": fps}}}}
    (root / "meta/info.json").write_text(json.dumps(info))
    files = {0: 0, 1: 0, 2: 1}
    states, rows = {}, {0: [], 1: []}
    g = 0
    for e, n in enumerate(lengths):
        states[e] = rng.standard_normal((n, 3)).astype(np.float32)
        rows[files[e]].append(pa.table({
            "observation.state": pa.array(list(states[e]), type=pa.list_(pa.float32(), 3)),
            "action": pa.array(list(rng.standard_normal((n, 2)).astype(np.float32)), type=pa.list_(pa.float32())),
            "timestamp": np.arange(n) / fps, "frame_index": np.arange(n), "episode_index": np.full(n, e),
            "index": np.arange(g, g + n), "task_index": np.full(n, e % 2)}))
        g += n
    for fi, tabs in rows.items():
        pq.write_table(pa.concat_tables(tabs), root / f"data/chunk-000/file-{fi:03d}.parquet")
    # one video: episode e's frames have brightness 40 * (e + 1)
    frames = np.concatenate([np.full((n, 32, 32, 3), 40 * (e + 1), np.uint8) for e, n in enumerate(lengths)])
    _encode_video(root / f"videos/{key}/chunk-000/file-000.mp4", frames, fps)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) / fps
    ep = pa.table({"episode_index": [0, 1, 2], "tasks": [["push"], ["pull"], ["push"]], "length": list(lengths),
                   "data/chunk_index": [0, 0, 0], "data/file_index": [files[e] for e in range(3)],
                   f"videos/{key}/chunk_index": [0, 0, 0], f"videos/{key}/file_index": [0, 0, 0],
                   f"videos/{key}/from_timestamp": list(starts),
                   f"videos/{key}/to_timestamp": list(starts + np.array(lengths) / fps)})
    pq.write_table(ep, root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": [0, 1], "task": ["push", "pull"]}), root / "meta/tasks.parquet")
    (root / "meta/stats.json").write_text(json.dumps({"action": {"mean": [0.0, 0.0], "std": [1.0, 1.0]}}))
    return key, states


def test_lerobot_v3(tmp_path, rng):
    if not available_backends():
        pytest.skip("no video backend")
    key, states = _write_v3(tmp_path, rng)
    r = read_lerobot(tmp_path)
    ds = robocache.Dataset.from_lerobot(tmp_path, device="cpu", cache=False)
    assert r.extra["version"] == "v3.0" and len(r) == 3
    assert r.tasks == [["push"], ["pull"], ["push"]]
    assert r.feature_names["observation.state"] == ["x", "y", "z"]
    assert r.stats["action"]["std"].tolist() == [1.0, 1.0]
    for e, n in enumerate((5, 7, 4)):
        ep = r.episodes[e]
        assert np.array_equal(ep["observation.state"][0], states[e])
        np.testing.assert_allclose(ep["action"][1], np.arange(n) / 10)
        frames, times = stored_frames(ds, key, e)
        assert frames.shape == (n, 32, 32, 3)
        np.testing.assert_allclose(times, np.arange(n) / 10, atol=1e-6)
        assert abs(frames.mean() - 40 * (e + 1)) < 4, (e, frames.mean())
    r = read_lerobot(tmp_path, episodes=[2], load_video=False)
    assert np.array_equal(r.episodes[0]["observation.state"][0], states[2])


def test_lerobot_v21_episode_stats(groot, tmp_path):
    """v2.1: stats.json replaced by per-episode stats, pooled as LeRobot does."""
    pytest.importorskip("pyarrow")
    root = tmp_path / "v21"
    shutil.copytree(groot, root, ignore=shutil.ignore_patterns("*.mp4"))
    (root / "meta/stats.json").unlink()
    info = json.loads((root / "meta/info.json").read_text())
    info["codebase_version"] = "v2.1"
    info["features"] = {k: v for k, v in info["features"].items() if v["dtype"] != "video"}
    (root / "meta/info.json").write_text(json.dumps(info))
    eps = read_lerobot(root, load_video=False).episodes
    with open(root / "meta/episodes_stats.jsonl", "w") as f:
        for e, ep in enumerate(eps):
            a = ep["action"][0]
            f.write(json.dumps({"episode_index": e, "stats": {"action": {
                "min": a.min(0).tolist(), "max": a.max(0).tolist(), "mean": a.mean(0).tolist(),
                "std": a.std(0).tolist(), "count": [len(a)]}}}) + "\n")
    r = read_lerobot(root, load_video=False)
    allact = np.concatenate([ep["action"][0] for ep in eps])
    np.testing.assert_allclose(r.stats["action"]["mean"], allact.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r.stats["action"]["std"], allact.std(0), rtol=1e-6, atol=1e-9)
    assert np.array_equal(r.stats["action"]["min"], allact.min(0))


# ----------------------------------------------------------------------------
# corrupted copies: clear errors naming the file; originals untouched (module fixtures check)


@pytest.fixture
def groot_copy(groot, tmp_path):
    pytest.importorskip("pyarrow")
    dst = tmp_path / "groot"
    shutil.copytree(groot, dst)
    return dst


def test_truncated_parquet(groot_copy):
    p = groot_copy / "data/chunk-000/episode_000002.parquet"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(ReaderError, match=r"episode_000002\.parquet: cannot read parquet"):
        read_lerobot(groot_copy, load_video=False)


def test_missing_parquet(groot_copy):
    (groot_copy / "data/chunk-000/episode_000003.parquet").unlink()
    with pytest.raises(ReaderError, match=r"episode_000003\.parquet: parquet file not found \(1 of 5 episodes lack "
                       r"their files, e\.g\. episodes \[3\]\); load the 4 present ones with episodes=\[0, 1, 2, 4\], "
                       r"or pass missing_files='skip'"):
        read_lerobot(groot_copy, load_video=False)
    with pytest.warns(UserWarning, match="skipping 1 of 5 episodes whose files are missing"):
        eps = read_lerobot(groot_copy, load_video=False, missing_files="skip")
    assert eps.extra["episode_index"] == [0, 1, 2, 4]
    with pytest.raises(ValueError, match="missing_files must be"):
        read_lerobot(groot_copy, load_video=False, missing_files="ignore")


def test_unsorted_timestamps(groot_copy):
    import pyarrow as pa
    import pyarrow.parquet as pq
    p = groot_copy / "data/chunk-000/episode_000001.parquet"
    tab = pq.read_table(p)
    ts = tab.column("timestamp").to_numpy().copy()
    ts[[10, 11]] = ts[[11, 10]]
    pq.write_table(tab.set_column(tab.schema.get_field_index("timestamp"), "timestamp", pa.array(ts)), p)
    with pytest.raises(ReaderError, match=r"episode_000001\.parquet, episode 1: timestamps are not sorted: "
                                          r"timestamp\[11\]"):
        read_lerobot(groot_copy, load_video=False)


def test_missing_info_json(groot_copy):
    (groot_copy / "meta/info.json").unlink()
    with pytest.raises(ReaderError, match=r"meta/info\.json: file not found"):
        read_lerobot(groot_copy)


def test_corrupt_meta(groot_copy):
    (groot_copy / "meta/episodes.jsonl").write_text('{"episode_index": 0, "length": 4\n')
    with pytest.raises(ReaderError, match=r"episodes\.jsonl: line 1 is not valid JSON"):
        read_lerobot(groot_copy, load_video=False)


@pytest.mark.parametrize("backend", ["pyav", "opencv"])
def test_truncated_mp4(groot_copy, backend):
    pytest.importorskip({"pyav": "av", "opencv": "cv2"}[backend])
    p = groot_copy / f"videos/chunk-000/{VIDEO}/episode_000004.mp4"
    p.write_bytes(p.read_bytes()[: p.stat().st_size * 3 // 4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ReaderError, match=r"episode_000004\.mp4"):
            robocache.Dataset.from_lerobot(groot_copy, video_backend=backend, device="cpu", cache=False)


def test_missing_one_mp4(groot_copy):
    if not available_backends():
        pytest.skip("no video backend")
    (groot_copy / f"videos/chunk-000/{VIDEO}/episode_000002.mp4").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ReaderError, match=r"episode_000002\.mp4: video file not found .*episodes=\[0, 1, 3, 4\]"):
            read_lerobot(groot_copy)
        ds = robocache.Dataset.from_lerobot(groot_copy, missing_files="skip", device="cpu")
    assert ds.episode_index.tolist() == [0, 1, 3, 4] and len(ds.streams[VIDEO].frames) == sum(
        e.lengths[VIDEO] for e in ds.episodes)


def test_truncated_hdf5(tmp_path, rng):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "demo.hdf5"
    _write_robomimic(path, h5py, rng, lengths=(400, 300, 200, 100))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ReaderError, match=r"demo\.hdf5: cannot (open|read) HDF5"):
        read_robomimic(path)
    with pytest.raises(ReaderError, match="nothere.hdf5: file not found"):
        read_robomimic(tmp_path / "nothere.hdf5")


@pytest.mark.parametrize("fast", [True, False])
def test_corrupt_zarr_chunk(pusht_copy, fast):
    p = pusht_copy / "data/state/40.0"
    raw = bytearray(p.read_bytes())
    raw[16:] = bytes(len(raw) - 16)  # header kept, payload zeroed
    p.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(ReaderError, match=r"data/state(/40\.0: cannot decode chunk 40|: cannot read chunk 40)"):
        read_zarr(pusht_copy, keys=["state"], fast=fast)


@pytest.mark.parametrize("fast", [True, False])
def test_missing_zarr_chunk(pusht_copy, fast):
    (pusht_copy / "data/action/7.0").unlink()
    with pytest.raises(ReaderError, match=r"data/action/7\.0: chunk file of .* is missing"):
        read_zarr(pusht_copy, keys=["action"], fast=fast)


def test_zarr_not_a_replay_buffer(pusht_copy):
    shutil.rmtree(pusht_copy / "meta")
    with pytest.raises(ReaderError, match="no meta/episode_ends"):
        read_zarr(pusht_copy)


def test_missing_extra_message(monkeypatch, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "h5py", None)  # import h5py now raises ImportError
    # the command from a package index and the one that works from a checkout (robocache is not on PyPI)
    with pytest.raises(ImportError, match=r'pip install "robocache\[robomimic\]", or from a checkout of '
                                          r'robocache: pip install -e "\.\[robomimic\]" \(or only it: pip install h5py\)'):
        read_robomimic(tmp_path / "x.hdf5")
