"""Faults between a mirror and its remote (issue 48): a proxy started here (``FaultProxy``) in front of
RangeHTTPServer does, on the requests the test picks, a 503, a dropped connection, a body cut short, a
server that ignores Range, a request slower than the timeout, and an object changed on the origin mid-run.

What passes is retried and the load equals the local set's; what does not is a ``RemoteError`` (a
``RemoteChanged`` for an object that keeps changing) naming the object; after any error the mirror's records
claim nothing that was not written (the holes poisoned, a clean rerun loads the local set's frames).
"""

from __future__ import annotations


import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from remote_servers import FaultProxy, range_http, touch_later  # noqa: E402
from remote_sets import assert_same, make_sets, mirrors, poison_holes, records  # noqa: E402
from robocache.remote import RemoteChanged, RemoteError, mirror_lerobot  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
NAME = "demo-v3.0"


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    seed = fresh_seed(4)
    folder = tmp_path_factory.mktemp(f"faults-seed{seed}") / "www"
    sets = make_sets(folder, seed, demo_only=True)
    with range_http(folder) as url:
        yield {"url": url, "sets": sets}


@pytest.fixture
def proxy(origin):
    with FaultProxy(origin["url"]) as p:
        yield p


def load(root, **kw):
    return robocache.Dataset.from_lerobot(root, device="cpu", cache=False, **kw)


def check(report, origin, rank=1, world=2, name=NAME):
    poison_holes(report, seed=rank)
    assert_same(load(report.root, shard_episodes=(rank, world)),
                load(origin["sets"][name], shard_episodes=(rank, world)))


def test_transient_faults_are_retried(origin, proxy, tmp_path):
    proxy.add("503", ".mp4", times=2, method="GET")
    proxy.add("drop", ".mp4", times=1, method="GET")
    proxy.add("truncate", "data/", times=1, method="GET")
    proxy.add("500", "info.json", times=1, method="HEAD")
    r = mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path, retries=4)
    assert all(f["left"] == 0 for f in proxy.faults)               # every fault was met
    # the two 503s and the short body at least (fsspec answers a failed HEAD with a GET; aiohttp may retry a
    # request on a kept-alive connection the server dropped on its own)
    assert r.fetched["retries"] >= 3
    check(r, origin)


def test_a_fault_that_persists_names_the_object_and_leaves_no_claim(origin, proxy, tmp_path):
    proxy.add("503", ".mp4", times=1000, method="GET")
    with pytest.raises(RemoteError, match=r"demo/videos/.*\.mp4: .*failed 3 times.*503"):
        mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path, retries=2)
    proxy.faults.clear()
    # what the failed run wrote is claimed and right, or unclaimed: poisoned here, then fetched again
    (root,) = mirrors(tmp_path)
    assert poison_holes(root) > 0
    r = mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path)
    assert r.fetched["bytes"] > 0
    check(r, origin)


def test_an_object_changed_mid_run_is_read_again_at_its_new_version(origin, proxy, tmp_path):
    """The mp4 gets a new Last-Modified (same bytes, as a re-upload gives) while its ranges are read: the run
    notices when it checks the version after them, and reads the file again at the new version."""
    (video,) = origin["sets"][NAME].rglob("*.mp4")
    proxy.add(lambda: touch_later(video), ".mp4", times=1, method="GET")
    r = mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path)
    ((_, rec),) = [(p, rec) for p, rec in records(r) if p.suffix == ".mp4"]
    assert rec["version"]["tag"] == proxy_last_modified(proxy, video, origin)
    check(r, origin)


def test_an_object_that_keeps_changing_is_an_error_naming_it(origin, proxy, tmp_path):
    (video,) = origin["sets"][NAME].rglob("*.mp4")
    proxy.add(lambda: touch_later(video), ".mp4", times=1000, method="GET")
    with pytest.raises(RemoteChanged, match=r"demo/videos/.*\.mp4 changed while the mirror read it"):
        mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path)
    proxy.faults.clear()
    (root,) = mirrors(tmp_path)
    poison_holes(root)
    r = mirror_lerobot(f"{proxy.url}/demo", shard=(1, 2), cache_dir=tmp_path)
    check(r, origin)


def test_a_server_that_ignores_ranges_is_an_error(origin, proxy, tmp_path):
    proxy.add("full", ".mp4", times=1000, method="GET")
    with pytest.raises(RemoteError, match=r"\.mp4: asked for bytes .* it does not serve byte ranges"):
        mirror_lerobot(f"{proxy.url}/demo", shard=(0, 2), cache_dir=tmp_path)


def test_a_request_past_its_timeout_is_retried_then_an_error(origin, proxy, tmp_path):
    proxy.add(("delay", 3.0), ".mp4", times=1000, method="GET")
    with pytest.raises(RemoteError, match=r"\.mp4: bytes .* failed 2 times"):
        mirror_lerobot(f"{proxy.url}/demo", shard=(0, 2), cache_dir=tmp_path, retries=1, timeout=0.5)


def proxy_last_modified(proxy, path, origin):
    """The origin's Last-Modified of ``path`` now, as a HEAD through nothing but the origin gives it."""
    import urllib.request
    rel = path.relative_to(origin["sets"][NAME].parent).as_posix()
    with urllib.request.urlopen(urllib.request.Request(f"{origin['url']}/{rel}", method="HEAD")) as r:
        return r.headers["Last-Modified"]
