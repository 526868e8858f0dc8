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
from it (color, layout, dtype, resize) as in every tier. The host's share per batch: a header check and
nvJPEG's bitstream parsing of each sampled frame (and, for an entry mapped from disk, each frame's CRC on
its first use: jpeg_check.py). The JPEG engines hold the calling thread until the frames are written, and
they write without regard to the stream's queued work, so the call first waits for that stream from the
host (cuda/jpeg.cu): the loader decodes on its staging threads, never the training thread. On the CPU,
PyAV's MJPEG decoder (FFmpeg's, the reference the GPU decode is tested against).
"""

from __future__ import annotations

import glob
import os
from typing import Literal, cast, get_args

import numpy as np

from .._util import cpu_count
from ..video.mjpeg import DEFAULT_QSCALE, Encoder, check_qscale, decode_rows_cpu, encode_rows  # noqa: F401
from .jpeg_check import check_sampled, damaged, seal

def encode_sealed(rows: np.ndarray, height: int, width: int, qscale: int = DEFAULT_QSCALE) -> list[bytes]:
    """I420 rows -> the tier's bitstreams: JPEG with its CRC segment (jpeg_check.seal)."""
    return [seal(b) for b in encode_rows(rows, height, width, qscale)]


def encode_all(rows: np.ndarray, height: int, width: int, qscale: int = DEFAULT_QSCALE,
               workers: int | None = None) -> list[bytes]:
    """I420 rows -> the tier's bitstreams, in parallel over threads (the encoder releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    check_qscale(qscale)
    n = len(rows)
    workers = max(1, min(workers or cpu_count(), n // 64 or 1))
    parts = np.array_split(np.arange(n), workers)
    with ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda ix: encode_sealed(rows[ix[0]:ix[-1] + 1] if len(ix) else rows[:0], height, width,
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


#: nvJPEG's decoders by name (robocache._C.decode_jpeg's ``backend``)
JpegBackend = Literal["auto", "hardware", "gpu_hybrid", "hybrid", "default"]
BACKENDS: tuple[JpegBackend, ...] = get_args(JpegBackend)


def backend_choice() -> JpegBackend:
    """The nvJPEG backend asked for: ``ROBOCACHE_NVJPEG_BACKEND`` (read at each batch, so a process
    can switch; each backend keeps its own decoder per device), else ``auto``."""
    name = os.environ.get("ROBOCACHE_NVJPEG_BACKEND", "").strip() or "auto"
    if name not in BACKENDS:
        raise ValueError(f"ROBOCACHE_NVJPEG_BACKEND={name!r}: expected one of {', '.join(BACKENDS)} (auto: the "
                         f"GPU's JPEG engines where it has them, else GPU Huffman decoding)")
    return cast(JpegBackend, name)


def backend(device) -> str:
    """The GPU decoder robocache uses on ``device``: backend, nvJPEG version, library."""
    import torch
    from .._C import jpeg_backend
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return jpeg_backend(dev.index or 0, _library(), backend_choice())


def gather_jpeg(store, view, ids, scale, host_ids=None, extra=None) -> None:
    """``view[m]`` = frame ``ids[m]`` of a compressed store (the FrameStore.gather contract). A sampled frame
    that fails its CRC (a mapped entry's, on first use: jpeg_check) or its decode raises DamagedFrameError
    naming it, and marks its cache entry for a rebuild."""
    import torch
    from .._C import gather_frames
    h = np.asarray(ids.cpu() if host_ids is None else host_ids, dtype=np.int64).reshape(-1)
    keep = h >= 0
    if not keep.any():                   # only padded steps: zero frames
        view.zero_()
        return
    rows = h.copy()
    if store.host_rows is not None:
        rows[keep] = store.host_rows[h[keep]]
    check_sampled(store, rows[keep])
    # padded steps decode a real frame too (gather writes zeros for them): the batch's decode
    # count stays fixed, and nvJPEG re-initializes its batched state only when that count changes
    rows[~keep] = rows[keep][0]
    local = np.where(keep, np.arange(len(h)), -1)
    kw = dict(format="yuv420", height=store.height, width=store.width, channels=3,
              matrix=store.matrix, full_range=store.full_range, scale=scale, **(extra or {}))
    cuda = store.device.type == "cuda"
    if store.atlas is not None:
        # the timesteps' atlases, decoded once for every camera of the batch; this camera's planes out of them
        atlas = store.atlas.atlas
        planes = atlas.decode(rows, store.device,
                              lambda r, out: _decode(store, r, out, atlas.layout.atlas_height, store.width))
        planes = atlas.layout.split(planes, store.atlas.camera)
    else:
        planes = (torch.empty((len(h), store.yuv_bytes), dtype=torch.uint8, device=store.device) if cuda else
                  np.empty((len(h), store.yuv_bytes), np.uint8))
        _decode(store, rows, planes, store.height, store.width)
    if not cuda:
        gather_frames(torch.from_numpy(planes), torch.from_numpy(local), view, **kw)
        return
    local_ids = torch.from_numpy(local).pin_memory().to(store.device, non_blocking=True)
    gather_frames(planes, local_ids, view, **kw)


def _decode(store, rows: np.ndarray, planes, height: int, width: int) -> None:
    """Frames ``rows`` (of ``height x width``: a camera's, or an atlas's) into the I420 rows ``planes``
    (numpy: FFmpeg; a CUDA tensor: nvJPEG). A failure is DamagedFrameError naming the first frame that
    fails alone (a batched decode does not say which)."""
    def run(ids, out):
        if isinstance(out, np.ndarray):
            decode_rows_cpu(store.data, store.offsets, ids, out, height, width)
        else:
            from .._C import decode_jpeg
            decode_jpeg(store.data, store.offsets, ids, out, height=height, width=width,
                        library=_library(), backend=backend_choice())

    try:
        run(rows, planes)
    except ValueError:
        # a frame's content (FFmpeg's InvalidDataError is a ValueError, nvJPEG's bad or incomplete
        # bitstream and the header check are too); anything else (no library, a CUDA fault) is not a frame's
        for r in np.unique(rows).tolist():
            try:
                run(np.array([r], np.int64), planes[:1])
            except ValueError as one:
                raise damaged(store, r, f"fails to decode ({type(one).__name__}: {one})") from one
        raise
