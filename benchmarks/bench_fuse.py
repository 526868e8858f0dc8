"""Benchmark robocache.fuse: three streams at 30/100/500 Hz onto one timeline, checked, then
timed against the three separate robocache.resample calls it replaces, plain PyTorch, the CPU
path and the memory-bandwidth floor.

    python benchmarks/bench_fuse.py [--quick] [--device auto|cpu|cuda] [--json PATH]

Configs and contenders: robocache/bench/fuse.py; the harness: robocache/bench/harness.py
(also `python -m robocache bench --op fuse`).
"""
import sys

from robocache.bench import main

if __name__ == "__main__":
    raise SystemExit(main(["--op", "fuse", *sys.argv[1:]]))
