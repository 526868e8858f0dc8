"""What the machine's NVIDIA driver says, asked without starting CUDA: the CUDA version libcuda
supports (through ctypes), and the kernel module's release and GPUs (/proc/driver/nvidia). No
cuInit, no context, no torch: cheap enough for every import and safe before a fork, in CPU-only
builds too (robocache.build_info, the CPU-only build's warning)."""
from __future__ import annotations

import os

PROC = "/proc/driver/nvidia"


def cuda_version(library: str = "libcuda.so.1") -> int:
    """cuDriverGetVersion: the CUDA version the driver supports (13000 = 13.0); 0 when there is
    no driver."""
    import ctypes

    try:
        lib = ctypes.CDLL(library)
        version = ctypes.c_int(0)
        return version.value if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 else 0
    except (OSError, AttributeError):
        return 0


def nvidia_release(proc: str = PROC) -> str:
    """The kernel driver's release ("580.95.05"); "" when none is loaded."""
    try:
        with open(os.path.join(proc, "version")) as f:
            head = f.readline()  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ..."
    except OSError:
        return ""
    for word in head.split():
        if word[:1].isdigit() and word.count(".") >= 1:
            return word
    return ""


def nvidia_gpus(proc: str = PROC) -> int:
    """The GPUs the kernel driver lists (all of them: CUDA_VISIBLE_DEVICES does not apply here);
    0 when none is loaded."""
    try:
        return len(os.listdir(os.path.join(proc, "gpus")))
    except OSError:
        return 0
