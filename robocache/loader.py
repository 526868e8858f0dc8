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
enqueued on a side stream before batch k is handed over (events + ``record_stream``), and nothing
reads the device back: no host sync per batch. See docs/loader.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .dataset import MODES, Dataset, _torch

__all__ = ["DataLoader", "Window"]

NORMALIZATIONS = ("min_max", "mean_std", "q01_q99")
LAYOUTS = ("BTHWC", "BTCHW")


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
        [0, 1] (uint8 / 255). Default ``BTHWC``.
    resize : (int, int), optional
        Image streams only: ``(H, W)`` after bilinear resizing (``torch.nn.functional.interpolate``,
        antialias off); uint8 output is rounded back to uint8.
    dtype : torch.dtype, optional
        Cast the values to this dtype last (default: the stored dtype; float32 when normalized).
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
    fused: dict = field(default_factory=dict)


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
    for s in streams:
        if s.kind == "pointcloud":
            raise ValueError(f"windows[{key!r}]: point-cloud stream {s.name!r} needs a voxel spec, "
                             "which the loader does not take yet")
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
              image, layout=layout, resize=tuple(w.resize) if w.resize is not None else None, dtype=w.dtype)

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


def _run_plan(p: _Plan, ds: Dataset, episodes, anchors, out: dict) -> None:
    """Write ``out[key]`` and ``out[key + '_is_pad']`` (and ``_dim_mask``) for one batch."""
    torch = _torch()
    new_times = anchors[:, None] + p.offsets[None, :]                      # [B, T] float64
    if p.fused:
        from ._C import fuse
        x, pad = fuse(p.fused, new_times, modes=p.modes, index=episodes, return_mask=True, tolerance=p.tolerance,
                      check=False if ds.device.type == "cuda" else None)
        pad = pad.any(-1)
    else:
        x, pad = ds.resample(p.names[0], episodes, new_times, mode=p.modes[0], return_mask=True,
                             tolerance=p.tolerance)
    if p.image:
        x = _image(p, x)
    if p.scale is not None:
        x = (x.to(torch.float32) - p.center) * p.scale
        if p.clip:
            x = x.clamp_(-1.0, 1.0)
    if p.dtype is not None and x.dtype != p.dtype:
        x = x.to(p.dtype)
    if p.pad:
        x = torch.nn.functional.pad(x, (0, p.pad))
    out[p.key] = x
    out[p.key + "_is_pad"] = pad
    if p.dim_mask is not None:
        out[p.key + "_dim_mask"] = p.dim_mask.expand(x.shape)


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
        y = x.permute(0, 1, 4, 2, 3).to(torch.float32)
        return (y / 255.0 if u8 else y).contiguous()
    return x


# --------------------------------------------------------------------------------------------
# the loader


def _epoch_seed(seed: int, epoch: int) -> int:
    """64-bit seed of one epoch's order, a pure function of (seed, epoch)."""
    s = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1)]).generate_state(2, np.uint32)
    return int(s[0]) | (int(s[1] & 0x7FFFFFFF) << 32)


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
                 multiprocessing_context=None, pin_memory_device: str | None = None, in_order: bool | None = None):
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
        self._episode, self._time = self._samples(anchor, rate)   # [N] int64, [N] float64 on the device
        self.anchor = anchor if rate is None else None
        if rate is None and anchor is None:
            self.anchor = dataset.anchor
        self.rate = rate
        # position: the next iter() starts batch `_batch` of epoch `_epoch` when `_fresh`
        # (after construction, set_epoch or load_state_dict), else the next epoch from its start
        self._epoch, self._batch, self._fresh = 0, 0, True

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
        rate = float(rate)
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"rate must be a positive number of Hz, got {rate!r}")
        names = list(dict.fromkeys(n for p in self._plans for n in p.names))
        ends = [ds.streams[n]._ends() for n in names]
        first = torch.stack([f for f, _ in ends]).nan_to_num(math.inf).amin(0).cpu().numpy()
        last = torch.stack([l for _, l in ends]).nan_to_num(-math.inf).amax(0).cpu().numpy()
        has = last >= first
        counts = np.where(has, np.floor((np.where(has, last - first, 0)) * rate + 1e-9).astype(np.int64) + 1, 0)
        ep = np.repeat(np.arange(len(counts)), counts)
        step = np.arange(ep.size) - np.repeat(np.cumsum(counts) - counts, counts)
        t = first[ep] + step / rate if ep.size else np.zeros(0)
        return (torch.from_numpy(ep).to(ds.device), torch.from_numpy(np.asarray(t, np.float64)).to(ds.device))

    @property
    def num_samples(self) -> int:
        """Samples per epoch (the sampler's length when there is one)."""
        if self.sampler is not None:
            return len(self.sampler)
        return int(self._episode.shape[0])

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
                "batch_size": self.batch_size, "shuffle": self.shuffle, "drop_last": self.drop_last}

    def load_state_dict(self, state: Mapping) -> None:
        """Resume: the next ``iter()`` yields batch ``state["batch"]`` of ``state["epoch"]`` onward,
        batch for batch what the saved loader would have yielded."""
        for k in ("seed", "num_samples", "batch_size", "shuffle", "drop_last"):
            if k in state and state[k] != getattr(self, k):
                raise ValueError(f"load_state_dict: {k} was {state[k]!r} when saved, this loader has "
                                 f"{getattr(self, k)!r}; resume would not reproduce the saved order")
        self.set_epoch(int(state["epoch"]))
        if not 0 <= int(state["batch"]) <= len(self):
            raise ValueError(f"load_state_dict: batch {state['batch']} out of range for {len(self)} batches")
        self._batch = int(state["batch"])

    @property
    def samples(self):
        """The sample table: ``(episode [N] int64, anchor time [N] float64 seconds)`` on the device."""
        return self._episode, self._time

    def order(self, epoch: int | None = None):
        """Sample indices of an epoch (default the current one) in the order its batches take them,
        ``[num_samples]`` int64 on the device; batch k is ``order[k*batch_size:(k+1)*batch_size]``."""
        return self._order(self._epoch if epoch is None else int(epoch))

    def _order(self, epoch: int):
        """This epoch's sample indices on the device: [num_samples] int64."""
        torch = _torch()
        dev = self.device
        if self.sampler is not None:
            idx = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            n = int(self._episode.shape[0])
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                bad = idx[(idx < 0) | (idx >= n)][0]
                raise IndexError(f"sampler yielded {bad}, outside the {n} samples of the loader")
            host = torch.from_numpy(idx)
        elif self.shuffle:
            g = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
            host = torch.randperm(self.num_samples, generator=g)
        else:
            return torch.arange(self.num_samples, device=dev)
        if dev.type == "cuda":
            # pinned + non_blocking: an async copy, no sync; the caching host allocator keeps
            # the pinned buffer until the copy has run
            return host.pin_memory().to(dev, non_blocking=True)
        return host

    # --- iteration -----------------------------------------------------------------------

    def _make(self, episodes, times, k: int) -> dict:
        a = k * self.batch_size
        ep, t = episodes[a:a + self.batch_size], times[a:a + self.batch_size]
        out: dict = {}
        for p in self._plans:
            _run_plan(p, self.dataset, ep, t, out)
        return out

    def __iter__(self) -> Iterator[dict]:
        if not self._fresh:
            self.set_epoch(self._epoch + 1)
        self._fresh = False
        epoch, start, n = self._epoch, self._batch, len(self)
        if self.device.type == "cuda":
            return self._iter_cuda(epoch, start, n)
        return self._iter_cpu(epoch, start, n)

    def _epoch_tables(self, epoch: int):
        order = self._order(epoch)
        return self._episode[order], self._time[order]

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
        side = torch.cuda.Stream(self.device)
        side.wait_stream(consumer)          # whatever the consumer enqueued before (e.g. the dataset's upload)

        def prepare(k):
            with torch.cuda.stream(side):
                batch = self._make(episodes, times, k)
                ready = torch.cuda.Event()
                ready.record(side)
            return batch, ready

        with torch.cuda.stream(side):
            episodes, times = self._epoch_tables(epoch)
        nxt = prepare(start) if start < n else None
        for k in range(start, n):
            batch, ready = nxt
            nxt = prepare(k + 1) if k + 1 < n else None    # enqueued before the consumer's work on k
            consumer.wait_event(ready)
            for v in batch.values():
                # made on `side`, used on the consumer's stream: the allocator must not hand the
                # memory back to `side` before the consumer's work on it has run
                v.record_stream(consumer)
            yield self._hand_over(batch)

    def __repr__(self) -> str:
        where = f"anchor={self.anchor!r}" if self.rate is None else f"rate={self.rate}"
        return (f"DataLoader({self.num_samples} samples, batch_size={self.batch_size}, {len(self)} batches, "
                f"shuffle={self.shuffle}, {where}, keys={list(self.windows)}, device {self.device})")
