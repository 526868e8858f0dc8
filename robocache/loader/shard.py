"""Sharding, all of it: which rank holds which episodes (``shard_episodes``): the heaviest episode
first, each to the rank holding the least so far. Used by the loader (over a loaded dataset: the bytes
of each episode's frames) and by ``Dataset.from_lerobot`` (before loading: rows x pixels per frame from
the metadata), so each rank can read, decode and hold only its own episodes. Deterministic: every rank computes the same.

When whole episodes cannot balance the ranks (fewer or longer episodes than balance allows), the
loader's shards split at sample granularity instead (``rank_samples``): the sample table cut into
``world`` equal runs, so an episode's samples may be shared by two ranks (each holds the whole episode,
which its windows read around the anchor, and anchors only on its own run). An elastic resume cuts
the samples an epoch has left the same way (``Shard.segment``: each rank's run, in its order).

Here: the split itself (``assign``, ``rank_samples``), each epoch's per-rank order of it, resumed or not
(``Shard.segment``, ``left``, ``needs``; seeded by ``epoch_seed``), a loader's shard of a loaded dataset
(``episode_shard``) or of one loaded as a rank's episodes (``loaded_shard``), the episodes a resumed epoch
needs (``held_for_rest``), and from_lerobot's choice of episodes to read (``lerobot_shard``). Nothing of
robocache is imported at module level: the Dataset uses this file."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class LoadedShard(NamedTuple):
    """``Dataset.shard`` of a set loaded as one rank's episodes (``from_lerobot(shard_episodes=...)``): the
    rank, the world size, every rank's sample count, and the metadata's samples and balance weights of
    every episode of the set (``[E]``), from which the loader makes any world size's shards again."""
    rank: int
    world: int
    samples: list
    counts: np.ndarray
    weights: np.ndarray


def assign(weights, world: int) -> np.ndarray:
    """Owner rank of each episode (int64 ``[E]``); ties go to the lowest rank."""
    weights = np.asarray(weights, np.int64)
    owner = np.zeros(weights.size, np.int64)
    load = np.zeros(world, np.int64)
    for e in np.argsort(-weights, kind="stable"):
        r = int(np.argmin(load))
        owner[e] = r
        load[r] += weights[e]
    return owner


#: the fraction of an epoch whole-episode shards may leave unbalanced (padded by wrapping, or dropped
#: with ``drop_last``) before the shards split episodes instead
TOLERANCE = 0.01


def rank_samples(counts, weights, world: int) -> list[np.ndarray]:
    """Each rank's samples: sorted ids into the table of every episode's samples back to back
    (episode-major, ``counts [E]`` samples per episode). Whole episodes (``assign`` by ``weights``)
    when that leaves the ranks' sample counts within ``TOLERANCE`` of an epoch both ways (what
    ``drop_last`` drops, what wrapping repeats), else the table, its episodes laid out rank by rank as
    whole episodes would go, cut into ``world`` runs of ``N // world`` or one more samples: the
    balance of samples is then exact whatever the episodes, that of the weights close to it."""
    counts = np.asarray(counts, np.int64)
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(start[-1])
    owner = assign(weights, world)
    held = np.bincount(owner, weights=counts, minlength=world).astype(np.int64)
    if held.min() > 0 and max(world * held.max() - n, n - world * held.min()) <= TOLERANCE * n:
        out = []
        for r in range(world):
            mine = np.flatnonzero(owner == r)
            out.append(np.concatenate([np.arange(start[e], start[e + 1]) for e in mine]).astype(np.int64))
        return out
    # the episodes laid out rank by rank as whole episodes would go (so a run keeps close to the
    # weights' balance: a compressed frame's bytes vary), that table cut into equal runs
    order = np.lexsort((np.arange(counts.size), owner))
    ids = np.concatenate([np.arange(start[e], start[e + 1]) for e in order]).astype(np.int64) if n else start[:0]
    bounds = n * np.arange(world + 1, dtype=np.int64) // world
    return [np.sort(ids[bounds[r]:bounds[r + 1]]) for r in range(world)]


def distributed(rank, world_size) -> tuple[int, int]:
    """(rank, world size): as given (checked), else torch.distributed's when initialized, else (0, 1).
    The one place a rank and a world size are resolved (the loader's arguments, from_lerobot's shards)."""
    if rank is None and world_size is None:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("rank and world_size: give both or neither (neither: torch.distributed's)")
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} / world_size {world_size}: need 0 <= rank < world_size")
    return rank, world_size


def rank_world(shard) -> tuple[int, int]:
    """``(rank, world)`` of ``shard``: True -> torch.distributed's (initialized by torchrun), or an
    explicit ``(rank, world_size)``."""
    if shard is True:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("shard_episodes=True reads the rank from torch.distributed, which is not "
                             "initialized; call dist.init_process_group first (torchrun) or pass "
                             "shard_episodes=(rank, world_size)")
        return distributed(None, None)
    try:
        rank, world = (int(x) for x in shard)
    except (TypeError, ValueError):
        raise ValueError(f"shard_episodes must be True or (rank, world_size), got {shard!r}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard_episodes: rank {rank} is not in [0, {world})")
    return rank, world


def _episode_weights(ds, counts: np.ndarray) -> np.ndarray:
    """What balances the ranks: the bytes of each episode's image frames where the dataset has image
    streams (the memory a rank holds: a compressed frame's size varies with its content), else its
    sample count."""
    image = [s for s in ds.streams.values() if s.frames is not None]
    if not image:
        return np.asarray(counts, np.int64)
    return sum(s.frames.episode_bytes(s.offsets_host) for s in image)



class Shard:
    """The split of a whole dataset's samples between ranks (the loader's ``shard_episodes``), kept so
    that any world size's shards can be made again (elastic resume): samples per episode and what
    balances the ranks, host int64 ``[E]``. Sample ids index the table of every episode's samples
    back to back (episode-major)."""

    def __init__(self, counts, weights):
        self.counts = np.asarray(counts, np.int64)
        self.weights = np.asarray(weights, np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._plans: dict[int, list[np.ndarray]] = {}

    @property
    def n(self) -> int:
        return int(self.start[-1])

    def plan(self, world: int) -> list[np.ndarray]:
        """Each rank's sample ids at ``world`` ranks (sorted; shard.rank_samples)."""
        if world not in self._plans:
            self._plans[world] = rank_samples(self.counts, self.weights, world)
        return self._plans[world]

    def episode_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.start, ids, side="right") - 1

    def segment(self, epoch: int, i: int, world: int, rank: int, left, *, shuffle: bool, drop_last: bool,
                seed: int) -> np.ndarray:
        """The sample ids (whole set) rank ``rank`` of ``world`` takes in segment ``i`` of ``epoch``: its
        shard's (``left`` None: the epoch from its start), or its run of the samples ``left`` cut into
        ``world`` equal runs (a resumed epoch: balanced to a sample, whatever was left); permuted per
        (seed, epoch, rank[, i]), wrapped to the largest rank's count (cut to the smallest with
        drop_last). A rank with no run (fewer samples left than ranks) repeats its shard's (the wrap's
        padding)."""
        import torch
        plan = self.plan(world)
        owns = plan if left is None else runs(np.flatnonzero(left), world)
        sizes = [o.size for o in owns]
        per = min(sizes) if drop_last else max(sizes)
        own = owns[rank] if owns[rank].size or not per else plan[rank]
        if shuffle:
            g = torch.Generator().manual_seed(epoch_seed(seed, epoch, rank, *((i,) if i else ())))
            own = own[torch.randperm(own.size, generator=g).numpy()]
        return np.resize(own, per) if per else own[:0]

    def left(self, epoch: int, segments, **order) -> np.ndarray:
        """The samples (bool ``[n]``) no rank has yielded after ``segments`` ``(world, batch, batches)``."""
        left = np.ones(self.n, bool)
        for i, (w, b, k) in enumerate(segments):
            taken = [self.segment(epoch, i, w, r, None if i == 0 else left, **order)[:b * k] for r in range(w)]
            for t in taken:
                left[t] = False
        return left

    def needs(self, epoch: int, segments, world: int, rank: int, **order) -> np.ndarray:
        """The episodes (sorted) rank ``rank`` reads in ``epoch`` after ``segments``: its shard's, and those
        of its run of a resumed epoch."""
        ids = self.plan(world)[rank]
        if segments:
            ids = np.concatenate([ids, self.segment(epoch, len(segments), world, rank,
                                                    self.left(epoch, segments, **order), **order)])
        return np.unique(self.episode_of(ids))


def epoch_seed(seed: int, epoch: int, *more: int) -> int:
    """64-bit seed of one epoch's order, a pure function of (seed, epoch, *more)."""
    s = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1), *more]).generate_state(2, np.uint32)
    return int(s[0]) | (int(s[1] & 0x7FFFFFFF) << 32)


def runs(ids: np.ndarray, world: int) -> list[np.ndarray]:
    """``ids`` cut into ``world`` runs of ``len // world`` or one more, in order."""
    cut = ids.size * np.arange(world + 1, dtype=np.int64) // world
    return [ids[cut[r]:cut[r + 1]] for r in range(world)]


def episode_shard(ds, counts, rank: int, world: int, device=None):
    """This rank's episodes of ``ds`` (``ds.subset``, which it keeps, copied onto ``device``), the
    :class:`Shard` of the whole set and the kept episodes' positions in ``ds`` (sorted); ``counts``: the
    loader's samples per episode."""
    shard = Shard(counts, _episode_weights(ds, counts))
    sizes = np.array([p.size for p in shard.plan(world)])
    if sizes.max() and sizes.min() == 0:
        raise ValueError(f"shard_episodes: {int((sizes == 0).sum())} of {world} ranks get no "
                         f"samples ({len(ds)} episodes, {shard.n} samples); use shard_episodes=False")
    held = np.unique(shard.episode_of(shard.plan(world)[rank]))
    return (ds if held.size == len(ds) else ds.subset(held, device)), shard, held


def loaded_shard(ds, anchor, rate, rank: int, world: int, shard_episodes: bool):
    """The :class:`Shard` of the whole set and the positions in it of ``ds``'s episodes, for a dataset
    loaded as one rank's episodes (``ds.shard``, from_lerobot's ``shard_episodes``), after checking it
    is this rank's and holds the samples its metadata listed."""
    loaded = ds.shard
    if (loaded.rank, loaded.world) != (rank, world):
        raise ValueError(f"the dataset holds the episodes of rank {loaded.rank} of {loaded.world} (loaded with "
                         f"shard_episodes) but this loader is rank {rank} of {world}")
    if not shard_episodes:
        raise ValueError("the dataset holds one rank's episodes (loaded with shard_episodes): pass "
                         "shard_episodes=True to the DataLoader too")
    if rate is not None or (anchor is not None and anchor != ds.anchor):
        raise ValueError("a dataset loaded with shard_episodes counts each rank's samples as its metadata's rows "
                         "(the default anchor): pass no anchor= or rate=, or load the whole set and let the "
                         "loader shard it")
    shard = Shard(loaded.counts, loaded.weights)
    held = np.unique(shard.episode_of(shard.plan(world)[rank]))
    here, listed = ds.streams[ds.anchor].lengths, shard.counts[held]
    if here.shape != listed.shape or (here != listed).any():
        raise ValueError(f"shard_episodes: this rank holds {int(here.sum())} samples in {here.size} episodes but "
                         f"the metadata listed {int(listed.sum())} in {listed.size} for its episodes (files "
                         f"skipped, or rows that differ from the metadata); ranks would yield different batch "
                         f"counts")
    if min(loaded.samples) == 0:
        raise ValueError(f"shard_episodes: {loaded.samples.count(0)} of {world} ranks get no samples")
    return shard, held


def held_for_rest(table, whole, epoch: int, segments):
    """``shard_episodes``, an epoch resumed at another world size (``segments``): the episodes (positions
    in the whole set) this rank must hold for its run of the samples left as well as its shard's, or
    None when the ``table`` (sampling.Samples) holds them already. ``whole``: the whole set, None for a
    dataset loaded as one rank's episodes (which cannot read the others': an error)."""
    if table.shard is None or not segments:
        return None
    need = table.needs(epoch, segments)
    if np.isin(need, table.held).all():
        return None
    if whole is None:
        raise ValueError("load_state_dict: the rest of this epoch, saved at another world or batch size, "
                         "needs episodes this rank's dataset does not hold (it was loaded as one rank's "
                         "episodes, from_lerobot's shard_episodes): resume at the saved world and batch "
                         "size, or load the whole set and pass shard_episodes=True to the DataLoader")
    return np.union1d(table.held, need)


def lerobot_shard(path, shard_episodes, episodes, video_resize):
    """(this rank's episodes, its :class:`LoadedShard`) of a LeRobot set, from its metadata: the
    episodes holding the rank's samples (``rank_samples``: whole episodes, or runs of samples when whole
    episodes cannot balance the ranks, an episode then read by the two ranks sharing it)."""
    from ..readers.lerobot import episode_weights
    rank, world = rank_world(shard_episodes)
    ids, rows, weights = episode_weights(path, episodes=episodes, video_resize=video_resize)
    plan = rank_samples(rows, weights, world)
    start = np.concatenate([[0], np.cumsum(rows)])
    mine = [ids[i] for i in np.unique(np.searchsorted(start, plan[rank], side="right") - 1)]
    if not mine:
        raise ValueError(f"shard_episodes: rank {rank} of {world} gets none of the {len(ids)} episodes; "
                         f"use fewer ranks or shard_episodes=False")
    return mine, LoadedShard(rank, world, [int(p.size) for p in plan], np.asarray(rows, np.int64),
                             np.asarray(weights, np.int64))
