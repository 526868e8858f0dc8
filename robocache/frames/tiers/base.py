"""The interface every frame tier implements (robocache.frames.tiers registers them).

A tier object carries no frames: the ``FrameStore`` it belongs to holds the bytes (``store.data``), their
geometry and, for a subset, its row map; the tier says what those bytes are and does what depends on it.
"""
from __future__ import annotations

import math

import numpy as np


class Tier:
    """One place frames can live. Class attributes describe it; methods take the store they serve."""

    name = ""
    holds = ""           # what the tier holds, in words (repr, docs, errors)
    coded = False        # frames are variable-size bitstreams + offsets (store.offsets)
    formats: tuple = ("rgb", "yuv420")   # the store formats this tier keeps
    on_gpu = False       # the storage itself is GPU memory (the frames move with the store's device)
    needs_cache_folder = False   # the storage is a file it writes in the cache folder
    lossy = False        # batches differ from the decoded frames (JPEG): the plan warns when auto picks it
    shares_atlas = False  # cameras of one geometry may share its frames (robocache.frames.atlas)
    decoded_in_host = False      # decoded rows held in host RAM (counted against the host budget)
    auto_rank: int | None = None     # where frames="auto" tries it (lowest first); None: never a plan choice
    ingest_into = ""     # where ingest_videos decodes its frames ("" for a coded tier: ingest_compressed codes)
    in_memory = False    # the storage is a plain tensor on the store's own device (read as it is)

    def __repr__(self) -> str:
        return f"<{self.name} tier: {self.holds}>"

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    # --- the memory plan (robocache.frames.plan) ---------------------------------------------------

    def pools(self, cpu: bool) -> tuple:
        """The budgets (device, host, disk) this tier's bytes may come from, in order of preference."""
        return (self.name,)

    def planned_bytes(self, need) -> int:
        """What a stream of ``need`` (plan.Need: frames, geometry) takes here, from metadata alone."""
        return need.nbytes

    def pool_bytes(self, pool: str, size: int, need) -> int:
        """What the stream draws from ``pool``: its size (the disk tier over a cached entry: nothing)."""
        return size

    def planned_name(self, cpu: bool) -> str:
        """The tier a stream planned here is built in (a CPU dataset's memory tiers are ``cpu``)."""
        return self.name

    # --- made and attached ---------------------------------------------------------------------

    def make(self, a: np.ndarray, *, format: str, height: int, width: int, path, qscale: int, device):
        """``(data, extra store keywords)`` holding rows ``a`` (numpy ``[N, H, W, C]`` rgb or ``[N, bytes]``
        yuv420) in this tier: what ``FrameStore.create`` stores."""
        raise NotImplementedError

    def for_device(self, device) -> "Tier":
        """The tier a store made for ``device`` lands in (the memory tiers: the device's own)."""
        return self

    def attach(self, store) -> None:
        """Called once by the store's constructor: the tier's own checks and set-up of ``store.data``
        (pinning for a GPU, a device copy of offsets)."""

    # --- memory ----------------------------------------------------------------------------------

    def frame_bytes(self, store) -> int:
        """Stored bytes per frame (coded tiers: the mean)."""
        return math.prod(store.data.shape[1:]) * store.data.element_size()

    def nbytes(self, store) -> int:
        """Bytes the storage holds (a disk-tier subset: the whole file it maps)."""
        return int(store.data.shape[0]) * self.frame_bytes(store)

    def episode_bytes(self, store, offsets: np.ndarray) -> np.ndarray:
        """Stored bytes of each episode's frames, for frame ``offsets [E+1]``."""
        return np.diff(offsets) * self.frame_bytes(store)

    def host_staged(self, store) -> bool:
        """Whether a GPU batch needs its frame ids on the host (the loader then hands them from its host
        order instead of reading them back from the GPU)."""
        return False

    def pinned(self, store) -> bool:
        """Whether the storage is pinned host memory (the GPU reads it directly)."""
        return False

    # --- batches ---------------------------------------------------------------------------------

    def gather_into(self, store, view, ids, scale, host_ids, extra) -> None:
        """Frames ``ids`` (int64 on the store's device; < 0: a zero frame) decoded into ``view``
        ``[M, H', W', C]`` by ``robocache._C.gather_frames`` (or the tier's decoder ahead of it)."""
        from ..._C import gather_frames
        gather_frames(store.data, store.storage_ids(ids), view, format=store.format, height=store.height,
                      width=store.width, channels=store.channels, matrix=store.gather_matrix,
                      full_range=store.full_range, scale=scale, **(extra or {}))

    # --- copies ----------------------------------------------------------------------------------

    def subset(self, store, rows: np.ndarray, dest):
        """The store with only storage rows ``rows`` (int64 numpy), batches landing on ``dest``: by default
        the same storage and a row map (nothing copied), then moved."""
        torch = store.torch()
        r = torch.from_numpy(rows).to(store.device)
        return store.replaced(rows=r).to(dest)

    def to(self, store, device):
        """The store with batches landing on ``device`` (the storage kept where it is)."""
        return store.replaced(device=device, rows=None if store.rows is None else store.rows.to(device))
