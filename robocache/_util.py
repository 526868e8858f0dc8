"""Small helpers the whole package uses, written once: optional imports, the source-file error, progress
bars, the cores a process may use. Imports nothing from robocache, so any module may import it."""

from __future__ import annotations

import importlib
import os
import sys

EXTRAS = {"pyarrow": "lerobot", "av": "lerobot", "h5py": "robomimic", "zarr": "zarr", "numcodecs": "zarr"}


class ReaderError(ValueError):
    """A source file is missing, corrupt, truncated or inconsistent. The message names the file."""


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
