"""The memory plan: which tier holds each image stream, decided from metadata before a frame is decoded.

Budgets (bytes), unless given:
- device: 25% of the GPU's free memory at load time, less what the dataset's other streams take. The
  rest is the model's: a policy's weights, optimizer state and activations usually need most of a GPU,
  and a loader that takes them would move the out-of-memory error into the training step.
- host: 50% of the host memory this process may still take (robocache.machine.memory: the smallest of
  ``MemAvailable``, the container's cgroup limit less its usage, and what ``RLIMIT_AS`` leaves) for
  pinned frames: pinned pages cannot be swapped or reclaimed, and the page cache, the DataLoader-free
  training process and other jobs need the rest.
- disk: the free space of the cache directory, less 1 GB; none when the directory is not a folder or
  cannot be written (``disk_unusable``: the errors then say so, not that the disk is full).
- address space, only under ``RLIMIT_AS``: 50% of what it leaves, shared by every tier but the GPU's
  (host buffers, and the disk and compressed tiers' maps of their cache files), the rest for the
  decoders' threads and the training process.
``auto`` puts each stream whole into the first tier with room, in the order device, host, disk, then
``lossless`` (the frames' planes coded without loss, see lossless.py: batches bit-identical to the host
tier's), and only then ``compressed`` (lossy: JPEG, see jpeg.py; the loader warns when auto picks it).
Coded bytes are not known before coding: the plan counts ``LOSSLESS_BITS_PER_PIXEL`` and
``JPEG_BITS_PER_PIXEL`` per pixel, and they live in host RAM when they fit its budget, else mapped from
the cache file on disk.
A plan that cannot fit raises one ``MemoryError`` naming the bytes needed and available and the ways out.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from numbers import Real

from ..machine import memory
from .tiers import AUTO_ORDER, tier_of

CHOICES = ("auto",) + AUTO_ORDER
# compressed-tier bytes per pixel the plan assumes: 2x the 0.5 bit/pixel measured at qscale 2 on the
# CR5 arm's 480x640 footage (docs/frame-storage.md); noisier cameras code larger
JPEG_BITS_PER_PIXEL = 1.0
# lossless-tier bytes per pixel the plan assumes: the CR5 arm's frames took 2.0 (480x640) and 2.6 (180x320)
# bits per pixel over 300 frames, one episode 3.3 (docs/frame-storage.md); 4 leaves room for noisier cameras
LOSSLESS_BITS_PER_PIXEL = 4.0
DEVICE_SHARE = 0.25
HOST_SHARE = 0.50
DISK_RESERVE = 1 << 30


@dataclass
class Need:
    """One image stream to place: ``frames`` frames of ``frame_bytes`` bytes each."""

    name: str
    frames: int
    frame_bytes: int
    height: int = 0
    width: int = 0
    cached: bool = False   # its decoded frames are in the cache already: the disk tier writes nothing

    @property
    def nbytes(self) -> int:
        return self.frames * self.frame_bytes

    @property
    def compressed_bytes(self) -> int:
        """The compressed tier's estimate (JPEG_BITS_PER_PIXEL)."""
        return int(self.frames * self.height * self.width * JPEG_BITS_PER_PIXEL / 8)

    @property
    def lossless_bytes(self) -> int:
        """The lossless tier's estimate (LOSSLESS_BITS_PER_PIXEL)."""
        return int(self.frames * self.height * self.width * LOSSLESS_BITS_PER_PIXEL / 8)

    def bytes_in(self, tier: str) -> int:
        return tier_of(tier).planned_bytes(self)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def device_free(device) -> int:
    """Free bytes on a CUDA device (0 for the CPU)."""
    import torch
    if device.type != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def disk_free(path) -> int:
    os.makedirs(path, exist_ok=True)
    return int(shutil.disk_usage(path).free)


def disk_unusable(path) -> str:
    """Why the cache folder ``path`` cannot take the disk tier's files ("" when it can; made when missing):
    a regular file (or one in its path), a folder that cannot be made, a read-only mount or a folder
    this user cannot write. Free space alone hides these: a read-only mount still reports its free
    bytes, a file in the way reports none."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        if os.path.exists(path) and not os.path.isdir(path):
            return "is a file, not a folder"
        return f"cannot be made ({e.strerror or e})"
    if not os.access(path, os.W_OK | os.X_OK):
        ro = getattr(os, "ST_RDONLY", 0) and os.statvfs(path).f_flag & os.ST_RDONLY
        return "is on a read-only file system" if ro else "is not writable by this user"
    return ""


@dataclass
class Budgets:
    device: int
    host: int
    disk: int
    disk_dir: str = ""
    address: int | None = None   # bytes of address space the frames may map (RLIMIT_AS); None: no limit
    host_limit: str = ""         # the limit a default host budget is half of (robocache.machine.memory), for messages
    disk_why: str = ""           # why there is no disk budget (disk_unusable), for messages


def budgets(device, *, device_memory=None, host_memory=None, disk_dir=None, other_device_bytes: int = 0) -> Budgets:
    """The bytes each tier may take (see the module docstring for the defaults)."""
    from .cache import cache_dir
    device_memory = _bytes_arg("device_memory", device_memory)
    host_memory = _bytes_arg("host_memory", host_memory)
    d = device_memory if device_memory is not None else \
        max(0, int(device_free(device) * DEVICE_SHARE) - int(other_device_bytes))
    if device.type != "cuda":
        d = 0
    limits = memory.host_memory_limits()
    limit = "" if host_memory is not None or not limits else min(limits, key=lambda k: limits[k])
    h = host_memory if host_memory is not None else \
        int((limits[limit] if limits else memory.available_host_memory()) * HOST_SHARE)
    left = limits.get("RLIMIT_AS")
    root = os.fspath(disk_dir) if disk_dir is not None else os.fspath(cache_dir())
    why = disk_unusable(root)
    try:
        k = 0 if why else max(0, disk_free(root) - DISK_RESERVE)
    except OSError as e:
        k, why = 0, f"cannot be read ({e.strerror or e})"
    return Budgets(d, h, k, root, None if left is None else int(left * HOST_SHARE), limit, why)


def _bytes_arg(name: str, value) -> int | None:
    """A budget argument as whole bytes: TypeError for what is not a number, ValueError for a negative or
    non-finite one, both naming the parameter."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of bytes (an int such as 8 << 30), got {value!r} "
                        f"({type(value).__name__})")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of bytes >= 0, got {value!r}")
    return int(float(value))


def plan(needs: list[Need], choice, b: Budgets, *, device, hint: str = "") -> dict[str, str]:
    """Tier per stream name. ``choice``: "auto", one tier for all, or ``{stream: tier}`` (others auto).

    On a CPU dataset "device" and "host" both mean plain memory ("cpu"). Raises MemoryError when a stream
    cannot be placed, with what it needs, what each tier has left and the ways out.
    """
    per = choice if isinstance(choice, dict) else {}
    default = "auto" if isinstance(choice, dict) else choice
    if default not in CHOICES:
        raise ValueError(f"frames must be one of {CHOICES} or a dict stream -> tier, got {choice!r}")
    for n, t in per.items():
        if t not in CHOICES:
            raise ValueError(f"frames[{n!r}] must be one of {CHOICES}, got {t!r}")
    names = [n.name for n in needs]
    unknown = [n for n in per if n not in names]
    if unknown:
        raise ValueError(f"{hint}frames names {', '.join(map(repr, unknown))}, not an image stream of this "
                         f"dataset; its image streams are {names}")
    cpu = device.type != "cuda"
    left = {"device": b.host if cpu else b.device, "host": b.host, "disk": b.disk,
            "address": math.inf if b.address is None else b.address}
    out: dict[str, str] = {}
    # explicit choices first, so auto fills around them
    for need in sorted(needs, key=lambda n: per.get(n.name, default) == "auto"):
        want = per.get(need.name, default)
        tiers = AUTO_ORDER if want == "auto" else (want,)
        for t in tiers:
            kind = tier_of(t)
            size = kind.planned_bytes(need)
            need_of = {p: kind.pool_bytes(p, size, need) for p in kind.pools(cpu)}
            pool = next((p for p in need_of if need_of[p] <= left[p]), None)
            # every tier but the GPU's maps its bytes into this process: RLIMIT_AS counts them
            mapped = cpu or not kind.on_gpu
            if pool is not None and (not kind.coded or need.height * need.width > 0) \
                    and (not mapped or size <= left["address"]):
                left[pool] -= need_of[pool]
                if mapped:
                    left["address"] -= size
                out[need.name] = kind.planned_name(cpu)
                break
        else:
            if want != "auto" and tier_of(want).needs_cache_folder and b.disk_why:
                # no room is not the problem: say what is
                from .cache import CacheError
                raise CacheError(f"{hint}frames='disk' needs a cache folder it can write, and {b.disk_dir} "
                                 f"{b.disk_why}; set ROBOCACHE_CACHE_DIR to a writable folder, or choose "
                                 f"frames='host' or 'auto'")
            raise MemoryError(_no_fit(need, needs, want, left, b, cpu, hint))
    return out


def _no_fit(need: Need, needs, want, left, b: Budgets, cpu: bool, hint: str) -> str:
    total = sum(n.nbytes for n in needs)
    where = "memory" if cpu else "device"
    host_of = f" ({HOST_SHARE:.0%} of {b.host_limit})" if b.host_limit else ""
    lines = [f"{hint}frames of stream {need.name!r} need {_gb(need.nbytes)} ({need.frames} frames x "
             f"{need.frame_bytes} bytes; all image streams: {_gb(total)}), which does not fit "
             + ("in the tier asked for" if want != "auto" else "in any tier") + ".",
             f"  left: {where} {_gb(left['device'])}" + ("" if cpu else f" of a {_gb(b.device)} budget")
             + f", host {_gb(left['host'])} of {_gb(b.host)}{host_of}, "
             + (f"disk: none, the cache folder {b.disk_dir} {b.disk_why} (ROBOCACHE_CACHE_DIR sets another)"
                if b.disk_why else f"disk {_gb(left['disk'])} at {b.disk_dir}")
             + ("" if b.address is None else f", address space {_gb(left['address'])} of {_gb(b.address)} "
                                             f"({HOST_SHARE:.0%} of what RLIMIT_AS leaves)")]
    ways = ["video_resize=(h, w) stores fewer bytes per frame",
            f"frames='lossless' codes the frames without loss (~{_gb(need.lossless_bytes)} for this stream)",
            f"frames='compressed' codes the frames as JPEG (lossy; ~{_gb(need.compressed_bytes)} for this stream)",
            "episodes=[...] loads part of the dataset",
            "frames='disk' (or 'host') puts the frames in another tier"
            + ("" if want == "auto" else f" (this stream asked for {want!r})"),
            "device_memory= / host_memory= raise a budget",
            "shard_episodes=True (multi-GPU) holds only each rank's episodes",
            "ROBOCACHE_CACHE_DIR points the disk tier at a bigger disk"]
    if b.host_limit.startswith("cgroup"):
        ways.append(f"a larger memory limit for the container or job ({b.host_limit.split(' ', 1)[1]})")
    if b.address is not None:
        ways.append("a larger address-space limit (ulimit -v, RLIMIT_AS)")
    return "\n".join(lines + ["  ways out: " + "; ".join(ways)])


def allocation_failed(what: str, nbytes: int, tier: str, error: BaseException, hint: str = "") -> MemoryError:
    """The MemoryError for a buffer the plan made room for that the system then refused (``OSError``
    ENOMEM from a map, torch's ``RuntimeError`` from its allocator, ``MemoryError``): memory taken by
    another process since the plan was made, or a limit the plan could not see. It names the buffer,
    its size, what host memory is left under which limit, and the ways out; raise it ``from error``."""
    limits = memory.host_memory_limits()
    now = ", ".join(f"{k} {_gb(v)}" for k, v in sorted(limits.items(), key=lambda kv: kv[1]))
    return MemoryError(
        f"{hint}could not allocate {what}: {_gb(nbytes)} ({nbytes} bytes) for the {tier} tier ({error}). "
        f"Host memory left now: {now or 'unknown'}. Ways out: frames='disk' or frames='compressed' "
        f"(less host memory), host_memory= a smaller budget so the plan picks another tier, episodes=[...] "
        f"or video_resize=(h, w) for fewer bytes, or a larger container memory limit / ulimit -v")
