"""Video ingest throughput: robocache.frames.ingest against PyAV alone on the same cores.

Cases, per run (frames/s of wall time, and CPU ms per frame of the whole process, which stays
meaningful on a shared machine where wall time does not):
  pyav planes      PyAV decodes every file (same thread pool; its default decoder threading, or the
                   --threads value) and touches the YUV planes it hands back, no copy: the decoder's
                   own rate, the 70% target's base
  pyav ndarray     the same plus frame.to_ndarray(format="yuv420p"): what a user's loop costs
  cold <tier>      ingest_videos with an empty cache directory (decodes, writes the cache)
  nocache <tier>   ingest_videos(cache=False) (host and disk only)
  cache <tier>     ingest_videos again: read from the cache entry the cold run left (page cache warm)
Tiers: host and disk, plus device when torch sees a CUDA device. Each case runs --repeat times,
interleaved; the table shows medians.

    python benchmarks/bench_ingest.py                       # the 14 real AV1 episodes (480x640)
    python benchmarks/bench_ingest.py --generate 24 --frames 300 --json out.json
    python benchmarks/bench_ingest.py --threads 0,1,2       # sweep decoder threads per file
    python benchmarks/bench_ingest.py --smoke               # 2 files, tier host, once (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REAL = Path(os.environ.get("ROBOCACHE_DATA") or Path(__file__).resolve().parents[2] / "shared/data") \
    / "cr5_flashdrive_av1/videos/chunk-000/observation.images.top"


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (ingest's decode processes are
    waited for before it returns)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def natural_frames(n, h, w, seed):
    """Camera-like footage: a textured scene larger than the view, seen by a slowly panning camera,
    three moving blocks (edges and occlusions, like an arm over a table) and sensor noise. Tuned so
    libsvtav1 at crf 30 gives ~10 KB per frame and PyAV decodes it as fast as the real CR5 episodes
    (~9 KB per frame)."""
    rng = np.random.default_rng(seed)
    H, W, blk = h + 160, w + 240, 8
    tex = rng.normal(0, 1, (H // blk + 1, W // blk + 1, 3)).astype(np.float32)
    tex = np.kron(tex, np.ones((blk, blk, 1), np.float32))[:H, :W]
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    scene = np.stack([110 + 60 * np.sin(xx / 53) * np.cos(yy / 71), 120 + 50 * np.sin((xx + yy) / 97),
                      100 + 70 * np.cos(xx / 37 - yy / 59)], -1) + 8 * tex
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    phase = rng.uniform(0, 6.28)
    for i in range(n):
        t = i / 10.0 + phase
        oy, ox = int(80 + 60 * np.sin(0.3 * t)), int(120 + 100 * np.sin(0.2 * t))
        img = scene[oy:oy + h, ox:ox + w].copy()
        for k in range(3):
            cx = (w * (0.2 + 0.3 * k) + 60 * np.sin(t + k)) % w
            cy = (h * (0.3 + 0.2 * k) + 40 * np.cos(0.7 * t + k)) % h
            mask = (np.abs(x - cx) < 40 + 10 * k) & (np.abs(y - cy) < 30 + 8 * k)
            img[mask] = (60 + 60 * k, 200 - 50 * k, 90 + 40 * k)
        img += rng.normal(0, 1, img.shape)
        yield np.clip(img, 0, 255).astype(np.uint8)


def generate(folder: Path, episodes: int, frames: int, h: int = 480, w: int = 640) -> list[str]:
    """LeRobot's encoding: libsvtav1, yuv420p, g=2, crf=30, 30 fps; one mp4 per episode."""
    from robocache.video.encode import encode_mp4

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for e in range(episodes):
        p = folder / f"episode_{e:06d}.mp4"
        paths.append(str(p))
        if p.exists():
            continue
        # robocache's writer: AV1 in a child with a deadline, the file moved into place when whole
        encode_mp4(p, np.stack(list(natural_frames(frames + (e % 7) * 10, h, w, seed=e))), "libsvtav1", 30,
                   {"g": "2", "crf": "30"})
        print(f"  encoded {p.name}", file=sys.stderr, flush=True)
    return paths


def pyav_alone(paths, workers, threads, copy):
    import av

    from robocache.video.decode import THREAD_TYPE

    def one(p):
        n = 0
        with av.open(p) as c:
            s = c.streams.video[0]
            s.thread_type = THREAD_TYPE
            s.codec_context.thread_count = threads
            for f in c.decode(s):
                if copy:
                    f.to_ndarray(format="yuv420p")
                else:
                    for plane in f.planes:
                        memoryview(plane)
                n += 1
        return n

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, paths))


def timed(fn):
    t0, c0 = time.perf_counter(), cpu_seconds()
    frames = fn()
    dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
    return {"seconds": dt, "frames": frames, "frames_per_s": frames / dt, "cpu_ms_per_frame": 1e3 * dc / frames}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REAL, help="folder of mp4 files (default: the real AV1 set)")
    ap.add_argument("--episodes", type=int, default=0, help="use the first N files (0: all)")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="encode N episodes of 480x640 AV1 instead")
    ap.add_argument("--frames", type=int, default=300, help="frames per generated episode (+0..60)")
    ap.add_argument("--gen-dir", type=Path, default=None, help="where generated files go (kept for reuse)")
    ap.add_argument("--tiers", default=None, help="comma list of host,disk,device (default: all available)")
    ap.add_argument("--workers", type=int, default=None, help="files decoded at once (default: one per core)")
    ap.add_argument("--threads", default=None, help="decoder threads per file, comma list to sweep (0 = auto)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache-base", type=Path, default=None, help="where the cold runs' cache dirs are made")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="2 files, tier host, once: seconds on a CPU")
    args = ap.parse_args(argv)
    if args.smoke:
        args.episodes, args.tiers, args.repeat = 2, "host", 1

    import torch

    from robocache.frames import ingest as rc_ingest
    from robocache._util import cpu_count
    from robocache.frames.ingest import ingest_videos
    from robocache.video import probe_sources

    if args.generate:
        folder = args.gen_dir or Path(tempfile.gettempdir()) / f"robocache-gen-{args.generate}x{args.frames}"
        print(f"encoding {args.generate} episodes into {folder} (libsvtav1 crf=30 g=2, 480x640)", file=sys.stderr)
        paths = generate(folder, args.generate, args.frames)
        source = f"generated: {args.generate} episodes, 480x640 AV1 (libsvtav1 crf=30 g=2)"
    else:
        paths = sorted(str(p) for p in args.data.glob("*.mp4"))
        if args.episodes:
            paths = paths[:args.episodes]
        if not paths:
            ap.error(f"no mp4 files in {args.data}")
        source = f"{args.data} ({len(paths)} files)"
    spec, counts, infos = probe_sources(paths)
    n_frames = int(counts.sum())
    tiers = args.tiers.split(",") if args.tiers else ["host", "disk"] + (["device"] if torch.cuda.is_available() else [])
    cores = cpu_count()
    workers = max(1, min(args.workers or cores, len(paths)))
    # default: robocache's own choice (decoder_threads) against PyAV's default (0, auto)
    sweep = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    os.environ.setdefault("ROBOCACHE_NO_PROGRESS", "1")
    base = Path(tempfile.mkdtemp(prefix="robocache-bench-", dir=args.cache_base))

    print(f"{source}: {n_frames} frames {spec.height}x{spec.width} {infos[0].codec}, "
          f"{spec.frame_bytes * n_frames / 2**30:.2f} GiB as {spec.format}; {cores} cores, {workers} workers",
          file=sys.stderr)
    results: dict[str, list] = {}

    def record(name, r):
        results.setdefault(name, []).append(r)
        print(f"  {name:<26} {r['frames_per_s']:8.0f} frames/s  {r['cpu_ms_per_frame']:6.2f} cpu-ms/frame",
              file=sys.stderr, flush=True)

    try:
        for rep in range(args.repeat):
            for threads in sweep:
                rc_ingest.DECODER_THREADS = threads
                tag = f" t={threads}" if len(sweep) > 1 else ""
                record(f"pyav planes{tag}", timed(lambda: pyav_alone(paths, workers, threads or 0, copy=False)))
                record(f"pyav ndarray{tag}", timed(lambda: pyav_alone(paths, workers, threads or 0, copy=True)))
                for tier in tiers:
                    cdir = base / f"c{rep}-{tier}-{threads}"
                    os.environ["ROBOCACHE_CACHE_DIR"] = str(cdir)

                    def run(**kw):
                        res = ingest_videos(paths, tier=tier, workers=workers, **kw)
                        if tier == "device":
                            torch.cuda.synchronize()
                        frames = int(res.offsets[-1])
                        del res
                        return frames

                    if tier != "device":
                        record(f"nocache {tier}{tag}", timed(lambda: run(cache=False)))
                    record(f"cold {tier}{tag}", timed(lambda: run()))
                    record(f"cache {tier}{tag}", timed(lambda: run()))
                    shutil.rmtree(cdir, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    table = []
    for name, runs in results.items():
        fps = statistics.median(r["frames_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_ms_per_frame"] for r in runs)
        table.append({"case": name, "frames": runs[0]["frames"], "frames_per_s": fps, "cpu_ms_per_frame": cpu,
                      "runs": runs})
    by = {row["case"]: row for row in table}
    for row in table:
        tag = row["case"].split(" t=")[1] if " t=" in row["case"] else None
        ref = by.get("pyav planes" + (f" t={tag}" if tag else ""))
        kind, _, tier = row["case"].split(" t=")[0].partition(" ")
        cold = by.get(f"cold {tier}" + (f" t={tag}" if tag else ""))
        row["x_pyav"] = row["frames_per_s"] / ref["frames_per_s"]
        row["cpu_vs_pyav"] = ref["cpu_ms_per_frame"] / row["cpu_ms_per_frame"]
        row["x_cold"] = row["frames_per_s"] / cold["frames_per_s"] if kind == "cache" and cold else None

    threads_text = ",".join(map(str, sweep)) if args.threads else \
        f"0 for PyAV, {rc_ingest.decoder_threads(workers)} for robocache"
    print(f"\ningest: {source}; {n_frames} frames; {cores} cores, {workers} workers; decoder threads "
          f"{threads_text} (0 = auto); median of {args.repeat}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'case':<24} | {'frames/s':>9} | {'cpu ms/frame':>12} | {'x pyav (wall)':>13} | "
          f"{'x pyav (cpu)':>12} | {'x cold':>6}")
    print("-" * 91)
    for row in table:
        xc = f"{row['x_cold']:.1f}" if row["x_cold"] else ""
        print(f"{row['case']:<24} | {row['frames_per_s']:>9.0f} | {row['cpu_ms_per_frame']:>12.2f} | "
              f"{row['x_pyav']:>13.2f} | {row['cpu_vs_pyav']:>12.2f} | {xc:>6}")
    if args.json:
        import av

        meta = {"source": source, "frames": n_frames, "spec": spec.to_dict(), "cores": cores, "workers": workers,
                "decoder_threads": sweep if args.threads else {"pyav": 0, "robocache": rc_ingest.decoder_threads(workers)},
                "repeat": args.repeat, "loadavg": os.getloadavg(),
                "python": platform.python_version(), "torch": torch.__version__, "av": av.__version__,
                "cpu": platform.processor() or platform.machine(),
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        args.json.write_text(json.dumps({"meta": meta, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
