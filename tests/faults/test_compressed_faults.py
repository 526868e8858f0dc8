"""Faults of the compressed frame tier (issue 34 item 4, finding 9): a damaged JPEG inside a cached entry.

Before, the entry's checksum (three frames per source) missed damage anywhere else, and the bad frame
raised FFmpeg's bare ``InvalidDataError`` in the training loop on every run (or decoded to garbled
blocks), naming no entry, stream or frame, because the entry was never rebuilt. Now every frame carries
its CRC (robocache/frames/jpeg_check.py): an entry in RAM is checked whole at load and coded again; a
mapped entry's frame fails its first batch with ``DamagedFrameError`` naming the stream, the episode,
the frame and the entry, which is marked so that the next load codes the stream again. A frame whose
CRC holds but whose decode fails (a bitstream broken before it was sealed) is named and marked the same
way, on the CPU (FFmpeg) and on a GPU (nvJPEG).
"""

from __future__ import annotations

import errno
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import robocache
from robocache.demo import write_lerobot
from robocache import DataLoader, Window
from robocache.frames import cache as fcache
from robocache.frames.jpeg import encode_all, pack
from robocache.frames.jpeg_check import HEAD, DamagedFrameError, FrameOrigin, damaged_rows, seal
from robocache.frames.store import FrameStore, yuv420_bytes

pytest.importorskip("av")
pytestmark = pytest.mark.usefixtures("cache_env")

CAM = "observation.images.top"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A small LeRobot v3.0 set (3 episodes of 32x48 frames in one mp4, spans of it per episode)."""
    pytest.importorskip("pyarrow")
    return write_lerobot(tmp_path_factory.mktemp("demo") / "set", num_episodes=3, fps=10,
                         image_size=(32, 48))


def _load(demo, device="cpu", **kw):
    return robocache.Dataset.from_lerobot(demo, device=device, frames="compressed", **kw)


def _frames(ds) -> torch.Tensor:
    """Every frame of the camera, decoded (the reference a rebuilt entry must give again)."""
    store = ds.streams[CAM].frames
    return store[torch.arange(len(store))].cpu()


def _damage(store, row: int, how: str = "flip") -> None:
    """Changes frame ``row``'s bytes in the cache entry's data file: one byte flipped past the CRC segment,
    or (``how="resealed"``) the bitstream replaced by a broken JPEG of the same size with a valid CRC."""
    a, b = int(store.offsets[row]), int(store.offsets[row + 1])
    with open(store.path, "r+b") as f:
        f.seek(a)
        span = bytearray(f.read(b - a))
        if how == "flip":
            span[HEAD + (b - a - HEAD) // 2] ^= 0x5A
        else:   # SOI, then no frame header: every decoder refuses it, and its CRC is right
            span[:] = seal(b"\xff\xd8" + bytes(b - a - HEAD))
        f.seek(a)
        f.write(span)


def _unsampled_row(ds) -> tuple[int, int, int]:
    """(storage row, episode, frame in the episode) of a frame the entry's checksum does not read:
    neither first, middle nor last of its episode (fcache.sample_rows)."""
    counts = np.diff(ds.streams[CAM].offsets_host)
    sampled = set(fcache.sample_rows(counts))
    e = 1
    first = int(counts[:e].sum())
    k = next(k for k in range(1, int(counts[e])) if first + k not in sampled)
    return first + k, e, k


WINDOWS = {"img": Window(CAM, offsets=[0.0]), "state": Window("observation.state")}


def _epoch(ds):
    return [b for b in DataLoader(ds, 8, shuffle=True, seed=1, windows=WINDOWS)]


def test_damaged_frame_in_ram_is_coded_again_at_load(demo):
    first = _load(demo)
    store = first.streams[CAM].frames
    assert not isinstance(store.data, np.memmap) and store.origin.unchecked is None
    want = _frames(first)
    row, e, k = _unsampled_row(first)
    _damage(store, row)
    with pytest.warns(fcache.CacheWarning, match=rf"\(coding {CAM}\) has 1 damaged frames, the first frame {k} "
                                                 rf"of episode {e} \(.*file-000.mp4 \[.*\) s\); coding again and "
                                                 rf"rebuilding it"):
        again = _load(demo)
    assert torch.equal(_frames(again), want)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fcache.CacheWarning)
        assert torch.equal(_frames(_load(demo)), want)        # the rebuilt entry is whole


@pytest.mark.parametrize("how", ["flip", "resealed"])
def test_damaged_frame_in_a_mapped_entry_fails_its_batch_then_is_rebuilt(demo, how):
    """A mapped entry (larger than the host budget) is not read whole at load: the damaged frame fails the
    first batch that samples it, by name, and the next load codes the stream again."""
    want = _frames(_load(demo))       # coded (held in RAM), then mapped from the entry
    ds = _load(demo, host_memory=1)
    store = ds.streams[CAM].frames
    assert isinstance(store.data, np.memmap) and store.origin.unchecked.all()
    row, e, k = _unsampled_row(ds)
    _damage(store, row, how)
    reason = "fails its checksum" if how == "flip" else r"fails to decode \(\w+Error: "
    with pytest.raises(DamagedFrameError, match=rf"frame {k} of episode {e} \(.*\) of stream '{CAM}', in cache "
                                                rf"entry {store.path}, {reason}.*the entry is marked for a rebuild"):
        _epoch(ds)
    meta = json.loads(Path(store.path).with_suffix(".json").read_text())
    assert meta["checksum"] == "damaged" and f"frame {k} of episode {e}" in meta["damaged"]
    with pytest.warns(fcache.CacheWarning, match="corrupted .checksum mismatch.; coding again and rebuilding it"):
        again = _load(demo, host_memory=1)
    assert torch.equal(_frames(again), want)
    assert len(_epoch(again)) == len(DataLoader(again, 8, windows=WINDOWS))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("how", ["flip", "resealed"])
def test_batch_names_a_damaged_frame(rng, how, device):
    """FFmpeg on the CPU, nvJPEG on a GPU: a damaged frame of a store not checked yet fails its CRC before
    it is decoded; a broken bitstream with a valid CRC fails the batched decode, which (nvJPEG's) does not
    say which frame: robocache finds it
    (the frames' episodes: 4 frames of a.mp4, 8 of b.mp4)."""
    h, w = 32, 48
    rows = rng.integers(16, 240, (12, yuv420_bytes(h, w)), dtype=np.uint8)
    spans = encode_all(rows, h, w, 2)
    if how == "flip":
        bad = bytearray(spans[5])
        bad[HEAD + 7] ^= 0x5A
        spans[5] = bytes(bad)
    else:
        spans[5] = seal(b"\xff\xd8" + bytes(len(spans[5]) - HEAD))
    data, offsets = pack(spans)
    origin = lambda: FrameOrigin("cam", ["a.mp4", "b.mp4"], np.array([4, 8]), None, None,  # noqa: E731
                                 np.ones(12, bool))
    store = FrameStore(data, format="jpeg", height=h, width=w, channels=3, tier="compressed", device=device,
                       offsets=offsets, qscale=2, origin=origin())
    reason = "fails its checksum" if how == "flip" else "fails to decode"
    with pytest.raises(DamagedFrameError, match=rf"frame 1 of episode 1 \(b.mp4\) of stream 'cam' {reason}"):
        store.gather(torch.arange(12, device=device))
    good = torch.tensor([0, 4, 6, 11, -1], device=device)
    cpu = FrameStore(data, format="jpeg", height=h, width=w, channels=3, tier="compressed", device="cpu",
                     offsets=offsets, qscale=2, origin=origin())
    d = (store.gather(good).cpu().double() - cpu.gather(good.cpu()).double()).abs().max()
    assert d <= 5                                             # nvJPEG's IDCT vs FFmpeg's, through RGB


def test_mark_damaged_leaves_a_rebuilt_entry_alone(demo, cache_env):
    ds = _load(demo)
    store = ds.streams[CAM].frames
    meta_path = Path(store.path).with_suffix(".json")
    before = meta_path.read_bytes()
    assert fcache.mark_damaged(store.path, "another checksum", "frame 1 of episode 0 fails") is None
    assert meta_path.read_bytes() == before                   # not the entry that was loaded
    assert fcache.mark_damaged(store.path, store.origin.checksum, "frame 1 of episode 0 fails") is None
    assert json.loads(meta_path.read_text())["damaged"] == "frame 1 of episode 0 fails"
    assert not list(meta_path.parent.glob("*.tmp"))


def test_a_read_only_cache_says_how_to_remove_the_entry(demo, cache_env, monkeypatch):
    _load(demo)                       # coded (held in RAM), then mapped from the entry
    ds = _load(demo, host_memory=1)
    store = ds.streams[CAM].frames
    row, e, k = _unsampled_row(ds)
    _damage(store, row)
    real = os.replace

    def refuse(src, dst):     # the cache dir as on a read-only mount (root ignores file modes)
        if os.fspath(dst).startswith(str(cache_env)):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(dst))
        return real(src, dst)
    monkeypatch.setattr(os, "replace", refuse)
    name = Path(store.path).name.split(".")[0]
    with pytest.raises(DamagedFrameError, match=rf"could not be marked for a rebuild \(Read-only file system\): "
                                                rf"remove it with `python -m robocache cache clear {name}`"):
        _epoch(ds)
    assert not list(Path(store.path).parent.glob("*.tmp"))


# ----------------------------------------------------------------------------
# the check itself


def test_damaged_rows_finds_each_damaged_frame(rng):
    h, w = 16, 24
    rows = rng.integers(16, 240, (6, yuv420_bytes(h, w)), dtype=np.uint8)
    data, offsets = pack(encode_all(rows, h, w, 2))
    assert damaged_rows(data, offsets).tolist() == []
    for at in rng.choice(np.arange(int(offsets[1])), 12, replace=False).tolist():   # any byte of frame 0
        bad = data.copy()
        bad[at] ^= 1 << int(rng.integers(8))
        assert damaged_rows(bad, offsets).tolist() == [0], at
        assert damaged_rows(bad, offsets, [3, 0, 0]).tolist() == [0]
        assert damaged_rows(bad, offsets, [5, 2]).tolist() == []
    # a frame without the segment (not sealed), and one shorter than the segment
    plain = bytes(data[offsets[2] + HEAD:offsets[3]])
    spans = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(6)]
    data2, off2 = pack(spans[:2] + [b"\xff\xd8" + plain, b"\xff\xd8"] + spans[4:])
    assert damaged_rows(data2, off2).tolist() == [2, 3]
    assert damaged_rows(data2, off2, workers=4).tolist() == [2, 3]


def test_an_origin_names_the_episode_of_a_subset(rng):
    """A rank's shard copies its episodes' bitstreams: its frames are still named by the load's episodes."""
    origin = FrameOrigin("cam", ["a.mp4", "b.mp4", "c.mp4"], np.array([4, 3, 5]), "/c/x.frames", "sum")
    assert origin.where(0) == "frame 0 of episode 0 (a.mp4)"
    assert origin.where(6) == "frame 2 of episode 1 (b.mp4)"
    shard = origin.take(np.arange(7, 12))                   # episode 2 alone
    assert shard.where(1) == "frame 1 of episode 2 (c.mp4)"
    h, w = 16, 24
    store = FrameStore.create(rng.integers(16, 240, (12, yuv420_bytes(h, w)), dtype=np.uint8), format="yuv420",
                              height=h, width=w, tier="compressed", device="cpu")
    store.origin = FrameOrigin("cam", ["a.mp4", "b.mp4", "c.mp4"], np.array([4, 3, 5]), None, None,
                               np.ones(12, bool))
    sub = store.subset(np.arange(7, 12))
    assert sub.origin.where(1) == "frame 1 of episode 2 (c.mp4)" and sub.origin.unchecked.all()
    sub.data[sub.offsets[1] + HEAD + 3] ^= 0xFF              # the shard's own copy
    with pytest.raises(DamagedFrameError, match=r"frame 1 of episode 2 \(c.mp4\) of stream 'cam' fails its "
                                                r"checksum.*not cached"):
        sub[1]
    assert torch.equal(sub[2], store[9])                     # the others decode, checked
    assert not sub.origin.unchecked[2] and sub.origin.unchecked[1]
