"""Which rank holds which episodes (``shard_episodes``): the heaviest episode first, each to the rank
holding the least so far. Used by the loader (over a loaded dataset: the bytes of each episode's frames)
and by ``Dataset.from_lerobot`` (before loading: rows x pixels per frame from the metadata), so each
rank can read, decode and hold only its own episodes. Deterministic: every rank computes the same.

When whole episodes cannot balance the ranks (fewer or longer episodes than balance allows), the
loader's shards split at sample granularity instead (``rank_samples``): the sample table cut into
``world`` equal runs, so an episode's samples may be shared by two ranks (each holds the whole episode,
which its windows read around the anchor, and anchors only on its own run). An elastic resume cuts
the samples an epoch has left the same way (sampling.Samples)."""

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


def rank_world(shard) -> tuple[int, int]:
    """``(rank, world)`` of ``shard``: True -> torch.distributed's (initialized by torchrun), or an
    explicit ``(rank, world_size)``."""
    if shard is True:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("shard_episodes=True reads the rank from torch.distributed, which is not "
                             "initialized; call dist.init_process_group first (torchrun) or pass "
                             "shard_episodes=(rank, world_size)")
        return dist.get_rank(), dist.get_world_size()
    try:
        rank, world = (int(x) for x in shard)
    except (TypeError, ValueError):
        raise ValueError(f"shard_episodes must be True or (rank, world_size), got {shard!r}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard_episodes: rank {rank} is not in [0, {world})")
    return rank, world
