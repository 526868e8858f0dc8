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

The rooms: Window (what a key holds) in windows.py, its plan and launches in plans.py; the sample
table and each epoch's order in sampling.py; rank shards in shard.py; when and on which stream each
batch is made (prefetch, graph replays, the staging thread) in batches.py; identity keys in
identity.py; the position and its checks at a resume in resume.py. This file holds them together:
the arguments, the dataset held, the epoch's tables, and what one batch is.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from .._util import torch as _torch
from .batches import CpuBatches, CudaBatches
from ..data.dataset import Dataset
from .identity import IDENTITY, Identity, identity_keys
from .resume import Position, resume_point, saved_state
from .sampling import Samples, episode_counts
from .shard import distributed, episode_shard, held_for_rest, loaded_shard
from .torch_keywords import batch_collate, warn_worker_keywords
from ..user_warning import warn
from .plans import BatchPlan
from .windows import Window, check_windows

__all__ = ["DataLoader", "Window", "IDENTITY"]


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
        A new permutation of all samples each epoch, a pure function of (seed, epoch). Default
        False (sample order), as ``torch.utils.data.DataLoader``: pass ``shuffle=True`` to train.
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
        replacing the internal order (works with the defaults; ``shuffle=True`` with a sampler is an
        error, as in torch). ``set_epoch`` is forwarded.
    collate_fn : callable, optional
        Applied to each finished batch dict ``{key: tensor [B, ...]}`` (not torch's list of samples) on the
        consumer's stream before it is yielded; torch's ``default_collate`` is a no-op here.
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
        Instead, split the episodes between ranks (heaviest first, each to the rank with the least so
        far; weight: the bytes of the episode's image frames, which vary per frame in the compressed
        tier, else its samples) and keep only this rank's: ``ds.subset(mine, device)`` (its frames
        copied once, straight to ``device``). When whole episodes cannot balance the ranks to 1% of an
        epoch, the sample table is cut into equal runs instead (an episode may then be held by two
        ranks, each anchoring on its own samples). Load the dataset on the CPU and give
        ``device="cuda:LOCAL_RANK"`` so each GPU holds only its shard. Each rank permutes its own
        samples per (seed, epoch, rank); ranks with fewer samples wrap (or all cut to the smallest with
        ``drop_last``). A dataset loaded with ``Dataset.from_lerobot(..., shard_episodes=True)`` already
        holds only this rank's episodes (never read the others'): the loader takes it as this rank's
        shard.
    cuda_graph : bool
        On CUDA, capture one batch's launches in CUDA graphs (at the second batch) and replay them
        for every full batch: one launch per batch whatever the number of keys, no allocation.
        Each of the ``batch_graph.SLOTS`` (4) graphs writes its own static outputs, which the
        batches handed out alias; a slot is reused only once no batch (nor a view of one) still
        references it, so kept batches are never overwritten, and when the caller holds every
        slot the batch is made eagerly. Memory: 4 batches (outputs and intermediates), kept with
        the loader. Batches are the same either way; False makes every batch with
        eager launches.
    identity : bool or list of str
        Also give each sample's identity, as LeRobot's batches do (True: all of ``IDENTITY``, or a list
        of them): ``episode_index`` (the source's episode numbers, ``Episode.index``), ``frame_index``
        (the anchor's step within its episode), ``timestamp`` (the anchor time, float64 seconds in the
        dataset's time base), ``index`` (LeRobot's dataset-wide ``index`` of the anchor frame, whatever
        episodes are loaded; for a set without that column the sample's row, ``row``: in ``loader.samples``,
        asked for by name), ``task_index`` (into
        ``ds.tasks``, -1 for an episode without a task), all ``[B]`` tensors gathered on the device from
        tables built here (in the CUDA graph, no host sync), and ``task``: the task text as a list of B
        str, made on the host from the epoch's host-side order (never read from the GPU). Off by
        default: the default batch stays what the windows make, with no host work that grows with B.
        ``task_index`` and ``task`` are the sample frame's own where the source has a task per frame.
    delta_timestamps : dict, optional
        LeRobot's ``{key: [seconds, ...]}``: the batch is then LeRobot's (robocache/lerobot/contract.py, docs/loader.md):
        every feature of the dataset, keys in ``delta_timestamps`` with a time axis and ``{key}_is_pad``,
        the others without; images float32 CHW in [0, 1]; the identity keys with a dataset-wide ``index``.
        ``windows`` may add keys of their own. Deltas off the ``1 / fps`` grid by more than
        ``tolerance_s`` (LeRobot's 1e-4 s) raise a ValueError naming the key and values. ``image_transforms`` (an
        ``augment.Augment``, a torchvision Compose or LeRobot's ImageTransforms) augments its cameras in the gather.
    num_workers, pin_memory, persistent_workers, prefetch_factor, worker_init_fn, timeout,
    multiprocessing_context, pin_memory_device, in_order :
        Accepted, and one warning names those that would change torch's loader (robocache/loader/torch_keywords.py):
        batches are made on the device by kernels, with no workers to start and nothing to pin.
    """

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, *, windows: Mapping[str, Window | str] | None = None, anchor: str | None = None,
                 rate: float | None = None, sampler: Iterable[int] | None = None, image_transforms=None,
                 collate_fn: Callable[[dict], Any] | None = None, generator=None, device=None,
                 num_workers: int | None = None, pin_memory: bool | None = None,
                 persistent_workers: bool | None = None, prefetch_factor: int | None = None,
                 worker_init_fn: Callable | None = None, timeout: float | None = None,
                 multiprocessing_context=None, pin_memory_device: str | None = None, in_order: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, shard_episodes: bool = False,
                 cuda_graph: bool = True, identity: bool | Iterable[str] = False,
                 delta_timestamps: Mapping[str, Iterable[float]] | None = None, tolerance_s: float = 1e-4):
        torch = _torch()
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset: expected a robocache.Dataset, got {type(dataset).__name__}")
        # LeRobot's batches (robocache/lerobot/contract.py): its features as windows, the identity keys, its shapes
        self._lerobot = None
        if delta_timestamps is not None or image_transforms is not None:   # (transforms need timestamps: below)
            from ..lerobot.contract import LeRobotBatches
            self._lerobot = LeRobotBatches(dataset, delta_timestamps, tolerance_s, image_transforms)
            windows = {**self._lerobot.windows, **dict(windows or {})}
            identity = True
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        windows = check_windows(windows)
        warn_worker_keywords(dict(num_workers=num_workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                                  prefetch_factor=prefetch_factor, worker_init_fn=worker_init_fn, timeout=timeout,
                                  multiprocessing_context=multiprocessing_context,
                                  pin_memory_device=pin_memory_device, in_order=in_order))
        if sampler is not None and shuffle:
            # torch raises the same: the sampler decides the order
            raise ValueError("sampler and shuffle=True are mutually exclusive; pass shuffle=False with a sampler")
        if anchor is not None and rate is not None:
            raise ValueError("anchor (a stream's frames) and rate (a uniform grid) are mutually exclusive")
        self.rank, self.world_size = distributed(rank, world_size)
        self.shard_episodes = bool(shard_episodes)
        if sampler is not None and self.shard_episodes:
            raise ValueError("shard_episodes and sampler are mutually exclusive")
        # the whole set, when this loader shards it: a resume at another world size may need episodes
        # of other ranks' shards for the rest of its epoch (load_state_dict)
        dataset, shard, held, self._whole = _rank_share(dataset, windows, anchor, rate, self.rank, self.world_size,
                                                        self.shard_episodes, device)
        self._move_to = device
        if device is not None:
            dataset = dataset.to(device)
        if generator is not None:
            seed = int(torch.randint(0, 2**63 - 1, (), generator=generator))
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.sampler = sampler
        self.collate_fn = batch_collate(collate_fn)
        self.windows = dict(windows)
        self._samples_args = (anchor, rate, identity)
        self._batches: CpuBatches | CudaBatches = CpuBatches(int(batch_size))
        self._bind(dataset, shard, held)
        self.anchor = anchor if rate is None else None
        if rate is None and anchor is None:
            self.anchor = dataset.anchor
        self.rate = rate
        # position: where the next iter() starts when `_fresh` (after construction, set_epoch or
        # load_state_dict), else the last created iterator's, which it moves (the next iter() then
        # starts the epoch after it)
        self._pos, self._fresh = Position(0, [], 0, len(self)), True
        if self.device.type == "cuda":
            # full batches replay a captured graph (batch_graph.py), unless host work makes them
            self._batches = CudaBatches(self.device, self.batch_size, graphs=bool(cuda_graph) and not self._host_plans)
        if self.drop_last and 0 < self.num_samples < self.batch_size:
            _warn_no_batches(self)

    def _bind(self, dataset: Dataset, shard=None, held=None) -> None:
        """Hold ``dataset`` (with ``shard_episodes``: the episodes ``held`` of the whole set's ``shard``):
        the windows' plans over it, the sample table, the identity tables."""
        anchor, rate, identity = self._samples_args
        self.dataset = dataset
        self.device = dataset.device
        self._recipe = BatchPlan(self.windows, dataset)
        self._table = Samples(dataset, self._recipe.names, anchor, rate, shuffle=self.shuffle,
                              drop_last=self.drop_last, seed=self.seed, sampler=self.sampler, rank=self.rank,
                              world_size=self.world_size, shard=shard, held=held)
        self._episode, self._time = self._table.episode, self._table.time  # [N] int64, [N] float64 on the device
        self.identity = identity_keys(identity, self.windows)
        self._ids = Identity(self.identity, dataset, self._table.host_table)
        self._recipe.identify(self._ids, self._episode)
        self._host_plans = self._recipe.host_work
        self._batches.forget()      # a graph over the dataset held before

    def _hold(self, epoch: int, segments) -> None:
        """``shard_episodes``, an epoch resumed at another world size: hold the episodes of this rank's
        run of the samples left as well as its shard's (a copy of the whole set's, as at construction)."""
        held = held_for_rest(self._table, self._whole, epoch, segments)
        if held is not None:
            ds = self._whole if held.size == len(self._whole) else self._whole.subset(held, self._move_to)
            self._bind(ds if self._move_to is None else ds.to(self._move_to), self._table.shard, held)

    # --- samples -------------------------------------------------------------------------

    @property
    def num_samples(self) -> int:
        """Samples per epoch of this rank (the sampler's length when there is one)."""
        return len(self._table)

    def __len__(self) -> int:
        n, b = self.num_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    # --- order and position --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` yields epoch ``epoch`` from its first batch."""
        self._pos, self._fresh = Position(int(epoch), [], 0, len(self)), True
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(int(epoch))

    @property
    def epoch(self) -> int:
        return self._pos.epoch

    def state_dict(self) -> dict:
        """The job's position: where the next batch comes from, for every rank.

        ``epoch``, ``batch`` (batches this rank has been handed in the epoch: the last created
        iterator's count; after a finished epoch, batch 0 of the next), ``samples`` (samples of the
        epoch yielded by all ranks together, each counted once), ``segments`` (``[world_size,
        batch_size, batches]`` of the parts of the epoch run before a resume at another world or batch
        size), ``total_samples`` (an epoch over all ranks) and the settings the order depends on.
        Every rank's copy is the same but for ``rank``: any one restores the whole job
        (``load_state_dict``)."""
        return saved_state(self, self._pos, self._fresh, self._table)

    def load_state_dict(self, state: Mapping) -> None:
        """Resume: the next ``iter()`` yields the rest of the saved epoch, then the next epochs.

        At the saved world size and batch size: batch ``state["batch"]`` onward, batch for batch
        what the saved loader would have yielded. At another (elastic resume, e.g. a state saved by
        rank 0 of 2 loaded by every rank of 3): the rest of the epoch is the samples no rank had
        yielded, split over this loader's ranks (docs/loader.md, "Resume at another world size")."""
        epoch, segments, batch = resume_point(state, self, self._table.total)
        n, b = self._table.count(epoch, segments), self.batch_size
        batches = n // b if self.drop_last else -(-n // b)
        if batch > batches:
            raise ValueError(f"load_state_dict: batch {batch} out of range for {batches} batches")
        self._hold(epoch, segments)
        self._pos, self._fresh = Position(epoch, segments, batch, batches), True
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    @property
    def samples(self):
        """The sample table: ``(episode [N] int64, anchor time [N] float64 seconds)`` on the device
        (with ``shard_episodes``: this rank's, episodes indexing ``loader.dataset``)."""
        return self._episode, self._time

    def order(self, epoch: int | None = None):
        """Sample indices of an epoch (default the current one) in the order its batches take them,
        ``[num_samples]`` int64 on the device; batch k is ``order[k*batch_size:(k+1)*batch_size]``.
        The current epoch resumed at another world or batch size: the indices of its rest."""
        p = self._pos
        if epoch is None or int(epoch) == p.epoch:
            return self._table.order(p.epoch, p.segments)
        return self._table.order(int(epoch))

    # --- iteration -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict]:
        if not self._fresh:
            self.set_epoch(self._pos.epoch + 1)
        # each iterator counts its own batches; state_dict reads the last created one's
        p = self._pos
        # (a whole epoch's batches counted now: a sampler's length may change between epochs)
        self._pos = pos = Position(p.epoch, p.segments, p.batch, p.batches if p.segments else len(self))
        self._fresh = False
        return self._iterate(pos)

    def _epoch_tables(self, pos: "Position"):
        """Episode (with identity tensors: sample row) and anchor time of each sample in the order of
        ``pos``'s epoch (or the rest of it, resumed at another world size)."""
        order = self._table.order(pos.epoch, pos.segments)
        return (order if self._ids.tensors else self._episode[order]), self._time[order]

    def _hand_over(self, batch: dict, pos: "Position"):
        if self._lerobot is not None:
            batch = self._lerobot(batch)
        if self.collate_fn is not None:
            batch = self.collate_fn(batch)
        pos.batch += 1
        return batch

    def _iterate(self, pos: "Position"):
        with self._batches.stream():
            self._recipe.set_epoch(self.seed, pos.epoch)     # augmented windows' draws (a device fill)
            episodes, times = self._epoch_tables(pos)
            # this iterator's order on the host (frame ids, task text), kept here: another iterator or
            # loader.order(e) replaces the table's
            host_order = self._table.host_order
        run = self._batches.run(self._recipe, (episodes, times, host_order), pos.batch, pos.batches,
                                self._table.host_samples, staged=self._host_plans)
        with closing(run):
            for k, batch in run:
                self._ids.attach_task(batch, host_order, k, self.batch_size)
                yield self._hand_over(batch, pos)

    @property
    def cuda_graph(self) -> bool:
        """Whether full batches replay a captured CUDA graph (False after a failed capture)."""
        return self._batches.graphs

    def __repr__(self) -> str:
        where = f"anchor={self.anchor!r}" if self.rate is None else f"rate={self.rate}"
        return (f"DataLoader({self.num_samples} samples, batch_size={self.batch_size}, {len(self)} batches, "
                f"shuffle={self.shuffle}, {where}, keys={list(self.windows)}, device {self.device})")


def _rank_share(dataset: Dataset, windows: Mapping, anchor, rate, rank: int, world: int, shard_episodes: bool,
                device):
    """``(dataset, shard, held, whole)``: the dataset this rank holds (with ``shard_episodes``, its episodes
    copied straight onto ``device`` when one is given); with ``shard_episodes`` the whole set's split
    (shard.Shard), this rank's episodes in it, and the whole set when this loader cut it (an elastic
    resume may need other ranks' episodes)."""
    if getattr(dataset, "shard", None) is not None:     # loaded as this rank's episodes
        return (dataset, *loaded_shard(dataset, anchor, rate, rank, world, shard_episodes), None)
    if not shard_episodes:
        return dataset, None, None, None
    # at one rank too: a state saved at several ranks replays their shards (elastic resume)
    names = list(dict.fromkeys(n for w in windows.values()
                               for n in ([w] if isinstance(w, str) else getattr(w, "names", []))))
    ds, shard, held = episode_shard(dataset, episode_counts(dataset, anchor, rate, names), rank, world, device)
    return ds, shard, held, dataset


def _warn_no_batches(loader: DataLoader) -> None:
    # torch yields nothing here too, but a training loop that silently never steps is rarely meant
    warn(f"robocache.DataLoader: drop_last=True with batch_size={loader.batch_size} and {loader.num_samples} "
         f"samples per epoch{' on this rank' if loader.world_size > 1 else ''}: every epoch has 0 batches; "
         f"use a batch_size <= {loader.num_samples} or drop_last=False")


def lerobot_item(ds, i: int, delta_timestamps=None, tolerance_s: float = 1e-4) -> dict:
    """Frame ``i`` of ``ds`` (``0 <= i < ds.num_frames``) in ``LeRobotDataset[i]``'s format: every feature,
    images float32 CHW in [0, 1], the keys of ``delta_timestamps`` with a time axis and ``{key}_is_pad``, the
    bookkeeping keys and ``task``. For inspection and porting: it builds a one-sample loader (tens of
    milliseconds each call); training batches come from ``DataLoader(ds, B, delta_timestamps=dt)``."""
    N = ds.num_frames
    if not -N <= int(i) < N:
        raise IndexError(f"frame {i} out of range for the {N} frames of the anchor stream {ds.anchor!r}")
    loader = DataLoader(ds, 1, sampler=[int(i) % N], delta_timestamps=delta_timestamps or {},
                        tolerance_s=tolerance_s, cuda_graph=False)
    return {k: v[0] for k, v in next(iter(loader)).items()}
