"""The node-local side of a mirror: each remote object as a local file and a record of what it holds.

A mirror folder holds ``set/`` (the dataset as the readers see it: a file per remote object, at its
path) and ``state/`` (per file, ``<rel>.json``: the remote version the file is a copy of and what it holds;
``<rel>.lock``, flock'ed while the record is read and rewritten). Two ways to hold an object:

- ``bytes``: a sparse file of the remote's exact size, holding the byte ranges listed (``ranges``), holes
  elsewhere (nothing on disk). Its mtime is the version's ``mtime_ns``, set again after every write, so the
  frame cache's key of the file (path, size, mtime) stays the same while ranges are added.
- ``rowgroups`` (a parquet data file of which a rank needs some row groups): a valid parquet file of the row
  groups listed (``groups``, the remote file's numbering, in order), and the remote file's footer kept as
  ``state/<rel>.tail`` so the next run chooses row groups without asking the remote.

The record is written after the data (data fsync'ed, record written to a temporary name, fsync'ed, renamed):
a crash or an error leaves bytes the record does not claim, which are fetched again, never bytes it claims
that are not there. A new remote version replaces the file by rename (a new inode: a process reading the
old one keeps reading it) before anything of the new version is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .objects import Version

SET, STATE = "set", "state"


@dataclass
class Held:
    """What a local file holds of which remote version (``state/<rel>.json``)."""
    version: Version | None = None
    mode: str = "bytes"
    ranges: list = field(default_factory=list)        # bytes: [[start, end], ...] sorted, merged
    groups: list = field(default_factory=list)        # rowgroups: remote row-group numbers, in file order
    tail_at: int = -1                                 # rowgroups: the footer's offset in the remote file

    def as_json(self) -> dict:
        return {"version": self.version.as_json() if self.version else None, "mode": self.mode,
                "ranges": [list(r) for r in self.ranges], "groups": list(self.groups), "tail_at": self.tail_at}


class LocalFile:
    """One remote object's local copy in the mirror at ``root`` (``rel``: its path in the dataset)."""

    def __init__(self, root: Path, rel: str):
        self.rel = rel
        self.path = root / SET / rel
        self.record = root / STATE / f"{rel}.json"
        self.tail = root / STATE / f"{rel}.tail"
        self.lockfile = root / STATE / f"{rel}.lock"

    def __repr__(self):
        return f"LocalFile({self.path})"

    @contextlib.contextmanager
    def lock(self):
        """Exclusive, across the node's processes, while the record is read and rewritten."""
        self.lockfile.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def held(self) -> Held:
        """The record, checked against the file (a record without its file, or of another size: nothing held)."""
        try:
            d = json.loads(self.record.read_text())
            h = Held(Version.from_json(d.get("version")), d.get("mode", "bytes"),
                     [tuple(r) for r in d.get("ranges") or []], [int(g) for g in d.get("groups") or []],
                     int(d.get("tail_at", -1)))
        except (OSError, ValueError, TypeError, AttributeError):
            return Held()
        if h.mode == "rowgroups":
            if h.tail_at >= 0 and not self.tail.is_file() or h.groups and not self.path.is_file():
                return Held(h.version, h.mode)
            return h
        try:
            size = self.path.stat().st_size
        except OSError:
            return Held(h.version, h.mode)
        return h if h.version is None or size == h.version.size else Held(h.version, h.mode)

    def write_record(self, h: Held) -> None:
        write_atomic(self.record, json.dumps(h.as_json()).encode())

    def reset(self, version: Version, mode: str) -> Held:
        """(Under the lock.) A fresh local copy of ``version``: bytes, an empty sparse file of its size
        (a new inode, by rename); rowgroups, no file yet. The record says nothing is held."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        h = Held(version, mode)
        self.write_record(h)               # first: from here nothing of the old version is claimed
        if mode == "bytes":
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.new")
            with open(tmp, "wb") as f:
                f.truncate(version.size)
            os.replace(tmp, self.path)
            set_mtime(self.path, version)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            with contextlib.suppress(FileNotFoundError):
                self.tail.unlink()
        return h


def set_mtime(path: Path, version: Version) -> None:
    """The copy's mtime is the version's: the frame cache's key of the file does not move as it fills."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, version.mtime_ns))


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path``, whole or not at all (a temporary name, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
