"""The compressed tier's codec: I420 frames <-> baseline 4:2:0 JPEG, and "these JPEG frames into this batch".

Encoding (at ingest, on the CPU) hands the decoder's own Y, U and V planes to FFmpeg's MJPEG encoder
through PyAV: JPEG codes YCbCr 4:2:0 natively, so there is no color conversion and no chroma
resampling, only the DCT quantization (``qscale``: FFmpeg's ``-q:v`` for MJPEG, 1 finest .. 31;
it scales the JPEG standard quantization tables). The stream's matrix and range are kept by the
store, so the batch converts the decoded planes to RGB exactly as the lossless tiers do.

Decoding (per batch): on a GPU, nvJPEG's batched decoder (``robocache._C.decode_jpeg``: the A100/H100
JPEG engines when present, or the backend ``ROBOCACHE_NVJPEG_BACKEND`` names) writes the sampled
frames' planes into a scratch I420 buffer on the loader's stream, and ``gather_frames`` makes the batch
from it (color, layout, dtype, resize) as in every tier. The host's share per batch: a header check and nvJPEG's bitstream parsing of each sampled
frame. On the CPU, PyAV's MJPEG decoder (FFmpeg's, the reference the GPU decode is tested against).
"""

from __future__ import annotations

import glob
import os
import threading

import numpy as np

from .._util import cpu_count
from ..video.layout import copy_planes, yuv420_geometry

DEFAULT_QSCALE = 2
_LOCAL = threading.local()


def _av():
    from .._util import require
    return require("av", "lerobot", "the compressed frame tier (JPEG encode/decode with PyAV)")


def check_qscale(qscale) -> int:
    if isinstance(qscale, bool) or not isinstance(qscale, (int, np.integer)) or not 1 <= int(qscale) <= 31:
        raise ValueError(f"jpeg_qscale must be an int in [1, 31] (FFmpeg's MJPEG -q:v: 1 finest, 31 coarsest), "
                         f"got {qscale!r}")
    return int(qscale)


class Encoder:
    """One thread's MJPEG encoder for ``height x width`` I420 rows at ``qscale`` (single-threaded:
    the bytes depend only on the frame, so the same frames give the same cache every run)."""

    def __init__(self, height: int, width: int, qscale: int = DEFAULT_QSCALE):
        av = _av()
        self.height, self.width, self.qscale = int(height), int(width), check_qscale(qscale)
        ctx = av.CodecContext.create("mjpeg", "w")
        ctx.width, ctx.height, ctx.pix_fmt = self.width, self.height, "yuvj420p"
        ctx.thread_count = 1
        # a fixed quantizer: rate control pinned to qscale (no bit rate target)
        ctx.options = {"qmin": str(self.qscale), "qmax": str(self.qscale), "b": "0"}
        self._ctx, self._pts = ctx, 0
        self._frame = av.VideoFrame(self.width, self.height, "yuvj420p")
        ch, cw = (self.height + 1) // 2, (self.width + 1) // 2
        self._planes = []
        for p, (h, w) in zip(self._frame.planes, ((self.height, self.width), (ch, cw), (ch, cw))):
            self._planes.append(np.frombuffer(p, np.uint8).reshape(h, p.line_size)[:, :w])
        self._ends = (self.height * self.width, self.height * self.width + ch * cw)

    def encode(self, row: np.ndarray) -> bytes:
        """One I420 row -> the JPEG bitstream."""
        y_end, u_end = self._ends
        self._planes[0][...] = row[:y_end].reshape(self._planes[0].shape)
        self._planes[1][...] = row[y_end:u_end].reshape(self._planes[1].shape)
        self._planes[2][...] = row[u_end:].reshape(self._planes[2].shape)
        self._frame.pts = self._pts      # the encoder refuses a repeated timestamp
        self._pts += 1
        packets = self._ctx.encode(self._frame)
        if len(packets) != 1:   # MJPEG is intra-only without delay: one packet per frame
            raise RuntimeError(f"MJPEG encoder returned {len(packets)} packets for one frame")
        return bytes(packets[0])


def encode_rows(rows: np.ndarray, height: int, width: int, qscale: int = DEFAULT_QSCALE) -> list[bytes]:
    """I420 rows ``[n, frame_bytes]`` -> their JPEG bitstreams (this thread's encoder)."""
    enc = getattr(_LOCAL, "enc", None)
    if enc is None or (enc.height, enc.width, enc.qscale) != (height, width, qscale):
        enc = _LOCAL.enc = Encoder(height, width, qscale)
    return [enc.encode(r) for r in rows]


def encode_all(rows: np.ndarray, height: int, width: int, qscale: int = DEFAULT_QSCALE, workers=None) -> list[bytes]:
    """I420 rows -> bitstreams, in parallel over threads (the encoder releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    check_qscale(qscale)
    n = len(rows)
    workers = max(1, min(workers or cpu_count(), n // 64 or 1))
    parts = np.array_split(np.arange(n), workers)
    with ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda ix: encode_rows(rows[ix[0]:ix[-1] + 1] if len(ix) else rows[:0], height, width,
                                               qscale), parts)
        return [b for part in done for b in part]


def pack(chunks: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Bitstreams -> (bytes back to back uint8 [S], offsets int64 [n+1])."""
    sizes = np.fromiter((len(c) for c in chunks), np.int64, len(chunks))
    offsets = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return np.frombuffer(b"".join(chunks), np.uint8), offsets


def decode_rows_cpu(data: np.ndarray, offsets: np.ndarray, ids, out: np.ndarray, height: int, width: int) -> None:
    """Frames ``ids`` of (data, offsets) decoded by FFmpeg's MJPEG decoder into I420 rows ``out[m]``."""
    av = _av()
    dec = getattr(_LOCAL, "dec", None)
    if dec is None:
        dec = _LOCAL.dec = av.CodecContext.create("mjpeg", "r")
    geometry = yuv420_geometry(height, width)
    for m, i in enumerate(np.asarray(ids, np.int64).tolist()):
        frames = dec.decode(av.Packet(data[offsets[i]:offsets[i + 1]].tobytes()))
        if len(frames) != 1 or frames[0].width != width or frames[0].height != height:
            raise ValueError(f"compressed frame {i} does not decode to one {height}x{width} frame")
        copy_planes(frames[0].planes, out[m], geometry)


# ---------------------------------------------------------------------------------------------
# nvJPEG


def find_nvjpeg() -> str | None:
    """A libnvjpeg to load: ``ROBOCACHE_NVJPEG``, else one shipped by a Python package (the nvidia-nvjpeg
    wheels, torchvision's bundled copy); None lets the C side try the sonames (a CUDA toolkit's)."""
    env = os.environ.get("ROBOCACHE_NVJPEG")
    if env:
        return env
    import importlib.util
    found = []
    for pkg, pattern in (("nvidia", "nvjpeg/lib/libnvjpeg.so*"), ("nvidia", "cu13/lib/libnvjpeg.so*"),
                         ("torchvision", "../torchvision.libs/libnvjpeg*.so*")):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            found += sorted(glob.glob(os.path.join(root, pattern)))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(os.path.join(home, "lib64", "libnvjpeg.so*")))
    return found[0] if found else None


_LIBRARY: list = []


def _library():
    """find_nvjpeg(), looked up once (the C side loads the first library it is given)."""
    if not _LIBRARY:
        _LIBRARY.append(find_nvjpeg())
    return _LIBRARY[0]


BACKENDS = ("auto", "hardware", "gpu_hybrid", "hybrid", "default")


def backend_choice() -> str:
    """The nvJPEG backend asked for: ``ROBOCACHE_NVJPEG_BACKEND`` (read at each batch, so a process
    can switch; each backend keeps its own decoder per device), else ``auto``."""
    name = os.environ.get("ROBOCACHE_NVJPEG_BACKEND", "").strip() or "auto"
    if name not in BACKENDS:
        raise ValueError(f"ROBOCACHE_NVJPEG_BACKEND={name!r}: expected one of {', '.join(BACKENDS)} (auto: the "
                         f"GPU's JPEG engines where it has them, else GPU Huffman decoding)")
    return name


def backend(device) -> str:
    """The GPU decoder robocache uses on ``device``: backend, nvJPEG version, library."""
    import torch
    from .._C import jpeg_backend
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return jpeg_backend(dev.index or 0, _library(), backend_choice())


def gather_jpeg(store, view, ids, scale, host_ids=None) -> None:
    """``view[m]`` = frame ``ids[m]`` of a compressed store (the FrameStore.gather contract)."""
    import torch
    from .._C import decode_jpeg, gather_frames
    h = np.asarray(ids.cpu() if host_ids is None else host_ids, dtype=np.int64).reshape(-1)
    keep = h >= 0
    if not keep.any():                   # only padded steps: zero frames
        view.zero_()
        return
    rows = h.copy()
    if store._host_rows is not None:
        rows[keep] = store._host_rows[h[keep]]
    # padded steps decode a real frame too (gather writes zeros for them): the batch's decode
    # count stays fixed, and nvJPEG re-initializes its batched state only when that count changes
    rows[~keep] = rows[keep][0]
    local = np.where(keep, np.arange(len(h)), -1)
    kw = dict(format="yuv420", height=store.height, width=store.width, channels=3,
              matrix=store.matrix, full_range=store.full_range, scale=scale)
    fb = store.yuv_bytes
    if store.device.type != "cuda":
        planes = np.empty((len(h), fb), np.uint8)
        decode_rows_cpu(store.data, store.offsets, rows, planes, store.height, store.width)
        gather_frames(torch.from_numpy(planes), torch.from_numpy(local), view, **kw)
        return
    dev = store.device
    planes = torch.empty((len(h), fb), dtype=torch.uint8, device=dev)
    decode_jpeg(store.data, store.offsets, rows, planes, height=store.height, width=store.width,
                library=_library(), backend=backend_choice())
    local_ids = torch.from_numpy(local).pin_memory().to(dev, non_blocking=True)
    gather_frames(planes, local_ids, view, **kw)
