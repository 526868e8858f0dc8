"""The loader's rooms (issue 29 item 3): each file one job, read from the sources (no import of robocache).

- the DataLoader class stays under 300 lines: graph replay and staging live in batches.py, resume in
  resume.py, identity in identity.py, what a key holds in windows.py/plans.py;
- the loader knows no storage tier: which frames the host stages is the frame plan's business;
- sharding lives in shard.py: no other file defines the loader's or from_lerobot's shard functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "robocache"


def _tree(name: str) -> ast.Module:
    return ast.parse((PKG / name).read_text())


def test_dataloader_class_under_300_lines():
    cls = next(n for n in _tree("loader/dataloader.py").body if isinstance(n, ast.ClassDef) and n.name == "DataLoader")
    assert cls.end_lineno - cls.lineno + 1 < 300


@pytest.mark.parametrize("name", ["loader/dataloader.py", "loader/batches.py"])
def test_the_loader_knows_no_storage_tier(name):
    words = {n.attr for n in ast.walk(_tree(name)) if isinstance(n, ast.Attribute)}
    words |= {n.id for n in ast.walk(_tree(name)) if isinstance(n, ast.Name)}
    assert not words & {"host_staged", "tier", "frames", "FrameStore"}, words


def test_sharding_in_one_module():
    defined = {}
    for path in PKG.rglob("*.py"):
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(n.name, []).append(path.name)
    for name in ("Shard", "LoadedShard", "assign", "rank_samples", "rank_world", "episode_shard",
                 "loaded_shard", "held_for_rest", "lerobot_shard"):
        assert defined.get(name) == ["shard.py"], (name, defined.get(name))


def test_a_plan_per_kind_of_stream(rng):
    """StreamPlan, FramePlan, CloudPlan: the kind follows the stream, and each runs its own launches."""
    pytest.importorskip("torch")
    import numpy as np

    import robocache
    from robocache.loader.plans import CloudPlan, FramePlan, StreamPlan, plan
    eps = [{"joints": (rng.standard_normal((20, 3)).astype(np.float32), np.arange(20) / 10),
            "cam": (rng.integers(0, 255, (5, 4, 6, 3), dtype=np.uint8), np.arange(5) / 2.5)}]
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    assert type(plan("j", "joints", ds)) is StreamPlan
    assert type(plan("c", robocache.Window("cam"), ds)) is FramePlan
    assert not plan("c", "cam", ds).host_work                  # frames in memory: nothing staged
    pts = [(rng.standard_normal((7, 3)).astype(np.float32)) for _ in range(4)]
    clouds = robocache.Dataset.from_episodes([{"lidar": (pts, np.arange(4) / 2.0)}], device="cpu")
    voxel = dict(grid=(4, 4, 4), voxel_size=0.5, origin=(-1.0, -1.0, -1.0))
    assert type(plan("g", robocache.Window("lidar", voxel=voxel), clouds)) is CloudPlan
