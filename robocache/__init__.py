"""robocache: a GPU data engine for robot-learning training.

Multi-rate sensor streams are resampled, voxelized and fused on the device that holds them, on
the caller's CUDA stream. Any DLPack array works (torch, numpy, cupy); without a GPU the same
calls run on multi-threaded C kernels.
"""
import os
import sys
import warnings

from . import _C
from .machine import driver
from ._C import CudaError, get_num_threads, resample, set_num_threads
from ._util import ReaderError
from ._C import voxelize
from ._C import fuse
from .data.dataset import Dataset, Stream  # torch is imported inside, on first use
from .loader.dataloader import DataLoader, Window, lerobot_item  # likewise
from . import viz  # matplotlib is imported when a viz function is called

__version__ = _C.__version__
__all__ = ["CPUOnlyBuildWarning", "CudaError", "DataLoader", "Dataset", "ReaderError", "Stream", "Window", "build_info",
           "cuda_available", "fuse", "get_num_threads", "lerobot_item", "resample", "set_num_threads", "viz", "voxelize"]


def build_info() -> dict:
    """Build facts: ``version``; ``cuda`` (CUDA kernels compiled in) and, when not,
    ``cpu_only_reason`` ("no-toolkit": none was found at build time, "no-gpu": a toolkit but no GPU visible and
    no explicit request, "disabled": ROBOCACHE_CUDA=0);
    ``archs`` and ``cuda_toolkit`` (the nvcc release) of the kernels; ``cuda_runtime``, the CUDA
    runtime linked in statically (12040 = 12.4); ``cuda_driver``, the CUDA version the installed
    driver supports (13000 = 13.0; 0: no driver), asked from libcuda also in CPU-only builds;
    ``nvidia_driver``, the kernel driver's release ("580.95.05", "" when none is loaded); the
    ``devices`` the runtime sees, and ``device_error`` when it could not count them."""
    info = _C._build_info()
    if not info["cuda"]:
        info["cuda_driver"] = driver.cuda_version()
    info["nvidia_driver"] = driver.nvidia_release()
    return info


def cuda_available() -> bool:
    """True when robocache was built with CUDA and a CUDA device is visible."""
    info = build_info()
    return bool(info["cuda"] and info["devices"])


class CPUOnlyBuildWarning(UserWarning):
    """This robocache has no CUDA kernels, but the machine has an NVIDIA GPU it could use."""


def _gpu_left_unused() -> str:
    """What makes a CPU-only build worth a warning ("" when nothing does): an NVIDIA GPU that
    robocache cannot use. Cheap enough for every import, and it never imports torch or starts
    CUDA: a CUDA build returns at once; a CPU-only build asks torch only when the program has
    already imported it (torch.cuda.device_count() asks NVML, not the CUDA runtime, so forked
    DataLoader workers still work), and otherwise looks for the driver's GPU list in /proc."""
    if _C.WITH_CUDA or os.environ.get("ROBOCACHE_NO_CUDA_WARNING", "") not in ("", "0"):
        return ""
    if _C._build_info()["cpu_only_reason"] == "disabled":  # built CPU-only on purpose
        return ""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "version", None), "cuda", None):
        try:
            n = torch.cuda.device_count()
        except Exception:  # a half-imported or broken torch is not ours to report
            n = 0
        return f"torch sees {n} CUDA device{'s' if n != 1 else ''}" if n > 0 else ""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return ""
    gpus = driver.nvidia_gpus()
    return f"this machine has {gpus} NVIDIA GPU{'s' if gpus != 1 else ''}" if gpus else ""


def _warn_if_gpu_left_unused() -> None:
    seen = _gpu_left_unused()
    if seen:
        warnings.warn(
            f"robocache {__version__} was built without its CUDA kernels, but {seen}: every op "
            "runs on the CPU and CUDA tensors are refused (robocache.CudaError). Install a CUDA "
            "wheel of robocache (pip install robocache; no compiler needed) or rebuild with a "
            "CUDA toolkit (ROBOCACHE_CUDA_HOME=/usr/local/cuda pip install ...): see "
            "`python -m robocache info` and docs/install.md. ROBOCACHE_NO_CUDA_WARNING=1 "
            "silences this.", CPUOnlyBuildWarning, stacklevel=2)


_warn_if_gpu_left_unused()
