"""The frame cache's size cap (issue 33, item 7): ROBOCACHE_CACHE_MAX in bytes with K/M/G/T suffixes; each
commit evicts the least recently used entries no process holds until the folder is under it, with a
warning naming them; never the entry just written, nor one a process maps or builds."""

from __future__ import annotations

import gc
import os
import re
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from noise_clips import write_noise_clips

pytestmark = pytest.mark.usefixtures("cache_env")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Four small H.264 files, 6 frames of 32x48 noise each (one entry each: about 14 KiB)."""
    return write_noise_clips(tmp_path_factory.mktemp("cap-clips"), (6,) * 4, np.random.default_rng(5), "cam_")


def load(path, **kw) -> str:
    """The entry name of a load of one file (the frames dropped: nothing maps the entry after)."""
    res = ingest_videos([path], tier="host", workers=1, **kw)
    name = Path(res.cache_path).name.split(".")[0]
    del res
    gc.collect()
    return name


def names() -> set[str]:
    return {e["name"] for e in rc_cache.list_entries()}


def used_at(name: str, seconds: float) -> None:
    """The entry last used `seconds` ago (what a load's touch records)."""
    meta = rc_cache.frames_dir() / f"{name}.json"
    t = meta.stat().st_mtime - seconds
    os.utime(meta, (t, t))


@pytest.mark.parametrize("text, expected", [("4096", 4096), ("20G", 20 << 30), ("512m", 512 << 20), ("1.5K", 1536),
                                            ("10GiB", 10 << 30), (" 2 TB ", 2 << 40), ("7b", 7)])
def test_sizes(text, expected):
    assert rc_cache.parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1G", "1X", "G", "1e9"])
def test_a_bad_cap_is_an_error_before_decoding(clips, monkeypatch, text):
    monkeypatch.setenv("ROBOCACHE_CACHE_MAX", text)
    with pytest.raises(ValueError, match=r"ROBOCACHE_CACHE_MAX=.*expected a size in bytes with an optional K, M, "
                                         r"G or T suffix"):
        ingest_videos(clips[:1], tier="host")
    assert names() == set()


def test_least_recently_used_entries_go_first(clips, monkeypatch):
    a, b, c = load(clips[0]), load(clips[1]), load(clips[2])
    size = max(e["bytes"] for e in rc_cache.list_entries())
    used_at(a, 30)
    used_at(b, 20)
    used_at(c, 10)
    assert load(clips[0]) == a                      # a load touches it: now the most recent
    used = {e["name"]: e["used"] for e in rc_cache.list_entries()}
    assert used[b] < used[c] < used[a]
    monkeypatch.setenv("ROBOCACHE_CACHE_MAX", str(3 * size + size // 2))
    with pytest.warns(rc_cache.CacheWarning, match=rf"evicted 1 cache entries \(least recently used first\) .* "
                                                   rf"ROBOCACHE_CACHE_MAX=.*: {b} \("):
        d = load(clips[3])
    assert names() == {a, c, d}
    assert sum(e["bytes"] for e in rc_cache.list_entries()) <= 3 * size + size // 2


def test_entries_in_use_and_the_new_one_are_kept(clips, monkeypatch):
    a = load(clips[0])
    mapped = ingest_videos(clips[1:2], tier="disk", workers=1)       # its frames map the entry's file
    b = Path(mapped.cache_path).name.split(".")[0]
    monkeypatch.setenv("ROBOCACHE_CACHE_MAX", "1")                  # less than any entry
    with pytest.warns(rc_cache.CacheWarning) as said:
        c = load(clips[2])
    text = [str(w.message) for w in said]
    assert any(f"evicted 1 cache entries" in t and a in t for t in text)
    assert any(f"over ROBOCACHE_CACHE_MAX=1 B, with the entry just written ({c})" in t
               and f"{b} " in t and "in use: a running process has its frames mapped" in t for t in text)
    assert names() == {b, c}
    again = ingest_videos(clips[1:2], tier="disk", workers=1)          # still a valid entry
    assert again.from_cache and torch.equal(again.data, mapped.data)
    del mapped, again
    gc.collect()
    with pytest.warns(rc_cache.CacheWarning) as said:                 # and: d alone is over the cap
        d = load(clips[3])
    assert any("evicted 2 cache entries" in str(w.message) and b in str(w.message) for w in said)
    assert names() == {d}


def test_an_entry_being_built_is_kept(clips, monkeypatch):
    a, b = load(clips[0]), load(clips[1])
    monkeypatch.setenv("ROBOCACHE_CACHE_MAX", "1")
    with rc_cache.Entry(a, rc_cache.frames_dir()).lock():            # another process builds or checks it
        with pytest.warns(rc_cache.CacheWarning) as said:            # and: b evicted
            c = load(clips[2])
    assert any(re.search(f"{a} .*being built or loaded by a running process", str(w.message)) for w in said)
    assert names() == {a, c} and b not in names()


def test_no_cap_evicts_nothing(clips, monkeypatch):
    monkeypatch.delenv("ROBOCACHE_CACHE_MAX", raising=False)
    got = {load(p) for p in clips}
    assert names() == got
