"""A damaged cache entry is never trusted, and never a permanent failure (issue 46, items 3 and 4).

An entry is made from small real videos, then one field of it is damaged: the JSON's spec (height and
width swapped, a color fact), its counts (one changed, two swapped, one zero), its frames, its sources; the
times file truncated; a coded entry's offsets; the data file truncated. The next load must warn once,
naming the entry and the field, rebuild it, and give the frames a load without the cache gives; the
load after that reads the rebuilt entry without a word. Loads go through ``load_videos``, as a reader's
do (the memory plan reads the entry's layout first), or ``ingest_videos`` alone (no plan).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames.compress import ingest_compressed  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from robocache.frames.videos import load_videos  # noqa: E402
from noise_clips import write_noise_clips  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")

COUNTS = (5, 8, 6)        # frames of the three clips
H, W = 32, 48             # not square: swapped, the frame size changes and its byte count does not
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three small H.264 files of 32x48 noise (each frame tells which one it is)."""
    return write_noise_clips(tmp_path_factory.mktemp("damage-clips"), COUNTS, np.random.default_rng(46))


def the_entry(cache_env) -> tuple[rc_cache.Entry, dict]:
    entries = rc_cache.list_entries()
    assert len(entries) == 1, entries
    e = rc_cache.Entry(entries[0]["name"], cache_env / "frames")
    return e, json.loads(e.meta_path.read_text())


def damage_json(e: rc_cache.Entry, meta: dict, **fields) -> None:
    for path, value in fields.items():
        where = meta
        *parents, last = path.split("__")
        for p in parents:
            where = where[p]
        where[last] = value
    e.meta_path.write_text(json.dumps(meta))


def one_warning(load, entry: rc_cache.Entry, field: str):
    """``load()`` warns once, naming ``entry`` and ``field`` and saying it rebuilds; then again without a
    word (the rebuilt entry passes). Both results."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = load()
    said = [str(w.message) for w in seen if issubclass(w.category, rc_cache.CacheWarning)]
    assert len(said) == 1, said
    assert str(entry.meta_path) in said[0], said[0]
    why = said[0].split(str(entry.meta_path), 1)[1]       # (the test's folder, in the path, names the field too)
    assert f"field {field}" in why and why.endswith("rebuilding it"), said[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = load()
    return first, again


# ---------------------------------------------------------------------------------------------
# a reader's load: the plan reads the entry's layout first


def stream(clips, cache=True):
    """(store, times) of ``clips`` as one stream of a reader's load in the host tier."""
    return load_videos({"cam": clips}, device=CPU, frames="host", cache=cache)["cam"]


def same_stream(got, ref) -> None:
    (store, times), (ref_store, ref_times) = got, ref
    assert (store.height, store.width, store.format) == (ref_store.height, ref_store.width, ref_store.format) == \
        (H, W, "yuv420")
    assert store.data.shape == ref_store.data.shape and torch.equal(store.data, ref_store.data)
    assert len(times) == len(ref_times) == len(COUNTS)
    assert all(np.array_equal(a, b) for a, b in zip(times, ref_times))


# the JSON damaged, and the field the warning must name
DAMAGE = {
    "height and width swapped": (dict(spec__height=W, spec__width=H), "spec.height"),
    "matrix": (dict(spec__matrix="bt2020"), "spec.matrix"),
    "a count changed": (dict(counts=[COUNTS[0], COUNTS[1] + 1, COUNTS[2]]), "counts"),
    "a count zero": (dict(counts=[COUNTS[0], 0, COUNTS[2]]), "counts"),
    "two counts swapped": (dict(counts=[COUNTS[1], COUNTS[0], COUNTS[2]]), "counts"),
    "frames": (dict(frames=sum(COUNTS) - 1), "frames"),
    "a source's path": (None, "sources"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_field_is_named_and_rebuilt(clips, cache_env, damage):
    ref = stream(clips, cache=False)
    stream(clips)
    e, meta = the_entry(cache_env)
    fields, field = DAMAGE[damage]
    if fields is None:   # another file's path, of the same size: the key no longer says what the entry holds
        meta["sources"][1]["path"] = meta["sources"][2]["path"]
        e.meta_path.write_text(json.dumps(meta))
    else:
        damage_json(e, meta, **fields)
    got, again = one_warning(lambda: stream(clips), e, field)
    same_stream(got, ref)
    same_stream(again, ref)


@pytest.mark.parametrize("damage", ["height and width swapped", "two counts swapped"])
def test_a_damaged_field_is_named_without_a_plan(clips, cache_env, damage):
    """ingest_videos with no spec or counts from a plan: the spec is checked against the first file's
    header; a count against the files' probe once the entry's checksum fails."""
    ref = ingest_videos(clips, tier="host", cache=False)
    ingest_videos(clips, tier="host")
    e, meta = the_entry(cache_env)
    fields, field = DAMAGE[damage]
    damage_json(e, meta, **fields)
    got, again = one_warning(lambda: ingest_videos(clips, tier="host"), e, field)
    for res in (got, again):
        assert res.spec == ref.spec and torch.equal(res.data, ref.data)
        assert np.array_equal(res.counts, ref.counts)
        assert all(np.array_equal(a, b) for a, b in zip(res.times, ref.times))
    assert not got.from_cache and again.from_cache


def test_truncated_times_are_named(clips, cache_env):
    ref = stream(clips, cache=False)
    stream(clips)
    e, _ = the_entry(cache_env)
    np.save(e.times_path, np.load(e.times_path)[:-2])
    got, again = one_warning(lambda: stream(clips), e, "frames")
    same_stream(got, ref)
    same_stream(again, ref)


def test_a_truncated_data_file_is_named(clips, cache_env):
    ref = stream(clips, cache=False)
    stream(clips)
    e, meta = the_entry(cache_env)
    with open(e.data_path, "r+b") as f:
        f.truncate(meta["total_bytes"] - meta["spec"]["frame_bytes"])
    got, again = one_warning(lambda: stream(clips), e, "total_bytes")
    same_stream(got, ref)
    same_stream(again, ref)


# ---------------------------------------------------------------------------------------------
# a coded entry's offsets


def coded(clips, cache=True):
    return ingest_compressed(clips, cache=cache, workers=2)


@pytest.mark.parametrize("damage", ["one frame's start moved", "not increasing"])
def test_wrong_offsets_are_named(clips, cache_env, damage):
    ref = coded(clips, cache=False)
    coded(clips)
    e, _ = the_entry(cache_env)
    offsets = np.load(e.offsets_path)
    if damage == "one frame's start moved":   # still increasing spans of the whole file: only the frames tell
        offsets[3] += 1
    else:
        offsets[3], offsets[4] = offsets[4], offsets[3]
    np.save(e.offsets_path, offsets)
    got, again = one_warning(lambda: coded(clips), e, "offsets")
    for res in (got, again):
        assert np.array_equal(res.offsets, ref.offsets) and np.array_equal(res.data, ref.data)
        assert all(np.array_equal(a, b) for a, b in zip(res.times, ref.times))
    assert not got.from_cache and again.from_cache


def test_a_coded_entrys_counts_are_named(clips, cache_env):
    ref = coded(clips, cache=False)
    coded(clips)
    e, meta = the_entry(cache_env)
    damage_json(e, meta, counts=[COUNTS[1], COUNTS[0], COUNTS[2]])
    got, _ = one_warning(lambda: coded(clips), e, "counts")
    assert np.array_equal(got.counts, ref.counts) and np.array_equal(got.data, ref.data)
