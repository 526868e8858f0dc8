"""Pieces every reader shares: the result type, optional-import errors, kinds, time checks, progress bars."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


@dataclass
class Episodes:
    """What a reader read: exactly the keyword arguments of ``Dataset.from_episodes``.

    ``episodes`` is a list (one per episode) of ``{stream: (values, times)}`` with NumPy arrays,
    times float64 seconds. ``extra`` holds reader facts the constructor does not take (file paths,
    aliases, video backend), for inspection and tests.
    """

    episodes: list[dict[str, tuple[np.ndarray, np.ndarray]]]
    kinds: dict[str, str] = field(default_factory=dict)
    modes: dict[str, str] | None = None
    rates: dict[str, float] = field(default_factory=dict)
    tasks: list[list[str]] | None = None
    stats: dict[str, dict[str, np.ndarray]] | None = None
    feature_names: dict[str, list[str]] | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict:
        return {"kinds": self.kinds, "modes": self.modes or None, "rates": self.rates, "tasks": self.tasks,
                "stats": self.stats or None, "feature_names": self.feature_names or None, "source": self.source}

    def __len__(self):
        return len(self.episodes)


def infer_kind(values: np.ndarray) -> str:
    """continuous / discrete / image / text from dtype and per-sample shape.

    Images: per-sample shape (H, W, C) with C in 1, 3, 4 and H, W >= 8, uint8 or float (PushT
    stores float32 images). Integers and bools are discrete."""
    if values.dtype.kind in "USO":
        return "text"
    if values.ndim == 4 and values.shape[-1] in (1, 3, 4) and min(values.shape[1:3]) >= 8:
        return "image"
    if values.dtype.kind in "biu":
        return "discrete"
    return "continuous"


def check_times(times: np.ndarray, where: str) -> None:
    """Finite and non-decreasing, or a ReaderError naming `where` and the first bad index."""
    bad = ~np.isfinite(times)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ReaderError(f"{where}: timestamp[{i}] = {times[i]} is not finite")
    if len(times) > 1:
        down = np.flatnonzero(np.diff(times) < 0)
        if len(down):
            i = int(down[0]) + 1
            raise ReaderError(f"{where}: timestamps are not sorted: timestamp[{i}] = {times[i]!r} < "
                              f"timestamp[{i - 1}] = {times[i - 1]!r}")


def step_times(n: int, rate: float) -> np.ndarray:
    """i / rate for i in [0, n), float64 seconds."""
    if not rate > 0:
        raise ValueError(f"rate must be positive Hz, got {rate!r}")
    return np.arange(n, dtype=np.float64) / float(rate)


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


def as_path_str(path) -> str:
    return os.fspath(path)
