"""The compressed tier's codec: I420 frames <-> baseline 4:2:0 JPEG, and "these JPEG frames into this batch".

Encoding (at ingest, on the CPU) hands the decoder's own Y, U and V planes to FFmpeg's MJPEG encoder
through PyAV: JPEG codes YCbCr 4:2:0 natively, so there is no color conversion and no chroma
resampling, only the DCT quantization (``qscale``: FFmpeg's ``-q:v`` for MJPEG, 1 finest .. 31;
it scales the JPEG standard quantization tables). The stream's matrix and range are kept by the
store, so the batch converts the decoded planes to RGB exactly as the lossless tiers do.

PyAV's MJPEG encoder and decoder live in robocache/video/mjpeg.py (the one place that calls PyAV).

Decoding (per batch): on a GPU, nvJPEG's batched decoder (``robocache._C.decode_jpeg``: the A100/H100
JPEG engines when present, or the backend ``ROBOCACHE_NVJPEG_BACKEND`` names) writes the sampled
frames' planes into a scratch I420 buffer on the loader's stream, and ``gather_frames`` makes the batch
from it (color, layout, dtype, resize) as in every tier. The host's share per batch: a header check and nvJPEG's bitstream parsing of each sampled
frame. On the CPU, PyAV's MJPEG decoder (FFmpeg's, the reference the GPU decode is tested against).
"""

from __future__ import annotations

import glob
import os

import numpy as np

from .._util import cpu_count
from ..video.mjpeg import DEFAULT_QSCALE, Encoder, check_qscale, decode_rows_cpu, encode_rows  # noqa: F401

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
