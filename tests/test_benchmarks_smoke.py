"""Benchmarks never rot (issue 31 item 7): every ``benchmarks/*.py`` runs with ``--smoke`` on the CPU in
seconds and exits 0; any error in it exits non-zero and fails here. A new benchmark script is picked up
by the glob, so it needs a --smoke mode too (or a line in WITHOUT saying why not)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
#: scripts whose --smoke is not there yet, and why (checked below: an entry that gains --smoke must go)
WITHOUT: dict[str, str] = {}
#: scripts whose --smoke reads a real set of the project's data folder (ROBOCACHE_DATA, else ../shared/data): a
#: user's clone has none, so they skip there with the reason (issue 43: the README's test command stays green)
NEEDS_DATA: dict[str, str] = {"bench_ingest.py": "cr5_flashdrive_av1", "bench_lerobot_v30.py": "cr5_flashdrive_av1",
                              "bench_loader.py": "groot_picknplace"}
DATA = Path(os.environ.get("ROBOCACHE_DATA") or ROOT.parent / "shared" / "data")


def test_every_benchmark_is_listed():
    names = {p.name for p in SCRIPTS}
    assert len(SCRIPTS) >= 8 and all(n in names for n in WITHOUT) and all(n in names for n in NEEDS_DATA)
    assert not (ROOT / "benchmarks" / "fuzz_args.py").exists()     # a tool, in tools/


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_benchmark_smoke(script, tmp_path):
    if script.name in WITHOUT:
        assert "--smoke" not in script.read_text(), f"{script.name} has --smoke now: drop it from WITHOUT"
        pytest.skip(WITHOUT[script.name])
    if script.name in NEEDS_DATA and not (DATA / NEEDS_DATA[script.name]).is_dir():
        pytest.skip(f"{script.name} --smoke reads the real set {DATA / NEEDS_DATA[script.name]}, not present")
    # the worktree's robocache (not an installed one), no GPU, a scratch cache
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2",
               ROBOCACHE_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script), "--smoke"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{script.name} --smoke exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def test_robocache_bench_command(tmp_path):
    """`python -m robocache bench --smoke` beyond --help: one op, --seed and --json; the report names the op,
    the seed and a checked result per config (the figures are not measurements)."""
    import json
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", ROBOCACHE_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-m", "robocache", "bench", "--smoke", "--op", "resample", "--seed", "7",
                        "--json", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["seed"] == 7 and report["device"] == "cpu" and report["quick"] is True
    assert report["results"] and {x["op"] for x in report["results"]} == {"resample"}
    assert all(x["contenders"] for x in report["results"])
