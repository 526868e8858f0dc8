"""Pinned host memory of exactly the size asked for, for the host tier.

torch's ``pin_memory=True`` goes through its caching host allocator, which rounds every block up to
a power of two: 75 GB of frames would ask the driver for 128 GB and fail on a 128 GB machine (measured
on the H100 host: ``CUDA error: out of memory`` for a 75 GB pinned tensor with 122 GB free). Here the
pages come from an anonymous map and are page-locked and mapped for the GPU with ``cudaHostRegister``
(``_C._host_register``); the registration is undone when the last tensor over them is gone.

A cache file's pages are pinned in place (``pinned_file``): a shared read-only map, registered
read-only, is the page cache's own pages, with no copy and no second copy of the frames in RAM.
On the H100 host (driver 580.159) a private map of a file never registered: writable, a 174 MB
cache file did not return in 4 minutes; read-only, a 0.88 GB one not in 90 s. A shared read-only
map registered in 0.15 s (0.88 GB) and 0.18-0.21 s (3.5 GB).
"""

from __future__ import annotations

import mmap
import warnings
import weakref

import numpy as np

from .numa import current_gpu_node, prefer

# madvise: map every page of the range readable in one call (Linux 5.14); on a private file map it
# points at the page cache, no copy-on-write break (MAP_POPULATE would copy every page of a writable one)
_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23


def _advise(region, advice: int) -> None:
    """madvise, where the kernel has it (a hint: refused is fine)."""
    try:
        region.madvise(advice)
    except (OSError, AttributeError, ValueError):
        pass


def _register(ptr: int, nbytes: int, read_only: bool = False) -> None:
    from .. import _C
    _C._host_register(ptr, nbytes, read_only)


def _unregister(ptr: int) -> None:
    from .. import _C
    try:
        _C._host_unregister(ptr)
    except _C.CudaError:
        pass  # at interpreter exit the runtime may be gone before the memory; the process frees both


def pinned_empty(shape, dtype=np.uint8, fill=None):
    """An uninitialised CPU tensor of ``shape``, pinned for the GPU (plain memory without a GPU).

    ``fill(array)`` writes the array before it is pinned. Its writers then fault the pages in, on as
    many cores as it uses, instead of one thread zeroing them all up front (MAP_POPULATE) before the
    data is written over them."""
    import torch
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0 or not torch.cuda.is_available():
        arr = np.empty(shape, dtype)
        if fill is not None:
            fill(arr)
        return torch.from_numpy(arr)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    arr = np.frombuffer(region, dtype).reshape(shape)               # the array keeps the map alive
    node = current_gpu_node()
    if node is not None:   # before any page exists: the GPU reading them is on that socket
        prefer(arr.ctypes.data, nbytes, node)
    # transparent huge pages, then populated in one call when nothing fills it: measured on the H100
    # host (0.88 GB read from the page cache by 16 threads, then registered): 0.30 s with 4 KiB pages,
    # 0.09 s with 2 MiB ones (fill 2x, cudaHostRegister 3-6x faster); the kernel may decline either
    _advise(region, getattr(mmap, "MADV_HUGEPAGE", 14))
    # not inherited by a fork: Linux copies page-locked anonymous pages into every child at fork (they
    # cannot be shared copy-on-write), so each torch DataLoader worker forked beside a 36 GB pinned
    # compressed set copied it (bench_scale's torch contender never started on the H100 host); a forked
    # child cannot use CUDA, the only reader of these pages
    _advise(region, getattr(mmap, "MADV_DONTFORK", 10))
    if fill is None:
        _advise(region, _MADV_POPULATE_WRITE)      # else cudaHostRegister faults the pages in itself
    if fill is not None:
        fill(arr)
    ptr = arr.ctypes.data
    try:
        _register(ptr, nbytes)
    except RuntimeError as e:
        raise MemoryError(f"cannot pin {nbytes / 1e9:.2f} GB of host memory for the GPU ({e}); lower host_memory= "
                          "or use frames='disk'") from None
    weakref.finalize(arr, _unregister, ptr)
    return torch.from_numpy(arr)


def pinned_file(path, shape):
    """The first ``prod(shape)`` bytes of the file at ``path`` as a uint8 CPU tensor over the page
    cache's own pages, pinned in place for the GPU (see the module's note). None where the driver
    refuses (the caller reads the file into ``pinned_empty`` instead) or without a GPU.

    The map is read-only: the frames are only ever read, and a write would be a segfault rather
    than a change to the cache. Measured on the H100 host against reading the file into fresh
    memory with 16 threads and pinning that: 3.5 GB in 0.18-0.21 s against 0.34-0.42 s."""
    import torch
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape))
    if nbytes == 0 or not torch.cuda.is_available():
        return None
    with open(path, "rb") as f:
        region = mmap.mmap(f.fileno(), nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    _advise(region, _MADV_POPULATE_READ)
    arr = np.frombuffer(region, np.uint8).reshape(shape)
    ptr = arr.ctypes.data
    try:
        _register(ptr, nbytes, read_only=True)
    except RuntimeError:
        arr = None  # the array holds the map's buffer: released so that the map closes
        region.close()
        return None
    weakref.finalize(arr, _unregister, ptr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about non-writable arrays
        return torch.from_numpy(arr)


def file_pages(path, shape):
    """The first ``prod(shape)`` bytes of the file at ``path`` as a uint8 CPU tensor over its own pages:
    a copy-on-write map (a stray write changes this process's copy, never the file) populated in one
    call (MADV_POPULATE_READ points every page at the page cache, no copy-on-write break). None where
    that cannot be had (a kernel without MADV_POPULATE_READ): the caller reads into fresh memory.
    Not pinned for the GPU (see the module's note): for data the host reads, e.g. the compressed tier
    in RAM, whose sampled frames are staged per batch.

    Measured on the 2-core CI-like machine (2 GB file in the page cache): 19-21 GB/s to map and
    populate, against 0.4 GB/s to populate fresh anonymous memory and 5.8 GB/s to read into it."""
    import torch
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape))
    if nbytes == 0:
        return None
    with open(path, "rb") as f:
        region = mmap.mmap(f.fileno(), nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        region.madvise(_MADV_POPULATE_READ)
    except (OSError, AttributeError, ValueError):
        region.close()
        return None
    return torch.from_numpy(np.frombuffer(region, np.uint8).reshape(shape))  # the array keeps the map alive


def pinned_bytes(a: np.ndarray) -> np.ndarray:
    """``a`` (host bytes the GPU reads: a compressed tier's bitstreams) in pinned memory: itself when it is
    pinned already (a cache file's pages pinned in place), else a pinned copy. nvJPEG copies the sampled
    bitstreams to the device: from pinned memory its batched decode of 256 atlases took 9.8 ms against
    11.0 ms from pageable memory (H100, docs/perf-notes.md)."""
    import torch
    if not torch.cuda.is_available() or not a.size:
        return a
    torch.cuda.init()   # is_pinned() says False for registered memory until torch's CUDA state exists
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about non-writable arrays (a read-only map)
        t = torch.from_numpy(a)
    return a if t.is_pinned() else pin(t).numpy()


def pin(t):
    """``t`` (a CPU tensor) copied into exact-size pinned memory."""
    out = pinned_empty(tuple(t.shape), t.numpy().dtype)
    out.copy_(t)
    return out
