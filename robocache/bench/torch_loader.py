"""The plain ``torch.utils.data`` baseline, batch for batch what ``robocache.DataLoader`` yields.

This is the loader a LeRobot/GR00T user has today: a map-style ``torch.utils.data.Dataset``
whose ``__getitem__`` computes one sample's windows with NumPy on CPU arrays, batched by
``torch.utils.data.DataLoader`` (workers, pinning, default collate). It exists to be compared
with robocache, so it follows docs/loader.md exactly:

- one sample per frame of the anchor stream (``ds.anchor`` by default), in the same table order;
- per key a ``robocache.Window``: targets ``anchor + offsets`` (or ``indices / rate``), read with
  ``nearest`` / ``previous`` / ``next`` (docs/resample.md: ``j`` = last sample with
  ``t[j] <= x``, nearest ties go to the earlier sample), edges repeat the first/last value,
  ``{key}_is_pad`` where a target is more than ``tolerance`` outside the episode's span;
- ``pad="zero"``: padded steps hold zeros before any transform; point-cloud windows voxelize the
  picked frame's points with ``np.floor`` binning and ``np.bincount`` (occupancy, count, sum,
  mean; mean/sum accumulate in float64, so they may differ from robocache's fixed point in the
  last bit);
- then, in robocache's order: image layout (``BTCHW``: float32 / 255), normalization (float32
  ``(x - center) * scale`` from ``stream.stats``), the ``dtype`` cast, zero-padding to ``max_dim``
  (with ``{key}_dim_mask``);
- the sample order of epoch ``e`` is the same permutation robocache draws
  (``torch.randperm`` from a CPU generator seeded with ``robocache.loader.shard.epoch_seed(seed, e)``).

So ``make_torch_loader(ds, windows, B, seed, epoch)`` and
``robocache.DataLoader(ds, B, shuffle=True, seed=seed, windows=windows)`` at ``set_epoch(epoch)`` give equal
batches (tests/test_train_groot_style.py). Linear interpolation, ``resize``, fused keys and a
``rate`` grid are not reproduced (a ``NotImplementedError`` says so): a GR00T/LeRobot loader
picks frames, it does not interpolate.

Used by ``examples/train_groot_style.py --loader torch``, the end-to-end loader benchmark
(benchmarks/bench_loader.py, its "torch DL" contender) and tests/test_loader_pointcloud.py.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from .._util import torch as _torch
from ..data.dataset import Dataset
from ..loader.shard import epoch_seed
from ..loader.windows import Window

torch = _torch()  # this module is torch's DataLoader: torch is required to import it

__all__ = ["WindowDataset", "EpochSampler", "make_torch_loader"]

_MODES = ("nearest", "previous", "next")


def pyav_frame_at(path: str, t: float):
    """LeRobot's way to read one frame: open the video, seek to the key frame before ``t``, decode up to
    it (PyAV); RGB as ``[1, 3, H, W]`` float in [0, 1] (what the DataLoader baselines' workers do)."""
    import av
    torch = _torch()
    with av.open(path) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        c.seek(int(t / s.time_base), stream=s, backward=True)
        frame = None
        for f in c.decode(s):
            frame = f
            if f.time is not None and f.time >= t - 1e-4:
                break
    return torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1)[None].float().div_(255)


class _Key:
    """One window resolved against a Dataset into NumPy arrays (host copies, shared by
    forked workers)."""

    def __init__(self, key: str, w: Window | str, ds: Dataset):
        if isinstance(w, str):
            w = Window(w)
        names = w.names
        if len(names) != 1:
            raise NotImplementedError(f"windows[{key!r}]: fused keys are not reproduced by the torch reference")
        if w.resize is not None:
            raise NotImplementedError(f"windows[{key!r}]: resize is not reproduced by the torch reference")
        s = ds.streams[names[0]]
        self.key = key
        self.image = s.kind == "image"
        if w.indices is not None:
            rate = w.rate if w.rate is not None else (s.nominal_rate or s.rate)
            self.offsets = np.asarray(list(w.indices), np.float64) / float(rate)
            default = "nearest"
        else:
            self.offsets = np.asarray([0.0] if w.offsets is None else list(w.offsets), np.float64)
            default = None
        mode = w.mode.get(names[0]) if isinstance(w.mode, Mapping) else w.mode
        self.mode = mode or default or s.mode
        if self.mode not in _MODES:
            raise NotImplementedError(f"windows[{key!r}]: mode {self.mode!r}; the torch reference picks frames "
                                      f"({', '.join(_MODES)})")
        self.tolerance = float(w.tolerance)
        # image streams: every frame decoded once, in chunks (the baseline holds RGB frames in its workers)
        self.values = (np.concatenate([c.cpu().numpy() for c in s.frames.chunks()]) if s.frames is not None
                       else s.values.cpu().numpy())
        self.times = s.times.cpu().numpy()
        self.starts = s.offsets_host
        self.layout = w.layout or "BTHWC"
        self.center = self.scale = None
        self.clip = w.normalize == "q01_q99"
        dtype = w.dtype
        if w.normalize is not None:
            st = {k: v.double().cpu().numpy().reshape(-1) for k, v in s.stats.items()
                  if k in ("min", "max", "mean", "std", "q01", "q99")}
            if w.normalize == "mean_std":
                center, width = st["mean"], st["std"]
            else:
                lo, hi = (st["min"], st["max"]) if w.normalize == "min_max" else (st["q01"], st["q99"])
                center, width = (hi + lo) / 2, (hi - lo) / 2
            ok = width > 0
            self.center = np.where(ok, center, 0.0).astype(np.float32).reshape(s.shape)
            self.scale = np.where(ok, 1.0 / np.where(ok, width, 1.0), 0.0).astype(np.float32).reshape(s.shape)
            dtype = dtype or torch.float32
        self.dtype = None if dtype is None else torch.empty(0, dtype=dtype).numpy().dtype
        self.max_dim = w.max_dim
        self.features = int(np.prod(s.shape)) if s.shape else 1
        self.zero_pad = w.pad == "zero"
        self.cloud = None
        if s.kind == "pointcloud":
            v = dict(w.voxel or {})
            grid = v["grid"]
            grid = (int(grid),) * 3 if np.ndim(grid) == 0 else tuple(int(g) for g in grid)
            mode = v.get("mode", "occupancy")
            if mode == "max":
                raise NotImplementedError(f"windows[{key!r}]: voxel mode 'max' is not reproduced by the torch reference")
            dt = v.get("dtype") or (torch.int32 if mode == "count" else torch.float32)
            self.cloud = (grid, np.broadcast_to(np.asarray(v["voxel_size"], np.float64), (3,)),
                          np.asarray(v["origin"], np.float64), mode, torch.empty(0, dtype=dt).numpy().dtype,
                          s.frame_offsets_host)

    def __call__(self, e: int, anchor: float, out: dict) -> None:
        x = anchor + self.offsets                                   # [T] float64, as robocache adds
        a, b = int(self.starts[e]), int(self.starts[e + 1])
        t = self.times[a:b]
        T = len(x)
        if b == a:                                                  # empty episode: zeros, all padding
            if self.cloud is not None:
                out[self.key] = np.stack([self._voxelize(-1, True) for _ in range(T)])
                out[self.key + "_is_pad"] = np.ones(T, bool)
                return
            v = np.zeros((T,) + self.values.shape[1:], self.values.dtype)
            pad = np.ones(T, bool)
        else:
            j = np.searchsorted(t, x, side="right") - 1             # last sample with t[j] <= x
            lo, hi = np.clip(j, 0, b - a - 1), np.clip(j + 1, 0, b - a - 1)
            if self.mode == "previous":
                k = lo
            elif self.mode == "next":
                k = np.where((j >= 0) & (t[lo] == x), lo, hi)
            else:                                                   # nearest, ties to the earlier sample
                k = np.where(t[hi] - x < x - t[lo], hi, lo)
            k = np.where(j < 0, 0, k)                               # before the first sample: sample 0
            pad = (x < t[0] - self.tolerance) | (x > t[-1] + self.tolerance)
            if self.cloud is not None:
                out[self.key] = np.stack([self._voxelize(a + int(f), bool(p)) for f, p in zip(k, pad)])
                out[self.key + "_is_pad"] = pad
                return
            v = self.values[a + k]
            if self.zero_pad:
                v = np.where(pad.reshape((T,) + (1,) * (v.ndim - 1)), np.zeros((), v.dtype), v)
        if self.image:
            if v.ndim == 3:                                         # [T, H, W] grey
                v = v[..., None]
            if self.layout == "BTCHW":
                v = v.transpose(0, 3, 1, 2).astype(np.float32)
                v = v / np.float32(255) if self.values.dtype == np.uint8 else v
        if self.scale is not None:
            v = (v.astype(np.float32) - self.center) * self.scale
            if self.clip:
                v = np.clip(v, -1.0, 1.0)
        if self.dtype is not None and v.dtype != self.dtype:
            v = v.astype(self.dtype)
        if self.max_dim is not None:
            v = np.concatenate([v, np.zeros(v.shape[:-1] + (self.max_dim - v.shape[-1],), v.dtype)], -1)
            out[self.key + "_dim_mask"] = np.broadcast_to(np.arange(self.max_dim) < self.features, v.shape)
        out[self.key] = np.ascontiguousarray(v)
        out[self.key + "_is_pad"] = pad


    def _voxelize(self, frame: int, pad: bool) -> np.ndarray:
        """One frame's points as a grid (frame < 0, or padded with pad="zero": empty)."""
        grid, vs, origin, mode, dtype, fo = self.cloud
        p = self.values[fo[frame]:fo[frame + 1]] if frame >= 0 and not (pad and self.zero_pad) else self.values[:0]
        idx = np.floor((p[:, :3].astype(np.float64) - origin) / vs)
        with np.errstate(invalid="ignore"):
            keep = np.all((idx >= 0) & (idx < np.asarray(grid)), axis=1)
        lin = np.ravel_multi_index(idx[keep].astype(np.int64).T, grid)
        n = int(np.prod(grid))
        count = np.bincount(lin, minlength=n)
        if mode in ("occupancy", "count"):
            return (count > 0 if mode == "occupancy" else count).astype(dtype).reshape(grid)
        f = p[keep, 3:].astype(np.float64)
        sums = np.stack([np.bincount(lin, weights=f[:, c], minlength=n) for c in range(f.shape[1])])
        if mode == "mean":
            sums = np.where(count > 0, sums / np.maximum(count, 1), 0.0)
        return sums.astype(dtype).reshape((f.shape[1],) + grid)


class WindowDataset(torch.utils.data.Dataset):
    """``torch.utils.data.Dataset``: sample ``i`` -> ``{key: tensor [T, ...], key_is_pad: [T]}``.

    Samples are the frames of ``anchor`` (default ``ds.anchor``), in robocache's sample-table
    order: sample ``i`` is frame ``i`` of the stream's ragged storage (episode by episode).
    The Dataset is read once into host NumPy arrays; ``__getitem__`` is NumPy on the CPU.

    Parameters
    ----------
    ds : robocache.Dataset
    windows : dict[str, robocache.Window or str]
        As for ``robocache.DataLoader`` (single stream; nearest/previous/next; no resize).
    anchor : str, optional
    """

    def __init__(self, ds: Dataset, windows: Mapping[str, Window | str], anchor: str | None = None):
        name = anchor if anchor is not None else ds.anchor
        s = ds.streams[name]
        self.episode = np.repeat(np.arange(s.num_episodes), s.lengths)      # [N] int64
        self.time = s.times.cpu().numpy()                                  # [N] float64 seconds
        self.keys = [_Key(str(k), w, ds) for k, w in windows.items()]

    def __len__(self) -> int:
        return int(self.episode.shape[0])

    def __getitem__(self, i: int) -> dict:
        out: dict = {}
        e, t = int(self.episode[i]), float(self.time[i])
        for k in self.keys:
            k(e, t, out)
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}


class EpochSampler(torch.utils.data.Sampler):
    """The sample order of ``robocache.DataLoader`` for ``(seed, epoch)``: a ``torch.randperm``
    from a CPU generator seeded with ``robocache.loader.shard.epoch_seed(seed, epoch)`` (or
    ``range(n)`` without shuffling). ``set_epoch`` as ``DistributedSampler``."""

    def __init__(self, num_samples: int, seed: int = 0, epoch: int = 0, shuffle: bool = True):
        self.num_samples, self.seed, self.epoch, self.shuffle = int(num_samples), int(seed), int(epoch), shuffle

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.num_samples))
        g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.num_samples, generator=g).tolist())


def make_torch_loader(ds: Dataset, windows_spec: Mapping[str, Window | str], batch_size: int, seed: int = 0,
                      epoch: int = 0, num_workers: int = 0, pin_memory: bool = False, *, shuffle: bool = True,
                      drop_last: bool = False, anchor: str | None = None, **kwargs):
    """A ``torch.utils.data.DataLoader`` whose batches equal
    ``robocache.DataLoader(ds, batch_size, shuffle, drop_last, seed, windows=windows_spec)`` at epoch
    ``epoch``: same samples, same order, same values and masks (on the CPU; move them yourself).

    ``loader.sampler.set_epoch(e)`` moves it to epoch ``e``. Extra keywords go to torch's
    DataLoader (``persistent_workers``, ``prefetch_factor``, ...).
    """
    data = WindowDataset(ds, windows_spec, anchor=anchor)
    sampler = EpochSampler(len(data), seed, epoch, shuffle)
    return torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                                       num_workers=num_workers, pin_memory=pin_memory, **kwargs)
