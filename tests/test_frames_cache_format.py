"""The cache entry's on-disk format (version 2) is a contract: an entry another robocache wrote is found and
read, not decoded again. Entries are written here by a reference writer of the format as cache.py documents
it (names, keys, JSON fields, checksum: hashlib, json and numpy only, none of robocache's code), for a
decoded stream (tiers host and disk, through a reader's plan too) and a JPEG one; robocache must read them
without decoding, without a warning, with the frames they hold."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.frames.compress import ingest_compressed  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from robocache.frames.videos import load_videos  # noqa: E402
from robocache.video import decode as rc_decode  # noqa: E402
from noise_clips import write_noise_clips  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")

VERSION = 2


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return write_noise_clips(tmp_path_factory.mktemp("format-clips"), (5, 8, 6), np.random.default_rng(2))


def digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


def write_entry(cache_env, label, paths, options, spec, counts, data: bytes, times, offsets=None) -> Path:
    """One entry of format 2 in the cache folder, as cache.py's docstring describes it; its JSON's path."""
    root = cache_env / "frames"
    root.mkdir(parents=True, exist_ok=True)
    real = [os.path.realpath(p) for p in paths]
    name = f"{label}-{digest({'paths': real, 'options': options, 'version': VERSION})[:16]}"
    sources = [{"path": p, "size": os.stat(p).st_size, "mtime_ns": os.stat(p).st_mtime_ns} for p in real]
    fb = spec["frame_bytes"]
    # blake2b of the version and frame size, counts, offsets (coded), times, then each sampled frame's own
    # blake2b: the first, middle and last frame of every source
    h = hashlib.blake2b(digest_size=16)
    h.update(f"robocache-frames-v{VERSION}:{fb}:".encode())
    h.update(np.asarray(counts, "<i8").tobytes())
    if offsets is not None:
        h.update(np.asarray(offsets, "<i8").tobytes())
    h.update(np.asarray(times, "<f8").tobytes())
    first = 0
    for n in counts:
        for r in sorted({first, first + n // 2, first + n - 1}):
            a, b = (r * fb, (r + 1) * fb) if offsets is None else (offsets[r], offsets[r + 1])
            h.update(hashlib.blake2b(data[a:b], digest_size=16).digest())
        first += n
    (root / f"{name}.frames").write_bytes(data)
    np.save(root / f"{name}.times.npy", np.asarray(times, np.float64))
    if offsets is not None:
        np.save(root / f"{name}.offsets.npy", np.asarray(offsets, np.int64))
    meta = {"complete": True, "version": VERSION, "name": name, "key": digest({"sources": sources, "options": options,
                                                                                "version": VERSION}),
            "spec": spec, "counts": list(counts), "frames": sum(counts), "total_bytes": len(data),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "sources": sources, "options": options, "checksum": h.hexdigest(),
            "checksum_covers": "counts, frame size, times, first/middle/last frame of each source"}
    (root / f"{name}.json").write_text(json.dumps(meta, indent=1))
    return root / f"{name}.json"


def pyav_frames(path):
    """Every frame's I420 planes (flattened) and time, as PyAV gives them."""
    with av.open(path) as c:
        got = [(f.to_ndarray(format="yuv420p").ravel(), f.time) for f in c.decode(c.streams.video[0])]
    return np.stack([g[0] for g in got]), np.array([g[1] for g in got], np.float64)


def no_decoding(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("decoded although a cache entry holds the frames")
    monkeypatch.setattr(rc_decode, "DECODERS", {k: boom for k in rc_decode.DECODERS})


def raw_entry(clips, cache_env, label):
    frames = [pyav_frames(p) for p in clips]
    rows = np.concatenate([f for f, _ in frames])
    spec = {"format": "yuv420", "height": 32, "width": 48, "channels": 3, "matrix": "bt601", "full_range": False,
            "frame_bytes": 32 * 48 * 3 // 2}
    write_entry(cache_env, label, clips, {"resize": None, "backend": "pyav"}, spec, [len(f) for f, _ in frames],
                rows.tobytes(), np.concatenate([t for _, t in frames]))
    return rows, [t for _, t in frames]


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_a_decoded_entry_of_the_format_is_read(clips, cache_env, monkeypatch, tier):
    rows, times = raw_entry(clips, cache_env, Path(clips[0]).parent.name)
    no_decoding(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ingest_videos(clips, tier=tier, backend="pyav")
    assert got.from_cache and np.array_equal(got.data.numpy(), rows)
    assert len(got.times) == len(times) and all(np.array_equal(a, b) for a, b in zip(got.times, times))


def test_a_readers_plan_takes_the_entry(clips, cache_env, monkeypatch):
    rows, times = raw_entry(clips, cache_env, "decoding_cam")      # the label load_videos gives stream "cam"
    no_decoding(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store, got = load_videos({"cam": clips}, device=torch.device("cpu"), frames="host", backend="pyav")["cam"]
    assert (store.height, store.width) == (32, 48) and np.array_equal(store.data.numpy(), rows)
    assert all(np.array_equal(a, b) for a, b in zip(got, times))


def test_a_jpeg_entry_of_the_format_is_read(clips, cache_env, monkeypatch):
    coded = ingest_compressed(clips, cache=False, workers=2)          # the bitstreams; no entry written
    assert not list(cache_env.rglob("*.json"))
    spec = {"format": "jpeg", "height": 32, "width": 48, "channels": 3, "matrix": "bt601", "full_range": False,
            "frame_bytes": 0, "check": "crc32-app15"}
    options = {"resize": None, "backend": "pyav", "tier": "compressed", "codec": "mjpeg", "qscale": 2}
    write_entry(cache_env, Path(clips[0]).parent.name, clips, options, spec, [5, 8, 6], coded.data.tobytes(),
                np.concatenate(coded.times), coded.offsets)
    no_decoding(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ingest_compressed(clips, workers=2)
    assert got.from_cache and np.array_equal(got.data, coded.data) and np.array_equal(got.offsets, coded.offsets)
