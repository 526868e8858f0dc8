"""Frames held in the dataset device's own memory: GPU memory (``device``) or plain memory (``cpu``)."""
from __future__ import annotations

from .base import Tier
from .rows import take_rows


class DeviceTier(Tier):
    name = "device"
    auto_rank: int | None = 0
    holds = "frames in GPU memory"
    on_gpu = True
    in_memory = True
    ingest_into = "device"

    def pools(self, cpu: bool) -> tuple:
        return ("host",) if cpu else ("device",)

    def planned_name(self, cpu: bool) -> str:
        return "cpu" if cpu else self.name

    def for_device(self, device) -> Tier:
        return memory_tier(device)

    def make(self, a, *, format, height, width, path, qscale, device):
        import torch
        return torch.from_numpy(a).to(device), {}

    def subset(self, store, rows, dest):
        # copied once, straight to where the shard will live
        data = take_rows(store.data, rows, pinned=False, device=dest)
        return store.replaced(data=data, kind=memory_tier(data.device), device=dest, rows=None)

    def to(self, store, device):
        rows = None if store.rows is None else store.rows.to(device)
        return store.replaced(data=store.data.to(device), kind=memory_tier(device), device=device, rows=rows)


class CpuTier(DeviceTier):
    """The device tier of a CPU dataset."""
    name = "cpu"
    auto_rank = None     # a CPU dataset's memory tier: frames="device" or "host" lands here
    holds = "frames in plain memory"
    on_gpu = False
    decoded_in_host = True
    ingest_into = "host"     # decoded into host memory (not pinned: robocache.frames.ingest on a CPU)


def memory_tier(device) -> Tier:
    """The tier of frames held in ``device``'s own memory: ``cpu`` or ``device``."""
    return CpuTier() if device.type == "cpu" else DeviceTier()
