"""`cache clear` on a cache that running jobs use (issues 33 item 7 and 34 item 10): it says what it removes
(each entry, its size, the total) and what it leaves; it never deletes the temporary file and lock of a
job that is ingesting, nor an entry a job maps; and a temporary file is an orphan when no process holds
its lock, whatever pid its name records (a job that is pid 1 in its container sees pid 1 alive after
every crash)."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from robocache.__main__ import main  # noqa: E402
from robocache.frames import cache as rc_cache  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from noise_clips import write_noise_clips

pytestmark = pytest.mark.usefixtures("cache_env")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Three small H.264 files (episodes), 6 frames of 32x48 noise each."""
    return write_noise_clips(tmp_path_factory.mktemp("clear-clips"), (6,) * 3, np.random.default_rng(7), "ep_")


def files(cache_env) -> list[str]:
    d = cache_env / "frames"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def child(script: str, cache_env) -> subprocess.Popen:
    env = dict(os.environ, ROBOCACHE_CACHE_DIR=str(cache_env), PYTHONPATH=str(REPO), ROBOCACHE_NO_PROGRESS="1")
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)


def test_clear_says_what_it_removes(clips, cache_env, capsys):
    for p in clips[:2]:
        ingest_videos([p], tier="device" if torch.cuda.is_available() else "disk", workers=1)
    gc.collect()
    listed = {e["name"]: e for e in rc_cache.list_entries()}
    assert main(["cache", "clear", "--all"]) == 0
    out = capsys.readouterr().out
    for name, e in listed.items():
        assert f"removed {name} (ok, 6 frames, {rc_cache.human_bytes(e['bytes'])})" in out
    total = rc_cache.human_bytes(sum(e["bytes"] for e in listed.values()))
    assert f"removed 2 entries, {total}, from {cache_env / 'frames'}" in out and "kept" not in out
    assert files(cache_env) == []


def test_clear_keeps_an_entry_a_job_maps(clips, cache_env, capsys):
    mapped = ingest_videos(clips[:1], tier="disk", workers=1)
    name = Path(mapped.cache_path).name.split(".")[0]
    ingest_videos(clips[1:2], tier="host", workers=1)
    assert main(["cache", "clear", "--all"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"kept    {name} \(.*\): in use: a running process has its frames mapped", out)
    assert "removed 1 entries" in out and "kept 1 that running processes hold" in out
    assert [e["name"] for e in rc_cache.list_entries()] == [name]
    assert torch.equal(ingest_videos(clips[:1], tier="disk").data, mapped.data)
    with pytest.warns(rc_cache.CacheWarning, match=f"left 1 cache entries that running processes hold: {name} "):
        assert rc_cache.clear(all=True) == []
    del mapped
    gc.collect()
    assert rc_cache.clear(all=True) == [name]


def test_clear_all_while_a_job_ingests(clips, cache_env, capsys):
    """A job decoding into its entry holds the entry's lock and its temporary file's: `clear --all` leaves
    both, says so, removes the rest; the job then commits its entry as if nothing happened."""
    other = ingest_videos(clips[1:2], tier="host", workers=1)
    other_name = Path(other.cache_path).name.split(".")[0]
    del other
    job = child(f"""
        import sys
        from robocache.video import decode
        from robocache.frames.ingest import ingest_videos
        real = decode.DECODERS["pyav"]
        def held(*a, **k):
            print("decoding", flush=True)
            sys.stdin.readline()            # until the test has run `cache clear --all`
            return real(*a, **k)
        decode.DECODERS["pyav"] = held
        res = ingest_videos([{clips[0]!r}], tier="host", workers=1, backend="pyav")
        print("done", res.cache_path, flush=True)
    """, cache_env)
    try:
        assert job.stdout.readline().strip() == "decoding"
        tmp = [n for n in files(cache_env) if n.endswith(".tmp")]
        assert len(tmp) == 1, files(cache_env)
        name = tmp[0].split(".")[0]
        building = [n for n in files(cache_env) if n.startswith(f"{name}.")]
        assert f"{name}.lock" in building
        assert main(["cache", "clear", "--all"]) == 0
        out = capsys.readouterr().out
        assert f"removed {other_name} (ok" in out and f"kept    {name}" in out and "running process" in out
        assert set(building) <= set(files(cache_env))        # the job's .tmp and lock are still there
        job.stdin.write("\n")
        job.stdin.flush()
        said = job.stdout.readline().split()
        assert job.wait(timeout=120) == 0 and said[0] == "done" and Path(said[1]).is_file()
    finally:
        job.kill()
        job.wait()
    assert [e["name"] for e in rc_cache.list_entries()] == [name]
    assert not [n for n in files(cache_env) if ".tmp" in n]
    assert ingest_videos(clips[:1], tier="host").from_cache


def test_orphans_are_told_by_their_lock_not_their_pid(clips, cache_env, capsys):
    """Temporary files whose names claim pid 1 or this process's pid but whose writer holds no lock
    are a crashed job's (removed); one whose name claims a dead pid but which a live process holds is a
    running build's (kept)."""
    res = ingest_videos(clips[:1], tier="host", workers=1)
    name = Path(res.cache_path).name.split(".")[0]
    del res
    root = cache_env / "frames"
    orphans = [root / f"{name}.frames.1.0a0b0c0d.tmp", root / f"{name}.json.1.0a0b0c0d.tmp",
               root / f"{name}.frames.{os.getpid()}.0e0f1011.tmp", root / f"{name}.times.{os.getpid()}.0e0f1011.tmp.npy"]
    for p in orphans:
        p.write_bytes(b"\0" * 4096)
    live = root / f"{name}.frames.999999999.12131415.tmp"
    live.write_bytes(b"partial")
    holder = child(f"""
        import fcntl, os, sys
        fd = os.open({str(live)!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)          # as an EntryWriter holds its file until commit
        print("held", flush=True)
        sys.stdin.readline()
    """, cache_env)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["cache", "clear", "--all"]) == 0
        out = capsys.readouterr().out
        assert f"kept    {name}" in out and "being written by a running process" in out
        assert [p.name for p in orphans if p.exists()] == [p.name for p in orphans]   # the entry is kept whole
        # the next build of the entry removes its orphans and leaves the live one
        rc_cache.Entry(name, root).meta_path.unlink()
        pass_through = ingest_videos(clips[:1], tier="host", workers=1)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert not pass_through.from_cache
    assert [p.name for p in orphans if p.exists()] == [] and live.exists()
    del pass_through
    gc.collect()
    assert main(["cache", "clear", "--all"]) == 0             # nobody holds it now: an orphan too
    capsys.readouterr()
    assert files(cache_env) == []


def test_named_clear_leaves_a_held_entry(clips, cache_env, capsys):
    mapped = ingest_videos(clips[:1], tier="disk", workers=1)
    name = Path(mapped.cache_path).name.split(".")[0]
    assert main(["cache", "clear", name]) == 0
    assert f"kept    {name}" in capsys.readouterr().out
    del mapped
    gc.collect()
    assert main(["cache", "clear", name]) == 0
    assert f"removed {name} (ok" in capsys.readouterr().out and files(cache_env) == []


def test_an_entry_another_process_maps_is_neither_cleared_nor_evicted(clips, cache_env, capsys, monkeypatch):
    first = ingest_videos(clips[:1], tier="disk", workers=1)
    name = Path(first.cache_path).name.split(".")[0]
    del first
    gc.collect()
    job = child(f"""
        import sys
        from robocache.frames.ingest import ingest_videos
        res = ingest_videos([{clips[0]!r}], tier="disk", workers=1)     # a training job's frames: mapped
        print("loaded", res.from_cache, flush=True)
        sys.stdin.readline()
    """, cache_env)
    try:
        assert job.stdout.readline().split() == ["loaded", "True"]
        assert main(["cache", "clear", "--all"]) == 0
        assert f"kept    {name} (" in capsys.readouterr().out
        monkeypatch.setenv("ROBOCACHE_CACHE_MAX", "1")
        with pytest.warns(rc_cache.CacheWarning, match=f"{name} .*in use: a running process has its frames mapped"):
            ingest_videos(clips[1:2], tier="host", workers=1)
        assert name in {e["name"] for e in rc_cache.list_entries()}
    finally:
        job.stdin.close()
        job.wait(timeout=60)
    assert rc_cache.clear([name]) == [name]          # its job is gone: nothing holds it
