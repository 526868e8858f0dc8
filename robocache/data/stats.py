"""A stream's statistics: min, max, mean, std, q01, q99 over its samples (images and point clouds per
channel), the numbers the loader normalizes with.

Computed on the stream's device, once (``Stream.stats`` caches them). Floats are reduced exactly in
float64 chunks, 8-bit values (uint8 frames) through per-feature 256-bin histograms, frames kept as YUV
or outside the device decoded chunk by chunk. Takes any object with a stream's ``values``, ``kind`` and
``device``: it needs no Dataset. See docs/dataset.md, "Statistics".
"""

from __future__ import annotations

import math

from .._util import torch as _torch
from ..frames.store import FrameStore

__all__ = ["QUANTILE_ROWS", "STATS_CHUNK", "compute_stats"]

# q01/q99 come from torch.quantile, which refuses inputs above 2**24 elements; above
# QUANTILE_ROWS rows (samples, or pixels/points for per-channel stats) they are taken on an
# evenly spaced, deterministic subsample of that many rows.
QUANTILE_ROWS = 1_000_000
# mean/std/min/max are exact over all rows, accumulated in float64 chunks of this many elements
# so a uint8 video stream is never converted to float64 whole.
STATS_CHUNK = 1 << 22

NAMES = ("min", "max", "mean", "std", "q01", "q99")


class FrameRows:
    """The pixels of a FrameStore as ``[frames * H * W, C]`` rows for statistics, decoded in chunks
    (never all at once: a YUV or host/disk stream may not fit the device decoded)."""

    def __init__(self, store: FrameStore):
        self.store = store
        self.dtype = store.dtype
        self.shape = (len(store) * store.height * store.width, store.channels)

    def chunks(self):
        step = max(1, STATS_CHUNK // max(1, self.store.height * self.store.width * self.store.channels))
        for a in range(0, len(self.store), step):
            yield self.store[a:a + step].reshape(-1, self.store.channels)


def stat_rows(stream):
    """A stream's values as ``[rows, features]`` for statistics, and the shape to give the results."""
    v = stream.values
    if isinstance(v, FrameStore):
        if v.format == "rgb" and v.kind.in_memory and v.rows is None:
            v = v.data
        elif v.dtype == _torch().uint8:
            return FrameRows(v), (v.channels,)   # decoded chunk by chunk (YUV, host, disk)
        else:
            v = v[:]
    if stream.kind in ("image", "pointcloud"):
        c = v.shape[-1] if v.dim() > 1 else 1
        return v.reshape(v.numel() // max(c, 1), c), (c,)
    return v.reshape(v.shape[0], math.prod(v.shape[1:])), tuple(v.shape[1:])


def compute_stats(stream) -> dict:
    """``{min, max, mean, std, q01, q99}`` of ``stream`` as float64 tensors on its device, reduced over
    samples keeping the per-sample shape (per channel for images and point clouds); NaN when empty.
    ``Stream.stats`` documents the definitions."""
    torch = _torch()
    rows, shape = stat_rows(stream)
    m, c = rows.shape
    f64 = dict(dtype=torch.float64, device=stream.device)
    if m == 0:
        nan = torch.full(shape, math.nan, **f64)
        return {k: nan.clone() for k in NAMES}
    if rows.dtype in (torch.uint8, torch.int8, torch.bool):
        out = histogram_stats(rows if not isinstance(rows, FrameRows) else rows.chunks(), m, c, stream.device)
        return {k: v.reshape(shape) for k, v in out.items()}
    # Chan et al. pairwise combination of (count, mean, M2) over float64 chunks
    step = max(1, STATS_CHUNK // max(c, 1))
    n_acc, mean, m2 = 0, torch.zeros(c, **f64), torch.zeros(c, **f64)
    lo = torch.full((c,), math.inf, **f64)
    hi = torch.full((c,), -math.inf, **f64)
    for a in range(0, m, step):
        x = rows[a:a + step].to(torch.float64)
        k = x.shape[0]
        cm = x.mean(0)
        cm2 = ((x - cm) ** 2).sum(0)
        delta = cm - mean
        tot = n_acc + k
        mean = mean + delta * (k / tot)
        m2 = m2 + cm2 + delta ** 2 * (n_acc * k / tot)
        n_acc = tot
        lo = torch.minimum(lo, x.amin(0))
        hi = torch.maximum(hi, x.amax(0))
    std = (m2 / n_acc).sqrt()
    if m > QUANTILE_ROWS:
        pick = torch.linspace(0, m - 1, QUANTILE_ROWS, dtype=torch.float64, device=stream.device).round().long()
        sample = rows[pick]
    else:
        sample = rows
    sample = sample.to(torch.float64)
    q = torch.quantile(sample, torch.tensor([0.01, 0.99], **f64), dim=0)
    out = {"min": lo, "max": hi, "mean": mean, "std": std, "q01": q[0], "q99": q[1]}
    return {k: v.reshape(shape) for k, v in out.items()}


def histogram_stats(rows, m: int, c: int, dev) -> dict:
    """8-bit values (images): one 256-bin histogram per feature, so every statistic,
    q01/q99 included, is exact over all rows; ~10x faster than float64 reductions.
    ``rows``: ``[m, c]``, or an iterable of ``[k, c]`` chunks (frames decoded in turn)."""
    torch = _torch()
    base = (torch.arange(c, dtype=torch.int32, device=dev) * 256)
    counts = torch.zeros(256 * c, dtype=torch.int64, device=dev)
    if isinstance(rows, torch.Tensor):
        shift = 128 if rows.dtype == torch.int8 else 0
        step = max(1, STATS_CHUNK // max(c, 1))
        flat = rows
        rows = (flat[a:a + step] for a in range(0, m, step))
    else:
        shift = 0                                  # decoded frames are uint8
    for chunk in rows:
        x = chunk.reshape(-1, c).to(torch.int32).add_(base + shift)
        counts += torch.bincount(x.reshape(-1), minlength=256 * c)
    counts = counts.reshape(c, 256)
    levels = torch.arange(256, dtype=torch.float64, device=dev) - shift
    w = counts.to(torch.float64)
    mean = (w * levels).sum(1) / m
    std = ((w * (levels - mean[:, None]) ** 2).sum(1) / m).sqrt()
    seen = counts > 0
    lo = levels[seen.to(torch.uint8).argmax(1)]
    hi = levels[255 - seen.flip(1).to(torch.uint8).argmax(1)]
    cum = counts.cumsum(1)

    def quantile(q):  # numpy's linear interpolation between the order statistics around q*(m-1)
        pos = q * (m - 1)
        k = math.floor(pos)
        ranks = torch.tensor([k, min(k + 1, m - 1)], dtype=torch.int64, device=dev).expand(c, 2).contiguous()
        v = levels[torch.searchsorted(cum, ranks, right=True)]
        return v[:, 0] + (v[:, 1] - v[:, 0]) * (pos - k)

    return {"min": lo, "max": hi, "mean": mean, "std": std, "q01": quantile(0.01), "q99": quantile(0.99)}
