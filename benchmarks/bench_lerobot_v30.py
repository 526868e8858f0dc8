"""LeRobot v3.0 against v2.1: the same episodes, cold load, reload from the cache and peak RSS, per tier.

The v3.0 set is made from the v2.1 one as LeRobot's converter makes it (robocache's tests/lerobot_forge.py:
parquet rows concatenated, mp4 packets copied into shared files, each episode a span of one), so both
layouts hold the same bitstream and any difference is robocache's. ``--recorded`` adds LeRobot's own
recording of the same episodes (``../shared/data/cr5_v30``: re-encoded, so decoding costs differ).

Each load runs in a fresh process (peak RSS is that process's, ``ru_maxrss``, with the largest decode
process beside it): cold with an empty cache directory, then the reload from the entry it left.

    python benchmarks/bench_lerobot_v30.py                        # 14 CR5 episodes, tiers host and disk
    python benchmarks/bench_lerobot_v30.py --tiers host,disk,device --repeat 3 --json out.json
    python benchmarks/bench_lerobot_v30.py --smoke                # 2 episodes, seconds, exits 1 on error
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
DATA = Path(os.environ.get("ROBOCACHE_DATA") or HERE.parents[2] / "shared" / "data")


def child(args) -> None:
    """One load in this process; prints {"seconds", "rss_mb", "child_rss_mb", "from_cache", "frames"}."""
    import resource

    import av  # noqa: F401  (imports before the clock: once per process, whatever the data)
    import pyarrow.parquet  # noqa: F401
    import torch

    import robocache

    if torch.cuda.is_available():  # and its CUDA context (1-5 s to create): not a load's cost
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()

    t0 = time.perf_counter()
    ds = robocache.Dataset.from_lerobot(args.path, episodes=json.loads(args.episodes), frames=args.tier,
                                        show_progress=False)
    seconds = time.perf_counter() - t0
    store = ds.streams["observation.images.top"].frames
    print(json.dumps({"seconds": seconds, "frames": len(store), "tier": store.tier,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def run_child(path, episodes, tier, cache_dir) -> dict:
    env = dict(os.environ, ROBOCACHE_CACHE_DIR=str(cache_dir), ROBOCACHE_NO_PROGRESS="1", PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, str(HERE), "--child", str(path), json.dumps(episodes), tier],
                         capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"load of {path} ({tier}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def gpu_name() -> str:
    try:
        import torch
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except ImportError:
        return "no torch"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=3, metavar=("PATH", "EPISODES", "TIER"), help=argparse.SUPPRESS)
    ap.add_argument("--episodes", type=int, default=14, help="the first N episodes of the CR5 set (default 14)")
    ap.add_argument("--tiers", default="host,disk", help="comma list of host, disk, device, compressed")
    ap.add_argument("--repeat", type=int, default=2, help="cold + reload pairs per case (medians shown)")
    ap.add_argument("--recorded", action="store_true", help="also LeRobot's own recording (shared/data/cr5_v30)")
    ap.add_argument("--smoke", action="store_true", help="2 episodes, tier host, once: seconds on a CPU")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.child:
        args.path, args.episodes, args.tier = args.child
        child(args)
        return 0
    if args.smoke:
        args.episodes, args.tiers, args.repeat = 2, "host", 1
    v21 = DATA / "cr5_flashdrive_av1"
    if not v21.is_dir():
        print(f"{v21} is not here (set ROBOCACHE_DATA)", file=sys.stderr)
        return 1
    sys.path.insert(0, str(HERE.parents[1] / "tests"))
    from lerobot_forge import convert_v21_to_v30

    episodes = list(range(args.episodes))
    work = Path(tempfile.mkdtemp(prefix="rc-bench-v30-"))
    v30 = work / "cr5_v30_converted"
    convert_v21_to_v30(v21, v30, episodes, per_data_file=4, per_video_file=5)
    layouts = [("v2.1", v21, episodes), ("v3.0", v30, episodes)]
    if args.recorded and (DATA / "cr5_v30").is_dir():
        layouts.append(("v3.0 recorded", DATA / "cr5_v30", episodes))
    try:
        rows = run_all(args, layouts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)     # a converted set and a cache per case: GBs
    report(args, rows)
    return 0


def run_all(args, layouts, work) -> list:
    rows = []
    for tier in args.tiers.split(","):
        for name, path, eps in layouts:
            cold, warm = [], []
            for r in range(args.repeat):
                cache = work / f"cache-{tier}-{name.replace(' ', '_')}-{r}"
                cold.append(run_child(path, eps, tier, cache))
                warm.append(run_child(path, eps, tier, cache))
            med = lambda runs, k: statistics.median(x[k] for x in runs)  # noqa: E731
            rows.append({"layout": name, "tier": tier, "frames": cold[0]["frames"], "stored_tier": cold[0]["tier"],
                         "cold_s": med(cold, "seconds"), "reload_s": med(warm, "seconds"),
                         "cold_rss_mb": med(cold, "rss_mb"), "cold_child_rss_mb": med(cold, "child_rss_mb"),
                         "reload_rss_mb": med(warm, "rss_mb"), "runs": {"cold": cold, "reload": warm}})
    return rows


def report(args, rows) -> None:
    base = {(r["tier"]): r for r in rows if r["layout"] == "v2.1"}
    print(f"# LeRobot v3.0 vs v2.1, {args.episodes} CR5 episodes (480x640 AV1), {gpu_name()}, "
          f"{os.cpu_count()} cores, {platform.python_version()}")
    print("| layout | tier | frames | cold s | reload s | cold/reload | cold peak RSS MB (decoder) | reload RSS MB "
          "| cold vs v2.1 | reload vs v2.1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b = base[r["tier"]]
        print(f"| {r['layout']} | {r['tier']} ({r['stored_tier']}) | {r['frames']} | {r['cold_s']:.2f} | "
              f"{r['reload_s']:.2f} | {r['cold_s'] / r['reload_s']:.1f}x | {r['cold_rss_mb']:.0f} "
              f"({r['cold_child_rss_mb']:.0f}) | {r['reload_rss_mb']:.0f} | {r['cold_s'] / b['cold_s']:.2f} | "
              f"{r['reload_s'] / b['reload_s']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"gpu": gpu_name(), "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
