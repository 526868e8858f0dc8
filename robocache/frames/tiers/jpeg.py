"""Each frame's I420 planes as a JPEG in host memory (or mapped from the cache file past the host budget);
a batch decodes only its sampled frames, on the GPU with nvJPEG (lossy: opt-in or the plan's last resort)."""
from __future__ import annotations

import numpy as np

from .coded import CodedTier


class JpegTier(CodedTier):
    name = "compressed"
    auto_rank = 4
    holds = "frames as JPEG"
    formats = ("jpeg",)
    lossy = True
    shares_atlas = True

    def planned_bytes(self, need) -> int:
        return need.compressed_bytes

    def make(self, a, *, format, height, width, path, qscale, device):
        if format != "yuv420":
            raise ValueError(f"tier 'compressed' codes yuv420 frames (the video decoder's), got format {format!r}")
        from ..jpeg import encode_all, pack
        data, offsets = pack(encode_all(a, height, width, qscale))
        return data, {"format": "jpeg", "offsets": offsets, "qscale": qscale}

    def attach(self, store) -> None:
        if store.is_cuda and not isinstance(store.data, np.memmap):
            # nvJPEG copies the sampled bitstreams to the device: from pinned memory
            from ..pinned import pinned_bytes
            store.data = pinned_bytes(store.data)

    def gather_into(self, store, view, ids, scale, host_ids, extra) -> None:
        from ..jpeg import gather_jpeg
        gather_jpeg(store, view, ids, scale, host_ids, extra)
