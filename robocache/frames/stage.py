"""The disk tier on a GPU: the sampled frames are copied from the memory-mapped file (the OS pages them
in) into a pinned buffer, moved to the device with one asynchronous copy, and decoded there by the same
kernel as every other tier. A CPU dataset reads the map directly.

The host must know which frames a batch takes: given ``host_ids`` (the loader computes them on the host
from its host-side order) nothing waits for the GPU; without them the ids are read back, a sync on the
current stream (direct indexing, ``Dataset.resample``), never on the consumer's stream in the loader.
"""

from __future__ import annotations

import numpy as np



_POOL = None
# frames per task: a cold frame is a page-in from the disk, so several in flight keep the device busy
# (NVMe queues), while a warm one is a memcpy of ~0.5 MB that is not worth a thread hop alone
_PER_TASK = 8


def _take(src, rows, out):
    """``out[:] = src[rows]`` with the rows split over a thread pool (numpy releases the GIL in take)."""
    global _POOL
    n = len(rows)
    if n <= _PER_TASK:
        np.take(src, rows, axis=0, out=out)
        return
    if _POOL is None:
        import os
        from concurrent.futures import ThreadPoolExecutor
        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="robocache-stage")
    parts = [(a, min(n, a + _PER_TASK)) for a in range(0, n, _PER_TASK)]
    list(_POOL.map(lambda ab: np.take(src, rows[ab[0]:ab[1]], axis=0, out=out[ab[0]:ab[1]]), parts))


def gather_disk(store, view, ids, scale, host_ids=None, extra=None):
    import torch
    from .._C import gather_frames as _gather_frames
    kw = dict(format=store.format, height=store.height, width=store.width, channels=store.channels,
              matrix=store.gather_matrix, full_range=store.full_range, scale=scale, **(extra or {}))
    if store.device.type != "cuda":
        _gather_frames(store.data, store.storage_ids(ids), view, **kw)
        return
    h = np.asarray(ids.cpu() if host_ids is None else host_ids, dtype=np.int64).reshape(-1)
    keep = h >= 0
    rows = h[keep]
    if store.host_rows is not None:
        rows = store.host_rows[rows]
    uniq, inverse = np.unique(rows, return_inverse=True)
    src = store.data.numpy()
    staging = torch.empty((len(uniq),) + tuple(store.data.shape[1:]), dtype=store.data.dtype, pin_memory=True)
    _take(src, uniq, staging.numpy())
    if not len(uniq):                      # only padded steps: zero frames, no kernel on an empty store
        view.zero_()
        return
    local = np.full(h.shape, -1, np.int64)
    local[keep] = inverse
    dev = store.device
    frames = staging.to(dev, non_blocking=True)
    local_ids = torch.from_numpy(local).pin_memory().to(dev, non_blocking=True)
    _gather_frames(frames, local_ids, view, **kw)
