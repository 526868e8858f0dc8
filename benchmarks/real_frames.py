"""The real camera frames the frame benchmarks code and lay out: the CR5 arm's AV1 episodes (480x640;
ROBOCACHE_DATA or ../shared/data), decoded with PyAV as the host tier decodes them. A module of its own so
bench_scale.py and bench_lossless.py both use it without importing each other."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("ROBOCACHE_DATA") or Path(__file__).resolve().parents[2] / "shared/data")
REAL = DATA / "cr5_flashdrive_av1/videos/chunk-000/observation.images.top"


def real_rows(frames: int, size):
    """I420 rows of the real arm episodes, spread over 3 files (PyAV, as the host tier decodes them)."""
    from robocache.frames.ingest import ingest_videos
    files = sorted(REAL.glob("episode_*.mp4"))[:3]
    if not files:
        raise SystemExit(f"no CR5 episodes under {REAL} (set ROBOCACHE_DATA)")
    got = ingest_videos([str(f) for f in files], tier="host", cache=False, resize=size, show_progress=False)
    rows = got.data.numpy()
    take = np.linspace(0, len(rows) - 1, min(frames, len(rows))).round().astype(np.int64)
    return np.ascontiguousarray(rows[take]), got.spec.height, got.spec.width
