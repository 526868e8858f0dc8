"""Faults of decoding in processes (issue 34 item 1): a decode process never keeps the cache entry locked,
dies with its parent, and a killed or stalled one fails the ingest naming the files and the cause."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

from conftest import FORKS_DEADLOCK, FORKS_DEADLOCK_WHY  # noqa: E402
from robocache.frames import processes as rc_processes  # noqa: E402
from robocache.frames.ingest import ingest_videos  # noqa: E402
from robocache.readers import ReaderError  # noqa: E402
from robocache.video import decode as rc_decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
REAL = "cr5_flashdrive_av1/videos/chunk-000/observation.images.top"


@pytest.fixture(scope="module")
def files(DATA):
    root = DATA / REAL
    if not root.is_dir():
        pytest.skip(f"{root} is not present")
    return [str(root / f"episode_00000{e}.mp4") for e in (7, 8)]


def _children(pid: int) -> list[str]:
    """The pids whose parent is ``pid``, from /proc (no pgrep: under the sanitizer suite's LD_PRELOAD
    a pgrep child once hung in its own startup for 18 minutes)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:   # gone meanwhile
            continue
        if fields[1] == str(pid):
            out.append(stat.parent.name)
    return out

def _running(pid: str) -> bool:
    """The process exists and is not a zombie."""
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def _free(lock: Path) -> bool:
    """Nobody holds a flock on ``lock`` (an exclusive one is granted at once, and given back)."""
    import fcntl
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_decode_processes_hold_no_lock_of_the_cache(files, cache_env, monkeypatch, tmp_path):
    seen = tmp_path / "fds.txt"
    real = rc_decode.DECODERS["pyav"]

    def spy(job, *a, **k):  # runs in the forked decode process
        held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")]
        with open(seen, "a") as f:
            f.write("\n".join(h for h in held if h.endswith(".lock")) + "|\n")
        return real(job, *a, **k)

    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setitem(rc_decode.DECODERS, "pyav", spy)
    ingest_videos(files, tier="host", workers=2)
    lines = seen.read_text().splitlines()
    assert len(lines) == 2 and all(line == "|" for line in lines), lines   # the parent held one; none here


def test_a_killed_decode_process_names_the_files(files, monkeypatch):
    real = rc_decode.DECODERS["pyav"]

    def killed(job, *a, **k):
        if job.path.endswith("episode_000008.mp4"):
            os.kill(os.getpid(), signal.SIGKILL)          # as the OOM killer does
        return real(job, *a, **k)

    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setitem(rc_decode.DECODERS, "pyav", killed)
    with pytest.raises(ReaderError, match=r"episode_00000[78]\.mp4.*: a decode process died \(killed by a signal, "
                                          r"or by the OOM killer"):
        ingest_videos(files, tier="host", workers=2, cache=False)


def test_a_stalled_decode_process_fails_the_ingest(files, monkeypatch):
    real = rc_decode.DECODERS["pyav"]

    def stuck(job, *a, **k):
        if job.path.endswith("episode_000008.mp4"):
            os.kill(os.getpid(), signal.SIGSTOP)          # stopped: alive, never hands back a frame
        return real(job, *a, **k)

    monkeypatch.setattr(rc_processes, "DECODE_PROCESSES", True)
    monkeypatch.setattr(rc_processes, "STALL_SECONDS", 3.0)
    monkeypatch.setitem(rc_decode.DECODERS, "pyav", stuck)
    # the ingest returning at all, with the stall named, is the claim (no wall-clock bound on top: a
    # stall the watchdog missed would hang here, not pass)
    with pytest.raises(ReaderError, match=r"episode_000008\.mp4: no frame decoded for 3 s; a decode process is "
                                          r"stopped or hung"):
        ingest_videos(files, tier="host", workers=2, cache=False)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_job_leaves_the_next_load_free(files, cache_env, sig, tmp_path):
    """The parent killed mid-ingest (SIGTERM from a scheduler, SIGKILL from the OOM killer): its decode
    processes die with it, no lock of the cache is left held, and the next load of the same files runs
    (decodes afresh) and leaves no temporary file."""
    if FORKS_DEADLOCK:
        pytest.skip(FORKS_DEADLOCK_WHY)
    script = tmp_path / "ingest.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from robocache.frames import processes
        from robocache.frames.ingest import ingest_videos
        from robocache.video import decode
        processes.DECODE_PROCESSES = True
        real = decode.DECODERS["pyav"]
        def slow(job, out, spec, threads, tick, stop):
            def tick_slow(n=1):
                time.sleep(0.05)
                tick(n)
            return real(job, out, spec, threads, tick_slow, stop)
        decode.DECODERS["pyav"] = slow
        print("start", flush=True)
        ingest_videos({files!r}, tier="host", workers=2)
    """))
    env = dict(os.environ, ROBOCACHE_CACHE_DIR=str(cache_env), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "start"
    children, deadline = [], time.monotonic() + 60
    while len(children) < 2 and time.monotonic() < deadline:   # decoding, in processes, under the lock
        time.sleep(0.5)
        children = _children(p.pid)
    assert children, "the ingest runs no decode process"
    time.sleep(1)
    p.send_signal(sig)
    p.wait(timeout=30)
    alive, deadline = children, time.monotonic() + 30     # they die with it, once the kernel tells them
    while alive and time.monotonic() < deadline:
        alive = [c for c in alive if _running(c)]
        time.sleep(0.1)
    assert not alive, f"decode processes outlived their parent: {alive}"
    locks = list(Path(cache_env).glob("**/*.lock"))
    held = [str(f) for f in locks if not _free(f)]
    assert not held, f"the dead job's lock is still held: {held}"
    res = ingest_videos(files, tier="host", workers=2)
    assert not res.from_cache
    assert not list(Path(cache_env).glob("**/*.tmp*"))     # the dead job's temporary file is gone
