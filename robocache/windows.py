"""Windows: what one output key of a batch holds, and how a batch computes it.

A :class:`Window` names a stream (or several, fused on the feature axis), target times relative to
the sample's anchor, a resample mode and per-key transforms (normalization, ``max_dim`` padding,
image layout/size, voxel grids). ``_plan`` resolves a Window against a Dataset once (every constant
it needs on the device); ``_run_plan`` computes the key for a batch as launches on the current stream:
one ragged resample or fuse, then tensor ops, no Python loop over samples.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ._util import torch as _torch
from .dataset import Dataset
from .stream import MODES

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

    @property
    def names(self) -> list[str]:
        return [self.streams] if isinstance(self.streams, str) else list(self.streams)


# --------------------------------------------------------------------------------------------
# one window, resolved against a Dataset: every constant it needs is on the device


@dataclass
class _Plan:
    key: str
    names: list[str]
    modes: list[str]
    offsets: Any                 # [T] float64 on the device
    tolerance: float
    image: bool
    center: Any = None           # [F] float32, normalization
    scale: Any = None
    clip: bool = False
    pad: int = 0                 # features to add for max_dim
    dim_mask: Any = None         # [max_dim] bool
    layout: str = "BTHWC"
    resize: tuple[int, int] | None = None
    dtype: Any = None
    zero_pad: bool = False
    fused: dict = field(default_factory=dict)
    voxel: dict | None = None    # voxelize kwargs; point clouds only
    cloud: tuple = ()            # (frame_offsets [M+1], frames per episode [E], max points per frame)
    host: tuple = ()             # host-staged frames on a GPU (disk, compressed): (times, offsets, target offsets) as host numpy


def _plan(key: str, w: Window, ds: Dataset) -> _Plan:
    torch = _torch()
    if isinstance(w, str):
        w = Window(w)
    if not isinstance(w, Window):
        raise TypeError(f"windows[{key!r}]: expected a robocache.Window or a stream name, got {type(w).__name__}")
    names = w.names
    if not names:
        raise ValueError(f"windows[{key!r}]: no stream named")
    for n in names:
        if n not in ds.streams:
            raise KeyError(f"windows[{key!r}]: unknown stream {n!r}; the dataset has {sorted(ds.streams)}")
    streams = [ds.streams[n] for n in names]
    cloud = any(s.kind == "pointcloud" for s in streams)
    if cloud and len(names) > 1:
        raise ValueError(f"windows[{key!r}]: point-cloud streams cannot be fused with others")
    if cloud != (w.voxel is not None):
        raise ValueError(f"windows[{key!r}]: " + (f"point-cloud stream {names[0]!r} needs voxel=dict(grid=..., "
                         "voxel_size=..., origin=...)" if cloud else "voxel is for point-cloud streams"))
    if w.pad not in PADS:
        raise ValueError(f"windows[{key!r}]: pad {w.pad!r} is not one of {PADS}")
    image = any(s.frames is not None for s in streams)     # frames [H, W, C] in frame storage
    if image and len(names) > 1:
        raise ValueError(f"windows[{key!r}]: image streams cannot be fused with others")
    if len({s.dtype for s in streams}) > 1:
        got = ", ".join(f"{s.name}: {s.dtype}" for s in streams)
        raise TypeError(f"windows[{key!r}]: fused streams must share one dtype ({got}); cast them in the dataset")
    if len(names) > 16:
        raise ValueError(f"windows[{key!r}]: at most 16 streams per key (robocache.fuse), got {len(names)}")

    if w.offsets is not None and w.indices is not None:
        raise ValueError(f"windows[{key!r}]: give offsets (seconds) or indices (steps), not both")
    if w.indices is not None:
        idx = _steps(key, "indices", w.indices)
        rate = w.rate if w.rate is not None else (streams[0].nominal_rate or streams[0].rate)
        if not rate or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"windows[{key!r}]: indices need a positive rate (Hz), got {rate!r}")
        offs = idx / float(rate)
        default_mode = "nearest"
    else:
        offs = np.zeros(1) if w.offsets is None else _steps(key, "offsets", w.offsets)
        default_mode = None

    if isinstance(w.mode, Mapping):
        unknown = set(w.mode) - set(names)
        if unknown:
            raise ValueError(f"windows[{key!r}]: mode names streams not in this window: {sorted(unknown)}")
        modes = [w.mode.get(n) or default_mode or s.mode for n, s in zip(names, streams)]
    else:
        modes = [w.mode or default_mode or s.mode for s in streams]
    for m in modes:
        if m not in MODES:
            raise ValueError(f"windows[{key!r}]: mode {m!r} is not one of {MODES}")
    if image and modes[0] not in ("nearest", "previous", "next"):
        raise ValueError(f"windows[{key!r}]: image streams pick a frame: mode nearest/previous/next, got {modes[0]!r}")

    if (w.layout is not None or w.resize is not None) and not image:
        raise ValueError(f"windows[{key!r}]: layout/resize are for image streams")
    layout = w.layout or "BTHWC"
    if layout not in LAYOUTS:
        raise ValueError(f"windows[{key!r}]: layout {layout!r} is not one of {LAYOUTS}")
    resize = _resize(key, w.resize)
    dtype = _dtype(torch, key, w.dtype)
    # a float result in [-1, 1] or [0, 1] cast to integers is all zeros (and +-1): never what was meant
    scaled = (f"normalize={w.normalize!r}" if w.normalize is not None else
              "layout='BTCHW'" if layout == "BTCHW" else None)
    if scaled and dtype is not None and not dtype.is_floating_point:
        raise ValueError(f"windows[{key!r}]: dtype {dtype} with {scaled}: the scaled values are floats in [-1, 1] "
                         f"or [0, 1] and would truncate to integers (mostly 0); give a floating dtype (float32, "
                         f"bfloat16, ...) or leave dtype out")

    p = _Plan(key, names, modes, torch.as_tensor(offs, dtype=torch.float64, device=ds.device), float(w.tolerance),
              image, layout=layout, resize=resize, dtype=dtype, zero_pad=w.pad == "zero")
    if cloud:
        if w.normalize is not None or w.max_dim is not None:
            raise ValueError(f"windows[{key!r}]: normalize/max_dim are not for point clouds (voxel grids)")
        _plan_cloud(key, p, w.voxel, streams[0])
        return p

    F = sum(math.prod(s.shape) for s in streams)
    if w.normalize is not None:
        if w.normalize not in NORMALIZATIONS:
            raise ValueError(f"windows[{key!r}]: normalize {w.normalize!r} is not one of {NORMALIZATIONS}")
        if image:
            raise ValueError(f"windows[{key!r}]: images are scaled by layout='BTCHW', not normalize")
        st = [s.stats for s in streams]
        if any(not x for x in st):
            raise ValueError(f"windows[{key!r}]: text streams have no statistics to normalize with")
        cat = lambda k: torch.cat([x[k].reshape(-1) for x in st])
        if w.normalize == "mean_std":
            center, width = cat("mean"), cat("std")
        else:
            lo, hi = (cat("min"), cat("max")) if w.normalize == "min_max" else (cat("q01"), cat("q99"))
            center, width = (hi + lo) / 2, (hi - lo) / 2
        ok = width > 0
        p.center = torch.where(ok, center, torch.zeros_like(center)).to(torch.float32)
        p.scale = torch.where(ok, 1.0 / torch.where(ok, width, torch.ones_like(width)),
                              torch.zeros_like(width)).to(torch.float32)
        p.clip = w.normalize == "q01_q99"
        if len(names) == 1:  # broadcast over the stream's own per-sample shape ([D], [J, 4], [])
            p.center, p.scale = p.center.reshape(streams[0].shape), p.scale.reshape(streams[0].shape)
        if p.dtype is None:
            p.dtype = torch.float32

    if w.max_dim is not None:
        if image:
            raise ValueError(f"windows[{key!r}]: max_dim is for feature vectors, not images")
        if len(names) == 1 and len(streams[0].shape) > 1:
            raise ValueError(f"windows[{key!r}]: max_dim needs one feature axis, stream shape is {streams[0].shape}")
        if w.max_dim < F:
            raise ValueError(f"windows[{key!r}]: max_dim {w.max_dim} is below the {F} features of the window")
        p.pad = int(w.max_dim) - F
        p.dim_mask = torch.arange(int(w.max_dim), device=ds.device) < F

    if len(names) > 1:
        p.fused = {n: (s.values, s.times, s.offsets) for n, s in zip(names, streams)}
    st = streams[0]
    if image and st.frames.host_staged:
        # the host stages these frames (from the file, or their bitstreams to nvJPEG), so it computes
        # which ones without reading the GPU
        p.host = (st.times.cpu().numpy(), st._offsets_host, offs)
    return p


def _plan_cloud(key: str, p: _Plan, voxel: Mapping, s) -> None:
    """Checks the voxel spec once (a voxelize call on an empty cloud raises what a batch would)
    and keeps the frame tables on the device."""
    torch = _torch()
    from ._C import voxelize
    if not isinstance(voxel, Mapping):
        raise TypeError(f"windows[{key!r}]: voxel must be a dict of robocache.voxelize arguments")
    unknown = set(voxel) - set(VOXEL_KEYS)
    if unknown:
        raise ValueError(f"windows[{key!r}]: voxel has unknown keys {sorted(unknown)}; allowed {VOXEL_KEYS}")
    for m in p.modes:
        if m not in ("nearest", "previous", "next"):
            raise ValueError(f"windows[{key!r}]: point clouds pick a frame: mode nearest/previous/next, got {m!r}")
    C = s.shape[-1] if s.shape else 0
    if C < 3:
        raise ValueError(f"windows[{key!r}]: points of {s.name!r} have {C} columns; need x, y, z first")
    spec = dict(voxel)
    dev = s.device
    probe = dict(points=torch.zeros((1, 0, 3), dtype=s.dtype, device=dev),
                 lengths=torch.zeros(1, dtype=torch.int64, device=dev))
    if spec.get("mode", "occupancy") in VOXEL_FEATURE_MODES:
        if C == 3:
            raise ValueError(f"windows[{key!r}]: voxel mode {spec['mode']!r} reduces point features, but "
                             f"{s.name!r} has only x, y, z")
        probe["features"] = torch.zeros((1, 0, C - 3), dtype=s.dtype, device=dev)
    try:
        voxelize(**probe, **spec)
    except (TypeError, ValueError) as e:
        raise type(e)(f"windows[{key!r}]: voxel: {e}") from None
    p.voxel = spec
    sizes = np.diff(s._frame_offsets_host)
    p.cloud = (s.frame_offsets, s.offsets[1:] - s.offsets[:-1], int(sizes.max()) if sizes.size else 0)


def _run_cloud(p: _Plan, ds: Dataset, episodes, new_times):
    """[B, T] frames -> [B, T, (F,) X, Y, Z] grids: each picked frame's points are gathered into a
    dense [B*T, max points, C] block with lengths (no host sync: the block size is fixed at
    construction), then one voxelize launch."""
    torch = _torch()
    from ._C import voxelize
    s = ds.streams[p.names[0]]
    frames, pad = ds.resample(p.names[0], episodes, new_times, mode=p.modes[0], return_mask=True,
                              tolerance=p.tolerance)
    frame_offsets, per_episode, nmax = p.cloud
    B, T = frames.shape
    C = s.values.shape[-1]
    if nmax == 0:                                  # no frame has a point
        pts = torch.zeros((B * T, 0, C), dtype=s.dtype, device=ds.device)
        lengths = torch.zeros(B * T, dtype=torch.int64, device=ds.device)
    else:
        start = frame_offsets[frames].reshape(B * T)
        lengths = (frame_offsets[frames + 1] - frame_offsets[frames]).reshape(B * T)
        # an episode without frames resamples to frame 0 of the storage: it gets an empty grid
        empty = (per_episode[episodes] == 0)[:, None].expand(B, T)
        drop = empty | pad if p.zero_pad else empty
        lengths = lengths.masked_fill(drop.reshape(B * T), 0)
        rows = (start[:, None] + torch.arange(nmax, device=ds.device)).clamp_(max=s.values.shape[0] - 1)
        pts = s.values[rows]                                                 # [B*T, nmax, C]
    kw = dict(p.voxel)
    if kw.get("mode", "occupancy") in VOXEL_FEATURE_MODES:
        kw["features"] = pts[..., 3:]
    grids = voxelize(pts[..., :3], lengths=lengths, check=False if ds.device.type == "cuda" else None, **kw)
    return grids.reshape((B, T) + tuple(grids.shape[1:])), pad


def _host_ids(p: _Plan, s, host):
    """Frame ids ``[B, T]`` and ``is_pad`` computed on the host (CPU resample of the frame numbers) from the
    batch's host-side episodes and anchor times: what a disk-tier stream stages, with no GPU read-back."""
    from ._C import resample
    times, offsets, offs = p.host
    ep, t = host
    ids, pad = resample(np.arange(times.shape[0], dtype=np.int64), times, t[:, None] + offs[None, :],
                        mode=p.modes[0], offsets=offsets, index=ep, return_mask=True, tolerance=p.tolerance)
    if p.zero_pad:
        ids[pad] = -1
    return ids


def _run_plan(p: _Plan, ds: Dataset, episodes, new_times, out: dict, host=None) -> None:
    """Write ``out[key]`` and ``out[key + '_is_pad']`` (and ``_dim_mask``) for one batch;
    ``new_times [B, T]`` float64 (a strided view). ``host``: the batch's ``(episodes, anchor times)`` as
    host numpy, for plans that stage frames on the host (disk tier on a GPU)."""
    torch = _torch()
    if p.voxel is not None:
        x, pad = _run_cloud(p, ds, episodes, new_times)
        out[p.key], out[p.key + "_is_pad"] = _cast(p, x), pad
        return
    if p.image:
        # frame numbers first (one tiny resample), then one gather pass over the frames wherever they live:
        # decode (YUV), resize, layout and dtype in the kernel
        s = ds.streams[p.names[0]]
        ids, pad = ds.frame_ids(p.names[0], episodes, new_times, p.modes[0], tolerance=p.tolerance)
        if p.zero_pad:
            ids = ids.masked_fill(pad, -1)
        host_ids = _host_ids(p, s, host) if p.host and host is not None else None
        out[p.key] = _cast(p, s.frames.gather(ids, layout=p.layout, size=p.resize, host_ids=host_ids))
        out[p.key + "_is_pad"] = pad
        return
    if p.fused:
        from ._C import fuse
        x, pad = fuse(p.fused, new_times, modes=p.modes, index=episodes, return_mask=True, tolerance=p.tolerance,
                      check=False if ds.device.type == "cuda" else None)
        pad = pad.any(-1)
    else:
        x, pad = ds.resample(p.names[0], episodes, new_times, mode=p.modes[0], return_mask=True,
                             tolerance=p.tolerance)
    if p.zero_pad:
        x = x.masked_fill(pad.reshape(pad.shape + (1,) * (x.dim() - 2)), 0)
    if p.scale is not None:
        x = (x.to(torch.float32) - p.center) * p.scale
        if p.clip:
            x = x.clamp_(-1.0, 1.0)
    x = _cast(p, x)
    if p.pad:
        x = torch.nn.functional.pad(x, (0, p.pad))
    out[p.key] = x
    out[p.key + "_is_pad"] = pad
    if p.dim_mask is not None:
        # a copy, not a broadcast view of the plan's mask: a caller writing into the batch's mask
        # would write into every later batch's
        out[p.key + "_dim_mask"] = p.dim_mask.expand(x.shape).clone()


def _steps(key: str, arg: str, values) -> np.ndarray:
    """A window's ``offsets`` (seconds) or ``indices`` (whole steps) as float64 ``[T]``; a scalar, text, a
    fractional index or a non-finite value is an error naming the key, the argument and the value."""
    what = "whole steps, e.g. range(16)" if arg == "indices" else "seconds, e.g. [-0.1, 0.0]"
    try:
        vals = None if isinstance(values, (str, bytes)) else list(values)
    except TypeError:       # a number, a 0-d array
        vals = None
    if vals is None:
        raise TypeError(f"windows[{key!r}]: {arg} must be a list of {what}, got {values!r}"
                        + (f" (for one step: [{values!r}])" if isinstance(values, (int, float, np.number)) else ""))
    try:
        steps = np.asarray(vals, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"windows[{key!r}]: {arg} must be a list of numbers ({what}), got "
                        f"{reprlib.repr(vals)}") from None
    if steps.ndim != 1 or steps.size == 0 or not np.isfinite(steps).all():
        raise ValueError(f"windows[{key!r}]: {arg} must be a non-empty list of finite numbers ({what}), got "
                         f"{reprlib.repr(vals)}")
    if arg == "indices" and (steps != np.round(steps)).any():
        bad = vals[int(np.flatnonzero(steps != np.round(steps))[0])]
        raise ValueError(f"windows[{key!r}]: indices are whole steps at `rate` Hz (GR00T delta_indices), got {bad!r} "
                         f"in {reprlib.repr(vals)}; give times in seconds as offsets=")
    return steps


def _resize(key: str, resize) -> tuple[int, int] | None:
    """``resize`` as ``(H, W)``, two positive ints; anything else is an error naming the key and the value."""
    if resize is None:
        return None
    pair = not isinstance(resize, (str, bytes)) and hasattr(resize, "__len__") and len(resize) == 2
    if not pair or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in resize):
        hint = f" (a square: ({resize}, {resize}))" if isinstance(resize, (int, np.integer)) else ""
        raise TypeError(f"windows[{key!r}]: resize must be (H, W), two ints of pixels, got {resize!r}{hint}")
    if min(resize) <= 0:
        raise ValueError(f"windows[{key!r}]: resize must be (H, W) > 0, got {resize!r}")
    return int(resize[0]), int(resize[1])


def _dtype(torch, key, dtype):
    """A window's ``dtype`` as a torch dtype: one, a name of one ("bfloat16", "torch.float16") or a
    NumPy dtype; else a TypeError now rather than a cryptic one at the first batch."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, str) else None
    if name is None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    got = getattr(torch, name, None) if name else None
    if not isinstance(got, torch.dtype):
        raise TypeError(f"windows[{key!r}]: dtype must be a torch dtype (or its name, e.g. 'float32'), got {dtype!r}")
    return got


def _cast(p: _Plan, x):
    return x.to(p.dtype) if p.dtype is not None and x.dtype != p.dtype else x
