"""Benchmark robocache.voxelize: checked, then timed against plain PyTorch
(index_fill_/index_add_), the CPU path and the memory-bandwidth floor, with the
cost of deterministic=True against deterministic=False.

    python benchmarks/bench_voxelize.py [--quick] [--device auto|cpu|cuda] [--json PATH]

Configs and contenders: robocache/bench/voxelize.py; the harness: robocache/bench/harness.py
(also `python -m robocache bench --op voxelize`).
"""
import sys

from robocache.bench import main

if __name__ == "__main__":
    raise SystemExit(main(["--op", "voxelize", *sys.argv[1:]]))
