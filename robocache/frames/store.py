"""FrameStore: one image stream's frames in one tier, and "these frames into this batch".

Storage is one row per frame: RGB-like ``[N, H, W, C]`` (uint8 or float32, as the source stored it) or
YUV 4:2:0 ``[N, H*W + 2*ch*cw]`` uint8 (I420, as the video decoder hands it back: 1.5 bytes/pixel); or
each frame's I420 planes coded, bytes back to back + offsets: losslessly in the lossless tier (lossless.py),
as a JPEG in the compressed tier (jpeg.py).
The tiers (where the frames live: GPU memory, pinned host memory, a mapped file, JPEG, lossless) are objects
of robocache.frames.tiers; a store holds its bytes and geometry and hands everything that depends on the tier
to ``store.kind``.
Every tier goes through the same kernel (``robocache._C.gather_frames``: gather, YUV -> RGB, resize,
layout, dtype in one pass), so batches are bit-identical whatever the tier.
"""

from __future__ import annotations

import math

import numpy as np

from .._util import torch as _torch
from ..video.layout import yuv420_bytes
from .tiers import Tier, memory_tier, tier_of


FORMATS = ("rgb", "yuv420", "lossless", "jpeg")
SPANS = ("lossless", "jpeg")   # formats stored as variable-size frames: bytes back to back + offsets


class FrameStore:
    """The frames of one image stream (all episodes back to back) in one tier.

    Attributes
    ----------
    data : torch.Tensor
        The storage rows: ``[N, H, W, C]`` for ``rgb``, ``[N, frame_bytes]`` uint8 for ``yuv420``;
        on the GPU (device tier) or the CPU (host: pinned; disk: over a memory map; cpu). ``jpeg`` and
        ``lossless``: numpy uint8 ``[S]``, every frame's bytes back to back (in RAM or over the cache file's map).
    format : "rgb", "yuv420", "lossless" (its planes MED + rANS coded) or "jpeg" (compressed tier: as JPEG)
    height, width, channels : int
        The decoded frame (``yuv420`` decodes to 3 channels of uint8).
    tier : "device", "host", "disk" or "cpu"
    device : torch.device
        Where batches and decoded frames land (the dataset's device).
    matrix, full_range :
        ``yuv420`` only: the color matrix (bt601, bt709, bt2020) and range the decoder's RGB uses.
    rows : torch.Tensor or None
        A subset's map from its frame index to a storage row (int64 on ``device``, or host for disk), so
        a subset of a memory-mapped store copies nothing.
    path : str or None
        The file behind a disk-tier (or compressed) store.
    offsets : numpy int64 [N+1] or None
        ``jpeg``, ``lossless``: frame i is ``data[offsets[i]:offsets[i+1]]``.
    qscale : int or None
        ``jpeg``: the encoder's quantizer scale (FFmpeg's MJPEG ``-q:v``), the quality of the tier.
    origin : jpeg_check.FrameOrigin or None
        ``jpeg``: the stream, episodes and cache entry of the frames (the error naming a damaged frame),
        and which frames' CRC is still to verify.
    atlas : atlas.AtlasPart or None
        ``jpeg``: the frames are this camera's part of atlases shared with other cameras' stores
        (``data``/``offsets`` are the atlas's; a batch decodes each sampled timestep once for all of them).
    """

    def __init__(self, data, *, format: str, height: int, width: int, channels: int, tier: str | Tier, device,
                 matrix: str = "bt601", full_range: bool = False, rows=None, path: str | None = None,
                 offsets=None, qscale: int | None = None, origin=None, atlas=None):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        kind = tier_of(tier.name if isinstance(tier, Tier) else tier, atlas=atlas is not None)
        if format not in kind.formats:
            raise ValueError(f"the {kind.name} tier keeps formats {kind.formats}, got {format!r}")
        if (format in SPANS) != (offsets is not None):
            raise ValueError(f"formats {SPANS} (and only they) take offsets")
        self.data, self.format, self.kind = data, format, kind
        self.height, self.width, self.channels = int(height), int(width), int(channels)
        self.matrix, self.full_range = matrix, bool(full_range)
        self.device = _torch().device(device)
        self.rows, self.path = rows, path
        self.offsets, self.qscale, self.origin, self.atlas = offsets, qscale, origin, atlas
        self.host_rows = None if rows is None else np.asarray(rows.cpu() if hasattr(rows, "cpu") else rows)
        self.gpu = None   # lossless on a GPU: its bytes pinned, offsets on the device (lossless.GpuSource)
        kind.attach(self)

    @property
    def tier(self) -> str:
        """The tier's name (``store.kind`` is the tier itself)."""
        return self.kind.name

    def replaced(self, **changes) -> "FrameStore":
        """A new store over the same fields but ``changes`` (``kind`` for the tier): what a tier's subset
        and move make. The new store's tier attaches itself again (pinning for a GPU, say)."""
        kw = dict(data=self.data, format=self.format, height=self.height, width=self.width,
                  channels=self.channels, tier=self.kind, device=self.device, matrix=self.matrix,
                  full_range=self.full_range, rows=self.rows, path=self.path, offsets=self.offsets,
                  qscale=self.qscale, origin=self.origin, atlas=self.atlas)
        if "kind" in changes:
            kw["tier"] = changes.pop("kind")
        kw.update(changes)
        return FrameStore(kw.pop("data"), **kw)

    @staticmethod
    def torch():
        return _torch()

    @classmethod
    def from_rgb(cls, values, device=None) -> "FrameStore":
        """A store over RGB-like frames ``[N, H, W, C]`` already in memory: ``cpu`` or ``device`` tier
        where ``values`` lives (no copy)."""
        torch = _torch()
        if values.dim() == 3:                          # [N, H, W] grey
            values = values[..., None]
        if values.dim() != 4:
            raise ValueError(f"image frames must be [N, H, W, C], got shape {tuple(values.shape)}")
        dev = values.device if device is None else torch.device(device)
        tier = memory_tier(values.device if values.device.type == "cuda" else dev)
        _, h, w, c = values.shape
        return cls(values.contiguous(), format="rgb", height=h, width=w, channels=c, tier=tier, device=dev)

    @classmethod
    def create(cls, rows, *, format: str, height: int, width: int, channels: int = 3, tier: str, device,
               path=None, matrix: str = "bt601", full_range: bool = False, qscale: int = 2) -> "FrameStore":
        """A store of ``rows`` (numpy or torch: ``[N, H, W, C]`` rgb or ``[N, frame_bytes]`` yuv420) in
        ``tier``: copied to the device, into pinned host memory, or written to ``path`` and mapped;
        ``compressed``: yuv420 rows coded as JPEG at ``qscale`` (robocache.frames.jpeg), kept in RAM;
        ``lossless``: yuv420 rows coded losslessly (robocache.frames.lossless), kept in RAM."""
        torch = _torch()
        device = torch.device(device)
        a = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.ascontiguousarray(rows)
        kind = tier_of(tier.name if isinstance(tier, Tier) else tier).for_device(device)
        data, kw = kind.make(a, format=format, height=height, width=width, path=path, qscale=qscale, device=device)
        kw = dict(dict(format=format, height=height, width=width, channels=channels, matrix=matrix,
                       full_range=full_range), **kw)
        return cls(data, tier=kind, device=device, **kw)

    # --- shape and size ------------------------------------------------------------------

    def __len__(self) -> int:
        if self.rows is not None:
            return int(self.rows.shape[0])
        return len(self.offsets) - 1 if self.offsets is not None else int(self.data.shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, H, W, C)`` of the decoded frames."""
        return (len(self), self.height, self.width, self.channels)

    @property
    def is_cuda(self) -> bool:
        """Whether batches and decoded frames land on a GPU (the storage may be pinned host or disk)."""
        return self.device.type == "cuda"

    @property
    def dtype(self):
        """dtype of a decoded frame (uint8 for video)."""
        return _torch().uint8 if self.format in SPANS else self.data.dtype

    @property
    def host_staged(self) -> bool:
        """Whether a GPU batch needs its frame ids on the host (the disk tier copies those frames, the
        compressed tier hands their bitstreams to nvJPEG, a lossless store mapped from its cache file stages
        them): the loader computes them from its host order."""
        return self.kind.host_staged(self)

    @property
    def gather_matrix(self) -> str | None:
        """The matrix gather_frames converts with: the store's for YUV frames; None for RGB ones, whose
        matrix is informational ('' when the decoder did not say: OpenCV's frames)."""
        return None if self.format == "rgb" else self.matrix

    @property
    def yuv_bytes(self) -> int:
        """Bytes of one decoded I420 frame (``yuv420``, ``lossless`` and ``jpeg``)."""
        return yuv420_bytes(self.height, self.width)

    @property
    def share(self) -> int:
        """How many stores share the storage: the cameras of an atlas, else 1 (sizes are this store's share)."""
        return 1 if self.atlas is None else self.atlas.atlas.layout.cameras

    @property
    def frame_bytes(self) -> int:
        """Stored bytes per frame (``jpeg``, ``lossless``: the mean; an atlas camera: its share)."""
        return self.kind.frame_bytes(self)

    @property
    def nbytes(self) -> int:
        """Bytes the storage holds (the whole file for a disk-tier subset; an atlas camera: its share, so
        the cameras' sizes add up to the atlas's)."""
        return self.kind.nbytes(self)

    def episode_bytes(self, offsets) -> np.ndarray:
        """Stored bytes of each episode's frames, int64 ``[E]``, for frame ``offsets [E+1]`` (host): what a
        rank holding those episodes holds (``jpeg``, ``lossless``: each frame's own size)."""
        return self.kind.episode_bytes(self, np.asarray(offsets, np.int64))

    def __repr__(self) -> str:
        q = f" q{self.qscale}" if self.format == "jpeg" else ""
        if self.atlas is not None:
            q += f", camera {self.atlas.camera} of an atlas of {self.share}"
        return (f"FrameStore({len(self)} frames {self.height}x{self.width}x{self.channels}, {self.format}{q}, "
                f"{self.tier} tier, {self.nbytes / 1e9:.2f} GB)")

    # --- gather --------------------------------------------------------------------------

    def storage_ids(self, ids):
        """Subset row map applied on the device (negative ids stay negative: zero frames)."""
        if self.rows is None:
            return ids
        torch = _torch()
        return torch.where(ids >= 0, self.rows[ids.clamp(min=0)], ids)

    def gather(self, ids, *, layout: str = "BTHWC", size: tuple[int, int] | None = None, float_out: bool = False,
               host_ids=None, augment: dict | None = None):
        """Frames ``ids [...]`` (int64 on ``device``; < 0 gives a zero frame) decoded into a new tensor.

        ``layout="BTHWC"``: ``[..., H', W', C]`` in the stored dtype (uint8 resized values rounded), or
        float32 when ``float_out``. ``layout="BTCHW"``: float32 ``[..., C, H', W']`` in [0, 1] for uint8 frames
        (stored value / 255); without resize its memory is channels-last (the frames' HWC order, Conv2d's
        fast layout), with resize contiguous. ``size``: ``(H', W')`` after bilinear resizing.
        ``host_ids``: the same ids as host numpy, when the caller has them (the disk tier then stages the
        frames without reading ``ids`` back from the GPU). ``augment``: ``gather_frames``' augmentation
        keywords (``augment``, ``augment_group``, ``scratch``, ``antialias``, ``mean``, ``std``; built by
        plans.FramePlan from a Window's Augment): ``size`` is then the augmented output's, and ``BTCHW`` or
        ``float_out`` gives float32 in [0, 1] (normalized when mean/std are given), ``BTHWC`` uint8.
        """
        torch = _torch()
        lead = tuple(ids.shape)
        M = math.prod(lead)
        H, W = (self.height, self.width) if size is None else (int(size[0]), int(size[1]))
        C = self.channels
        u8 = self.dtype == torch.uint8
        if layout == "BTCHW":
            if size is None and augment is None:
                buf = torch.empty(lead + (H, W, C), dtype=torch.float32, device=self.device)
                view, result = buf.view(M, H, W, C), buf.permute(*range(len(lead)), len(lead) + 2, len(lead),
                                                                   len(lead) + 1)
            else:
                buf = torch.empty(lead + (C, H, W), dtype=torch.float32, device=self.device)
                view, result = buf.view(M, C, H, W).permute(0, 2, 3, 1), buf
            scale = 255.0 if u8 and augment is None else None
        else:
            dtype = torch.float32 if float_out else self.dtype
            result = torch.empty(lead + (H, W, C), dtype=dtype, device=self.device)
            view, scale = result.view(M, H, W, C), None
        if M:
            self._gather_into(view, ids.reshape(M), scale, host_ids, augment)
        return result

    def _gather_into(self, view, ids, scale, host_ids=None, extra=None):
        self.kind.gather_into(self, view, ids, scale, host_ids, extra)

    def __getitem__(self, index):
        """Decoded frames ``[n, H, W, C]`` on ``device``: an int, a slice, or an index tensor/array."""
        torch = _torch()
        n = len(self)
        if isinstance(index, (int, np.integer)):
            if not -n <= index < n:
                raise IndexError(f"frame {index} out of range for {n} frames")
            return self.gather(torch.tensor([int(index) % n], device=self.device))[0]
        if isinstance(index, slice):
            ids = torch.arange(*index.indices(n), device=self.device)
        else:
            ids = torch.as_tensor(index, device=self.device).to(torch.int64).reshape(-1)
            if ids.numel() and (int(ids.min()) < -n or int(ids.max()) >= n):
                raise IndexError(f"frame index out of range for {n} frames")
            ids = ids % max(n, 1)
        return self.gather(ids)

    def chunks(self, frames: int = 256):
        """Decoded frames in chunks of ``frames``, on ``device`` (statistics, export)."""
        for a in range(0, len(self), frames):
            yield self[a:a + frames]

    # --- copies --------------------------------------------------------------------------

    def subset(self, rows, device=None) -> "FrameStore":
        """The store with only frames ``rows`` (int64 numpy, in that order), its batches landing on
        ``device`` (default: this store's; as ``subset(rows).to(device)``). Device/host/cpu tiers copy the
        rows into the same tier, once, straight to where they will live: a host-tier shard bound for a GPU
        into pinned memory, a device-tier one into GPU memory (a copy to plain memory first, then pinned or
        moved, made two ranks building at once take 4.5 s for a 4.4 GB shard). A disk-tier store keeps its
        file and a row map."""
        torch = _torch()
        dest = self.device if device is None else torch.device(device)
        rows = np.asarray(rows, dtype=np.int64)
        if self.host_rows is not None:
            rows = self.host_rows[rows]
        return self.kind.subset(self, rows, dest)

    def to(self, device) -> "FrameStore":
        """The store with batches landing on ``device``: a device-tier store moves; host/disk stores keep
        their memory (a CPU dataset reads them directly; host memory is pinned for a GPU)."""
        device = _torch().device(device)
        return self if device == self.device else self.kind.to(self, device)
