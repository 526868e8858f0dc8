"""LeRobot sets over HTTP with Range (RangeHTTPServer, started here): ``robocache.remote`` (issue 48).

Each rank mirrors only its episodes (the loader's own shard plan), every byte the mirror does not claim is
poisoned, and ``Dataset.from_lerobot`` of the mirror equals that of the local folder: v3.0 (one row group,
and row groups spread over data files; shared mp4s), v2.1 (a file per episode), and a v3.0 set whose metadata
names the wrong data file. A second run fetches nothing (and with ``revalidate=False`` asks nothing); an
object changed between runs is fetched again; a rank that adds ranges to a shared mp4 leaves its
(size, mtime), the frame cache's key, as it was.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from remote_servers import range_http, touch_later  # noqa: E402
from remote_sets import (assert_same, files_of, local_files, make_sets, poison_holes, records,  # noqa: E402
                         stat_key)
from robocache.readers import ReaderError  # noqa: E402
from robocache.remote import mirror_lerobot, mp4  # noqa: E402
from robocache.remote.mirror import MP4_GAP  # noqa: E402
from robocache.loader.shard import lerobot_shard  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    seed = fresh_seed(4)
    folder = tmp_path_factory.mktemp(f"remote-seed{seed}") / "www"
    sets = make_sets(folder, seed)
    with range_http(folder) as url:
        yield {"url": url, "sets": sets, "folder": folder}


def load(root, **kw):
    return robocache.Dataset.from_lerobot(root, device="cpu", **kw)


@pytest.mark.parametrize("name,world", [("demo-v3.0", 3), ("forged-v3.0", 3), ("forged-v2.1", 2)])
def test_each_rank_loads_what_the_local_set_gives(served, name, world, tmp_path):
    local = served["sets"][name]
    url = f"{served['url']}/{local.name}"
    for rank in range(world):
        r = mirror_lerobot(url, shard=(rank, world), cache_dir=tmp_path / f"node{rank}")
        assert r.episodes == list(lerobot_shard(local, (rank, world), None, None)[0])
        poison_holes(r, seed=rank)
        got = load(r.root, shard_episodes=(rank, world), cache=False)
        want = load(local, shard_episodes=(rank, world), cache=False)
        assert_same(got, want)
        assert (got.shard.rank, got.shard.world, got.shard.samples) == \
            (want.shard.rank, want.shard.world, want.shard.samples)
        assert np.array_equal(got.shard.counts, want.shard.counts)
        assert np.array_equal(got.shard.weights, want.shard.weights)
        # only the rank's files, and of a v3.0 mp4 only part unless the rank holds all of its episodes
        assert local_files(r) == files_of(local, r.episodes)
        assert r.fetched["retries"] == 0 and r.whole_mp4s == []


def test_a_rank_holds_about_its_share_of_a_shared_mp4(served, tmp_path):
    """The demo set keeps its 6 episodes in one mp4. Each of 3 ranks holds every packet of its episodes'
    spans (PyAV's demux of the file says which) and beyond them no more than the file's boxes, its first
    packets, and per episode the keyframe before it, the decoder's read-ahead and one merged gap."""
    import av
    local = served["sets"]["demo-v3.0"]
    url = f"{served['url']}/{local.name}"
    (video,) = local.rglob("*.mp4")
    with av.open(str(video)) as c:
        s = c.streams.video[0]
        pk = [(p.pts * float(s.time_base), p.pos, p.size) for p in c.demux(s) if p.size]
    t, pos, size = (np.array(x) for x in zip(*pk))
    big, fps = int(size.max()), float(s.average_rate)
    boxes = video.stat().st_size - int(size.sum())
    for rank in range(3):
        r = mirror_lerobot(url, shard=(rank, 3), cache_dir=tmp_path / f"node{rank}")
        (rec,) = [rec for p, rec in records(r) if p.suffix == ".mp4"]
        held = np.zeros(rec["version"]["size"], bool)
        for a, b in rec["ranges"]:
            held[a:b] = True
        spans = r.episodes
        need = np.zeros(len(t), bool)
        for e in r.episodes:
            lo, hi = _span(local, e)
            need |= (t >= lo - 0.5 / fps) & (t < hi - 0.5 / fps)
        for p0, n in zip(pos[need], size[need]):
            assert held[p0:p0 + n].all(), (rank, p0)                   # every packet of its spans
        extra = int(held.sum()) - int(size[need].sum())
        bound = 4096 + boxes + mp4.PROBE_PACKETS * big + len(spans) * ((mp4.AV1_DELAY + 3) * big + MP4_GAP)
        assert 0 <= extra <= bound, (rank, extra, bound)
        assert len(r.episodes) < 6 and held.sum() < held.size


def _span(root, e):
    import pyarrow.parquet as pq
    (f,) = (root / "meta" / "episodes").rglob("*.parquet")
    t = pq.read_table(f).to_pylist()
    row = next(x for x in t if x["episode_index"] == e)
    key = next(k for k in row if k.endswith("/from_timestamp"))
    return row[key], row[key.replace("from_", "to_")]


def test_second_run_fetches_nothing(served, tmp_path):
    url = f"{served['url']}/{served['sets']['forged-v3.0'].name}"
    first = mirror_lerobot(url, shard=(1, 2), cache_dir=tmp_path)
    assert first.fetched["bytes"] > 0
    keys = {p: stat_key(p) for p, _ in records(first)}
    again = mirror_lerobot(url, shard=(1, 2), cache_dir=tmp_path)
    assert again.fetched["bytes"] == 0 and again.fetched["requests"] == 0 and again.fetched["stats"] > 0
    trusted = mirror_lerobot(url, shard=(1, 2), cache_dir=tmp_path, revalidate=False)
    assert trusted.fetched == {"bytes": 0, "requests": 0, "stats": 0, "retries": 0}
    assert trusted.root == first.root and {p: stat_key(p) for p, _ in records(first)} == keys


def test_another_rank_on_the_node_keeps_the_frame_cache_key(served, tmp_path, monkeypatch):
    """Rank 0 loads (its frames cached); rank 1 of the same node adds its ranges to the shared mp4s; rank 0's
    second load maps its cache entry: no decode."""
    monkeypatch.setenv("ROBOCACHE_LOCK_TIMEOUT", "60")     # a load that would rebuild the held entry: an error
    local = served["sets"]["demo-v3.0"]
    url = f"{served['url']}/{local.name}"
    r0 = mirror_lerobot(url, shard=(0, 2), cache_dir=tmp_path)
    first = load(r0.root, shard_episodes=(0, 2), frames="host")
    ((mp4, rec0),) = [(p, rec) for p, rec in records(r0) if p.suffix == ".mp4"]
    key = stat_key(mp4)
    r1 = mirror_lerobot(url, shard=(1, 2), cache_dir=tmp_path)
    ((_, rec1),) = [(p, rec) for p, rec in records(r1) if p.suffix == ".mp4"]
    assert sum(b - a for a, b in rec1["ranges"]) > sum(b - a for a, b in rec0["ranges"])   # rank 1 wrote to it
    assert stat_key(mp4) == key

    def no_decode(*a, **k):
        raise AssertionError("decoded again: the frame cache entry was not used")
    import robocache.frames.entry as entry
    monkeypatch.setattr(entry, "decode_job", no_decode, raising=False)
    import robocache.frames.ingest as ingest
    monkeypatch.setattr(ingest, "decode_job", no_decode)
    again = load(r0.root, shard_episodes=(0, 2), frames="host")
    assert_same(again, first)


def test_a_ranks_batches_and_resume_state_are_the_local_sets(served, tmp_path):
    """The loader over a rank's mirror yields the batches (and saves the state) the local set's gives: the
    same shard plan, the same order per (seed, epoch, rank)."""
    from robocache import DataLoader
    local = served["sets"]["forged-v3.0"]
    url = f"{served['url']}/{local.name}"
    dt = {"observation.state": [-0.1, 0.0], "action": [0.0, 0.1]}
    r = mirror_lerobot(url, shard=(1, 3), cache_dir=tmp_path)
    got_ds, want_ds = (load(p, shard_episodes=(1, 3), cache=False) for p in (r.root, local))
    loaders = [DataLoader(ds, 4, shuffle=True, seed=7, rank=1, world_size=3, shard_episodes=True, device="cpu",
                          delta_timestamps=dt) for ds in (got_ds, want_ds)]
    for epoch in (0, 1):
        for ld in loaders:
            ld.set_epoch(epoch)
        for a, b in zip(*loaders, strict=True):
            assert a.keys() == b.keys()
            for k in a:
                if k == "task":
                    assert a[k] == b[k]
                else:
                    assert (a[k] == b[k]).all(), (epoch, k)
    assert loaders[0].state_dict() == loaders[1].state_dict()


def test_rows_in_another_data_file_than_the_metadata_names(served, tmp_path):
    """lerobot#2401: the mirror finds the rows where the reader finds them (the other data files)."""
    local = served["sets"]["misplaced-v3.0"]
    url = f"{served['url']}/{local.name}"
    for rank in range(2):
        r = mirror_lerobot(url, shard=(rank, 2), cache_dir=tmp_path / f"node{rank}")
        poison_holes(r)
        with pytest.warns(UserWarning, match="lerobot#2401"):
            got = load(r.root, shard_episodes=(rank, 2), cache=False)
        with pytest.warns(UserWarning, match="lerobot#2401"):
            want = load(local, shard_episodes=(rank, 2), cache=False)
        assert_same(got, want)


def test_an_object_changed_between_runs_is_fetched_again(served, tmp_path):
    src = served["sets"]["forged-v3.0"]
    local = served["folder"] / "changing-v3.0"
    shutil.copytree(src, local)
    url = f"{served['url']}/{local.name}"
    first = mirror_lerobot(url, episodes=[0, 1], cache_dir=tmp_path)
    data = sorted(p for p, rec in records(first) if p.suffix == ".parquet" and "data" in p.parts)
    target = local / data[0].relative_to(first.root)
    touch_later(target)                                 # a new Last-Modified: another version
    again = mirror_lerobot(url, episodes=[0, 1], cache_dir=tmp_path)
    assert 0 < again.fetched["bytes"] < first.fetched["bytes"]
    assert_same(load(again.root, episodes=[0, 1], cache=False), load(local, episodes=[0, 1], cache=False))


def test_explicit_episodes_and_no_video(served, tmp_path):
    local = served["sets"]["demo-v3.0"]
    url = f"{served['url']}/{local.name}"
    r = mirror_lerobot(url, episodes=[4, 1], load_video=False, cache_dir=tmp_path)
    assert r.episodes == [4, 1] and not (r.root / "videos").exists()
    assert_same(load(r.root, episodes=[4, 1], load_video=False), load(local, episodes=[4, 1], load_video=False))
    with pytest.raises(ValueError, match=r"episodes \[99\] are not in the set"):
        mirror_lerobot(url, episodes=[99], cache_dir=tmp_path)


def test_not_a_lerobot_set_names_the_url(served, tmp_path):
    (served["folder"] / "empty").mkdir(exist_ok=True)
    with pytest.raises(ReaderError, match=r"empty/meta/info.json: not found"):
        mirror_lerobot(f"{served['url']}/empty", cache_dir=tmp_path)
