"""A small LeRobot v2.1 dataset written on the fly (no video): what a user's own set looks like to
``Dataset.from_lerobot``, with the bookkeeping columns LeRobot writes and feature names in any of the
forms LeRobot's ``info.json`` uses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

TASKS = ["pick the cube", "place the cube", "open the drawer"]


def write_lerobot(root: Path, rng, lengths=(6, 9, 5, 7), fps=10.0, state_names=None, action_names=None,
                  episode_tasks=None) -> dict:
    """Episodes 0..E-1 of ``lengths`` rows: ``observation.state`` [3] float32, ``action`` [2] float32,
    ``timestamp``, ``frame_index``, ``episode_index``, ``index`` (global), ``task_index`` (LeRobot's).
    Returns ``{"state": [per-episode arrays], "action": [...], "task_index": [per episode]}``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    episode_tasks = episode_tasks or [[TASKS[e % 3]] for e in range(len(lengths))]
    feats = {"observation.state": {"dtype": "float32", "shape": [3]},
             "action": {"dtype": "float32", "shape": [2]},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None},
             "frame_index": {"dtype": "int64", "shape": [1], "names": None},
             "episode_index": {"dtype": "int64", "shape": [1], "names": None},
             "index": {"dtype": "int64", "shape": [1], "names": None},
             "task_index": {"dtype": "int64", "shape": [1], "names": None}}
    if state_names is not None:
        feats["observation.state"]["names"] = state_names
    if action_names is not None:
        feats["action"]["names"] = action_names
    info = {"codebase_version": "v2.1", "fps": fps, "chunks_size": 1000, "total_episodes": len(lengths),
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": None, "features": feats}
    (root / "meta").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                   for i, t in enumerate(TASKS)))
    (root / "meta/episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": episode_tasks[e], "length": n}) + "\n"
        for e, n in enumerate(lengths)))
    out = {"state": [], "action": [], "task_index": []}
    g = 0
    for e, n in enumerate(lengths):
        st = rng.standard_normal((n, 3)).astype(np.float32)
        ac = rng.standard_normal((n, 2)).astype(np.float32)
        ti = TASKS.index(episode_tasks[e][0])
        pq.write_table(pa.table({
            "observation.state": pa.array(list(st), type=pa.list_(pa.float32())),
            "action": pa.array(list(ac), type=pa.list_(pa.float32())),
            "timestamp": (np.arange(n) / fps).astype(np.float32), "frame_index": np.arange(n),
            "episode_index": np.full(n, e), "index": np.arange(g, g + n), "task_index": np.full(n, ti)}),
            root / f"data/chunk-000/episode_{e:06d}.parquet")
        out["state"].append(st)
        out["action"].append(ac)
        out["task_index"].append(ti)
        g += n
    return out
