"""Which rank holds which episodes (``shard_episodes``): the heaviest episode first, each to the rank
holding the least so far. Used by the loader (over a loaded dataset: the bytes of each episode's frames)
and by ``Dataset.from_lerobot`` (before loading: rows x pixels per frame from the metadata), so each
rank can read, decode and hold only its own episodes. Deterministic: every rank computes the same."""

from __future__ import annotations

import numpy as np


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
