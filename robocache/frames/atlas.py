"""The compressed tier's atlas: the cameras of a timestep coded as ONE JPEG, so a batch makes one nvJPEG
decode per timestep instead of one per camera.

nvJPEG's cost at robot-camera sizes is per image, not per pixel: on one H100 (hardware backend, 192
timesteps of 3 cameras at 180x320) one decode per camera frame gave 36.9k camera frames/s, one batched call
of all 576 frames 33.4k, and 192 three-camera atlases 86.9k (docs/perf-notes.md, bench_scale's
layout_bench); the PSNR of the atlas frames is the single frames' (41.58 against 41.57 dB at qscale 2).

Layout (``AtlasLayout``): the K cameras' I420 frames (same size and format) stacked top to bottom, each
camera's rows padded to the JPEG MCU (16 rows for 4:2:0) by repeating its last row, so no 8x8 block
holds two cameras: a camera's pixels depend only on its own frame. The atlas is one I420 image
``[K * pad_height, width]``; camera k's planes are rows ``k * pad_height ..`` of its Y plane and
``k * pad_height / 2 ..`` of U and V (``split``).

Ingest (``ingest_atlas``): per episode, K decoders (one per camera) run in lockstep, a chunk of frames at
a time; each chunk of timesteps is composed and coded as atlases. The cache entry covers every camera's
sources. Cameras are grouped only when their frame counts agree per episode; if their decoded frame
times then differ, the group is coded per camera instead (``TimesDiffer``).

Per batch (``JpegAtlas.decode``): the sampled timesteps are decoded once; each camera's store takes its
planes from that decode. Each thread keeps its last decode (the loader makes two batches at once on two
threads), keyed by the sampled rows, the device and the CUDA stream: the K windows of a batch ask for the
same rows one after another, and the second and third get the first's planes, which are let go once
every camera has had them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .._util import cpu_count, progress_bar
from ..video import Job, Rows, Ticker, decode_job
from ..video.layout import yuv420_bytes

MCU = 16            # JPEG 4:2:0 MCU height in luma rows
_CHUNK = 8          # timesteps a camera's decoder hands over at once (its ring holds two chunks)


def enabled() -> bool:
    """Whether streams may share an atlas: ``ROBOCACHE_JPEG_ATLAS=0`` codes every camera on its own."""
    return os.environ.get("ROBOCACHE_JPEG_ATLAS", "1").strip() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class AtlasLayout:
    """K cameras of ``height x width`` I420 frames stacked into one I420 image."""

    cameras: int
    height: int
    width: int

    @property
    def pad_height(self) -> int:
        """A camera's rows in the atlas: its height rounded up to the MCU."""
        return -(-self.height // MCU) * MCU

    @property
    def atlas_height(self) -> int:
        return self.cameras * self.pad_height

    @property
    def atlas_bytes(self) -> int:
        return yuv420_bytes(self.atlas_height, self.width)

    def _planes(self, rows, h: int):
        """Views Y ``[n, K, h, W]``, U and V ``[n, K, h/2, cw]`` of atlas rows (``h``: pad_height) or
        of K cameras' rows stacked ``[n, K, frame]`` (``h``: height, chroma ceil(h/2))."""
        n, K, W = rows.shape[0], self.cameras, self.width
        ch, cw = (h + 1) // 2, (W + 1) // 2
        Y, C = K * h * W, K * ch * cw
        return (rows[:, :Y].reshape(n, K, h, W), rows[:, Y:Y + C].reshape(n, K, ch, cw),
                rows[:, Y + C:Y + 2 * C].reshape(n, K, ch, cw))

    def compose(self, cameras: list) -> np.ndarray:
        """K cameras' I420 rows (each ``[n, yuv420_bytes(height, width)]``) -> atlas rows ``[n, atlas_bytes]``."""
        if len(cameras) != self.cameras:
            raise ValueError(f"an atlas of {self.cameras} cameras got {len(cameras)}")
        n, H, W = len(cameras[0]), self.height, self.width
        ch, cw = (H + 1) // 2, (W + 1) // 2
        out = np.empty((n, self.atlas_bytes), np.uint8)
        y, u, v = self._planes(out, self.pad_height)
        for k, rows in enumerate(cameras):
            rows = np.asarray(rows, np.uint8).reshape(n, -1)
            if rows.shape[1] != yuv420_bytes(H, W):
                raise ValueError(f"camera {k}: rows of {rows.shape[1]} bytes, expected {yuv420_bytes(H, W)} "
                                 f"({H}x{W} I420)")
            planes = (rows[:, :H * W].reshape(n, H, W), rows[:, H * W:H * W + ch * cw].reshape(n, ch, cw),
                      rows[:, H * W + ch * cw:].reshape(n, ch, cw))
            for dst, src in zip((y, u, v), planes):
                h = src.shape[1]
                dst[:, k, :h] = src
                dst[:, k, h:] = src[:, h - 1:h]      # MCU padding: the last row repeated
        return out

    def split(self, atlas, k: int, out=None):
        """Camera ``k``'s I420 rows ``[n, yuv420_bytes(height, width)]`` out of atlas rows (numpy, or
        torch on any device: three strided copies)."""
        n, H, W = atlas.shape[0], self.height, self.width
        ch, cw = (H + 1) // 2, (W + 1) // 2
        if out is None:
            out = (np.empty((n, yuv420_bytes(H, W)), np.uint8) if isinstance(atlas, np.ndarray) else
                   atlas.new_empty((n, yuv420_bytes(H, W))))
        y, u, v = self._planes(atlas, self.pad_height)
        parts = ((y, 0, H, W), (u, H * W, ch, cw), (v, H * W + ch * cw, ch, cw))
        for src, at, h, w in parts:
            dst = out[:, at:at + h * w].reshape(n, h, w)
            if isinstance(out, np.ndarray):
                dst[...] = src[:, k, :h]
            else:
                dst.copy_(src[:, k, :h])
        return out


class JpegAtlas:
    """The atlases of a group of cameras (every episode's timesteps back to back, as a JPEG store's
    frames: ``data[offsets[i]:offsets[i+1]]``) and the one decode per batch the cameras share."""

    def __init__(self, data, offsets, layout: AtlasLayout, names):
        self.data, self.offsets, self.layout, self.names = data, offsets, layout, tuple(names)
        self._last = threading.local()                # .entry: [key, planes, cameras served], per thread
        self._subsets: dict = {}                      # rows digest -> weakref of the subset's atlas
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def pin(self) -> np.ndarray:
        """The atlases' bytes in pinned memory (once for every camera's store; a GPU batch's nvJPEG reads them)."""
        from .pinned import pinned_bytes
        with self._lock:
            if not isinstance(self.data, np.memmap):
                self.data = pinned_bytes(self.data)
            return self.data

    def decode(self, rows: np.ndarray, device, decode) -> object:
        """Atlas rows ``rows`` decoded (``decode(rows, planes)`` fills I420 atlas planes: numpy on the CPU,
        a CUDA tensor on ``device``), or the last decode's planes when it was of the same rows on the same
        device and stream."""
        import torch
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (rows.tobytes(), str(device), stream)
        # per thread: the loader makes two batches at once on two threads (robocache/loader/batches.py)
        last = getattr(self._last, "entry", None)
        if last is not None and last[0] == key:
            last[2] += 1
            if last[2] >= self.layout.cameras:   # every camera has had it: its memory goes back
                self._last.entry = None
            return last[1]
        planes: object = (torch.empty((len(rows), self.layout.atlas_bytes), dtype=torch.uint8, device=device)
                          if device.type == "cuda" else np.empty((len(rows), self.layout.atlas_bytes), np.uint8))
        decode(rows, planes)
        self._last.entry = [key, planes, 1]
        return planes

    def subset(self, rows: np.ndarray, take) -> JpegAtlas:
        """The atlas of timesteps ``rows``, shared by every camera that asks for the same rows (a rank's
        shard holds its atlases once, not once per camera). ``take(data, offsets, rows)`` copies them."""
        import hashlib
        digest = hashlib.blake2b(np.ascontiguousarray(rows, np.int64).tobytes(), digest_size=16).digest()
        with self._lock:
            ref = self._subsets.get(digest)
            got = ref() if ref is not None else None
            if got is None:
                data, offsets = take(self.data, self.offsets, rows)
                got = JpegAtlas(data, offsets, self.layout, self.names)
                self._subsets[digest] = weakref.ref(got)
            return got


@dataclass(frozen=True)
class AtlasPart:
    """What a camera's FrameStore holds of a shared atlas: the atlas and its camera index."""

    atlas: JpegAtlas
    camera: int


def stores(data, offsets, names, *, height: int, width: int, device, qscale: int, matrix: str = "bt601",
           full_range: bool = False, path: str | None = None, origin=None) -> dict:
    """``{camera: FrameStore}`` over atlases of ``len(names)`` cameras of ``height x width`` (the JPEG
    bitstreams ``data`` + ``offsets``, one per timestep), in the compressed tier: one store per camera,
    all over the same bytes."""
    from .store import FrameStore
    shared = JpegAtlas(data, offsets, AtlasLayout(len(names), int(height), int(width)), names)
    return {k: FrameStore(data, format="jpeg", height=height, width=width, channels=3, tier="compressed",
                          device=device, matrix=matrix, full_range=full_range, path=path, offsets=offsets,
                          qscale=qscale, origin=origin, atlas=AtlasPart(shared, c))
            for c, k in enumerate(names)}


# ---------------------------------------------------------------------------------------------
# ingest


class TimesDiffer(ValueError):
    """The cameras of a group decoded to different frame times: they are coded one by one instead."""


def group_key(spec, counts) -> tuple:
    """Cameras with equal keys may share an atlas: same decoded geometry and color, same frames per episode."""
    return (spec.format, spec.height, spec.width, spec.matrix, spec.full_range, tuple(np.asarray(counts).tolist()))


def code_atlas(cameras: list, spec, counts, rates: list, layout: AtlasLayout, qscale: int, encode, *,
               workers: int | None, show_progress, desc: str) -> tuple[list, list]:
    """Every episode's timesteps as atlas bitstreams: ``(frames, times)``, frames in store order (one
    ``bytes`` per timestep), times per episode (camera 0's). ``cameras[k][e]``: camera k's source of
    episode e; ``rates[k][e]`` its file's frame rate; ``encode(atlas_rows)`` -> bitstreams.

    An episode's K decoders run on K threads in lockstep: each hands over chunks of ``_CHUNK`` frames
    through a queue of two, so a worker holds a few frames per camera, whatever the episode's length.
    Raises TimesDiffer when a camera's frame times are not camera 0's."""
    bar = progress_bar(int(np.sum(counts)), desc, show_progress)
    coding = _AtlasCoding(cameras, spec, counts, rates, layout, encode, bar)
    t0 = time.perf_counter()
    try:
        # K decoder threads per episode: episodes at once so that decoders ~ cores
        with ThreadPoolExecutor(max(1, (workers or cpu_count()) // layout.cameras or 1),
                                thread_name_prefix="robocache-atlas") as pool:
            list(pool.map(coding.episode, range(len(counts))))
    finally:
        if bar is not None:
            bar.close()
    if any(f is None for f in coding.frames):
        raise RuntimeError(f"atlas coding stopped after {time.perf_counter() - t0:.1f} s with frames missing")
    return coding.frames, coding.times


class _AtlasCoding:
    """The atlases of every episode: ``frames`` (store order) and ``times`` (per episode) as they are coded;
    ``stop`` set by the first error, which every decoder sees at its next frame."""

    def __init__(self, cameras: list, spec, counts, rates: list, layout: AtlasLayout, encode, bar):
        self.cameras, self.spec, self.rates, self.layout = cameras, spec, rates, layout
        self.encode, self.bar = encode, bar
        self.counts = np.asarray(counts, np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.frames: list = [None] * int(self.starts[-1])
        self.times: list = [None] * len(self.counts)
        self.stop = threading.Event()

    def episode(self, e: int) -> None:
        """Episode e: its K cameras decoded on K threads of their own, each chunk of timesteps coded here."""
        if self.stop.is_set():
            return
        K = self.layout.cameras
        queues: list[queue.Queue] = [queue.Queue(maxsize=2) for _ in range(K)]
        threads = [threading.Thread(target=self.camera, args=(k, e, q), name=f"robocache-atlas-{k}", daemon=True)
                   for k, q in enumerate(queues)]
        for t in threads:
            t.start()
        tick = Ticker(self.bar)
        try:
            while True:
                got = [_take(q, self.stop) for q in queues]
                for item in got:
                    if item[0] == "error":
                        raise item[1]
                tags = {item[0] for item in got}
                if tags == {"times"}:
                    self.finished(e, [item[1] for item in got])
                    return
                if "times" in tags or len(tags) != 1:
                    raise RuntimeError(f"episode {e}: the cameras' decoders fell out of step")
                bits = self.encode(self.layout.compose([item[1] for item in got]))
                at = int(self.starts[e]) + got[0][0]
                self.frames[at:at + len(bits)] = bits
                tick(len(bits))
        except BaseException:
            self.stop.set()
            raise
        finally:
            tick.flush()
            for t in threads:
                t.join()

    def finished(self, e: int, ts: list) -> None:
        """Episode e's cameras all decoded, with frame times ``ts`` (None: stopped)."""
        if any(t is None for t in ts):
            return
        for k in range(1, len(ts)):
            if len(ts[k]) != len(ts[0]) or not np.allclose(ts[k], ts[0], rtol=0, atol=1e-6):
                raise TimesDiffer(f"episode {e}: camera {k}'s frame times differ from camera 0's")
        self.times[e] = ts[0]

    def camera(self, k: int, e: int, out: queue.Queue) -> None:
        """Camera k's source of episode e decoded into a ring of two chunks, each chunk handed to ``out``
        (``(first, rows)``), then ``("times", its frame times)`` or ``("error", exception)``."""
        try:
            ring = np.empty((2 * _CHUNK, self.spec.frame_bytes), np.uint8)
            job = Job([self.cameras[k][e]], [self.counts[e]], [0], [e], self.rates[k][e])
            rows = Rows(job.n, ring, flush=_HandOver(ring, out, self).rows)
            got = decode_job("pyav", job, rows, self.spec, threads=1, stop=self.stop)
            if got is not None:
                rows.finish(job.n)
            self.hand(out, ("times", None if got is None else got[0]))
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer, which raises it)
            self.hand(out, ("error", exc))

    def hand(self, out: queue.Queue, item) -> None:
        while not self.stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                pass


class _HandOver:
    """A camera decoder's ring: each completed chunk copied out and handed to its episode's coder."""

    def __init__(self, ring: np.ndarray, out: queue.Queue, coding: _AtlasCoding):
        self.ring, self.out, self.coding = ring, out, coding

    def rows(self, first: int, sl: slice) -> None:
        self.coding.hand(self.out, (first, self.ring[sl].copy()))


def _take(q: queue.Queue, stop: threading.Event):
    while True:
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                return ("times", None)
