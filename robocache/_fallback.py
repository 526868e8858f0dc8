"""Slow-path helpers the C extension calls for arrays whose type offers no DLPack C exchange
API (numpy, cupy, ...): allocate an output in the caller's framework, make a contiguous copy,
and find the framework's current CUDA stream."""
import sys

import numpy as np


def _framework(obj) -> str:
    return type(obj).__module__.split(".")[0]


def _numpy_dtype(name: str):
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("bfloat16 numpy arrays need the ml_dtypes package") from None
        return ml_dtypes.bfloat16
    return np.dtype(name)


def empty(like, shape: tuple, dtype: str):
    """An uninitialized C-contiguous array shaped `shape` in the framework/device of `like`."""
    fw = _framework(like)  # torch never comes here: C calls like.new_empty itself
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=_numpy_dtype(dtype))
    if fw in ("jax", "jaxlib"):
        raise TypeError("jax arrays are immutable: robocache cannot write its output into one; "
                        "pass numpy/torch/cupy arrays (jax.dlpack interop is zero-copy)")
    return np.empty(shape, dtype=_numpy_dtype(dtype))


def contiguous(obj):
    """A C-contiguous, element-aligned copy made by obj's own framework (numpy for frameworks
    robocache does not know). Called for strides that do not flatten and for misaligned data."""
    fw = _framework(obj)
    if fw == "torch":
        import torch

        return obj.clone(memory_format=torch.contiguous_format)
    if fw == "cupy":
        import cupy

        return cupy.array(obj, order="C", copy=True)
    # np.ascontiguousarray would hand back a misaligned but contiguous array as it is
    return np.array(np.from_dlpack(obj), order="C", copy=True)


def current_stream(obj, device_id: int) -> int:
    """The current CUDA stream handle of obj's framework on device_id (0: legacy default)."""
    fw = _framework(obj)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(device_id):
            return cupy.cuda.get_current_stream().ptr
    if "torch" in sys.modules:
        import torch

        return torch.cuda.current_stream(device_id).cuda_stream
    return 0
