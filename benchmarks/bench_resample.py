"""Benchmark robocache.resample: checked, then timed against plain PyTorch, the CPU
path, a NumPy np.interp loop and the memory-bandwidth floor.

    python benchmarks/bench_resample.py [--quick] [--device auto|cpu|cuda] [--json PATH]

Configs and contenders: robocache/bench/resample.py; the harness: robocache/bench/harness.py
(also `python -m robocache bench`).
"""
import sys

from robocache.bench import main

if __name__ == "__main__":
    raise SystemExit(main(["--op", "resample", *sys.argv[1:]]))
