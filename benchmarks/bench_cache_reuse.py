"""Episode subsets and the frame cache: loading episodes B after A, where B overlaps A, against decoding B.

Cases (tier host, the real AV1 episodes, median of --repeat runs, each in a fresh cache directory):
  decode B          ingest_videos(B, cache=False): every file of B decoded
  B after A         A loaded first (not timed), then B: A's files copied from A's entry (reuse.py)
                    while B's other files decode (B's layout given, as a reader's plan gives it)
  B again           B loaded a second time: its own entry, mapped
B = A + one more file by default (--extra). Each run checks B's frames equal the decode's.

    python benchmarks/bench_cache_reuse.py                  # A = episodes 0-7, B = 0-8 (480x640 AV1)
    python benchmarks/bench_cache_reuse.py --a 12 --extra 2 --json out.json
    python benchmarks/bench_cache_reuse.py --smoke          # 3 generated clips, once (CI)
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

REAL = Path(os.environ.get("ROBOCACHE_DATA") or Path(__file__).resolve().parents[2] / "shared/data") \
    / "cr5_flashdrive_av1/videos/chunk-000/observation.images.top"


def generated(root: Path, n: int, frames: int) -> list[str]:
    import av
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        p = root / f"clip_{i}.mp4"
        with av.open(str(p), "w") as c:
            s = c.add_stream("libx264", rate=10)
            s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
            for _ in range(frames):
                img = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
                for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    c.mux(pkt)
            for pkt in s.encode():
                c.mux(pkt)
        out.append(str(p))
    return out


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=int, default=8, help="files in subset A")
    ap.add_argument("--extra", type=int, default=1, help="files B adds to A")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", help="write the medians here")
    ap.add_argument("--smoke", action="store_true", help="3 generated clips, once")
    args = ap.parse_args(argv)
    import torch
    from robocache.frames.ingest import ingest_videos
    from robocache.video import probe_sources

    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as tmp:
        if args.smoke:
            files, args.a, args.extra, args.repeat = generated(Path(tmp), 3, 12), 2, 1, 1
        else:
            files = sorted(str(p) for p in REAL.glob("*.mp4"))
        if len(files) < args.a + args.extra:
            print(f"need {args.a + args.extra} files, found {len(files)} in {REAL}", file=sys.stderr)
            return 2
        a, b = files[:args.a], files[:args.a + args.extra]
        # what a reader's load passes (its memory plan probed the files): B's layout is known before decoding
        spec, counts, infos = probe_sources(b)
        known = dict(spec=spec, counts=counts, infos=infos, workers=args.workers)
        rows: dict[str, list[float]] = {"decode B": [], "B after A": [], "B again": []}
        for run in range(args.repeat):
            os.environ["ROBOCACHE_CACHE_DIR"] = str(Path(tmp) / f"cache-{run}")
            t, ref = timed(lambda: ingest_videos(b, tier="host", cache=False, **known))
            rows["decode B"].append(t)
            ingest_videos(a, tier="host", workers=args.workers)
            t, got = timed(lambda: ingest_videos(b, tier="host", **known))
            rows["B after A"].append(t)
            assert got.reused == len(a) and torch.equal(got.data, ref.data), "B's frames differ from a decode"
            t, again = timed(lambda: ingest_videos(b, tier="host", **known))
            rows["B again"].append(t)
            assert again.from_cache and torch.equal(again.data, ref.data)
        n = int(ref.offsets[-1])
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(f"{len(b)} files ({len(a)} in A), {n} frames {ref.spec.height}x{ref.spec.width} {ref.spec.format}, "
              f"tier host, {os.cpu_count()} cores, median of {args.repeat}")
        print(f"{'case':<12} {'s':>8} {'frames/s':>10} {'x vs decode':>12}")
        for k, v in med.items():
            print(f"{k:<12} {v:8.3f} {n / v:10.0f} {med['decode B'] / v:12.1f}")
        if args.json:
            Path(args.json).write_text(json.dumps({"files": len(b), "a": len(a), "frames": n, "seconds": med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
