"""The lossless tier's codec: I420 frames <-> MED + interleaved rANS, and "these coded frames into this batch".

Each frame's Y, U and V planes, exactly as the host tier stores them, are coded losslessly
(``robocache._C.encode_lossless``; format and arithmetic: csrc/lossless_math.h): a median (LOCO-I) predictor
per pixel, the residuals entropy-coded with rANS in chunks (bands of rows of a plane) a GPU warp decodes
on its own. Batches are therefore bit-identical to the host tier's. Measured on the real CR5 arm footage:
5.9x smaller than I420 at 480x640, 4.6x at 180x320 (docs/frame-storage.md).

Encoding runs at ingest in the decode workers (compress.py, one thread each). Decoding, per batch:
- on a GPU, the coded bytes live in pinned host memory (exact size) with their offsets on the device;
  ``decode_lossless`` copies the sampled frames' bytes over the bus into a device scratch and decodes
  them there into I420 planes, and ``gather_frames`` makes the batch (color, layout, dtype, resize), all
  on the loader's stream from device ids: no host work or sync per batch, so batches can replay a CUDA
  graph as the host tier's do. A store mapped from its cache file (bigger than the host budget) cannot
  be pinned: its sampled frames are copied on the host into a pinned buffer first (host ids needed);
- on the CPU, the C reference decoder (threads over frames), then the same ``gather_frames``.
"""

from __future__ import annotations

import threading

import numpy as np

from .jpeg import pack

_LOCAL = threading.local()   # each ingest worker's coded-frame buffer
MAGIC = b"RCL1"              # every coded frame's first bytes (RC_LL_MAGIC, little-endian: csrc/lossless_math.h)


def encode_rows(rows: np.ndarray, height: int, width: int) -> list[bytes]:
    """I420 rows (C-contiguous ``[n, frame_bytes]``) -> each frame's coded bytes, on this thread alone
    (the ingest workers already run one per core)."""
    from .._C import encode_lossless, lossless_bound
    n = len(rows)
    cap = lossless_bound(height, width)
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.shape[0] < n or buf.shape[1] != cap:
        buf = _LOCAL.buf = np.empty((max(n, 16), cap), np.uint8)
    sizes = np.empty(n, np.int64)
    encode_lossless(buf[:n], sizes, np.ascontiguousarray(rows), height=height, width=width, threads=1)
    return [buf[i, :sizes[i]].tobytes() for i in range(n)]


def encode_all(rows: np.ndarray, height: int, width: int, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """I420 rows -> (coded bytes back to back, offsets int64 [n+1]), frames in parallel on robocache's
    CPU threads, ``block`` frames at a time (the scratch is 1.5x a frame's bytes a row at most)."""
    from .._C import encode_lossless, lossless_bound
    rows = np.ascontiguousarray(rows)
    cap = lossless_bound(height, width)
    buf = np.empty((min(block, max(len(rows), 1)), cap), np.uint8)
    frames: list[bytes] = []
    for a in range(0, len(rows), block):
        part = rows[a:a + block]
        sizes = np.empty(len(part), np.int64)
        encode_lossless(buf[:len(part)], sizes, part, height=height, width=width)
        frames += [buf[i, :sizes[i]].tobytes() for i in range(len(part))]
    return pack(frames)


class GpuSource:
    """A lossless store's bytes where a GPU decode reads them: pinned host memory (exact size) and the
    offsets on the device, and the largest frame (the per-frame scratch row)."""

    def __init__(self, data, offsets: np.ndarray, device):
        import warnings
        import torch
        from .pinned import pin
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch warns about read-only arrays: these bytes are only read
            t = torch.from_numpy(np.ascontiguousarray(data))
        self.data = t if t.is_pinned() else pin(t)   # a pinned store's bytes (a move, a copy) stay where they are
        self.offsets = torch.from_numpy(np.asarray(offsets, np.int64)).to(device)
        sizes = np.diff(np.asarray(offsets, np.int64))
        self.max_bytes = int(sizes.max()) if sizes.size else 16


def gpu_source(data, offsets, device) -> GpuSource | None:
    """The GPU's view of a lossless store on ``device``, or None for bytes mapped from the cache file
    (not pinned: the batch stages the sampled frames on the host)."""
    if isinstance(data, np.memmap):
        return None
    return GpuSource(data, offsets, device)


def gather_lossless(store, view, ids, scale, host_ids=None, extra=None) -> None:
    """``view[m]`` = frame ``ids[m]`` of a lossless store (the FrameStore.gather contract)."""
    kw = dict(format="yuv420", height=store.height, width=store.width, channels=3, matrix=store.matrix,
              full_range=store.full_range, scale=scale, **(extra or {}))
    if store.device.type != "cuda":
        _gather_cpu(store, view, ids, kw)
    elif store.gpu is not None:
        _gather_pinned(store, view, ids, kw)
    else:
        _gather_staged(store, view, ids, host_ids, kw)


def _gather_cpu(store, view, ids, kw) -> None:
    """The C reference decoder into planes, then the batch."""
    import torch
    from .._C import decode_lossless, gather_frames
    sid = store.storage_ids(ids).cpu().numpy()            # < 0: padding, skipped by the decoder
    planes = np.empty((len(sid), store.yuv_bytes), np.uint8)
    decode_lossless(planes, store.data, store.offsets, sid, height=store.height, width=store.width)
    local = np.where(sid >= 0, np.arange(len(sid)), -1)
    gather_frames(torch.from_numpy(planes), torch.from_numpy(local), view, **kw)


def _gather_pinned(store, view, ids, kw) -> None:
    """Pinned bytes: copied and decoded on the GPU from device ids, on the current stream; no host work."""
    import torch
    from .._C import decode_lossless, gather_frames
    src, dev, M = store.gpu, store.device, len(view)
    sid = store.storage_ids(ids)
    planes = torch.empty((M, store.yuv_bytes), dtype=torch.uint8, device=dev)
    scratch = torch.empty((M, src.max_bytes), dtype=torch.uint8, device=dev)
    decode_lossless(planes, src.data, src.offsets, sid, height=store.height, width=store.width, scratch=scratch)
    gather_frames(planes, torch.where(sid >= 0, torch.arange(M, device=dev), torch.full_like(sid, -1)), view, **kw)


def _gather_staged(store, view, ids, host_ids, kw) -> None:
    """Bytes mapped from the cache file: the sampled frames' bytes copied on the host into a pinned buffer,
    moved by torch (its host allocator keeps the buffers until the copies are done), decoded on the GPU."""
    import torch
    from .._C import decode_lossless, gather_frames
    h = np.asarray(ids.cpu() if host_ids is None else host_ids, dtype=np.int64).reshape(-1)
    keep = h >= 0
    rows = h[keep]
    if store.host_rows is not None:
        rows = store.host_rows[rows]
    starts, ends = store.offsets[rows], store.offsets[rows + 1]
    local_off = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(ends - starts, out=local_off[1:])
    staged = torch.empty(int(local_off[-1]) or 16, dtype=torch.uint8, pin_memory=True)
    out = staged.numpy()
    for i, (a, b) in enumerate(zip(starts, ends)):
        out[local_off[i]:local_off[i + 1]] = store.data[a:b]
    local = np.full(len(h), -1, np.int64)
    local[keep] = np.arange(len(rows))
    dev = store.device
    planes = torch.empty((len(h), store.yuv_bytes), dtype=torch.uint8, device=dev)
    ids_d = torch.from_numpy(local).pin_memory().to(dev, non_blocking=True)
    off_d = torch.from_numpy(local_off).pin_memory().to(dev, non_blocking=True)
    decode_lossless(planes, staged.to(dev, non_blocking=True), off_d, ids_d, height=store.height, width=store.width)
    # planes[m] holds sample m's frame (the decoder writes row m from staged frame local[m]): gathered by position
    pos = torch.from_numpy(np.where(keep, np.arange(len(h)), -1)).pin_memory().to(dev, non_blocking=True)
    gather_frames(planes, pos, view, **kw)
