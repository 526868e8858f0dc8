"""`python -m robocache demo` (robocache/demo.py): the main job trains, on the CPU here, with the
generated multi-rate dataset and with the GR00T LeRobot fixture."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from robocache import demo  # noqa: E402


def test_generated_dataset_is_multi_rate():
    ds = demo.generate(num_episodes=3, seed=1, device="cpu")
    rates = {n: s.rate for n, s in ds.streams.items()}
    assert {n: round(r) for n, r in rates.items()} == {"joints": 100, "gripper": 50, "camera": 15, "actions": 50}
    assert ds.streams["camera"].kind == "image" and ds.streams["camera"].shape == (32, 32, 3)
    assert ds.streams["joints"].shape == (14,) and ds.streams["actions"].shape == (7,)


def test_demo_generated_loss_goes_down(capsys):
    lines = []
    res = demo.run(["--device", "cpu", "--steps", "60", "--batch-size", "32", "--episodes", "8", "--seed", "0",
                    "--no-progress"], out=lines.append)
    text = "\n".join(lines)
    assert "samples/s" in text and "loader alone" in text and "loss: first" in text
    assert res["steps"] == 60 and res["device"] == "cpu"
    assert res["loader_samples_per_s"] > 0 and res["step_samples_per_s"] > 0
    assert np.isfinite(res["losses"]).all() and len(res["losses"]) == 60
    assert math.isfinite(res["loss_last"]) and res["loss_last"] < 0.8 * res["loss_first"]


def test_demo_cli_entry(capsys):
    from robocache.__main__ import main

    assert main(["demo", "--device", "cpu", "--steps", "3", "--batch-size", "4", "--episodes", "2",
                 "--no-progress"]) == 0
    assert "samples/s" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*none of its files exist")
def test_demo_lerobot_groot(DATA):
    from robocache.readers import available_backends

    path = DATA / "groot_picknplace"
    if not path.is_dir():
        pytest.skip(f"{path} is not present")
    argv = ["--lerobot", str(path), "--device", "cpu", "--steps", "20", "--batch-size", "16", "--no-progress"]
    if not available_backends():
        argv.append("--no-video")
    lines = []
    res = demo.run(argv, out=lines.append)
    text = "\n".join(lines)
    assert "observation.state x4" in text and "action action x16" in text
    assert ("observation.images.ego_view" in text) == bool(available_backends())
    assert res["source"] == str(path)
    assert np.isfinite(res["losses"]).all() and res["step_samples_per_s"] > 0



def test_demo_rosbag_px4(DATA):
    pytest.importorskip("rosbags")
    path = DATA / "rosbags" / "px4_flight_2025-12-03"
    lines = []
    res = demo.run(["--rosbag", str(path), "--action", "/controller/out/servo_positions.position",
                    "--state", "/fmu/out/vehicle_attitude", "/fmu/out/vehicle_angular_velocity",
                    "--device", "cpu", "--steps", "8", "--batch-size", "16", "--no-progress"], out=lines.append)
    assert res["source"] == str(path) and len(res["losses"]) == 8 and np.isfinite(res["losses"]).all()
    assert any("/fmu/out/vehicle_attitude" in line for line in lines)
    with pytest.raises(ValueError, match="no stream '/nope'"):
        demo.run(["--rosbag", str(path), "--action", "/nope", "--device", "cpu", "--steps", "2"], out=lines.append)
