"""ROS bags and MCAP to a Dataset: robocache.readers.read_rosbag and Dataset.from_rosbag.

Two kinds of sources, both checked against values obtained without the reader:
- the real logs in ../shared/data/rosbags (a PX4 flight and a simulated arm, ROS 2 MCAP), read
  here directly with rosbags' AnyReader, message by message;
- bags written by tests/rosbag_forge.py with rosbags' writers (ROS 1 .bag, ROS 2 SQLite3 and
  MCAP, bare .mcap) from a scenario whose values the test holds, one message type per topic.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rosbags")
from pairs import paired  # noqa: E402
from conftest import sha256_tree  # noqa: E402
import rosbag_forge as forge  # noqa: E402
from robocache.readers import ReaderError, read_rosbag  # noqa: E402

FORMATS = ("ros1", "sqlite3", "mcap", "bare-mcap")
ROOT = Path(__file__).resolve().parents[1]


def quiet_read(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_rosbag(*args, **kw)


# ----------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def scene():
    return forge.scenario(seed=7)


@pytest.fixture(scope="module")
def bags(scene, tmp_path_factory):
    root = tmp_path_factory.mktemp("bags")
    out = {fmt: forge.write_bag(scene, root / fmt.replace("-", "_"), fmt) for fmt in FORMATS}
    before = {fmt: sha256_tree(p) for fmt, p in out.items()}
    yield out
    assert {fmt: sha256_tree(p) for fmt, p in out.items()} == before, "the reader changed a bag"


@pytest.fixture(scope="module")
def read(bags):
    return {fmt: quiet_read(p) for fmt, p in bags.items()}


def raw_messages(path, topics=None):
    """{topic: [(log ns, message)]} straight from rosbags, no robocache involved."""
    from rosbags.highlevel import AnyReader

    out = {}
    with AnyReader([Path(path)]) as r:
        conns = [c for c in r.connections if topics is None or c.topic in topics]
        for c, ts, data in r.messages(connections=conns):
            out.setdefault(c.topic, []).append((ts, r.deserialize(data, c.msgtype)))
    return out


PX4_TOPICS = ("/fmu/out/sensor_combined", "/tf", "/md/state", "/servo/out/state", "/controller/out/servo_positions",
              "/servo/in/state", "/fmu/out/vehicle_attitude", "/controller/optimizer/ki_error")


def ns(stamp):
    return stamp.sec * 10**9 + stamp.nanosec


@pytest.fixture(scope="module")
def px4(px4_dir):
    return quiet_read(px4_dir), raw_messages(px4_dir, PX4_TOPICS)


@pytest.fixture(scope="module")
def sim(sim_dir):
    return quiet_read(sim_dir), raw_messages(sim_dir)


def stream(ep, name, e=0):
    return ep.episodes[e][name]


def by_stamp(msgs):
    return sorted(msgs, key=lambda m: m.stamp)


# ----------------------------------------------------------------------------
# the generated bags: every format, every message type


def test_every_format_reads_the_same(read):
    ref = read["mcap"]
    for fmt, ep in read.items():
        assert len(ep) == 1
        assert list(ep.episodes[0]) == list(ref.episodes[0]), fmt
        assert ep.kinds == ref.kinds and ep.modes == ref.modes and ep.feature_names == ref.feature_names, fmt
        for name, (v, t) in ep.episodes[0].items():
            rv, rt = ref.episodes[0][name]
            assert t.dtype == np.int64 and np.array_equal(t, rt), (fmt, name)
            if isinstance(v, list):
                assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(v, rv)), (fmt, name)
            else:
                assert v.dtype == rv.dtype and np.array_equal(v, rv, equal_nan=v.dtype.kind == "f"), (fmt, name)
    assert read["ros1"].extra["bags"][0]["format"] == "ros1"
    assert read["sqlite3"].extra["bags"][0]["format"] == "ros2"
    assert read["bare-mcap"].extra["bags"][0]["format"] == "mcap"


@pytest.mark.parametrize("fmt", ["ros1", "sqlite3"])
def test_vectors_quaternions_and_header_stamps(read, scene, fmt):
    ep = read[fmt]
    for topic, parts in (("/imu", ("orientation", "angular_velocity", "linear_acceleration")),
                         ("/odom", ("position", "orientation", "linear", "angular")),
                         ("/pose", ("position", "orientation")), ("/cmd_vel", ("linear", "angular"))):
        msgs = by_stamp(scene.of(topic))
        for part in parts:
            v, t = stream(ep, f"{topic}.{part}")
            assert np.array_equal(t, [m.stamp for m in msgs]), (topic, part)       # header stamps, exact ns
            want = np.array([m.fields[part] for m in msgs], np.float64).astype(np.float32)
            np.testing.assert_array_equal(v, want)
            assert ep.modes.get(f"{topic}.{part}") == ("slerp" if part == "orientation" else None)
            assert ep.feature_names[f"{topic}.{part}"] == (["x", "y", "z", "w"] if part == "orientation"
                                                         else ["x", "y", "z"])


def test_joint_states_from_two_publishers(read, scene):
    ep = read["sqlite3"]
    msgs = by_stamp(scene.of("/joint_states"))
    v, t = stream(ep, "/joint_states.position")
    assert ep.feature_names["/joint_states.position"] == ["j1", "j2", "j3", "gripper"]
    assert np.array_equal(t, [m.stamp for m in msgs])
    arm = np.array([i for i, m in enumerate(msgs) if m.fields["name"] == ["j1", "j2", "j3"]])
    grip = np.array([i for i, m in enumerate(msgs) if m.fields["name"] == ["gripper"]])
    assert len(arm) == 100 and len(grip) == 20
    # each joint at its own messages: exactly what was published
    np.testing.assert_array_equal(v[arm, :3], np.array([msgs[i].fields["position"] for i in arm], np.float32))
    np.testing.assert_array_equal(v[grip, 3], np.array([msgs[i].fields["position"][0] for i in grip], np.float32))
    # elsewhere linear in time between that joint's own samples, held at the ends
    tt = (t - t[0]).astype(np.float64)
    gv = np.array([msgs[i].fields["position"][0] for i in grip])
    np.testing.assert_allclose(v[arm, 3], np.interp(tt[arm], tt[grip], gv), rtol=1e-6)
    for j in range(3):
        av = np.array([msgs[i].fields["position"][j] for i in arm])
        np.testing.assert_allclose(v[grip, j], np.interp(tt[grip], tt[arm], av), rtol=1e-5, atol=1e-6)
    # velocity: the gripper never reports it, its messages carry no velocity at all
    vel, tv = stream(ep, "/joint_states.velocity")
    assert ep.feature_names["/joint_states.velocity"] == ["j1", "j2", "j3"]
    assert np.array_equal(tv, t[arm])
    np.testing.assert_array_equal(vel, np.array([msgs[i].fields["velocity"] for i in arm], np.float32))
    notes = " ".join(ep.extra["bags"][0]["streams"]["/joint_states.position"]["notes"])
    assert "gripper (100)" in notes and "j1 (20)" in notes


def test_joint_fill_options(bags, scene):
    msgs = by_stamp(scene.of("/joint_states"))
    grip = [i for i, m in enumerate(msgs) if m.fields["name"] == ["gripper"]]
    nan = quiet_read(bags["mcap"], topics=["/joint_states"], joint_fill="nan")
    v, _ = stream(nan, "/joint_states.position")
    assert np.isnan(v[:, 3]).sum() == 100 and not np.isnan(v[grip, 3]).any()
    prev = quiet_read(bags["mcap"], topics=["/joint_states"], joint_fill="previous")
    v, _ = stream(prev, "/joint_states.position")
    gv = np.array([msgs[i].fields["position"][0] for i in grip], np.float32)
    k = np.searchsorted(grip, np.arange(len(msgs)), side="right") - 1
    np.testing.assert_array_equal(v[:, 3], gv[np.maximum(k, 0)])
    with pytest.raises(ValueError, match="joint_fill"):
        quiet_read(bags["mcap"], topics=["/joint_states"], joint_fill="zero")


def test_tf_one_stream_per_frame_pair(read, scene):
    ep = read["ros1"]
    msgs = by_stamp(scene.of("/tf"))
    for k, (parent, child) in enumerate((("odom", "base_link"), ("base_link", "arm"))):
        v, t = stream(ep, f"/tf:{parent}->{child}.translation")
        q, tq = stream(ep, f"/tf:{parent}->{child}.rotation")
        assert np.array_equal(t, [m.stamp for m in msgs]) and np.array_equal(tq, t)
        np.testing.assert_array_equal(v, np.array([m.fields["transforms"][k][2] for m in msgs], np.float32))
        np.testing.assert_array_equal(q, np.array([m.fields["transforms"][k][3] for m in msgs], np.float32))
        assert ep.modes[f"/tf:{parent}->{child}.rotation"] == "slerp"
    v, t = stream(ep, "/tf_static:world->odom.translation")
    assert v.tolist() == [[1.0, 2.0, 3.0]] and len(t) == 1
    q, _ = stream(ep, "/tf_static:base_link->camera.rotation")
    np.testing.assert_allclose(q, [[0, 0.7071068, 0, 0.7071068]], rtol=1e-7)


def test_images_in_every_encoding(read, scene):
    ep = read["mcap"]
    rgb = np.stack([m.fields["img"] for m in by_stamp(scene.of("/cam/rgb"))])
    for name in ("/cam/rgb", "/cam/bgr", "/cam/png"):  # bgr8 with padded rows comes back as RGB
        v, t = stream(ep, name)
        assert ep.kinds[name] == "image" and v.dtype == np.uint8 and v.shape == (10, 8, 12, 3)
        np.testing.assert_array_equal(v, rgb, err_msg=name)
        assert np.array_equal(t, [m.stamp for m in by_stamp(scene.of(name))])
    v, _ = stream(ep, "/cam/mono")
    np.testing.assert_array_equal(v, rgb[..., :1])
    v, _ = stream(ep, "/cam/jpeg")                               # lossy: close to what was encoded
    assert v.shape == rgb.shape and np.abs(v.astype(int) - rgb).mean() < 4
    v, _ = stream(ep, "/cam/depth16")                 # big-endian 16UC1: the values, exact in float32
    assert v.dtype == np.float32
    np.testing.assert_array_equal(v, np.stack([m.fields["img"] for m in by_stamp(scene.of("/cam/depth16"))]))
    v, _ = stream(ep, "/cam/depth32")
    assert v.dtype == np.float32
    np.testing.assert_array_equal(v, np.stack([m.fields["img"] for m in by_stamp(scene.of("/cam/depth32"))]))
    small = quiet_read(read["mcap"].source, topics=["/cam/rgb"], image_size=(4, 6))
    assert stream(small, "/cam/rgb")[0].shape == (10, 4, 6, 3)
    none = quiet_read(read["mcap"].source, load_images=False)
    assert not any(n.startswith("/cam") for n in none.episodes[0])


def test_point_clouds(read, bags, scene):
    msgs = by_stamp(scene.of("/lidar"))
    clouds, t = stream(read["ros1"], "/lidar")
    assert read["ros1"].kinds["/lidar"] == "pointcloud" and len(clouds) == len(msgs)
    for c, m in zip(clouds, msgs):
        xyz = m.fields["cloud"][0]
        np.testing.assert_array_equal(c, xyz[np.isfinite(xyz).all(1)])
    full = quiet_read(bags["ros1"], topics=["/lidar"], point_fields=("x", "y", "z", "intensity", "ring"),
                      drop_invalid_points=False)
    clouds, _ = stream(full, "/lidar")
    assert full.feature_names["/lidar"] == ["x", "y", "z", "intensity", "ring"]
    for c, m in zip(clouds, msgs):
        xyz, inten, ring = m.fields["cloud"]
        np.testing.assert_array_equal(c, np.column_stack([xyz, inten, ring.astype(np.float32)]))
    with pytest.raises(ReaderError, match=r"/lidar.*no field \['rgb'\]"):
        quiet_read(bags["ros1"], topics=["/lidar"], point_fields=("x", "y", "z", "rgb"))


def test_std_msgs_numbers_and_text(read, scene):
    ep = read["sqlite3"]
    for topic, dtype in (("/battery", np.float32), ("/count", np.int32), ("/flag", np.bool_)):
        msgs = scene.of(topic)
        v, t = stream(ep, topic)
        assert v.dtype == dtype and v.shape == (len(msgs), 1)
        np.testing.assert_array_equal(v[:, 0], np.array([m.fields["data"] for m in msgs]).astype(dtype))
        assert np.array_equal(t, [m.log for m in msgs])       # no header: the log time
        assert ep.extra["bags"][0]["streams"][topic]["clock"] == "log"
    assert ep.modes["/count"] == "previous" and ep.kinds["/count"] == "discrete"
    v, t = stream(ep, "/status")
    assert ep.kinds["/status"] == "text" and list(v) == [m.fields["data"] for m in scene.of("/status")]


def test_custom_type_flattened(read, bags, scene):
    ep = read["ros1"]
    msgs = by_stamp(scene.of("/load_cell"))
    v, t = stream(ep, "/load_cell")
    assert ep.feature_names["/load_cell"] == ["force.x", "force.y", "force.z", "temperature",
                                              "raw[0]", "raw[1]", "raw[2]"]
    want = np.array([[*m.fields["force"], m.fields["temperature"], *m.fields["raw"]] for m in msgs])
    np.testing.assert_array_equal(v, want.astype(np.float32))
    notes = " ".join(ep.extra["bags"][0]["streams"]["/load_cell"]["notes"])
    assert "device_time" in notes and "label" in notes
    picked = quiet_read(bags["ros1"], topics=["/load_cell"], fields={"/load_cell": ["force", "device_time"]})
    v, _ = stream(picked, "/load_cell")
    assert picked.feature_names["/load_cell"] == ["force.x", "force.y", "force.z", "device_time"]
    assert v.dtype == np.float64                               # a 64-bit field asked for: float64, exact
    assert v[:, 3].astype(np.int64).tolist() == [m.fields["device_time"] for m in msgs]
    f64 = quiet_read(bags["ros1"], topics=["/imu"], dtype=None)
    assert stream(f64, "/imu.orientation")[0].dtype == np.float64
    with pytest.raises(ValueError, match=r"fields\['/load_cell'\].*torque"):
        quiet_read(bags["ros1"], topics=["/load_cell"], fields={"/load_cell": ["torque"]})


def test_clock_log_and_per_topic(read, bags, scene):
    log = quiet_read(bags["mcap"], topics=["/imu", "/pose"], clock="log")
    _, t = stream(log, "/imu.orientation")
    assert np.array_equal(t, [m.log for m in scene.of("/imu")])
    mixed = quiet_read(bags["mcap"], topics=["/imu", "/pose"], clock={"/imu": "log"})
    assert np.array_equal(stream(mixed, "/imu.orientation")[1], [m.log for m in scene.of("/imu")])
    assert np.array_equal(stream(mixed, "/pose.position")[1], [m.stamp for m in scene.of("/pose")])
    with pytest.raises(ValueError, match="clock"):
        quiet_read(bags["mcap"], clock="sensor")
    with pytest.raises(ValueError, match=r"clock: \['/imu_typo'\]"):
        quiet_read(bags["mcap"], topics=["/imu"], clock={"/imu_typo": "log"})


def test_select_rename_and_modes(bags):
    ep = quiet_read(bags["mcap"], topics=["/imu", "/cam/*"], exclude=["/cam/jpeg"],
                    rename={"/imu": "imu", "/cam/rgb": "rgb"}, modes={"imu.angular_velocity": "nearest"},
                    fields={"/imu": ["orientation", "angular_velocity"]})
    assert sorted(ep.episodes[0]) == sorted(["imu.orientation", "imu.angular_velocity", "rgb", "/cam/bgr",
                                             "/cam/mono", "/cam/depth16", "/cam/depth32", "/cam/png"])
    assert ep.modes["imu.angular_velocity"] == "nearest" and ep.modes["imu.orientation"] == "slerp"
    with pytest.raises(ValueError, match=r"topics: \['/nope'\]"):
        quiet_read(bags["mcap"], topics=["/nope"])
    with pytest.raises(ValueError, match="rename"):
        quiet_read(bags["mcap"], topics=["/imu"], rename={"/cam/rgb": "x"})
    with pytest.raises(ValueError, match="modes"):
        quiet_read(bags["mcap"], topics=["/imu"], modes={"/imu": "linear"})
    with pytest.raises(ValueError, match=r"fields\['/imu'\]"):
        quiet_read(bags["mcap"], topics=["/imu"], fields={"/imu": ["magnetic_field"]})


def test_folders_lists_and_splits(scene, tmp_path):
    a = forge.write_bag(scene, tmp_path / "runs" / "run_2", "mcap", skip=["/lidar"])
    b = forge.write_bag(scene, tmp_path / "runs" / "run_10", "ros1", skip=["/lidar"])
    ep = quiet_read(tmp_path / "runs", topics=["/imu", "/status"])
    assert [Path(e["path"]).name for e in ep.extra["episodes"]] == ["run_2", "run_10.bag"]   # natural order
    assert len(quiet_read([b, a], topics=["/imu"])) == 2
    # one long bag: the scenario twice, 5 s apart
    later = forge.Scenario([forge.Msg(m.topic, m.msgtype, m.log + 5 * 10**9, None if m.stamp is None
                                      else m.stamp + 5 * 10**9, m.fields) for m in scene.msgs])
    long = forge.write_bag(forge.Scenario(scene.msgs + later.msgs), tmp_path / "long", "mcap", skip=["/lidar"])
    two = quiet_read(long, topics=["/imu", "/status"], split_gap=2.0)
    assert len(two) == 2
    t0, t1 = stream(two, "/imu.orientation", 0)[1], stream(two, "/imu.orientation", 1)[1]
    assert len(t0) == len(t1) == 200 and t1[0] - t0[0] == 5 * 10**9
    by_topic = quiet_read(long, topics=["/imu", "/status"], split_topic="/status")
    status = [m.log for m in scene.of("/status")] + [m.log for m in later.of("/status")]
    assert len(by_topic) == len(status)           # the first /status comes first: no episode before it
    for e, start in enumerate(status[1:], 1):
        assert by_topic.extra["episodes"][e]["split_start_ns"] == start
        assert stream(by_topic, "/status", e)[0].tolist() == [f"state {e % 5}"]
    with pytest.raises(ValueError, match="split_topic"):
        quiet_read(long, topics=["/imu"], split_topic="/nope")


def test_clock_problems_are_reported_not_fatal(scene, tmp_path):
    msgs = []
    for m in scene.msgs:
        if m.topic == "/imu":
            idx = scene.of("/imu").index(m)
            stamp = m.stamp - (7_000_000 if idx % 10 == 5 else 0)   # every 10th stamp 2 ms before the last
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, stamp, m.fields))
        elif m.topic == "/pose":
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, 0, m.fields))         # never stamped
        elif m.topic in ("/odom", "/battery"):
            msgs.append(m)
    bag = forge.write_bag(forge.Scenario(msgs), tmp_path / "clocks", "mcap")
    with pytest.warns(UserWarning) as rec:
        ep = read_rosbag(bag)
    text = " ".join(str(w.message) for w in rec)
    assert "/imu.orientation" in text and "back in time" in text and "/pose.position" in text
    diag = ep.extra["bags"][0]["streams"]
    assert diag["/imu.orientation"]["non_monotonic"] == 20
    _, t = stream(ep, "/imu.orientation")
    assert np.all(np.diff(t) >= 0) and sorted(t.tolist()) == sorted(m.stamp for m in msgs if m.topic == "/imu")
    assert diag["/pose.position"]["zero_stamps"] == len(scene.of("/pose")) and diag["/pose.position"]["clock"] == "log"
    assert np.array_equal(stream(ep, "/pose.position")[1], [m.log for m in scene.of("/pose")])
    # header stamps on sim time next to a topic on the log clock: the clocks cannot be aligned
    sim = [forge.Msg(m.topic, m.msgtype, m.log, m.stamp - forge.T0 + 100 * 10**9, m.fields)
           if m.stamp is not None else m for m in scene.msgs if m.topic in ("/odom", "/battery")]
    bag = forge.write_bag(forge.Scenario(sim), tmp_path / "sim", "mcap")
    with pytest.warns(UserWarning, match="different clocks"):
        ep = read_rosbag(bag)
    assert ep.extra["bags"][0]["streams"]["/odom.position"]["sim_time"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_rosbag(bag, clock="log")


def test_damaged_bags_give_clear_errors(bags, scene, sim_dir, tmp_path):
    # a recording cut off mid-write: the real arm log's MCAP, its last third missing
    (src,) = sim_dir.glob("*.mcap")
    data = src.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ReaderError, match=r"cut\.mcap.*truncated"):
        read_rosbag(cut)
    part = quiet_read(cut, recover=True)
    whole = quiet_read(src)
    assert part.extra["bags"][0]["recovered"]["size"] == len(data) * 2 // 3
    n = len(stream(part, "/imu/data.orientation")[1])
    assert 1000 < n < 4712
    np.testing.assert_array_equal(stream(part, "/imu/data.orientation")[0],
                                  stream(whole, "/imu/data.orientation")[0][:n])

    rb = Path(bags["ros1"]).read_bytes()
    ros1 = tmp_path / "cut.bag"
    ros1.write_bytes(rb[: len(rb) // 2])
    with pytest.raises(ReaderError, match=r"cut\.bag: cannot open ROS bag"):
        read_rosbag(ros1)
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not a bag at all" * 10)
    with pytest.raises(ReaderError, match=r"junk\.mcap"):
        read_rosbag(junk)
    with pytest.raises(ReaderError, match="no such file"):
        read_rosbag(tmp_path / "missing.bag")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ReaderError, match="not a ROS bag"):
        read_rosbag(tmp_path / "notes.txt")

    # a message whose bytes are not its type: the error names the file, topic and message
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore
    store = get_typestore(Stores.ROS2_HUMBLE)
    w = Writer(tmp_path / "garbled", version=9, storage_plugin=StoragePlugin.MCAP)
    w.open()
    c = w.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
    good = forge.build(store, False, scene.of("/imu")[0])
    w.write(c, forge.T0, store.serialize_cdr(good, "sensor_msgs/msg/Imu"))
    w.write(c, forge.T0 + 10**7, b"\x00\x01\x00\x00garbage")
    w.close()
    with pytest.raises(ReaderError, match=r"garbled.*topic /imu: message 1 .*cannot be decoded"):
        read_rosbag(tmp_path / "garbled")


def test_bag_without_type_definitions(bags, tmp_path):
    """An old-style SQLite3 bag (no embedded definitions): stock types decode, custom ones are skipped."""
    import shutil
    copy = tmp_path / "nodefs"
    shutil.copytree(bags["sqlite3"], copy)
    (db,) = copy.glob("*.db3")
    con = sqlite3.connect(db)
    con.execute("DELETE FROM message_definitions")
    con.commit()
    con.close()
    ep = quiet_read(copy, topics=["/imu", "/load_cell"])
    assert "/imu.orientation" in ep.episodes[0] and "/load_cell" not in ep.episodes[0]
    assert "unknown message type" in ep.extra["bags"][0]["skipped"]["/load_cell"]
    ref = quiet_read(bags["sqlite3"], topics=["/imu"])
    np.testing.assert_array_equal(stream(ep, "/imu.orientation")[0], stream(ref, "/imu.orientation")[0])


# ----------------------------------------------------------------------------
# the real logs


def test_px4_flight_streams_match_the_raw_messages(px4):
    ep, raw = px4
    e = ep.episodes[0]
    info = ep.extra["bags"][0]
    meta = {"/fmu/out/sensor_combined": 3091, "/tf": 1600, "/md/state": 1533, "/servo/out/state": 481,
            "/controller/out/servo_positions": 266, "/servo/in/state": 27}
    for topic, n in meta.items():                            # metadata.yaml's counts, all read
        assert info["topics"][topic]["count"] == n == len(raw[topic])
    # px4_msgs (custom, definitions embedded in the MCAP): flattened, on the log clock
    v, t = e["/fmu/out/vehicle_attitude"]
    names = ep.feature_names["/fmu/out/vehicle_attitude"]
    att = raw["/fmu/out/vehicle_attitude"]
    assert np.array_equal(t, [ts for ts, _ in att])
    np.testing.assert_array_equal(v[:, [names.index(f"q[{i}]") for i in range(4)]], np.stack([m.q for _, m in att]))
    assert "timestamp" not in names and "timestamp_sample" not in names
    v, t = e["/fmu/out/sensor_combined"]
    names = ep.feature_names["/fmu/out/sensor_combined"]
    sc = raw["/fmu/out/sensor_combined"]
    np.testing.assert_array_equal(v[:, [names.index(f"gyro_rad[{i}]") for i in range(3)]],
                                  np.stack([m.gyro_rad for _, m in sc]))
    # unused motor slots are NaN in every message: left out
    assert ep.feature_names["/fmu/out/actuator_motors"][1:] == [f"control[{i}]" for i in range(4)]
    # JointState on its header clock
    for topic in ("/servo/out/state", "/controller/out/servo_positions", "/servo/in/state"):
        msgs = sorted(raw[topic], key=lambda x: ns(x[1].header.stamp))
        v, t = e[f"{topic}.position"]
        assert ep.feature_names[f"{topic}.position"] == list(msgs[0][1].name)
        assert np.array_equal(t, [ns(m.header.stamp) for _, m in msgs])
        np.testing.assert_array_equal(v, np.stack([m.position for _, m in msgs]).astype(np.float32))
    assert "/servo/in/state.velocity" not in e                    # empty in every message
    # std_msgs
    v, t = e["/md/state"]
    assert v.dtype == np.int32 and v[:, 0].tolist() == [m.data for _, m in raw["/md/state"]]
    v, _ = e["/controller/optimizer/ki_error"]
    np.testing.assert_array_equal(v[:, 0], np.float32([m.data for _, m in raw["/controller/optimizer/ki_error"]]))
    # /tf: six frame pairs, each transform on its own header stamp
    pairs = {}
    for _, m in raw["/tf"]:
        for tr in m.transforms:
            pairs.setdefault((tr.header.frame_id, tr.child_frame_id), []).append(tr)
    assert len(pairs) == 6
    for (p, c), trs in pairs.items():
        trs = sorted(trs, key=lambda tr: ns(tr.header.stamp))
        v, t = e[f"/tf:{p}->{c}.rotation"]
        assert np.array_equal(t, [ns(tr.header.stamp) for tr in trs])
        q = [[tr.transform.rotation.x, tr.transform.rotation.y, tr.transform.rotation.z, tr.transform.rotation.w]
             for tr in trs]
        np.testing.assert_array_equal(v, np.float32(q))
    # logging topics are left out, and say so
    assert "/rosout" not in e and "logging" in info["skipped"]["/rosout"]
    assert not any(w for w in info.get("warnings", []))


def test_sim_arm_imu_and_joints(sim):
    ep, raw = sim
    e = ep.episodes[0]
    imu = sorted(raw["/imu/data"], key=lambda x: ns(x[1].header.stamp))
    v, t = e["/imu/data.orientation"]
    assert len(t) == 4712 and np.array_equal(t, [ns(m.header.stamp) for _, m in imu])
    o = [[m.orientation.x, m.orientation.y, m.orientation.z, m.orientation.w] for _, m in imu]
    np.testing.assert_array_equal(v, np.float32(o))
    v, _ = e["/imu/data.linear_acceleration"]
    np.testing.assert_array_equal(v, np.float32([[m.linear_acceleration.x, m.linear_acceleration.y,
                                                  m.linear_acceleration.z] for _, m in imu]))
    js = sorted(raw["/joint_states"], key=lambda x: ns(x[1].header.stamp))
    v, t = e["/joint_states.effort"]
    assert len(t) == 1866 and ep.feature_names["/joint_states.effort"] == list(js[0][1].name)
    np.testing.assert_array_equal(v, np.float32([m.effort for _, m in js]))
    d = ep.extra["bags"][0]["streams"]["/imu/data.orientation"]
    assert d["sim_time"] and d["clock"] == "header" and t[0] < 200 * 10**9   # Gazebo time, kept
    assert not ep.extra["bags"][0].get("warnings")             # every stream on that one clock: consistent


def test_from_rosbag_and_a_loader_over_the_px4_flight(px4_dir, px4):
    torch = pytest.importorskip("torch")
    import robocache

    _, raw = px4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_rosbag(
            px4_dir, topics=["/fmu/out/vehicle_attitude", "/controller/out/servo_positions", "/md/state",
                             "/fmu/out/sensor_combined"],
            fields={"/fmu/out/vehicle_attitude": ["q"], "/fmu/out/sensor_combined": ["gyro_rad"]},
            rename={"/controller/out/servo_positions": "servo"}, device="cpu")
    assert set(ds.streams) == {"/fmu/out/vehicle_attitude", "servo.position", "/md/state",
                               "/fmu/out/sensor_combined"}
    assert abs(ds.streams["/fmu/out/vehicle_attitude"].rate - 100) < 5
    assert abs(ds.streams["servo.position"].rate - 8.8) < 0.5
    origin = ds.time_origin_ns
    windows = {"attitude": robocache.Window("/fmu/out/vehicle_attitude", offsets=[-0.04, -0.02, 0.0]),
               "gyro": robocache.Window("/fmu/out/sensor_combined", offsets=[0.0]),
               "servo": robocache.Window("servo.position", indices=range(4), rate=8.8),
               "mode": robocache.Window("/md/state")}
    loader = robocache.DataLoader(ds, batch_size=64, rate=50.0, windows=windows, shuffle=True, seed=3)
    assert len(loader) == -(-loader.num_samples // 64) and loader.num_samples > 1400   # ~31 s at 50 Hz
    batch = next(iter(loader))
    assert batch["attitude"].shape == (64, 3, 4) and batch["servo"].shape == (64, 4, 3)
    assert batch["mode"].shape == (64, 1, 1) and batch["mode"].dtype == torch.int32
    # the same values computed here from the raw messages (times relative to the first, float64)
    att = raw["/fmu/out/vehicle_attitude"]
    ta = np.array([ts for ts, _ in att], np.int64)
    qa = np.stack([m.q for _, m in att]).astype(np.float64)
    srv = sorted(raw["/controller/out/servo_positions"], key=lambda x: ns(x[1].header.stamp))
    ts_ = np.array([ns(m.header.stamp) for _, m in srv], np.int64)
    ps = np.stack([m.position for _, m in srv])
    md_t = np.array([ts for ts, _ in raw["/md/state"]], np.int64)
    md_v = np.array([m.data for _, m in raw["/md/state"]])
    _, t_anchor = (x.cpu().numpy() for x in loader.samples)
    picked = loader.order(0).cpu().numpy()[:64]
    for b, i in enumerate(picked):
        t0 = (origin - ta[0]) + t_anchor[i] * 1e9          # anchor, ns after the first attitude message
        for k, off in enumerate([-0.04, -0.02, 0.0]):
            want = [np.interp(t0 + off * 1e9, (ta - ta[0]).astype(np.float64), qa[:, c]) for c in range(4)]
            np.testing.assert_allclose(batch["attitude"][b, k].numpy(), want, rtol=1e-5, atol=1e-6)
        for k in range(4):
            j = int(np.argmin(np.abs((ts_ - ta[0]) - (t0 + k / 8.8 * 1e9))))   # indices: the nearest sample
            np.testing.assert_array_equal(batch["servo"][b, k].numpy(), ps[j].astype(np.float32))
        j = max(int(np.searchsorted(md_t - ta[0], t0 + 1, side="right")) - 1, 0)   # previous: zero-order hold
        assert int(batch["mode"][b, 0, 0]) == md_v[j]


def test_sources_are_opened_read_only(px4_dir, bags, tmp_path):
    before = {p.name for p in Path(bags["sqlite3"]).iterdir()}
    quiet_read(bags["sqlite3"], topics=["/imu"])
    assert {p.name for p in Path(bags["sqlite3"]).iterdir()} == before      # no -journal / -wal left behind
    os.chmod(bags["bare-mcap"], 0o444)
    try:
        quiet_read(bags["bare-mcap"], topics=["/imu"])
    finally:
        os.chmod(bags["bare-mcap"], 0o644)


def test_missing_extra_is_named(monkeypatch, bags):
    monkeypatch.setitem(sys.modules, "rosbags", None)      # import rosbags now raises ImportError
    with pytest.raises(ImportError, match=r"robocache\[rosbag\]"):
        read_rosbag(bags["ros1"])


def test_train_from_rosbag_example(px4_dir, capsys):
    """examples/train_from_rosbag.py end to end on the PX4 flight (in this process: no second torch import)."""
    pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_from_rosbag", ROOT / "examples" / "train_from_rosbag.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = example.main([str(px4_dir), "--steps", "10", "--batch-size", "16", "--device", "cpu"])
    text = capsys.readouterr().out
    assert "/controller/out/servo_positions.position 8.8 Hz [3]" in text and "samples/s" in text
    assert len(out["losses"]) >= 2 and all(np.isfinite(out["losses"]))


@pytest.mark.cuda
def test_image_and_cloud_topics_on_the_gpu(bags):
    """A bag's image and point-cloud topics through the GPU path (frame gather, voxel windows) give the
    CPU's batches."""
    import torch
    import robocache
    if not torch.cuda.is_available() or not robocache.build_info()["cuda"]:
        pytest.skip("needs a GPU and a CUDA build")
    from robocache import DataLoader, Window
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = robocache.Dataset.from_rosbag(bags["mcap"], device="cpu")
        gpu = robocache.Dataset.from_rosbag(bags["mcap"], device="cuda")
    cams = [n for n, s in cpu.streams.items() if s.frames is not None]
    cloud = next(n for n, s in cpu.streams.items() if s.kind == "pointcloud")
    assert cams and all(gpu.streams[n].frames.tier == "device" for n in cams)
    # targets 13 ms off the 50 ms grid: multiples of 0.05 s from a 20 Hz anchor land within an ulp of
    # the midpoint of two 10 Hz frames, where CPU and CUDA `nearest` were seen to pick different
    # frames (a resample question, left open); this test is about the frame gather and the voxels
    windows = {n: Window(n, offsets=[0.013, 0.113], layout="BTCHW", resize=(6, 10)) for n in cams}
    windows["raw"] = Window(cams[0], offsets=[-0.037, 0.013])
    windows["cloud"] = Window(cloud, offsets=[0.013],
                              voxel=dict(grid=(8, 8, 4), voxel_size=0.5, origin=(-2, -2, -1)))
    a = DataLoader(cpu, 4, shuffle=True, seed=1, rate=20, windows=windows)
    b = DataLoader(gpu, 4, shuffle=True, seed=1, rate=20, windows=windows)
    for x, y in paired(a, b):
        for k in x:
            assert torch.equal(x[k], y[k].cpu()), k
