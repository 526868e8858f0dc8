"""The examples run as a newcomer first runs them, with nothing downloaded: each trains a few steps on a demo set
it generates (examples/demo_data.py: the README's LeRobot demo set, small ROS 2 bags) when given no data, and
what it cannot run without (a missing --data folder or bag, LeRobot) is one line and a clean non-zero exit.
`python examples/train_ddp.py` without torchrun trains on one process (and says how to launch more)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(args, env_extra=None, prelude=None, **kw):
    """The example as a subprocess; ``prelude``: Python run before it (``python -c``, then the script)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                          "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    if prelude:
        script, rest = str(args[0]), [str(a) for a in args[1:]]
        code = (f"{prelude}\nimport runpy, sys\nsys.argv = {[script, *rest]!r}\n"
                f"runpy.run_path({script!r}, run_name='__main__')")
        args = ["-c", code]
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600, **kw)


def _demo_data():
    """examples/demo_data.py, the examples' demo-set writer."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("demo_data", EXAMPLES / "demo_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one_line_error(r, *needles):
    """A clean exit with a message: status 2, no traceback, the message on one line of stderr."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in line, line


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """Environment of a user without the project's data folder: ROBOCACHE_DATA names an empty folder, and the
    cache (where the examples keep their demo sets) is this module's own. The demo sets are written into it
    here, once, by the examples' own writer, as a first run of an example writes them."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    base = tmp_path_factory.mktemp("newcomer")
    (base / "data").mkdir()
    env = {"ROBOCACHE_DATA": str(base / "data"), "ROBOCACHE_CACHE_DIR": str(base / "cache")}
    lerobot = _demo_data().lerobot_set(base / "cache" / "demo" / "lerobot")     # where an example looks
    assert json.loads((lerobot / "meta" / "info.json").read_text())["codebase_version"] == "v3.0"
    return env, lerobot


def _first_last_loss(text: str) -> tuple[float, float]:
    """The summary line's ``loss FIRST -> LAST``."""
    (found,) = re.findall(r"loss (\S+) -> (\S+?)[;\s]", text)
    return float(found[0]), float(found[1])


def test_demo_set_is_written_whole_once(tmp_path):
    """A second call reuses the set (the same files, untouched); no private folder is left beside it."""
    pytest.importorskip("rosbags")
    demo_data = _demo_data()
    bags = demo_data.rosbag_set(tmp_path / "bags")
    stamp = {p: p.stat().st_mtime_ns for p in bags.rglob("*") if p.is_file()}
    assert len([p for p in stamp if p.suffix == ".mcap"]) == 4
    assert demo_data.rosbag_set(tmp_path / "bags") == bags
    assert {p: p.stat().st_mtime_ns for p in bags.rglob("*") if p.is_file()} == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bags"]


@pytest.mark.parametrize("extra", [[], ["--loader", "torch", "--no-video"], ["--augment", "n16"]],
                         ids=["robocache-video", "torch", "augment"])
def test_train_groot_style_on_the_demo_set(newcomer, extra):
    """No --data and no PickNPlace: the demo set (7-D state and action, a 96x128 camera) sizes the policy."""
    env, lerobot = newcomer
    r = _run([EXAMPLES / "train_groot_style.py", "--steps", "3", "--batch-size", "8", *extra], env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"frames of {lerobot} " in r.stdout and "writing" not in r.stderr      # the set the cache holds
    assert r.stdout.count("\nstep ") + r.stdout.startswith("step ") == 1                # logs step 1 of 3
    assert np.isfinite(_first_last_loss(r.stdout)).all(), r.stdout


def test_train_ddp_without_torchrun_runs_on_one_process(newcomer, tmp_path):
    env, lerobot = newcomer
    out = tmp_path / "summary.json"
    r = _run([EXAMPLES / "train_ddp.py", "--steps", "4", "--batch-size", "8", "--json", out], env)
    assert r.returncode == 0, r.stderr
    assert "not started by torchrun: training on one process" in r.stderr
    assert "torchrun --standalone --nproc_per_node=N examples/train_ddp.py" in r.stderr
    assert f"{lerobot} loaded" in r.stdout
    summary = json.loads(out.read_text())
    assert summary["world_size"] == 1 and summary["steps"] == 4
    assert np.isfinite([summary["first_loss"], summary["last_loss"]]).all()


@pytest.mark.parametrize("script", ["train_ddp.py", "train_groot_style.py"])
def test_missing_data_says_where_to_get_it(script, tmp_path):
    r = _run([EXAMPLES / script, "--data", tmp_path / "nope", "--steps", "1"])
    _one_line_error(r, f"--data {tmp_path / 'nope'}: no such folder", "Leave --data out",
                    "Isaac-GR00T/demo_data/robot_sim.PickNPlace")


def test_train_from_rosbag_writes_and_trains_on_demo_bags(tmp_path):
    """No bag and no PX4 flight: the example writes its demo bags into the cache, then trains on them."""
    pytest.importorskip("rosbags")
    (tmp_path / "data").mkdir()
    env = {"ROBOCACHE_DATA": str(tmp_path / "data"), "ROBOCACHE_CACHE_DIR": str(tmp_path / "cache")}
    r = _run([EXAMPLES / "train_from_rosbag.py", "--steps", "4", "--batch-size", "16", "--device", "cpu"], env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"writing 4 demo ROS 2 bags to {tmp_path / 'cache' / 'demo' / 'rosbags'}" in r.stderr
    assert "rosbags: 4 episodes" in r.stdout
    # written at 100 Hz and 10 Hz, each message on a clock jittered by up to 10% of its period
    rates = dict(re.findall(r"(/\S+) (\S+) Hz \[7\]", r.stdout))
    assert set(rates) == {"/joint_states.position", "/joint_states.velocity", "/arm_controller/command.position"}
    assert [float(rates[k]) for k in sorted(rates)] == pytest.approx([10.0, 100.0, 100.0], rel=0.02)
    assert len(re.findall(r"^step +\d+ +loss", r.stdout, re.MULTILINE)) == 4            # every step of 4 logged
    assert np.isfinite(_first_last_loss(r.stdout)).all(), r.stdout


def test_train_from_rosbag_errors_are_one_line(tmp_path):
    pytest.importorskip("rosbags")
    r = _run([EXAMPLES / "train_from_rosbag.py", tmp_path / "nope", "--steps", "1"])
    _one_line_error(r, f"{tmp_path / 'nope'}: no such file or folder")
    bags = _demo_data().write_bags(tmp_path / "bags", episodes=1, seconds=1.0)
    # the PX4 streams are the defaults for a bag given without --state/--action
    r = _run([EXAMPLES / "train_from_rosbag.py", bags, "--steps", "1"])
    _one_line_error(r, "/fmu/out/vehicle_attitude", "match no topic", "--state/--action")
    r = _run([EXAMPLES / "train_from_rosbag.py", bags, "--state", "/joint_states.effort", "--action",
              "/joint_states.position", "--steps", "1"])
    _one_line_error(r, "no stream /joint_states.effort", "/joint_states.velocity", "--state/--action")


def test_train_from_rosbag_without_rosbags_says_what_to_install(tmp_path):
    (tmp_path / "data").mkdir()
    env = {"ROBOCACHE_DATA": str(tmp_path / "data"), "ROBOCACHE_CACHE_DIR": str(tmp_path / "cache")}
    r = _run([EXAMPLES / "train_from_rosbag.py", "--steps", "1"], env, prelude="import sys; sys.modules['rosbags'] = None")
    _one_line_error(r, 'pip install "robocache[rosbag]"')
    assert list((tmp_path / "cache" / "demo").iterdir()) == []            # nothing half-written left


def test_train_lerobot_policy_without_lerobot_says_what_to_install(tmp_path):
    """Where LeRobot is not installed (here: its import made to fail): one line naming the package, exit 2,
    before any data is looked for or written."""
    env = {"ROBOCACHE_DATA": str(tmp_path / "data"), "ROBOCACHE_CACHE_DIR": str(tmp_path / "cache")}
    r = _run([EXAMPLES / "train_lerobot_policy.py", "--smoke"], env, prelude="import sys; sys.modules['lerobot'] = None")
    _one_line_error(r, "needs LeRobot 0.4.x or 0.6.x", "pip install lerobot==0.4.4")
    assert not (tmp_path / "cache").exists()


def test_train_lerobot_policy_smoke_on_the_demo_set(newcomer, tmp_path):
    """--smoke without --data: LeRobot's ACT on the demo set's first two episodes, fed by robocache."""
    pytest.importorskip("lerobot")
    env, lerobot = newcomer
    out = tmp_path / "curve.json"
    r = _run([EXAMPLES / "train_lerobot_policy.py", "--smoke", "--out", out], env, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rep = json.loads(out.read_text())
    assert rep["data"] == str(lerobot) and rep["policy"] == "act" and rep["steps"] == 3
    loss = rep["robocache_fed"]["loss"]
    assert len(loss) == 3 and np.isfinite(loss).all()
