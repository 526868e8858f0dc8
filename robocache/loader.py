"""robocache.DataLoader: training batches made on the device that holds the Dataset.

A sample is ``(episode, anchor time)``. Anchors are the frames of one stream (one sample per
frame, as LeRobot/GR00T) or a uniform grid at ``rate`` Hz. Each output key is a
:class:`Window`: target times ``anchor + offsets`` read from one stream (one ragged
``robocache.resample`` launch over the Dataset storage for the whole batch) or several streams
concatenated on the feature axis (one ``robocache.fuse`` launch), then optional normalization,
padding to ``max_dim`` and image layout, all as tensor ops on the device: no Python loop over
samples.

Per epoch the order (a permutation of the sample table, or the ``sampler``'s indices) is drawn on
the host once, copied to the device once, and the per-sample episode/anchor tables are gathered
once; a batch is then a slice of those (a view) plus the window launches. On CUDA batch k+1 is
enqueued on a side stream before batch k is handed over (events), and nothing reads the device
back: no host sync per batch. Full batches are replays of a captured CUDA graph into static
output slots the caller's batches alias (batch_graph.py); the others are made eagerly in fresh
memory (``record_stream``). See docs/loader.md.
"""

from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .dataset import MODES, Dataset, _torch

__all__ = ["DataLoader", "Window"]

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
        Steps relative to the anchor at ``rate`` Hz (GR00T ``delta_indices``, e.g. ``range(16)``);
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
    dtype : torch.dtype, optional
        Cast the values to this dtype last (default: the stored dtype; float32 when normalized).
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
    image = any(s.kind == "image" for s in streams)
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
        idx = np.asarray(list(w.indices), dtype=np.float64)
        rate = w.rate if w.rate is not None else (streams[0].nominal_rate or streams[0].rate)
        if not rate or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"windows[{key!r}]: indices need a positive rate (Hz), got {rate!r}")
        offs = idx / float(rate)
        default_mode = "nearest"
    else:
        offs = np.asarray([0.0] if w.offsets is None else list(w.offsets), dtype=np.float64)
        default_mode = None
    if offs.ndim != 1 or offs.size == 0 or not np.isfinite(offs).all():
        raise ValueError(f"windows[{key!r}]: offsets/indices must be a non-empty list of finite numbers")

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

    if (w.layout is not None or w.resize is not None) and not image:
        raise ValueError(f"windows[{key!r}]: layout/resize are for image streams")
    layout = w.layout or "BTHWC"
    if layout not in LAYOUTS:
        raise ValueError(f"windows[{key!r}]: layout {layout!r} is not one of {LAYOUTS}")
    if w.resize is not None and (len(w.resize) != 2 or min(w.resize) <= 0):
        raise ValueError(f"windows[{key!r}]: resize must be (H, W) > 0, got {w.resize!r}")

    p = _Plan(key, names, modes, torch.as_tensor(offs, dtype=torch.float64, device=ds.device), float(w.tolerance),
              image, layout=layout, resize=tuple(w.resize) if w.resize is not None else None, dtype=w.dtype,
              zero_pad=w.pad == "zero")
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


def _run_plan(p: _Plan, ds: Dataset, episodes, new_times, out: dict) -> None:
    """Write ``out[key]`` and ``out[key + '_is_pad']`` (and ``_dim_mask``) for one batch;
    ``new_times [B, T]`` float64 (a strided view)."""
    torch = _torch()
    if p.voxel is not None:
        x, pad = _run_cloud(p, ds, episodes, new_times)
        out[p.key], out[p.key + "_is_pad"] = _cast(p, x), pad
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
    if p.image:
        x = _image(p, x)
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


def _cast(p: _Plan, x):
    return x.to(p.dtype) if p.dtype is not None and x.dtype != p.dtype else x


def _image(p: _Plan, x):
    """[B,T,H,W,C] stored frames -> the window's layout and size."""
    torch = _torch()
    B, T = x.shape[:2]
    if x.dim() == 4:                                                       # [B,T,H,W] grey
        x = x[..., None]
    u8 = x.dtype == torch.uint8
    if p.resize is not None:
        H, W, C = x.shape[2:]
        y = x.reshape(B * T, H, W, C).permute(0, 3, 1, 2).to(torch.float32)
        y = torch.nn.functional.interpolate(y, size=p.resize, mode="bilinear", align_corners=False, antialias=False)
        if p.layout == "BTCHW":
            y = y / 255.0 if u8 else y
            return y.reshape(B, T, C, *p.resize)
        y = y.permute(0, 2, 3, 1)
        if u8:
            y = y.round_().clamp_(0, 255).to(torch.uint8)
        return y.reshape(B, T, *p.resize, C).contiguous()
    if p.layout == "BTCHW":
        # one pass over the frames, no transposing copy: the permuted view of HWC storage is the
        # channels-last layout, which the elementwise op keeps (Conv2d's fast layout). An
        # NCHW-contiguous copy cost ~3x this (bench_loader, docs/perf-notes.md)
        y = x.permute(0, 1, 4, 2, 3)
        return torch.div(y, 255.0) if u8 else y.to(torch.float32)
    return x


# --------------------------------------------------------------------------------------------
# the loader


def _epoch_seed(seed: int, epoch: int, *more: int) -> int:
    """64-bit seed of one epoch's order, a pure function of (seed, epoch, *more)."""
    s = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1), *more]).generate_state(2, np.uint32)
    return int(s[0]) | (int(s[1] & 0x7FFFFFFF) << 32)


def _distributed(rank, world_size) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's when initialized, else (0, 1)."""
    torch = _torch()
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("rank and world_size: give both or neither (neither: torch.distributed's)")
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} / world_size {world_size}: need 0 <= rank < world_size")
    return rank, world_size


def _assign_episodes(counts: np.ndarray, world: int) -> np.ndarray:
    """Owner rank of each episode: longest episodes first, each to the rank with the fewest
    samples so far (ties: lowest rank), so ranks hold near-equal sample counts. Deterministic,
    the same on every rank."""
    owner = np.zeros(counts.size, np.int64)
    load = np.zeros(world, np.int64)
    for e in np.argsort(-counts, kind="stable"):
        r = int(np.argmin(load))
        owner[e] = r
        load[r] += counts[e]
    return owner


def _wrap(idx, n: int):
    """The first n of idx repeated end to end (DistributedSampler's padding); idx[:n] when longer."""
    torch = _torch()
    if idx.shape[0] >= n:
        return idx[:n]
    return idx.repeat(-(-n // idx.shape[0]))[:n]


def _grid(ds: Dataset, names: list[str], rate: float):
    """Uniform anchors at ``rate`` Hz: per episode the first time and the count, host numpy."""
    torch = _torch()
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate must be a positive number of Hz, got {rate!r}")
    ends = [ds.streams[n]._ends() for n in names]
    first = torch.stack([f for f, _ in ends]).nan_to_num(math.inf).amin(0).cpu().numpy()
    last = torch.stack([l for _, l in ends]).nan_to_num(-math.inf).amax(0).cpu().numpy()
    has = last >= first
    counts = np.where(has, np.floor((np.where(has, last - first, 0)) * rate + 1e-9).astype(np.int64) + 1, 0)
    return first, counts


def _episode_counts(ds: Dataset, anchor, rate, names) -> np.ndarray:
    """Samples per episode, host int64 [E] (the loader's sample table before it is built)."""
    if rate is not None:
        return _grid(ds, [n for n in names if n in ds.streams], float(rate))[1]
    name = anchor if anchor is not None else ds.anchor
    if name not in ds.streams:
        raise KeyError(f"anchor: unknown stream {name!r}; the dataset has {sorted(ds.streams)}")
    return ds.streams[name].lengths


class DataLoader:
    """Batches of windows over a :class:`robocache.Dataset`, made on the dataset's device.

    Drop-in for ``torch.utils.data.DataLoader`` in a training loop: ``for batch in loader``
    yields ``{key: tensor, key + "_is_pad": bool tensor, ...}``; ``len(loader)`` is the number of
    batches per epoch. See docs/loader.md for the handling of every torch keyword.

    Parameters
    ----------
    dataset : robocache.Dataset
    batch_size : int
    shuffle : bool
        A new permutation of all samples each epoch, a pure function of (seed, epoch).
    drop_last : bool
        Drop the last batch when it is smaller than ``batch_size``.
    seed : int
    windows : dict[str, Window or str]
        Output key -> window (a bare stream name is ``Window(name)``: the value at the anchor).
    anchor : str, optional
        Stream whose frames are the samples (default: the dataset's first stream).
    rate : float, optional
        Instead of frames, anchors on a uniform grid at ``rate`` Hz over each episode's span
        (earliest first to latest last sample of the window streams).
    sampler : iterable of int, optional
        Sample indices (into the sample table, ``0 <= i < loader.num_samples``) for each epoch,
        replacing the internal order; ``shuffle`` must then be False. ``set_epoch`` is forwarded.
    collate_fn : callable, optional
        Applied to each produced batch dict (on the consumer's stream) before it is yielded.
    generator : torch.Generator, optional
        Its next 63-bit draw at construction replaces ``seed``.
    device : optional
        Move the dataset there first (once); default the dataset's device.
    rank, world_size : int, optional
        This process's share of each epoch; default ``torch.distributed``'s rank and world size
        when it is initialized (torchrun), else 0 and 1. Each rank takes a disjoint shard of the
        epoch's permutation (every ``world_size``-th sample from ``rank``, the permutation
        wrapped to a multiple of ``world_size`` as ``DistributedSampler`` does, or cut to one
        with ``drop_last``); all ranks yield the same number of batches. Not with ``sampler``
        (a ``DistributedSampler`` shards by itself).
    shard_episodes : bool
        Instead, split the episodes between ranks (longest first, each to the rank with the
        fewest samples) and keep only this rank's on its device: ``ds.subset(mine)``, then
        ``device``. Load the dataset on the CPU and give ``device="cuda:LOCAL_RANK"`` so each GPU
        holds only its shard. Each rank permutes its own samples per (seed, epoch, rank); ranks
        with fewer samples wrap (or all cut to the smallest with ``drop_last``).
    cuda_graph : bool
        On CUDA, capture one batch's launches in CUDA graphs (at the second batch) and replay them
        for every full batch: one launch per batch whatever the number of keys, no allocation.
        Each of the ``batch_graph.SLOTS`` (4) graphs writes its own static outputs, which the
        batches handed out alias; a slot is reused only once no batch (nor a view of one) still
        references it, so kept batches are never overwritten, and when the caller holds every
        slot the batch is made eagerly. Memory: 4 batches (outputs and intermediates), kept with
        the loader. Batches are the same either way; False makes every batch with
        eager launches.
    num_workers, pin_memory, persistent_workers, prefetch_factor, worker_init_fn, timeout,
    multiprocessing_context, pin_memory_device, in_order :
        Accepted and ignored: batches are made on the device by kernels, there are no workers to
        start and nothing to pin. ``worker_init_fn`` is never called.
    """

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = True, drop_last: bool = False,
                 seed: int = 0, *, windows: Mapping[str, Window | str] | None = None, anchor: str | None = None,
                 rate: float | None = None, sampler: Iterable[int] | None = None,
                 collate_fn: Callable[[dict], Any] | None = None, generator=None, device=None,
                 num_workers: int | None = None, pin_memory: bool | None = None,
                 persistent_workers: bool | None = None, prefetch_factor: int | None = None,
                 worker_init_fn: Callable | None = None, timeout: float | None = None,
                 multiprocessing_context=None, pin_memory_device: str | None = None, in_order: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, shard_episodes: bool = False,
                 cuda_graph: bool = True):
        torch = _torch()
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset: expected a robocache.Dataset, got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not windows:
            raise ValueError("windows: give at least one output key, e.g. "
                             "windows={'state': robocache.Window('observation.state')}")
        if sampler is not None and shuffle:
            # torch raises the same: the sampler decides the order
            raise ValueError("sampler and shuffle=True are mutually exclusive; pass shuffle=False with a sampler")
        if anchor is not None and rate is not None:
            raise ValueError("anchor (a stream's frames) and rate (a uniform grid) are mutually exclusive")
        self.rank, self.world_size = _distributed(rank, world_size)
        self.shard_episodes = bool(shard_episodes)
        if sampler is not None and self.shard_episodes:
            raise ValueError("shard_episodes and sampler are mutually exclusive")
        self._per_rank = None         # shard_episodes: samples per rank per epoch
        if self.shard_episodes and self.world_size > 1:
            names = list(dict.fromkeys(n for w in windows.values()
                                       for n in ([w] if isinstance(w, str) else getattr(w, "names", []))))
            counts = _episode_counts(dataset, anchor, rate, names)
            owner = _assign_episodes(counts, self.world_size)
            held = np.bincount(owner, weights=counts, minlength=self.world_size).astype(np.int64)
            self._per_rank = int(held.min() if drop_last else held.max())
            if self._per_rank and held.min() == 0:
                raise ValueError(f"shard_episodes: {int((held == 0).sum())} of {self.world_size} ranks get no "
                                 f"samples ({len(dataset)} episodes); use shard_episodes=False")
            dataset = dataset.subset(np.flatnonzero(owner == self.rank))
        if device is not None:
            dataset = dataset.to(device)
        if generator is not None:
            seed = int(torch.randint(0, 2**63 - 1, (), generator=generator))
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.sampler = sampler
        self.collate_fn = collate_fn
        self.device = dataset.device
        self.windows = dict(windows)
        self._plans = [_plan(str(k), w, dataset) for k, w in self.windows.items()]
        self._offsets = torch.cat([p.offsets for p in self._plans])
        ends = np.cumsum([0] + [int(p.offsets.shape[0]) for p in self._plans])
        self._columns = list(zip(ends[:-1].tolist(), ends[1:].tolist()))
        self._episode, self._time = self._samples(anchor, rate)   # [N] int64, [N] float64 on the device
        self.anchor = anchor if rate is None else None
        if rate is None and anchor is None:
            self.anchor = dataset.anchor
        self.rate = rate
        # position: the next iter() starts batch `_batch` of epoch `_epoch` when `_fresh`
        # (after construction, set_epoch or load_state_dict), else the next epoch from its start
        self._epoch, self._batch, self._fresh = 0, 0, True
        # CUDA: full batches replay a captured graph (batch_graph.py); built at the second batch
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self._graph, self._tables, self._side, self._warm = None, None, None, False
        self._graph_lock = threading.Lock()

    # --- samples -------------------------------------------------------------------------

    def _samples(self, anchor, rate):
        """The sample table, built once: episode and anchor time of every sample."""
        torch = _torch()
        ds = self.dataset
        if rate is None:
            name = anchor if anchor is not None else ds.anchor
            if name not in ds.streams:
                raise KeyError(f"anchor: unknown stream {name!r}; the dataset has {sorted(ds.streams)}")
            s = ds.streams[name]
            if s.kind == "pointcloud":
                raise ValueError(f"anchor: {name!r} is a point-cloud stream; anchor on another stream or a rate")
            lengths = torch.from_numpy(s.lengths)
            ep = torch.repeat_interleave(torch.arange(len(lengths)), lengths).to(ds.device)
            return ep, s.times
        names = list(dict.fromkeys(n for p in self._plans for n in p.names))
        first, counts = _grid(ds, names, float(rate))
        ep = np.repeat(np.arange(len(counts)), counts)
        step = np.arange(ep.size) - np.repeat(np.cumsum(counts) - counts, counts)
        t = first[ep] + step / float(rate) if ep.size else np.zeros(0)
        return (torch.from_numpy(ep).to(ds.device), torch.from_numpy(np.asarray(t, np.float64)).to(ds.device))

    @property
    def num_samples(self) -> int:
        """Samples per epoch of this rank (the sampler's length when there is one)."""
        if self.sampler is not None:
            return len(self.sampler)
        n = int(self._episode.shape[0])
        if self.world_size == 1:
            return n
        if self._per_rank is not None:
            return self._per_rank
        return n // self.world_size if self.drop_last else -(-n // self.world_size)

    def __len__(self) -> int:
        n, b = self.num_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    # --- order and position --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` yields epoch ``epoch`` from its first batch."""
        self._epoch, self._batch, self._fresh = int(epoch), 0, True
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(int(epoch))

    @property
    def epoch(self) -> int:
        return self._epoch

    def state_dict(self) -> dict:
        """Where the next batch comes from: ``{"epoch", "batch", "seed", "num_samples", "batch_size"}``
        (after a finished epoch, batch 0 of the next)."""
        e, k = self._epoch, self._batch
        if not self._fresh and k >= len(self):
            e, k = e + 1, 0
        return {"epoch": e, "batch": k, "seed": self.seed, "num_samples": self.num_samples,
                "batch_size": self.batch_size, "shuffle": self.shuffle, "drop_last": self.drop_last,
                "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state: Mapping) -> None:
        """Resume: the next ``iter()`` yields batch ``state["batch"]`` of ``state["epoch"]`` onward,
        batch for batch what the saved loader would have yielded."""
        for k in ("seed", "num_samples", "batch_size", "shuffle", "drop_last", "rank", "world_size"):
            if k in state and state[k] != getattr(self, k):
                raise ValueError(f"load_state_dict: {k} was {state[k]!r} when saved, this loader has "
                                 f"{getattr(self, k)!r}; resume would not reproduce the saved order")
        self.set_epoch(int(state["epoch"]))
        if not 0 <= int(state["batch"]) <= len(self):
            raise ValueError(f"load_state_dict: batch {state['batch']} out of range for {len(self)} batches")
        self._batch = int(state["batch"])

    @property
    def samples(self):
        """The sample table: ``(episode [N] int64, anchor time [N] float64 seconds)`` on the device
        (with ``shard_episodes``: this rank's, episodes indexing ``loader.dataset``)."""
        return self._episode, self._time

    def order(self, epoch: int | None = None):
        """Sample indices of an epoch (default the current one) in the order its batches take them,
        ``[num_samples]`` int64 on the device; batch k is ``order[k*batch_size:(k+1)*batch_size]``."""
        return self._order(self._epoch if epoch is None else int(epoch))

    def _order(self, epoch: int):
        """This epoch's sample indices on the device: [num_samples] int64."""
        torch = _torch()
        dev = self.device
        n = int(self._episode.shape[0])
        if self.sampler is not None:
            idx = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                bad = idx[(idx < 0) | (idx >= n)][0]
                raise IndexError(f"sampler yielded {bad}, outside the {n} samples of the loader")
            host = torch.from_numpy(idx)
        elif self.world_size == 1 and not self.shuffle:
            return torch.arange(n, device=dev)
        else:
            if self.shuffle:
                extra = (self.rank,) if self._per_rank is not None else ()
                g = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch, *extra))
                host = torch.randperm(n, generator=g)
            else:
                host = torch.arange(n)
            if self._per_rank is not None:            # this rank's own samples
                host = _wrap(host, self._per_rank)
            elif self.world_size > 1:                  # the global permutation, every world_size-th
                host = _wrap(host, self.num_samples * self.world_size)[self.rank::self.world_size]
        if dev.type == "cuda":
            # pinned + non_blocking: an async copy, no sync; the caching host allocator keeps
            # the pinned buffer until the copy has run
            return host.pin_memory().to(dev, non_blocking=True)
        return host

    # --- iteration -----------------------------------------------------------------------

    def _make(self, episodes, times, k: int) -> dict:
        a = k * self.batch_size
        return self._make_batch(episodes[a:a + self.batch_size], times[a:a + self.batch_size])

    def _make_batch(self, ep, t) -> dict:
        out: dict = {}
        # every window's target times in one op; each plan reads its columns as a view
        targets = t[:, None] + self._offsets[None, :]
        for p, (a, b) in zip(self._plans, self._columns):
            _run_plan(p, self.dataset, ep, targets[:, a:b], out)
        return out

    def __iter__(self) -> Iterator[dict]:
        if not self._fresh:
            self.set_epoch(self._epoch + 1)
        self._fresh = False
        epoch, start, n = self._epoch, self._batch, len(self)
        if self.device.type == "cuda":
            return self._iter_cuda(epoch, start, n)
        return self._iter_cpu(epoch, start, n)

    def _epoch_tables(self, epoch: int, static: bool = False):
        """Episode and anchor time of each sample in the epoch's order; ``static``: written into
        the buffers a captured batch graph reads."""
        order = self._order(epoch)
        if not static:
            return self._episode[order], self._time[order]
        torch = _torch()
        n = int(order.shape[0])
        if self._tables is None or int(self._tables[0].shape[0]) != n:
            # a sampler whose length changed: the graph reads the old tables; dropping it waits
            # for its queued replays (BatchGraph.__del__)
            self._graph = None
            self._tables = (torch.empty(n, dtype=torch.int64, device=self.device),
                            torch.empty(n, dtype=torch.float64, device=self.device))
        torch.index_select(self._episode, 0, order, out=self._tables[0])
        torch.index_select(self._time, 0, order, out=self._tables[1])
        return self._tables

    def _hand_over(self, batch: dict):
        if self.collate_fn is not None:
            batch = self.collate_fn(batch)
        self._batch += 1
        return batch

    def _iter_cpu(self, epoch, start, n):
        episodes, times = self._epoch_tables(epoch)
        for k in range(start, n):
            yield self._hand_over(self._make(episodes, times, k))

    def _iter_cuda(self, epoch, start, n):
        torch = _torch()
        consumer = torch.cuda.current_stream(self.device)
        if self._side is None:
            # above the training step's priority: a batch is a few short kernels the step will
            # wait for, and behind the step's long ones its cost in the GR00T-style step was 1.9%
            # against 0.4% ahead of them (docs/perf-notes.md v10)
            self._side = torch.cuda.Stream(self.device, priority=-1)
            self._events = (torch.cuda.Event(), torch.cuda.Event())
            for e in self._events:
                e.record(self._side)    # torch creates the CUDA event at its first record
            self._event_handles = tuple(e.cuda_event for e in self._events)
        side = self._side
        side.wait_stream(consumer)          # whatever the consumer enqueued before (e.g. the dataset's upload)
        # one iterator at a time replays the graph (it owns the static tables, the cursor, the
        # slots); a second live iterator of the same loader makes its batches eagerly
        graphed = self.cuda_graph and self._graph_lock.acquire(blocking=False)
        try:
            with torch.cuda.stream(side):
                episodes, times = self._epoch_tables(epoch, static=graphed)
                if graphed and self._graph is not None:
                    self._graph.reset(start)
            full = self.num_samples // self.batch_size      # batches of batch_size samples

            def prepare(k, wait=0):
                """Batch k enqueued on `side`: (graph slot or None, eager batch or None, its event).
                A replay also makes the consumer wait for the event handle `wait` (batch k-1's)."""
                # two events in turn: batch k's is waited on after batch k+1's is recorded
                ready = self._events[k % 2]
                if graphed and k < full:
                    # (cuda_graph turns False when a capture fails: not retried every batch)
                    if self._graph is None and self._warm and self.cuda_graph:
                        with torch.cuda.stream(side):
                            self._capture(episodes, times, k)
                    if self._graph is not None:
                        slot = self._graph.replay(consumer, self._event_handles[k % 2], wait)
                        if slot is not None:
                            return slot, None, ready
                # eager: the first batch (warm-up), the last short one, a batch when every graph
                # slot is still held by the caller
                with torch.cuda.stream(side):
                    batch = self._make(episodes, times, k)
                    if graphed and self._graph is not None:
                        self._graph.reset(k + 1)            # replays go on after this batch
                    ready.record(side)
                self._warm = True
                return None, batch, ready

            nxt = prepare(start) if start < n else None
            for k in range(start, n):
                slot, batch, ready = nxt
                # batch k+1 is enqueued before the consumer's work on k; a replay queues the
                # consumer's wait for batch k in the same C call (host time is the loader's cost
                # in a host-bound step: docs/perf-notes.md v11)
                nxt = prepare(k + 1, self._event_handles[k % 2]) if k + 1 < n else None
                if nxt is None or nxt[0] is None:
                    consumer.wait_event(ready)
                if slot is not None:
                    batch = self._graph.hand_out(slot)
                else:
                    for v in batch.values():
                        # made on `side`, used on the consumer's stream: the allocator must not
                        # hand the memory back to `side` before the consumer's work on it has run
                        v.record_stream(consumer)
                yield self._hand_over(batch)
        finally:
            if graphed:
                if self._graph is not None:
                    self._graph.pending.clear()     # a prefetched batch nobody will take
                self._graph_lock.release()

    def _capture(self, episodes, times, k: int) -> None:
        """Capture the batch graph's slots over the static tables (after one eager batch: every
        kernel loaded, every lazy table built); on failure, warn once and stay eager."""
        from . import batch_graph
        try:
            if not batch_graph.supported():
                raise RuntimeError(f"torch {_torch().__version__} lacks the storage use count or the raw graph "
                                   "handle (torch >= 2.9 has both)")
            self._graph = batch_graph.BatchGraph(self._make_batch, (episodes, times), self.batch_size)
        except Exception as e:  # noqa: BLE001 - any capture failure: the eager path still works
            self.cuda_graph = False
            warnings.warn(f"robocache.DataLoader: CUDA graph capture failed ({type(e).__name__}: {e}); "
                          "batches are made without it (cuda_graph=False silences this)", RuntimeWarning,
                          stacklevel=3)
            return
        self._graph.reset(k)

    def __repr__(self) -> str:
        where = f"anchor={self.anchor!r}" if self.rate is None else f"rate={self.rate}"
        return (f"DataLoader({self.num_samples} samples, batch_size={self.batch_size}, {len(self)} batches, "
                f"shuffle={self.shuffle}, {where}, keys={list(self.windows)}, device {self.device})")
