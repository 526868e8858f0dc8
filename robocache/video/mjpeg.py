"""Frames <-> baseline 4:2:0 JPEG with FFmpeg's MJPEG codec through PyAV: the compressed tier's coder at
ingest and its CPU decoder (the no-GPU path and the reference nvJPEG is tested against). I420 rows in and
out: JPEG codes YCbCr 4:2:0 natively, so there is no color conversion and no chroma resampling."""

from __future__ import annotations

import threading

import numpy as np

from .._util import require
from .layout import copy_planes, yuv420_geometry

_LOCAL = threading.local()


def _av():
    return require("av", "lerobot", "the compressed frame tier (JPEG encode/decode with PyAV)")


DEFAULT_QSCALE = 2


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
