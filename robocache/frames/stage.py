"""The disk tier on a GPU: the sampled frames are copied from the memory-mapped file (the OS pages them
in) into a pinned buffer, moved to the device with one asynchronous copy, and decoded there by the same
kernel as every other tier. A CPU dataset reads the map directly.

The host must know which frames a batch takes: given ``host_ids`` (the loader computes them on the host
from its host-side order) nothing waits for the GPU; without them the ids are read back, a sync on the
current stream (direct indexing, ``Dataset.resample``), never on the consumer's stream in the loader.
"""

from __future__ import annotations

import numpy as np



def gather_disk(store, view, ids, scale, host_ids=None):
    import torch
    from .._C import gather_frames as _gather_frames
    kw = dict(format=store.format, height=store.height, width=store.width, channels=store.channels,
              matrix=store.matrix, full_range=store.full_range, scale=scale)
    if store.device.type != "cuda":
        _gather_frames(store.data, store._storage_ids(ids), view, **kw)
        return
    h = np.asarray(ids.cpu() if host_ids is None else host_ids, dtype=np.int64).reshape(-1)
    keep = h >= 0
    rows = h[keep]
    if store._host_rows is not None:
        rows = store._host_rows[rows]
    uniq, inverse = np.unique(rows, return_inverse=True)
    src = store.data.numpy()
    staging = torch.empty((len(uniq),) + tuple(store.data.shape[1:]), dtype=store.data.dtype, pin_memory=True)
    np.take(src, uniq, axis=0, out=staging.numpy())
    if not len(uniq):                      # only padded steps: zero frames, no kernel on an empty store
        view.zero_()
        return
    local = np.full(h.shape, -1, np.int64)
    local[keep] = inverse
    dev = store.device
    frames = staging.to(dev, non_blocking=True)
    local_ids = torch.from_numpy(local).pin_memory().to(dev, non_blocking=True)
    _gather_frames(frames, local_ids, view, **kw)
