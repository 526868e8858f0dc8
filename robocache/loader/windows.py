"""Windows: what one output key of a batch holds, and how a batch computes it.

A :class:`Window` names a stream (or several, fused on the feature axis), target times relative to
the sample's anchor, a resample mode and per-key transforms (normalization, ``max_dim`` padding,
image layout/size, voxel grids). Every check that needs no dataset runs when the Window is made (and
again when a loader plans it, in case a field was changed since); plans.py resolves a Window against
a Dataset and runs its launches per batch.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .._util import torch as _torch
from ..data.stream import MODES

__all__ = ["Window"]

NORMALIZATIONS = ("min_max", "mean_std", "q01_q99")
LAYOUTS = ("BTHWC", "BTCHW")
PADS = ("edge", "zero")
VOXEL_KEYS = ("grid", "voxel_size", "origin", "mode", "dtype", "deterministic")
VOXEL_FEATURE_MODES = ("sum", "mean", "max")


@dataclass
class Window:
    """What one output key of a batch holds.

    Parameters
    ----------
    streams : str or sequence of str
        The stream to read, or several streams fused into one key (concatenated on the last axis
        in the given order; they must share one dtype, as for ``robocache.fuse``).
    offsets : sequence of float, optional
        Target times relative to the anchor, in seconds (LeRobot ``delta_timestamps``).
    indices : sequence of int, optional
        Whole steps relative to the anchor at ``rate`` Hz (GR00T ``delta_indices``, e.g. ``range(16)``);
        target times are ``indices / rate``. Give ``offsets`` or ``indices``, not both; neither
        means ``offsets=[0.0]`` (the value at the anchor).
    rate : float, optional
        Hz for ``indices``; default the first stream's ``nominal_rate``, else its measured rate.
    mode : str or dict, optional
        Resample mode (one for all streams, or ``{stream: mode}``). Default: each stream's own
        mode for ``offsets``, ``"nearest"`` for ``indices`` (a step index picks a frame).
    normalize : {"min_max", "mean_std", "q01_q99"}, optional
        From the dataset statistics (``stream.stats``), per feature, output float32:
        ``min_max``: ``2 (x - min) / (max - min) - 1``; ``mean_std``: ``(x - mean) / std``;
        ``q01_q99``: ``2 (x - q01) / (q99 - q01) - 1`` clipped to [-1, 1]. A feature whose
        range (or std) is 0 gives 0.
    max_dim : int, optional
        Zero-pad the last axis to ``max_dim`` (GR00T ``max_state_dim``/``max_action_dim``); the
        batch then also holds ``{key}_dim_mask`` ``[B, T, max_dim]`` bool, True on real features.
    layout : {"BTHWC", "BTCHW"}, optional
        Image streams only: ``BTHWC`` keeps the stored dtype (uint8); ``BTCHW`` gives float32 in
        [0, 1] (uint8 / 255), channels-last in memory (each frame strided as
        ``torch.channels_last``; ``.contiguous()`` gives NCHW memory). Default ``BTHWC``.
    resize : (int, int), optional
        Image streams only: ``(H, W)`` after bilinear resizing (``torch.nn.functional.interpolate``,
        antialias off); uint8 output is rounded back to uint8.
    dtype : torch.dtype or str, optional
        Cast the values to this dtype last (default: the stored dtype; float32 when normalized). A
        name (``"bfloat16"``) or a NumPy dtype is taken too. With ``normalize`` or ``layout="BTCHW"`` it
        must be a floating dtype (the scaled values would truncate to integers: an error).
    pad : {"edge", "zero"}
        What padded steps (``{key}_is_pad`` True) hold: ``"edge"`` (default) the episode's
        first/last value (resample's rule; GR00T's rule for absolute keys, LeRobot's clamped
        index), ``"zero"`` zeros in the stored units, before normalization (GR00T's rule for
        relative keys, e.g. delta actions). Point clouds: ``"zero"`` gives empty grids.
    voxel : dict, optional
        Point-cloud streams only (required there): the ``robocache.voxelize`` arguments
        ``grid``, ``voxel_size``, ``origin`` and optionally ``mode`` (default ``"occupancy"``),
        ``dtype``, ``deterministic``. Each target step picks a frame (``mode`` nearest by
        default, or previous/next) and the frame's points become one grid: the key is
        ``[B, T, X, Y, Z]`` (occupancy, count) or ``[B, T, F, X, Y, Z]`` (sum/mean/max over the
        point columns after x, y, z).
    augment : robocache.augment.Augment or torchvision v2 Compose, optional
        Image streams only: per-sample random transforms (crop, resize, rotation/affine, flip, colour
        jitter, sharpness, normalization) applied inside the frame gather, with
        ``torchvision.transforms.v2.functional``'s semantics; parameters drawn on the device per (seed,
        epoch, sample, camera); the window's T frames share their sample's. A torchvision ``Compose`` is
        converted (``Augment.from_torchvision``). The output size is the augment's (``resize`` is then an
        error); ``BTCHW`` gives float32 (in [0, 1], or normalized), ``BTHWC`` uint8.
    tolerance : float
        Seconds a target may lie outside a stream's span before it counts as padding.
    """

    streams: str | Sequence[str]
    offsets: Sequence[float] | None = None
    indices: Sequence[int] | None = None
    rate: float | None = None
    mode: str | Mapping[str, str] | None = None
    normalize: str | None = None
    max_dim: int | None = None
    layout: str | None = None
    resize: tuple[int, int] | None = None
    dtype: Any = None
    pad: str = "edge"
    voxel: Mapping[str, Any] | None = None
    tolerance: float = 1e-4
    augment: Any = None

    def __post_init__(self) -> None:
        check(self)

    @property
    def names(self) -> list[str]:
        return [self.streams] if isinstance(self.streams, str) else list(self.streams)


def check_windows(windows: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A loader's ``windows`` argument, checked to be a non-empty dict; the error says what to give instead."""
    example = "windows={'state': robocache.Window('observation.state')}"
    if windows is not None and not isinstance(windows, Mapping):
        raise TypeError(f"windows: expected a dict {{output key: Window or stream name}}, got "
                        f"{type(windows).__name__} {reprlib.repr(windows)}; e.g. {example}")
    if not windows:
        raise ValueError(f"windows: give at least one output key, e.g. {example}; or LeRobot's batches (every "
                         "feature, as LeRobotDataset's items collated) with delta_timestamps={'action': "
                         "[0.0, 0.1, ...]} (an empty dict is fine: delta_timestamps={})")
    return windows


def check(w: Window) -> None:
    """The checks of a Window that need no dataset; each error names the Window and the argument."""
    where = f"Window({w.streams!r})"
    names = w.names
    if not names:
        raise ValueError(f"{where}: no stream named")
    if len(names) > 16:
        raise ValueError(f"{where}: at most 16 streams per key (robocache.fuse), got {len(names)}")
    if w.pad not in PADS:
        raise ValueError(f"{where}: pad {w.pad!r} is not one of {PADS}")
    if w.offsets is not None and w.indices is not None:
        raise ValueError(f"{where}: give offsets (seconds) or indices (steps), not both")
    target_steps(w)
    if w.indices is not None and w.rate is not None and not (math.isfinite(w.rate) and w.rate > 0):
        raise ValueError(f"{where}: indices need a positive rate (Hz), got {w.rate!r}")
    _check_modes(where, w)
    layout = w.layout or "BTHWC"
    if layout not in LAYOUTS:
        raise ValueError(f"{where}: layout {layout!r} is not one of {LAYOUTS}")
    target_size(w)
    dtype = torch_dtype(w)
    if w.normalize is not None and w.normalize not in NORMALIZATIONS:
        raise ValueError(f"{where}: normalize {w.normalize!r} is not one of {NORMALIZATIONS}")
    # a float result in [-1, 1] or [0, 1] cast to integers is all zeros (and +-1): never what was meant
    scaled = (f"normalize={w.normalize!r}" if w.normalize is not None else
              "layout='BTCHW'" if layout == "BTCHW" else None)
    if scaled and dtype is not None and not dtype.is_floating_point:
        raise ValueError(f"{where}: dtype {dtype} with {scaled}: the scaled values are floats in [-1, 1] "
                         f"or [0, 1] and would truncate to integers (mostly 0); give a floating dtype (float32, "
                         f"bfloat16, ...) or leave dtype out")
    if w.voxel is not None:
        _check_voxel(where, w.voxel)
    if w.augment is not None:
        _check_augment(where, w)


def _check_augment(where: str, w: Window) -> None:
    from ..augment import Augment
    if not isinstance(w.augment, Augment):
        try:
            w.augment = Augment.from_torchvision(w.augment)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{where}: augment: {e}") from None
    if w.resize is not None:
        raise ValueError(f"{where}: resize with augment: the augment sets the output size (put a Resize in it)")
    if w.normalize is not None:
        raise ValueError(f"{where}: normalize with augment: images are normalized by the augment's Normalize")


def _check_modes(where: str, w: Window) -> None:
    modes = list(w.mode.values()) if isinstance(w.mode, Mapping) else [w.mode]
    if isinstance(w.mode, Mapping):
        unknown = set(w.mode) - set(w.names)
        if unknown:
            raise ValueError(f"{where}: mode names streams not in this window: {sorted(unknown)}")
    for m in modes:
        if m is not None and m not in MODES:
            raise ValueError(f"{where}: mode {m!r} is not one of {MODES}")


def _check_voxel(where: str, voxel) -> None:
    if not isinstance(voxel, Mapping):
        raise TypeError(f"{where}: voxel must be a dict of robocache.voxelize arguments")
    unknown = set(voxel) - set(VOXEL_KEYS)
    if unknown:
        raise ValueError(f"{where}: voxel has unknown keys {sorted(unknown)}; allowed {VOXEL_KEYS}")


def target_steps(w: Window) -> np.ndarray:
    """The window's ``offsets`` (seconds) or ``indices`` (whole steps) as float64 ``[T]`` (``[0.0]``
    when neither is given)."""
    if w.indices is not None:
        return _steps(f"Window({w.streams!r})", "indices", w.indices)
    return np.zeros(1) if w.offsets is None else _steps(f"Window({w.streams!r})", "offsets", w.offsets)


def _steps(where: str, arg: str, values) -> np.ndarray:
    """A window's ``offsets`` (seconds) or ``indices`` (whole steps) as float64 ``[T]``; a scalar, text, a
    fractional index or a non-finite value is an error naming the key, the argument and the value."""
    what = "whole steps, e.g. range(16)" if arg == "indices" else "seconds, e.g. [-0.1, 0.0]"
    try:
        vals = None if isinstance(values, (str, bytes)) else list(values)
    except TypeError:       # a number, a 0-d array
        vals = None
    if vals is None:
        raise TypeError(f"{where}: {arg} must be a list of {what}, got {values!r}"
                        + (f" (for one step: [{values!r}])" if isinstance(values, (int, float, np.number)) else ""))
    try:
        steps = np.asarray(vals, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {arg} must be a list of numbers ({what}), got "
                        f"{reprlib.repr(vals)}") from None
    if steps.ndim != 1 or steps.size == 0 or not np.isfinite(steps).all():
        raise ValueError(f"{where}: {arg} must be a non-empty list of finite numbers ({what}), got "
                         f"{reprlib.repr(vals)}")
    if arg == "indices" and (steps != np.round(steps)).any():
        bad = vals[int(np.flatnonzero(steps != np.round(steps))[0])]
        raise ValueError(f"{where}: indices are whole steps at `rate` Hz (GR00T delta_indices), got {bad!r} "
                         f"in {reprlib.repr(vals)}; give times in seconds as offsets=")
    return steps


def target_size(w: Window) -> tuple[int, int] | None:
    """``w.resize`` as ``(H, W)``, two positive ints; anything else is an error naming the Window and the value."""
    where, resize = f"Window({w.streams!r})", w.resize
    if resize is None:
        return None
    pair = not isinstance(resize, (str, bytes)) and hasattr(resize, "__len__") and len(resize) == 2
    if not pair or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in resize):
        hint = f" (a square: ({resize}, {resize}))" if isinstance(resize, (int, np.integer)) else ""
        raise TypeError(f"{where}: resize must be (H, W), two ints of pixels, got {resize!r}{hint}")
    if min(resize) <= 0:
        raise ValueError(f"{where}: resize must be (H, W) > 0, got {resize!r}")
    return int(resize[0]), int(resize[1])


def torch_dtype(w: Window):
    """A window's ``dtype`` as a torch dtype: one, a name of one ("bfloat16", "torch.float16") or a
    NumPy dtype; else a TypeError now rather than a cryptic one at the first batch."""
    if w.dtype is None:
        return None
    torch, where, dtype = _torch(), f"Window({w.streams!r})", w.dtype
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, str) else None
    if name is None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    got = getattr(torch, name, None) if name else None
    if not isinstance(got, torch.dtype):
        raise TypeError(f"{where}: dtype must be a torch dtype (or its name, e.g. 'float32'), got {dtype!r}")
    return got
