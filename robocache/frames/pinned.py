"""Pinned host memory of exactly the size asked for, for the host tier.

torch's ``pin_memory=True`` goes through its caching host allocator, which rounds every block up to
a power of two: 75 GB of frames would ask the driver for 128 GB and fail on a 128 GB machine (measured
on the H100 host: ``CUDA error: out of memory`` for a 75 GB pinned tensor with 122 GB free). Here the
pages come from an anonymous map (populated in one call) and are page-locked and mapped for the GPU with
``cudaHostRegister``; the registration is undone when the last tensor over them is gone.
"""

from __future__ import annotations

import mmap
import weakref

import numpy as np

# cudaHostRegisterPortable | cudaHostRegisterMapped: every context sees the pages, device pointer = host
# pointer under unified addressing (what the gather kernel reads)
_FLAGS = 1 | 2


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


def pin(t):
    """``t`` (a CPU tensor) copied into exact-size pinned memory."""
    out = pinned_empty(tuple(t.shape), t.numpy().dtype)
    out.copy_(t)
    return out
