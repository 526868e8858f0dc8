"""Errors that pointed the user the wrong way (issue 46, item 7), each now naming the file or argument and
what was expected:

a) the disk tier with the cache folder a regular file, under one, or not writable said
   ``MemoryError ... disk 0.00 GB``: it says the folder is not one / cannot be written, and names
   ROBOCACHE_CACHE_DIR;
b) a parquet file of another tool (with a timestamp column of its own) in a LeRobot folder advised
   changing ``fps``: it names the LeRobot columns it lacks;
c) ``chunks_size: "many"`` in info.json, a zarr shape of 10^12, a bogus zarr dtype, compressor or filter
   named no file (or allocated terabytes);
d) ``load_state_dict`` with ``num_samples`` (or a setting) as an array raised NumPy's "truth value is
   ambiguous"."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import robocache
from robocache import DataLoader
from robocache.frames.cache import CacheError, CacheWarning
from robocache.readers import ReaderError, read_lerobot, read_zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lerobot_forge import write_lerobot  # noqa: E402
from test_zarr_pickle import _v2_store  # noqa: E402


# ---------------------------------------------------------------------------------------------
# a) the disk tier's cache folder


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    pytest.importorskip("av")
    from noise_clips import write_noise_clips
    return write_noise_clips(tmp_path_factory.mktemp("clips"), (5, 8), np.random.default_rng(3))


def _load_disk(clips, frames="disk"):
    torch = pytest.importorskip("torch")
    from robocache.frames.videos import load_videos
    return load_videos({"cam": clips}, device=torch.device("cpu"), frames=frames, cache=True)


@pytest.mark.parametrize("where,why", [("file", "is a file, not a folder"), ("under-file", "cannot be made")])
def test_disk_tier_names_the_unusable_cache_folder(clips, tmp_path, monkeypatch, where, why):
    f = tmp_path / "not-a-folder"
    f.write_text("x")
    folder = f if where == "file" else f / "sub"
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(folder))
    with pytest.raises(CacheError) as e:
        _load_disk(clips)
    msg = str(e.value)
    assert str(folder) in msg and why in msg and "ROBOCACHE_CACHE_DIR" in msg, msg
    assert "0.00 GB" not in msg
    # auto still loads (the frames fit in memory): an unusable disk tier is no error where it is not needed
    with pytest.warns(CacheWarning, match="cannot write its cache"):
        assert _load_disk(clips, "auto")["cam"][0].tier == "cpu"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to a read-only folder")
def test_disk_tier_names_the_read_only_cache_folder(clips, tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(folder))
    try:
        with pytest.raises(CacheError, match=r"is not writable by this user.*ROBOCACHE_CACHE_DIR"):
            _load_disk(clips)
    finally:
        folder.chmod(0o755)


def test_no_fit_message_says_why_there_is_no_disk(tmp_path):
    """When nothing fits anywhere the MemoryError stays, but its disk line says why there is no disk."""
    torch = pytest.importorskip("torch")
    from robocache.frames import plan as fplan
    f = tmp_path / "file"
    f.write_text("x")
    b = fplan.Budgets(device=0, host=10, disk=0, disk_dir=str(f), disk_why=fplan.disk_unusable(f))
    need = fplan.Need("cam", 100, 1000, 10, 100)
    with pytest.raises(MemoryError, match=rf"disk: none, the cache folder {f} is a file, not a folder"):
        fplan.plan([need], "auto", b, device=torch.device("cpu"))


# ---------------------------------------------------------------------------------------------
# b, c) LeRobot


def test_foreign_parquet_names_the_missing_columns(tmp_path):
    """Timestamps of their own at 100 Hz (fps 10 in info.json): the old error said to set fps to 100."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path / "ds"
    write_lerobot(root, np.random.default_rng(0))
    for p in sorted((root / "data/chunk-000").glob("*.parquet")):
        n = pq.read_metadata(p).num_rows
        pq.write_table(pa.table({"timestamp": 1.7e9 + np.arange(n) * 0.01, "x": np.arange(n, dtype=float)}), p)
    with pytest.raises(ReaderError) as e:
        read_lerobot(root)
    msg = str(e.value)
    assert msg.startswith(str(root / "data/chunk-000/episode_000000.parquet")), msg
    assert "'frame_index', 'episode_index', 'index'" in msg and "not look like a LeRobot data file" in msg, msg
    assert "fps" not in msg


@pytest.mark.parametrize("value", ["many", 0, -5, 2.5, True, [1000]])
def test_chunks_size_names_info_json(tmp_path, value):
    root = tmp_path / "ds"
    write_lerobot(root, np.random.default_rng(0))
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "chunks_size": value}))
    with pytest.raises(ReaderError, match=rf"^{root / 'meta/info.json'}: chunks_size is .*expected a positive integer"):
        read_lerobot(root)
    from robocache.readers.lerobot_audit import audit_lerobot
    found = audit_lerobot(root).findings          # doctor's audit says the same, not a raw int() error
    assert [f[0] for f in found] == ["error"] and "chunks_size is" in found[0][3] and "info.json" in found[0][3]


# ---------------------------------------------------------------------------------------------
# c) zarr metadata fields


@pytest.mark.parametrize("fast", [True, False], ids=["numcodecs", "zarr"])
@pytest.mark.parametrize("array,field,value,pattern", [
    ("data/state", "shape", [10**12, 2], (r"array 'data/state' has shape \[1000000000000, 2\]: 1000000000000 "
                                          r"steps, meta/episode_ends ends at 4")),
    ("data/state", "shape", [4, 10**12], (r"array 'data/state' has shape \[4, 1000000000000\] of float32: .* GB, "
                                          r"more than the .* GB of memory this process may take")),
    ("meta/episode_ends", "shape", [10**12], r"array 'meta/episode_ends' has shape \[1000000000000\] of int64"),
    ("data/state", "dtype", "<q9", r"array 'data/state' has dtype '<q9', which is not a NumPy dtype"),
    ("data/state", "compressor", {"id": "bogus"}, (r"array 'data/state' has compressor \{'id': 'bogus'\}, "
                                                   r"which numcodecs cannot make")),
    ("data/state", "filters", [{"id": "nope"}], r"array 'data/state' has filters \{'id': 'nope'\}"),
], ids=["steps", "row-size", "episode-ends", "dtype", "compressor", "filter"])
def test_zarr_fields_name_the_file(tmp_path, fast, array, field, value, pattern):
    store = _v2_store(tmp_path / "s.zarr", tmp_path / "ran", "none")
    p = store / array / ".zarray"
    (p).write_text(json.dumps({**json.loads(p.read_text()), field: value}))
    with pytest.raises(ReaderError, match=rf"^{store / array}(/\.zarray)?: {pattern}"):
        read_zarr(store, fast=fast)


# ---------------------------------------------------------------------------------------------
# d) load_state_dict


@pytest.mark.parametrize("field", ["num_samples", "total_samples", "seed", "shuffle", "drop_last"])
def test_load_state_dict_array_field_named(field):
    rng = np.random.default_rng(0)
    eps = [{"joints": (rng.standard_normal((20, 3)).astype(np.float32), np.arange(20) / 10.0)} for _ in range(3)]
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    win = {"j": robocache.Window("joints", indices=range(2))}
    state = DataLoader(ds, 4, shuffle=True, seed=3, windows=win).state_dict()
    state[field] = np.array([state[field]] * 2)
    with pytest.raises(ValueError, match=rf"^load_state_dict: {field} must be") as e:
        DataLoader(ds, 4, shuffle=True, seed=3, windows=win).load_state_dict(state)
    assert "ambiguous" not in str(e.value)
