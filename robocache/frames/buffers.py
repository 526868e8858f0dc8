"""The tiers' buffers: a device tensor, a host buffer (pinned for a GPU), a map of a file; and a file's
bytes to the device through pinned chunks (``Uploader``)."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._util import cpu_count, current_gpu, require
from ..video import FrameSpec
from . import cache as _cache
from .pinned import file_pages, pinned_empty, pinned_file
from .plan import allocation_failed
from .tiers import tier_of

UPLOAD_CHUNK = 256 << 20  # cache -> device: two pinned chunks of this size, each read by several threads
POPULATE_MIN_BYTES = 16 << 20  # smaller CPU host buffers come from torch's allocator


def torch_or_error():
    return require("torch", "torch", "robocache.frames (frame ingest)")


def ingest_device(torch, tier: str, device):
    """The GPU a tier's ingest decodes into (None: the tier keeps its frames on the host), checked."""
    if not tier_of(tier).on_gpu:
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device={device!r} is for tier='device'; tier={tier!r} keeps frames on the CPU")
        return None
    dev = torch.device(device if device is not None else "cuda")
    if dev.type != "cuda":
        raise ValueError(f"tier='device' needs a CUDA device, got device={device!r} (use tier='host' on the CPU)")
    if not torch.cuda.is_available():
        raise ValueError("tier='device' needs a CUDA device; torch sees none (use tier='host' or 'disk')")
    if dev.index is None:
        dev = current_gpu()
    return dev


@contextlib.contextmanager
def allocating(what: str, nbytes: int, tier: str):
    """A buffer the plan made room for that the system refuses (memory taken since the plan, a limit it
    could not see): the plan's MemoryError with the sizes and the ways out, never a bare ENOMEM or CUDA
    out-of-memory error."""
    try:
        yield
    except MemoryError as e:
        raise allocation_failed(what, nbytes, tier, e) from e
    except OSError as e:
        if e.errno != errno.ENOMEM:
            raise
        raise allocation_failed(what, nbytes, tier, e) from e
    except RuntimeError as e:
        if "out of memory" not in str(e).lower():
            raise
        raise allocation_failed(what, nbytes, tier, e) from e


def device_buffer(torch, spec: FrameSpec, n: int, dev):
    with allocating("the decoded frames on the GPU", n * spec.frame_bytes, "device"):
        return torch.empty(shape(spec, n), dtype=torch.uint8, device=dev)


def shape(spec: FrameSpec, n: int) -> tuple:
    return (n,) + spec.row_shape


def host_buffer(torch, shape, fill=None):
    """A CPU tensor for the host tier, written by ``fill(array)`` when given, then pinned
    (cudaHostRegister maps and locks every page) when torch sees a CUDA device (pinned_empty: its
    writers fault the pages in, 2 MiB at a time where the kernel gives transparent huge pages).
    Without a GPU an anonymous map populated up front: on the 2-core machine MAP_POPULATE took 0.4 s
    for 0.88 GB, 4 KiB faults while decoding 0.54 s, and huge-page faults 0.13-2.7 s (the kernel's
    compaction on a fragmented VM)."""
    nbytes = int(np.prod(shape))
    with allocating("the decoded frames in host memory", nbytes, "host"):
        if torch.cuda.is_available():
            # exact size: torch's pin_memory=True rounds to a power of two (75 GB would ask for 128 GB)
            return pinned_empty(shape, fill=fill)
        populate = getattr(mmap, "MAP_POPULATE", 0)
        if nbytes < POPULATE_MIN_BYTES or not populate:
            out = torch.empty(shape, dtype=torch.uint8)
        else:
            region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
            out = torch.from_numpy(np.frombuffer(region, np.uint8).reshape(shape))  # the array keeps the map
    if fill is not None:
        fill(out.numpy())
    return out


def map_file(torch, path, spec: FrameSpec, n: int):
    """torch CPU tensor over a copy-on-write map of the file: reads come from the file (paged in on
    demand), and a stray write changes only this process's copy, never the cache (a read-only map
    would turn it into a segfault, since torch tensors are always writable)."""
    if n == 0:
        return torch.empty(shape(spec, 0), dtype=torch.uint8)
    with allocating("a map of the decoded frames' file", n * spec.frame_bytes, "disk"):
        arr = np.memmap(path, dtype=np.uint8, mode="c", shape=shape(spec, n))
    return torch.from_numpy(arr)


def pread_into(fd, dst: np.ndarray, offset: int, pool=None, chunk=64 << 20) -> None:
    """Fills dst (a contiguous uint8 array) from fd at offset, in chunks (in threads when given a pool:
    os.preadv releases the GIL, so page-cache copies and page faults run on every core)."""
    flat = dst.reshape(-1)
    spans = [(s, min(s + chunk, len(flat))) for s in range(0, len(flat), chunk)]

    def read(span):
        s, e = span
        view = memoryview(flat[s:e])
        done = 0
        while done < e - s:
            got = os.preadv(fd, [view[done:]], offset + s + done)
            if got <= 0:
                raise _cache.InvalidEntry(f"truncated (read stopped {offset + s + done} bytes in)")
            done += got

    if pool is None:
        for span in spans:
            read(span)
    else:
        list(pool.map(read, spans))


def host_pages(torch, path, spec, n):
    """The host tier over a decoded file's pages: pinned in place for a GPU, plain without one; where
    that cannot be had, fresh memory filled by parallel reads (the readers fault its pages in on
    every core) and pinned."""
    pages = (pinned_file if torch.cuda.is_available() else file_pages)(path, shape(spec, n))
    if pages is not None:
        return pages
    with open(path, "rb") as f, \
            ThreadPoolExecutor(min(16, cpu_count()), thread_name_prefix="robocache-read") as pool:
        def fill(arr):
            pread_into(f.fileno(), arr, 0, pool, chunk=16 << 20)
        return host_buffer(torch, shape(spec, n), fill)


def upload(torch, fd, spec, n, dev):
    """The file's rows to a new device tensor (see Uploader)."""
    data = device_buffer(torch, spec, n, dev)
    with Uploader(torch, data, fd) as up:
        up.span(0, n * spec.frame_bytes)
    return data


class Uploader:
    """Byte spans of a file to the same spans of a device tensor, through two pinned chunk buffers:
    reading chunk k+1 overlaps the copy of chunk k (on a side stream; the host waits on its own
    events only). One thread's pread from the page cache moved ~4.5 GB/s on the H100 host (3.9x the
    cold decode) and the copy engine takes ~25 GB/s, so each chunk is read by up to 16 threads in
    16 MB pieces."""

    def __init__(self, torch, data, fd):
        self.torch, self.flat, self.fd = torch, data.view(-1), fd
        size = min(UPLOAD_CHUNK, self.flat.numel())
        self.bufs = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)] if size else []
        self.events = [None, None]
        self.k = 0
        self.stream = torch.cuda.Stream(data.device)
        self.pool = ThreadPoolExecutor(min(16, cpu_count()), thread_name_prefix="robocache-upload")

    def span(self, start: int, nbytes: int) -> None:
        for at in range(start, start + nbytes, UPLOAD_CHUNK):
            size = min(UPLOAD_CHUNK, start + nbytes - at)
            b = self.k % 2
            self.k += 1
            if self.events[b] is not None:
                self.events[b].synchronize()  # the copy that last read this buffer is done
            pread_into(self.fd, self.bufs[b].numpy()[:size], at, self.pool, chunk=16 << 20)
            with self.torch.cuda.stream(self.stream):
                self.flat[at:at + size].copy_(self.bufs[b][:size], non_blocking=True)
                self.events[b] = self.stream.record_event()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.synchronize()
        self.pool.shutdown()
