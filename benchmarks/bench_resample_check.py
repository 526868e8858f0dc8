"""The CPU content check of ragged resample (times sorted, finite; robocache/_C resample): an episode's
times are scanned once per call, not once per output row that reads it. 2000 rows of one 400k-sample
episode should cost about what 2 rows do (before the fix it was 2000x, 0.7 s a call). Moved here from
tests/test_resample_errors.py (issue 47 item 1: a timing is a benchmark's claim, not a test's).

    python benchmarks/bench_resample_check.py [--samples 400000] [--repeats 7] [--json OUT]
    python benchmarks/bench_resample_check.py --smoke      # CI: 20k samples, seconds

One row per row count (median of --repeats after a warm-up, one thread):
  rows | samples | ms a call | x the 2-row call
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import robocache  # noqa: E402


def median_s(fn, repeats: int) -> float:
    fn()                                   # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--smoke", action="store_true", help="20k samples, 3 repeats")
    a = ap.parse_args()
    if a.smoke:
        a.samples, a.repeats = 20_000, 3
    robocache.set_num_threads(1)
    rng = np.random.default_rng(0)
    N = a.samples
    t = np.sort(rng.uniform(0, 100, N))
    v = rng.standard_normal((N, 2)).astype(np.float32)
    off = np.array([0, N], np.int64)
    rows = []
    for B in (2, 20, 200, 2000):
        idx, x = np.zeros(B, np.int64), rng.uniform(0, 100, (B, 1))
        s = median_s(lambda: robocache.resample(v, t, x, offsets=off, index=idx), a.repeats)
        rows.append({"rows": B, "samples": N, "ms": s * 1e3})
    base = rows[0]["ms"]
    print("rows | samples | ms a call | x the 2-row call")
    for r in rows:
        r["x_two_rows"] = r["ms"] / base
        print(f"{r['rows']} | {r['samples']} | {r['ms']:.3f} | {r['x_two_rows']:.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
