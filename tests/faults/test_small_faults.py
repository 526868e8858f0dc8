"""Small faults (issue 46, item 8): ``cache clear ''`` removed every entry; the doctor printed raw terminal
escape sequences from file names; a dataset reached through a symlink made a second cache entry; a
robomimic ``env_args`` that is not JSON silently set the rate to the default."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from robocache import doctor
from robocache.frames import cache as rc_cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_zarr_pickle import _v2_store  # noqa: E402


# ---------------------------------------------------------------------------------------------
# cache clear ''


def _fake_entries(root: Path, names) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        (root / f"{n}.frames").write_bytes(b"\0" * 16)
        (root / f"{n}.json").write_text(json.dumps({"complete": True, "frames": 1, "sources": []}))


@pytest.mark.parametrize("pattern", ["", "  "])
def test_cache_clear_refuses_an_empty_name(cache_env, capsys, pattern):
    names = ["cam-0123456789abcdef", "wrist-fedcba9876543210"]
    _fake_entries(rc_cache.frames_dir(), names)
    assert rc_cache.main(["clear", pattern]) == 1
    err = capsys.readouterr().err
    assert "must not be empty" in err and "--all" in err, err
    assert sorted(e["name"] for e in rc_cache.list_entries()) == names
    with pytest.raises(ValueError, match="entry names must not be empty"):
        rc_cache.clear([pattern])
    assert sorted(e["name"] for e in rc_cache.list_entries()) == names
    assert rc_cache.main(["clear", "cam"]) == 0          # a real prefix still clears its entry
    assert [e["name"] for e in rc_cache.list_entries()] == names[1:]


# ---------------------------------------------------------------------------------------------
# doctor and terminal escapes


def test_doctor_escapes_control_characters_in_names(tmp_path, capsys):
    """A store whose folder name holds an escape sequence (clear screen, set title) and a bidi override:
    the doctor's text shows them escaped; --json escapes them as JSON does."""
    name = "a\x1b[2J\x1b]0;pwned\x07\u202eb.zarr"
    store = _v2_store(tmp_path / name, tmp_path / "ran", "filter")
    assert doctor.main([str(store)]) == 1
    out = capsys.readouterr().out
    assert "uses the pickle codec" in out
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in out, repr(out)
    assert "a\\x1b[2J\\x1b]0;pwned\\x07\\u202eb.zarr" in out
    # a path that is not a source: the one-line error on stderr is escaped too
    assert doctor.main([str(tmp_path / "no\x1b[31msuch")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "no\\x1b[31msuch" in err, repr(err)


# ---------------------------------------------------------------------------------------------
# a symlinked dataset: one cache entry


def test_symlinked_dataset_maps_to_one_entry(cache_env, tmp_path):
    pytest.importorskip("av")
    pytest.importorskip("torch")
    from noise_clips import write_noise_clips
    from robocache.frames.ingest import ingest_videos
    real = tmp_path / "real"
    real.mkdir()
    clips = write_noise_clips(real, (5, 8), np.random.default_rng(3))
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    via_link = [link / Path(p).name for p in clips]
    assert rc_cache.entry_name(via_link, {}) == rc_cache.entry_name(clips, {})
    a = ingest_videos(clips, tier="host")
    b = ingest_videos(via_link, tier="host")
    assert not a.from_cache and b.from_cache
    entries = rc_cache.list_entries()
    assert len(entries) == 1, [e["name"] for e in entries]
    assert entries[0]["sources"] == [os.path.realpath(p) for p in clips]
    np.testing.assert_array_equal(a.data.numpy(), b.data.numpy())


# ---------------------------------------------------------------------------------------------
# robomimic env_args


@pytest.mark.parametrize("env_args", ["{not json", json.dumps(["Lift"]),
                                      json.dumps({"env_kwargs": {"control_freq": "fast"}}),
                                      json.dumps({"env_kwargs": {"control_freq": -20}})],
                         ids=["not-json", "not-object", "freq-text", "freq-negative"])
def test_robomimic_bad_env_args_warns(tmp_path, env_args):
    h5py = pytest.importorskip("h5py")
    from robocache.readers import read_robomimic
    path = tmp_path / "demo.hdf5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = env_args
        g = data.create_group("demo_0")
        g.create_dataset("obs/eef_pos", data=np.zeros((4, 3)))
        g.create_dataset("actions", data=np.zeros((4, 7), np.float32))
    with pytest.warns(UserWarning, match=rf"^{path}: data.attrs\['env_args'\] is not robosuite's JSON env kwargs"):
        ep = read_robomimic(path)
    assert set(ep.rates.values()) == {20.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(read_robomimic(path, rate=15).rates.values()) == {15.0}    # rate= given: no warning
