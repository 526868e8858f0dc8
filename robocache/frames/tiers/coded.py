"""What the coded tiers share: frames as bitstreams back to back + offsets (frame i is
``data[offsets[i]:offsets[i+1]]``), in RAM or mapped from the cache file."""
from __future__ import annotations

import numpy as np

from .base import Tier
from .rows import take_spans


class CodedTier(Tier):
    coded = True

    def pools(self, cpu: bool) -> tuple:
        return ("host", "disk")     # their bytes in host RAM, else mapped from the cache file

    def frame_bytes(self, store) -> int:
        n = len(store.offsets) - 1
        return int(round(int(store.offsets[-1]) / n / store.share)) if n else 0

    def nbytes(self, store) -> int:
        return (int(store.data.nbytes) + int(store.offsets.nbytes)) // store.share

    def episode_bytes(self, store, offsets):
        sizes = np.diff(store.offsets)
        if store.host_rows is not None:
            sizes = sizes[store.host_rows]
        per_frame = np.concatenate([[0], np.cumsum(sizes)])
        return (per_frame[offsets[1:]] - per_frame[offsets[:-1]]) // store.share

    def host_staged(self, store) -> bool:
        return store.is_cuda

    def subset(self, store, rows, dest):
        if isinstance(store.data, np.memmap):      # mapped: the file and a row map, nothing copied
            return super().subset(store, rows, dest)
        # in RAM: the subset's own bitstreams, so a rank's shard holds only its episodes' bytes
        data, offsets = take_spans(store.data, store.offsets, rows)
        origin = None if store.origin is None else store.origin.take(rows)
        return store.replaced(data=data, offsets=offsets, origin=origin, rows=None).to(dest)
