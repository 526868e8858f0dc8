"""Small helpers the whole package uses, written once: optional imports (torch included), the source-file
error, progress bars, the cores a process may use, devices ("cuda" -> the current GPU), and how sizes, times
and rates read in reprs. Imports nothing from robocache but the compiled extension (a leaf, and only inside
functions), so any module may import it."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

EXTRAS = {"pyarrow": "lerobot", "av": "lerobot", "h5py": "robomimic", "zarr": "zarr", "numcodecs": "zarr"}


class ReaderError(ValueError):
    """A source file is missing, corrupt, truncated or inconsistent. The message names the file."""

    __module__ = "robocache"    # a traceback names it as it is imported: robocache.ReaderError


def install_hint(extra: str) -> str:
    """The commands that install an extra, from a package index and from a checkout (robocache is
    not on PyPI yet, so the second is the one that works for most users)."""
    return f'pip install "robocache[{extra}]", or from a checkout of robocache: pip install -e ".[{extra}]"'


def require(module: str, extra: str | None = None, what: str = "this reader"):
    """Import an optional dependency or raise ImportError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = extra or EXTRAS.get(module, module)
        top = module.split(".")[0]
        pip_name = {"PIL": "pillow", "cv2": "opencv-python"}.get(top, top)
        raise ImportError(f"{what} needs the optional dependency '{module}': {install_hint(extra)} "
                          f"(or only it: pip install {pip_name})") from e


def progress_enabled(enable: bool | None) -> bool:
    """A progress bar's switch: as given, else on when stderr is a TTY and ROBOCACHE_NO_PROGRESS is unset."""
    if enable is None:
        return sys.stderr.isatty() and not os.environ.get("ROBOCACHE_NO_PROGRESS")
    return bool(enable)


def progress(iterable, total: int | None = None, desc: str = "", enable: bool | None = None):
    """tqdm when installed and stderr is a TTY (or enable=True), else the iterable itself."""
    if not progress_enabled(enable):
        return iterable
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]  # no stubs; optional
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False)


def progress_bar(total: int, desc: str, enable: bool | None, unit: str = "frame"):
    """A tqdm bar counting `unit`s (updated by hand), or None when off or tqdm is missing."""
    if not progress_enabled(enable):
        return None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]  # no stubs; optional
    except ImportError:
        return None
    return tqdm(total=total, desc=desc or "decoding", unit=unit, unit_scale=False, leave=False, smoothing=0.1)


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def torch() -> Any:
    """The torch module, imported on first use (``import robocache`` needs numpy only), or ImportError saying
    how to install it."""
    try:
        import torch as module
    except ModuleNotFoundError as e:
        raise ImportError("robocache.Dataset needs PyTorch: pip install torch") from e
    return module


def default_device():
    """The device a Dataset lands on when none is given: the current GPU when torch sees one and robocache was
    built with its CUDA kernels, else the CPU."""
    t = torch()
    if t.cuda.is_available():
        from ._C import _build_info  # the extension's build facts (robocache.build_info adds driver probing)
        if _build_info()["cuda"]:
            return t.device("cuda")
    return t.device("cpu")


def resolve_device(device, arg: str = "device"):
    """``device`` as a torch.device (None: ``default_device()``; a bare "cuda": the current GPU). A GPU this
    process cannot use is a ValueError naming ``arg``, the value and why (torch's own is an AssertionError
    deep in a copy, "Torch not compiled with CUDA enabled")."""
    t = torch()
    if device is None:
        return default_device()
    try:
        dev = t.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{arg}={device!r} is not a device ({e}); expected 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type != "cuda":
        return dev
    from ._C import _build_info  # as in default_device
    info = _build_info()
    if not info["cuda"]:
        raise ValueError(f"{arg}={device!r}, but this robocache was built without its CUDA kernels "
                         f"(cpu_only_reason {info['cpu_only_reason']!r}: `python -m robocache info`); use "
                         f"{arg}='cpu', or reinstall with a CUDA toolkit (docs/install.md)")
    if not t.cuda.is_available():
        why = "a CPU-only build" if t.version.cuda is None else "no CUDA device visible"
        raise ValueError(f"{arg}={device!r}, but torch {t.__version__} has no GPU ({why}); use {arg}='cpu'")
    if dev.index is None:
        return current_gpu()
    if dev.index >= t.cuda.device_count():
        raise ValueError(f"{arg}={device!r}, but torch sees {t.cuda.device_count()} CUDA device(s)")
    return dev


def current_gpu():
    """``torch.device("cuda", n)`` of the current GPU: a bare "cuda" pinned down, so two tensors made under
    different current devices never compare equal by accident."""
    t = torch()
    return t.device("cuda", t.cuda.current_device())


# how sizes, times and rates read in reprs and reports


def fmt_bytes(n: float) -> str:
    """'512 B', '1.5 MB' (powers of 1000, as disk and memory tools print them)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def fmt_seconds(s: float) -> str:
    """'2.50 s', '1.5 min', '2.00 h'."""
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.2f} s"


def fmt_rate(r: float | None) -> str:
    """'30.0 Hz', '0.5 Hz', '-' when unknown."""
    if r is None:
        return "-"
    return f"{r:.1f} Hz" if r >= 1 else f"{r:.3g} Hz"


def dtype_name(dtype) -> str:
    """'float32', not 'torch.float32'."""
    return str(dtype).replace("torch.", "")


def plural(n: int, noun: str) -> str:
    """'1 episode', '2 episodes'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
