"""Where a DataLoader is in its epochs, and the checks of a saved position before a resume.

A position is ``(epoch, segments, batch, batches)``; ``segments`` are the parts of the epoch run before a
resume at another world or batch size (elastic resume, sampling.Samples turns them into the samples left).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


class Position:
    """Where an iterator is (or the next one starts): ``epoch``; ``segments``, the earlier parts of the
    epoch run at other world or batch sizes (``(world_size, batch_size, batches)``, elastic resume);
    ``batch``, the batches handed over; ``batches``, how many this part of the epoch has."""

    __slots__ = ("epoch", "segments", "batch", "batches")

    def __init__(self, epoch: int, segments, batch: int, batches: int):
        self.epoch, self.segments, self.batch, self.batches = epoch, [tuple(x) for x in segments], batch, batches


def _count(state: Mapping, key: str, default=None, least: int = 0) -> int:
    """``state[key]`` as an int >= ``least`` (an int or a NumPy integer, never a bool, float or str)."""
    v = state.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
        raise ValueError(f"load_state_dict: {key} must be an int >= {least}, got {v!r}")
    return int(v)


def _setting(state: Mapping, key: str, mine):
    """``state[key]``, a loader setting state_dict() saves as a plain value (an int, a bool, None): an
    array or a list there would compare element-wise (NumPy's "truth value is ambiguous")."""
    v = state[key]
    if v is not None and not isinstance(v, (bool, int, float, str, np.generic)):
        raise ValueError(f"load_state_dict: {key} must be a single value like this loader's {mine!r}, "
                         f"got {type(v).__name__} {v!r}")
    return v


def _segments(state: Mapping) -> list:
    """``state["segments"]``: a list of ``[world_size, batch_size, batches]`` ints (world and batch
    size >= 1)."""
    raw = state.get("segments", [])
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"load_state_dict: segments must be a list of [world_size, batch_size, batches], "
                         f"got {raw!r}")
    out = []
    for x in raw:
        if not isinstance(x, (list, tuple)) or len(x) != 3:
            raise ValueError(f"load_state_dict: segments must be a list of [world_size, batch_size, batches], "
                             f"got {raw!r}")
        w, b, k = x
        out.append((_count({"segments": w}, "segments", least=1), _count({"segments": b}, "segments", least=1),
                    _count({"segments": k}, "segments")))
    return out


def saved_state(loader, pos: Position, fresh: bool, table) -> dict:
    """``loader.state_dict()``: ``pos`` is where the next iterator starts when ``fresh``, else the last
    created one's (a finished epoch: batch 0 of the next); ``table`` (sampling.Samples) counts the
    samples of the epoch all ranks have yielded."""
    e, k, segments = pos.epoch, pos.batch, pos.segments
    if not fresh and k >= pos.batches:
        e, k, segments = e + 1, 0, []
    now = [*segments, [loader.world_size, loader.batch_size, k]]
    return {"epoch": e, "batch": k, "samples": table.consumed(e, now),
            "segments": [list(x) for x in segments], "seed": loader.seed, "num_samples": loader.num_samples,
            "total_samples": table.total, "batch_size": loader.batch_size, "shuffle": loader.shuffle,
            "drop_last": loader.drop_last, "rank": loader.rank, "world_size": loader.world_size}


def resume_point(state: Mapping, loader, total: int) -> tuple[int, list, int]:
    """``(epoch, segments, batch)`` of a ``state_dict()`` for ``loader`` (whose epoch has ``total``
    samples over all ranks): the saved part of the epoch closed as a segment when the world or batch
    size differs. A state that would not reproduce the saved order is an error naming the setting."""
    if not isinstance(state, Mapping):
        raise TypeError(f"load_state_dict: state must be a dict (a state_dict()), got {type(state).__name__}")
    for k in ("epoch", "batch"):
        if k not in state:
            raise ValueError(f"load_state_dict: state has no {k!r}; give what state_dict() returned")
    epoch, batch = _count(state, "epoch"), _count(state, "batch")
    for k in ("seed", "shuffle", "drop_last"):
        if k in state and _setting(state, k, getattr(loader, k)) != getattr(loader, k):
            raise ValueError(f"load_state_dict: {k} was {state[k]!r} when saved, this loader has "
                             f"{getattr(loader, k)!r}; resume would not reproduce the saved order")
    world = _count(state, "world_size", loader.world_size, least=1)
    size = _count(state, "batch_size", loader.batch_size, least=1)
    segments = _segments(state)
    same = world == loader.world_size and size == loader.batch_size
    # the samples of an epoch over all ranks (a state from before total_samples: this rank's, where
    # the sizes are the same)
    for k, mine in (("total_samples", total), ("num_samples", loader.num_samples)):
        if k in state and _count(state, k) != mine and (k == "total_samples" or same and "total_samples" not in state):
            raise ValueError(f"load_state_dict: {k} was {state[k]!r} when saved, this loader has {mine!r}; "
                             f"resume would not reproduce the saved order")
    if not same or segments:
        if loader.sampler is not None:
            raise ValueError(f"load_state_dict: saved at world_size {world}, batch_size {size}; this loader "
                             f"has {loader.world_size}, {loader.batch_size} and a sampler, which orders the "
                             f"samples itself: resume it at the saved sizes")
    if not same:
        # the saved job's part of the epoch is done: a new segment over the samples left
        segments, batch = [*segments, (world, size, batch)], 0
    return epoch, segments, batch
