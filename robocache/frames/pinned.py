"""Pinned host memory of exactly the size asked for, for the host tier.

torch's ``pin_memory=True`` goes through its caching host allocator, which rounds every block up to
a power of two: 75 GB of frames would ask the driver for 128 GB and fail on a 128 GB machine (measured
on the H100 host: ``CUDA error: out of memory`` for a 75 GB pinned tensor with 122 GB free). Here the
pages come from an anonymous map (populated in one call) and are page-locked and mapped for the GPU with
``cudaHostRegister``; the registration is undone when the last tensor over them is gone.

A host tier loaded from the cache needs no fresh memory at all: ``file_pages`` maps the cache file
and pins its page-cache pages in place (one copy of the frames in RAM, no zeroing, no copy).
"""

from __future__ import annotations

import mmap
import weakref

import numpy as np

# cudaHostRegisterPortable | cudaHostRegisterMapped: every context sees the pages, device pointer = host
# pointer under unified addressing (what the gather kernel reads)
_FLAGS = 1 | 2
# madvise: map every page of the range readable in one call (Linux 5.14); on a private file map it
# points at the page cache, no copy-on-write break (MAP_POPULATE would copy every page of a writable one)
_MADV_POPULATE_READ = 22


def _unregister(ptr: int) -> None:
    import torch
    torch.cuda.cudart().cudaHostUnregister(ptr)


def pinned_empty(shape, dtype=np.uint8):
    """An uninitialised CPU tensor of ``shape``, pinned for the GPU (plain memory without a GPU)."""
    import torch
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0 or not torch.cuda.is_available():
        return torch.from_numpy(np.empty(shape, dtype))
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
    arr = np.frombuffer(region, dtype).reshape(shape)               # the array keeps the map alive
    ptr = arr.ctypes.data
    err = torch.cuda.cudart().cudaHostRegister(ptr, nbytes, _FLAGS)
    if int(getattr(err, "value", err)) != 0:
        raise MemoryError(f"cannot pin {nbytes / 1e9:.2f} GB of host memory for the GPU (cudaHostRegister error "
                          f"{int(getattr(err, 'value', err))}); lower host_memory= or use frames='disk'")
    weakref.finalize(arr, _unregister, ptr)
    return torch.from_numpy(arr)


def file_pages(path, shape, gpu: bool):
    """The first ``prod(shape)`` bytes of the file at ``path`` as a uint8 CPU tensor over its own pages:
    a copy-on-write map (a stray write changes this process's copy, never the file) populated in one
    call, pinned in place for the GPU when ``gpu`` (registered read-only: the GPU only reads the pages,
    so the driver pins the page-cache pages instead of asking to write them, which would copy each page
    of a private map; undone when the last tensor over it is gone). None where that cannot be had (a
    kernel without MADV_POPULATE_READ, a GPU or filesystem refusing the registration): the caller reads
    the rows into fresh memory instead.

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
    arr = np.frombuffer(region, np.uint8).reshape(shape)          # the array keeps the map alive
    t = torch.from_numpy(arr)
    if gpu and torch.cuda.is_available():
        # robocache's own runtime: a refusal is cleared there, never left for torch's next launch check
        from .._C import _host_register, _host_unregister
        ptr = arr.ctypes.data
        if _host_register(ptr, nbytes, True) != 0:
            return None
        weakref.finalize(arr, _host_unregister, ptr)
    return t


def pin(t):
    """``t`` (a CPU tensor) copied into exact-size pinned memory."""
    out = pinned_empty(tuple(t.shape), t.numpy().dtype)
    out.copy_(t)
    return out
