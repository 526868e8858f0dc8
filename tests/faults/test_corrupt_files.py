"""Every reader x every kind of damage its files can meet: a ReaderError (a ValueError) whose
message starts with the damaged file's path, through the reader and through Dataset.from_*;
the damaged copy is byte-identical after the failed read (sha256 of every file), and so are
the real fixtures it was copied from.

Damage kinds: empty file, random bytes of the same length, zeroed head (magic numbers and
headers), zeroed middle (payload: compressed pages, NAL units, HDF5 object headers), truncated
to half, flipped bytes in a footer; for metadata (JSON/JSONL) truncated and empty; for HDF5 a
damaged compressed chunk and a damaged fletcher32-checksummed chunk; for zarr chunks and every
level of .zarray/.zgroup. tests/test_readers.py holds the first corruption tests (truncated
parquet, truncated mp4, truncated HDF5, damaged zarr chunk, missing files); this file fills the
rest of the matrix. Damage that a format cannot detect (a flipped value inside an uncompressed,
unchecksummed HDF5 dataset reads as a different number) is not an error and is not tested.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import robocache

from robocache.readers import ReaderError, available_backends, read_lerobot, read_robomimic, read_zarr
from conftest import sha256_tree  # noqa: E402

VIDEO = "observation.images.ego_view"


def damage(path: Path, kind: str, rng) -> None:
    b = bytearray(path.read_bytes())
    n = len(b)
    if kind == "empty":
        b = bytearray()
    elif kind == "garbage":
        b = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    elif kind == "zeroed-head":
        b[: min(n, 1024)] = bytes(min(n, 1024))
    elif kind == "zeroed-middle":
        b[n // 4: 3 * n // 4] = bytes(3 * n // 4 - n // 4)
    elif kind == "truncated":
        b = b[: n // 2]
    elif kind == "flipped-footer":
        for i in range(max(0, n - 200), n - 8, 7):
            b[i] ^= 0xFF
    else:
        raise ValueError(kind)
    path.write_bytes(bytes(b))


def expect_reader_error(read, damaged: Path, root: Path, name_re: str, also=None):
    """read() raises ReaderError naming the file (name_re, a regex on the message's start);
    nothing under root changed. `also` runs the same read through Dataset.from_*."""
    before = sha256_tree(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ReaderError) as err:
            read()
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert re.match(name_re, msg), f"message does not start with the damaged file ({name_re}): {msg}"
    if also is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ReaderError, match=re.escape(msg[:60])):
                also()
    assert sha256_tree(root) == before, f"the reader modified {root} while failing on {damaged}"
    return msg


# ----------------------------------------------------------------------------
# the real fixtures (`groot`, `pusht`: conftest.py) are hashed before and after this module


def dataset_cls():
    pytest.importorskip("torch")
    from robocache import Dataset
    return Dataset


# ----------------------------------------------------------------------------
# LeRobot v2 (GR00T PickNPlace copy): parquet, mp4, metadata


PARQUET_DAMAGE = ["empty", "garbage", "zeroed-head", "zeroed-middle", "truncated", "flipped-footer"]


@pytest.mark.parametrize("kind", PARQUET_DAMAGE)
def test_lerobot_parquet(groot, tmp_path, kind, rng):
    pytest.importorskip("pyarrow")
    root = tmp_path / "groot"
    shutil.copytree(groot, root, ignore=shutil.ignore_patterns("*.mp4"))
    p = root / "data/chunk-000/episode_000002.parquet"
    damage(p, kind, rng)
    Dataset = dataset_cls()
    expect_reader_error(lambda: read_lerobot(root, load_video=False), p, root,
                        re.escape(str(p)) + r": cannot read parquet file",
                        also=lambda: Dataset.from_lerobot(root, load_video=False, device="cpu"))


MP4_DAMAGE = ["empty", "garbage", "zeroed-head", "zeroed-middle", "truncated"]


@pytest.mark.parametrize("backend", ["pyav", "opencv"])
@pytest.mark.parametrize("kind", MP4_DAMAGE)
def test_lerobot_mp4(groot, tmp_path, kind, backend, rng):
    pytest.importorskip("pyarrow")
    pytest.importorskip({"pyav": "av", "opencv": "cv2"}[backend])
    if backend not in available_backends():
        pytest.skip(f"{backend} cannot decode here")
    root = tmp_path / "groot"
    shutil.copytree(groot, root)
    p = root / f"videos/chunk-000/{VIDEO}/episode_000004.mp4"
    damage(p, kind, rng)
    # the reader locates the videos; the frame storage opens them (no cache: every load decodes)
    expect_reader_error(lambda: robocache.Dataset.from_lerobot(root, episodes=[3, 4], video_backend=backend, device="cpu",
                                                     cache=False), p, root, re.escape(str(p)) + ": ")


META = [("info.json", "truncated", r"meta/info\.json: not valid JSON"),
        ("info.json", "empty", r"meta/info\.json: not valid JSON"),
        ("modality.json", "truncated", r"meta/modality\.json: not valid JSON"),
        ("modality.json", "empty", r"meta/modality\.json: not valid JSON"),
        ("stats.json", "truncated", r"meta/stats\.json: not valid JSON"),
        ("stats.json", "empty", r"meta/stats\.json: not valid JSON"),
        ("tasks.jsonl", "truncated", r"meta/tasks\.jsonl: line \d+ is not valid JSON"),
        # an empty task table: the first parquet whose task column points into it is named
        ("tasks.jsonl", "empty", r"\S*episode_000000\.parquet, episode 0: .*meta/tasks is missing"),
        ("episodes.jsonl", "truncated", r"meta/episodes\.jsonl: line \d+ is not valid JSON"),
        ("episodes.jsonl", "empty", r"\S*groot: the dataset lists no episodes")]


@pytest.mark.parametrize("name,kind,pattern", META, ids=[f"{m[0]}-{m[1]}" for m in META])
def test_lerobot_metadata(groot, tmp_path, name, kind, pattern, rng):
    pytest.importorskip("pyarrow")
    root = tmp_path / "groot"
    shutil.copytree(groot, root, ignore=shutil.ignore_patterns("*.mp4"))
    p = root / "meta" / name
    damage(p, kind, rng)
    expect_reader_error(lambda: read_lerobot(root, load_video=False), p, root, r"\S*" + pattern)


# ----------------------------------------------------------------------------
# LeRobot v3 (written by test_readers._write_v3): every file kind of the layout


V3_FILES = ["meta/episodes/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet", "meta/tasks.parquet",
            "videos/observation.images.cam/chunk-000/file-000.mp4"]


@pytest.mark.parametrize("kind", ["truncated", "garbage", "empty"])
@pytest.mark.parametrize("name", V3_FILES, ids=["episodes-meta", "data", "tasks", "video"])
def test_lerobot_v3(tmp_path, name, kind, rng):
    from test_readers import _write_v3
    if name.endswith(".mp4") and not available_backends():
        pytest.skip("no video backend")
    root = tmp_path / "v3"
    root.mkdir()
    _write_v3(root, rng)
    assert len(read_lerobot(root, load_video=name.endswith(".mp4"))) == 3  # intact, it reads
    p = root / name
    damage(p, kind, rng)
    load = (lambda: robocache.Dataset.from_lerobot(root, device="cpu", cache=False)) if name.endswith(".mp4") else \
        (lambda: read_lerobot(root))
    expect_reader_error(load, p, root, re.escape(str(p)) + ": ")


# ----------------------------------------------------------------------------
# robomimic HDF5


@pytest.mark.parametrize("kind", ["empty", "garbage", "zeroed-head", "zeroed-middle", "truncated"])
def test_robomimic_file(tmp_path, kind, rng):
    h5py = pytest.importorskip("h5py")
    from test_readers import _write_robomimic
    p = tmp_path / "demo.hdf5"
    _write_robomimic(p, h5py, rng, lengths=(400, 300, 200, 100))
    damage(p, kind, rng)
    Dataset = dataset_cls()
    expect_reader_error(lambda: read_robomimic(p), p, p, re.escape(str(p)) + r": cannot (open|read) HDF5",
                        also=lambda: Dataset.from_robomimic(p, device="cpu"))


@pytest.mark.parametrize("compression,fletcher32", [("gzip", False), (None, True), ("gzip", True)],
                         ids=["gzip", "fletcher32", "gzip+fletcher32"])
def test_robomimic_damaged_chunk(tmp_path, compression, fletcher32, rng):
    """A damaged chunk of a filtered dataset (how robomimic image datasets are often stored)
    fails its filter on read; the error names the file."""
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "chunked.hdf5"
    with h5py.File(p, "w") as f:
        for i in range(3):
            g = f.create_group(f"data/demo_{i}")
            g.create_dataset("actions", data=rng.standard_normal((500, 7)).astype(np.float32), chunks=(100, 7),
                             compression=compression, fletcher32=fletcher32)
            g.create_dataset("obs/pos", data=rng.standard_normal((500, 3)), chunks=(100, 3), fletcher32=fletcher32)
    assert len(read_robomimic(p)) == 3
    with h5py.File(p, "r") as f:
        info = f["data/demo_1/actions"].id.get_chunk_info(2)
    raw = bytearray(p.read_bytes())
    lo = info.byte_offset + info.size // 3
    raw[lo: lo + max(8, info.size // 3)] = bytes(max(8, info.size // 3))
    p.write_bytes(bytes(raw))
    expect_reader_error(lambda: read_robomimic(p), p, p, re.escape(str(p)) + r": cannot read HDF5 data")


# ----------------------------------------------------------------------------
# zarr (PushT copy without the 30 MB image array)


ZARR = [("data/state/40.0", "empty", r"data/state(/40\.0: cannot decode chunk 40|: cannot read chunk 40)"),
        ("data/state/40.0", "garbage", r"data/state(/40\.0: cannot decode chunk 40|: cannot read chunk 40)"),
        ("data/state/159.0", "truncated", r"data/state(/159\.0: cannot decode chunk 159|: cannot read chunk 159)"),
        ("data/state/.zarray", "truncated", r"data/state/\.zarray: not valid JSON"),
        ("data/state/.zarray", "empty", r"data/state/\.zarray: not valid JSON"),
        ("data/.zgroup", "garbage", r"data/\.zgroup: not valid JSON"),
        (".zgroup", "truncated", r"\.zgroup: not valid JSON"),
        ("meta/episode_ends/0", "garbage", r"meta/episode_ends: cannot read"),
        ("meta/episode_ends/0", "empty", r"meta/episode_ends: cannot read"),
        ("meta/episode_ends/.zarray", "truncated", r"meta/episode_ends/\.zarray: not valid JSON")]


@pytest.mark.parametrize("fast", [True, False], ids=["numcodecs", "zarr"])
@pytest.mark.parametrize("name,kind,pattern", ZARR, ids=[f"{z[0]}-{z[1]}" for z in ZARR])
def test_zarr(pusht_copy, name, kind, pattern, fast, rng):
    p = pusht_copy / name
    damage(p, kind, rng)
    also = None
    if fast:
        Dataset = dataset_cls()
        also = lambda: Dataset.from_zarr(pusht_copy, keys=["state"], device="cpu")  # noqa: E731
    expect_reader_error(lambda: read_zarr(pusht_copy, keys=["state"], fast=fast), p, pusht_copy,
                        re.escape(str(pusht_copy)) + "/" + pattern, also=also)


@pytest.mark.parametrize("fast", [True, False], ids=["numcodecs", "zarr"])
@pytest.mark.parametrize("key,chunks,pattern", [
    ("data/state", [0, 5], r"data/state(/\.zarray)?: array 'data/state' has chunks \[0, 5\]; every chunk size must be >= 1"),
    ("meta/episode_ends", [0], r"meta/episode_ends(/\.zarray)?: array 'meta/episode_ends' has chunks \[0\]; every "
                               r"chunk size must be >= 1")])
def test_zarr_bad_chunk_sizes(pusht_copy, key, chunks, pattern, fast):
    """A chunk size of 0 divided by zero inside the reader or zarr (ZeroDivisionError naming nothing)."""
    p = pusht_copy / key / ".zarray"
    meta = json.loads(p.read_text())
    meta["chunks"] = chunks
    p.write_text(json.dumps(meta))
    expect_reader_error(lambda: read_zarr(pusht_copy, keys=["state"], fast=fast), p, pusht_copy,
                        re.escape(str(pusht_copy)) + "/" + pattern)


def test_damage_kinds_change_the_files(tmp_path, rng):
    """Each damage kind really alters a file (a no-op damage would make a test vacuous)."""
    src = bytes(rng.integers(0, 256, 5000, dtype=np.uint8).tobytes())
    for kind in ["empty", "garbage", "zeroed-head", "zeroed-middle", "truncated", "flipped-footer"]:
        p = tmp_path / kind
        p.write_bytes(src)
        damage(p, kind, rng)
        assert p.read_bytes() != src, kind
