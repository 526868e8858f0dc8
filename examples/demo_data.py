"""The examples' data when none is given: robocache's demo sets, written on first use and kept for the next run.

    lerobot_set()   the README's demo set (``python -m robocache demo --write-lerobot DIR``): a LeRobot v3.0
                    folder, 8 episodes of a 7-DoF arm, observation.state [7], action [7], a 96x128 camera.
                    Needs robocache[lerobot] (pyarrow, PyAV).
    rosbag_set()    4 ROS 2 bags (MCAP) of the same kind of arm: /joint_states (JointState, 100 Hz, position
                    and velocity) and /arm_controller/command (JointState, 10 Hz: the joint targets 0.2 s
                    ahead). Needs robocache[rosbag] (rosbags).

Both go to robocache's cache folder (``ROBOCACHE_CACHE_DIR``, else ``~/.cache/robocache``), under ``demo/``.
A set is written into a private folder and renamed into place when whole, so processes started together
(torchrun's ranks) never read a half-written one; delete the folder to have it written again.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

JOINTS = [f"joint_{i}" for i in range(6)] + ["gripper"]
#: the demo bags' streams (robocache names a JointState topic's parts ``topic.position`` etc.)
BAG_STATE = ["/joint_states.position", "/joint_states.velocity"]
BAG_ACTION = "/arm_controller/command.position"


def demo_dir() -> Path:
    """Where the demo sets are kept: robocache's cache folder (as its decoded-frame cache finds it) / demo."""
    root = os.environ.get("ROBOCACHE_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(root).expanduser() if root else (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "robocache"
    return base / "demo"


def lerobot_set(path: Path | None = None) -> Path:
    """The README's demo set at ``path`` (default ``demo_dir()/lerobot``), written unless it is there."""
    from robocache.demo import write_lerobot

    return _once(Path(path) if path else demo_dir() / "lerobot", lambda tmp: write_lerobot(tmp),
                 "the demo LeRobot set (python -m robocache demo --write-lerobot DIR)")


def rosbag_set(path: Path | None = None) -> Path:
    """A folder of 4 short ROS 2 bags at ``path`` (default ``demo_dir()/rosbags``), written unless it is there."""
    return _once(Path(path) if path else demo_dir() / "rosbags", write_bags, "4 demo ROS 2 bags")


def _once(path: Path, write, what: str) -> Path:
    if path.is_dir():
        return path
    print(f"writing {what} to {path} (once; later runs reuse it)", file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        write(tmp)
        try:
            tmp.rename(path)                      # atomic: readers see the whole set or none
        except OSError:
            if not path.is_dir():                 # not another process's copy that got there first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def write_bags(root: Path, episodes: int = 4, seconds: float = 8.0, seed: int = 0) -> Path:
    """``episodes`` ROS 2 MCAP bags under ``root`` (one per episode), each ``seconds`` long: the arm's joints
    follow a sum of sines; /joint_states logs them at 100 Hz, /arm_controller/command their value 0.2 s
    later at 10 Hz, each message stamped on its own jittered clock."""
    try:
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore
    except ImportError as e:
        raise ImportError("the demo bags are written with rosbags: pip install \"robocache[rosbag]\"") from e

    store = get_typestore(Stores.ROS2_HUMBLE)
    JointState, Header, Time = (store.types[t] for t in ("sensor_msgs/msg/JointState", "std_msgs/msg/Header",
                                                         "builtin_interfaces/msg/Time"))
    rng = np.random.default_rng(seed)
    for e in range(episodes):
        amp = rng.uniform(0.2, 1.0, (3, len(JOINTS))) / 3
        freq = rng.uniform(0.1, 0.8, (3, len(JOINTS)))                # Hz
        phase = rng.uniform(0, 2 * np.pi, (3, len(JOINTS)))
        msgs = []                                                    # (log ns, topic, position, velocity)
        for topic, rate, lead in (("/joint_states", 100.0, 0.0), ("/arm_controller/command", 10.0, 0.2)):
            n = int(seconds * rate)
            t = rng.uniform(0, 1 / rate) + (np.arange(n) + rng.uniform(-0.1, 0.1, n)) / rate
            arg = 2 * np.pi * freq * (t + lead)[:, None, None] + phase   # [n, 3 terms, joints]
            pos = (amp * np.sin(arg)).sum(1)
            if lead == 0:                                            # the measured state: noise and velocity
                pos += rng.normal(0, 0.005, pos.shape)
                vel = (amp * 2 * np.pi * freq * np.cos(arg)).sum(1)
            else:                                                    # the command: targets only
                vel = np.zeros((n, 0))
            msgs += [(1_700_000_000 * 10**9 + int(ti * 1e9), topic, p, v) for ti, p, v in zip(t, pos, vel)]
        msgs.sort(key=lambda m: m[0])
        with Writer(root / f"episode_{e}", version=9, storage_plugin=StoragePlugin.MCAP) as w:
            conns = {topic: w.add_connection(topic, JointState.__msgtype__, typestore=store)
                     for topic in ("/joint_states", "/arm_controller/command")}
            for ns, topic, p, v in msgs:
                msg = JointState(header=Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id=""),
                                 name=JOINTS, position=p.astype(np.float64), velocity=v.astype(np.float64),
                                 effort=np.zeros(0))
                w.write(conns[topic], ns + 2_000_000, store.serialize_cdr(msg, JointState.__msgtype__))
    return root
