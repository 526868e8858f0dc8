"""The compressed tier's per-frame CRC (robocache/frames/jpeg_check.py): what sealing, checking a whole
entry at load and checking a mapped entry's frames on first use cost, next to coding and decoding.

    python benchmarks/bench_frame_check.py [--data PATH] [--episodes 4] [--json OUT]
    python benchmarks/bench_frame_check.py --smoke      # CI: generated 48x64 frames, seconds

Frames: the first --episodes videos of a LeRobot AV1 set (--data; default shared/data/cr5_flashdrive_av1,
480x640), decoded once, or generated frames (--smoke, or no set). Rows (median of --repeats, one process):
  code      FFmpeg's MJPEG encoder per frame (at ingest), and the CRC segment added to it (seal)
  check     damaged_rows over every frame: one thread, and every core (the load's check of an entry in RAM)
  load      a cache hit of ingest_compressed (entry in RAM: read + the whole check), and its check alone
  first use the CRC of a batch's 192 frames not checked yet (a mapped entry), next to decoding them with FFmpeg
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from robocache._util import cpu_count  # noqa: E402
from robocache.frames.compress import ingest_compressed  # noqa: E402
from robocache.frames.jpeg import decode_rows_cpu, encode_rows, pack  # noqa: E402
from robocache.frames.jpeg_check import damaged_rows, seal  # noqa: E402
from robocache.video.layout import yuv420_bytes  # noqa: E402


def median_s(fn, repeats: int) -> float:
    fn()                                   # warm-up (page cache, decoder state, thread pool)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def generated(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """I420 rows of smooth moving fields plus noise (they code like camera footage)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    ch, cw = (h + 1) // 2, (w + 1) // 2
    out = np.empty((n, yuv420_bytes(h, w)), np.uint8)
    for i in range(n):
        Y = 128 + 90 * np.sin(x / 5 + i * 0.1) * np.cos(y / 7) + rng.normal(0, 4, (h, w))
        UV = 128 + rng.normal(0, 3, 2 * ch * cw)
        out[i] = np.concatenate([np.clip(Y, 16, 240).astype(np.uint8).ravel(),
                                 np.clip(UV, 16, 240).astype(np.uint8)])
    return out


def smoke_video(folder: str) -> list[str]:
    """One small mp4 of generated frames (CI: the load rows run without a data set)."""
    from robocache.video.encode import encode_mp4, pick_encoder
    path = os.path.join(folder, "smoke.mp4")
    rng = np.random.default_rng(2)
    encode_mp4(path, rng.integers(0, 255, (24, 48, 64, 3), dtype=np.uint8), pick_encoder(), 10)
    return [path]


def video_paths(data: Path, episodes: int) -> list[str]:
    root = data / "videos" / "chunk-000"
    cams = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [str(p) for p in sorted(cams[0].glob("*.mp4"))[:episodes]] if cams else []


def run(args) -> list[dict]:
    rows_out = []

    def row(what, value, unit, note=""):
        rows_out.append({"what": what, "value": value, "unit": unit, "note": note})
        print(f"{what:<48} {value:>12.3f} {unit:<10} {note}")

    tmp = tempfile.TemporaryDirectory()
    os.environ["ROBOCACHE_CACHE_DIR"] = os.path.join(tmp.name, "cache")   # a scratch cache of its own
    paths = smoke_video(tmp.name) if args.smoke else video_paths(Path(args.data), args.episodes)
    if paths:
        from robocache.frames.ingest import ingest_videos
        got = ingest_videos(paths, tier="host", cache=False, show_progress=False)
        frames, h, w = got.data.numpy(), got.spec.height, got.spec.width
        print(f"{len(paths)} videos ({paths[0]}...): {len(frames)} frames {h}x{w}")
    else:
        h, w = (48, 64) if args.smoke else (480, 640)
        frames = generated(64 if args.smoke else 512, h, w)
        print(f"generated: {len(frames)} frames {h}x{w}")
    n = len(frames)
    sub = frames[: min(n, 64)]
    raw = encode_rows(sub, h, w, 2)
    t_code = median_s(lambda: encode_rows(sub, h, w, 2), args.repeats) / len(sub)
    t_seal = median_s(lambda: [seal(b) for b in raw], args.repeats) / len(sub)
    row("code: FFmpeg MJPEG encode", t_code * 1e6, "us/frame")
    row("code: + CRC segment (seal)", t_seal * 1e6, "us/frame", f"{100 * t_seal / t_code:.2f}% of the encode")

    data, offsets = pack([seal(b) for b in encode_rows(frames, h, w, 2)])
    mb = data.nbytes / 1e6
    print(f"coded: {mb:.1f} MB, {data.nbytes / n:.0f} B/frame")
    assert len(damaged_rows(data, offsets)) == 0
    bad = data.copy()
    bad[offsets[n // 3] + 100] ^= 0x10                     # the check must find a flipped bit
    assert damaged_rows(bad, offsets).tolist() == [n // 3]
    for threads in sorted({1, cpu_count()}):
        t = median_s(lambda: damaged_rows(data, offsets, workers=threads), args.repeats)
        row(f"check every frame, {threads} threads", n / t, "frames/s", f"{mb / 1e3 / t:.2f} GB/s")

    if paths:
        # a cache hit reads the entry's pages and checks every frame; the videos are coded once first
        first = ingest_compressed(paths, show_progress=False)
        t_hit = median_s(lambda: ingest_compressed(paths, show_progress=False), args.repeats)
        t_check = median_s(lambda: damaged_rows(first.data, first.offsets), args.repeats)
        row("load: cache hit in RAM, check included", t_hit * 1e3, "ms", f"{n / t_hit:.0f} frames/s")
        row("load: the check's share", t_check * 1e3, "ms", f"{100 * t_check / t_hit:.0f}% of the load")
        row("ingest: coding the videos (first load)", first.seconds * 1e3, "ms",
            f"{n / first.seconds:.0f} frames/s, {first.seconds / t_hit:.0f}x the cache hit")
    tmp.cleanup()

    batch = np.random.default_rng(1).integers(0, n, 192)
    t_first = median_s(lambda: damaged_rows(data, offsets, batch), args.repeats)
    planes = np.empty((len(batch), yuv420_bytes(h, w)), np.uint8)
    t_dec = median_s(lambda: decode_rows_cpu(data, offsets, batch, planes, h, w), args.repeats)
    row("first use: CRC of a batch's 192 frames", t_first * 1e3, "ms", f"{t_first / len(batch) * 1e6:.1f} us/frame")
    row("first use: FFmpeg decode of the same frames", t_dec * 1e3, "ms",
        f"check = {100 * t_first / t_dec:.1f}% of it")
    return rows_out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cr5_flashdrive_av1"))
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="generated 48x64 frames, 2 repeats (CI)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    if args.smoke:
        args.repeats = 2
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
