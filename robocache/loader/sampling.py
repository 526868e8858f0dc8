"""Samples and their order: the sample table and each epoch's permutation (of a rank's shard too).

A sample is ``(episode, anchor time)``: the frames of one stream, or a uniform grid at ``rate`` Hz.
The table is built once on the device. Each epoch's order is drawn on the host (a pure function
of seed, epoch and, with episode shards, rank), then copied to the device once; nothing here
runs per batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sized

import numpy as np

from .._util import torch as _torch
from ..data.dataset import Dataset
from .shard import epoch_seed, rank_samples


def sampler_len(sampler: Iterable[int]) -> int:
    """Samples per epoch of a sampler: its len(), as torch's DataLoader takes it."""
    if not isinstance(sampler, Sized):
        raise TypeError(f"sampler must have a len() (the samples of an epoch), as torch's samplers do; got "
                        f"{type(sampler).__name__}")
    return len(sampler)


def _wrap(idx, n: int):
    """The first n of idx repeated end to end (DistributedSampler's padding); idx[:n] when longer."""
    if idx.shape[0] >= n:
        return idx[:n]
    return idx.repeat(-(-n // idx.shape[0]))[:n]


def _grid(ds: Dataset, names: list[str], rate: float):
    """Uniform anchors at ``rate`` Hz: per episode the first time and the count, host numpy."""
    torch = _torch()
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate must be a positive number of Hz, got {rate!r}")
    ends = [ds.streams[n].episode_ends() for n in names]
    first = torch.stack([f for f, _ in ends]).nan_to_num(math.inf).amin(0).cpu().numpy()
    last = torch.stack([l for _, l in ends]).nan_to_num(-math.inf).amax(0).cpu().numpy()
    has = last >= first
    counts = np.where(has, np.floor((np.where(has, last - first, 0)) * rate + 1e-9).astype(np.int64) + 1, 0)
    return first, counts


def episode_counts(ds: Dataset, anchor, rate, names) -> np.ndarray:
    """Samples per episode, host int64 [E] (the loader's sample table before it is built)."""
    if rate is not None:
        return _grid(ds, [n for n in names if n in ds.streams], float(rate))[1]
    name = anchor if anchor is not None else ds.anchor
    if name is None or name not in ds.streams:
        raise KeyError(f"anchor: unknown stream {name!r}; the dataset has {sorted(ds.streams)}")
    return ds.streams[name].lengths


class Samples:
    """The sample table of a loader and the order of each epoch.

    ``episode [N]`` int64 and ``time [N]`` float64 on the dataset's device; ``order(epoch)`` the
    sample indices this rank takes in that epoch, on the device.

    An epoch is made of segments: normally one, from its start at this loader's world size; a
    resume at another world size or batch size (``segments``: ``(world_size, batch_size, batches)``
    of each earlier part of the epoch, as the saved loaders ran it) starts a new one over the samples
    no rank has yielded yet. Replicated: the rest of the epoch's global permutation, split as the
    whole is. ``shard``: the samples left (whole-set ids, in order) cut into one run per rank, each
    permuted by its rank; the rank reads its run's episodes (``needs``).
    """

    def __init__(self, ds: Dataset, names: list[str], anchor, rate, *, shuffle: bool, drop_last: bool, seed: int,
                 sampler: Iterable[int] | None, rank: int, world_size: int, shard=None,
                 held: np.ndarray | None = None):
        self.shuffle, self.drop_last, self.seed, self.sampler = shuffle, drop_last, seed, sampler
        self._order = dict(shuffle=shuffle, drop_last=drop_last, seed=seed)   # how a shard's segments are ordered
        self.rank, self.world_size = rank, world_size
        self.shard = shard                        # shard_episodes: the split of the whole set (shard.Shard)
        self.device = ds.device
        self.episode, self.time = self._table(ds, names, anchor, rate)
        if shard is not None:
            # this rank's table holds its episodes (`held`, positions in the whole set) back to back
            self.held = np.asarray(held, np.int64)
            self._local = np.concatenate([[0], np.cumsum(shard.counts[self.held])]).astype(np.int64)
        self.host_order: np.ndarray | None = None
        self._host_table = None

    def host_table(self):
        """``(episode, time)`` of every sample as host numpy (copied once)."""
        if self._host_table is None:
            self._host_table = (self.episode.cpu().numpy(), self.time.cpu().numpy())
        return self._host_table

    def host_samples(self, rows):
        """``(episode, time)`` of the samples ``rows`` (host indices) as host numpy: what a window that
        stages on the host reads instead of the device's tables."""
        ep, t = self.host_table()
        return ep[rows], t[rows]

    @staticmethod
    def _table(ds: Dataset, names, anchor, rate):
        torch = _torch()
        if rate is None:
            name = anchor if anchor is not None else ds.anchor
            if name is None or name not in ds.streams:
                raise KeyError(f"anchor: unknown stream {name!r}; the dataset has {sorted(ds.streams)}")
            s = ds.streams[name]
            if s.kind == "pointcloud":
                raise ValueError(f"anchor: {name!r} is a point-cloud stream; anchor on another stream or a rate")
            lengths = torch.from_numpy(s.lengths)
            ep = torch.repeat_interleave(torch.arange(len(lengths)), lengths).to(ds.device)
            return ep, s.times
        first, counts = _grid(ds, names, float(rate))
        ep = np.repeat(np.arange(len(counts)), counts)
        step = np.arange(ep.size) - np.repeat(np.cumsum(counts) - counts, counts)
        t = first[ep] + step / float(rate) if ep.size else np.zeros(0)
        return (torch.from_numpy(ep).to(ds.device), torch.from_numpy(np.asarray(t, np.float64)).to(ds.device))

    def __len__(self) -> int:
        """Samples per epoch of this rank (the sampler's length when there is one)."""
        if self.sampler is not None:
            return sampler_len(self.sampler)
        n = int(self.episode.shape[0])
        if self.shard is not None:
            sizes = [p.size for p in self.shard.plan(self.world_size)]
            return min(sizes) if self.drop_last else max(sizes)
        if self.world_size == 1:
            return n
        return n // self.world_size if self.drop_last else -(-n // self.world_size)

    @property
    def total(self) -> int:
        """Samples of an epoch over all ranks, before wrapping or dropping (the sampler's length)."""
        if self.sampler is not None:
            return sampler_len(self.sampler)
        if self.shard is not None:
            return self.shard.n
        return int(self.episode.shape[0])

    def count(self, epoch: int, segments) -> int:
        """This rank's samples in ``epoch`` after ``segments`` (``len(self)`` for a whole epoch)."""
        if not segments or self.sampler is not None:
            return len(self)
        if self.shard is not None:
            return int(self._segment(epoch, len(segments), self.world_size, self.rank,
                                     self._left(epoch, segments)).size)
        rest, w = self.total - self._start(segments), self.world_size
        return rest // w if self.drop_last else -(-rest // w)

    def consumed(self, epoch: int, segments) -> int:
        """Samples of ``epoch`` yielded by all ranks together (each once, wrap repeats not counted) after
        ``segments`` ``(world_size, batch_size, batches)``, the last the current one."""
        if self.sampler is not None:
            return min(sum(b * k for _, b, k in segments), sampler_len(self.sampler))
        if self.shard is not None:
            return self.total - int(self._left(epoch, segments).sum())
        return self._start(segments)

    def _start(self, segments) -> int:
        """Replicated: the position in the epoch's global permutation after ``segments``."""
        n, s = self.total, 0
        for w, b, k in segments:
            rest = n - s
            per = rest // w if self.drop_last else -(-rest // w)
            s = min(s + min(b * k, per) * w, n)
        return s

    def _left(self, epoch: int, segments) -> np.ndarray:
        """``shard``: the samples (bool ``[N]`` over the whole set) no rank has yielded after ``segments``."""
        return self.shard.left(epoch, segments, **self._order)

    def _segment(self, epoch: int, i: int, world: int, rank: int, left) -> np.ndarray:
        """``shard``: rank ``rank``'s sample ids (whole set) in segment ``i`` of ``epoch`` (Shard.segment)."""
        return self.shard.segment(epoch, i, world, rank, left, **self._order)

    def needs(self, epoch: int, segments) -> np.ndarray:
        """``shard``: the episodes (positions in the whole set, sorted) this rank reads in ``epoch`` after
        ``segments``: its shard's, and those of its run of a resumed epoch."""
        return self.shard.needs(epoch, segments, self.world_size, self.rank, **self._order)

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """``shard``: rows of this rank's table of whole-set sample ids of its episodes."""
        ep = self.shard.episode_of(ids)
        return self._local[np.searchsorted(self.held, ep)] + ids - self.shard.start[ep]

    def order(self, epoch: int, segments=()):
        """This rank's sample indices on the device, ``[count]`` int64: the epoch from its start, or the
        segment after ``segments``."""
        torch = _torch()
        dev = self.device
        n = int(self.episode.shape[0])
        segments = list(segments)
        if self.sampler is not None:
            idx = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                bad = idx[(idx < 0) | (idx >= n)][0]
                raise IndexError(f"sampler yielded {bad}, outside the {n} samples of the loader")
            host = torch.from_numpy(idx)
        elif self.world_size == 1 and not self.shuffle and not segments:
            self.host_order = np.arange(n, dtype=np.int64)
            return torch.arange(n, device=dev)
        elif self.shard is not None:
            left = self._left(epoch, segments) if segments else None
            host = torch.from_numpy(self._rows(self._segment(epoch, len(segments), self.world_size, self.rank, left)))
        else:                                     # the global permutation's rest, every world_size-th
            if self.shuffle:
                g = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
                host = torch.randperm(n, generator=g)
            else:
                host = torch.arange(n)
            host = host[self._start(segments):]
            w = self.world_size
            per = host.shape[0] // w if self.drop_last else -(-host.shape[0] // w)
            host = _wrap(host, per * w)[self.rank::w] if per else host[:0]
        self.host_order = host.numpy()     # the disk tier's host-side frame ids read it (no GPU read-back)
        if dev.type == "cuda":
            # pinned + non_blocking: an async copy, no sync; the caching host allocator keeps
            # the pinned buffer until the copy has run
            return host.pin_memory().to(dev, non_blocking=True)
        return host
