"""The frame tiers: where a stream's frames live, one class per tier, registered here and nowhere else.

A ``FrameStore`` holds its frames' bytes and geometry; its tier (``store.kind``, an object of one of these
classes) says what those bytes are and does everything that depends on it: what the tier holds, its memory,
gathering sampled frames into a batch, the subset a shard keeps, the move to another device.

=============  ======================  ============================================================
name           class                   holds
=============  ======================  ============================================================
``device``     ``memory.DeviceTier``   the frames in GPU memory (rgb or I420 rows)
``cpu``        ``memory.CpuTier``      the frames in plain memory (a CPU dataset)
``host``       ``host.HostTier``       the frames in pinned host memory the GPU reads directly
``disk``       ``disk.DiskTier``       the frames in a read-only memory-mapped cache file
``compressed`` ``jpeg.JpegTier``       each frame's planes as a JPEG (``jpeg_atlas.JpegAtlasTier``:
                                       several cameras' frames of one timestep in one JPEG)
``lossless``   ``lossless.LosslessTier``  each frame's planes MED + rANS coded
=============  ======================  ============================================================

Adding a tier: a module here with one class (the interface is ``base.Tier``) and one line below.
"""
from __future__ import annotations

from .base import Tier
from .disk import DiskTier
from .host import HostTier
from .jpeg import JpegTier
from .jpeg_atlas import JpegAtlasTier
from .lossless import LosslessTier
from .memory import CpuTier, DeviceTier, memory_tier

REGISTRY: dict[str, type[Tier]] = {}


def register(cls: type[Tier]) -> type[Tier]:
    REGISTRY[cls.name] = cls
    return cls


register(DeviceTier)
register(CpuTier)
register(HostTier)
register(DiskTier)
register(JpegTier)           # the atlas is a layout of this tier: tier_of() picks JpegAtlasTier for atlas parts
register(LosslessTier)

TIERS = tuple(REGISTRY)
# frames="auto": the first of these with room, in this order (device, host, disk, lossless, then lossy JPEG)
AUTO_ORDER = tuple(sorted((n for n, c in REGISTRY.items() if c.auto_rank is not None),
                          key=lambda n: REGISTRY[n].auto_rank or 0))


def tier_of(name: str, *, atlas: bool = False) -> Tier:
    """The tier object called ``name`` (an atlas part's, with ``atlas``); a clear error for any other name."""
    if name not in REGISTRY:
        raise ValueError(f"tier must be one of {TIERS}, got {name!r}")
    cls = REGISTRY[name]
    if atlas:
        if cls is not JpegTier:
            raise ValueError("an atlas part is a jpeg store over the atlas's own data and offsets")
        cls = JpegAtlasTier
    return cls()


__all__ = ["AUTO_ORDER", "REGISTRY", "TIERS", "Tier", "memory_tier", "register", "tier_of"]
