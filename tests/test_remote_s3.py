"""LeRobot sets in an S3-compatible object store (SeaweedFS, started here): ``s3://`` through s3fs (issue 48).

Objects are listed once (their ETags from the listing), each rank fetches its episodes' row groups and mp4
ranges, the mirror (holes poisoned) loads what the local set loads; an object uploaded again (a new ETag)
is fetched again; a 503 from the store (a proxy in front of it) is retried.
"""

from __future__ import annotations


import pytest

pytest.importorskip("s3fs")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from remote_servers import FaultProxy, SeaweedFS  # noqa: E402
from remote_sets import assert_same, make_sets, poison_holes, records  # noqa: E402
from robocache.remote import mirror_lerobot  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seed = fresh_seed(4)
    base = tmp_path_factory.mktemp(f"s3-seed{seed}")
    sets = make_sets(base / "sets", seed)
    weed = SeaweedFS(base / "weed")
    try:
        urls = {name: weed.upload(path, "robot", name) for name, path in sets.items()}
        yield {"weed": weed, "sets": sets, "urls": urls}
    finally:
        weed.stop()


def load(root, **kw):
    return robocache.Dataset.from_lerobot(root, device="cpu", cache=False, **kw)


@pytest.mark.parametrize("name,world", [("forged-v3.0", 2), ("forged-v2.1", 2), ("demo-v3.0", 3)])
def test_each_rank_loads_what_the_local_set_gives(store, name, world, tmp_path):
    for rank in range(world):
        r = mirror_lerobot(store["urls"][name], shard=(rank, world), cache_dir=tmp_path / f"node{rank}",
                           storage_options=store["weed"].options())
        # a listing of meta/ and one of each folder of the rank's files; a version check per file fetched
        folders = {p.parent for p, _ in records(r) if p.relative_to(r.root).parts[0] != "meta"}
        assert r.fetched["stats"] <= 1 + len(folders) + len(list(records(r)))
        poison_holes(r, seed=rank)
        assert_same(load(r.root, shard_episodes=(rank, world)), load(store["sets"][name], shard_episodes=(rank, world)))
        again = mirror_lerobot(store["urls"][name], shard=(rank, world), cache_dir=tmp_path / f"node{rank}",
                               storage_options=store["weed"].options())
        assert again.fetched["bytes"] == 0 and again.fetched["stats"] == 1 + len(folders)   # listings only


def test_an_object_uploaded_again_is_fetched_again(store, tmp_path):
    """The data file written again with another compression (the same rows, another ETag): the second run
    fetches it again, the load is the same."""
    import io

    import pyarrow.parquet as pq
    weed, name = store["weed"], "forged-v3.0"
    local = store["sets"][name]
    url = weed.upload(local, "robot", "again")
    opts = weed.options()
    first = mirror_lerobot(url, shard=(0, 2), cache_dir=tmp_path, storage_options=opts)
    data = sorted(p for p, _ in records(first) if p.relative_to(first.root).parts[0] == "data")
    rel = data[0].relative_to(first.root).as_posix()
    before = dict(records(first))[data[0]]["version"]
    buf = io.BytesIO()
    pq.write_table(pq.read_table(local / rel), buf, compression="gzip")
    weed.fs.pipe(f"robot/again/{rel}", buf.getvalue())
    weed.fs.invalidate_cache()
    again = mirror_lerobot(url, shard=(0, 2), cache_dir=tmp_path, storage_options=opts)
    after = dict(records(again))[data[0]]["version"]
    assert after["tag"] != before["tag"] and after["size"] == len(buf.getvalue())
    assert again.fetched["bytes"] > 0
    poison_holes(again)
    assert_same(load(again.root, shard_episodes=(0, 2)), load(local, shard_episodes=(0, 2)))


def test_a_503_from_the_store_is_retried(store, tmp_path):
    with FaultProxy(store["weed"].endpoint) as proxy:
        proxy.add("503", ".mp4", times=2, method="GET")
        r = mirror_lerobot(store["urls"]["demo-v3.0"], shard=(1, 2), cache_dir=tmp_path,
                           storage_options=store["weed"].options(proxy.url))
        assert all(f["left"] == 0 for f in proxy.faults) and proxy.requests(".mp4")
    poison_holes(r)
    assert_same(load(r.root, shard_episodes=(1, 2)), load(store["sets"]["demo-v3.0"], shard_episodes=(1, 2)))
