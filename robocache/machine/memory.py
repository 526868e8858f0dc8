"""How much host memory this process may still take: the smallest of what the machine has free, what
its container's memory cgroup leaves, and what its address-space limit leaves.

- ``MemAvailable`` of ``/proc/meminfo``: the machine's RAM that new allocations can get.
- The memory cgroup (v2 ``memory.max`` - ``memory.current``; v1 ``memory.limit_in_bytes`` -
  ``memory.usage_in_bytes``) of the process's own cgroup (``/proc/self/cgroup``) and of every ancestor
  the mount shows. Inside a container this is the limit the OOM killer enforces, while
  ``/proc/meminfo`` shows the whole node: a job in a 1 GiB cgroup on a 1 TB node sees ~1 TB there. The
  cgroup's inactive page cache (``inactive_file`` of ``memory.stat``) counts as free: the kernel drops
  it before it kills anyone (Kubernetes' working set leaves it out the same way).
- ``RLIMIT_AS`` (``ulimit -v``, ``prlimit --as``; Slurm sets it on some clusters) less the process's
  ``VmSize``: every map counts against it, a file mapped read-only as much as RAM.

Nothing here raises: a file that is missing or does not parse leaves its limit out.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["available_host_memory", "host_memory_limits", "address_space_left"]

#: where /proc and /sys are read from (tests point it at a fake tree)
ROOT = Path("/")
#: limits at or above this are "no limit" (cgroup v1 writes it as 2**63 rounded down to a page)
UNLIMITED = 1 << 62

# (limit file, usage file, inactive page cache key of memory.stat) per cgroup version; v1's
# total_inactive_file covers the child cgroups too, as its usage does
_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def available_host_memory() -> int:
    """Bytes of host memory this process can still allocate: the smallest of
    :func:`host_memory_limits` (the machine's RAM / 2 when none can be read)."""
    limits = host_memory_limits()
    if limits:
        return min(limits.values())
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):  # pragma: no cover
        return 0


def host_memory_limits() -> dict[str, int]:
    """Bytes each limit leaves, by a name that says where it comes from (``"MemAvailable"``, the
    cgroup file, ``"RLIMIT_AS"``); a limit that is not set or cannot be read is left out."""
    out = {}
    avail = _meminfo("MemAvailable")
    if avail is not None:
        out["MemAvailable"] = avail
    out.update(_cgroup_limits())
    left = address_space_left()
    if left is not None:
        out["RLIMIT_AS"] = left
    return out


def address_space_left() -> int | None:
    """Bytes of address space ``RLIMIT_AS`` leaves this process (None: no limit): what maps of any
    kind, files included, may still take."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = _status_bytes("VmSize") or 0
    return max(0, soft - used)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _meminfo(key: str) -> int | None:
    text = _read(ROOT / "proc/meminfo")
    return _kib_field(text, key)


def _status_bytes(key: str) -> int | None:
    return _kib_field(_read(ROOT / "proc/self/status"), key)


def _kib_field(text: str | None, key: str) -> int | None:
    """``key:   123 kB`` lines of /proc files, in bytes."""
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            try:
                return int(rest.split()[0]) * 1024
            except (ValueError, IndexError):
                return None
    return None


def _own_cgroups() -> tuple[str | None, str | None]:
    """The process's cgroup path in the v2 hierarchy and in v1's memory hierarchy (None: not in one)."""
    v2 = v1 = None
    for line in (_read(ROOT / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ident, controllers, path = parts
        if ident == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _cgroup_limits() -> dict[str, int]:
    v2, v1 = _own_cgroups()
    base = ROOT / "sys/fs/cgroup"
    out = {}
    for path, mounts, files in ((v2, (base, base / "unified"), _V2), (v1, (base / "memory",), _V1)):
        if path is None:
            continue
        for mount in mounts:
            for d in _ancestors(mount, path):
                left = _cgroup_left(d, files)
                if left is not None:
                    out[f"cgroup {d / files[0]}"] = left
    return out


def _ancestors(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under the mount and every parent up to the mount. A container without its
    own cgroup namespace sees the host's path in /proc/self/cgroup over a mount of its own cgroup:
    then only the mount's root exists, and it is the container's."""
    parts = [p for p in path.split("/") if p and p != ".."]
    dirs = [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def _cgroup_left(d: Path, files) -> int | None:
    """limit - usage + inactive page cache of one cgroup folder (None: no limit there)."""
    limit_file, usage_file, inactive_key = files
    limit = _int(_read(d / limit_file))
    if limit is None or limit >= UNLIMITED:
        return None
    usage = _int(_read(d / usage_file)) or 0
    inactive = 0
    for line in (_read(d / "memory.stat") or "").splitlines():
        k, _, v = line.partition(" ")
        if k == inactive_key:
            inactive = _int(v) or 0
    return max(0, limit - usage + min(inactive, usage))


def _int(text: str | None) -> int | None:
    """An integer file's value; None for "max" (v2's no limit), empty or unreadable."""
    try:
        return int((text or "").strip())
    except ValueError:
        return None
