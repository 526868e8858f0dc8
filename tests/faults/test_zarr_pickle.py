"""No code from a dataset ever runs (issue 46, item 1): a zarr array whose codec is pickle would run
whatever its chunks (or, for a structured dtype, its fill value) say when decoded, inside zarr or inside
robocache's own numcodecs path. The reader refuses such a store from its metadata, before zarr opens it,
whatever zarr and numcodecs are installed; the error names the array and the safe alternatives.

The stores are written by hand (JSON metadata + chunk files), so the test does not depend on which zarr
version can still write a pickle codec; the payload creates a marker file when unpickled. numcodecs
>= 0.15.2 refuses to unpickle unless NUMCODECS_ALLOW_UNSAFE_PICKLE_DECODE=1, older ones always unpickle:
the tests allow it (as a user's environment may), so that only robocache's own check stands between the
payload and the interpreter."""

from __future__ import annotations

import base64
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zarr")
from robocache import doctor  # noqa: E402
from robocache.readers import ReaderError, read_zarr  # noqa: E402


@pytest.fixture(autouse=True)
def unsafe_numcodecs(monkeypatch):
    pickles = pytest.importorskip("numcodecs.pickles")
    monkeypatch.setattr(pickles, "ALLOW_UNSAFE_PICKLE_DECODE", True, raising=False)


class _Payload:
    """Unpickles into ``open(marker, "w")``: the marker's existence shows the payload ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _v2_array(root: Path, key: str, meta: dict, chunks: dict[str, bytes]) -> None:
    d = root / key
    d.mkdir(parents=True)
    (d / ".zarray").write_text(json.dumps({"zarr_format": 2, "order": "C", "fill_value": None,
                                           "compressor": None, "filters": None, **meta}))
    for name, data in chunks.items():
        (d / name).write_bytes(data)


def _v2_store(root: Path, marker: Path, where: str) -> Path:
    """A ReplayBuffer of 4 steps, 1 episode; ``where`` says which array carries the pickle codec:
    "object" (an object array, object_codec pickle: zarr's path), "filter" (a float array with a pickle
    filter: robocache's numcodecs path), "ends" (meta/episode_ends itself)."""
    for g in ("", "data", "meta"):
        (root / g).mkdir(parents=True, exist_ok=True)
        (root / g / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    payload = pickle.dumps(_Payload(marker))
    pickled = {"filters": [{"id": "pickle", "protocol": 5}]}
    ends = np.array([4], "<i8").tobytes()
    _v2_array(root, "meta/episode_ends", {"shape": [1], "chunks": [1], "dtype": "<i8",
                                          **(pickled if where == "ends" else {})},
              {"0": payload if where == "ends" else ends})
    _v2_array(root, "data/state", {"shape": [4, 2], "chunks": [4, 2], "dtype": "<f4"},
              {"0.0": np.zeros((4, 2), "<f4").tobytes()})
    if where == "object":
        _v2_array(root, "data/label", {"shape": [4], "chunks": [4], "dtype": "|O", **pickled}, {"0": payload})
    elif where == "filter":
        _v2_array(root, "data/action", {"shape": [4], "chunks": [4], "dtype": "<f8", **pickled}, {"0": payload})
    return root


@pytest.mark.parametrize("fast", [True, False], ids=["numcodecs", "zarr"])
@pytest.mark.parametrize("where,array", [("object", "data/label"), ("filter", "data/action"),
                                         ("ends", "meta/episode_ends")])
def test_pickle_codec_refused(tmp_path, fast, where, array):
    marker = tmp_path / "ran"
    store = _v2_store(tmp_path / "store.zarr", marker, where)
    with pytest.raises(ReaderError) as e:
        read_zarr(store, fast=fast)
    assert not marker.exists(), "the dataset's pickle payload ran"
    msg = str(e.value)
    assert msg.startswith(str(store / array)), msg
    assert "pickle" in msg and "VLenUTF8" in msg, msg


def test_pickle_codec_refused_even_when_not_read(tmp_path):
    """An array left out by ``keys`` is still refused: zarr decodes a structured dtype's fill value with
    the object codec when it opens the array's metadata, before any read."""
    marker = tmp_path / "ran"
    store = _v2_store(tmp_path / "store.zarr", marker, "object")
    with pytest.raises(ReaderError, match=r"data/label.*pickle"):
        read_zarr(store, keys=["state"])
    assert not marker.exists()


def test_pickle_in_consolidated_metadata_refused(tmp_path):
    """zarr 3 opens a group through .zmetadata when there is one: a pickle codec declared only there."""
    marker = tmp_path / "ran"
    store = _v2_store(tmp_path / "store.zarr", marker, "filter")
    zarray = json.loads((store / "data/action/.zarray").read_text())
    (store / "data/action/.zarray").write_text(json.dumps({**zarray, "filters": None}))
    (store / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": {
        "data/action/.zarray": zarray}}))
    with pytest.raises(ReaderError, match=r"\.zmetadata: array 'data/action'.*pickle"):
        read_zarr(store)
    assert not marker.exists()


def test_pickle_in_zip_store_refused(tmp_path):
    marker = tmp_path / "ran"
    store = _v2_store(tmp_path / "store.zarr", marker, "object")
    zipped = tmp_path / "store.zarr.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for p in sorted(store.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(store).as_posix())
    with pytest.raises(ReaderError, match=r"store\.zarr\.zip.*data/label.*pickle"):
        read_zarr(zipped)
    assert not marker.exists()


def _v3_store(root: Path, marker: Path) -> Path:
    """A zarr v3 ReplayBuffer whose data/action array's codec chain holds numcodecs' pickle."""
    for g in ("", "data", "meta"):
        (root / g).mkdir(parents=True, exist_ok=True)
        (root / g / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group",
                                                         "attributes": {"name": "pickle"}}))

    def array(key, dtype, codecs, chunk):
        d = root / key
        (d / "c").mkdir(parents=True)
        (d / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "array", "shape": [4 if key != "meta/episode_ends" else 1],
            "data_type": dtype, "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": codecs}))
        (d / "c" / "0").write_bytes(chunk)
    raw = [{"name": "bytes", "configuration": {"endian": "little"}}]
    array("meta/episode_ends", "int64", raw, np.array([4, 0, 0, 0], "<i8").tobytes())
    array("data/action", "float64", [{"name": "numcodecs.pickle", "configuration": {"protocol": 5}}, *raw],
          pickle.dumps(_Payload(marker)))
    return root


def test_pickle_codec_v3_refused(tmp_path):
    marker = tmp_path / "ran"
    store = _v3_store(tmp_path / "store.zarr", marker)
    with pytest.raises(ReaderError, match=r"data/action/zarr\.json: array 'data/action' uses the pickle codec"):
        read_zarr(store)
    assert not marker.exists()


def test_structured_fill_value_refused(tmp_path):
    """zarr 2 unpickles a structured dtype's object fill value when it opens the array (listing the keys
    does: the doctor's too), before any chunk is read."""
    marker = tmp_path / "ran"
    store = _v2_store(tmp_path / "store.zarr", marker, "none")
    fill = base64.standard_b64encode(pickle.dumps(_Payload(marker))).decode()
    _v2_array(store, "data/rec", {"shape": [4], "chunks": [4], "dtype": [["a", "|O"]], "fill_value": fill,
                                  "filters": [{"id": "pickle"}]}, {})
    with pytest.raises(ReaderError, match=r"data/rec/\.zarray: array 'data/rec' uses the pickle codec"):
        read_zarr(store, keys=["state"])
    assert not marker.exists()
    report = doctor.diagnose(store, format="zarr")
    assert not marker.exists()
    assert any("pickle codec" in f.message and "data/rec" in f.message for f in report.findings), report


def test_safe_object_codec_still_reads(tmp_path):
    """The check is on the codec, not on object arrays: a store without pickle reads as before."""
    store = _v2_store(tmp_path / "store.zarr", tmp_path / "ran", "none")
    eps = read_zarr(store)
    assert eps.episodes[0]["state"][0].shape == (4, 2)
