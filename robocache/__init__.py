"""robocache: a GPU data engine for robot-learning training.

Multi-rate sensor streams are resampled, voxelized and fused on the device that holds them, on
the caller's CUDA stream. Any DLPack array works (torch, numpy, cupy); without a GPU the same
calls run on multi-threaded C kernels.
"""
from . import _C
from ._C import CudaError, get_num_threads, resample, set_num_threads
from ._C import voxelize
from ._C import fuse
from .dataset import Dataset, Stream  # torch is imported inside, on first use
from .loader import DataLoader, Window  # likewise

__version__ = _C.__version__
__all__ = ["CudaError", "DataLoader", "Dataset", "Stream", "Window", "build_info", "cuda_available", "fuse",
           "get_num_threads", "resample", "set_num_threads", "voxelize"]


def build_info() -> dict:
    """Build facts: ``version``, ``cuda`` (compiled in), ``archs``, ``cuda_runtime``,
    ``cuda_driver`` and the ``devices`` the CUDA runtime sees."""
    return _C._build_info()


def cuda_available() -> bool:
    """True when robocache was built with CUDA and a CUDA device is visible."""
    info = build_info()
    return bool(info["cuda"] and info["devices"])
