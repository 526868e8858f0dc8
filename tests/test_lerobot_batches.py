"""LeRobot's batch contract (DESIGN.md §3d): ``DataLoader(ds, B, delta_timestamps=dt)`` gives what
``default_collate`` of ``LeRobotDataset(..., delta_timestamps=dt)`` items gives for the same samples.

The reference here is built from the parquet rows and PyAV-decoded frames with LeRobot's rules, not from
robocache: an item is the row at the sample's dataset-wide ``index``; a key of ``dt`` takes the rows
``index + round(d * fps)`` clamped into the episode, padded where outside; a video frame is the one nearest
to ``from_timestamp + timestamp`` of its row (the earliest on a tie), as float32 CHW / 255.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

av = pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from lerobot_forge import convert_v21_to_v30  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
CAM = "observation.images.top"
DT = {CAM: [-0.1, 0.0], "observation.state": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]}


@pytest.fixture(scope="module")
def v30(cr5_v21, tmp_path_factory):
    root = tmp_path_factory.mktemp("v30") / "cr5"
    convert_v21_to_v30(cr5_v21, root, [0, 1, 2, 3, 4, 5], per_data_file=2, per_video_file=3)
    return root


def load(path, **kw):
    kw.setdefault("device", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(path, **kw)


class Reference:
    """LeRobot's items for a LeRobot folder (v2.1 or v3.0), from pyarrow and PyAV alone."""

    def __init__(self, root):
        import json
        info = json.loads((root / "meta/info.json").read_text())
        self.fps = float(info["fps"])
        self.features = info["features"]
        v3 = info["codebase_version"].startswith("v3")
        files = sorted((root / "data").glob("**/*.parquet"))
        rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pydict()
        self.rows = {k: np.asarray(v) for k, v in rows.items()}
        order = np.argsort(self.rows["index"])
        self.rows = {k: v[order] for k, v in self.rows.items()}
        self.at = {int(i): r for r, i in enumerate(self.rows["index"])}
        ep = self.rows["episode_index"]
        self.bounds = {int(e): (int(self.rows["index"][ep == e].min()), int(self.rows["index"][ep == e].max()) + 1)
                       for e in np.unique(ep)}
        if v3:
            meta = pa.concat_tables([pq.read_table(f) for f in sorted((root / "meta/episodes").glob("**/*.parquet"))])
            meta = meta.to_pydict()
            tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
            text = tasks.get("task") or tasks["__index_level_0__"]
            self.tasks = dict(zip(tasks["task_index"], text))
            self.video = {int(e): (root / f"videos/{CAM}/chunk-000/file-{f:03d}.mp4", float(t0))
                          for e, f, t0 in zip(meta["episode_index"], meta[f"videos/{CAM}/file_index"],
                                              meta[f"videos/{CAM}/from_timestamp"])}
        else:
            self.tasks = {int(json.loads(x)["task_index"]): json.loads(x)["task"]
                          for x in (root / "meta/tasks.jsonl").read_text().splitlines() if x.strip()}
            self.video = {e: (root / info["video_path"].format(episode_chunk=0, video_key=CAM, episode_index=e), 0.0)
                          for e in self.bounds}
        self._frames = {}

    def frames(self, path):
        if path not in self._frames:
            with av.open(str(path)) as c:
                got = [(f.time, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
            self._frames[path] = (np.array([t for t, _ in got]), np.stack([a for _, a in got]))
        return self._frames[path]

    def frame(self, episode, ts):
        path, t0 = self.video[episode]
        times, imgs = self.frames(path)
        k = int(np.argmin(np.abs(times - (t0 + ts))))          # the first of equal distances
        assert abs(times[k] - (t0 + ts)) < 1e-4
        return torch.from_numpy(imgs[k]).permute(2, 0, 1).to(torch.float32) / 255

    def item(self, index, dt):
        r = self.at[index]
        e = int(self.rows["episode_index"][r])
        lo, hi = self.bounds[e]
        out = {}
        for key, feat in self.features.items():
            if key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
                continue
            steps = [round(d * self.fps) for d in dt[key]] if key in dt else [0]
            q = [min(max(index + s, lo), hi - 1) for s in steps]
            if feat["dtype"] == "video":
                vals = torch.stack([self.frame(e, float(self.rows["timestamp"][self.at[i]])) for i in q])
            else:
                dtype = np.dtype(feat["dtype"])           # as LeRobot's hf dataset types the column
                vals = torch.stack([torch.as_tensor(np.asarray(self.rows[key][self.at[i]], dtype)) for i in q])
            if key in dt:
                out[key] = vals
                out[f"{key}_is_pad"] = torch.tensor([not lo <= index + s < hi for s in steps])
            else:
                out[key] = vals[0]
        out["timestamp"] = torch.tensor(self.rows["timestamp"][r], dtype=torch.float32)
        for k in ("frame_index", "episode_index", "index", "task_index"):
            out[k] = torch.tensor(int(self.rows[k][r]))
        out["task"] = self.tasks[int(self.rows["task_index"][r])]
        return out

    def batch(self, indices, dt):
        from torch.utils.data import default_collate
        return default_collate([self.item(int(i), dt) for i in indices])


def assert_same(got, want):
    assert set(got) == set(want), set(got) ^ set(want)
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
            assert torch.equal(g.cpu(), w), (k, (g.cpu().float() - w.float()).abs().max())
            assert g.is_contiguous(), k
        else:
            assert g == w, k


@pytest.mark.parametrize("layout", ["v2.1", "v3.0"])
def test_batches_are_lerobots(cr5_v21, v30, layout):
    root = cr5_v21 if layout == "v2.1" else v30
    eps = [1, 3, 4] if layout == "v2.1" else [0, 2, 5]
    ds = load(root, episodes=eps)
    ref = Reference(root)
    loader = DataLoader(ds, 8, shuffle=True, seed=2, delta_timestamps=DT)
    seen = 0
    for k, b in enumerate(loader):
        # index is dataset-wide (the episodes' own rows in the whole set), whatever was loaded
        assert_same(b, ref.batch(b["index"].tolist(), DT))
        seen += len(b["index"])
        if k == 4:
            break
    assert seen == 40
    # every sample of the epoch, once: LeRobot's dataset length is its frames
    all_idx = sorted(i for b in DataLoader(ds, 64, delta_timestamps={"action": [0.0]}) for i in b["index"].tolist())
    assert all_idx == sorted(i for e in eps for i in range(*ref.bounds[e]))


def test_episode_boundaries_pad_as_lerobot(cr5_v21):
    """Samples at the first and last frames of episodes: clamped rows, padded steps."""
    ds = load(cr5_v21, episodes=[2, 6], load_video=False)
    ref = Reference(cr5_v21)
    lo2, hi2 = ref.bounds[2]
    lo6, hi6 = ref.bounds[6]
    want = [lo2, lo2 + 1, hi2 - 1, lo6, hi6 - 2, hi6 - 1]
    pos = {i: k for k, i in enumerate(list(range(lo2, hi2)) + list(range(lo6, hi6)))}
    dt = {"observation.state": [-0.3, -0.1, 0.0], "action": [0.0, 0.1, 0.5, 1.0]}
    b = next(iter(DataLoader(ds, len(want), sampler=[pos[i] for i in want], delta_timestamps=dt)))
    r = ref.batch(want, dt)
    r.pop(CAM)
    assert_same(b, r)
    assert b["action_is_pad"][-1].tolist() == [False, True, True, True]


def test_shards_and_subsets_keep_the_dataset_wide_index(cr5_v21):
    whole = load(cr5_v21, episodes=range(6), load_video=False)
    ref = Reference(cr5_v21)
    for r in range(2):
        part = load(cr5_v21, episodes=range(6), load_video=False, shard_episodes=(r, 2))
        for b in DataLoader(part, 32, shuffle=True, seed=1, delta_timestamps={"action": [0.0, 0.1]}, rank=r,
                            world_size=2, shard_episodes=True):
            want = ref.batch(b["index"].tolist(), {"action": [0.0, 0.1]})
            want.pop(CAM)
            assert_same(b, want)
    assert whole.meta.first_index == {e: ref.bounds[e][0] for e in range(6)}


def test_off_grid_deltas_raise_naming_the_key_and_values(cr5_v21):
    ds = load(cr5_v21, episodes=[0], load_video=False)
    with pytest.raises(ValueError, match=r"off the 1/10 s frame grid .*'action': \[0\.05, 0\.33\]"):
        DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.05, 0.1, 0.33]})
    DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.10004]})      # within LeRobot's 1e-4 s
    with pytest.raises(ValueError, match=r"'action'"):
        DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.1002]})
    DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.1002]}, tolerance_s=1e-3)
    with pytest.raises(ValueError, match=r"\['actions'\] are not features of this dataset"):
        DataLoader(ds, 4, delta_timestamps={"actions": [0.0]})
    with pytest.raises(TypeError, match=r"delta_timestamps\['action'\]: expected a list"):
        DataLoader(ds, 4, delta_timestamps={"action": 0.1})


def test_windows_add_keys_to_lerobots(cr5_v21):
    ds = load(cr5_v21, episodes=[0], load_video=False)
    b = next(iter(DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.1]},
                             windows={"state_norm": Window("observation.state", normalize="mean_std")})))
    assert b["action"].shape == (4, 2, 7) and b["observation.state"].shape == (4, 6)
    assert b["state_norm"].shape == (4, 1, 6)


def test_lerobot_metadata(cr5_v21, v30):
    ds = load(v30, episodes=[1, 2])
    import json
    info = json.loads((v30 / "meta/info.json").read_text())
    assert ds.fps == 10.0 and ds.meta.info == info and ds.features == info["features"]
    assert ds.camera_keys == [CAM] and ds.num_episodes == 2
    item = robocache.lerobot_item(ds, 3, {"action": [0.0, 0.1]})
    ref = Reference(v30).item(int(Reference(v30).bounds[1][0]) + 3, {"action": [0.0, 0.1]})
    assert_same({k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in item.items()}, ref)


def test_statistics_are_the_datasets(cr5_v21, v30):
    """Normalization uses the source's dataset-level statistics (meta/stats.json, or v2.1's
    episodes_stats.jsonl pooled over every episode of the set), whatever episodes or rank: never the
    loaded episodes' own."""
    import json
    stats = json.loads((v30 / "meta/stats.json").read_text())["observation.state"]
    a = load(v30, episodes=[0], load_video=False)
    b = load(v30, episodes=[3, 4, 5], load_video=False)
    for ds in (a, b):
        s = ds.streams["observation.state"]
        assert s.stats_source == "dataset"
        np.testing.assert_array_equal(s.stats["mean"].cpu().numpy(), np.asarray(stats["mean"]))
        x = next(iter(DataLoader(ds, 8, windows={"s": Window("observation.state", normalize="mean_std")})))["s"]
        raw = next(iter(DataLoader(ds, 8, windows={"s": Window("observation.state")})))["s"]
        want = ((raw.double() - torch.tensor(stats["mean"])) / torch.tensor(stats["std"])).float()
        torch.testing.assert_close(x, want)
    assert "dataset" in repr(b)
    # a source without statistics: computed over what is loaded, and repr says so
    synth = robocache.Dataset.from_episodes([{"x": (np.arange(6.0)[:, None], np.arange(6) / 10)}], device="cpu")
    assert synth.streams["x"].stats_source == "computed" and "computed" in repr(synth)
