"""Bags written for the rosbag reader and doctor tests, with the values that went into them.

``scenario()`` draws a few seconds of a robot's topics, one message type each (JointState from
two publishers with different joints, Imu, Odometry, PoseStamped, TwistStamped, /tf and
/tf_static, Image in several encodings, CompressedImage jpeg/png, PointCloud2, std_msgs numbers
and String, a custom type), as plain Python/NumPy values: the ground truth the tests compare
against. ``write_bag()`` serializes it with rosbags' own writers as a ROS 1 .bag, a ROS 2 bag
(SQLite3 or MCAP storage) or a bare .mcap file.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

T0 = 1_700_000_000 * 10**9          # scenario start, epoch ns
LATENCY = 2_000_000                  # log (receive) time - header stamp, ns

LOAD_CELL = """std_msgs/Header header
geometry_msgs/Vector3 force
float64 temperature
uint64 device_time
int32[3] raw
string label
"""
LOAD_CELL_TYPE = "my_msgs/msg/LoadCell"


@dataclass
class Msg:
    topic: str
    msgtype: str
    log: int                     # ns
    stamp: int | None            # header stamp, ns (None: no header)
    fields: dict                 # what the message holds, as plain values


@dataclass
class Scenario:
    msgs: list[Msg] = field(default_factory=list)

    def of(self, topic) -> list[Msg]:
        return [m for m in self.msgs if m.topic == topic]


def _quat(rng, n):
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q


def _smooth_image(h, w, rng):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return np.clip(base + rng.normal(0, 2, base.shape), 0, 255).astype(np.uint8)


def _png(img):
    from PIL import Image
    b = io.BytesIO()
    Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(b, format="PNG")
    return b.getvalue()


def _jpeg(img):
    from PIL import Image
    b = io.BytesIO()
    Image.fromarray(img).save(b, format="JPEG", quality=95)
    return b.getvalue()


def scenario(seed: int = 0, duration: float = 1.0) -> Scenario:
    rng = np.random.default_rng(seed)
    sc = Scenario()

    def every(rate, jitter=0.0):
        n = int(duration * rate)
        t = T0 + np.round(np.arange(n) / rate * 1e9).astype(np.int64) + 1_000_000
        if jitter:
            t += rng.integers(0, int(jitter * 1e9 / rate), n)
        return t

    def add(topic, msgtype, stamps, make, header=True):
        for i, s in enumerate(stamps):
            sc.msgs.append(Msg(topic, msgtype, int(s) + (LATENCY if header else 0), int(s) if header else None,
                               make(i)))

    # JointState: the arm at 100 Hz (3 joints, all quantities), the gripper at 20 Hz (position only)
    arm = rng.normal(size=(int(duration * 100), 3, 3))
    add("/joint_states", "sensor_msgs/msg/JointState", every(100),
        lambda i: dict(name=["j1", "j2", "j3"], position=arm[i, 0], velocity=arm[i, 1], effort=arm[i, 2]))
    grip = rng.uniform(0, 0.08, int(duration * 20))
    add("/joint_states", "sensor_msgs/msg/JointState", every(20) + 333_000,
        lambda i: dict(name=["gripper"], position=np.array([grip[i]]), velocity=np.zeros(0), effort=np.zeros(0)))

    n = int(duration * 200)
    q, w, a = _quat(rng, n), rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    add("/imu", "sensor_msgs/msg/Imu", every(200), lambda i: dict(orientation=q[i], angular_velocity=w[i],
                                                                  linear_acceleration=a[i]))
    n = int(duration * 50)
    p, oq, lin, ang = rng.normal(size=(n, 3)), _quat(rng, n), rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    add("/odom", "nav_msgs/msg/Odometry", every(50),
        lambda i: dict(position=p[i], orientation=oq[i], linear=lin[i], angular=ang[i]))
    n = int(duration * 30)
    pp, pq = rng.normal(size=(n, 3)), _quat(rng, n)
    add("/pose", "geometry_msgs/msg/PoseStamped", every(30), lambda i: dict(position=pp[i], orientation=pq[i]))
    n = int(duration * 10)
    tl, ta = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    add("/cmd_vel", "geometry_msgs/msg/TwistStamped", every(10), lambda i: dict(linear=tl[i], angular=ta[i]))

    n = int(duration * 50)
    tf = rng.normal(size=(n, 2, 3)), np.stack([_quat(rng, n), _quat(rng, n)], 1)
    add("/tf", "tf2_msgs/msg/TFMessage", every(50),
        lambda i: dict(transforms=[("odom", "base_link", tf[0][i, 0], tf[1][i, 0]),
                                   ("base_link", "arm", tf[0][i, 1], tf[1][i, 1])]))
    add("/tf_static", "tf2_msgs/msg/TFMessage", every(1)[:1],
        lambda i: dict(transforms=[("world", "odom", np.array([1.0, 2.0, 3.0]), np.array([0, 0, 0, 1.0])),
                                   ("base_link", "camera", np.array([0.1, 0, 0.5]),
                                    np.array([0, 0.7071068, 0, 0.7071068]))]))

    # images, 10 Hz, 8x12: RGB, BGR, mono, 16-bit depth (big endian) and float depth, padded rows
    n = int(duration * 10)
    rgb = [_smooth_image(8, 12, rng) for _ in range(n)]
    add("/cam/rgb", "sensor_msgs/msg/Image", every(10), lambda i: dict(encoding="rgb8", img=rgb[i], pad=0))
    add("/cam/bgr", "sensor_msgs/msg/Image", every(10), lambda i: dict(encoding="bgr8", img=rgb[i], pad=4))
    add("/cam/mono", "sensor_msgs/msg/Image", every(10), lambda i: dict(encoding="mono8", img=rgb[i][..., :1], pad=0))
    depth = [rng.integers(0, 65535, (8, 12, 1)).astype(np.uint16) for _ in range(n)]
    add("/cam/depth16", "sensor_msgs/msg/Image", every(10),
        lambda i: dict(encoding="16UC1", img=depth[i], pad=0, bigendian=True))
    fdepth = [rng.uniform(0.2, 5, (8, 12, 1)).astype(np.float32) for _ in range(n)]
    add("/cam/depth32", "sensor_msgs/msg/Image", every(10), lambda i: dict(encoding="32FC1", img=fdepth[i], pad=0))
    add("/cam/jpeg", "sensor_msgs/msg/CompressedImage", every(10), lambda i: dict(format="jpeg", img=rgb[i]))
    add("/cam/png", "sensor_msgs/msg/CompressedImage", every(10),
        lambda i: dict(format="rgb8; png compressed bgr8", img=rgb[i]))

    # lidar: x, y, z, intensity float32 + ring uint16; a few invalid (NaN) points
    clouds = []
    for i in range(n):
        P = int(rng.integers(50, 80))
        xyz = rng.normal(0, 5, (P, 3)).astype(np.float32)
        xyz[rng.random(P) < 0.1, 0] = np.nan
        clouds.append((xyz, rng.uniform(0, 1, P).astype(np.float32), rng.integers(0, 16, P).astype(np.uint16)))
    add("/lidar", "sensor_msgs/msg/PointCloud2", every(10), lambda i: dict(cloud=clouds[i]))

    n = int(duration * 25)
    vals = rng.normal(size=n)
    add("/battery", "std_msgs/msg/Float64", every(25), lambda i: dict(data=float(vals[i])), header=False)
    ints = rng.integers(-100, 100, n)
    add("/count", "std_msgs/msg/Int32", every(25), lambda i: dict(data=int(ints[i])), header=False)
    add("/flag", "std_msgs/msg/Bool", every(25), lambda i: dict(data=bool(ints[i] > 0)), header=False)
    add("/status", "std_msgs/msg/String", every(5), lambda i: dict(data=f"state {i}"), header=False)

    n = int(duration * 40)
    force, temp = rng.normal(size=(n, 3)), rng.normal(20, 1, n)
    raw = rng.integers(-1000, 1000, (n, 3))
    add("/load_cell", LOAD_CELL_TYPE, every(40), lambda i: dict(force=force[i], temperature=float(temp[i]),
                                                                 device_time=10**15 + i * 25_000,
                                                                 raw=raw[i], label=f"cell{i % 3}"))
    sc.msgs.sort(key=lambda m: m.log)
    return sc


# ----------------------------------------------------------------------------
# rosbags message objects


def typestore(ros1: bool):
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    store.register(get_types_from_msg(LOAD_CELL, LOAD_CELL_TYPE))
    if "tf2_msgs/msg/TFMessage" not in store.fielddefs:  # rosbags' noetic store lacks it
        store.register(get_types_from_msg("geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage"))
    return store


def build(store, ros1: bool, m: Msg):
    T = store.types
    f = m.fields

    def time(ns):
        return T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)

    def header(frame="", ns=None):
        ns = m.stamp if ns is None else ns
        kw = dict(seq=0) if ros1 else {}
        return T["std_msgs/msg/Header"](stamp=time(ns), frame_id=frame, **kw)

    V = lambda v: T["geometry_msgs/msg/Vector3"](x=float(v[0]), y=float(v[1]), z=float(v[2]))
    P = lambda v: T["geometry_msgs/msg/Point"](x=float(v[0]), y=float(v[1]), z=float(v[2]))
    Q = lambda q: T["geometry_msgs/msg/Quaternion"](x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3]))
    Pose = lambda p, q: T["geometry_msgs/msg/Pose"](position=P(p), orientation=Q(q))
    Twist = lambda a, b: T["geometry_msgs/msg/Twist"](linear=V(a), angular=V(b))
    t = m.msgtype
    if t == "sensor_msgs/msg/JointState":
        return T[t](header=header(), name=list(f["name"]), position=np.asarray(f["position"], np.float64),
                    velocity=np.asarray(f["velocity"], np.float64), effort=np.asarray(f["effort"], np.float64))
    if t == "sensor_msgs/msg/Imu":
        return T[t](header=header("imu"), orientation=Q(f["orientation"]), orientation_covariance=np.zeros(9),
                    angular_velocity=V(f["angular_velocity"]), angular_velocity_covariance=np.zeros(9),
                    linear_acceleration=V(f["linear_acceleration"]), linear_acceleration_covariance=np.zeros(9))
    if t == "nav_msgs/msg/Odometry":
        return T[t](header=header("odom"), child_frame_id="base_link",
                    pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=Pose(f["position"], f["orientation"]),
                                                                   covariance=np.zeros(36)),
                    twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=Twist(f["linear"], f["angular"]),
                                                                     covariance=np.zeros(36)))
    if t == "geometry_msgs/msg/PoseStamped":
        return T[t](header=header("map"), pose=Pose(f["position"], f["orientation"]))
    if t == "geometry_msgs/msg/TwistStamped":
        return T[t](header=header("base_link"), twist=Twist(f["linear"], f["angular"]))
    if t == "tf2_msgs/msg/TFMessage":
        trs = [T["geometry_msgs/msg/TransformStamped"](
            header=header(parent), child_frame_id=child,
            transform=T["geometry_msgs/msg/Transform"](translation=V(tr), rotation=Q(rot)))
            for parent, child, tr, rot in f["transforms"]]
        return T[t](transforms=trs)
    if t == "sensor_msgs/msg/Image":
        img = f["img"]
        h, w, c = img.shape
        enc = f["encoding"]
        src = img[..., ::-1] if enc == "bgr8" else img
        dt = src.dtype.newbyteorder(">" if f.get("bigendian") else "<")
        rows = np.ascontiguousarray(src, dtype=dt).reshape(h, -1).view(np.uint8)
        rows = np.concatenate([rows, np.full((h, f["pad"]), 0xAB, np.uint8)], 1)
        return T[t](header=header("cam"), height=h, width=w, encoding=enc, is_bigendian=int(bool(f.get("bigendian"))),
                    step=rows.shape[1], data=rows.reshape(-1))
    if t == "sensor_msgs/msg/CompressedImage":
        data = _jpeg(f["img"]) if f["format"] == "jpeg" else _png(f["img"])
        return T[t](header=header("cam"), format=f["format"], data=np.frombuffer(data, np.uint8))
    if t == "sensor_msgs/msg/PointCloud2":
        xyz, inten, ring = f["cloud"]
        P_ = len(xyz)
        rec = np.zeros(P_, dtype=np.dtype({"names": ["x", "y", "z", "intensity", "ring"],
                                           "formats": ["<f4", "<f4", "<f4", "<f4", "<u2"],
                                           "offsets": [0, 4, 8, 12, 16], "itemsize": 20}))
        rec["x"], rec["y"], rec["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        rec["intensity"], rec["ring"] = inten, ring
        PF = T["sensor_msgs/msg/PointField"]
        fields = [PF(name=nm, offset=o, datatype=dt, count=1)
                  for nm, o, dt in (("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7), ("ring", 16, 4))]
        return T[t](header=header("lidar"), height=1, width=P_, fields=fields, is_bigendian=False, point_step=20,
                    row_step=20 * P_, data=rec.view(np.uint8).reshape(-1).copy(), is_dense=False)
    if t == LOAD_CELL_TYPE:
        return T[t](header=header("cell"), force=V(f["force"]), temperature=f["temperature"],
                    device_time=f["device_time"], raw=np.asarray(f["raw"], np.int32), label=f["label"])
    if t.startswith("std_msgs/msg/"):
        return T[t](data=f["data"])
    raise AssertionError(t)


def write_bag(sc: Scenario, path: Path, fmt: str, *, skip=()) -> Path:
    """Write the scenario as fmt ("ros1", "sqlite3", "mcap" or "bare-mcap"); returns the bag's path
    (the .bag / .mcap file, or the ROS 2 bag folder)."""
    ros1 = fmt == "ros1"
    store = typestore(ros1)
    path = Path(path)
    if ros1:
        from rosbags.rosbag1 import Writer
        bag = path.with_suffix(".bag")
        w = Writer(bag)
        ser = store.serialize_ros1
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer
        bag = path
        w = Writer(bag, version=9, storage_plugin=StoragePlugin.SQLITE3 if fmt == "sqlite3" else StoragePlugin.MCAP)
        ser = store.serialize_cdr
    w.open()
    conns = {}
    for m in sc.msgs:
        if m.topic in skip:
            continue
        if m.topic not in conns:
            conns[m.topic] = w.add_connection(m.topic, m.msgtype, typestore=store)
        w.write(conns[m.topic], m.log, ser(build(store, ros1, m), m.msgtype))
    w.close()
    if fmt == "bare-mcap":
        (mcap,) = bag.glob("*.mcap")
        out = path.parent / (path.name + ".mcap")
        shutil.copyfile(mcap, out)
        shutil.rmtree(bag)
        return out
    return bag
