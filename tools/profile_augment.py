"""Where the augmented gather's time goes on a GPU: per-kernel CUDA times of a few GR00T-chain batches
(torch.profiler), for benchmarks/bench_augment.py's set. Used before each optimization of cuda/augment.cu
(docs/perf-notes.md). Usage: python3 tools/profile_augment.py [--pipeline groot|lerobot] [--batches N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import robocache  # noqa: E402
from bench_augment import make_set, pipelines, windows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", default="groot")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    dev = torch.device("cuda")
    ds = make_set(480, 640, 4, 4.0, 15.0, dev)
    aug = pipelines(224)[args.pipeline]
    loader = robocache.DataLoader(ds, args.batch_size, windows=windows(aug, 224), drop_last=True)
    it = iter(loader)
    for _ in range(3):
        next(it)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(args.batches):
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
                next(it)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
