"""Training from object storage (issue 48): what a rank fetches against its share, and what it costs in time.

Cases (the set served by RangeHTTPServer and, when ``weed`` is installed, SeaweedFS's S3, both on this host):
  share     per rank of W ranks: bytes fetched (all requests, by folder: meta/, data/, videos/, from the proxy's
            log of Range headers) against the rank's share: the packets whose frames fall in its episodes' spans
            (PyAV's demux of the local mp4s), the compressed bytes of the row groups holding its rows (their
            footers), and meta/ whole. Target: video within 10% of its spans' packets.
  ingest    Dataset.from_lerobot of rank 0 of 2 (cache=False, tier host): from the local folder; mirror over
            HTTP then load; mirror over S3 then load; a second job on the node (the mirror asks the remote
            for versions only, fetches 0 bytes; the frames come from the frame cache). Median of --repeat.
  latency   the mirror alone through a proxy adding d seconds to every request (a slow link): seconds, and
            the added time over d (the round trips on the critical path).

Predictions, written before the first run (cr5_v30: 14 episodes, 3391 frames of 480x640 AV1 at 10 fps, g=2,
in 8 mp4s, 28 MB; 5 data files of a row group per episode; meta 120 KB):
  share     video fetched / span packets 1.03-1.08 per rank: per episode the keyframe before it (<= 17 KB) and
            the decoder's read-ahead (10 packets, ~85 KB), per file its first 8 packets (~70 KB), moov (6 KB)
            and a 4 KiB first read, against ~2.1 MB of packets an episode; data: its row groups exactly, plus
            footers; all bytes / share 1.04-1.09.
  ingest    from the mirror = from disk (decode-bound) + the mirror's 0.3-1 s (14 MB over loopback, ~20 round
            trips): +5-15%; the second job < 10% of a decode.
  latency   added ~ 15-20 x d (meta: info.json, the other names, the episode files probed in order; then per
            file in parallel: version, index, ranges, version again), independent of the file count.

    python benchmarks/bench_remote.py                  # cr5_v30 (ROBOCACHE_DATA, else ../shared/data)
    python benchmarks/bench_remote.py --repeat 3 --json out.json
    python benchmarks/bench_remote.py --smoke          # the README's demo set, HTTP only, once (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
DATA = Path(os.environ.get("ROBOCACHE_DATA") or ROOT.parent / "shared" / "data")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))       # the servers the tests start (tests/remote_servers.py)


# ---------------------------------------------------------------------------------------------
# the share of a rank, from the local set


def spans_of(local: Path, episodes) -> dict:
    """{mp4 path: [(from, to) seconds]} of ``episodes`` (the reader's own rules for where they are)."""
    from robocache.readers.lerobot import episode_table, open_info, video_file
    from robocache.readers.lerobot_info import chunks_size
    root, info_path, info, major = open_info(local)
    chunks = chunks_size(info, info_path)
    table = episode_table(root, info, major, info["data_path"], chunks)
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    out: dict = {}
    for e in episodes:
        for k in keys:
            row = table[e].get("row") or {}
            span = (row.get(f"videos/{k}/from_timestamp"), row.get(f"videos/{k}/to_timestamp"))
            out.setdefault(video_file(root, info, table, e, k, major, chunks), []).append(span)
    return out


def video_share(local: Path, episodes) -> int:
    """Bytes of the packets whose frames fall in the episodes' spans (a v2.x file: all of it)."""
    import av
    import numpy as np
    total = 0
    for path, spans in spans_of(local, episodes).items():
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            fps = float(s.average_rate)
            pk = [(p.pts * float(s.time_base), p.size) for p in c.demux(s) if p.size]
        t, size = (np.array(x) for x in zip(*pk))
        keep = np.zeros(len(t), bool)
        for lo, hi in spans:
            keep |= np.ones(len(t), bool) if lo is None else (t >= lo - 0.5 / fps) & (t < hi - 0.5 / fps)
        total += int(size[keep].sum())
    return total


def data_share(local: Path, episodes) -> int:
    """Compressed bytes of the row groups holding the episodes' rows (their footers say which)."""
    import pyarrow.parquet as pq
    wanted, total = set(int(e) for e in episodes), 0
    for f in sorted((local / "data").rglob("*.parquet")):
        md = pq.ParquetFile(f).metadata
        col = md.schema.to_arrow_schema().names.index("episode_index")
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(col).statistics
            if st is None or any(st.min <= e <= st.max for e in wanted):
                total += sum(md.row_group(i).column(c).total_compressed_size for c in range(md.num_columns))
    return total


def fetched_by_folder(log, prefix: str, sizes: dict) -> dict:
    """Bytes the proxy forwarded for GETs, by top folder (meta, data, videos), from their Range headers."""
    out = {"meta": 0, "data": 0, "videos": 0}
    for method, path, rng in log:
        if method != "GET" or not path.startswith(prefix):
            continue
        rel = path[len(prefix):].lstrip("/")
        top = rel.split("/", 1)[0]
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            n = int(b) - int(a) + 1
        else:
            n = sizes.get(rel, 0)
        out[top] = out.get(top, 0) + n
    return out


# ---------------------------------------------------------------------------------------------
# cases


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def case_share(url_of, local: Path, worlds, work: Path) -> list:
    from remote_servers import FaultProxy
    from robocache.remote import mirror_lerobot
    sizes = {p.relative_to(local).as_posix(): p.stat().st_size for p in local.rglob("*") if p.is_file()}
    meta = sum(v for k, v in sizes.items() if k.startswith("meta/"))
    rows = []
    for world in worlds:
        for rank in range(world):
            with FaultProxy(url_of("")) as proxy:
                r = mirror_lerobot(f"{proxy.url}/{local.name}", shard=(rank, world),
                                   cache_dir=work / f"s{world}-{rank}")
                got = fetched_by_folder(proxy.log, f"/{local.name}", sizes)
            vs, ds = video_share(local, r.episodes), data_share(local, r.episodes)
            rows.append({"case": "share", "world": world, "rank": rank, "episodes": r.episodes,
                         "fetched": r.fetched["bytes"], "fetched_video": got["videos"], "fetched_data": got["data"],
                         "fetched_meta": got["meta"], "share_video": vs, "share_data": ds, "meta": meta,
                         "video_ratio": got["videos"] / max(vs, 1),
                         "total_ratio": r.fetched["bytes"] / max(vs + ds + meta, 1),
                         "requests": r.fetched["requests"], "stats": r.fetched["stats"]})
    return rows


def case_ingest(sources: dict, local: Path, repeat: int, work: Path) -> list:
    import robocache
    from robocache.remote import mirror_lerobot
    kw = dict(shard_episodes=(0, 2), device="cpu", frames="host", show_progress=False)
    rows = []

    def median(label, fn):
        runs = []
        for i in range(repeat):
            runs.append(fn(work / f"{label}-{i}"))
        best = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows.append({"case": "ingest", "source": label, **best})

    def disk(d):
        os.environ["ROBOCACHE_CACHE_DIR"] = str(d / "cache")
        t, ds = timed(lambda: robocache.Dataset.from_lerobot(local, cache=False, **kw))
        return {"seconds": t, "mirror_s": 0.0, "fetched": 0, "frames": len(ds.streams[camera(ds)].frames)}

    disk(work / "warm-up")                    # imports, the color probe, PyAV's first open: not a load's cost
    median("local disk", disk)
    for name, (url, opts) in sources.items():
        def remote(d, url=url, opts=opts):
            os.environ["ROBOCACHE_CACHE_DIR"] = str(d / "cache")
            t0 = time.perf_counter()
            r = mirror_lerobot(url, shard=(0, 2), cache_dir=d / "mirror", storage_options=opts)
            tm = time.perf_counter() - t0
            ds = robocache.Dataset.from_lerobot(r.root, cache=False, **kw)
            return {"seconds": time.perf_counter() - t0, "mirror_s": tm, "fetched": r.fetched["bytes"],
                    "frames": len(ds.streams[camera(ds)].frames)}
        median(f"{name} mirror + load", remote)

        def second(d, url=url, opts=opts):
            os.environ["ROBOCACHE_CACHE_DIR"] = str(d / "cache")
            r = mirror_lerobot(url, shard=(0, 2), cache_dir=d / "mirror", storage_options=opts)
            robocache.Dataset.from_lerobot(r.root, **kw)                          # the first job: fills the cache
            t0 = time.perf_counter()
            r = mirror_lerobot(url, shard=(0, 2), cache_dir=d / "mirror", storage_options=opts)
            tm = time.perf_counter() - t0
            ds = robocache.Dataset.from_lerobot(r.root, **kw)
            return {"seconds": time.perf_counter() - t0, "mirror_s": tm, "fetched": r.fetched["bytes"],
                    "frames": len(ds.streams[camera(ds)].frames)}
        median(f"{name} second job", second)
    return rows


def camera(ds) -> str:
    return next(k for k, s in ds.streams.items() if s.frames is not None)


def case_latency(url: str, name: str, delays, repeat: int, work: Path) -> list:
    from remote_servers import FaultProxy
    from robocache.remote import mirror_lerobot
    rows, base = [], None
    for d in delays:
        runs = []
        for i in range(repeat):
            with FaultProxy(url, delay=d) as proxy:
                t, r = timed(lambda: mirror_lerobot(f"{proxy.url}/{name}", shard=(0, 2),
                                                    cache_dir=work / f"lat{d}-{i}"))
                n = len(proxy.log)
            runs.append(t)
        t = statistics.median(runs)
        base = t if base is None else base
        rows.append({"case": "latency", "delay_s": d, "seconds": t, "added_s": t - base, "requests": n,
                     "round_trips": (t - base) / d if d else 0.0})
    return rows


# ---------------------------------------------------------------------------------------------


def report(args, rows, what: str) -> None:
    print(f"# bench_remote: {what}; {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| rank/world | episodes | video fetched / span packets | data fetched / its row groups | "
          "all fetched / share | requests |")
    print("|---|---|---:|---:|---:|---:|")
    for r in (r for r in rows if r["case"] == "share"):
        print(f"| {r['rank']}/{r['world']} | {len(r['episodes'])} | {r['fetched_video']:,} / {r['share_video']:,} "
              f"= {r['video_ratio']:.3f} | {r['fetched_data']:,} / {r['share_data']:,} | "
              f"{r['fetched']:,} / {r['share_video'] + r['share_data'] + r['meta']:,} = {r['total_ratio']:.3f} | "
              f"{r['requests']} |")
    print("\n| ingest (rank 0 of 2) | seconds | of which mirror | bytes fetched | frames |")
    print("|---|---:|---:|---:|---:|")
    for r in (r for r in rows if r["case"] == "ingest"):
        print(f"| {r['source']} | {r['seconds']:.2f} | {r['mirror_s']:.2f} | {int(r['fetched']):,} | "
              f"{int(r['frames'])} |")
    print("\n| delay per request | mirror seconds | added | added / delay | requests |")
    print("|---:|---:|---:|---:|---:|")
    for r in (r for r in rows if r["case"] == "latency"):
        print(f"| {r['delay_s'] * 1000:.0f} ms | {r['seconds']:.2f} | {r['added_s']:.2f} | {r['round_trips']:.1f} | "
              f"{r['requests']} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default=str(DATA / "cr5_v30"), help="a local LeRobot set to serve (default cr5_v30)")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--delays", default="0,0.02,0.1", help="seconds added per request")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-s3", action="store_true", help="leave SeaweedFS out")
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    try:
        import fsspec  # noqa: F401
        import aiohttp  # noqa: F401
        import RangeHTTPServer  # noqa: F401
    except ImportError as e:
        print(f"SKIP bench_remote: {e} (pip install fsspec aiohttp rangehttpserver)")
        return 0
    from remote_servers import SeaweedFS, range_http
    work = Path(tempfile.mkdtemp(prefix="rc-bench-remote-"))
    os.environ.setdefault("ROBOCACHE_NO_PROGRESS", "1")
    try:
        if args.smoke:
            from robocache.demo import write_lerobot
            local = write_lerobot(work / "www" / "demo", num_episodes=6)
            worlds, delays, repeat, s3 = [2], [0.0, 0.02], 1, False
        else:
            src = Path(args.set)
            if not (src / "meta" / "info.json").is_file():
                print(f"{src} is not a LeRobot set (set ROBOCACHE_DATA, or pass --set)", file=sys.stderr)
                return 1
            local = work / "www" / src.name
            shutil.copytree(src, local)
            worlds = [int(w) for w in args.worlds.split(",")]
            delays, repeat, s3 = [float(d) for d in args.delays.split(",")], args.repeat, not args.no_s3
        rows = []
        with range_http(local.parent) as url:
            rows += case_share(lambda rel: url, local, worlds, work / "share")
            sources = {"HTTP": (f"{url}/{local.name}", None)}
            weed = None
            if s3 and shutil.which("weed"):
                weed = SeaweedFS(work / "weed")
                sources["S3"] = (weed.upload(local, "bench", local.name), weed.options())
            try:
                rows += case_ingest(sources, local, repeat, work / "ingest")
            finally:
                if weed is not None:
                    weed.stop()
            rows += case_latency(url, local.name, delays, repeat, work / "latency")
        for r in rows:
            if r["case"] == "share":
                assert r["fetched_video"] >= r["share_video"], r       # a rank holds at least its spans
            if r["case"] == "ingest" and "second job" in r["source"]:
                assert r["fetched"] == 0, r
        report(args, rows, local.name)
        if args.json:
            Path(args.json).write_text(json.dumps({"set": local.name, "host": platform.node(),
                                                   "cores": os.cpu_count(), "rows": rows}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
