"""``hf://`` through huggingface_hub's HfFileSystem (issue 48), against the Hub's HTTP API served here over a
folder (``HubServer``: repo info, the file tree, ``resolve`` with Range): the revision pinned to its commit,
the tree listed once, each rank's bytes fetched by range; the mirror (holes poisoned) loads what the local
set loads, and a second run fetches nothing.
"""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from remote_servers import hub_server  # noqa: E402
from remote_sets import assert_same, make_sets, poison_holes, records  # noqa: E402
from robocache.remote import mirror_lerobot  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    seed = fresh_seed(4)
    base = tmp_path_factory.mktemp(f"hub-seed{seed}")
    sets = make_sets(base / "sets", seed)
    repos = base / "repos"
    for name, path in sets.items():
        shutil.copytree(path, repos / "lerobot-test" / name)
    with hub_server(repos) as endpoint:
        yield {"endpoint": endpoint, "sets": sets, "options": {"endpoint": endpoint, "token": False}}


def load(root, **kw):
    return robocache.Dataset.from_lerobot(root, device="cpu", cache=False, **kw)


@pytest.mark.parametrize("name", ["forged-v3.0", "forged-v2.1"])
def test_hub_ranks_load_what_the_local_set_gives(hub, name, tmp_path):
    for rank in range(2):
        url = f"hf://datasets/lerobot-test/{name}"
        r = mirror_lerobot(url, shard=(rank, 2), cache_dir=tmp_path, storage_options=hub["options"])
        # meta/ listed, and each folder of the rank's files once; a commit never changes: no version checks
        folders = {p.parent for p, _ in records(r) if p.relative_to(r.root).parts[0] != "meta"}
        assert r.fetched["stats"] == 1 + len(folders)
        poison_holes(r, seed=rank)
        assert_same(load(r.root, shard_episodes=(rank, 2)), load(hub["sets"][name], shard_episodes=(rank, 2)))
        again = mirror_lerobot(url, shard=(rank, 2), cache_dir=tmp_path, storage_options=hub["options"])
        assert again.fetched["bytes"] == 0


def test_a_revision_in_the_url(hub, tmp_path):
    url = "hf://datasets/lerobot-test/demo-v3.0@main"
    r = mirror_lerobot(url, episodes=[0, 5], cache_dir=tmp_path, storage_options=hub["options"])
    poison_holes(r)
    assert_same(load(r.root, episodes=[0, 5]), load(hub["sets"]["demo-v3.0"], episodes=[0, 5]))
