"""Samples and their order: the sample table, rank shards and each epoch's permutation.

A sample is ``(episode, anchor time)``: the frames of one stream, or a uniform grid at ``rate`` Hz.
The table is built once on the device. Each epoch's order is drawn on the host (a pure function
of seed, epoch and, with episode shards, rank), then copied to the device once; nothing here
runs per batch.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from .dataset import Dataset, _torch
from .shard import assign

def epoch_seed(seed: int, epoch: int, *more: int) -> int:
    """64-bit seed of one epoch's order, a pure function of (seed, epoch, *more)."""
    s = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1), *more]).generate_state(2, np.uint32)
    return int(s[0]) | (int(s[1] & 0x7FFFFFFF) << 32)


def distributed(rank, world_size) -> tuple[int, int]:
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


def _episode_weights(ds: Dataset, counts: np.ndarray) -> np.ndarray:
    """What balances the ranks: the bytes of each episode's image frames where the dataset has image
    streams (the memory a rank holds: a compressed frame's size varies with its content), else its
    sample count."""
    from .frames.store import FrameStore
    image = [s for s in ds.streams.values() if isinstance(s.values, FrameStore)]
    if not image:
        return np.asarray(counts, np.int64)
    return sum(s.values.episode_bytes(s._offsets_host) for s in image)


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


def episode_shard(ds: Dataset, names: list[str], anchor, rate, rank: int, world: int, drop_last: bool):
    """This rank's episodes of ``ds`` (``ds.subset``) and the samples every rank yields per epoch."""
    counts = _episode_counts(ds, anchor, rate, names)
    owner = assign(_episode_weights(ds, counts), world)
    held = np.bincount(owner, weights=counts, minlength=world).astype(np.int64)
    per_rank = int(held.min() if drop_last else held.max())
    if per_rank and held.min() == 0:
        raise ValueError(f"shard_episodes: {int((held == 0).sum())} of {world} ranks get no "
                         f"samples ({len(ds)} episodes); use shard_episodes=False")
    return ds.subset(np.flatnonzero(owner == rank)), per_rank


def loaded_shard(ds: Dataset, names: list[str], anchor, rate, rank: int, world: int, shard_episodes: bool,
                 drop_last: bool) -> int:
    """Samples every rank yields per epoch for a dataset loaded as one rank's episodes
    (``ds.shard``, from_lerobot's ``shard_episodes``), after checking it is this rank's."""
    r, w, samples = ds.shard
    if (r, w) != (rank, world):
        raise ValueError(f"the dataset holds the episodes of rank {r} of {w} (loaded with shard_episodes) but "
                         f"this loader is rank {rank} of {world}")
    if not shard_episodes:
        raise ValueError("the dataset holds one rank's episodes (loaded with shard_episodes): pass "
                         "shard_episodes=True to the DataLoader too")
    if rate is not None or (anchor is not None and anchor != ds.anchor):
        raise ValueError("a dataset loaded with shard_episodes counts each rank's samples as its metadata's rows "
                         "(the default anchor): pass no anchor= or rate=, or load the whole set and let the "
                         "loader shard it")
    here = int(_episode_counts(ds, None, None, names).sum())
    if here != samples[rank]:
        raise ValueError(f"shard_episodes: this rank holds {here} samples but the metadata listed {samples[rank]} "
                         f"for its episodes (files skipped, or rows that differ from the metadata); ranks would "
                         f"yield different batch counts")
    if min(samples) == 0:
        raise ValueError(f"shard_episodes: {samples.count(0)} of {world} ranks get no samples")
    return int(min(samples) if drop_last else max(samples))


class Samples:
    """The sample table of a loader and the order of each epoch.

    ``episode [N]`` int64 and ``time [N]`` float64 on the dataset's device; ``order(epoch)`` the
    sample indices this rank takes in that epoch, on the device.
    """

    def __init__(self, ds: Dataset, names: list[str], anchor, rate, *, shuffle: bool, drop_last: bool, seed: int,
                 sampler: Iterable[int] | None, rank: int, world_size: int, per_rank: int | None):
        self.shuffle, self.drop_last, self.seed, self.sampler = shuffle, drop_last, seed, sampler
        self.rank, self.world_size, self.per_rank = rank, world_size, per_rank
        self.device = ds.device
        self.episode, self.time = self._table(ds, names, anchor, rate)
        self.host_order = None
        self._host_table = None

    def host_table(self):
        """``(episode, time)`` of every sample as host numpy (copied once, for the disk tier)."""
        if self._host_table is None:
            self._host_table = (self.episode.cpu().numpy(), self.time.cpu().numpy())
        return self._host_table

    @staticmethod
    def _table(ds: Dataset, names, anchor, rate):
        torch = _torch()
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
        first, counts = _grid(ds, names, float(rate))
        ep = np.repeat(np.arange(len(counts)), counts)
        step = np.arange(ep.size) - np.repeat(np.cumsum(counts) - counts, counts)
        t = first[ep] + step / float(rate) if ep.size else np.zeros(0)
        return (torch.from_numpy(ep).to(ds.device), torch.from_numpy(np.asarray(t, np.float64)).to(ds.device))

    def __len__(self) -> int:
        """Samples per epoch of this rank (the sampler's length when there is one)."""
        if self.sampler is not None:
            return len(self.sampler)
        n = int(self.episode.shape[0])
        if self.world_size == 1:
            return n
        if self.per_rank is not None:
            return self.per_rank
        return n // self.world_size if self.drop_last else -(-n // self.world_size)

    def order(self, epoch: int):
        """This epoch's sample indices on the device: [len(self)] int64."""
        torch = _torch()
        dev = self.device
        n = int(self.episode.shape[0])
        if self.sampler is not None:
            idx = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                bad = idx[(idx < 0) | (idx >= n)][0]
                raise IndexError(f"sampler yielded {bad}, outside the {n} samples of the loader")
            host = torch.from_numpy(idx)
        elif self.world_size == 1 and not self.shuffle:
            self.host_order = np.arange(n, dtype=np.int64)
            return torch.arange(n, device=dev)
        else:
            if self.shuffle:
                extra = (self.rank,) if self.per_rank is not None else ()
                g = torch.Generator().manual_seed(epoch_seed(self.seed, epoch, *extra))
                host = torch.randperm(n, generator=g)
            else:
                host = torch.arange(n)
            if self.per_rank is not None:             # this rank's own samples
                host = _wrap(host, self.per_rank)
            elif self.world_size > 1:                  # the global permutation, every world_size-th
                host = _wrap(host, len(self) * self.world_size)[self.rank::self.world_size]
        self.host_order = host.numpy()     # the disk tier's host-side frame ids read it (no GPU read-back)
        if dev.type == "cuda":
            # pinned + non_blocking: an async copy, no sync; the caching host allocator keeps
            # the pinned buffer until the copy has run
            return host.pin_memory().to(dev, non_blocking=True)
        return host
