"""A load waiting on a cache entry's lock (issue 46 item 5): a job stopped with Ctrl-Z (SIGSTOP) held
the lock and every later load of the same frames waited forever with no word. Now the waiter warns
after LOCK_WARN_AFTER seconds naming the holder (pid, user, since when, stopped or not) and what to do,
and gives up after ROBOCACHE_LOCK_TIMEOUT seconds; it never takes the lock from the holder.

The holders are child processes that take the lock with robocache's own lock_file (so they record
themselves) and then stop themselves, wait on their stdin, or hand the lock to a forked child and exit.
Every wait here is on an event the test controls (a line from the child, waitpid on its stop); the
timeouts are short so the tests are quick, and generous ones guard the waits that must succeed."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

from robocache.frames import cache as rc_cache
from robocache.frames import cache_folder
from robocache.frames.cache_folder import LockTimeout, LockWaitWarning, lock_file

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP") or not os.path.isdir("/proc/self"),
                                reason="POSIX job control and /proc (Linux)")

try:
    USER = pwd.getpwuid(os.getuid()).pw_name
except KeyError:                 # a uid with no name (a container's): shown as its number
    USER = f"uid {os.getuid()}"

# argv: lock path, mode ("stop": SIGSTOP itself; "wait": hold until a line on stdin; "fork": hand the
# descriptor to a child and exit). Prints "locked", then (fork) "child <pid>"; "released" once it let go.
HOLDER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from robocache.frames.cache_folder import lock_file
    fd = lock_file(Path(sys.argv[1]), wait=True)
    assert fd >= 0, fd
    print("locked", flush=True)
    if sys.argv[2] == "fork":
        if os.fork():
            os._exit(0)                      # the recorded holder is gone; its child keeps the lock
        print(f"child {os.getpid()}", flush=True)
    if sys.argv[2] == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    sys.stdin.readline()
    os.close(fd)
    print("released", flush=True)
    sys.stdin.readline()
""")


class Holders:
    """Child processes holding locks, stopped ones resumed and every one killed at the end."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.pids: list[int] = []        # grandchildren (fork mode): not ours to wait for

    def start(self, path: Path, mode: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout.readline() == "locked\n", "the holder could not take the lock"
        if mode == "fork":
            line = p.stdout.readline()
            assert line.startswith("child "), line
            self.pids.append(int(line.split()[1]))
            p.wait(timeout=60)
        if mode == "stop":
            _, status = os.waitpid(p.pid, os.WUNTRACED)       # returns once it has stopped itself
            assert os.WIFSTOPPED(status), status
        return p

    def close(self):
        for pid in self.pids + [p.pid for p in self.procs if p.poll() is None]:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            p.wait(timeout=60)


@pytest.fixture
def holders():
    h = Holders()
    yield h
    h.close()


@pytest.fixture
def warn_at_once(monkeypatch):
    """The holder is looked at and warned about on the first poll (LOCK_WARN_AFTER is 2 s for users)."""
    monkeypatch.setattr(cache_folder, "LOCK_WARN_AFTER", 0.0)
    monkeypatch.delenv(cache_folder.LOCK_TIMEOUT_ENV, raising=False)


def _wait_warnings(path: Path, **kw):
    """lock_file(path, wait=True, **kw): (descriptor or the exception, [LockWaitWarning messages])."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            got = lock_file(path, wait=True, **kw)
        except LockTimeout as e:
            got = e
    return got, [str(w.message) for w in seen if issubclass(w.category, LockWaitWarning)]


def _record(path: Path) -> dict:
    return json.loads(path.read_bytes().decode())


def test_a_stopped_holder_is_named_and_the_wait_times_out(tmp_path, holders, warn_at_once, monkeypatch):
    """Ctrl-Z of the job that holds the lock: the waiter warns naming the pid, the user and 'stopped' with
    the way to resume it, then gives up after ROBOCACHE_LOCK_TIMEOUT with the same; the lock stays the
    stopped job's. Once the job is killed, the lock is free: taken at once, with no warning."""
    path = tmp_path / "cam-0123456789abcdef.lock"
    p = holders.start(path, "stop")
    monkeypatch.setenv(cache_folder.LOCK_TIMEOUT_ENV, "0.5")
    got, told = _wait_warnings(path)
    assert isinstance(got, LockTimeout), got
    assert len(told) == 1, told
    for text in (told[0], str(got)):
        assert f"pid {p.pid}" in text and f"user {USER}" in text and "stopped" in text, text
        assert "cam-0123456789abcdef" in text and "since " in text, text
        assert f"kill -CONT {p.pid}" in text and "`fg`" in text, text
    assert "gives up after 0.5 s (ROBOCACHE_LOCK_TIMEOUT)" in told[0]
    assert "gave up after 0.5 s" in str(got)
    assert _record(path)["pid"] == p.pid                    # not taken from the stopped job

    os.kill(p.pid, signal.SIGKILL)                          # a killed holder: the kernel drops its lock
    p.wait(timeout=60)
    got, told = _wait_warnings(path)
    assert isinstance(got, int) and got >= 0 and told == []
    assert _record(path)["pid"] == os.getpid()              # the new holder recorded itself
    os.close(got)


def test_a_running_holder_is_named_and_the_waiter_goes_on_when_it_releases(tmp_path, holders, warn_at_once,
                                                                           monkeypatch):
    """A live holder (another job building the entry): the waiter, in a thread, warns naming the pid, the
    user and 'running', waits without a limit, and takes the lock when the holder lets it go."""
    path = tmp_path / "wrist-fedcba9876543210.lock"
    p = holders.start(path, "wait")
    told, warned = [], threading.Event()

    def seen(message, category=cache_folder.CacheWarning):
        told.append((message, category))
        warned.set()

    monkeypatch.setattr(cache_folder, "warn", seen)
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("fd", lock_file(path, wait=True)), daemon=True)
    waiter.start()
    assert warned.wait(timeout=120), "no warning while waiting"
    assert "fd" not in result                               # still waiting: the holder has not let go
    message, category = told[0]
    assert category is LockWaitWarning
    assert f"pid {p.pid}" in message and f"user {USER}" in message and "running" in message, message
    assert "waits without limit" in message, message
    p.stdin.write("release\n")
    p.stdin.flush()
    assert p.stdout.readline() == "released\n"
    waiter.join(timeout=120)
    assert not waiter.is_alive(), "the waiter did not take the released lock"
    assert result["fd"] >= 0 and _record(path)["pid"] == os.getpid()
    os.close(result["fd"])
    assert len(told) == 1, told                             # the holder did not change: one warning


def test_another_users_lock_says_so(tmp_path, holders, warn_at_once, monkeypatch):
    """A lock another user holds in a shared cache: the message says it is another user's process, names
    that user and gives the ways around it (a cache folder of one's own, cache=False). The other user is
    simulated: this process takes another uid for itself."""
    path = tmp_path / "top-00112233aabbccdd.lock"
    p = holders.start(path, "wait")
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)
    monkeypatch.setenv(cache_folder.LOCK_TIMEOUT_ENV, "0.2")
    got, told = _wait_warnings(path)
    assert isinstance(got, LockTimeout) and len(told) == 1, (got, told)
    for text in (told[0], str(got)):
        assert f"pid {p.pid}" in text and f"of user {USER}" in text, text
        assert "another user's process" in text and f"ask {USER}" in text, text
        assert "ROBOCACHE_CACHE_DIR" in text and "cache=False" in text, text
        assert "kill" not in text, text                     # nothing this user could do to it


def test_a_holder_gone_with_its_lock_inherited(tmp_path, holders, warn_at_once):
    """The recorded holder exited but a child it forked keeps the descriptor (issue 34: decode processes
    once did this): the waiter says the recorded process is gone and an inheritor holds the lock."""
    path = tmp_path / "top-1111222233334444.lock"
    p = holders.start(path, "fork")
    got, told = _wait_warnings(path, timeout=0.2)
    assert isinstance(got, LockTimeout) and len(told) == 1, (got, told)
    assert f"pid {p.pid}" in told[0] and "gone" in told[0] and "inherited" in told[0], told[0]
    os.kill(holders.pids[0], signal.SIGKILL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LockWaitWarning)    # until the kernel has reaped it
        fd = lock_file(path, wait=True, timeout=120)        # free once the inheritor is gone
    assert fd >= 0
    os.close(fd)


def test_a_thread_of_this_process_is_named(tmp_path, warn_at_once):
    """flock is per open file: two threads of one process exclude each other; the waiter names the
    thread that holds the lock."""
    path = tmp_path / "cam-5555666677778888.lock"
    held, done = threading.Event(), threading.Event()

    def hold():
        fd = lock_file(path, wait=True)
        held.set()
        done.wait(timeout=120)
        os.close(fd)

    t = threading.Thread(target=hold, name="ingest-thread")
    t.start()
    try:
        assert held.wait(timeout=120)
        got, told = _wait_warnings(path, timeout=0.2)
    finally:
        done.set()
        t.join(timeout=120)
    assert isinstance(got, LockTimeout) and len(told) == 1, (got, told)
    assert "this process (thread 'ingest-thread')" in told[0], told[0]


def test_entry_lock_honours_the_timeout(cache_env, holders, monkeypatch):
    """The cache's own Entry.lock (what every ingest takes) gives up after ROBOCACHE_LOCK_TIMEOUT, naming the
    entry; 0 gives up at once."""
    entry = rc_cache.Entry("cam-99887766554433aa", rc_cache.frames_dir())
    entry.root.mkdir(parents=True)
    p = holders.start(entry.lock_path, "stop")
    for limit in ("0", "0.3"):
        monkeypatch.setenv(cache_folder.LOCK_TIMEOUT_ENV, limit)
        with pytest.raises(LockTimeout, match=rf"cam-99887766554433aa.*pid {p.pid}.*stopped"), entry.lock():
            pass


@pytest.mark.parametrize("text", ["soon", "-1", "nan"])
def test_a_bad_timeout_names_the_variable(tmp_path, monkeypatch, text):
    path = tmp_path / "x-0.lock"
    fd = lock_file(path, wait=True)
    monkeypatch.setenv(cache_folder.LOCK_TIMEOUT_ENV, text)
    try:
        with pytest.raises(ValueError, match="ROBOCACHE_LOCK_TIMEOUT"):
            lock_file(path, wait=True)
    finally:
        os.close(fd)
