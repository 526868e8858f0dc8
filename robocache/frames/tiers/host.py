"""Frames in pinned host memory the GPU reads directly: only the sampled frames cross the bus."""
from __future__ import annotations

from .base import Tier
from .rows import take_rows


class HostTier(Tier):
    name = "host"
    auto_rank = 1
    holds = "frames in pinned host memory"
    decoded_in_host = True
    ingest_into = "host"

    def planned_name(self, cpu: bool) -> str:
        return "cpu" if cpu else self.name      # on the CPU, pinned memory buys nothing

    def make(self, a, *, format, height, width, path, qscale, device):
        import torch
        from ..pinned import pin
        return pin(torch.from_numpy(a)), {}

    def pinned(self, store) -> bool:
        return bool(store.data.is_pinned())

    def subset(self, store, rows, dest):
        # a shard bound for a GPU is copied straight into pinned memory (a copy to plain memory first, then
        # pinned, made two ranks building at once take 4.5 s for a 4.4 GB shard)
        pinned = dest.type == "cuda" or store.data.is_pinned()
        return store.replaced(data=take_rows(store.data, rows, pinned=pinned), device=dest, rows=None)

    def to(self, store, device):
        data = store.data
        if device.type == "cuda" and not data.is_pinned():
            from ..pinned import pin
            data = pin(data)
        return store.replaced(data=data, device=device, rows=None if store.rows is None else store.rows.to(device))
