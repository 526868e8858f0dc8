"""The dataset doctor (robocache.doctor, ``python -m robocache doctor``): its findings on the real
logs and datasets in ../shared/data, and on copies and generated bags with defects planted in them.
Counts and rates it reports are checked against the sources read here without robocache."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rosbags")

import rosbag_forge as forge  # noqa: E402
from robocache import doctor  # noqa: E402
from robocache.__main__ import main as cli  # noqa: E402


def codes(report, level=None):
    return [(f.where, f.code) for f in report.findings if level is None or f.level == level]


def by_name(report):
    return {s.name: s for s in report.streams}


@pytest.fixture(scope="module")
def px4_report(px4_dir):
    return doctor.diagnose(px4_dir)


# ----------------------------------------------------------------------------
# real logs


def test_px4_flight(px4_report, px4_dir):
    from rosbags.highlevel import AnyReader

    r = px4_report
    counts, times = {}, {}
    with AnyReader([px4_dir]) as raw:
        for c, ts, data in raw.messages():
            counts[c.topic] = counts.get(c.topic, 0) + 1
            times.setdefault(c.topic, []).append(ts)
        infs = sum(int(np.isinf(np.float32(v)).sum()) for c, _, d in raw.messages()
                   if c.topic == "/fmu/out/vehicle_local_position"
                   for k, v in vars(raw.deserialize(d, c.msgtype)).items()
                   if isinstance(v, float) or (isinstance(v, np.ndarray) and v.dtype.kind == "f"))
    s = by_name(r)
    assert r.ok and r.exit_code() == 0 and r.episodes == 1
    for topic in ("/md/state", "/fmu/out/sensor_combined", "/fmu/out/battery_status", "/rosout"):
        assert s[topic].count == counts[topic]
        d = np.diff(np.array(times[topic], np.int64)) / 1e9
        pos = d[d > 0]
        if topic == "/rosout":          # log lines come in bursts: the mean rate over the span, marked
            assert s[topic].bursty and s[topic].rate_hz == pytest.approx(len(pos) / pos.sum(), rel=1e-9)
        else:
            assert not s[topic].bursty
            assert s[topic].rate_hz == pytest.approx(1 / np.median(pos), rel=1e-9)
        assert s[topic].longest_gap_s == pytest.approx(d.max(), rel=1e-9)
        assert s[topic].clock == "log"
    # /parameter_events: 30 messages in bursts over ~5 s, not the 4,627 Hz of its median interval
    pe = s["/parameter_events"]
    assert pe.bursty and 1 < pe.rate_hz < 20 and "bursty (mean rate)" in r.table()
    assert s["/servo/out/state.position"].clock == "header" and 0 < s["/servo/out/state.position"].offset_ms < 1
    assert s["/tf:world->present_body_frame.rotation"].count == 267
    empty = [w for w, c in codes(r, "note") if c == "empty"]
    assert len(empty) == 8 and "/fmu/in/vehicle_command" in empty           # topics without messages
    assert s["/fmu/out/vehicle_local_position"].inf == infs > 0             # a real defect of this log
    assert ("/fmu/out/vehicle_local_position", "nan") in codes(r, "warning")
    assert not [c for w, c in codes(r, "warning") if w in ("/rosout", "/parameter_events")]   # bursty by nature
    text = r.table()
    assert "/md/state" in text and "0 errors" in text


def test_sim_arm_clock(sim_dir):
    r = doctor.diagnose(sim_dir, window=100.0)
    s = by_name(r)
    assert s["/imu/data.orientation"].count == 4712 and s["/joint_states.position"].count == 1866
    assert s["/imu/data.orientation"].rate_hz == pytest.approx(50, rel=0.02)
    assert s["/imu/data.orientation"].sim_time and ("/imu/data.orientation", "sim_time") in codes(r, "note")
    assert (str(r.source), "short_episode") in codes(r, "warning")          # 95 s < the 100 s window
    assert r.ok


# ----------------------------------------------------------------------------
# planted defects


def _defects(scene):
    """The scenario with a gap, stamps back in time, zero stamps, duplicates and NaN planted."""
    msgs = []
    imu = scene.of("/imu")
    for m in scene.msgs:
        if m.topic == "/imu":
            i = imu.index(m)
            if 80 <= i < 120:
                continue                                               # 0.2 s without IMU
            stamp = m.stamp - (7_000_000 if i % 50 == 27 else 0)      # 4 stamps before their predecessor
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, stamp, m.fields))
        elif m.topic == "/pose":
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, 0, m.fields))
        elif m.topic == "/cmd_vel":
            i = scene.of("/cmd_vel").index(m)
            stamp = scene.of("/cmd_vel")[i - 1].stamp if i in (3, 6) else m.stamp   # 2 duplicates
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, stamp, m.fields))
        elif m.topic == "/battery":
            i = scene.of("/battery").index(m)
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, None, dict(data=float("nan") if i in (2, 3, 4) else
                                                                        m.fields["data"])))
        elif m.topic in ("/flag", "/joint_states"):
            msgs.append(forge.Msg(m.topic, m.msgtype, m.log, m.stamp, dict(m.fields, data=True)
                                  if m.topic == "/flag" else m.fields))
    return forge.Scenario(msgs)


@pytest.mark.parametrize("fmt", ["ros1", "mcap"])
def test_planted_stream_defects(tmp_path, fmt):
    scene = _defects(forge.scenario(seed=3))
    bag = forge.write_bag(scene, tmp_path / "bad", fmt)
    r = doctor.diagnose(bag)
    s = by_name(r)
    imu = s["/imu.orientation"]
    assert imu.count == 160 and imu.non_monotonic == 4
    assert imu.gaps >= 1 and imu.longest_gap_s == pytest.approx(0.205, abs=0.003)
    assert ("/imu.orientation", "gap") in codes(r, "warning")
    assert ("/imu.angular_velocity", "non_monotonic") in codes(r, "warning")
    assert s["/pose.position"].zero_stamps == 30 and ("/pose.position", "zero_stamps") in codes(r, "warning")
    assert s["/pose.position"].clock == "log"
    assert s["/cmd_vel.linear"].duplicates == 2 and ("/cmd_vel.linear", "duplicate") in codes(r, "note")
    assert s["/battery"].nan == 3 and ("/battery", "nan") in codes(r, "warning")
    assert s["/flag"].constant == ["data"] and ("/flag", "constant") in codes(r, "note")
    assert r.ok                                     # all of these are warnings: the bag is readable
    assert doctor.main([str(bag), "--strict"], out=open(tmp_path / "out.txt", "w")) == 1


def test_unknown_types_mixed_clocks_and_count_mismatch(sim_dir, tmp_path):
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    scene = forge.scenario(seed=4)
    store = get_typestore(Stores.ROS2_HUMBLE)
    w = Writer(tmp_path / "odd", version=9, storage_plugin=StoragePlugin.MCAP)
    w.open()
    bad = w.add_connection("/weird", "acme_msgs/msg/Thing", msgdef="this is :: not a message definition",
                           rihs01="RIHS01_" + "0" * 64)
    w.write(bad, forge.T0, b"\x00\x01\x00\x00\x00\x00\x00\x00")
    odom = w.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=store)
    batt = w.add_connection("/battery", "std_msgs/msg/Float64", typestore=store)
    for m in scene.of("/odom"):     # header stamps on sim time, /battery on the log clock
        sim = forge.Msg(m.topic, m.msgtype, m.log, m.stamp - forge.T0 + 100 * 10**9, m.fields)
        w.write(odom, m.log, store.serialize_cdr(forge.build(store, False, sim), m.msgtype))
    for m in scene.of("/battery"):
        w.write(batt, m.log, store.serialize_cdr(forge.build(store, False, m), m.msgtype))
    w.close()
    r = doctor.diagnose(tmp_path / "odd")
    assert ("/weird", "unknown_type") in codes(r, "warning")
    assert "acme_msgs/msg/this" in " ".join(f.message for f in r.findings if f.where == "/weird")
    assert (str(tmp_path / "odd"), "mixed_clocks") in codes(r, "warning")
    # a metadata.yaml that promises more messages than the storage holds
    copy = tmp_path / "sim"
    shutil.copytree(sim_dir, copy)
    meta = (copy / "metadata.yaml").read_text()
    (copy / "metadata.yaml").write_text(meta.replace("message_count: 4712", "message_count: 5000"))
    r = doctor.diagnose(copy)
    assert ("/imu/data", "count_mismatch") in codes(r, "warning")
    assert "4712 messages read" in " ".join(f.message for f in r.findings if f.code == "count_mismatch")


def test_truncated_and_unreadable_files(sim_dir, tmp_path, capsys):
    (src,) = sim_dir.glob("*.mcap")
    data = src.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) // 2])
    r = doctor.diagnose(cut)
    (f,) = [f for f in r.findings if f.code == "truncated"]
    assert f.level == "error" and f"of {len(data) // 2:,}" in f.message
    s = by_name(r)
    assert 0 < s["/imu/data.orientation"].count < 4712        # what is readable is still measured
    assert not r.ok and r.exit_code() == 1
    assert cli(["doctor", str(cut)]) == 1
    assert "truncated" in capsys.readouterr().out

    bag = forge.write_bag(forge.scenario(seed=5), tmp_path / "r1", "ros1", skip=["/lidar"])
    raw = Path(bag).read_bytes()
    half = tmp_path / "half.bag"
    half.write_bytes(raw[: len(raw) // 2])
    r = doctor.diagnose([half, bag])                           # one bad bag does not hide the others
    assert (str(half), "unreadable") in codes(r, "error")
    assert by_name(r)["/imu.orientation"].count == 200 and r.episodes == 1


# ----------------------------------------------------------------------------
# other sources


def _copy_groot(DATA, tmp_path):
    src = DATA / "groot_picknplace"
    if not src.is_dir():
        pytest.skip(f"{src} is not present")
    dst = tmp_path / "groot"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_lerobot_real_sets(DATA):
    pytest.importorskip("pyarrow")
    groot = DATA / "groot_picknplace"
    cr5 = DATA / "cr5_flashdrive_av1"
    if not (groot.is_dir() and cr5.is_dir()):
        pytest.skip("LeRobot fixtures are not present")
    r = doctor.diagnose(groot)
    # info.json lists a second camera, observation.images.egoview, whose files the set does not ship: the
    # loader warns and skips it, so the doctor warns too (the set trains)
    (miss,) = [f for f in r.findings if f.code == "video_not_shipped"]
    assert miss.level == "warning" and "egoview" in miss.message and r.ok
    assert not [f for f in r.findings if f.code in ("frame_count", "off_grid", "missing_files")]
    s = by_name(r)
    assert s["observation.state"].count == 2096 and s["observation.state"].rate_hz == pytest.approx(20, rel=1e-4)
    # the camera that is shipped is a row of the table: frames and rate from the mp4 headers
    cam = s["observation.images.ego_view"]
    assert cam.kind == "image" and cam.count == 2096 and cam.episodes == 5 and cam.rate_hz == pytest.approx(20)
    assert "observation.images.ego_view" in r.table()
    r = doctor.diagnose(cr5)
    (miss,) = [f for f in r.findings if f.code == "missing_files" and "data parquet" in f.message]
    assert "38 of 52 episodes" in miss.message and "14-51" in miss.message
    assert by_name(r)["action"].count == 3391 and r.episodes == 14


def test_lerobot_planted_defects(DATA, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    root = _copy_groot(DATA, tmp_path)
    data = root / "data" / "chunk-000" / "episode_000001.parquet"
    t = pq.read_table(data)
    ts = t.column("timestamp").to_numpy().copy()
    ts[100:] += 0.013                                        # a frame dropped and re-stamped: off the grid
    t = t.set_column(t.column_names.index("timestamp"), "timestamp", pa.array(ts))
    pq.write_table(t, data)
    (root / "videos" / "chunk-000" / "observation.images.ego_view" / "episode_000003.mp4").unlink()
    rows = [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]
    rows[2]["length"] += 5                                   # meta disagrees with parquet and video
    (root / "meta" / "episodes.jsonl").write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    short = root / "data" / "chunk-000" / "episode_000004.parquet"
    pq.write_table(pq.read_table(short).slice(0, 318), short)   # parquet rows lost: 318 of 328 frames
    r = doctor.diagnose(root)
    found = {(Path(f.where).name, f.code) for f in r.findings if f.level == "error"}
    assert ("episode_000001.parquet", "off_grid") in found
    assert ("episode_000002.parquet", "frame_count") in found
    assert any(c == "missing_files" and "episodes 3" in f.message for (w, c), f in
               zip(codes(r), r.findings) if "ego_view" in f.message)
    assert ("episode_000004.parquet", "frame_count") in found and ("episode_000004.mp4", "frame_count") in found
    assert "328 video frames, 318 parquet rows" in " ".join(f.message for f in r.findings)
    assert r.exit_code() == 1


def test_zarr_and_robomimic(DATA, tmp_path):
    pusht = DATA / "pusht_cchi_v7_replay.zarr"
    if pusht.is_dir():
        pytest.importorskip("zarr")
        r = doctor.diagnose(pusht)
        s = by_name(r)
        assert r.episodes == 206 and s["state"].count == 25650 and s["state"].rate_hz == pytest.approx(10)
        assert "img" not in s and ("img" in " ".join(f.message for f in r.findings if f.code == "not_checked"))
        assert r.ok
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "demo.hdf5"
    with h5py.File(path, "w") as f:
        for d, n in (("demo_0", 30), ("demo_1", 4)):
            g = f.create_group(f"data/{d}")
            obs = np.random.default_rng(0).normal(size=(n, 3))
            obs[5 % n, 1] = np.inf
            g.create_dataset("obs/eef_pos", data=obs)
            g.create_dataset("actions", data=np.zeros((n, 2)))
            g.create_dataset("rewards", data=np.zeros(n))
            g.create_dataset("dones", data=np.zeros(n, np.int64))
    r = doctor.diagnose(path, window=0.5)
    s = by_name(r)
    assert s["obs/eef_pos"].inf == 2 and s["actions"].constant == [0, 1]
    assert ("episodes are shorter" in " ".join(f.message for f in r.findings if f.code == "short_episode"))


def test_a_loaded_dataset_and_the_cli_json(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    import robocache

    bag = forge.write_bag(forge.scenario(seed=6), tmp_path / "b", "bare-mcap")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_rosbag(bag, device="cpu")
    r = doctor.diagnose(ds)
    s = by_name(r)
    assert s["/imu.orientation"].count == 200 and s["/imu.orientation"].rate_hz == pytest.approx(200, rel=1e-6)
    assert "<table>" in r._repr_html_() and torch is not None
    assert cli(["doctor", str(bag), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    st = {x["name"]: x for x in out["streams"]}
    assert out["ok"] and st["/joint_states.position"]["count"] == 120 and st["/lidar"]["kind"] == "pointcloud"
    assert cli(["doctor", str(tmp_path / "nothing_here")]) == 2
    (tmp_path / "plain").mkdir()
    assert cli(["doctor", str(tmp_path / "plain")]) == 2
    assert "not a source" in capsys.readouterr().err


def test_doctor_options_on_a_lerobot_set(tmp_path):
    """--window, --gap, --gap-factor, --format and --json on a LeRobot set (the demo set: 15 fps, 4-8 s
    episodes): each option changes the report as its help says."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    import io

    from robocache.demo import write_lerobot
    root = write_lerobot(tmp_path / "set", 3)

    def run(*args):
        out = io.StringIO()
        return doctor.main([str(root), *args], out=out), out.getvalue()

    code, text = run()
    assert code == 0 and "0 errors, 0 warnings" in text and "gaps longer" not in text
    code, text = run("--window", "100")
    assert code == 0 and "3 episodes are shorter than the 100 s window: [0, 1, 2]" in text
    assert run("--window", "100", "--strict")[0] == 1                       # a warning fails only with --strict
    interval = 1 / 15
    code, text = run("--gap", "0.01")
    assert "gaps longer than 0.01 s" in text and f"median interval {interval:.4f} s" in text
    code, text = run("--gap-factor", "0.5")                                  # half the median: every step a gap
    assert f"gaps longer than {0.5 * interval:.4f} s" in text
    assert "gaps longer" not in run("--gap-factor", "1.5")[1]
    code, text = run("--format", "zarr")                                     # the wrong reader: an error
    assert code == 1 and "cannot read zarr metadata" in text
    code, text = run("--json")
    report = json.loads(text)
    assert code == 0 and report["format"] == "lerobot" and report["episodes"] == 3 and report["ok"] is True
    assert report["findings"] == [] and "observation.state" in {s["name"] for s in report["streams"]}
