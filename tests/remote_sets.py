"""What the remote tests serve and how they judge a mirror.

- ``make_sets(folder)``: small LeRobot sets written here: the README's demo set (v3.0, AV1, all episodes in
  one data file of one row group and one mp4), a forged v2.1 set with a camera (a file per episode), its v3.0
  copy made as LeRobot's converter makes one (episodes spread over data files of a row group per episode and
  over shared mp4s), and that copy with the data file index LeRobot 0.4.0-0.4.4 wrote wrong (lerobot#2401);
- ``poison_holes(report)``: every byte a mirror's record does not claim overwritten with random bytes, so a
  read of one shows in the frames or as an error (a hole reads as zeros, which a decoder may skip quietly);
- ``assert_same(a, b)``: two Datasets hold the same episodes, values and frames.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from lerobot_forge import convert_v21_to_v30, write_lerobot

FORGED_LENGTHS = (12, 17, 9, 14, 20, 11, 15, 8, 13, 10)
FORGED_V30 = [5, 0, 3, 1, 6, 2, 9, 4, 8]


def make_sets(folder: Path, seed: int, demo_only: bool = False) -> dict:
    """{name: folder} of the sets above, under ``folder`` (``demo_only``: the demo set alone)."""
    from robocache.demo import write_lerobot as write_demo
    rng = np.random.default_rng(seed)
    out = {"demo-v3.0": write_demo(folder / "demo", num_episodes=6, seed=seed % 1000)}
    if demo_only:
        return out
    write_lerobot(folder / "forged-v2.1", rng, lengths=FORGED_LENGTHS, camera=(24, 32), stats=True)
    out["forged-v2.1"] = folder / "forged-v2.1"
    convert_v21_to_v30(out["forged-v2.1"], folder / "forged-v3.0", FORGED_V30, per_data_file=3, per_video_file=4)
    out["forged-v3.0"] = folder / "forged-v3.0"
    convert_v21_to_v30(out["forged-v2.1"], folder / "misplaced-v3.0", FORGED_V30, per_data_file=3, per_video_file=4,
                       wrong_file_index=True)
    out["misplaced-v3.0"] = folder / "misplaced-v3.0"
    return out


def records(mirror):
    """(local file, record) of every file of a mirror (a ``MirrorReport``, or the mirror's set folder)."""
    root = mirror if isinstance(mirror, Path) else mirror.root
    state = root.parent / "state"
    for rec in sorted(state.rglob("*.json")):
        if rec.name == "meta.json":
            continue
        yield root / str(rec.relative_to(state))[:-len(".json")], json.loads(rec.read_text())


def mirrors(cache_dir: Path) -> list:
    """The set folders of every mirror under a ``cache_dir``."""
    return sorted(p / "set" for p in Path(cache_dir).iterdir() if (p / "set").is_dir())


def poison_holes(mirror, seed: int = 0) -> int:
    """Random bytes wherever a mirror's byte-range files hold nothing (their mtime kept); returns how many."""
    rng = np.random.default_rng(seed)
    total = 0
    for path, rec in records(mirror):
        if rec["mode"] != "bytes" or not path.is_file():
            continue
        size, at = rec["version"]["size"], 0
        st = os.stat(path)
        with open(path, "r+b") as f:
            for a, b in [*rec["ranges"], [size, size]]:
                if a > at:
                    f.seek(at)
                    f.write(rng.integers(0, 256, a - at, dtype=np.uint8).tobytes())
                    total += a - at
                at = max(at, b)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return total


def frames(ds, key):
    s = ds.streams[key]
    return s.frames[0:len(s.frames)].cpu().numpy()


def assert_same(a, b) -> None:
    """The same episodes (numbers and order), streams, values, times and frames."""
    assert list(a.episode_index) == list(b.episode_index)
    assert sorted(a.streams) == sorted(b.streams)
    for k, sb in b.streams.items():
        sa = a.streams[k]
        assert np.array_equal(np.asarray(sa.offsets_host), np.asarray(sb.offsets_host)), k
        assert np.array_equal(sa.times.cpu().numpy(), sb.times.cpu().numpy()), k
        if sb.frames is not None:
            assert np.array_equal(frames(a, k), frames(b, k)), k
        elif sb.kind == "text":
            assert list(sa.values) == list(sb.values), k
        else:
            assert np.array_equal(sa.values.cpu().numpy(), sb.values.cpu().numpy()), k


def local_files(report) -> set:
    """The dataset files (not meta/) a mirror holds a copy of."""
    return {p.relative_to(report.root).as_posix() for p in report.root.rglob("*")
            if p.is_file() and not p.name.startswith(".") and p.relative_to(report.root).parts[0] != "meta"}


def files_of(root: Path, episodes) -> set:
    """The data and video files of ``episodes`` of the local set at ``root`` (the reader's own rules)."""
    from robocache.readers.lerobot import episode_table, open_info, video_file
    from robocache.readers.lerobot_info import chunks_size
    root, info_path, info, major = open_info(root)
    chunks = chunks_size(info, info_path)
    table = episode_table(root, info, major, info["data_path"], chunks)
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    out = set()
    for e in episodes:
        out.add(Path(table[e]["data"]).relative_to(root).as_posix())
        for k in keys:
            out.add(video_file(root, info, table, e, k, major, chunks).relative_to(root).as_posix())
    return out


def mirror_args(tmp_path: Path) -> dict:
    return {"cache_dir": tmp_path / "mirrors"}


def stat_key(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns
