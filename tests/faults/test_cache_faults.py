"""The decoded-frame cache under the faults of a shared training cluster (issue 34, item 3): a read-only
or another user's cache dir, an entry that is not kept, damaged metadata, a full disk with the entry
already there, the user's umask, entries another user planted."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames import entry as rc_entry  # noqa: E402
from robocache.frames import plan as rc_plan  # noqa: E402
from robocache.frames import processes as rc_processes  # noqa: E402
from robocache.frames.ingest import cached_layout, ingest_videos  # noqa: E402
from robocache.frames.videos import load_videos  # noqa: E402
from noise_clips import write_noise_clips

pytestmark = pytest.mark.usefixtures("cache_env")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three small H.264 files (5, 8, 6 frames of 32x48 noise)."""
    root = tmp_path_factory.mktemp("cache-clips")
    return write_noise_clips(root, (5, 8, 6), np.random.default_rng(3))


@pytest.fixture
def sources(clips, tmp_path):
    """Copies of the clips the test may touch."""
    out = []
    for p in clips:
        q = tmp_path / Path(p).name
        q.write_bytes(Path(p).read_bytes())
        out.append(str(q))
    return out


def entry_files(cache_env) -> list[str]:
    d = cache_env / "frames"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def only_json(cache_env) -> Path:
    (path,) = (cache_env / "frames").glob("*.json")
    return path


def read_only(monkeypatch, cache_env):
    """The cache dir as on a read-only mount (root ignores file modes, so chmod cannot show it): creating,
    removing or renaming anything there is EROFS."""
    inside = str(cache_env)

    def refuse(name, real, creates=None):
        def wrapped(path, *a, **k):
            if os.fspath(path).startswith(inside) and (creates is None or a and a[0] & creates):
                raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
            return real(path, *a, **k)
        monkeypatch.setattr(os, name, wrapped)

    refuse("unlink", os.unlink)
    refuse("replace", os.replace)
    refuse("rename", os.rename)
    refuse("open", os.open, creates=os.O_CREAT | os.O_WRONLY | os.O_RDWR)


def touch(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


# --- a read-only or another user's cache dir


@pytest.mark.parametrize("damage", ["stale", "corrupted"])
def test_read_only_cache_dir_skips_an_invalid_entry(sources, cache_env, monkeypatch, damage):
    ref = ingest_videos(sources, tier="host", cache=False)
    ingest_videos(sources, tier="host")
    if damage == "stale":
        touch(sources[1])
    else:
        only_json(cache_env).write_text('{"version": 2, "complete": true, "key": 1e400}')
    before = entry_files(cache_env)
    read_only(monkeypatch, cache_env)
    with pytest.warns(rc_cache.CacheWarning) as w:
        res = ingest_videos(sources, tier="host")
    said = [str(x.message) for x in w]
    assert len(said) == 2 and "decoding without it (it cannot be removed: Read-only file system)" in said[0]
    assert "going on without a cache" in said[1]
    assert not res.from_cache and res.cache_path is None and torch.equal(res.data, ref.data)
    monkeypatch.undo()
    assert entry_files(cache_env) == before      # skipped, not removed


def test_entries_of_another_user_are_refused_unless_trusted(sources, cache_env, monkeypatch):
    ref = ingest_videos(sources, tier="host")
    monkeypatch.setattr(rc_cache, "user_id", lambda: os.geteuid() + 1)
    assert cached_layout(sources) is None          # the plan takes nothing from it either
    with pytest.warns(rc_cache.CacheWarning, match=rf"is owned by uid {os.geteuid()}, not by this user .* "
                                                   r"ROBOCACHE_CACHE_TRUST_OTHERS=1"):
        res = ingest_videos(sources, tier="host")
    assert not res.from_cache and torch.equal(res.data, ref.data)
    monkeypatch.setenv("ROBOCACHE_CACHE_TRUST_OTHERS", "1")
    hit = ingest_videos(sources, tier="host")
    assert hit.from_cache and torch.equal(hit.data, ref.data)
    assert cached_layout(sources) is not None


# --- an entry that is not kept


def not_kept(monkeypatch, how):
    if how == "source changed":
        monkeypatch.setattr(rc_entry, "stat_or_none", lambda paths: None)
    else:
        def full(self, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(rc_cache.EntryWriter, "commit", full)


@pytest.mark.parametrize("how", ["source changed", "disk full at commit"])
@pytest.mark.parametrize("processes, tier", [(True, "host"), (True, "disk"), (False, "disk"), (False, "host")])
def test_an_entry_not_kept_never_fails_the_load(sources, cache_env, monkeypatch, how, processes, tier):
    ref = ingest_videos(sources, tier="host", cache=False)
    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", processes)
    not_kept(monkeypatch, how)
    with pytest.warns(rc_cache.CacheWarning, match="did not keep|going on without it"):
        res = ingest_videos(sources, tier=tier, workers=2, backend="pyav")
    assert res.cache_path is None and torch.equal(res.data, ref.data)
    assert [n for n in entry_files(cache_env) if not n.endswith(".lock")] == []   # no .tmp left


# --- damaged metadata


DAMAGED = {"deep nesting": "[" * 200_000 + "]" * 200_000,
           "1e400": '{"complete": true, "version": 2, "frames": 1e400, "total_bytes": 1e400, "key": "k", '
                    '"spec": {"frame_bytes": 1e400}, "counts": [1e400], "checksum": "x", "created": [1, 2], '
                    '"sources": [{"path": 7}]}',
           "wrong types": '{"complete": true, "version": 2, "frames": "many", "sources": "x", "created": {}}'}


@pytest.mark.parametrize("damage", DAMAGED)
def test_damaged_metadata_is_a_corrupted_entry_everywhere(sources, cache_env, capsys, damage):
    from robocache.__main__ import main

    ref = ingest_videos(sources, tier="host")
    only_json(cache_env).write_text(DAMAGED[damage])
    assert cached_layout(sources) is None
    assert [e["status"] for e in rc_cache.list_entries()] == ["corrupted"]
    assert main(["cache", "list"]) == 0 and "corrupted" in capsys.readouterr().out
    assert main(["cache", "list", "--json"]) == 0
    capsys.readouterr()
    with pytest.warns(rc_cache.CacheWarning, match="corrupted metadata"):
        res = ingest_videos(sources, tier="host")   # rebuilt
    assert torch.equal(res.data, ref.data) and res.cache_path
    only_json(cache_env).write_text(DAMAGED[damage])
    name = only_json(cache_env).name.split(".")[0]
    assert main(["cache", "clear", "--all"]) == 0
    out = capsys.readouterr().out
    assert f"removed {name} (corrupted" in out and "removed 1 entries" in out
    assert entry_files(cache_env) == []


def test_clear_says_what_it_cannot_remove(sources, cache_env, monkeypatch, capsys):
    from robocache.__main__ import main

    ingest_videos(sources, tier="host")
    read_only(monkeypatch, cache_env)
    with pytest.warns(rc_cache.CacheWarning, match=r"could not remove 4 files .*\(Read-only file system\)"):
        assert main(["cache", "clear", "--all"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out


# --- the space check, file modes


def test_a_cached_disk_tier_stream_needs_no_free_disk(sources, cache_env, monkeypatch):
    cpu = torch.device("cpu")
    need = rc_plan.Need("cam", 10, 1000)
    budget = rc_plan.Budgets(device=0, host=0, disk=0)
    with pytest.raises(MemoryError):
        rc_plan.plan([need], "disk", budget, device=cpu)
    need.cached = True
    assert rc_plan.plan([need], "disk", budget, device=cpu) == {"cam": "disk"}

    first = load_videos({"cam": sources}, device=cpu, frames="disk")
    monkeypatch.setattr(rc_plan, "disk_free", lambda path: rc_plan.DISK_RESERVE)   # nothing left to write
    again = load_videos({"cam": sources}, device=cpu, frames="disk")
    assert torch.equal(again["cam"][0].data, first["cam"][0].data)
    del first, again                                   # mapped: held, `clear` would leave it
    assert rc_cache.clear(all=True)
    with pytest.raises(MemoryError):                   # not cached: it does need the space
        load_videos({"cam": sources}, device=cpu, frames="disk")


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_files_follow_the_umask(sources, cache_env, umask):
    old = os.umask(umask)
    try:
        ingest_videos(sources, tier="host")
    finally:
        os.umask(old)
    modes = {n: (cache_env / "frames" / n).stat().st_mode & 0o777 for n in entry_files(cache_env)}
    assert len(modes) == 4 and set(modes.values()) == {0o666 & ~umask}, modes


def test_frames_ingest_doc_warns_against_sharing():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "frames-ingest.md").read_text()
    assert "must not be shared with users you do not trust" in doc and "ROBOCACHE_CACHE_TRUST_OTHERS" in doc
