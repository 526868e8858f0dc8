"""Who each sample is: ``DataLoader(..., identity=True)`` adds LeRobot's per-sample keys
(``episode_index``, ``frame_index``, ``timestamp``, ``index``, ``task_index``, ``task``).

Every sample of an epoch is checked against the loader's own sample table and against ``ds[index]``,
on frame anchors, rate grids, subsets, shards, samplers and resumes; on CUDA the graph-replayed
batches equal the eager ones and an epoch runs without a host sync.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from pairs import paired  # noqa: E402
from lerobot_forge import TASKS, write_lerobot  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from robocache.loader.dataloader import IDENTITY  # noqa: E402


def multirate(rng, device="cpu", episode_index=None):
    """4 episodes: joints 50 Hz [3], gripper 20 Hz [1], tasks (one episode without a task)."""
    eps = []
    for dur in (1.0, 0.5, 0.8, 0.3):
        tj = np.arange(0, dur, 1 / 50)
        tg = 0.013 + np.arange(0, dur, 1 / 20)
        eps.append({"joints": (rng.standard_normal((len(tj), 3)).astype(np.float32), tj),
                    "gripper": (rng.uniform(0, 1, (len(tg), 1)).astype(np.float32), tg)})
    return robocache.Dataset.from_episodes(eps, tasks=["pick", ["place", "stack"], [], "pick"], device=device,
                                           episode_index=episode_index)


def epoch(loader):
    """Every batch of one epoch concatenated: {key: numpy array or list}."""
    out = {}
    for b in loader:
        for k, v in b.items():
            out.setdefault(k, []).append(v)
    return {k: (sum(v, []) if isinstance(v[0], list) else torch.cat(v).cpu().numpy()) for k, v in out.items()}


def expected(loader, rows):
    """Identity of the loader's sample rows, from its sample table and the dataset's metadata."""
    ds = loader.dataset
    ep, t = (x.cpu().numpy() for x in loader.samples)
    first = {e: int(np.flatnonzero(ep == e)[0]) for e in np.unique(ep)}
    tasks = [ept.tasks[0] if ept.tasks else "" for ept in ds.episodes]
    return {"episode_index": ds.episode_index[ep[rows]],
            "frame_index": np.array([r - first[ep[r]] for r in rows]),
            "timestamp": t[rows], "index": rows,
            "task_index": np.array([ds.tasks.index(tasks[ep[r]]) if tasks[ep[r]] else -1 for r in rows]),
            "task": [tasks[ep[r]] for r in rows]}


def check(loader, got, rows):
    want = expected(loader, rows)
    for k in IDENTITY:
        if k not in got:
            continue
        if k == "task":
            assert got[k] == want[k]
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("shuffle", [False, True])
def test_identity_every_sample(rng, shuffle):
    ds = multirate(rng, episode_index=[10, 11, 12, 13])
    loader = DataLoader(ds, batch_size=7, shuffle=shuffle, seed=3, identity=True,
                        windows={"g": Window("gripper", offsets=[0.0, 0.05])})
    got = epoch(loader)
    assert got["episode_index"].dtype == np.int64 and got["timestamp"].dtype == np.float64
    assert got["frame_index"].dtype == np.int64 and got["index"].dtype == np.int64
    assert isinstance(got["task"], list) and all(isinstance(x, str) for x in got["task"])
    rows = loader.order(loader.epoch).cpu().numpy()
    check(loader, got, rows)
    assert set(got["episode_index"]) == {10, 11, 12, 13}           # the source's numbers, not positions
    assert "" in got["task"] and -1 in got["task_index"]           # the episode without a task
    # the window keys are unchanged by identity
    plain = epoch(DataLoader(ds, batch_size=7, shuffle=shuffle, seed=3,
                             windows={"g": Window("gripper", offsets=[0.0, 0.05])}))
    assert set(plain) == {"g", "g_is_pad"}
    np.testing.assert_array_equal(plain["g"], got["g"])


def test_identity_matches_ds_getitem(rng):
    """With frame anchors over the whole dataset, ``index`` is the global frame: ``ds[index]`` is that sample."""
    ds = multirate(rng, episode_index=[4, 2, 9, 5])
    loader = DataLoader(ds, batch_size=16, shuffle=True, identity=True, windows={"j": "joints"})
    b = next(iter(loader))
    for j in range(16):
        f = ds[int(b["index"][j])]
        for k in ("episode_index", "frame_index", "index", "task_index"):
            assert int(f[k]) == int(b[k][j]), k
        assert float(f["timestamp"]) == float(b["timestamp"][j]) and f["task"] == b["task"][j]
        torch.testing.assert_close(f["joints"], b["j"][j, 0], rtol=0, atol=0)


def test_identity_rate_grid(rng):
    """rate= anchors: frame_index is the grid step in the episode, timestamp the grid time."""
    ds = multirate(rng)
    loader = DataLoader(ds, batch_size=5, shuffle=False, rate=10.0, identity=True, windows={"j": "joints"})
    got = epoch(loader)
    ep, t = (x.numpy() for x in loader.samples)
    np.testing.assert_array_equal(got["timestamp"], t)
    for e in range(len(ds)):
        steps = got["frame_index"][ep == e]
        np.testing.assert_array_equal(steps, np.arange(steps.size))
        np.testing.assert_allclose(np.diff(got["timestamp"][ep == e]), 0.1, atol=1e-12)


def test_identity_subset_and_shards_keep_numbers_and_tasks(rng):
    ds = multirate(rng)
    sub = ds.subset([3, 1])
    assert sub.tasks == ds.tasks                 # a task's index does not move in a subset
    got = epoch(DataLoader(sub, batch_size=4, shuffle=False, identity=True, windows={"j": "joints"}))
    assert set(got["episode_index"]) == {3, 1}
    for k, name in zip(got["task_index"], got["task"]):
        assert ds.tasks[k] == name
    seen = []
    for rank in range(2):
        ld = DataLoader(ds, batch_size=3, shuffle=True, identity=True, windows={"j": "joints"},
                        rank=rank, world_size=2, shard_episodes=True)
        g = epoch(ld)
        seen.append(set(g["episode_index"]))
        assert all(ds.tasks[k] == name for k, name in zip(g["task_index"], g["task"]) if k >= 0)
    assert seen[0] | seen[1] == {0, 1, 2, 3} and not seen[0] & seen[1]


def test_identity_follows_sampler_and_resume(rng):
    ds = multirate(rng)
    rows = rng.permutation(ds.num_frames)[:20]
    loader = DataLoader(ds, batch_size=6, shuffle=False, sampler=list(rows), identity=True, windows={"j": "joints"})
    check(loader, epoch(loader), rows)

    full = DataLoader(ds, batch_size=6, shuffle=True, seed=1, identity=True, windows={"j": "joints"})
    it = iter(full)
    next(it), next(it)
    state = full.state_dict()
    rest = [b for b in it]
    resumed = DataLoader(ds, batch_size=6, shuffle=True, seed=1, identity=True, windows={"j": "joints"})
    resumed.load_state_dict(state)
    again = list(resumed)
    assert len(again) == len(rest)
    for a, b in paired(rest, again):
        assert a["task"] == b["task"]
        for k in ("episode_index", "frame_index", "timestamp", "index", "task_index"):
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_identity_keys_choice_and_errors(rng):
    ds = multirate(rng)
    b = next(iter(DataLoader(ds, batch_size=4, shuffle=True, identity=["task", "episode_index"],
                             windows={"j": "joints"})))
    assert set(b) == {"j", "j_is_pad", "episode_index", "task"}
    b = next(iter(DataLoader(ds, batch_size=4, shuffle=True, identity="task", windows={"j": "joints"})))
    assert set(b) == {"j", "j_is_pad", "task"} and len(b["task"]) == 4
    b = next(iter(DataLoader(ds, batch_size=4, shuffle=True, windows={"j": "joints"})))
    assert set(b) == {"j", "j_is_pad"}                                # off by default
    with pytest.raises(ValueError, match=r"identity: unknown keys \['episode'\]"):
        DataLoader(ds, batch_size=4, shuffle=True, identity=["episode"], windows={"j": "joints"})
    with pytest.raises(ValueError, match=r"windows already have the keys \['timestamp'\]"):
        DataLoader(ds, batch_size=4, shuffle=True, identity=True, windows={"timestamp": "joints"})


def test_identity_collate_fn_sees_task(rng):
    ds = multirate(rng)
    seen = []
    loader = DataLoader(ds, batch_size=4, shuffle=True, identity=True, windows={"j": "joints"},
                        collate_fn=lambda b: seen.append(sorted(b)) or b)
    next(iter(loader))
    assert "task" in seen[0] and "episode_index" in seen[0]


def test_identity_lerobot_episodes_subset(tmp_path, rng):
    """from_lerobot(episodes=[1, 3]): batches carry episodes 1 and 3, the parquet's frame_index, and
    LeRobot's task_index (ds.tasks is the task table in index order)."""
    pytest.importorskip("pyarrow")
    write_lerobot(tmp_path, rng, episode_tasks=[["open the drawer"], ["place the cube"], ["pick the cube"],
                                                 ["place the cube"]])
    ds = robocache.Dataset.from_lerobot(tmp_path, episodes=[1, 3], device="cpu")
    assert ds.tasks == TASKS
    loader = DataLoader(ds, batch_size=4, shuffle=False, identity=True, windows={"lerobot_task": "task_index"})
    got = epoch(loader)
    assert got["episode_index"].tolist() == [1] * 9 + [3] * 7
    assert got["frame_index"].tolist() == list(range(9)) + list(range(7))
    np.testing.assert_array_equal(got["task_index"], got["lerobot_task"][:, 0])     # LeRobot's own column
    assert got["task"] == ["place the cube"] * 16
    np.testing.assert_allclose(got["timestamp"], np.r_[np.arange(9), np.arange(7)] / 10, atol=1e-6)


@pytest.mark.cuda
def test_identity_cuda_graph_equals_eager_without_sync(rng):
    ds = multirate(rng, device="cuda", episode_index=[10, 11, 12, 13])
    kw = dict(batch_size=8, shuffle=True, seed=5, identity=True, drop_last=True,
              windows={"g": Window("gripper", offsets=[0.0, 0.05]), "j": "joints"})
    graphed, eager = DataLoader(ds, **kw), DataLoader(ds, cuda_graph=False, **kw)
    for ep in range(2):
        graphed.set_epoch(ep)
        eager.set_epoch(ep)
        torch.cuda.set_sync_debug_mode("error")
        try:
            a = [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in b.items()} for b in graphed]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        b = list(eager)
        assert graphed._batches.graph is not None
        for x, y in paired(a, b):
            assert x.keys() == y.keys() and x["task"] == y["task"]
            for k in x:
                if k != "task":
                    torch.testing.assert_close(x[k], y[k], rtol=0, atol=0)
    got = epoch(eager)
    # drop_last: the epoch's order holds the samples of the dropped short batch too
    check(eager, got, eager.order(eager.epoch).cpu().numpy()[:len(eager) * eager.batch_size])


def test_frame_task_index_per_episode_and_per_frame(rng):
    """Dataset.frame_task_index: without a task_index stream each episode's first task (-1 without one);
    with one (LeRobot's per-row column), the task of the row nearest each time, ties to the earlier row."""
    ds = multirate(rng)
    want_tasks = {t: i for i, t in enumerate(ds.tasks)}
    got = ds.frame_task_index([0, 1, 2, 3, 1], [0.0, 0.2, 0.1, 0.0, 0.4])
    first = [want_tasks["pick"], want_tasks["place"], -1, want_tasks["pick"], want_tasks["place"]]
    assert got.dtype == np.int64 and got.tolist() == first
    t = np.arange(10) / 10.0                       # one episode whose rows switch task after t = 0.4
    rows = np.array([0] * 5 + [1] * 5, np.int64)
    ds2 = robocache.Dataset.from_episodes([{"task_index": (rows, t), "x": (np.zeros((10, 1), np.float32), t)}],
                                          tasks=[["a", "b"]], device="cpu")
    times = [0.0, 0.4, 0.44, 0.45, 0.46, 0.9, 5.0]   # 0.45: a tie between rows 4 and 5 -> the earlier
    ids = ds2.frame_task_index([0] * len(times), times)
    assert [ds2.tasks[i] for i in ids] == ["a", "a", "a", "a", "b", "b", "b"]
