"""Frames in a read-only memory-mapped cache file: a GPU batch stages its sampled frames through pinned
buffers (robocache.frames.stage)."""
from __future__ import annotations

import warnings

import numpy as np

from .base import Tier


def from_map(a):
    """A torch tensor over a read-only memory map (torch warns about non-writable arrays: the frames are
    only ever read)."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.from_numpy(a)


class DiskTier(Tier):
    name = "disk"
    auto_rank = 2
    holds = "frames in a memory-mapped file"
    needs_cache_folder = True
    ingest_into = "disk"

    def pool_bytes(self, pool: str, size: int, need) -> int:
        # a cached stream maps the entry that is there: no disk space to find
        return 0 if need.cached else size

    def make(self, a, *, format, height, width, path, qscale, device):
        if path is None:
            raise ValueError("tier 'disk' needs a path for the frame file")
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=a.dtype, shape=a.shape)
        mm[...] = a
        mm.flush()
        del mm
        return from_map(np.load(path, mmap_mode="r")), {"path": str(path)}

    def host_staged(self, store) -> bool:
        return store.is_cuda

    def gather_into(self, store, view, ids, scale, host_ids, extra) -> None:
        from ..stage import gather_disk
        gather_disk(store, view, ids, scale, host_ids, extra)
