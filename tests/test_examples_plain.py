"""The examples run as a user first runs them: `python examples/train_ddp.py` without torchrun trains
on one process (and says how to launch more); a missing --data folder is a usage error saying where
the set comes from."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def _run(args, **kw):
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                        "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600, **kw)


def test_train_ddp_without_torchrun_runs_on_one_process(DATA, tmp_path):
    pytest.importorskip("pyarrow")
    data = DATA / "groot_picknplace"
    if not data.is_dir():
        pytest.skip(f"{data} is not present")
    out = tmp_path / "summary.json"
    r = _run([str(ROOT / "examples" / "train_ddp.py"), "--data", str(data), "--steps", "4", "--batch-size", "8",
              "--json", str(out)])
    assert r.returncode == 0, r.stderr
    assert "not started by torchrun: training on one process" in r.stderr
    assert "torchrun --standalone --nproc_per_node=N examples/train_ddp.py" in r.stderr
    summary = json.loads(out.read_text())
    assert summary["world_size"] == 1 and summary["steps"] == 4


@pytest.mark.parametrize("script", ["train_ddp.py", "train_groot_style.py"])
def test_missing_data_says_where_to_get_it(script, tmp_path):
    r = _run([str(ROOT / "examples" / script), "--data", str(tmp_path / "nope"), "--steps", "1"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--data {tmp_path / 'nope'}: no such folder" in r.stderr
    assert "Isaac-GR00T/demo_data/robot_sim.PickNPlace" in r.stderr
