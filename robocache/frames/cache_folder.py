"""The cache folder as a whole: where it is, the locks that tell a running process's entries and
temporary files from leftovers, listing, clearing, and the size cap (ROBOCACHE_CACHE_MAX) with
least-recently-used eviction. What an entry holds and how it is checked and written: cache.py.

Who holds what (flock: held by an open file, dropped by the kernel when its process dies, whatever
its pid means in whatever container):

    <name>.lock           exclusive, by the process that builds, checks or removes the entry
    <name>.frames         shared, by every process whose frames map it (Entry.hold)
    <name>.frames.*.tmp   exclusive, by its writer from creation to commit or abort

An entry held in any of these ways is never evicted nor cleared; a temporary file nobody locks is an
orphan of a killed build and is removed.

The holder of a ``.lock`` writes who it is into the file (pid, uid, host, since when, thread). A load
that waits on it says so after LOCK_WARN_AFTER seconds (LockWaitWarning: the holder, whether it is
stopped, what to do) and gives up after ROBOCACHE_LOCK_TIMEOUT seconds (LockTimeout); it never takes
the lock from a holder, stopped or not (docs/reliability.md, "Guarantees and limits").
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .. import user_warning

_SUBDIR = "frames"


class CacheWarning(UserWarning):
    """An entry was invalid (and is rebuilt), or the cache cannot be written (ingest goes on without it)."""


#: what a damaged JSON raises from json.loads or from reading its numbers: deep nesting
#: (RecursionError), 1e400 (inf: OverflowError in int()), wrong types
BAD_JSON = (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError)
#: the cap on the cache folder's bytes (K/M/G/T suffixes, powers of 1024); unset: no cap
MAX_ENV = "ROBOCACHE_CACHE_MAX"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, what: str = MAX_ENV) -> int:
    """Bytes of "20G", "512M", "1.5T", "4096" (K/M/G/T = powers of 1024; "GB", "GiB" alike);
    ValueError naming ``what`` otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"{what}={text!r}: expected a size in bytes with an optional K, M, G or T suffix "
                         f"(powers of 1024), e.g. 20G or 500M")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def cache_max() -> int | None:
    """The cap ROBOCACHE_CACHE_MAX sets, in bytes; None when unset or empty."""
    text = os.environ.get(MAX_ENV, "").strip()
    return parse_size(text) if text else None


def cache_dir() -> Path:
    """The cache root: ``ROBOCACHE_CACHE_DIR``, else ``$XDG_CACHE_HOME/robocache``, else ``~/.cache/robocache``."""
    env = os.environ.get("ROBOCACHE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "robocache"


def frames_dir() -> Path:
    return cache_dir() / _SUBDIR


def human_bytes(n: float) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def warn(message: str, category: type[CacheWarning] = CacheWarning) -> None:
    """A CacheWarning at the user's line (the load that met the entry), however deep the cache was reached."""
    user_warning.warn(message, category)


# ---------------------------------------------------------------------------------------------
# locks


def lock_file(path: Path, *, wait: bool, shared: bool = False, create: bool = True,
              probe: bool = False, timeout: float | None = None) -> int | None:
    """An open descriptor holding a flock on ``path`` (exclusive, or shared); None when another holds a
    conflicting one (only when not ``wait``); -1 when there is nothing to lock: no such file (not
    ``create``), an unwritable directory, no fcntl. ``probe``: only whether the lock is free (-1) or
    held (None). A lock file removed and made again while this waited (``cache clear``, eviction) is
    opened again, so two processes never hold locks on two files of one name.

    An exclusive lock on a ``*.lock`` file records its holder in the file (``Holder``). ``wait``: a lock
    still held after LOCK_WARN_AFTER seconds gives one LockWaitWarning naming the holder (pid, user,
    since when, stopped or not; again when that changes), and after ``timeout`` seconds (None:
    ROBOCACHE_LOCK_TIMEOUT, unset: no limit) a LockTimeout; see ``LockWait``."""
    try:
        import fcntl
    except ImportError:
        return -1
    op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    waiting: LockWait | None = None    # made when the lock is first found held (wait only)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666)  # the umask decides
        except PermissionError:    # another user's file: a read-only descriptor locks as well (Linux)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return -1
        except OSError:
            return -1
        try:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    os.close(fd)
                    return None
                waiting = waiting or LockWait(path, timeout)
                waiting.until_free(fd, op)
        except LockTimeout:
            os.close(fd)
            raise
        except OSError:   # a filesystem without locks
            os.close(fd)
            return -1
        except BaseException:   # KeyboardInterrupt while waiting
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except OSError:
            same = False
        if same and not probe:
            if not shared and path.suffix == ".lock":
                Holder.record(fd)
            return fd
        os.close(fd)
        if same or not create:  # free; or the file went away once the lock was had: nothing to lock
            return -1
        # removed and perhaps made again meanwhile: the lock is taken on the file there now


# ---------------------------------------------------------------------------------------------
# who holds a lock, and waiting on one

#: seconds a wait on an entry's lock may last before LockTimeout; unset or empty: no limit
LOCK_TIMEOUT_ENV = "ROBOCACHE_LOCK_TIMEOUT"
#: seconds of waiting on a lock before the LockWaitWarning that names its holder
LOCK_WARN_AFTER = 2.0
#: the holder record's size: written whole at offset 0 (padded), so a reader never sees half of two
_RECORD_BYTES = 512


class LockWaitWarning(CacheWarning):
    """A load waits on a cache entry's lock that another process or thread holds; names the holder (pid,
    user, since when, whether it is stopped) and what to do."""


class LockTimeout(TimeoutError):
    """A load waited ``ROBOCACHE_LOCK_TIMEOUT`` seconds on a cache entry's lock; the message names the entry,
    the holder and the ways on."""


def lock_timeout() -> float | None:
    """ROBOCACHE_LOCK_TIMEOUT in seconds (0: give up at once when held); None when unset or empty."""
    text = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:       # NaN too
        raise ValueError(f"{LOCK_TIMEOUT_ENV}={text!r}: expected seconds (a number >= 0), or unset for no limit")
    return value


def _user(uid: int) -> str:
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _proc(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read(4096)
    except OSError:
        return None


@dataclass
class Holder:
    """Who holds a lock: the record its holder wrote into the lock file (``record``), checked against the
    kernel's list of flocks (``/proc/locks``: a holder of an older version, or a descriptor a child
    inherited, writes none). ``state``: "running", "stopped" (SIGSTOP, Ctrl-Z: it keeps the lock until
    resumed or ended), "exiting", "gone" (its pid is no process: the lock is held by a descriptor
    another process inherited), "elsewhere" (another host of a shared file system) or "unknown"."""

    pid: int | None = None
    uid: int | None = None
    host: str = ""
    since: float | None = None
    thread: str = ""
    command: str = ""
    state: str = "unknown"

    @staticmethod
    def record(fd: int) -> None:
        """Writes this process and thread into the lock file held at ``fd``; nothing when it cannot
        (another user's file, opened read-only)."""
        import socket
        import threading
        me = {"pid": os.getpid(), "uid": os.getuid() if hasattr(os, "getuid") else None, "host": socket.gethostname(),
              "since": time.time(), "thread": threading.current_thread().name}
        data = json.dumps(me).encode()[:_RECORD_BYTES].ljust(_RECORD_BYTES)
        with contextlib.suppress(OSError):
            os.pwrite(fd, data, 0)

    @classmethod
    def of(cls, fd: int) -> Holder:
        """The holder of the lock on the file open at ``fd`` (best effort: fields it cannot tell stay unset)."""
        import socket
        h = cls()
        with contextlib.suppress(OSError, *BAD_JSON):
            raw = json.loads(os.pread(fd, _RECORD_BYTES, 0).decode())
            h = cls(pid=int(raw["pid"]), uid=None if raw.get("uid") is None else int(raw["uid"]),
                    host=str(raw.get("host", "")), since=float(raw["since"]), thread=str(raw.get("thread", "")))
        here = socket.gethostname()
        if h.host and h.host != here:
            h.state = "elsewhere"
            return h
        pids = _flock_pids(fd)
        if pids and h.pid not in pids:      # the record is an earlier holder's
            h = cls(pid=pids[0], host=here)
        if h.pid is None:
            return h
        stat = _proc(h.pid, "stat")
        if stat is not None:
            code = stat[stat.rfind(b")") + 2:][:1]
            h.state = {b"T": "stopped", b"t": "stopped", b"Z": "exiting", b"X": "exiting"}.get(code, "running")
            with contextlib.suppress(OSError):
                h.uid = os.stat(f"/proc/{h.pid}").st_uid
            h.command = " ".join((_proc(h.pid, "cmdline") or b"").replace(b"\0", b" ").decode(errors="replace")
                                 .split())[:80]
        elif os.path.isdir("/proc/self"):
            h.state = "gone"
        return h

    def same_as(self, other: Holder) -> bool:
        return (self.pid, self.host, self.state) == (other.pid, other.host, other.state)

    def describe(self) -> str:
        """"pid 1234 (python train.py) of user alice, stopped, since 2026-11-21 14:03:12 (35 s ago)"."""
        if self.pid is None:
            return "a process that left no record (an older robocache, or another tool)"
        if self.pid == os.getpid() and self.state != "elsewhere":
            who = "this process" + (f" (thread {self.thread!r})" if self.thread else "")
        else:
            who = f"pid {self.pid}" + (f" ({self.command})" if self.command else "")
        if self.uid is not None:
            who += f" of user {_user(self.uid)}"
        if self.state == "elsewhere":
            who += f" on host {self.host}"
        elif self.state != "unknown":
            who += f", {self.state}"
        if self.since is not None:
            when = datetime.datetime.fromtimestamp(self.since).isoformat(sep=" ", timespec="seconds")
            who += f", since {when} ({max(0.0, time.time() - self.since):.0f} s ago)"
        return who

    def advice(self, gave_up: bool = False) -> str:
        """What the waiting user can do, for this holder (``gave_up``: after a LockTimeout)."""
        elsewhere = "load with a cache folder of your own (ROBOCACHE_CACHE_DIR) or without the cache (cache=False)"
        if self.uid is not None and hasattr(os, "getuid") and self.uid != os.getuid():
            return (f"another user's process, which robocache cannot resume or end: ask {_user(self.uid)}, or "
                    f"{elsewhere}")
        if self.state == "stopped":
            return (f"it is stopped (Ctrl-Z or SIGSTOP) and keeps the lock until it goes on: resume it (`fg` in its "
                    f"shell, or `kill -CONT {self.pid}`) or end it (`kill {self.pid}`); robocache never takes the lock "
                    f"from it, as it may be writing the entry")
        if self.state == "gone":
            return ("the process that recorded it is gone and the kernel still sees the lock held: a process that "
                    "inherited its descriptor holds it (`fuser` or `lsof` on the lock file names it)")
        if self.state == "elsewhere":
            return f"it runs on host {self.host} (a cache folder on a shared file system)" + \
                (f"; wait for it, or {elsewhere}" if gave_up else "")
        if gave_up:
            return f"it is building or checking this entry: wait for it (a longer {LOCK_TIMEOUT_ENV}), or {elsewhere}"
        return "it is building or checking this entry; the load goes on as soon as it is done"


def _flock_pids(fd: int) -> list[int]:
    """The pids the kernel lists (``/proc/locks``) as holding a flock on the file open at ``fd``; [] when
    unknown (no /proc, or a holder in another pid namespace)."""
    try:
        ino = os.fstat(fd).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; "1: -> FLOCK ..." is a blocked waiter
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(ino):
            with contextlib.suppress(ValueError):
                if int(parts[4]) > 0:
                    pids.append(int(parts[4]))
    return pids


class LockWait:
    """A wait on the lock of ``path`` that another holds: polls (a blocking flock cannot be given up),
    after LOCK_WARN_AFTER seconds warns naming the holder (LockWaitWarning; again when the holder or its
    state changes: stopped, resumed), and raises LockTimeout after ``timeout`` seconds (None:
    ROBOCACHE_LOCK_TIMEOUT). Never takes the lock from its holder: a stopped process may be writing the
    entry, and a dead one has no lock (the kernel drops it)."""

    def __init__(self, path: Path, timeout: float | None):
        self.path = path
        self.timeout = lock_timeout() if timeout is None else float(timeout)
        self.why = f" ({LOCK_TIMEOUT_ENV})" if timeout is None else ""    # where the limit comes from
        self.start = time.monotonic()
        self.told: Holder | None = None
        self.look = LOCK_WARN_AFTER     # when to look at the holder next (seconds into the wait)

    @property
    def name(self) -> str:
        return self.path.name.split(".", 1)[0]

    def until_free(self, fd: int, op: int) -> None:
        """Returns once ``fd`` holds the lock (``op``); LockTimeout past the deadline; OSError as flock raises."""
        import fcntl
        pause = 0.005
        while True:
            waited = time.monotonic() - self.start
            if waited >= self.look:    # before the deadline: a wait past LOCK_WARN_AFTER warns, then times out
                self.look = waited + 1.0    # /proc/locks can be long: once a second
                h = Holder.of(fd)
                if self.told is None or not h.same_as(self.told):
                    self.told = h
                    limit = (f"gives up after {self.timeout:g} s{self.why}" if self.timeout is not None
                             else f"waits without limit ({LOCK_TIMEOUT_ENV} sets one, in seconds)")
                    warn(f"robocache is waiting for the lock of cache entry {self.name} ({self.path}), held by "
                         f"{h.describe()}: {h.advice()}. This load {limit}.", LockWaitWarning)
            if self.timeout is not None and waited >= self.timeout:
                h = Holder.of(fd)
                raise LockTimeout(
                    f"robocache gave up after {self.timeout:g} s{self.why} waiting for the lock of cache "
                    f"entry {self.name} ({self.path}), held by {h.describe()}: {h.advice(gave_up=True)}")
            rest = None if self.timeout is None else self.timeout - waited
            time.sleep(max(0.0, min(pause, rest if rest is not None else pause)))
            pause = min(pause * 2, 0.2)
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                continue


def flock_new(fd: int) -> None:
    """An exclusive flock on a file this process just made (no one else can hold it yet); nothing
    where the filesystem has no locks."""
    with contextlib.suppress(ImportError, OSError):
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def live_tmp(path: Path) -> bool:
    """Whether the temporary data file at ``path`` is being written: its writer holds an exclusive
    flock on it (EntryWriter) from creation to commit or abort. A file nobody locks is an orphan of a
    killed build, whatever pid its name records (a job that is pid 1 in its container sees its own pid
    alive after every restart)."""
    return lock_file(path, wait=False, create=False, probe=True) is None


class Hold:
    """A shared lock on an entry's data file (Entry.hold); ``release`` is idempotent."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def touch(path: Path) -> None:
    """Marks an entry used now (its JSON's mtime: what eviction orders by); best effort."""
    with contextlib.suppress(OSError):
        os.utime(path)


def holder(root: Path, name: str) -> str | None:
    """Why a process holds entry ``name`` besides its lock (call with the lock taken: ``claim``), or None."""
    if lock_file(root / f"{name}.frames", wait=False, create=False, probe=True) is None:
        return "in use: a running process has its frames mapped"
    for p in root.glob(f"{name}.frames.*.tmp"):
        if live_tmp(p):
            return "being written by a running process"
    return None


@contextlib.contextmanager
def claim(root: Path, name: str):
    """Yields None with entry ``name``'s lock taken when no process holds the entry, else why one does
    (the entry must then be left alone). Never waits."""
    fd = lock_file(root / f"{name}.lock", wait=False)
    if fd is None:
        yield "being built or loaded by a running process"
        return
    try:
        yield holder(root, name)
    finally:
        if fd >= 0:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# listing and clearing (python -m robocache cache list | clear)


def _files_by_entry(root: Path) -> dict[str, list[Path]]:
    """Every file of the cache folder by entry name (what comes before the first dot), sorted."""
    out: dict[str, list[Path]] = {}
    try:
        files = sorted(root.iterdir())
    except OSError:     # no folder, or not one
        return out
    for p in files:
        out.setdefault(p.name.split(".", 1)[0], []).append(p)
    return out


def _lock_only(files: list[Path]) -> bool:
    return all(p.suffix == ".lock" for p in files)


def list_entries(root: Path | None = None) -> list[dict]:
    """Every entry in the cache: {name, path, bytes, frames, sources, created, used, status}; status is
    "ok" (complete; whether it is current is decided when it is loaded), "incomplete" (data without
    JSON, or a temporary file of a build in progress or crashed) or "corrupted" (unreadable JSON);
    ``used``: when a load last read it (or it was written)."""
    root = frames_dir() if root is None else root
    out = []
    for name, files in _files_by_entry(root).items():
        if _lock_only(files):
            continue
        e: dict = {"name": name, "path": str(root / f"{name}.frames"), "bytes": 0, "frames": 0, "sources": [],
                   "created": None, "used": None, "status": "incomplete"}
        written = 0.0      # an entry without JSON: when its files were last written
        for p in files:
            with contextlib.suppress(OSError):
                st = p.stat()
                e["bytes"] += st.st_size
                written = max(written, st.st_mtime)
            if p.name == f"{name}.json":
                try:
                    meta = json.loads(p.read_text())
                    summary = dict(frames=int(meta.get("frames", 0)), created=_text(meta.get("created")),
                                   sources=[_text(s["path"]) for s in meta.get("sources", [])],
                                   status="ok" if meta.get("complete") is True else "incomplete")
                except (OSError, *BAD_JSON):    # whatever the JSON holds, the listing goes on
                    e["status"] = "corrupted"
                else:
                    e.update(summary)
        used = _last_use(root / f"{name}.json") or written
        e["used"] = datetime.datetime.fromtimestamp(used, datetime.timezone.utc).isoformat(timespec="seconds") \
            if used else None
        out.append(e)
    return out


def _last_use(meta: Path) -> float:
    """When an entry was last used (its JSON's mtime, see touch); 0 without one (leftovers go first)."""
    try:
        return meta.stat().st_mtime
    except OSError:
        return 0.0


def _text(value) -> str | None:
    return value if value is None or isinstance(value, str) else repr(value)[:80]


def _remove_files(files: list[Path]) -> list[tuple[Path, OSError]]:
    """Deletes an entry's files, the JSON first (whatever stays is no entry) and its lock file last
    (taken by the caller: a process waiting on it opens the new one, see _lock_file)."""
    failed = []
    for p in sorted(files, key=lambda p: (not p.name.endswith(".json"), p.suffix == ".lock")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            failed.append((p, e))
    return failed


@dataclass
class Sweep:
    """What ``sweep`` did: entries removed (list_entries rows), entries left because a process holds
    them (row, why), files that could not be removed (path, error)."""

    removed: list
    held: list
    failed: list

    @property
    def freed(self) -> int:
        return sum(e["bytes"] for e in self.removed)


def _sweep_names(root: Path, names) -> Sweep:
    rows = {e["name"]: e for e in list_entries(root)}
    done = Sweep([], [], [])
    for name in names:
        row = rows.get(name) or {"name": name, "bytes": 0, "frames": 0, "status": "lock file"}
        with claim(root, name) as why:
            if why is not None:
                done.held.append((row, why))
                continue
            # listed under the lock: a build that ended meanwhile may have renamed its files
            failed = _remove_files(sorted(root.glob(f"{glob.escape(name)}.*")))
        done.failed.extend(failed)
        if not failed:
            done.removed.append(row)
    return done


def sweep(names=None, *, all: bool = False) -> Sweep:
    """Removes entries no process holds: ``all=True`` every one (lock files and leftovers of crashed
    builds included), else those whose name is in ``names`` or starts with one of them (the hash part
    alone also matches); KeyError naming what matched nothing. An entry being built, checked or
    mapped by a running process is left (``held``, with why); a file that cannot be removed is warned
    about (CacheWarning, naming it and why) and its entry left out of ``removed``."""
    root = frames_dir()
    if not all and not names:
        raise ValueError("clear: pass entry names, or all=True")
    # every name starts with "": an empty pattern (a shell variable that was not set) would clear it all
    if not all and any(not isinstance(n, str) or not n.strip() for n in names):
        raise ValueError(f"clear: entry names must not be empty (got {list(names)!r}); pass all=True (--all) to "
                         f"remove every entry")
    entries = set(_files_by_entry(root))
    if all:
        chosen = entries
    else:
        listed = {e["name"] for e in list_entries(root)}
        chosen = set()
        for want in names:
            hit = {n for n in listed if n == want or n.startswith(want) or n.rsplit("-", 1)[-1].startswith(want)}
            if not hit:
                raise KeyError(f"no cache entry matches {want!r} in {root}")
            chosen |= hit
    done = _sweep_names(root, sorted(chosen))
    done.removed = [e for e in done.removed if e["status"] != "lock file"]
    if done.failed:
        path, err = done.failed[0]
        warn(f"robocache could not remove {len(done.failed)} files of its cache in {root}, e.g. {path} "
             f"({err.strerror or err}); the cache dir is read-only or another user's")
    return done


def clear(names=None, *, all: bool = False) -> list[str]:
    """``sweep``, returning the names removed; the entries left because a process holds them are
    warned about (CacheWarning naming each and why)."""
    done = sweep(names, all=all)
    if done.held:
        warn(f"robocache left {len(done.held)} cache entries that running processes hold: "
             + "; ".join(f"{e['name']} ({why})" for e, why in done.held))
    return sorted(e["name"] for e in done.removed)


def evict(root: Path, keep: str) -> list[dict]:
    """Least recently used entries removed until the cache folder is under ROBOCACHE_CACHE_MAX, never
    ``keep`` (the entry just written) nor one a process holds; leftovers of crashed builds and damaged
    entries go first. One CacheWarning names what was evicted, another says when the folder stays
    over the cap (what holds it). Returns the evicted entries (list_entries rows)."""
    cap = cache_max()
    if cap is None:
        return []
    rows = list_entries(root)
    total = sum(e["bytes"] for e in rows)
    if total <= cap:
        return []
    order = sorted((e for e in rows if e["name"] != keep),
                   key=lambda e: (e["status"] == "ok", _last_use(root / f"{e['name']}.json")))
    evicted, held = [], []
    for e in order:
        if total <= cap:
            break
        done = _sweep_names(root, [e["name"]])
        held += done.held
        for gone in done.removed:
            total -= gone["bytes"]
            evicted.append(gone)
    limit = f"{MAX_ENV}={human_bytes(cap)}"
    if evicted:
        warn(f"robocache evicted {len(evicted)} cache entries (least recently used first) to keep {root} under "
             f"{limit}: " + ", ".join(f"{e['name']} ({human_bytes(e['bytes'])}, last used {e['used']})"
                                     for e in evicted))
    if total > cap:
        why = "; ".join(f"{e['name']} {human_bytes(e['bytes'])} ({w})" for e, w in held) or "nothing else to evict"
        warn(f"robocache's cache in {root} holds {human_bytes(total)}, over {limit}, with the entry just written "
             f"({keep}) and those running processes hold: {why}")
    return evicted
