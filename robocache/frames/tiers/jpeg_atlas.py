"""The compressed tier with several cameras' frames of one timestep in one JPEG (robocache.frames.atlas):
each camera's store is a part of atlases shared with the others, and a batch decodes each sampled timestep
once for all of them."""
from __future__ import annotations

import dataclasses

import numpy as np

from .jpeg import JpegTier
from .rows import take_spans


class JpegAtlasTier(JpegTier):
    holds = "frames as JPEG atlases shared by cameras"

    def attach(self, store) -> None:
        part = store.atlas
        if part is None or part.atlas.offsets is not store.offsets or len(part.atlas.data) != len(store.data):
            raise ValueError("an atlas part is a jpeg store over the atlas's own data and offsets")
        layout = part.atlas.layout
        if (layout.height, layout.width) != (store.height, store.width):
            raise ValueError(f"an atlas of {layout.height}x{layout.width} cameras cannot hold "
                             f"{store.height}x{store.width} frames")
        store.data = part.atlas.data        # (the atlas's bytes may have been pinned since `data` was read)
        if store.is_cuda and not isinstance(store.data, np.memmap):
            store.data = part.atlas.pin()   # one pinned copy per atlas, whichever camera asks first

    def subset(self, store, rows, dest):
        if isinstance(store.data, np.memmap):
            return super().subset(store, rows, dest)
        # the cameras of an atlas subset with the same rows share one copy of the atlases
        part = dataclasses.replace(store.atlas, atlas=store.atlas.atlas.subset(rows, take_spans))
        origin = None if store.origin is None else store.origin.take(rows)
        return store.replaced(data=part.atlas.data, offsets=part.atlas.offsets, origin=origin, atlas=part,
                              rows=None).to(dest)
