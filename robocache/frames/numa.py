"""Host memory on the NUMA node of the GPU that reads it.

A training node has two CPU sockets, each with its own memory and half of the GPUs on its PCIe root
complexes. A GPU reading pinned pages on the other socket's memory crosses the inter-socket link, which
all the ranks of that socket share: the host tier measured 18% slower per rank at 4 ranks than at 1 on
a 4-GPU H200 host, with nothing else changed (docs/perf-notes.md). Pages land where first touched, i.e.
wherever the filling thread ran; ``prefer`` asks the kernel for the GPU's node before the pages exist.

The node comes from sysfs (the GPU's PCI address), the policy from ``mbind(MPOL_PREFERRED)``: preferred,
not bound, so a full node spills to the other one instead of failing. ``ROBOCACHE_PIN_NUMA=0`` turns it
off (to measure the difference). A machine with one node, no GPU, or no sysfs is left alone.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .._util import torch as _torch

_SYS_MBIND = {"x86_64": 237, "aarch64": 235}
_MPOL_PREFERRED = 1
NODES = Path("/sys/devices/system/node")
PCI = Path("/sys/bus/pci/devices")


def nodes() -> int:
    """How many NUMA nodes this machine has (1 when sysfs does not say)."""
    try:
        return max(1, sum(1 for p in NODES.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()))
    except OSError:
        return 1


def gpu_node(index: int) -> int | None:
    """The NUMA node of CUDA device ``index`` (its PCI device's ``numa_node``), or None when unknown."""
    torch = _torch()
    p = torch.cuda.get_device_properties(index)
    address = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    try:
        node = int((PCI / address / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def current_gpu_node() -> int | None:
    """The node of the current CUDA device when placing memory matters (several nodes, a GPU, not turned
    off), else None."""
    torch = _torch()
    if os.environ.get("ROBOCACHE_PIN_NUMA", "1") == "0" or not torch.cuda.is_available() or nodes() < 2:
        return None
    return gpu_node(torch.cuda.current_device())


def prefer(address: int, nbytes: int, node: int) -> bool:
    """Ask that the not-yet-touched pages of ``[address, address + nbytes)`` come from ``node``
    (page-aligned address). False when the kernel refuses (no NUMA support, seccomp): a hint only."""
    number = _SYS_MBIND.get(os.uname().machine)
    if number is None or nbytes <= 0 or not 0 <= node < 8 * ctypes.sizeof(ctypes.c_ulong):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    maxnode = ctypes.c_ulong(8 * ctypes.sizeof(ctypes.c_ulong) + 1)   # the kernel counts one past the last bit
    return libc.syscall(ctypes.c_long(number), ctypes.c_void_p(address), ctypes.c_ulong(nbytes),
                        ctypes.c_int(_MPOL_PREFERRED), ctypes.byref(mask), maxnode, ctypes.c_uint(0)) == 0
