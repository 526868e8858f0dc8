"""robocache.remote.mp4: the bytes an mp4's spans need, from its moov alone (issue 48).

- the sample table (offsets, sizes, presentation times, keyframes) is PyAV's demux of the same file, for
  AV1 with the moov at the end and at the start, H.264 with B-frames (ctts, an edit list) and a LeRobot v3.0
  file of episodes concatenated;
- a backward seek never starts later than FFmpeg's own (the packet PyAV reads first after the seek);
- decoding a span from a copy holding only the ranges found, every other byte poisoned, gives the frames of
  the original (robocache's own decoder, the one a load runs);
- a fragmented mp4 is Unsupported (fetched whole); byte-range arithmetic against a bitmap reference.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

av = pytest.importorskip("av")

from lerobot_forge import concat_videos  # noqa: E402
from robocache.remote import mp4  # noqa: E402
from robocache.remote.ranges import chunks, merge, subtract  # noqa: E402
from robocache.video import FrameSpec, Job, Rows, VideoSource, decode_job, probe_sources  # noqa: E402
from robocache.video.decode import MAX_FRAME_THREADS, SEEK_GAP  # noqa: E402
from robocache.video.encode import encode_mp4  # noqa: E402

FPS = 10


def _encode(path, codec: str, frames: np.ndarray, options=None, container_options=None) -> None:
    encode_mp4(path, frames, codec, FPS, options, container_options)     # AV1 in a child, with a deadline


def _frames(rng, n, h=32, w=48):
    """Frames a poisoned byte would change: a moving gradient plus noise."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 5 + 3 * k) % 256 for k in range(n)])
    return np.stack([base, np.roll(base, 1, 0), (yy * 7)[None].repeat(n, 0)], -1).astype(np.uint8) \
        + rng.integers(0, 24, (n, h, w, 3), dtype=np.uint8)


def _concat(paths, out):
    """mp4s back to back in one file, packets copied (LeRobot v3.0's layout); (start, end) seconds of each."""
    spans = concat_videos(av, list(paths), out.parent, per_file=len(paths), fps=FPS)
    (out.parent / "file-000.mp4").rename(out)
    return [(a, b) for _, a, b in spans]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    rng = np.random.default_rng(int.from_bytes(np.random.SeedSequence().generate_state(1).tobytes(), "little"))
    d = tmp_path_factory.mktemp("mp4")
    out = {}
    out["av1"] = d / "av1.mp4"                                   # moov at the end (the muxer's default)
    _encode(out["av1"], "libsvtav1", _frames(rng, 60), {"g": "2", "crf": "30"})
    out["av1-faststart"] = d / "av1_faststart.mp4"
    _encode(out["av1-faststart"], "libsvtav1", _frames(rng, 60), {"g": "2", "crf": "30"}, {"movflags": "faststart"})
    out["h264-bframes"] = d / "h264.mp4"                          # ctts and an edit list
    _encode(out["h264-bframes"], "libx264", _frames(rng, 70), {"g": "12", "bf": "3"})
    parts = []
    for k, n in enumerate((23, 31, 17, 29)):
        parts.append(d / f"ep{k}.mp4")
        _encode(parts[-1], "libsvtav1", _frames(rng, n), {"g": "2", "crf": "30"})
    out["v30"] = d / "v30.mp4"
    out["v30-spans"] = _concat(parts, out["v30"])
    return out


FILES = ["av1", "av1-faststart", "h264-bframes", "v30"]


def _track(path):
    data = path.read_bytes()
    read = lambda a, b: data[a:b]  # noqa: E731
    boxes, seen = mp4.top_boxes(read, len(data))
    moov = next(b for b in boxes if b.kind == b"moov")
    tracks = mp4.parse_moov(mp4.box_bytes(moov, seen, read))
    return boxes, tracks, mp4.video_track(tracks)


@pytest.mark.parametrize("name", FILES)
def test_sample_table_is_pyavs_demux(videos, name):
    _, _, t = _track(videos[name])
    with av.open(str(videos[name])) as c:
        s = c.streams.video[0]
        pk = [(p.pos, p.size, p.pts, p.is_keyframe) for p in c.demux(s) if p.size]
        assert s.time_base == Fraction(1, t.timescale)
    assert len(pk) == t.n
    assert [p[0] for p in pk] == t.offsets.tolist()
    assert [p[1] for p in pk] == t.sizes.tolist()
    assert [p[2] for p in pk] == t.pts.tolist()
    assert [p[3] for p in pk] == t.sync.tolist()
    assert t.reorders == (name == "h264-bframes")


@pytest.mark.parametrize("name", FILES)
def test_seek_never_starts_after_ffmpegs(videos, name):
    _, _, t = _track(videos[name])
    with av.open(str(videos[name])) as c:
        s = c.streams.video[0]
        tb = float(s.time_base)
        for lo in np.linspace(0.01, t.pts.max() / t.timescale, 37):
            c.seek(max(0, int(math.floor(lo / tb))), stream=s, backward=True, any_frame=False)
            first = next(p for p in c.demux(s) if p.size)
            k0, _ = mp4.span_samples(t, float(lo), float(lo) + 0.5)
            assert t.offsets[k0] <= first.pos, (lo, k0, first.pos)


def _poisoned_copy(src, dst, keep, rng):
    """``src`` with every byte outside ``keep`` replaced by random bytes."""
    data = bytearray(src.read_bytes())
    mask = np.ones(len(data), bool)
    for a, b in keep:
        mask[a:b] = False
    arr = np.frombuffer(data, np.uint8).copy()
    arr[mask] = rng.integers(0, 256, int(mask.sum()), dtype=np.uint8)
    dst.write_bytes(arr.tobytes())
    return int(mask.sum())


def _decode(src: VideoSource, threads: int):
    """robocache's decoder on one source (as ``decode_video``), with ``threads`` decoder threads: more frame
    threads read further past a span's end (dav1d: up to 8 frames in flight)."""
    yuv, counts, infos = probe_sources([src], backend="pyav")
    spec = FrameSpec.make("rgb", yuv.height, yuv.width, yuv.matrix, yuv.full_range)
    n = int(counts[0])
    frames = np.empty((n, spec.height, spec.width, 3), np.uint8)
    times = decode_job("pyav", Job([src], [n], [0], [0], infos[0].fps), Rows(n, frames.reshape(n, -1)), spec,
                       threads=threads)
    return frames, times[0]


@pytest.mark.parametrize("threads", [0, 64], ids=["auto-threads", "64-threads"])
@pytest.mark.parametrize("name", FILES)
def test_a_span_decodes_from_its_ranges_alone(videos, name, threads, tmp_path):
    """Spans at the start, inside, across keyframes and at the end: the decoder reads nothing else, however
    many frames it keeps in flight."""
    boxes, tracks, t = _track(videos[name])
    n = t.n
    rng = np.random.default_rng(n)
    spans = videos["v30-spans"] if name == "v30" else [(0.0, 1.3), (0.7, 2.9), (2.2, n / FPS), (1.1, 1.2)]
    for start, end in spans:
        keep = mp4.needed_ranges(boxes, tracks, {0: mp4.decoded_bounds(t, [(start, end)])}, SEEK_GAP)
        copy = tmp_path / f"{name}-{start}.mp4"
        poisoned = _poisoned_copy(videos[name], copy, keep, rng)
        assert poisoned > 0 or end - start > 0.8 * n / FPS        # something was left out
        want, wt = _decode(VideoSource(str(videos[name]), start=start, end=end), threads)
        got, gt = _decode(VideoSource(str(copy), start=start, end=end), threads)
        assert want.shape == got.shape and np.array_equal(want, got), (name, start, end)
        assert np.array_equal(wt, gt)


def test_the_decoder_reads_no_further_than_a_mirror_holds():
    """A decoder's frame threads bound how far past a span it reads; the mirror keeps DECODER_DELAY packets
    there. Asked for 64 threads, FFmpeg 7 (PyAV 15) read past them into bytes never fetched (the 64-threads
    cases above failed so): robocache's decoder caps the count at what the mirror holds."""
    assert MAX_FRAME_THREADS <= mp4.DECODER_DELAY


def test_ranges_of_a_span_are_a_small_part_of_the_file(videos):
    """An episode's ranges: its own packets plus the keyframe before and the decoder's delay after."""
    boxes, tracks, t = _track(videos["v30"])
    for start, end in videos["v30-spans"]:
        keep = mp4.needed_ranges(boxes, tracks, {0: mp4.decoded_bounds(t, [(start, end)])}, SEEK_GAP)
        own = mp4.span_bytes(t, start - 0.05, end - 0.05)
        held = sum(b - a for a, b in keep)
        assert own < held
        lead = t.sizes[:mp4.PROBE_PACKETS].sum() + sum(b.size for b in boxes if b.kind != b"mdat")
        assert held <= own + lead + t.sizes.max() * (mp4.AV1_DELAY + 3)


def test_fragmented_mp4_is_unsupported(tmp_path):
    p = tmp_path / "frag.mp4"
    _encode(p, "libx264", _frames(np.random.default_rng(0), 20), {"g": "5"},
            {"movflags": "frag_keyframe+empty_moov"})
    data = p.read_bytes()
    with pytest.raises(mp4.Unsupported, match="fragmented"):
        mp4.top_boxes(lambda a, b: data[a:b], len(data))


def test_truncated_file_is_unsupported(videos):
    data = videos["av1"].read_bytes()[:-100]
    with pytest.raises(mp4.Unsupported, match="runs past the end"):
        mp4.top_boxes(lambda a, b: data[a:b], len(data))


def _bitmap(ranges, n):
    m = np.zeros(n, bool)
    for a, b in ranges:
        m[a:b] = True
    return m


def test_range_arithmetic_against_a_bitmap():
    rng = np.random.default_rng()
    for _ in range(300):
        n = 200
        def some():
            a = rng.integers(0, n, rng.integers(0, 8))
            return [(int(x), int(min(n, x + rng.integers(0, 30)))) for x in a]
        want, have = some(), some()
        m = merge(want)
        assert np.array_equal(_bitmap(m, n), _bitmap(want, n))
        assert all(b > a for a, b in m) and all(m[i][1] < m[i + 1][0] for i in range(len(m) - 1))
        s = subtract(m, merge(have))
        assert np.array_equal(_bitmap(s, n), _bitmap(want, n) & ~_bitmap(have, n))
        c = chunks(s, 7)
        assert np.array_equal(_bitmap(c, n), _bitmap(s, n)) and all(b - a <= 7 for a, b in c)
