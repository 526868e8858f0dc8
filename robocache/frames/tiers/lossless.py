"""Each frame's I420 planes MED + rANS coded, in pinned host memory (or mapped); a batch decodes its
sampled frames on the GPU: bit-identical to the host tier, about a fifth of its bytes."""
from __future__ import annotations

from .coded import CodedTier


class LosslessTier(CodedTier):
    name = "lossless"
    auto_rank = 3
    holds = "frames losslessly coded"
    formats = ("lossless",)

    def planned_bytes(self, need) -> int:
        return need.lossless_bytes

    def make(self, a, *, format, height, width, path, qscale, device):
        if format != "yuv420":
            raise ValueError(f"tier 'lossless' codes yuv420 frames (the video decoder's), got format {format!r}")
        from ..lossless import encode_all
        data, offsets = encode_all(a, height, width)
        return data, {"format": "lossless", "offsets": offsets}

    def attach(self, store) -> None:
        store.gpu = None   # on a GPU: its bytes pinned, offsets on the device (lossless.GpuSource)
        if store.is_cuda:
            from ..lossless import gpu_source
            store.gpu = gpu_source(store.data, store.offsets, store.device)
            if store.gpu is not None:   # the pinned copy is the store's bytes: one copy in RAM
                store.data = store.gpu.data.numpy()

    def host_staged(self, store) -> bool:
        return store.is_cuda and store.gpu is None

    def gather_into(self, store, view, ids, scale, host_ids, extra) -> None:
        from ..lossless import gather_lossless
        gather_lossless(store, view, ids, scale, host_ids, extra)
