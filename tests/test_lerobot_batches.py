"""LeRobot's batch contract (DESIGN.md §3d): ``DataLoader(ds, B, delta_timestamps=dt)`` gives what
``default_collate`` of ``LeRobotDataset(..., delta_timestamps=dt)`` items gives for the same samples.

The expected items are built here with LeRobot's rules, never from robocache: an item is the row at the
sample's dataset-wide ``index``; a key of ``dt`` takes the rows ``index + round(d * fps)`` clamped into the
episode, ``{key}_is_pad`` where outside; a video frame is float32 CHW / 255; the statistics are the whole set's.
What the rules are applied to:

- every run, sets generated here (``lerobot_forge``): a v2.1 set with a camera, and a v3.0 copy of some of its
  episodes in another order, several to a data file and to an mp4. The rows are the arrays the forge wrote
  (the dataset-wide index: the episodes' rows back to back in the set's order), the statistics NumPy's over
  every episode's rows, a frame the one PyAV decodes at the row's position in the episode's own v2.1 mp4
  (itself checked to show the picture the forge drew for that row: ``test_forged_frames_are_their_pictures``);
  so the v3.0 set is held to what was written, not to a reading of its layout.
- the project's CR5 sets (../shared; skipped without them), real data as an extra layer: rows from the parquet
  files, frames decoded by PyAV nearest to ``from_timestamp + timestamp`` (the earliest on a tie).

LeRobot's own ``LeRobotDataset`` is the oracle in test_lerobot_contract.py, where LeRobot is installed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from lerobot_forge import (CAMERA, TASKS, V21_VIDEO, assert_lerobot_batch, convert_v21_to_v30,  # noqa: E402
                           picture, pooled_stats, write_lerobot)
from robocache import DataLoader, Window  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
CAM = CAMERA                     # "observation.images.top", as in the CR5 sets
DT = {CAM: [-0.1, 0.0], "observation.state": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]}
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")

#: the generated set: 8 episodes at 10 fps, a 24 x 32 camera; its v3.0 copy holds 6 of them, reordered
FORGED_LENGTHS = (12, 17, 9, 14, 20, 11, 15, 8)
FORGED_V30 = [5, 0, 3, 1, 6, 2]
SIZE = (24, 32)


# ---------------------------------------------------------------------------------------------
# the expected items: LeRobot's rules over what a set holds


@dataclass
class Episode:
    first: int                               # the dataset-wide index of its row 0
    rows: dict                               # column -> [n, ...]: the features and the bookkeeping columns
    task: list                               # each row's task text
    frame: Callable[[int], np.ndarray]       # row -> the frame LeRobot shows for it, [H, W, 3] uint8


@dataclass
class Truth:
    """A set as LeRobot sees it: its features (info.json), fps and episodes by their episode_index."""
    name: str
    root: Path
    fps: float
    features: dict
    episodes: dict
    stats: dict = field(default_factory=dict)      # feature -> {"mean", "std"}: the whole set's

    def bounds(self, e):
        ep = self.episodes[e]
        return ep.first, ep.first + len(ep.task)

    def episode_of(self, index):
        for e, ep in self.episodes.items():
            if ep.first <= index < ep.first + len(ep.task):
                return e, ep
        raise KeyError(f"{self.name}: no episode holds index {index}")

    def item(self, index, dt):
        e, ep = self.episode_of(index)
        f, n = index - ep.first, len(ep.task)
        out = {}
        for key, feat in self.features.items():
            if key in BOOKKEEPING:
                continue
            steps = [round(d * self.fps) for d in dt[key]] if key in dt else [0]
            rows = [min(max(f + s, 0), n - 1) for s in steps]
            if feat["dtype"] == "video":
                vals = torch.stack([torch.from_numpy(ep.frame(r)).permute(2, 0, 1).to(torch.float32) / 255
                                    for r in rows])
            else:                                      # typed as LeRobot's hf dataset types the column
                vals = torch.stack([torch.as_tensor(np.asarray(ep.rows[key][r], feat["dtype"])) for r in rows])
            if key in dt:
                out[key] = vals
                out[f"{key}_is_pad"] = torch.tensor([not 0 <= f + s < n for s in steps])
            else:
                out[key] = vals[0]
        out["timestamp"] = torch.tensor(ep.rows["timestamp"][f], dtype=torch.float32)
        out["frame_index"] = torch.tensor(int(ep.rows["frame_index"][f]))
        out["episode_index"] = torch.tensor(e)
        out["index"] = torch.tensor(index)
        out["task_index"] = torch.tensor(int(ep.rows["task_index"][f]))
        out["task"] = ep.task[f]
        return out

    def batch(self, indices, dt):
        from torch.utils.data import default_collate
        return default_collate([self.item(int(i), dt) for i in indices])


class Decoded:
    """An mp4's frames and times as PyAV decodes them, in presentation order, each file once."""

    def __init__(self):
        self.files = {}

    def __call__(self, path):
        if path not in self.files:
            with av.open(str(path)) as c:
                got = sorted((f.time, f.to_ndarray(format="rgb24")) for f in c.decode(video=0))
            self.files[path] = (np.array([t for t, _ in got]), np.stack([a for _, a in got]))
        return self.files[path]

    def nth(self, path, k):
        return self(path)[1][k]

    def nearest(self, path, t):
        times, images = self(path)
        k = int(np.argmin(np.abs(times - t)))          # the first of equal distances
        assert abs(times[k] - t) < 1e-4, (path, t, times[k])
        return images[k]


def forged_truth(name, root, written, order, decoded) -> Truth:
    """The generated v2.1 set (``order``: all its episodes), or its v3.0 copy of ``order``, from the arrays
    written: episode k of the set is v2.1's ``order[k]``, its rows follow the previous episodes' rows."""
    info = json.loads((root / "meta/info.json").read_text())
    v21 = written["root"]
    fps = float(written["fps"])
    episodes, first = {}, 0
    for k, e in enumerate(order):
        n = len(written["state"][e])
        path = v21 / V21_VIDEO.format(episode_chunk=0, video_key=CAM, episode_index=e)
        rows = {"observation.state": written["state"][e], "action": written["action"][e],
                "timestamp": (np.arange(n) / fps).astype(np.float32), "frame_index": np.arange(n),
                "task_index": np.full(n, written["task_index"][e])}
        episodes[k] = Episode(first, rows, [TASKS[written["task_index"][e]]] * n,
                              lambda r, path=path: decoded.nth(path, r))
        first += n
    every = {key: np.concatenate([ep.rows[key] for ep in episodes.values()]).astype(np.float64)
             for key in ("observation.state", "action")}
    stats = {key: {"mean": x.mean(0), "std": x.std(0)} for key, x in every.items()}
    return Truth(name, root, fps, info["features"], episodes, stats)


def files_truth(name, root, decoded) -> Truth:
    """A set as its files hold it: rows from the parquet files, tasks from the task table, frames nearest to
    ``from_timestamp + timestamp`` in the episode's mp4 (v2.1: its own, from 0), statistics from stats.json."""
    info = json.loads((root / "meta/info.json").read_text())
    fps = float(info["fps"])
    rows = pa.concat_tables([pq.read_table(f) for f in sorted((root / "data").glob("**/*.parquet"))]).to_pydict()
    rows = {k: np.asarray(v) for k, v in rows.items()}
    order = np.argsort(rows["index"])
    rows = {k: v[order] for k, v in rows.items()}
    if info["codebase_version"].startswith("v3"):
        meta = pa.concat_tables([pq.read_table(f) for f in sorted((root / "meta/episodes").glob("**/*.parquet"))])
        meta = meta.to_pydict()
        tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
        text = dict(zip(tasks["task_index"], tasks.get("task") or tasks["__index_level_0__"]))
        video = {int(e): (root / f"videos/{CAM}/chunk-000/file-{f:03d}.mp4", float(t0))
                 for e, f, t0 in zip(meta["episode_index"], meta[f"videos/{CAM}/file_index"],
                                     meta[f"videos/{CAM}/from_timestamp"])}
    else:
        text = {int(json.loads(x)["task_index"]): json.loads(x)["task"]
                for x in (root / "meta/tasks.jsonl").read_text().splitlines() if x.strip()}
        video = {int(e): (root / info["video_path"].format(episode_chunk=0, video_key=CAM, episode_index=int(e)), 0.0)
                 for e in np.unique(rows["episode_index"])}
    episodes = {}
    for e in np.unique(rows["episode_index"]):
        at = rows["episode_index"] == e
        ep = {k: v[at] for k, v in rows.items()}
        path, t0 = video[int(e)]
        at_time = lambda r, ep=ep, path=path, t0=t0: decoded.nearest(path, t0 + float(ep["timestamp"][r]))  # noqa: E731
        episodes[int(e)] = Episode(int(ep["index"][0]), ep, [text[int(i)] for i in ep["task_index"]], at_time)
        assert np.array_equal(ep["index"], np.arange(ep["index"][0], ep["index"][0] + at.sum()))
    if (root / "meta/stats.json").is_file():
        stats = json.loads((root / "meta/stats.json").read_text())
    else:                              # v2.1: every episode's statistics pooled, as LeRobot pools them
        stats = pooled_stats([json.loads(x)["stats"] for x in (root / "meta/episodes_stats.jsonl").read_text()
                              .splitlines() if x.strip()])
    stats = {k: {s: np.asarray(v[s]) for s in ("mean", "std")} for k, v in stats.items()
             if k in ("observation.state", "action")}
    return Truth(name, root, fps, info["features"], episodes, stats)


# ---------------------------------------------------------------------------------------------
# the sets


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    """The generated v2.1 set and what was written into it (a fresh seed each run: ROBOCACHE_TEST_SEED replays)."""
    seed = fresh_seed(4)
    root = tmp_path_factory.mktemp(f"forged-seed{seed}") / "v21"
    written = write_lerobot(root, np.random.default_rng(seed), lengths=FORGED_LENGTHS, camera=SIZE, stats=True)
    return {**written, "root": root, "fps": 10.0, "seed": seed}


@pytest.fixture(scope="module")
def forged_v30(forged):
    root = forged["root"].parent / "v30"
    convert_v21_to_v30(forged["root"], root, FORGED_V30, per_data_file=2, per_video_file=3)
    return root


@pytest.fixture(scope="module")
def cr5_converted(cr5_v21, tmp_path_factory):
    root = tmp_path_factory.mktemp("v30") / "cr5"
    convert_v21_to_v30(cr5_v21, root, [0, 1, 2, 3, 4, 5], per_data_file=2, per_video_file=3)
    return root


@dataclass
class Case:
    truth: Truth
    pick: list           # episodes a test loads (their frames: at least 40)
    edges: list          # two episodes whose first and last frames a test samples
    six: list            # six episodes a test shards between two ranks


@pytest.fixture(scope="module")
def decoded():
    return Decoded()


SETS = ["forged-v2.1", "forged-v3.0", "cr5-v2.1", "cr5-v3.0"]


@pytest.fixture(scope="module", params=SETS)
def case(request, decoded):
    name = request.param
    if name == "forged-v2.1":
        f = request.getfixturevalue("forged")
        return Case(forged_truth(name, f["root"], f, range(len(FORGED_LENGTHS)), decoded), [1, 3, 4], [2, 6],
                    [0, 1, 2, 3, 4, 5])
    if name == "forged-v3.0":
        f = request.getfixturevalue("forged")
        root = request.getfixturevalue("forged_v30")
        return Case(forged_truth(name, root, f, FORGED_V30, decoded), [0, 2, 4], [1, 5], [0, 1, 2, 3, 4, 5])
    if name == "cr5-v2.1":
        return Case(files_truth(name, request.getfixturevalue("cr5_v21"), decoded), [1, 3, 4], [2, 6],
                    [0, 1, 2, 3, 4, 5])
    return Case(files_truth(name, request.getfixturevalue("cr5_converted"), decoded), [0, 2, 5], [1, 4],
                [0, 1, 2, 3, 4, 5])


def load(path, **kw):
    kw.setdefault("device", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(path, **kw)


# ---------------------------------------------------------------------------------------------
# the pixel oracle of the generated sets


def test_forged_frames_are_their_pictures(forged, decoded):
    """Each decoded frame of the generated mp4s shows the picture drawn for its row: red says which row, green
    rises along the width and blue along the height (so a frame another row's, or transposed, cannot pass)."""
    for e, n in enumerate(FORGED_LENGTHS):
        path = forged["root"] / V21_VIDEO.format(episode_chunk=0, video_key=CAM, episode_index=e)
        times, images = decoded(path)
        assert len(images) == n and images.shape[1:] == (*SIZE, 3), (path, images.shape)
        np.testing.assert_allclose(times, np.arange(n) / forged["fps"], atol=1e-6)
        for f, img in enumerate(images):
            drawn = picture(e, f, SIZE).astype(np.int16)
            assert np.abs(img - drawn).mean() < 3, (path, f, np.abs(img - drawn).mean())
            assert round((img[..., 0].mean() - 20) / 9) == f, (path, f)


# ---------------------------------------------------------------------------------------------
# batches


def test_batches_are_lerobots(case):
    truth = case.truth
    ds = load(truth.root, episodes=case.pick)
    loader = DataLoader(ds, 8, shuffle=True, seed=2, delta_timestamps=DT)
    seen = 0
    for k, b in enumerate(loader):
        # index is dataset-wide (the episodes' own rows in the whole set), whatever was loaded
        assert_lerobot_batch(b, truth.batch(b["index"].tolist(), DT), f"{truth.name}, batch {k}")
        seen += len(b["index"])
        if k == 4:
            break
    assert seen == 40
    # every sample of the epoch, once: LeRobot's dataset length is its frames
    all_idx = sorted(i for b in DataLoader(ds, 64, delta_timestamps={"action": [0.0]}) for i in b["index"].tolist())
    assert all_idx == sorted(i for e in case.pick for i in range(*truth.bounds(e)))


def test_episode_boundaries_pad_as_lerobot(case):
    """Samples at the first and last frames of episodes: clamped rows, padded steps."""
    truth = case.truth
    a, b = case.edges
    ds = load(truth.root, episodes=case.edges, load_video=False)
    lo_a, hi_a = truth.bounds(a)
    lo_b, hi_b = truth.bounds(b)
    want = [lo_a, lo_a + 1, hi_a - 1, lo_b, hi_b - 2, hi_b - 1]
    pos = {i: k for k, i in enumerate(list(range(lo_a, hi_a)) + list(range(lo_b, hi_b)))}
    dt = {"observation.state": [-0.3, -0.1, 0.0], "action": [0.0, 0.1, 0.5, 1.0]}
    got = next(iter(DataLoader(ds, len(want), sampler=[pos[i] for i in want], delta_timestamps=dt)))
    ref = truth.batch(want, dt)
    ref.pop(CAM)
    assert_lerobot_batch(got, ref, truth.name)
    assert got["action_is_pad"][-1].tolist() == [False, True, True, True]
    assert got["observation.state_is_pad"][0].tolist() == [True, True, False]


def test_shards_and_subsets_keep_the_dataset_wide_index(case):
    truth = case.truth
    whole = load(truth.root, episodes=case.six, load_video=False)
    dt = {"action": [0.0, 0.1]}
    seen = []
    for r in range(2):
        part = load(truth.root, episodes=case.six, load_video=False, shard_episodes=(r, 2))
        for b in DataLoader(part, 32, shuffle=True, seed=1, delta_timestamps=dt, rank=r, world_size=2,
                            shard_episodes=True):
            want = truth.batch(b["index"].tolist(), dt)
            want.pop(CAM)
            assert_lerobot_batch(b, want, f"{truth.name}, rank {r}")
            seen += b["index"].tolist()
    assert set(seen) == {i for e in case.six for i in range(*truth.bounds(e))}      # both ranks: every sample
    assert whole.meta.first_index == {e: truth.bounds(e)[0] for e in case.six}


def test_windows_add_keys_to_lerobots(case):
    truth = case.truth
    ds = load(truth.root, episodes=case.pick[:1], load_video=False)
    b = next(iter(DataLoader(ds, 4, delta_timestamps={"action": [0.0, 0.1]},
                             windows={"state_norm": Window("observation.state", normalize="mean_std")})))
    state, action = (truth.features[k]["shape"][0] for k in ("observation.state", "action"))
    assert b["action"].shape == (4, 2, action) and b["observation.state"].shape == (4, state)
    assert b["state_norm"].shape == (4, 1, state) and b["state_norm_is_pad"].shape == (4, 1)
    want = truth.batch(b["index"].tolist(), {"action": [0.0, 0.1]})
    want.pop(CAM)
    assert_lerobot_batch({k: v for k, v in b.items() if not k.startswith("state_norm")}, want, truth.name)


def test_off_grid_deltas_raise_naming_the_key_and_values(forged):
    ds = load(forged["root"], episodes=[0], load_video=False)
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


# ---------------------------------------------------------------------------------------------
# metadata and statistics


def test_lerobot_metadata(case):
    truth = case.truth
    eps = case.edges
    ds = load(truth.root, episodes=eps)
    info = json.loads((truth.root / "meta/info.json").read_text())
    assert ds.fps == truth.fps and ds.meta.info == info and ds.features == info["features"]
    assert ds.camera_keys == [CAM] and ds.num_episodes == 2
    dt = {"action": [0.0, 0.1]}
    item = robocache.lerobot_item(ds, 3, dt)
    want = truth.item(truth.bounds(eps[0])[0] + 3, dt)
    item = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in item.items()}   # a view's
    assert_lerobot_batch(item, want, truth.name)


def test_statistics_are_the_datasets(case):
    """Normalization uses the set's statistics (meta/stats.json, or v2.1's episodes_stats.jsonl pooled over
    every episode of the set), whatever episodes or rank are loaded: never the loaded episodes' own. For the
    generated sets they are NumPy's over every row written (of the episodes the set holds)."""
    truth = case.truth
    want = truth.stats["observation.state"]
    few = case.edges[:1]
    rank1 = {"rank": 1, "world_size": 2, "shard_episodes": True}
    for ds, kw in ((load(truth.root, episodes=few, load_video=False), {}),
                   (load(truth.root, episodes=case.six[3:], load_video=False), {}),
                   (load(truth.root, episodes=case.six, load_video=False, shard_episodes=(1, 2)), rank1)):
        s = ds.streams["observation.state"]
        assert s.stats_source == "dataset" and "dataset" in repr(ds)
        np.testing.assert_allclose(s.stats["mean"].cpu().numpy(), want["mean"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(s.stats["std"].cpu().numpy(), want["std"], rtol=1e-6)
        x = next(iter(DataLoader(ds, 8, windows={"s": Window("observation.state", normalize="mean_std")}, **kw)))["s"]
        raw = next(iter(DataLoader(ds, 8, windows={"s": Window("observation.state")}, **kw)))["s"]
        expect = ((raw.double() - torch.tensor(want["mean"])) / torch.tensor(want["std"])).float()
        torch.testing.assert_close(x, expect)
    # the loaded episodes' own statistics differ (else this test could not tell them apart)
    own = np.concatenate([truth.episodes[e].rows["observation.state"] for e in few]).astype(np.float64)
    assert np.abs(own.mean(0) - want["mean"]).max() > 1e-3


def test_statistics_without_a_source_are_computed():
    """A source without statistics: computed over what is loaded, and repr says so."""
    synth = robocache.Dataset.from_episodes([{"x": (np.arange(6.0)[:, None], np.arange(6) / 10)}], device="cpu")
    assert synth.streams["x"].stats_source == "computed" and "computed" in repr(synth)
