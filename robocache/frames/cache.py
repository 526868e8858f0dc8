"""The persistent decoded-frame cache: the second load of a stream maps its frames instead of decoding.

Where: ``ROBOCACHE_CACHE_DIR``, else ``$XDG_CACHE_HOME/robocache``, else ``~/.cache/robocache``;
frame entries live in its ``frames/`` folder, three files each:

    <name>.frames     every frame of the stream, rows back to back: the tier buffer's bytes exactly
    <name>.times.npy  float64 [N]: every file's frame times (seconds) back to back
    <name>.offsets.npy  coded-tier entries only (spec format "jpeg" or "lossless"): int64 [N+1], frame i is
                      bytes offsets[i]:offsets[i+1] of the data file
    <name>.json       written last, by rename: {"complete": true, key, spec, counts, sources,
                      total_bytes, created, checksum, ...}; no JSON, no entry

    <name>.lock       flock'ed by the process that builds or checks the entry (the locks, the listing,
                      clearing and the size cap: cache_folder.py)

``name`` = a readable label + a hash of (real source paths, symlinks resolved; decode options;
FORMAT_VERSION): one slot per stream and options, however the files are reached. ``key`` = a hash of the same plus every source's size and mtime_ns,
recorded in the JSON: a source that changed gives another key, so the entry is stale and is rebuilt
in the same slot (old versions never pile up). Files are written under temporary names and renamed
only when complete, so a crash never leaves a valid-looking entry.

Size: ``ROBOCACHE_CACHE_MAX`` (bytes, K/M/G/T suffixes, powers of 1024) caps the folder; each commit
evicts the least recently used entries (a load or a reuse touches an entry's JSON) that no process
holds, with a CacheWarning naming them. A load of another subset of a stream's files copies the rows
of files other entries hold instead of decoding them again (reuse.py).

The checksum is cheap on purpose (a load must stay >= 10x faster than decoding, and the disk tier
must not read the whole file to map it): blake2b over the counts, the frame size, the whole times
file and the first, middle and last frame of every source file. With the size checks it catches a
truncated or extended data file, a damaged times file or JSON, and any change to a sampled frame;
a change inside another frame is not detected (docs/frames-ingest.md). What the checksum does not
cover (frame size, color facts, sources) is checked against the sources: entry.py's ``check``, the one
check an entry passes before its frames are used (by a load, the plan's look, a reuse's donors).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# the folder's side, used here and by the entry's users through this module
from .cache_folder import (BAD_JSON, MAX_ENV, CacheWarning, Hold, Sweep, cache_dir, cache_max, claim, clear,
                           evict, flock_new, frames_dir, human_bytes, list_entries, live_tmp, lock_file, parse_size,
                           sweep, touch, warn)

__all__ = ["BAD_JSON", "MAX_ENV", "CacheError", "CacheWarning", "Entry", "EntryWriter", "ForeignEntry", "Hold",
           "InvalidEntry", "Sweep", "cache_dir", "cache_max", "checksum", "clear", "entry_key", "entry_name",
           "evict", "frames_dir", "human_bytes", "list_entries", "main", "open_entry", "parse_size",
           "pread_row", "sample_rows", "stat_sources", "sweep", "touch", "warn"]

FORMAT_VERSION = 2  # 2: the checksum hashes each sampled row's digest


class CacheError(OSError):
    """The disk tier needs a file in the cache directory and cannot have it (no space, not writable)."""


class InvalidEntry(Exception):
    """An entry that must not be read as data; the message says why (and names the field: entry.check)."""


class ForeignEntry(InvalidEntry):
    """An entry whose files another user owns: not read, and not removed (it is not ours to remove)."""



#: set to 1 to read entries other users' files make up (a cache dir shared with users you trust)
TRUST_OTHERS_ENV = "ROBOCACHE_CACHE_TRUST_OTHERS"
def user_id() -> int:
    """The user whose entries are trusted (the effective uid; tests replace it)."""
    return os.geteuid()


def check_owner(paths) -> None:
    """ForeignEntry unless every existing file of ``paths`` belongs to this user or
    ROBOCACHE_CACHE_TRUST_OTHERS=1: in a cache dir others can write to, another user could plant frames
    for your dataset with a recomputed checksum (the checksum guards against damage, not against people)."""
    if os.environ.get(TRUST_OTHERS_ENV) == "1" or not hasattr(os, "geteuid"):
        return
    me = user_id()
    for p in paths:
        try:
            uid = os.stat(p).st_uid
        except FileNotFoundError:
            continue
        if uid != me:
            raise ForeignEntry(f"owned by uid {uid}, not by this user (uid {me}); robocache reads only its own "
                               f"user's entries (set {TRUST_OTHERS_ENV}=1 to trust a cache dir shared with users "
                               f"you trust)")


# ---------------------------------------------------------------------------------------------
# names and keys


def stat_sources(paths) -> list[dict]:
    """[{path, size, mtime_ns}] of the source files (real paths: see entry_name)."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append({"path": os.path.realpath(p), "size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)})
    return out


def _digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


def entry_name(paths, options: dict, label: str = "") -> str:
    """The slot of a stream: label + 16 hex digits of hash(real paths, options, FORMAT_VERSION). Real
    paths (symlinks resolved): a dataset reached through a link (the Hugging Face cache's snapshots link
    every file to its blob) and through its own folder is one entry, not two. For a file reached without
    a link the real path is the absolute path the entries of earlier versions hash, so they stay valid."""
    h = _digest({"paths": [os.path.realpath(p) for p in paths], "options": options, "version": FORMAT_VERSION})
    # no dots: the name is everything before the first dot of the entry's file names
    label = re.sub(r"[^A-Za-z0-9_-]+", "_", label).strip("_-")[:48]
    return f"{label}-{h[:16]}" if label else h[:16]


def entry_key(sources: list[dict], options: dict) -> str:
    """hash(every source's absolute path, size and mtime_ns, the decode options, FORMAT_VERSION)."""
    return _digest({"sources": sources, "options": options, "version": FORMAT_VERSION})


# ---------------------------------------------------------------------------------------------
# checksum


def sample_rows(counts) -> list[int]:
    """The rows the checksum reads: first, middle and last frame of every source file."""
    rows, off = [], 0
    for n in np.asarray(counts, np.int64).tolist():
        if n > 0:
            rows.extend(sorted({off, off + n // 2, off + n - 1}))
        off += n
    return rows


def checksum(read_row, counts, frame_bytes: int, times: np.ndarray, offsets=None) -> str:
    """blake2b of (version, frame_bytes, counts, times, offsets, each sampled row's own blake2b);
    read_row(r) -> bytes of row r. The rows are read and hashed on threads (pread and hashlib
    release the GIL): one thread took ~50 ms for the 96 rows of 32 files at 480x640, as much as
    pinning their 3.5 GB in place for the host tier's load from the cache."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"robocache-frames-v{FORMAT_VERSION}:{int(frame_bytes)}:".encode())
    h.update(np.ascontiguousarray(counts, dtype="<i8").tobytes())
    if offsets is not None:
        h.update(np.ascontiguousarray(offsets, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(times, dtype="<f8").tobytes())
    rows = sample_rows(counts)

    def row_digest(r):
        return hashlib.blake2b(read_row(r), digest_size=16).digest()

    with ThreadPoolExecutor(max(1, min(16, os.cpu_count() or 1, len(rows)))) as pool:
        for d in pool.map(row_digest, rows):
            h.update(d)
    return h.hexdigest()


def pread_row(fd, frame_bytes, offsets=None):
    """read(r) -> row r's bytes: fixed rows of frame_bytes, or spans offsets[r]:offsets[r+1]."""
    def read(r):
        at, size = (r * frame_bytes, frame_bytes) if offsets is None else \
            (int(offsets[r]), int(offsets[r + 1] - offsets[r]))
        b = os.pread(fd, size, at)
        if len(b) != size:
            raise InvalidEntry(f"truncated (row {r} is past the end of the data file)")
        return b
    return read


# ---------------------------------------------------------------------------------------------
# an entry


@dataclass
class Entry:
    """One slot of the cache: its files and its lock (entry.check says whether its frames may be used)."""

    name: str
    root: Path

    @property
    def data_path(self) -> Path:
        return self.root / f"{self.name}.frames"

    @property
    def times_path(self) -> Path:
        return self.root / f"{self.name}.times.npy"

    @property
    def meta_path(self) -> Path:
        return self.root / f"{self.name}.json"

    @property
    def offsets_path(self) -> Path:
        return self.root / f"{self.name}.offsets.npy"

    @property
    def lock_path(self) -> Path:
        return self.root / f"{self.name}.lock"

    def exists(self) -> bool:
        return self.meta_path.exists() or self.data_path.exists() or self.times_path.exists()

    @contextlib.contextmanager
    def lock(self):
        """Exclusive while one process builds or checks this entry (torchrun ranks loading the same
        stream on one node decode it once; the others wait and then read it). No-op when the cache
        directory cannot be written or there is no fcntl."""
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
        fd = lock_file(self.lock_path, wait=True)
        try:
            yield
        finally:
            if fd is not None and fd >= 0:
                os.close(fd)  # releases the lock

    def hold(self) -> Hold:
        """A shared lock on the entry's data file while the caller's frames map it: eviction and
        ``cache clear`` leave a held entry alone (removing a mapped file frees no space until it is
        unmapped). Taken with the entry's lock held; released by ``Hold.release`` (or at exit). A
        rebuild renames a new file into place: the holders keep the old one, and their lock with it.
        Never waits long: an exclusive lock on the file is only ever a check's instant (holder), so after
        a second without it the frames go unheld (eviction could then remove the file under them, which
        frees its space only once they are gone; the frames stay readable)."""
        for _ in range(100):
            fd = lock_file(self.data_path, wait=False, shared=True, create=False)
            if fd is not None:
                return Hold(fd)
            time.sleep(0.01)
        return Hold(None)

    def held_by(self, data) -> None:
        """The entry stays held (``hold``) while ``data``, an object over a map of its data file, lives.
        Taken under the entry's lock."""
        weakref.finalize(data, self.hold().release)

    def claim(self):
        """cache_folder.claim of this entry: None with its lock taken when no process holds it, else why."""
        return claim(self.root, self.name)

    def remove(self) -> OSError | None:
        """Deletes the entry's files; the error where one could not be (a read-only or another user's
        cache dir), else None. The JSON goes first: whatever stays is no entry."""
        for p in (self.meta_path, self.data_path, self.times_path, self.offsets_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                return e
        return None


def open_entry(paths, options: dict, label: str = "") -> Entry:
    """The slot of these sources and options (checks ROBOCACHE_CACHE_MAX before anything is decoded). The
    label comes from the folder the caller named (a symlink's name, not its target's): an entry with the
    same hash under another label is the same files and options, so it is the slot."""
    cache_max()
    name, root = entry_name(paths, options, label), frames_dir()
    if not (root / f"{name}.json").exists():
        digest = name.rsplit("-", 1)[-1]
        with contextlib.suppress(OSError):
            same = sorted(p.name[:-len(".json")] for p in root.glob(f"*{digest}.json")
                          if p.name[:-len(".json")].rsplit("-", 1)[-1] == digest)
            name = same[0] if same else name
    return Entry(name, root)


# ---------------------------------------------------------------------------------------------
# writing


class EntryWriter:
    """Writes one entry's data under a temporary name (rows at any offset, from any thread), then
    commits it: times file, JSON (with the checksum), renames. ``path`` is the data file (the disk
    tier maps it). The space is reserved up front (posix_fallocate) so a full disk shows before any
    decoding. Raises OSError when the directory or the space is not there."""

    BLOCK = 4096  # O_DIRECT alignment of addresses, offsets and sizes (covers 512-byte devices too)

    def __init__(self, root: Path, name: str, nbytes: int, direct: bool = False):
        self.root, self.name, self.nbytes = Path(root), name, int(nbytes)
        self.root.mkdir(parents=True, exist_ok=True)
        _remove_orphans(self.root, name)
        tag = f".{os.getpid()}.{os.urandom(4).hex()}.tmp"
        self.path = self.root / f"{name}.frames{tag}"
        self._times_tmp = self.root / f"{name}.times{tag}.npy"
        self._meta_tmp = self.root / f"{name}.json{tag}"
        self._offsets_tmp = self.root / f"{name}.offsets{tag}.npy"
        self._committed = False
        self.meta: dict = {}   # the JSON, once committed
        self.dfd = -1
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)   # the umask decides
        try:
            # held until commit or abort (or this process's death): what tells a live build from an orphan
            flock_new(self.fd)
            free = shutil.disk_usage(self.root).free
            if free < self.nbytes:
                raise OSError(errno.ENOSPC, f"{human_bytes(free)} free")
            try:
                os.posix_fallocate(self.fd, 0, self.nbytes) if self.nbytes else None
            except (AttributeError, OSError) as e:
                if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                    raise
                os.ftruncate(self.fd, self.nbytes)  # filesystems without fallocate
        except BaseException:
            self.abort()
            raise
        # a second descriptor bypassing the page cache (write_direct): writing GBs through the page
        # cache costs the writer a copy, page allocations and, once dirty pages pile up, the kernel's
        # throttling; a direct write is a DMA from the buffer. Not every filesystem has it (tmpfs)
        self.dfd = -1
        if direct and hasattr(os, "O_DIRECT"):
            with contextlib.suppress(OSError):
                self.dfd = os.open(self.path, os.O_WRONLY | os.O_DIRECT)

    @property
    def direct(self) -> bool:
        return self.dfd >= 0

    def write_direct(self, offset: int, data) -> None:
        """Like write, through O_DIRECT: offset, the buffer's address and its size must be multiples
        of BLOCK (the caller keeps to that; the last partial block goes through write)."""
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(self.dfd, view[done:done + (64 << 20)], offset + done)

    def write(self, offset: int, data) -> None:
        """data (a buffer) at byte offset; os.pwrite releases the GIL."""
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)

    def commit(self, *, key: str, spec: dict, counts, times: np.ndarray, sources: list[dict],
               options: dict, offsets=None) -> Path:
        """Writes the times (and a compressed entry's offsets) and the JSON, renames them into place
        (JSON last). Returns the data path."""
        counts = np.asarray(counts, np.int64)
        frame_bytes = int(spec["frame_bytes"])
        digest = checksum(pread_row(self.fd, frame_bytes, offsets), counts, frame_bytes, times, offsets)
        with open(self._times_tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(times, np.float64), allow_pickle=False)
        if offsets is not None:
            with open(self._offsets_tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(offsets, np.int64), allow_pickle=False)
        meta = {"complete": True, "version": FORMAT_VERSION, "name": self.name, "key": key, "spec": spec,
                "counts": counts.tolist(), "frames": int(counts.sum()), "total_bytes": self.nbytes,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "sources": sources, "options": options, "checksum": digest,
                "checksum_covers": "counts, frame size, times, first/middle/last frame of each source"}
        self._meta_tmp.write_text(json.dumps(meta, indent=1))
        self.meta = meta
        self._close_fds()
        final = self.root / f"{self.name}.frames"
        # the old entry's JSON goes first: from here until the new JSON lands there is no entry
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{self.name}.json").unlink()
        os.replace(self.path, final)
        self.path = final       # where the data is now, whatever fails next (the caller may map it)
        os.replace(self._times_tmp, self.root / f"{self.name}.times.npy")
        if offsets is not None:
            os.replace(self._offsets_tmp, self.root / f"{self.name}.offsets.npy")
        os.replace(self._meta_tmp, self.root / f"{self.name}.json")
        self._committed = True
        try:
            evict(self.root, keep=self.name)
        except OSError as e:   # the entry is written: a cap that cannot be kept is no reason to fail the load
            warn(f"robocache could not keep its cache in {self.root} under {MAX_ENV} ({e.strerror or e})")
        return final

    def _close_fds(self) -> None:
        for attr in ("dfd", "fd"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, -1)

    def abort(self) -> None:
        """Removes the temporary files (no-op after commit)."""
        self._close_fds()
        if self._committed:
            return
        for p in (self.path, self._times_tmp, self._meta_tmp, self._offsets_tmp):
            with contextlib.suppress(OSError):
                p.unlink()


def _tmp_tag(name: str, filename: str) -> str | None:
    """The writer's tag of a temporary file of entry ``name`` (``<name>.<kind>.<tag>.tmp[.npy]``)."""
    for kind in ("frames", "times", "json", "offsets"):
        head = f"{name}.{kind}."
        for tail in (".tmp", ".tmp.npy"):
            if filename.startswith(head) and filename.endswith(tail) and len(filename) > len(head) + len(tail):
                return filename[len(head):-len(tail)]
    return None


def _remove_orphans(root: Path, name: str) -> None:
    """Temporary files of this entry left by a build whose process is gone (killed mid-ingest): they
    can be as large as the entry. A build is alive while its data file is locked (live_tmp), not
    while its pid is: a job that is pid 1 in its container finds pid 1 alive after every restart.
    Called with the entry's lock held."""
    tags: dict[str, list[Path]] = {}
    for p in root.glob(f"{name}.*.tmp*"):
        tag = _tmp_tag(name, p.name)
        if tag is not None:
            tags.setdefault(tag, []).append(p)
    for tag, files in tags.items():
        if live_tmp(root / f"{name}.frames.{tag}.tmp"):
            continue
        for p in files:
            with contextlib.suppress(OSError):
                p.unlink()


# ---------------------------------------------------------------------------------------------
# command line


def main(argv=None) -> int:
    """``python -m robocache cache list [--json] | clear (--all | NAME...) | dir``"""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m robocache cache",
                                     description="The decoded-frame cache (ROBOCACHE_CACHE_DIR, "
                                                 "$XDG_CACHE_HOME/robocache or ~/.cache/robocache).")
    sub = parser.add_subparsers(dest="action", required=True)
    p_list = sub.add_parser("list", help="entries: name, status, frames, size, created, sources")
    p_list.add_argument("--json", action="store_true", help="one JSON list instead of a table")
    p_clear = sub.add_parser("clear", help="remove entries")
    p_clear.add_argument("names", nargs="*", metavar="NAME", help="entry names (or a prefix, or the hash part)")
    p_clear.add_argument("--all", action="store_true", help="remove every entry")
    sub.add_parser("dir", help="print the cache directory")
    args = parser.parse_args(argv)

    if args.action == "dir":
        print(cache_dir())
        return 0
    if args.action == "list":
        entries = list_entries()
        if args.json:
            print(json.dumps(entries, indent=1))
            return 0
        print(f"{frames_dir()}: {len(entries)} entries, {human_bytes(sum(e['bytes'] for e in entries))}")
        for e in entries:
            src = e["sources"]
            where = (f"{len(src)} files in {os.path.dirname(src[0])}" if src else "-")
            print(f"  {e['name']:<44} {e['status']:<10} {e['frames']:>9} frames {human_bytes(e['bytes']):>10}  "
                  f"created {e['created'] or '-':<25} used {e['used'] or '-':<25} {where}")
        return 0
    if not args.all and not args.names:
        parser.error("clear: name entries to remove, or pass --all")
    if args.all and args.names:
        parser.error("clear: pass --all or names, not both")
    try:
        done = sweep(args.names, all=args.all)
    except (KeyError, ValueError) as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 1
    for gone in sorted(done.removed, key=lambda e: e["name"]):
        print(f"removed {gone['name']} ({gone['status']}, {gone['frames']} frames, {human_bytes(gone['bytes'])})")
    for kept, why in done.held:
        print(f"kept    {kept['name']} ({human_bytes(kept['bytes'])}): {why}")
    print(f"removed {len(done.removed)} entries, {human_bytes(done.freed)}, from {frames_dir()}"
          + (f"; kept {len(done.held)} that running processes hold" if done.held else ""))
    return 0


def mark_damaged(data_path, checksum: str | None, reason: str) -> OSError | None:
    """Marks the entry whose data file is ``data_path`` for a rebuild when a fault shows after its load (a
    compressed frame that fails its CRC or its decode in a batch): its JSON gets ``"damaged": reason`` and a
    checksum no data matches, so the next load warns "corrupted" and builds it again. Only while the JSON
    still has ``checksum`` (the entry that was loaded, not one rebuilt since). The error where the JSON
    cannot be written (a read-only or another user's cache dir), else None."""
    data_path = Path(data_path)
    meta_path = data_path.with_name(f"{data_path.name.split('.', 1)[0]}.json")
    tmp = meta_path.with_name(f"{meta_path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
        if not isinstance(meta, dict) or meta.get("checksum") != checksum:
            return None
        meta.update(checksum="damaged", damaged=reason)
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, meta_path)
    except FileNotFoundError:
        return None
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return e
    except BAD_JSON:      # damaged already: the next load rebuilds it anyway
        return None
    return None
