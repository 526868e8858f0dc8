"""Window plans: one Window resolved against a Dataset, and the launches that make its key per batch.

``plan(key, window, ds)`` checks what needs the dataset (the streams exist, their kinds, dtypes,
statistics) and keeps every constant on the device, in one class per kind of stream:

- :class:`StreamPlan`: feature streams, one ragged resample (or one fuse over several streams), then
  zero padding, normalization, cast and ``max_dim`` padding as tensor ops;
- :class:`FramePlan`: image streams, frame ids (one tiny resample), then one gather over the frame
  store (decode, resize, layout, dtype in the kernel). Where the store stages frames on the host
  (disk tier or nvJPEG on a GPU) the plan also computes the ids on the host, from the batch's
  samples on the host, so nothing is read back from the GPU;
- :class:`CloudPlan`: point-cloud streams, one frame per target step, its points gathered into a
  fixed block, one voxelize launch.

``Plan.run`` writes ``out[key]`` and ``out[key + "_is_pad"]`` for one batch on the current stream: no
Python loop over samples.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from .._util import torch as _torch
from ..data.dataset import Dataset
from .windows import VOXEL_FEATURE_MODES, Window, check, target_size, target_steps, torch_dtype

#: the batch's samples on the host, asked for only by a plan that stages on the host:
#: ``() -> (episode [B], anchor time [B])`` host numpy
HostSamples = Callable[[], tuple]


class Plan:
    """What every kind shares: the streams read, their modes, the target offsets ``[T]`` float64 on
    the device, the tolerance, the output dtype and the padding rule."""

    #: the plan does host work per batch (a graph replay cannot repeat it)
    host_work = False

    def __init__(self, key: str, w: Window, streams: list, modes: list[str], offs: np.ndarray, device) -> None:
        torch = _torch()
        self.key, self.names, self.modes = key, w.names, modes
        self.offsets = torch.as_tensor(offs, dtype=torch.float64, device=device)
        self.tolerance = float(w.tolerance)
        self.dtype = torch_dtype(w)
        self.zero_pad = w.pad == "zero"

    def run(self, ds: Dataset, episodes, new_times, out: dict, host: HostSamples | None = None) -> None:
        """``out[key]`` and ``out[key + "_is_pad"]`` of one batch; ``new_times [B, T]`` float64 (a view)."""
        raise NotImplementedError

    def cast(self, x):
        return x.to(self.dtype) if self.dtype is not None and x.dtype != self.dtype else x


class StreamPlan(Plan):
    """Feature streams: resample (or fuse), normalization, ``max_dim``."""

    def __init__(self, key: str, w: Window, streams: list, modes: list[str], offs: np.ndarray, device) -> None:
        super().__init__(key, w, streams, modes, offs, device)
        self.center: Any = None          # [F] float32 (or the stream's shape), normalization
        self.scale: Any = None
        self.dim_mask: Any = None        # [max_dim] bool
        self.clip, self.pad = False, 0
        F = sum(math.prod(s.shape) for s in streams)
        if w.normalize is not None:
            self._normalize(w, streams)
        if w.max_dim is not None:
            if len(streams) == 1 and len(streams[0].shape) > 1:
                raise ValueError(f"windows[{key!r}]: max_dim needs one feature axis, stream shape is "
                                 f"{streams[0].shape}")
            if w.max_dim < F:
                raise ValueError(f"windows[{key!r}]: max_dim {w.max_dim} is below the {F} features of the window")
            self.pad = int(w.max_dim) - F
            self.dim_mask = _torch().arange(int(w.max_dim), device=device) < F
        self.fused: dict[str, Any] = ({n: (s.values, s.times, s.offsets) for n, s in zip(w.names, streams)}
                                      if len(streams) > 1 else {})

    def _normalize(self, w: Window, streams: list) -> None:
        """Per feature ``(x - center) * scale`` from the statistics (0 where the range or std is 0)."""
        torch = _torch()
        st = [s.stats for s in streams]
        if any(not x for x in st):
            raise ValueError(f"windows[{self.key!r}]: text streams have no statistics to normalize with")
        cat = lambda k: torch.cat([x[k].reshape(-1) for x in st])  # noqa: E731
        if w.normalize == "mean_std":
            center, width = cat("mean"), cat("std")
        else:
            lo, hi = (cat("min"), cat("max")) if w.normalize == "min_max" else (cat("q01"), cat("q99"))
            center, width = (hi + lo) / 2, (hi - lo) / 2
        ok = width > 0
        self.center = torch.where(ok, center, torch.zeros_like(center)).to(torch.float32)
        self.scale = torch.where(ok, 1.0 / torch.where(ok, width, torch.ones_like(width)),
                                 torch.zeros_like(width)).to(torch.float32)
        self.clip = w.normalize == "q01_q99"
        if len(streams) == 1:  # broadcast over the stream's own per-sample shape ([D], [J, 4], [])
            self.center, self.scale = self.center.reshape(streams[0].shape), self.scale.reshape(streams[0].shape)
        if self.dtype is None:
            self.dtype = torch.float32

    def run(self, ds: Dataset, episodes, new_times, out: dict, host: HostSamples | None = None) -> None:
        torch = _torch()
        x, pad = self._values(ds, episodes, new_times)
        if self.zero_pad:
            x = x.masked_fill(pad.reshape(pad.shape + (1,) * (x.dim() - 2)), 0)
        if self.scale is not None:
            x = (x.to(torch.float32) - self.center) * self.scale
            if self.clip:
                x = x.clamp_(-1.0, 1.0)
        x = self.cast(x)
        if self.pad:
            x = torch.nn.functional.pad(x, (0, self.pad))
        out[self.key] = x
        out[self.key + "_is_pad"] = pad
        if self.dim_mask is not None:
            # a copy, not a broadcast view of the plan's mask: a caller writing into the batch's mask
            # would write into every later batch's
            out[self.key + "_dim_mask"] = self.dim_mask.expand(x.shape).clone()

    def _values(self, ds: Dataset, episodes, new_times):
        """``(values [B, T, ...], is_pad [B, T])``: one fuse over the streams, or one resample."""
        if self.fused:
            from .._C import fuse
            x, pad = fuse(self.fused, new_times, modes=self.modes, index=episodes, return_mask=True,
                          tolerance=self.tolerance, check=False if ds.device.type == "cuda" else None)
            return x, pad.any(-1)
        return ds.resample(self.names[0], episodes, new_times, mode=self.modes[0], return_mask=True,
                           tolerance=self.tolerance)


class FramePlan(Plan):
    """Image streams: frame ids, then one gather over the frame store wherever its frames live."""

    def __init__(self, key: str, w: Window, streams: list, modes: list[str], offs: np.ndarray, device) -> None:
        super().__init__(key, w, streams, modes, offs, device)
        if modes[0] not in ("nearest", "previous", "next"):
            raise ValueError(f"windows[{key!r}]: image streams pick a frame: mode nearest/previous/next, "
                             f"got {modes[0]!r}")
        if w.normalize is not None:
            raise ValueError(f"windows[{key!r}]: images are scaled by layout='BTCHW', not normalize")
        if w.max_dim is not None:
            raise ValueError(f"windows[{key!r}]: max_dim is for feature vectors, not images")
        self.layout, self.resize = w.layout or "BTHWC", target_size(w)
        s = streams[0]
        self.augment = w.augment
        self.camera = 0                      # set by BatchPlan: this window's place among augmented cameras
        self.epoch_key: Any = None           # [1] int64 on the device: draw.epoch_key(seed, epoch)
        self.out_size: tuple[int, int] = (0, 0)
        if self.augment is not None:
            store = s.frames
            if store.channels != 3 or store.dtype != _torch().uint8:
                raise ValueError(f"windows[{key!r}]: augment needs 3-channel uint8 frames (video or RGB images), "
                                 f"stream {w.names[0]!r} holds {store.channels}-channel {store.dtype}")
            self.out_size = self.augment.out_size(store.height, store.width)
            self.epoch_key = _torch().zeros(1, dtype=_torch().int64, device=device)
        # where the store stages frames on the host (from the file, or their bitstreams to nvJPEG), the
        # host computes which ones without reading the GPU: the stream's times and episode offsets
        self.host_work = s.frames.host_staged
        self._host = (s.times.cpu().numpy(), s.offsets_host, np.asarray(offs)) if self.host_work else None

    def run(self, ds: Dataset, episodes, new_times, out: dict, host: HostSamples | None = None,
            anchors=None) -> None:
        store: Any = ds.streams[self.names[0]].frames
        ids, pad = ds.frame_ids(self.names[0], episodes, new_times, self.modes[0], tolerance=self.tolerance)
        if self.zero_pad:
            ids = ids.masked_fill(pad, -1)
        host_ids = self._host_ids(*host()) if self._host is not None and host is not None else None
        size, extra = self.resize, None
        if self.augment is not None:
            size, extra = self.out_size, self._augment(store, episodes, anchors, ids)
        out[self.key] = self.cast(store.gather(ids, layout=self.layout, size=size, host_ids=host_ids,
                                               augment=extra))
        out[self.key + "_is_pad"] = pad

    def _augment(self, store, episodes, anchors, ids) -> dict:
        """gather_frames' augmentation keywords for this batch: the samples' parameter rows (drawn on the
        device from the epoch key, each sample's episode and anchor time, and the camera), the scratch of
        contrast means, normalization."""
        torch, aug = _torch(), self.augment
        H, W = store.height, store.width
        params = aug.params(self.epoch_key, episodes, anchors, self.camera, H, W)
        kw: dict = dict(augment=params, augment_group=int(ids.shape[1]),
                        antialias=aug.layout(H, W).antialias)
        if aug.needs_scratch(H, W):
            M, (h, w) = ids.numel(), self.out_size      # row sums, means, the image before the op (robocache.h)
            kw["scratch"] = torch.empty(M * (h + 1) + (3 * M * h * w + 1) // 2, dtype=torch.float64, device=ids.device)
        norm = aug.layout(H, W).normalize
        if norm is not None:
            kw.update(mean=norm.mean, std=norm.std)
        return kw

    def _host_ids(self, ep, t):
        """Frame ids ``[B, T]`` computed on the host (CPU resample of the frame numbers) from the batch's
        host-side episodes and anchor times: what a host-staged store copies, with no GPU read-back."""
        from .._C import resample
        times, offsets, offs = self._host
        ids, pad = resample(np.arange(times.shape[0], dtype=np.int64), times, t[:, None] + offs[None, :],
                            mode=self.modes[0], offsets=offsets, index=ep, return_mask=True,
                            tolerance=self.tolerance)
        if self.zero_pad:
            ids[pad] = -1
        return ids


class CloudPlan(Plan):
    """Point-cloud streams: each target step picks a frame, whose points become one voxel grid."""

    def __init__(self, key: str, w: Window, streams: list, modes: list[str], offs: np.ndarray, device) -> None:
        super().__init__(key, w, streams, modes, offs, device)
        if w.normalize is not None or w.max_dim is not None:
            raise ValueError(f"windows[{key!r}]: normalize/max_dim are not for point clouds (voxel grids)")
        for m in modes:
            if m not in ("nearest", "previous", "next"):
                raise ValueError(f"windows[{key!r}]: point clouds pick a frame: mode nearest/previous/next, "
                                 f"got {m!r}")
        s = streams[0]
        self.voxel = self._probe(dict(w.voxel or {}), s)
        sizes = np.diff(s.frame_offsets_host)
        # (frame_offsets [M+1], frames per episode [E], max points per frame): the block's size is fixed
        # here, so a batch needs no host sync
        self.cloud = (s.frame_offsets, s.offsets[1:] - s.offsets[:-1], int(sizes.max()) if sizes.size else 0)

    def _probe(self, spec: dict, s) -> dict:
        """The voxel spec, checked once: a voxelize call on an empty cloud raises what a batch would."""
        torch = _torch()
        from .._C import voxelize
        C = s.shape[-1] if s.shape else 0
        if C < 3:
            raise ValueError(f"windows[{self.key!r}]: points of {s.name!r} have {C} columns; need x, y, z first")
        dev = s.device
        probe = dict(points=torch.zeros((1, 0, 3), dtype=s.dtype, device=dev),
                     lengths=torch.zeros(1, dtype=torch.int64, device=dev))
        if spec.get("mode", "occupancy") in VOXEL_FEATURE_MODES:
            if C == 3:
                raise ValueError(f"windows[{self.key!r}]: voxel mode {spec['mode']!r} reduces point features, "
                                 f"but {s.name!r} has only x, y, z")
            probe["features"] = torch.zeros((1, 0, C - 3), dtype=s.dtype, device=dev)
        try:
            voxelize(**probe, **spec)
        except (TypeError, ValueError) as e:
            raise type(e)(f"windows[{self.key!r}]: voxel: {e}") from None
        return spec

    def run(self, ds: Dataset, episodes, new_times, out: dict, host: HostSamples | None = None) -> None:
        x, pad = self._grids(ds, episodes, new_times)
        out[self.key], out[self.key + "_is_pad"] = self.cast(x), pad

    def _grids(self, ds: Dataset, episodes, new_times):
        """[B, T] frames -> [B, T, (F,) X, Y, Z] grids: each picked frame's points are gathered into a
        dense [B*T, max points, C] block with lengths (no host sync: the block size is fixed at
        construction), then one voxelize launch."""
        torch = _torch()
        from .._C import voxelize
        s = ds.streams[self.names[0]]
        frames, pad = ds.resample(self.names[0], episodes, new_times, mode=self.modes[0], return_mask=True,
                                  tolerance=self.tolerance)
        frame_offsets, per_episode, nmax = self.cloud
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
            drop = empty | pad if self.zero_pad else empty
            lengths = lengths.masked_fill(drop.reshape(B * T), 0)
            rows = (start[:, None] + torch.arange(nmax, device=ds.device)).clamp_(max=s.values.shape[0] - 1)
            pts = s.values[rows]                                                 # [B*T, nmax, C]
        kw = dict(self.voxel)
        if kw.get("mode", "occupancy") in VOXEL_FEATURE_MODES:
            kw["features"] = pts[..., 3:]
        grids = voxelize(pts[..., :3], lengths=lengths, check=False if ds.device.type == "cuda" else None, **kw)
        return grids.reshape((B, T) + tuple(grids.shape[1:])), pad


class BatchPlan:
    """What one batch is over one dataset: every window's plan, their target offsets side by side (one
    op makes every window's target times; each plan reads its columns as a view), and the identity
    keys (identity.Identity, set once the sample table exists)."""

    def __init__(self, windows: Mapping, ds: Dataset) -> None:
        torch = _torch()
        self.ds = ds
        self.plans = [plan(str(k), w, ds) for k, w in windows.items()]
        #: the windows whose frames are augmented, each a camera of its own for the draws
        self.augmented = [p for p in self.plans if isinstance(p, FramePlan) and p.augment is not None]
        for i, p in enumerate(self.augmented):
            p.camera = i
        self.offsets = torch.cat([p.offsets for p in self.plans])
        ends = np.cumsum([0] + [int(p.offsets.shape[0]) for p in self.plans])
        self.columns = list(zip(ends[:-1].tolist(), ends[1:].tolist()))
        self.names = list(dict.fromkeys(n for p in self.plans for n in p.names))
        #: some window does host work per batch (frames staged by the host): a graph replay cannot repeat it
        self.host_work = any(p.host_work for p in self.plans)
        self.identity: Any = None
        self.episode: Any = None         # [N] int64: each sample row's episode, read with identity tensors

    def set_epoch(self, seed: int, epoch: int) -> None:
        """The augmented windows draw epoch ``epoch`` of ``seed`` from now on: one fill of a device
        tensor on the current stream (a captured graph reads it there)."""
        if self.augmented:
            from ..augment import epoch_key
            k = epoch_key(seed, epoch)
            for p in self.augmented:
                p.epoch_key.fill_(k)

    def identify(self, identity, episode) -> None:
        """Add ``identity``'s keys to every batch; ``episode``: the episode of each sample row."""
        self.identity, self.episode = identity, episode

    def make(self, episodes, times, host: HostSamples | None = None) -> dict:
        """The batch of samples ``(episodes [B], anchor times [B])`` (with identity tensors, ``episodes``
        are sample rows: the epoch tables hold rows then)."""
        out: dict = {}
        rows = None
        if self.identity is not None and self.identity.tensors:
            # the epoch tables hold sample rows; their episodes are one gather away
            rows, episodes = episodes, self.episode.index_select(0, episodes)
        targets = times[:, None] + self.offsets[None, :]
        for p, (a, b) in zip(self.plans, self.columns):
            if isinstance(p, FramePlan) and p.augment is not None:
                p.run(self.ds, episodes, targets[:, a:b], out, host, anchors=times)
            else:
                p.run(self.ds, episodes, targets[:, a:b], out, host)
        if rows is not None:
            self.identity.add(rows, episodes, times, out)
        return out


def plan(key: str, w: Window | str, ds: Dataset) -> Plan:
    """``w`` (a Window or a stream name) resolved against ``ds``: the plan of its kind of stream."""
    if isinstance(w, str):
        w = Window(w)
    if not isinstance(w, Window):
        raise TypeError(f"windows[{key!r}]: expected a robocache.Window or a stream name, got {type(w).__name__}")
    check(w)                       # again: a field may have been changed since the Window was made
    for n in w.names:
        if n not in ds.streams:
            raise KeyError(f"windows[{key!r}]: unknown stream {n!r}; the dataset has {sorted(ds.streams)}")
    streams = [ds.streams[n] for n in w.names]
    cloud = any(s.kind == "pointcloud" for s in streams)
    image = any(s.frames is not None for s in streams)     # frames [H, W, C] in frame storage
    if len(streams) > 1 and (cloud or image):
        raise ValueError(f"windows[{key!r}]: {'point-cloud' if cloud else 'image'} streams cannot be fused with others")
    if cloud != (w.voxel is not None):
        raise ValueError(f"windows[{key!r}]: " + (f"point-cloud stream {w.names[0]!r} needs voxel=dict(grid=..., "
                         "voxel_size=..., origin=...)" if cloud else "voxel is for point-cloud streams"))
    if not image and (w.layout is not None or w.resize is not None):
        raise ValueError(f"windows[{key!r}]: layout/resize are for image streams")
    if len({s.dtype for s in streams}) > 1:
        got = ", ".join(f"{s.name}: {s.dtype}" for s in streams)
        raise TypeError(f"windows[{key!r}]: fused streams must share one dtype ({got}); cast them in the dataset")
    offs, default_mode = _offsets(key, w, streams[0])
    modes = _modes(w, streams, default_mode)
    kind = CloudPlan if cloud else FramePlan if image else StreamPlan
    return kind(key, w, streams, modes, offs, ds.device)


def _offsets(key: str, w: Window, first) -> tuple[np.ndarray, str | None]:
    """Target offsets in seconds ``[T]`` and the default mode: ``indices`` are steps at ``rate`` Hz
    (default the first stream's nominal, else measured, rate) and pick a frame (``nearest``)."""
    steps = target_steps(w)
    if w.indices is None:
        return steps, None
    rate = w.rate if w.rate is not None else (first.nominal_rate or first.rate)
    if not rate or not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"windows[{key!r}]: indices need a positive rate (Hz), got {rate!r}")
    return steps / float(rate), "nearest"


def _modes(w: Window, streams: list, default_mode: str | None) -> list[str]:
    """One resample mode per stream: the Window's (one, or per stream), else the default, else the stream's."""
    if isinstance(w.mode, Mapping):
        return [w.mode.get(n) or default_mode or s.mode for n, s in zip(w.names, streams)]
    return [w.mode or default_mode or s.mode for s in streams]

