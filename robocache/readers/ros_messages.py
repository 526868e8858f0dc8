"""ROS messages to stream rows, by message type: the per-type half of the rosbag reader.

A ``Converter`` is made per topic from its message type and is fed the topic's deserialized
messages (``rosbags`` message objects) one by one; ``parts()`` then returns its streams as
``Part``s: values, the header stamp and the log (receive) time of every row, kind, resample mode
and feature names. Converters never choose a clock, sort or split: rosbag.py does that once for
every type. Known types (JointState, Imu, Odometry, Pose/Twist/Wrench/Transform stamped, TF,
Image, CompressedImage, PointCloud2, std_msgs numbers and String) have dedicated converters (images
decoded by ros_images.py); any other message is flattened to its numeric leaf fields (``force.x``, ``q[0]``), found from the
type definitions in the bag, so custom types work without their Python packages.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._common import ReaderError
from .ros_images import decode_compressed, decode_image, resize_image

HEADER = "std_msgs/msg/Header"
TIME = "builtin_interfaces/msg/Time"
DURATION = "builtin_interfaces/msg/Duration"

# node types of rosbags' field definitions (rosbags.typesys.base.Nodetype)
BASE, NAME, ARRAY, SEQUENCE = 1, 2, 3, 4

NUMERIC = {"bool": np.bool_, "byte": np.uint8, "char": np.uint8, "int8": np.int8, "uint8": np.uint8,
           "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
           "int64": np.int64, "uint64": np.uint64, "float32": np.float32, "float64": np.float64,
           "octet": np.uint8}
WIDE = ("int64", "uint64")    # integers float32 cannot hold: device clocks, counters, ids

#: topics of these types are logging/bookkeeping, left out unless named in ``topics``
BOOKKEEPING_TYPES = ("rcl_interfaces/msg/Log", "rcl_interfaces/msg/ParameterEvent", "rosgraph_msgs/msg/Log",
                     "rosgraph_msgs/msg/Clock", "rosbag2_interfaces/msg/WriteSplitEvent",
                     "diagnostic_msgs/msg/DiagnosticArray", "bond/msg/Status")


def stamp_ns(t) -> int:
    """builtin_interfaces/Time (sec, nanosec) as int64 nanoseconds."""
    return t.sec * 1_000_000_000 + t.nanosec


@dataclass
class Part:
    """One stream of a topic, rows in message (log-time) order.

    ``values``: ``[n, ...]`` array, a list of ``[P_i, C]`` point arrays (point clouds), a list of
    strings (text), or None (``decode=False``: stamps only). ``header``: int64 ns header stamps
    (None when the type has no header), ``log``: int64 ns log times. ``present``: for streams
    whose columns may be missing from a message (JointState), a bool ``[n, D]`` mask of the
    entries the message carried (the others are NaN until the reader fills them).
    """

    suffix: str
    values: Any
    header: np.ndarray | None
    log: np.ndarray
    kind: str
    mode: str | None = None
    feature_names: list[str] | None = None
    present: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    cast: Any = None     # with ``present``: values stay float64 until filled, then take this dtype


@dataclass
class Options:
    """What a converter needs from read_rosbag's arguments."""

    dtype: Any = np.float32             # float streams; None keeps float64
    fields: list[str] | None = None     # selected parts (known types) or leaf prefixes (flattened)
    point_fields: tuple = ("x", "y", "z")
    drop_invalid_points: bool = True
    image_size: tuple[int, int] | None = None
    load_images: bool = True            # False: image topics are left out
    decode: bool = True                 # False: stamps only (the doctor), no image/cloud decoding


def _float(opts: Options, a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=opts.dtype or np.float64)


class Converter:
    """Base: subclasses implement add(msg, log_ns) and parts()."""

    def __init__(self, topic: str, msgtype: str, store, opts: Options, source: str):
        self.topic, self.msgtype, self.store, self.opts, self.source = topic, msgtype, store, opts, source
        self.n = 0

    def where(self) -> str:
        return f"{self.source}: topic {self.topic} ({self.msgtype})"

    def add(self, msg, log_ns: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def parts(self) -> list[Part]:  # pragma: no cover - interface
        raise NotImplementedError

    @staticmethod
    def has_header(store, msgtype: str) -> bool:
        fields = store.fielddefs.get(msgtype, ((), ()))[1]
        return any(n == "header" and d[0] == NAME and d[1] == HEADER for n, d in fields)


# ----------------------------------------------------------------------------
# fixed paths: Imu, Odometry, Pose*, Twist*, Wrench*, Transform*, vectors, std_msgs numbers


# (suffix, [attribute paths], mode, feature names)
XYZ, XYZW = ["x", "y", "z"], ["x", "y", "z", "w"]


def _vec(suffix, prefix, names=XYZ, mode=None):
    return (suffix, [f"{prefix}.{n}" if prefix else n for n in names], mode, list(names))


PATHS = {
    "sensor_msgs/msg/Imu": [_vec("orientation", "orientation", XYZW, "slerp"),
                            _vec("angular_velocity", "angular_velocity"),
                            _vec("linear_acceleration", "linear_acceleration")],
    "nav_msgs/msg/Odometry": [_vec("position", "pose.pose.position"),
                              _vec("orientation", "pose.pose.orientation", XYZW, "slerp"),
                              _vec("linear", "twist.twist.linear"), _vec("angular", "twist.twist.angular")],
    "geometry_msgs/msg/PoseStamped": [_vec("position", "pose.position"),
                                      _vec("orientation", "pose.orientation", XYZW, "slerp")],
    "geometry_msgs/msg/PoseWithCovarianceStamped": [_vec("position", "pose.pose.position"),
                                                    _vec("orientation", "pose.pose.orientation", XYZW, "slerp")],
    "geometry_msgs/msg/Pose": [_vec("position", "position"), _vec("orientation", "orientation", XYZW, "slerp")],
    "geometry_msgs/msg/TwistStamped": [_vec("linear", "twist.linear"), _vec("angular", "twist.angular")],
    "geometry_msgs/msg/TwistWithCovarianceStamped": [_vec("linear", "twist.twist.linear"),
                                                     _vec("angular", "twist.twist.angular")],
    "geometry_msgs/msg/Twist": [_vec("linear", "linear"), _vec("angular", "angular")],
    "geometry_msgs/msg/AccelStamped": [_vec("linear", "accel.linear"), _vec("angular", "accel.angular")],
    "geometry_msgs/msg/WrenchStamped": [_vec("force", "wrench.force"), _vec("torque", "wrench.torque")],
    "geometry_msgs/msg/Wrench": [_vec("force", "force"), _vec("torque", "torque")],
    "geometry_msgs/msg/TransformStamped": [_vec("translation", "transform.translation"),
                                           _vec("rotation", "transform.rotation", XYZW, "slerp")],
    "geometry_msgs/msg/Vector3Stamped": [_vec("", "vector")],
    "geometry_msgs/msg/Vector3": [_vec("", "")],
    "geometry_msgs/msg/PointStamped": [_vec("", "point")],
    "geometry_msgs/msg/Point": [_vec("", "")],
    "geometry_msgs/msg/QuaternionStamped": [_vec("", "quaternion", XYZW, "slerp")],
    "geometry_msgs/msg/Quaternion": [_vec("", "", XYZW, "slerp")],
}
STD_NUMBERS = {f"std_msgs/msg/{t}": d for t, d in (
    ("Float32", np.float32), ("Float64", np.float64), ("Int8", np.int8), ("Int16", np.int16), ("Int32", np.int32),
    ("Int64", np.int64), ("UInt8", np.uint8), ("UInt16", np.uint16), ("UInt32", np.uint32), ("UInt64", np.uint64),
    ("Byte", np.uint8), ("Char", np.uint8), ("Bool", np.bool_))}


def _select(conv: Converter, available: list[str]) -> list[str]:
    """The parts of a known type that ``fields`` asks for (all by default)."""
    want = conv.opts.fields
    if want is None:
        return available
    unknown = [f for f in want if f not in available]
    if unknown:
        raise ValueError(f"fields[{conv.topic!r}]: {unknown} are not parts of {conv.msgtype} "
                         f"(it has {[a or '<the topic itself>' for a in available]})")
    return [a for a in available if a in want]


class PathConverter(Converter):
    """Types read at fixed attribute paths: every part a float ``[n, k]`` stream."""

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        spec = PATHS[msgtype]
        keep = _select(self, [s[0] for s in spec])
        self.spec = [s for s in spec if s[0] in keep]
        paths = [p for s in self.spec for p in s[1]]
        one = operator.attrgetter(paths[0])
        self.get = operator.attrgetter(*paths) if len(paths) > 1 else (lambda m: (one(m),))
        self.rows: list = []
        self.headed = self.has_header(store, msgtype)
        self.header: list[int] = []
        self.log: list[int] = []
        self.no_orientation = 0  # Imu: orientation_covariance[0] == -1 means "no orientation"

    def add(self, msg, log_ns):
        self.rows.append(self.get(msg))
        self.log.append(log_ns)
        if self.headed:
            self.header.append(stamp_ns(msg.header.stamp))
        if self.msgtype == "sensor_msgs/msg/Imu" and msg.orientation_covariance[0] == -1:
            self.no_orientation += 1
        self.n += 1

    def parts(self):
        rows = np.asarray(self.rows, dtype=np.float64).reshape(self.n, -1)
        header = np.asarray(self.header, np.int64) if self.headed else None
        log = np.asarray(self.log, np.int64)
        out, col = [], 0
        for suffix, paths, mode, names in self.spec:
            k = len(paths)
            part = Part(suffix, _float(self.opts, rows[:, col:col + k]), header, log, "continuous", mode, names)
            col += k
            if suffix == "orientation" and self.n and self.no_orientation == self.n:
                continue  # the IMU reports no orientation (covariance[0] = -1 in every message)
            out.append(part)
        return out


class _DataConverter(Converter):
    """std_msgs types with one ``data`` field: its values and the log times, in arrival order."""

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        _select(self, [""])
        self.rows, self.log = [], []

    def add(self, msg, log_ns):
        self.rows.append(msg.data)
        self.log.append(log_ns)
        self.n += 1


class NumberConverter(_DataConverter):
    """std_msgs numbers and Bool: ``[n, 1]`` of the message's own dtype (floats: ``dtype``)."""

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        self.np_dtype = STD_NUMBERS[msgtype]

    def parts(self):
        v = np.asarray(self.rows, dtype=self.np_dtype).reshape(self.n, 1)
        floating = np.issubdtype(self.np_dtype, np.floating)
        if floating:
            v = _float(self.opts, v)
        return [Part("", v, None, np.asarray(self.log, np.int64), "continuous" if floating else "discrete",
                     None if floating else "previous", ["data"])]


class StringConverter(_DataConverter):
    """std_msgs/String: a text stream (values are the strings)."""

    def parts(self):
        return [Part("", np.asarray(self.rows, dtype=str) if self.rows else np.zeros(0, dtype=str), None,
                     np.asarray(self.log, np.int64), "text", "previous")]


# ----------------------------------------------------------------------------
# JointState: joints by name, some joints in some messages only


class JointStateConverter(Converter):
    """position / velocity / effort ``[n, J]`` over the union of joint names (first-seen order).

    A message that does not carry a joint (another publisher on the same topic, a gripper
    driver) leaves NaN there and ``present`` False; rosbag.py fills it from that joint's own
    samples. An empty velocity/effort array means "not reported" (ROS convention).
    """

    QUANTITIES = ("position", "velocity", "effort")

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        self.want = _select(self, list(self.QUANTITIES))
        self.names: dict[str, int] = {}
        self.rows: list = []   # (column indices, {quantity: array or None})
        self.header: list = []
        self.log: list = []

    def add(self, msg, log_ns):
        names = list(msg.name)
        cols = np.fromiter((self.names.setdefault(nm, len(self.names)) for nm in names), np.int64, len(names))
        if len(set(names)) != len(names):
            raise ReaderError(f"{self.where()}: message {self.n} names a joint twice: {names}")
        got = {}
        for q in self.want:
            a = np.asarray(getattr(msg, q), dtype=np.float64)
            if a.size == 0:
                got[q] = None
            elif a.shape != (len(names),):
                raise ReaderError(f"{self.where()}: message {self.n} has {len(names)} joint names but {a.size} "
                                  f"{q} values")
            else:
                got[q] = a
        self.rows.append((cols, got))
        self.header.append(stamp_ns(msg.header.stamp))
        self.log.append(log_ns)
        self.n += 1

    def parts(self):
        J = len(self.names)
        names = list(self.names)
        out = []
        for q in self.want:
            if not any(g[q] is not None for _, g in self.rows):
                continue
            v = np.full((self.n, J), np.nan)
            present = np.zeros((self.n, J), bool)
            for i, (cols, g) in enumerate(self.rows):
                if g[q] is not None:
                    v[i, cols] = g[q]
                    present[i, cols] = True
            seen = present.any(0)
            rows = present.any(1)   # messages that report this quantity for some joint
            notes = []
            if not seen.all():
                notes.append(f"{q}: joints {[n for n, s in zip(names, seen) if not s]} never report it; left out")
            if not rows.all():
                notes.append(f"{q}: {int((~rows).sum())} of {self.n} messages do not report it; left out")
            v, present = v[rows][:, seen], present[rows][:, seen]
            header = np.asarray(self.header, np.int64)[rows]
            log = np.asarray(self.log, np.int64)[rows]
            if not present.all():
                miss = [f"{n} ({int((~present[:, j]).sum())})" for j, n in enumerate(np.array(names)[seen])
                        if not present[:, j].all()]
                notes.append(f"{q}: joints missing from some messages (filled as joint_fill says): "
                             f"{', '.join(miss)}")
            full = present.all()
            out.append(Part(q, _float(self.opts, v) if full else v, header, log, "continuous", None,
                            [n for n, s in zip(names, seen) if s], present=None if full else present,
                            notes=notes, cast=None if full else (self.opts.dtype or np.float64)))
        return out


# ----------------------------------------------------------------------------
# TF: one stream per (parent, child) pair


class TFConverter(Converter):
    """tf2_msgs/TFMessage: ``<topic>:<parent>-><child>.translation`` ``[n, 3]`` and ``.rotation``
    ``[n, 4]`` (x, y, z, w; slerp), each transform stamped by its own header."""

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        self.want = _select(self, ["translation", "rotation"])
        self.pairs: dict[tuple[str, str], tuple[list, list, list]] = {}

    def add(self, msg, log_ns):
        for tr in msg.transforms:
            key = (tr.header.frame_id.lstrip("/"), tr.child_frame_id.lstrip("/"))
            rows, header, log = self.pairs.setdefault(key, ([], [], []))
            t, r = tr.transform.translation, tr.transform.rotation
            rows.append((t.x, t.y, t.z, r.x, r.y, r.z, r.w))
            header.append(stamp_ns(tr.header.stamp))
            log.append(log_ns)
        self.n += 1

    def parts(self):
        out = []
        for (parent, child), (rows, header, log) in self.pairs.items():
            v = np.asarray(rows, np.float64).reshape(-1, 7)
            h, lg = np.asarray(header, np.int64), np.asarray(log, np.int64)
            pair = f":{parent}->{child}"
            if "translation" in self.want:
                out.append(Part(pair + ".translation", _float(self.opts, v[:, :3]), h, lg, "continuous", None, XYZ))
            if "rotation" in self.want:
                out.append(Part(pair + ".rotation", _float(self.opts, v[:, 3:]), h, lg, "continuous", "slerp", XYZW))
        return out


# ----------------------------------------------------------------------------
# images


class ImageConverter(Converter):
    """Image / CompressedImage: decoded once, here, into one ``[n, H, W, C]`` array, uint8 (colour,
    mono) or float32 (depth: 16-bit values are exact in float32; frame storage takes these two).

    Raw images are copied into the stream's buffer as they arrive. Compressed ones are kept
    compressed until ``parts()``, which decodes them in threads (PIL releases the GIL) straight
    into the buffer."""

    def __init__(self, topic, msgtype, store, opts, source, count: int | None = None):
        super().__init__(topic, msgtype, store, opts, source)
        _select(self, [""])
        self.compressed = msgtype.endswith("CompressedImage")
        self.buf = None           # preallocated from the connection's message count when known
        self.count = count or 0
        self.frames: list = []    # raw: frames past the buffer; compressed: the messages' (format, bytes)
        self.header: list = []
        self.log: list = []
        self.encodings: set[str] = set()

    def _frame(self, img, where):
        if img.dtype not in (np.uint8, np.float32):
            img = img.astype(np.float32)   # 16-bit depth (mm) and 64FC1: float32, exact for 16-bit
        if self.opts.image_size is not None:
            img = resize_image(img, self.opts.image_size, where)
        return img

    def _check(self, ref, img, where):
        if ref.shape[-3:] != img.shape or ref.dtype != img.dtype:
            raise ReaderError(f"{where}: image is {img.dtype} {img.shape}, earlier ones {ref.dtype} "
                              f"{ref.shape[-3:]}; pass image_size=(H, W) to resize them to one size")

    def add(self, msg, log_ns):
        self.header.append(stamp_ns(msg.header.stamp))
        self.log.append(log_ns)
        self.encodings.add(msg.format if self.compressed else msg.encoding)
        if self.opts.decode:
            if self.compressed:
                self.frames.append((msg.format, bytes(msg.data)))
            else:
                where = f"{self.where()}, message {self.n}"
                img = self._frame(decode_image(msg, where), where)
                ref = self.buf if self.buf is not None else (self.frames[0] if self.frames else None)
                if ref is not None:
                    self._check(ref, img, where)
                if self.buf is None and self.count > 1:
                    self.buf = np.empty((self.count,) + img.shape, img.dtype)
                if self.buf is not None and self.n < len(self.buf):
                    self.buf[self.n] = img
                else:
                    self.frames.append(img)
        self.n += 1

    def _decode_all(self) -> np.ndarray:
        from concurrent.futures import ThreadPoolExecutor

        msgs = self.frames
        if not msgs:
            return np.zeros((0, 1, 1, 3), np.uint8)

        class _M:  # what decode_compressed reads of a message
            def __init__(self, fmt, data):
                self.format, self.data = fmt, data

        def one(i):
            where = f"{self.where()}, message {i}"
            return self._frame(decode_compressed(_M(*msgs[i]), where), where)

        first = one(0)
        out = np.empty((len(msgs),) + first.shape, first.dtype)
        out[0] = first

        def put(i):
            img = one(i)
            self._check(first[None], img, f"{self.where()}, message {i}")
            out[i] = img

        workers = min(8, os.cpu_count() or 1, max(1, len(msgs) - 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(put, range(1, len(msgs))))
        return out

    def parts(self):
        header, log = np.asarray(self.header, np.int64), np.asarray(self.log, np.int64)
        notes = [f"encoding {', '.join(sorted(self.encodings))}"] if self.encodings else []
        if not self.opts.decode:
            return [Part("", None, header, log, "image", None, notes=notes)]
        if self.compressed:
            v = self._decode_all()
            self.frames = []
        elif self.buf is not None:
            extra = np.stack(self.frames) if self.frames else None
            v = self.buf[:min(self.n, len(self.buf))]
            v = np.concatenate([v, extra]) if extra is not None else v
        elif self.frames:
            v = np.stack(self.frames)
        else:
            v = np.zeros((0, 1, 1, 3), np.uint8)
        return [Part("", v, header, log, "image", None, notes=notes)]


# ----------------------------------------------------------------------------
# point clouds


POINT_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


def cloud_points(msg, fields, where: str, drop_invalid: bool = True) -> np.ndarray:
    """sensor_msgs/PointCloud2 to ``[P, len(fields)]`` float32 (rows: points, organized clouds
    flattened row by row; points with a non-finite x, y or z dropped when ``drop_invalid``)."""
    have = {f.name: f for f in msg.fields}
    missing = [f for f in fields if f not in have]
    if missing:
        raise ReaderError(f"{where}: PointCloud2 has no field {missing} (it has {list(have)})")
    order = ">" if msg.is_bigendian else "<"
    names, formats, offsets = [], [], []
    for f in fields:
        pf = have[f]
        if pf.datatype not in POINT_TYPES:
            raise ReaderError(f"{where}: PointCloud2 field {f!r} has unknown datatype {pf.datatype}")
        names.append(f)
        fmt = order + POINT_TYPES[pf.datatype]
        formats.append((fmt, (pf.count,)) if pf.count > 1 else fmt)
        offsets.append(pf.offset)
    h, w, ps, rs = int(msg.height), int(msg.width), int(msg.point_step), int(msg.row_step)
    data = np.asarray(msg.data, dtype=np.uint8)
    if ps <= 0 or rs < w * ps or data.size < h * rs:
        raise ReaderError(f"{where}: PointCloud2 {w}x{h}, point_step {ps}, row_step {rs}, holds {data.size} bytes")
    try:
        dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": ps})
    except ValueError as e:
        raise ReaderError(f"{where}: PointCloud2 field layout does not fit point_step {ps}: {e}") from e
    raw = np.ascontiguousarray(data[:h * rs].reshape(h, rs)[:, :w * ps]).reshape(-1)
    pts = raw.view(dt)
    cols = []
    for f in names:
        c = pts[f].astype(np.float32)
        cols.append(c.reshape(len(pts), -1))
    out = np.concatenate(cols, axis=1) if cols else np.zeros((len(pts), 0), np.float32)
    if drop_invalid:
        xyz = [i for i, f in enumerate(names) if f in ("x", "y", "z")]
        if xyz:
            out = out[np.isfinite(out[:, xyz]).all(1)]
    return np.ascontiguousarray(out)


class CloudConverter(Converter):
    """PointCloud2: a point-cloud stream, one ``[P_i, C]`` float32 array per message."""

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        _select(self, [""])
        self.clouds, self.header, self.log = [], [], []
        self.fields = list(opts.point_fields)

    def add(self, msg, log_ns):
        self.header.append(stamp_ns(msg.header.stamp))
        self.log.append(log_ns)
        if self.opts.decode:
            self.clouds.append(cloud_points(msg, self.fields, f"{self.where()}, message {self.n}",
                                            self.opts.drop_invalid_points))
        self.n += 1

    def parts(self):
        values = self.clouds if self.opts.decode else None
        return [Part("", values, np.asarray(self.header, np.int64), np.asarray(self.log, np.int64), "pointcloud",
                     None, list(self.fields))]


# ----------------------------------------------------------------------------
# anything else: numeric leaves flattened to named columns


@dataclass
class Leaf:
    name: str                   # "force.x", "q", "contacts[1].depth"
    get: Callable               # message -> value
    base: str                   # primitive name, "time" or "duration"
    length: int | None          # None: scalar; k: fixed array; 0: variable-length sequence


def leaves(store, msgtype: str, *, prefix: str = "", get=None, top: bool = True, skipped=None) -> list[Leaf]:
    """Numeric leaves of a message type from its field definitions (rosbags ``fielddefs``).

    Strings and variable-length sequences of messages are not columns (listed in ``skipped``).
    A top-level ``header`` is the stream's clock, not data."""
    out: list[Leaf] = []
    skipped = skipped if skipped is not None else []
    fields = store.fielddefs[msgtype][1]
    for fname, desc in fields:
        name = f"{prefix}{fname}"
        g = operator.attrgetter(fname) if get is None else (lambda m, a=get, b=operator.attrgetter(fname): b(a(m)))
        node, arg = desc
        if top and fname == "header" and node == NAME and arg == HEADER:
            continue
        if node == BASE:
            base = arg[0]
            if base in NUMERIC:
                out.append(Leaf(name, g, base, None))
            else:
                skipped.append(name)
        elif node == NAME:
            if arg == TIME:
                out.append(Leaf(name, g, "time", None))
            elif arg == DURATION:
                out.append(Leaf(name, g, "duration", None))
            elif arg in store.fielddefs:
                out += leaves(store, arg, prefix=name + ".", get=g, top=False, skipped=skipped)
            else:
                skipped.append(name)
        elif node in (ARRAY, SEQUENCE):
            (sub_node, sub_arg), length = arg
            if sub_node == BASE and sub_arg[0] in NUMERIC:
                out.append(Leaf(name, g, sub_arg[0], length if node == ARRAY else 0))
            elif node == ARRAY and sub_node == NAME and sub_arg in store.fielddefs:
                for i in range(length):
                    gi = (lambda m, a=g, i=i: a(m)[i])
                    out += leaves(store, sub_arg, prefix=f"{name}[{i}].", get=gi, top=False, skipped=skipped)
            else:
                skipped.append(name)
    return out


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".") or name.startswith(prefix + "[")


class FlatConverter(Converter):
    """Any message: its numeric leaf fields as the named columns of one ``[n, D]`` stream.

    A topic with float fields is a float stream (``dtype``, linear): 64-bit integers (device
    clocks such as PX4's microsecond ``timestamp``, counters, ids) and Time fields are left out
    unless named in ``fields`` (the stream is then float64). A topic of integers/bools only is an
    int64 stream (``previous`` mode). Fixed arrays give one column per element (``q[0]``);
    variable-length arrays too when every message has the same length, else they are left out.
    """

    def __init__(self, topic, msgtype, store, opts, source):
        super().__init__(topic, msgtype, store, opts, source)
        self.skipped: list[str] = []
        all_leaves = leaves(store, msgtype, skipped=self.skipped)
        want = opts.fields
        if want is not None:
            unknown = [p for p in want if not any(_matches(lf.name, p) for lf in all_leaves)]
            if unknown:
                raise ValueError(f"fields[{topic!r}]: {unknown} match no numeric field of {msgtype} "
                                 f"(it has {[lf.name for lf in all_leaves]})")
            self.leaves = [lf for lf in all_leaves if any(_matches(lf.name, p) for p in want)]
        else:
            self.leaves = all_leaves
        self.explicit = want is not None
        self.cols: list[list] = [[] for _ in self.leaves]
        self.headed = self.has_header(store, msgtype)
        self.header, self.log = [], []

    def add(self, msg, log_ns):
        for lf, col in zip(self.leaves, self.cols):
            v = lf.get(msg)
            if lf.base == "time":
                v = stamp_ns(v)
            elif lf.base == "duration":
                v = v.sec + v.nanosec * 1e-9
            col.append(v)
        if self.headed:
            self.header.append(stamp_ns(msg.header.stamp))
        self.log.append(log_ns)
        self.n += 1

    def parts(self):
        notes = []
        if self.skipped:
            notes.append(f"not numeric, left out: {self.skipped}")
        blocks: list[tuple[list[str], np.ndarray, str]] = []
        for lf, col in zip(self.leaves, self.cols):
            if lf.length is None:
                dt = np.int64 if lf.base == "time" else (np.float64 if lf.base == "duration" else NUMERIC[lf.base])
                a = np.asarray(col, dtype=dt).reshape(self.n, 1)
                names = [lf.name]
            else:
                lens = {len(x) for x in col}
                if len(lens) > 1:
                    notes.append(f"{lf.name}: length varies between messages ({sorted(lens)[:5]}); left out")
                    continue
                k = lens.pop() if lens else (lf.length or 0)
                if k == 0:
                    continue
                a = np.asarray(np.stack([np.asarray(x) for x in col]) if col else np.zeros((0, k)),
                               dtype=NUMERIC[lf.base]).reshape(self.n, k)
                names = [f"{lf.name}[{i}]" for i in range(k)]
            blocks.append((names, a, lf.base))
        floating = any(np.issubdtype(a.dtype, np.floating) for _, a, b in blocks if b not in ("time",))
        if floating:
            wide = [b for b in blocks if b[2] in WIDE + ("time",)]
            if wide and not self.explicit:
                notes.append(f"64-bit integer / time fields left out of the float stream: "
                             f"{[n for names, _, _ in wide for n in names]} (name them in fields= to keep them)")
                blocks = [b for b in blocks if b[2] not in WIDE + ("time",)]
            dtype = np.float64 if (wide and self.explicit) or self.opts.dtype is None else self.opts.dtype
        else:
            dtype = np.int64
        names = [n for ns, _, _ in blocks for n in ns]
        v = (np.concatenate([a.astype(dtype) for _, a, _ in blocks], axis=1) if blocks
             else np.zeros((self.n, 0), dtype))
        if floating and self.n and v.shape[1]:
            dead = np.isnan(v).all(0)
            if dead.any() and not self.explicit:
                notes.append(f"NaN in every message, left out: {[n for n, d in zip(names, dead) if d]}")
                v = v[:, ~dead]
                names = [n for n, d in zip(names, dead) if not d]
        if not names:
            return []
        header = np.asarray(self.header, np.int64) if self.headed else None
        return [Part("", np.ascontiguousarray(v), header, np.asarray(self.log, np.int64),
                     "continuous" if floating else "discrete", None if floating else "previous", names, notes=notes)]


# ----------------------------------------------------------------------------


def converter_for(topic: str, msgtype: str, store, opts: Options, source: str, count: int | None = None) -> Converter:
    """The converter for a topic's message type (flattening for types without one)."""
    if msgtype == "sensor_msgs/msg/JointState":
        return JointStateConverter(topic, msgtype, store, opts, source)
    if msgtype == "tf2_msgs/msg/TFMessage":
        return TFConverter(topic, msgtype, store, opts, source)
    if msgtype in ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"):
        return ImageConverter(topic, msgtype, store, opts, source, count)
    if msgtype == "sensor_msgs/msg/PointCloud2":
        return CloudConverter(topic, msgtype, store, opts, source)
    if msgtype in STD_NUMBERS:
        return NumberConverter(topic, msgtype, store, opts, source)
    if msgtype == "std_msgs/msg/String":
        return StringConverter(topic, msgtype, store, opts, source)
    if msgtype in PATHS:
        return PathConverter(topic, msgtype, store, opts, source)
    return FlatConverter(topic, msgtype, store, opts, source)


def fill_missing(values: np.ndarray, present: np.ndarray, times: np.ndarray, how: str) -> np.ndarray:
    """Entries a message did not carry (``present`` False), per column from that column's own
    samples at ``times`` (sorted): ``interp`` linear in time, the first/last value held at the
    ends; ``previous`` the last value before (the first one before any); ``nan`` left NaN."""
    if how == "nan" or present.all():
        return values
    out = values.copy()
    # int64 ns differenced exactly before going to float (epoch ns have a 256 ns float64 ulp)
    t = (times - times[0]).astype(np.float64) if len(times) else times.astype(np.float64)
    for j in range(values.shape[1]):
        have = present[:, j]
        if have.all() or not have.any():
            continue
        idx = np.flatnonzero(have)
        miss = ~have
        if how == "interp":
            out[miss, j] = np.interp(t[miss], t[idx], values[idx, j].astype(np.float64)).astype(values.dtype)
        else:  # previous
            k = np.searchsorted(idx, np.flatnonzero(miss), side="right") - 1
            out[miss, j] = values[idx[np.maximum(k, 0)], j]
    return out


__all__ = ["BOOKKEEPING_TYPES", "Converter", "Options", "Part", "converter_for", "cloud_points", "fill_missing",
           "leaves", "stamp_ns"]
