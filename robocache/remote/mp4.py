"""Which bytes of an mp4 a decoder reads for an episode's span, found from the file's index alone: the
top-level boxes read by range (a header each), the ``moov`` box, and in it each track's sample table
(``stsz``/``stz2`` sizes, ``stco``/``co64`` chunk offsets, ``stsc`` chunks, ``stts``/``ctts`` times,
``stss`` keyframes, ``elst`` edits). Plain ``struct``/NumPy parsing: only robocache/video opens video
files with a video library (tests/test_layering.py), and this reads bytes, never frames.

What ``robocache.video.decode`` does with a span ``[lo, hi)`` (``span_bounds``) is what is covered: it seeks
to the keyframe before ``lo`` (FFmpeg's ``seek(backward=True)``), decodes through every packet in decode
order, keeps the frames in spans, decodes through gaps up to ``SEEK_GAP`` seconds, and stops at the
first frame at or past ``hi``, having read up to the decoder's delay in packets beyond it. Opening the
file (``avformat_find_stream_info``) reads the first packets of each track. Everything else is left out.

Files this does not read (fragmented mp4, edit lists of several edits or another rate, a box that runs past
the end) raise ``Unsupported``; the caller then fetches them whole.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from .ranges import merge

#: packets a decoder may read past the frame it hands back: dav1d (AV1) keeps at most 8 frames in flight,
#: FFmpeg's frame threads at most 16 (its automatic thread count's cap, and robocache's decoder never asks for
#: more: video.decode.MAX_FRAME_THREADS); B-frame reordering adds up to 16
AV1_DELAY = 10
DECODER_DELAY = 16
REORDER_DELAY = 16
#: packets of each track that opening the file reads (FFmpeg's probe of codec parameters; 1 was measured)
PROBE_PACKETS = 8
#: a box header this close to the end of the file is read with everything after it (a moov at the end
#: comes whole with its header); further in, only the header (16 bytes) is read
HEADER_READ = 256 * 1024
#: boxes other than mdat up to this size are read whole as soon as their header is seen (moov: its index)
WHOLE_BOX = 16 * 1024 * 1024
#: times within this many seconds of a span's bound count as inside it (PyAV's float times round)
EPS = 1e-6


class Unsupported(ValueError):
    """An mp4 whose layout this module does not read: fetched whole instead."""


@dataclass
class Box:
    kind: bytes      # four characters, b"moov"
    start: int       # byte offset of its header in the file
    size: int        # header included
    head: int        # header bytes (8, or 16 with a 64-bit size)


@dataclass
class Track:
    """One track's samples in decode order (int64 ``[n]`` each): byte ``offsets`` and ``sizes`` in the
    file, ``pts`` in ticks of ``timescale`` as FFmpeg presents them (edit list applied), ``seek_ts`` the
    latest tick FFmpeg's index could give the sample when a seek compares it (its dts and pts before the
    edit shift: never earlier than FFmpeg's), ``sync`` keyframes; ``codec``: the sample entry (b"av01")."""
    handler: bytes
    codec: bytes
    timescale: int
    offsets: np.ndarray
    sizes: np.ndarray
    pts: np.ndarray
    seek_ts: np.ndarray
    sync: np.ndarray
    reorders: bool

    @property
    def n(self) -> int:
        return int(self.sizes.size)

    @property
    def delay(self) -> int:
        """Packets the decoder may read past the frame that ends a span."""
        return (AV1_DELAY if self.codec == b"av01" else DECODER_DELAY) + (REORDER_DELAY if self.reorders else 0)


# ---------------------------------------------------------------------------------------------
# the top-level boxes, by range


def top_boxes(read, size: int, first: int = 4096) -> tuple[list[Box], dict]:
    """Every top-level box of a file of ``size`` bytes, reading only headers (``read(start, end)`` -> bytes),
    and the bytes read on the way (``{start: bytes}``), which hold the small boxes whole."""
    seen: dict[int, bytes] = {}
    buf_at, buf = 0, read(0, min(size, first))
    seen[0] = buf
    boxes, pos = [], 0
    while pos < size:
        need = min(16, size - pos)
        if need < 8:
            raise Unsupported(f"{size - pos} stray bytes at the end of the file (offset {pos})")
        if not (buf_at <= pos and pos + need <= buf_at + len(buf)):
            buf_at, buf = pos, read(pos, size if size - pos <= HEADER_READ else pos + 16)
            seen[pos] = buf
        h = buf[pos - buf_at:pos - buf_at + need]
        small, kind = struct.unpack(">I4s", h[:8])
        head, box = 8, small
        if small == 1:
            if need < 16:
                raise Unsupported(f"a box header cut by the end of the file at offset {pos}")
            box, head = struct.unpack(">Q", h[8:16])[0], 16
        elif small == 0:
            box = size - pos
        if box < head or pos + box > size:
            raise Unsupported(f"box {kind!r} at offset {pos} of {box} bytes runs past the end ({size} bytes)")
        if kind != b"mdat" and box <= WHOLE_BOX and pos + min(box + 16, size - pos) > buf_at + len(buf):
            # a small box (moov, ftyp, free) read whole with the next header, in one request
            buf_at, buf = pos, read(pos, min(size, pos + box + 16))
            seen[pos] = buf
        boxes.append(Box(kind, pos, box, head))
        if len(boxes) > 10_000:
            raise Unsupported("more than 10,000 top-level boxes")
        pos += box
    if any(b.kind == b"moof" for b in boxes):
        raise Unsupported("a fragmented mp4 (moof boxes): its samples are not indexed in moov")
    if not any(b.kind == b"moov" for b in boxes):
        raise Unsupported("no moov box")
    return boxes, seen


def box_bytes(box: Box, seen: dict, read) -> bytes:
    """A box's bytes, from what ``top_boxes`` read when they hold it, else read."""
    for at, buf in seen.items():
        if at <= box.start and box.start + box.size <= at + len(buf):
            return buf[box.start - at:box.start - at + box.size]
    return read(box.start, box.start + box.size)


# ---------------------------------------------------------------------------------------------
# the sample tables


def _children(data: bytes, start: int, end: int):
    """(kind, payload start, box end) of the boxes in ``data[start:end]``."""
    pos = start
    while pos + 8 <= end:
        small, kind = struct.unpack_from(">I4s", data, pos)
        head, size = 8, small
        if small == 1:
            size, head = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif small == 0:
            size = end - pos
        if size < head or pos + size > end:
            raise Unsupported(f"box {kind!r} inside moov runs past its parent")
        yield kind, pos + head, pos + size
        pos += size


def _find(data, start, end, path: list[bytes]):
    """The payload (start, end) of the first box along ``path`` below ``[start, end)``, or None."""
    for kind, a, b in _children(data, start, end):
        if kind == path[0]:
            return (a, b) if len(path) == 1 else _find(data, a, b, path[1:])
    return None


def _table(data, at, count: int, fields: str) -> np.ndarray:
    """``count`` big-endian records of ``fields`` (a numpy dtype string of one record) at ``at``."""
    dt = np.dtype(fields)
    if at + count * dt.itemsize > len(data):
        raise Unsupported("a sample table runs past its box")
    return np.frombuffer(data, dt, count, at)


def parse_moov(moov: bytes) -> list[Track]:
    """Every track of a moov box (its bytes, header included) that has samples."""
    small, kind = struct.unpack_from(">I4s", moov, 0)
    if kind != b"moov":
        raise Unsupported("not a moov box")
    start = 16 if small == 1 else 8
    mvhd = _find(moov, start, len(moov), [b"mvhd"])
    if mvhd is None:
        raise Unsupported("no mvhd box")
    v = moov[mvhd[0]]
    movie_ts = struct.unpack_from(">I", moov, mvhd[0] + (20 if v == 1 else 12))[0]
    tracks = []
    for kind, a, b in _children(moov, start, len(moov)):
        if kind == b"trak":
            t = _track(moov, a, b, movie_ts)
            if t is not None:
                tracks.append(t)
    return tracks


def _track(d: bytes, a: int, b: int, movie_ts: int) -> Track | None:
    mdhd, hdlr = _find(d, a, b, [b"mdia", b"mdhd"]), _find(d, a, b, [b"mdia", b"hdlr"])
    stbl = _find(d, a, b, [b"mdia", b"minf", b"stbl"])
    if mdhd is None or hdlr is None or stbl is None:
        return None
    v = d[mdhd[0]]
    timescale = struct.unpack_from(">I", d, mdhd[0] + (20 if v == 1 else 12))[0]
    handler = d[hdlr[0] + 8:hdlr[0] + 12]
    boxes = {kind: (x, y) for kind, x, y in _children(d, *stbl)}
    stsd = boxes.get(b"stsd")
    codec = d[stsd[0] + 12:stsd[0] + 16] if stsd and stsd[1] - stsd[0] >= 16 else b""
    if b"stsz" in boxes:
        p = boxes[b"stsz"][0]
        fixed, n = struct.unpack_from(">II", d, p + 4)
        sizes = np.full(n, fixed, np.int64) if fixed else _table(d, p + 12, n, ">u4").astype(np.int64)
    elif b"stz2" in boxes:
        p = boxes[b"stz2"][0]
        bits, n = d[p + 7], struct.unpack_from(">I", d, p + 8)[0]
        if bits == 4:
            packed = _table(d, p + 12, (n + 1) // 2, ">u1")
            sizes = np.stack([packed >> 4, packed & 15], 1).reshape(-1)[:n].astype(np.int64)
        elif bits in (8, 16):
            sizes = _table(d, p + 12, n, f">u{bits // 8}").astype(np.int64)
        else:
            raise Unsupported(f"stz2 field size {bits}")
    else:
        return None
    if n == 0:
        return None
    if timescale == 0:
        raise Unsupported("a track with timescale 0")
    for need in (b"stco", b"stsc", b"stts"):
        if need not in boxes and not (need == b"stco" and b"co64" in boxes):
            raise Unsupported(f"a track without {need.decode()}")
    if b"co64" in boxes:
        p = boxes[b"co64"][0]
        chunks = _table(d, p + 8, struct.unpack_from(">I", d, p + 4)[0], ">u8").astype(np.int64)
    else:
        p = boxes[b"stco"][0]
        chunks = _table(d, p + 8, struct.unpack_from(">I", d, p + 4)[0], ">u4").astype(np.int64)
    p = boxes[b"stsc"][0]
    stsc = _table(d, p + 8, 3 * struct.unpack_from(">I", d, p + 4)[0], ">u4").reshape(-1, 3).astype(np.int64)
    offsets = _sample_offsets(sizes, chunks, stsc)
    p = boxes[b"stts"][0]
    stts = _table(d, p + 8, struct.unpack_from(">I", d, p + 4)[0], ">u4,>u4")
    deltas = np.repeat(stts["f1"].astype(np.int64), stts["f0"].astype(np.int64))[:n]
    if deltas.size < n:
        deltas = np.concatenate([deltas, np.full(n - deltas.size, deltas[-1] if deltas.size else 1, np.int64)])
    dts = np.concatenate([[0], np.cumsum(deltas)[:-1]]).astype(np.int64)
    ctts = np.zeros(n, np.int64)
    if b"ctts" in boxes:
        p = boxes[b"ctts"][0]
        t = _table(d, p + 8, struct.unpack_from(">I", d, p + 4)[0], ">u4,>i4")
        c = np.repeat(t["f1"].astype(np.int64), t["f0"].astype(np.int64))[:n]
        ctts[:c.size] = c
    sync = np.ones(n, bool)
    if b"stss" in boxes:
        p = boxes[b"stss"][0]
        idx = _table(d, p + 8, struct.unpack_from(">I", d, p + 4)[0], ">u4").astype(np.int64) - 1
        sync = np.zeros(n, bool)
        sync[idx[(idx >= 0) & (idx < n)]] = True
    delay, media = _edits(d, a, b, movie_ts, timescale)
    raw = dts + ctts
    return Track(handler=handler, codec=codec, timescale=int(timescale), offsets=offsets, sizes=sizes,
                 pts=raw - media + delay, seek_ts=np.maximum(dts, raw) + delay, sync=sync,
                 reorders=bool(ctts.any()))


def _sample_offsets(sizes: np.ndarray, chunks: np.ndarray, stsc: np.ndarray) -> np.ndarray:
    """Each sample's byte offset: chunk ``c`` holds the next ``samples per chunk`` samples back to back
    from ``chunks[c]`` (stsc: runs of chunks, from their 1-based first chunk, with their samples per chunk)."""
    n, nchunks = sizes.size, chunks.size
    if stsc.shape[0] == 0 or nchunks == 0:
        raise Unsupported("a track with samples but no chunks")
    first = stsc[:, 0] - 1
    if first[0] != 0 or (np.diff(first) <= 0).any() or first[-1] >= nchunks:
        raise Unsupported("an stsc table out of order")
    per_chunk = np.repeat(stsc[:, 1], np.diff(np.append(first, nchunks)))
    chunk_of = np.repeat(np.arange(nchunks), per_chunk)
    if chunk_of.size < n:
        raise Unsupported(f"the chunks hold {chunk_of.size} samples, stsz lists {n}")
    chunk_of = chunk_of[:n]
    before = np.cumsum(sizes) - sizes                          # bytes of the samples before, in the file's order
    chunk_first = (np.cumsum(per_chunk) - per_chunk)[chunk_of]
    return chunks[chunk_of] + before - before[chunk_first]


def _edits(d, a, b, movie_ts: int, timescale: int) -> tuple[int, int]:
    """(delay, media start) in the track's ticks from its edit list: empty edits first (a delay), then one
    edit of rate 1 starting at media time ``media start``; no list: (0, 0)."""
    elst = _find(d, a, b, [b"edts", b"elst"])
    if elst is None:
        return 0, 0
    p = elst[0]
    v, count = d[p], struct.unpack_from(">I", d, p + 4)[0]
    rows = _table(d, p + 8, count, ">u8,>i8,>i2,>u2" if v == 1 else ">u4,>i4,>i2,>u2")
    delay, media = 0, None
    for dur, start, rate, frac in rows.tolist():
        if start == -1 and media is None:
            delay += dur * timescale // max(movie_ts, 1)
            continue
        if media is not None or rate != 1 or frac != 0:
            raise Unsupported("an edit list of several edits or another rate")
        media = start
    return int(delay), int(media or 0)


# ---------------------------------------------------------------------------------------------
# the bytes of spans


def video_track(tracks: list[Track], stream: int = 0) -> Track:
    """The ``stream``-th video track (0: the first), as robocache's ``VideoSource.stream`` counts them."""
    video = [t for t in tracks if t.handler == b"vide"]
    if len(video) <= stream:
        raise Unsupported(f"no video track {stream} (the file has {len(video)})")
    return video[stream]


def decoded_bounds(track: Track, spans) -> np.ndarray:
    """``[S, 2]`` seconds of the frames the decoder keeps of each ``(start, end)`` span: ``span_bounds``' half
    a frame before each, widened by another half frame each way (the probe's frame rate and this track's
    may round apart)."""
    rate = track.n * track.timescale / max(int(track.pts.max() - track.pts.min()), 1) if track.n > 1 else 1.0
    half = 0.5 / rate
    return np.array([(s - 2 * half, e) for s, e in spans], np.float64).reshape(-1, 2)


def span_samples(track: Track, lo: float, hi: float) -> tuple[int, int]:
    """First and last sample (decode order, inclusive) the decoder reads for the frames of ``[lo, hi)``
    seconds: from the keyframe a backward seek to ``lo`` lands on (the file's start when ``lo <= 0``) to
    the frame that ends the span, plus the decoder's delay."""
    if lo <= 0:
        k0 = 0
    else:
        target = math.floor(lo / (1.0 / track.timescale))     # robocache.video.decode's seek target
        keys = np.flatnonzero(track.sync[:] & (track.seek_ts <= target))
        k0 = int(keys[-1]) if keys.size else 0
    t = track.pts[k0:] / track.timescale
    inside = np.flatnonzero(t < hi + EPS)
    last = int(inside[-1]) if inside.size else 0
    past = np.flatnonzero(t >= hi + EPS)
    if past.size:
        last = max(last, int(past[np.argmin(t[past])]))
    return k0, min(track.n - 1, k0 + last + track.delay)


def sample_ranges(track: Track, first: int, last: int, gap: int = 0) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of samples ``first..last``, sorted, touching ones (or closer than
    ``gap`` bytes) merged."""
    a = track.offsets[first:last + 1]
    b = a + track.sizes[first:last + 1]
    order = np.argsort(a, kind="stable")
    return merge(zip(a[order].tolist(), b[order].tolist()), gap)


def groups(bounds: np.ndarray, seek_gap: float) -> list[tuple[float, float]]:
    """``(lo, hi)`` of the runs of spans (``bounds`` ``[S, 2]``, sorted by start) that the decoder decodes
    through (gaps up to ``seek_gap`` seconds), as ``robocache.video.decode`` groups a job's spans."""
    out: list[list[float]] = []
    for lo, hi in bounds.tolist():
        if out and lo - out[-1][1] <= seek_gap:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def needed_ranges(boxes: list[Box], tracks: list[Track], spans: dict, seek_gap: float, gap: int = 0
                  ) -> list[tuple[int, int]]:
    """Every byte range of the file that a load of ``spans`` reads: the top-level boxes but mdat (whole; mdat's
    header), each track's first packets, and per video stream (``spans``: stream -> bounds ``[S, 2]`` in
    seconds, or None for the whole stream) the samples its span groups decode."""
    want: list[tuple[int, int]] = []
    for box in boxes:
        want.append((box.start, box.start + (box.head if box.kind == b"mdat" else box.size)))
    for t in tracks:
        want.extend(sample_ranges(t, 0, min(t.n, PROBE_PACKETS) - 1))
    for stream, bounds in spans.items():
        t = video_track(tracks, stream)
        if bounds is None:
            want.extend(sample_ranges(t, 0, t.n - 1, gap))
            continue
        order = np.argsort(bounds[:, 0], kind="stable")
        for lo, hi in groups(bounds[order], seek_gap):
            want.extend(sample_ranges(t, *span_samples(t, lo, hi), gap=gap))
    return merge(want, gap)


def span_bytes(track: Track, lo: float, hi: float) -> int:
    """Bytes of the packets whose frames fall in ``[lo, hi)`` seconds: what a span needs at the least."""
    t = track.pts / track.timescale
    return int(track.sizes[(t >= lo) & (t < hi)].sum())
