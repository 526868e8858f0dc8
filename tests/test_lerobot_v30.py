"""LeRobot v3.0 as a first-class source: many episodes per parquet and per mp4, each episode the span
``[from_timestamp, to_timestamp)`` of a shared mp4, through the same video path, tiers and cache as v2.1.

Two kinds of v3.0 sets: ``cr5_v30`` (../shared/data, written by LeRobot 0.4.4's recording API: re-encoded
frames, a task change mid-episode), and copies of ``cr5_flashdrive_av1`` episodes converted here as
LeRobot's v2.1 -> v3.0 converter does (packets copied, so every frame decodes bit for bit as in v2.1:
batches of the two layouts must be equal).
"""

from __future__ import annotations

import json
import re
import shutil
import warnings

import numpy as np
import pytest

av = pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from pairs import paired  # noqa: E402
from lerobot_forge import TASKS, convert_v21_to_v30, write_lerobot  # noqa: E402
from robocache.loader.dataloader import DataLoader, IDENTITY, Window  # noqa: E402
from robocache.readers import ReaderError, read_lerobot  # noqa: E402
from robocache.video import decode as rc_decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")

CAM = "observation.images.top"
EPISODES = [0, 1, 2, 3, 4, 5, 6, 7]          # of cr5_flashdrive_av1 (v2.1)


@pytest.fixture(scope="module")
def converted(cr5_v21, tmp_path_factory):
    """Episodes 0-7 as v3.0: data files of 3 episodes, mp4s of 3 episodes (spans crossing data files)."""
    root = tmp_path_factory.mktemp("v30") / "cr5"
    facts = convert_v21_to_v30(cr5_v21, root, EPISODES, per_data_file=3, per_video_file=3)
    return root, facts


def load(path, **kw):
    kw.setdefault("device", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(path, **kw)


def frames(ds, e=None):
    """All RGB frames of the camera (or episode position e's) as uint8 numpy, and their times."""
    s = ds.streams[CAM]
    lo, hi = (0, len(s.frames)) if e is None else (int(s.offsets[e]), int(s.offsets[e + 1]))
    return s.frames[lo:hi].cpu().numpy(), s.times[lo:hi].cpu().numpy()


def batches(ds, n=4):
    """A few shuffled batches with an image window at an episode-crossing size and identity keys."""
    loader = DataLoader(ds, batch_size=16, shuffle=True, seed=3, identity=True, windows={
        "state": Window("observation.state", indices=[-1, 0]),
        "action": Window("action", indices=range(4)),
        "image": Window(CAM, indices=[-1, 0, 1], layout="BTCHW", resize=(48, 64))})
    out = []
    for k, b in enumerate(loader):
        if k == n:
            break
        out.append(b)
    return out


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in paired(a, b):
        assert set(x) == set(y)
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert torch.equal(x[k].cpu(), y[k].cpu()), k
            else:
                assert x[k] == y[k], k


# ---------------------------------------------------------------------------------------------
# the same episodes as v2.1 and as v3.0: equal, in every tier


@pytest.mark.parametrize("tier", ["host", "disk", "compressed"])
def test_every_tier_equals_v21(cr5_v21, converted, tier):
    root, facts = converted
    v21 = load(cr5_v21, episodes=EPISODES, frames=tier)
    v30 = load(root, frames=tier)
    assert v30.streams[CAM].frames.tier == v21.streams[CAM].frames.tier
    assert v30.streams[CAM].frames.tier == ("compressed" if tier == "compressed" else "cpu" if tier == "host" else tier)
    f21, t21 = frames(v21)
    f30, t30 = frames(v30)
    # every frame, those at the boundaries of episodes sharing an mp4 included
    assert f21.shape == f30.shape == (sum(facts["lengths"]), 480, 640, 3)
    assert np.array_equal(f21, f30)
    np.testing.assert_allclose(t21, t30, atol=1e-6)    # times from each span's start
    for key in ("observation.state", "action"):
        assert torch.equal(v21.streams[key].values, v30.streams[key].values)
    assert_batches_equal(batches(v21), batches(v30))


def test_selected_episodes_in_any_order(cr5_v21, converted):
    """A subset out of order, from several shared mp4s: the same frames as v2.1's, each mp4 decoded in one
    pass, only its selected spans (a seek to the first, nothing after the last)."""
    root, facts = converted
    pick = [5, 1, 2, 7]
    seen = {"jobs": [], "frames": 0}
    real = rc_decode.DECODERS["pyav"]
    real_row = rc_decode._Spans.row

    def spy(job, *a, **k):
        seen["jobs"].append((job.path, len(job.sources)))
        return real(job, *a, **k)

    def count(self, t):
        seen["frames"] += 1
        return real_row(self, t)

    mp = pytest.MonkeyPatch()
    mp.setitem(rc_decode.DECODERS, "pyav", spy)
    mp.setattr(rc_decode._Spans, "row", count)
    try:
        v30 = load(root, episodes=pick, frames="host", cache=False, max_workers=1)
    finally:
        mp.undo()
    v21 = load(cr5_v21, episodes=pick, frames="host", cache=False)
    assert v30.episode_index.tolist() == pick
    assert np.array_equal(frames(v30)[0], frames(v21)[0])
    # episodes 1, 2 share file 0; 5 is in file 1; 7 in file 2: one job per file
    files = sorted(p.rsplit("/", 1)[1] for p, _ in seen["jobs"])
    assert files == ["file-000.mp4", "file-001.mp4", "file-002.mp4"]
    assert dict((p.rsplit("/", 1)[1], n) for p, n in seen["jobs"])["file-000.mp4"] == 2
    wanted = sum(facts["lengths"][e] for e in pick)
    # decoded: the wanted frames, plus at most a GOP before a seek's target and one frame past the end
    assert wanted <= seen["frames"] <= wanted + 3 * (2 + 1), (seen["frames"], wanted)


def test_resize_gives_the_same_pixels_in_both_layouts(cr5_v21, converted):
    root, _ = converted
    a = load(cr5_v21, episodes=[2, 3], video_resize=(120, 160), cache=False)
    b = load(root, episodes=[2, 3], video_resize=(120, 160), cache=False)
    assert np.array_equal(frames(a)[0], frames(b)[0]) and frames(a)[0].shape[1:] == (120, 160, 3)


# ---------------------------------------------------------------------------------------------
# the cache


def test_reload_comes_from_the_cache_keyed_by_span(converted, monkeypatch):
    root, _ = converted
    first = load(root, episodes=[1, 2], frames="disk")
    want = frames(first)[0]

    def boom(*a, **k):
        raise AssertionError("decoded although a valid cache entry exists")

    with monkeypatch.context() as m:
        m.setattr(rc_decode, "DECODERS", {k: boom for k in rc_decode.DECODERS})
        for tier in ("disk", "host"):
            again = load(root, episodes=[1, 2], frames=tier)
            assert np.array_equal(frames(again)[0], want)
        # the same spans in another order: another entry, made of this one's rows (frames/reuse.py)
        swapped = load(root, episodes=[2, 1], frames="host")
        # a span no entry holds must decode
        with pytest.raises(AssertionError, match="decoded although"):
            load(root, episodes=[2, 3], frames="host")
    n1 = int(first.streams[CAM].offsets[1])
    assert np.array_equal(frames(swapped)[0], np.concatenate([want[n1:], want[:n1]]))


# ---------------------------------------------------------------------------------------------
# rows by the dataset-wide index


def test_rows_found_whatever_data_file_the_metadata_names(cr5_v21, converted, tmp_path):
    """LeRobot 0.4.0-0.4.4's converter names the previous data file for the first episode of every data
    file after the first (lerobot#2401): the rows are found where they are, with a warning."""
    root = tmp_path / "wrong"
    convert_v21_to_v30(cr5_v21, root, EPISODES, per_data_file=3, per_video_file=3, wrong_file_index=True)
    meta = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert meta["data/file_index"][3] == 0 and meta["data/file_index"][6] == 1   # written wrong
    with pytest.warns(UserWarning) as said:                          # episodes 3 and 6, the first of files 1 and 2
        r = read_lerobot(root, load_video=False)
    for ep, file in ((3, 1), (6, 2)):
        assert any(re.search(rf"episode {ep}'s rows are in .*file-00{file}\.parquet.*lerobot#2401", str(w.message))
                   for w in said), ep
    good = read_lerobot(converted[0], load_video=False)
    for a, b in zip(r.episodes, good.episodes):
        assert len(a["action"][1]) > 0
        for k in ("observation.state", "action"):
            assert np.array_equal(a[k][0], b[k][0]) and np.array_equal(a[k][1], b[k][1])
    # one episode alone: its named file is read, the rows are not there, every other file is searched
    with pytest.warns(UserWarning, match="lerobot#2401"):
        one = read_lerobot(root, load_video=False, episodes=[6])
    assert np.array_equal(one.episodes[0]["action"][0], good.episodes[6]["action"][0])


def test_missing_rows_are_an_error(converted, tmp_path):
    root = tmp_path / "short"
    shutil.copytree(converted[0], root)
    p = root / "data/chunk-000/file-001.parquet"
    t = pq.read_table(p)
    keep = np.flatnonzero(t.column("episode_index").to_numpy() != 4)
    pq.write_table(t.take(keep), p)
    with pytest.raises(ReaderError, match=r"file-001\.parquet, episode 4: 0 rows in the data files, the episode "
                                          r"metadata says 293"):
        read_lerobot(root, load_video=False)


def test_span_that_does_not_match_the_rows(converted, tmp_path):
    """An episode's span that holds another number of frames than it has rows: an error naming the file,
    the episode and both numbers, before anything is decoded."""
    root = tmp_path / "span"
    shutil.copytree(converted[0], root)
    p = root / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(p).to_pydict()
    t[f"videos/{CAM}/to_timestamp"][1] -= 0.5           # 5 frames short
    pq.write_table(pa.table(t), p)
    with pytest.raises(ReaderError, match=r"file-000\.mp4 \[37, 62\.7\) s, episode 1: the span .* holds 257 video "
                                          r"frames, the episode has 262 rows"):
        load(root, episodes=[1], cache=False)


def test_span_whose_frames_are_not_at_the_rows_timestamps(converted, tmp_path):
    """As many frames as rows, but rows whose timestamps are more than 1/fps from their frames': an error
    naming the file, the episode, the frame and both times (LeRobot would pick other frames)."""
    root = tmp_path / "times"
    shutil.copytree(converted[0], root)
    p = root / "data/chunk-000/file-000.parquet"
    t = pq.read_table(p)
    d = t.to_pydict()
    late = [e == 1 and f >= 100 for e, f in zip(d["episode_index"], d["frame_index"])]
    d["timestamp"] = [ts + 0.3 if x else ts for ts, x in zip(d["timestamp"], late)]      # 3 frames at 10 fps
    pq.write_table(pa.table(d, schema=t.schema), p)
    with pytest.raises(ReaderError, match=r"file-000\.mp4 .*episode 1: frame \d+ is at .* s from the span's start, "
                                          r"its row's timestamp is .* s \(0\.3000 s apart, more than 1/fps = "
                                          r"0\.1000 s\)") as err:
        load(root, episodes=[1], cache=False)
    k, at, row = re.search(r"frame (\d+) is at ([\d.]+) s .* is ([\d.]+) s", str(err.value)).groups()
    assert int(k) >= 100 and float(row) - float(at) == pytest.approx(0.3, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# the set LeRobot's recording API wrote


def _span_reference(root, meta, e):
    """Episode e's frames decoded by PyAV alone: the file's frames whose time is in its span."""
    f = meta[f"videos/{CAM}/file_index"][e]
    t0, t1 = meta[f"videos/{CAM}/from_timestamp"][e], meta[f"videos/{CAM}/to_timestamp"][e]
    with av.open(str(root / f"videos/{CAM}/chunk-000/file-{f:03d}.mp4")) as c:
        got = [(fr.time, fr.to_ndarray(format="rgb24")) for fr in c.decode(video=0)
               if t0 - 0.05 <= fr.time < t1 - 0.05]
    return np.stack([a for _, a in got]), np.array([t for t, _ in got]) - t0


def test_cr5_v30_frames_equal_pyav(cr5_v30):
    meta = pa.concat_tables([pq.read_table(p) for p in sorted((cr5_v30 / "meta/episodes").glob("**/*.parquet"))])
    meta = meta.to_pydict()
    ds = load(cr5_v30, frames="host")
    # the episodes and frames the set's own metadata lists (not counts copied from a load)
    assert len(ds) == len(meta["episode_index"]) > 0 and ds.num_frames == sum(meta["length"])
    for e in range(len(ds)):
        want, wt = _span_reference(cr5_v30, meta, e)
        got, gt = frames(ds, e)
        assert np.array_equal(got, want), e
        np.testing.assert_allclose(gt, wt, atol=1e-6)
        assert len(got) == meta["length"][e]


def test_cr5_v30_rows_equal_v21(cr5_v30, cr5_v21):
    """The recording API was fed the v2.1 rows: states equal, episode for episode."""
    a = load(cr5_v30, load_video=False)
    b = load(cr5_v21, episodes=range(14), load_video=False)
    assert torch.equal(a.streams["observation.state"].values, b.streams["observation.state"].values)
    assert torch.equal(a.streams["observation.state"].offsets, b.streams["observation.state"].offsets)


def test_cr5_v30_tiers_agree(cr5_v30):
    want = batches(load(cr5_v30, episodes=[3, 4, 5], frames="host"))
    for tier in ("disk", "lossless"):
        assert_batches_equal(want, batches(load(cr5_v30, episodes=[3, 4, 5], frames=tier)))


def test_tasks_per_frame_v21(tmp_path, rng):
    """A v2.1 set whose parquet changes task_index mid-episode: each frame carries its own task too."""
    root = tmp_path / "v21"
    write_lerobot(root, rng, lengths=(6, 10), episode_tasks=[[TASKS[0]], [TASKS[1], TASKS[2]]])
    p = root / "data/chunk-000/episode_000001.parquet"
    t = pq.read_table(p)
    d = t.to_pydict()
    d["task_index"] = [1] * 4 + [2] * 6                    # episode 1 switches task at its fifth row
    pq.write_table(pa.table(d, schema=t.schema), p)
    ds = load(root)
    want = [0] * 6 + [1] * 4 + [2] * 6
    assert [int(ds[i]["task_index"]) for i in range(ds.num_frames)] == want
    assert [ds[i]["task"] for i in range(ds.num_frames)] == [TASKS[k] for k in want]
    got = {}
    for b in DataLoader(ds, batch_size=4, shuffle=True, seed=1, identity=True, windows={"a": Window("action")}):
        got.update(zip(b["index"].tolist(), zip(b["task_index"].tolist(), b["task"])))
    assert [got[i] for i in range(16)] == [(k, TASKS[k]) for k in want]


def test_tasks_per_frame(cr5_v30):
    """Episode 4 changes task half-way: ds[i] and identity batches carry each frame's own task, as
    LeRobot gives it (task_index per row, its text from meta/tasks.parquet)."""
    ds = load(cr5_v30, episodes=[3, 4], load_video=False)
    rows = pq.read_table(cr5_v30 / "data/chunk-000/file-001.parquet").to_pydict()
    table = pq.read_table(cr5_v30 / "meta/tasks.parquet").to_pydict()
    text = dict(zip(table["task_index"], table["__index_level_0__"]))
    per_row = [t for e, t in zip(rows["episode_index"], rows["task_index"]) if e in (3, 4)]
    assert len(set(per_row[221:])) == 2                     # episode 4's rows hold two tasks
    for i in range(ds.num_frames):
        item = ds[i]
        assert int(item["task_index"]) == per_row[i] and item["task"] == text[per_row[i]], i
    wide = [ix for e, ix in zip(rows["episode_index"], rows["index"]) if e in (3, 4)]
    assert [int(ds[i]["index"]) for i in (0, ds.num_frames - 1)] == [wide[0], wide[-1]]   # the column's
    loader = DataLoader(ds, batch_size=64, identity=[*IDENTITY, "row"], windows={"a": Window("action")})
    got_index, got_task = [], []
    for b in loader:
        got_index += b["task_index"].tolist()
        got_task += b["task"]
        assert b["task_index"].tolist() == [per_row[i] for i in b["row"].tolist()]
        assert b["index"].tolist() == [wide[i] for i in b["row"].tolist()]      # LeRobot's, not the row
    assert got_task == [text[i] for i in got_index] and len(set(got_task)) == 3
