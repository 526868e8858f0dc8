"""Benchmarks of robocache: ``python -m robocache bench`` (the ops) and the loader benchmark's
contender (benchmarks/bench_loader.py).

    harness.py       timers, input rotation, check-then-time, tables, JSON, the command line;
                     imports no op module
    resample.py      robocache.resample: configs, data, float64 reference, floor, contenders
    voxelize.py      robocache.voxelize, with the cost of deterministic=True
    fuse.py          robocache.fuse (its per-stream data and reference are resample.py's)
    torch_loader.py  the per-sample torch DataLoader baseline (tests, bench_loader, the GR00T-style
                     example); needs torch, so it is not imported here

Each op module defines an ``OpBench`` as ``OP``; ``OPS`` below is the list the command line runs.
"""

from . import fuse, resample, voxelize
from .harness import OpBench, run

OPS: dict[str, OpBench] = {"resample": resample.OP, "voxelize": voxelize.OP, "fuse": fuse.OP}


def main(argv: list[str] | None = None) -> int:
    """``python -m robocache bench [argv]``: returns 0, 1 when a contender failed its check, 2 on
    setup errors."""
    return run(OPS, argv)


__all__ = ["OPS", "OpBench", "main"]
