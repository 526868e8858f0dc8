"""ROS 1 bags, ROS 2 bags (MCAP or SQLite3 storage) and bare .mcap/.db3 files to episodes of streams.

Parsing is done by ``rosbags`` (pure Python, no ROS install; ``pip install robocache[rosbag]``).
Message types are read from the definitions the bag embeds (custom types included); bags
without them (ROS 2 SQLite3 bags before Iron) fall back to a stock type store for their distro.

One bag is one episode; a folder or list holds many (every ``*.bag``, ``*.mcap``, ``*.db3`` and
ROS 2 bag folder found under it, in path order), and ``split_gap`` / ``split_topic`` cut a long
bag into several. Topics become streams by message type (ros_messages.py): a topic of a
one-stream type keeps the topic's name (``/md/state``), others add a part
(``/joint_states.position``, ``/imu/data.orientation``, ``/tf:world->base_link.rotation``).
Times are int64 nanoseconds: the header stamp when the type has one, else the log (receive)
time; ``clock="log"`` takes the log time everywhere. Clock trouble (unsorted or duplicate stamps,
zero stamps, a header clock far from the log clock, sim time) is reported in
``Episodes.extra["bags"][i]["streams"]`` and warned about, never a crash: rows are sorted by the
chosen time. Files are opened read-only. See docs/rosbag.md.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..user_warning import warn
from ._common import Episodes, ReaderError, progress, require
from .ros_messages import BOOKKEEPING_TYPES, Options, Part, converter_for, fill_missing

#: a header clock more than this far from the log clock is reported (ns)
CLOCK_OFFSET_NS = 1_000_000_000
#: header stamps before 2000-01-01 are not wall-clock time: simulation or time since boot (ns)
WALL_CLOCK_NS = 946_684_800 * 1_000_000_000
BAG_SUFFIXES = (".bag", ".mcap", ".db3")
CLOCKS = ("header", "log")
JOINT_FILLS = ("interp", "previous", "nan")
MODES = ("linear", "nearest", "previous", "next", "slerp")
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


@dataclass
class Bag:
    """One recording: a ROS 1 .bag, a ROS 2 bag folder, or a bare .mcap / .db3 file."""

    path: Path
    ros1: bool

    @property
    def format(self) -> str:
        if self.ros1:
            return "ros1"
        if self.path.is_dir():
            return "ros2"
        return "mcap" if self.path.suffix == ".mcap" else "sqlite3"


def _natural(p: Path):
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", str(p))]


def find_bags(path) -> list[Bag]:
    """The recordings at ``path``: a bag file, a ROS 2 bag folder (``metadata.yaml``), a folder
    of those (searched recursively, natural path order), or a list of any of these."""
    if isinstance(path, (list, tuple)):
        if not path:
            raise ValueError("path: an empty list of bags")
        out = []
        for p in path:
            out += find_bags(p)
        return out
    p = Path(os.fspath(path))
    if not p.exists():
        raise ReaderError(f"{p}: no such file or folder")
    if p.is_file():
        if p.suffix not in BAG_SUFFIXES:
            raise ReaderError(f"{p}: not a ROS bag (expected a .bag, .mcap or .db3 file, or a ROS 2 bag folder)")
        return [Bag(p, p.suffix == ".bag")]
    if (p / "metadata.yaml").is_file():
        return [Bag(p, False)]
    found: list = []
    bag_dirs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(p):
        d = Path(dirpath)
        if any(d == b or b in d.parents for b in bag_dirs):
            continue
        if "metadata.yaml" in filenames and d != p:
            bag_dirs.append(d)
            found.append(Bag(d, False))
            dirnames[:] = []
            continue
        for n in filenames:
            if Path(n).suffix in BAG_SUFFIXES:
                found.append(Bag(d / n, n.endswith(".bag")))
    if not found:
        raise ReaderError(f"{p}: no ROS bags in this folder (no metadata.yaml, *.bag, *.mcap or *.db3)")
    return sorted(found, key=lambda b: _natural(b.path))


# ----------------------------------------------------------------------------
# opening a bag and its types


def _rosbags():
    return require("rosbags", "rosbag", "read_rosbag")


def open_bag(bag: Bag):
    """An open rosbags reader for the bag; ReaderError naming the file when it cannot be read."""
    _rosbags()
    from rosbags.rosbag1 import Reader as Reader1
    from rosbags.rosbag2 import Reader as Reader2

    try:
        reader = Reader1(bag.path) if bag.ros1 else Reader2(bag.path)
        reader.open()
    except Exception as e:  # rosbags' ReaderError, struct/sqlite/yaml errors on damaged files
        msg = str(e) or type(e).__name__
        hint = ""
        if any(w in msg.lower() for w in ("indexed", "magic", "truncat", "footer", "summary")):
            hint = (" (truncated or unindexed: did the recording stop cleanly? `python -m robocache doctor` "
                    "shows what is left" + ("; recover=True reads the messages before the damage)"
                                            if bag.path.suffix == ".mcap" else ")"))
        raise ReaderError(f"{bag.path}: cannot open ROS bag: {msg}{hint}") from e
    return reader


STORES = {"noetic": "ROS1_NOETIC", "foxy": "ROS2_FOXY", "galactic": "ROS2_GALACTIC", "humble": "ROS2_HUMBLE",
          "iron": "ROS2_IRON", "jazzy": "ROS2_JAZZY", "kilted": "ROS2_KILTED"}


def _stock_store(name):
    from rosbags.typesys import Stores, get_typestore

    if not isinstance(name, str):
        return name  # a rosbags Typestore given by the caller
    key = STORES.get(name.lower(), name.upper())
    try:
        return get_typestore(Stores[key])
    except KeyError:
        raise ValueError(f"typestore: unknown {name!r}; one of {sorted(STORES)} or a rosbags Typestore") from None


def build_typestore(reader, bag: Bag, default) -> tuple[Any, dict[str, str]]:
    """Types from the bag's own definitions, then a stock store's for types it lacks.
    Returns the store and {msgtype: why it cannot be decoded} for types still unknown."""
    from rosbags.interfaces import MessageDefinitionFormat
    from rosbags.typesys import get_types_from_idl, get_types_from_msg, get_typestore, Stores

    store = get_typestore(Stores.EMPTY)
    bad: dict[str, str] = {}
    for c in reader.connections:
        if c.msgdef.format == MessageDefinitionFormat.NONE or not c.msgdef.data or c.msgtype in store.fielddefs:
            continue
        try:
            if c.msgdef.format == MessageDefinitionFormat.MSG:
                typs = get_types_from_msg(c.msgdef.data, c.msgtype)
            else:
                typs = {}
                sep = "=" * 80 + "\n"
                parts = c.msgdef.data.split(sep)[1:] if c.msgdef.data.startswith(sep + "IDL: ") else [c.msgdef.data]
                for p in parts:
                    typs.update(get_types_from_idl(p.split("\n", 1)[1] if p.startswith("IDL: ") else p))
            store.register({k: v for k, v in typs.items() if k not in store.fielddefs})
        except Exception as e:  # a definition rosbags cannot parse: that type is unknown
            bad[c.msgtype] = f"its embedded definition does not parse ({e})"
    for t in {c.msgtype for c in reader.connections if c.msgtype in store.fielddefs}:
        lost = _unresolved(store, t)
        if lost:
            bad[t] = f"its definition refers to unknown types {sorted(lost)}"
    missing = {c.msgtype for c in reader.connections if c.msgtype not in store.fielddefs and c.msgtype not in bad}
    if missing:
        if default is None:
            distro = getattr(reader, "ros_distro", None) if not bag.ros1 else "noetic"
            default = distro if distro in STORES else ("noetic" if bag.ros1 else "humble")
        stock = _stock_store(default)
        try:
            store.register({k: v for k, v in stock.fielddefs.items() if k not in store.fielddefs})
        except Exception as e:
            for t in missing:
                bad[t] = f"no definition in the bag, and the stock types conflict with the bag's ({e})"
        for t in missing:
            if t not in store.fielddefs:
                bad[t] = "unknown message type: no definition in the bag nor in the stock type store " \
                         "(pass typestore=...)"
    return store, bad


def _unresolved(store, msgtype: str, seen=None) -> set[str]:
    """Message types a type's fields name (recursively) that the store does not have."""
    seen = set() if seen is None else seen
    if msgtype in seen:
        return set()
    seen.add(msgtype)
    if msgtype not in store.fielddefs:
        return {msgtype}
    out = set()
    for _, (node, arg) in store.fielddefs[msgtype][1]:
        if node in (3, 4):       # array / sequence: (element, length)
            node, arg = arg[0]
        if node == 2:            # a nested message type
            out |= _unresolved(store, arg, seen)
    return out


# ----------------------------------------------------------------------------
# options


def _per_topic(value, topic: str, default):
    """A per-topic option: one value for all, or {topic or glob: value}."""
    if isinstance(value, Mapping):
        if topic in value:
            return value[topic]
        for k, v in value.items():
            if fnmatch.fnmatchcase(topic, k):
                return v
        return default
    return value if value is not None else default


def _wanted(topic: str, msgtype: str, topics, exclude) -> str | None:
    """None when the topic is read, else why not."""
    if exclude and any(fnmatch.fnmatchcase(topic, p) for p in exclude):
        return "excluded"
    if topics is not None:
        return None if any(fnmatch.fnmatchcase(topic, p) for p in topics) else "not in topics"
    if msgtype in BOOKKEEPING_TYPES:
        return "logging/bookkeeping type, left out by default (name it in topics= to read it)"
    return None


# ----------------------------------------------------------------------------
# one bag


@dataclass
class Series:
    """A stream of one bag, rows sorted by the chosen clock."""

    topic: str
    msgtype: str
    part: Part
    times: np.ndarray         # int64 ns, sorted
    log: np.ndarray           # int64 ns, in the same (sorted) row order
    order: np.ndarray         # sort permutation applied to the part's rows
    clock: str                # "header" or "log"
    diag: dict = field(default_factory=dict)


@dataclass
class BagRead:
    bag: Bag
    series: dict[str, Series]
    facts: dict


def _check_clock(name: str, part: Part, want: str) -> tuple[np.ndarray, str, dict]:
    """Pick the row times of a part and describe the clock: returns (times, clock, diag)."""
    log = part.log
    diag: dict = {"messages": int(len(log))}
    notes = diag["notes"] = list(part.notes)
    header = part.header
    clock = "log"
    t = log
    if want == "header" and header is not None:
        zeros = int((header == 0).sum())
        diag["zero_stamps"] = zeros
        if zeros:
            notes.append(f"{zeros} of {len(header)} header stamps are 0 (not filled in by the publisher); "
                         f"using the log (receive) time")
        else:
            clock, t = "header", header
    if header is not None and len(header):
        off = log - header
        diag["header_log_offset_ns"] = {"median": int(np.median(off)), "min": int(off.min()), "max": int(off.max())}
        h = header[header != 0]
        diag["sim_time"] = bool(len(h) and np.median(h) < WALL_CLOCK_NS <= np.median(log))
        if diag["sim_time"]:
            notes.append(f"header stamps are not wall-clock time (they start at {h.min() / 1e9:.3f} s): "
                         f"simulation time or time since boot")
        elif abs(diag["header_log_offset_ns"]["median"]) > CLOCK_OFFSET_NS:
            notes.append(f"header clock is {diag['header_log_offset_ns']['median'] / 1e9:+.3f} s off the log clock "
                         f"(median of log - header)")
    d = np.diff(t)
    diag["non_monotonic"] = int((d < 0).sum())
    diag["clock"] = clock
    if diag["non_monotonic"]:
        notes.append(f"{diag['non_monotonic']} stamps go back in time ({clock} clock); rows sorted by time")
    return t, clock, diag


def read_bag(bag: Bag, *, topics=None, exclude=None, fields=None, clock="header", opts: Options,
             point_fields=None, typestore=None, recover: bool = False, skip_undecodable: bool = False,
             show_progress=None) -> BagRead:
    """Every selected topic of one bag through its converter; rows sorted by the chosen clock.
    ``skip_undecodable`` (the doctor) counts messages that do not decode in
    ``facts["undecodable"]`` instead of raising."""
    src = str(bag.path)
    facts: dict = {"path": src, "format": bag.format, "topics": {}, "skipped": {}, "recovered": None,
                   "undecodable": {}}
    if recover and not bag.ros1 and bag.path.suffix == ".mcap":
        from .mcap_scan import ScannedMcap
        try:
            reader = open_bag(bag)
        except ReaderError as err:
            reader = ScannedMcap(bag.path)
            reader.open()
            facts["recovered"] = reader.damage or {"offset": reader.size, "size": reader.size,
                                                   "reason": f"rosbags cannot read it ({err.__cause__ or err})"}
    else:
        reader = open_bag(bag)
    try:
        is2 = not bag.ros1
        store, bad = build_typestore(reader, bag, typestore)
        facts["start_ns"] = int(reader.start_time) if reader.message_count else None
        facts["end_ns"] = int(reader.end_time) if reader.message_count else None
        facts["ros_distro"] = None if bag.ros1 else getattr(reader, "ros_distro", None)
        by_topic: dict[str, list] = {}
        for c in reader.connections:
            by_topic.setdefault(c.topic, []).append(c)
        convs, conns = {}, []
        for topic, cs in sorted(by_topic.items()):
            types = sorted({c.msgtype for c in cs})
            declared = sum(max(c.msgcount, 0) for c in cs)
            facts["topics"][topic] = {"type": types[0] if len(types) == 1 else types, "declared": declared,
                                      "count": 0}
            if len(types) > 1:
                facts["skipped"][topic] = f"several message types on one topic: {types}"
                continue
            why = _wanted(topic, types[0], topics, exclude)
            if why is None and types[0] in bad:
                why = bad[types[0]]
            if why is not None:
                facts["skipped"][topic] = why
                continue
            if opts.decode and not opts.load_images and types[0] in IMAGE_TYPES:
                facts["skipped"][topic] = "image topic, load_images=False"
                continue
            sel = _per_topic(fields, topic, None)
            o = replace(opts, fields=None if sel is None else ([sel] if isinstance(sel, str) else list(sel)),
                        point_fields=tuple(_per_topic(point_fields, topic, opts.point_fields)))
            convs[topic] = converter_for(topic, types[0], store, o, src, declared or None)
            conns += cs
        deser = store.deserialize_cdr if is2 else store.deserialize_ros1
        total = sum(max(c.msgcount, 0) for c in conns)
        msg_topic: str | None = None
        i = -1
        counts = {t: 0 for t in convs}
        it = reader.messages(connections=conns) if conns else iter(())
        try:
            for c, ts, raw in progress(it, total=total, desc=f"reading {bag.path.name}", enable=show_progress):
                msg_topic = c.topic
                i = counts[msg_topic]
                try:
                    msg = deser(raw, c.msgtype)
                except Exception as e:
                    why = (f"{src}: topic {msg_topic}: message {i} (log time {ts} ns) cannot be decoded as "
                           f"{c.msgtype} (corrupt?): {e}")
                    if not skip_undecodable:
                        raise ReaderError(why) from e
                    bad_n, first = facts["undecodable"].get(msg_topic, (0, why))
                    facts["undecodable"][msg_topic] = (bad_n + 1, first)
                    counts[msg_topic] = i + 1
                    continue
                convs[msg_topic].add(msg, ts)
                counts[msg_topic] = i + 1
        except ReaderError:
            raise
        except Exception as e:  # rosbags failing mid-file: a damaged chunk or record
            after = f" after message {i} of topic {msg_topic}" if msg_topic is not None else ""
            raise ReaderError(f"{src}: cannot read messages{after} (corrupt or truncated?): {e}") from e
        for name, n in counts.items():
            facts["topics"][name]["count"] = n
    finally:
        reader.close()

    series: dict[str, Series] = {}
    for topic, conv in convs.items():
        want = _per_topic(clock, topic, "header")
        if want not in CLOCKS:
            raise ValueError(f"clock[{topic!r}]: {want!r} is not one of {CLOCKS}")
        parts = conv.parts()
        facts["topics"][topic]["streams"] = []
        if not parts and conv.n:
            facts["skipped"][topic] = "no numeric fields"
        for part in parts:
            name = topic + ("." + part.suffix if part.suffix and not part.suffix.startswith(":") else part.suffix)
            t, ck, diag = _check_clock(name, part, want)
            order = np.argsort(t, kind="stable")
            stamps = t[order]
            diag["duplicates"] = int((np.diff(stamps) == 0).sum())
            if diag["duplicates"]:
                diag["notes"].append(f"{diag['duplicates']} duplicate stamps ({ck} clock)")
            series[name] = Series(topic, conv.msgtype, part, stamps, part.log[order], order, ck, diag)
            facts["topics"][topic]["streams"].append(name)
    return BagRead(bag, series, facts)


# ----------------------------------------------------------------------------
# episodes


def _boundaries(read: BagRead, split_gap, split_topic) -> np.ndarray:
    """Log times (ns) where a new episode starts, inside one bag (sorted)."""
    bounds = []
    if split_topic is not None:
        s = [x for x in read.series.values() if x.topic == split_topic]
        if not s and split_topic not in read.facts["topics"]:
            raise ValueError(f"split_topic: {split_topic!r} is not a topic of {read.bag.path} "
                             f"(it has {sorted(read.facts['topics'])})")
        if s:
            bounds.append(np.sort(s[0].log))
    if split_gap is not None:
        if not split_gap > 0:
            raise ValueError(f"split_gap must be positive seconds, got {split_gap!r}")
        logs = np.sort(np.concatenate([x.log for x in read.series.values()] or [np.zeros(0, np.int64)]))
        if len(logs) > 1:
            gap = np.flatnonzero(np.diff(logs) > split_gap * 1e9)
            bounds.append(logs[gap + 1])
    return np.unique(np.concatenate(bounds)) if bounds else np.zeros(0, np.int64)


def _take(values, idx: np.ndarray):
    """values[idx] (a list for point clouds); values itself when idx is every row in order (the usual
    case: one episode, stamps already sorted), so a bag's images are not copied again."""
    if values is None:
        return None
    if len(idx) == len(values) and (len(idx) == 0 or (idx[0] == 0 and np.all(np.diff(idx) == 1))):
        return values
    if isinstance(values, list):
        return [values[i] for i in idx]
    return values[idx]


def _stream_name(name: str, topic: str, rename: Mapping[str, str]) -> str:
    if name in rename:
        return rename[name]
    if topic in rename:
        return rename[topic] + name[len(topic):]
    return name


def assemble(reads: list[BagRead], *, rename=None, modes=None, joint_fill="interp", split_gap=None,
             split_topic=None, source: str) -> Episodes:
    """Per-bag series to Episodes: split, renamed, columns unified across bags."""
    rename = dict(rename or {})
    known = {n for r in reads for n in r.series} | {s.topic for r in reads for s in r.series.values()}
    unknown = [k for k in rename if k not in known]
    if unknown:
        raise ValueError(f"rename: {unknown} name no stream or topic that was read "
                         f"(streams: {sorted({n for r in reads for n in r.series})})")
    if joint_fill not in JOINT_FILLS:
        raise ValueError(f"joint_fill must be one of {JOINT_FILLS}, got {joint_fill!r}")

    # per final stream: kind, mode, the union of feature names over bags
    kinds: dict[str, str] = {}
    stream_modes: dict[str, str] = {}
    names: dict[str, list] = {}
    origin: dict[str, str] = {}
    for r in reads:
        for n, s in r.series.items():
            out = _stream_name(n, s.topic, rename)
            if out in origin and origin[out] != n:
                raise ValueError(f"rename: streams {origin[out]!r} and {n!r} would both be named {out!r}")
            origin[out] = n
            kinds.setdefault(out, s.part.kind)
            if s.part.mode:
                stream_modes.setdefault(out, s.part.mode)
            if s.part.feature_names is not None:
                have = names.setdefault(out, [])
                have += [f for f in s.part.feature_names if f not in have]
    for k, m in (modes or {}).items():
        if k not in kinds:
            raise ValueError(f"modes: {k!r} is not a stream (streams: {sorted(kinds)})")
        if m not in MODES:
            raise ValueError(f"modes[{k!r}]: {m!r} is not one of {MODES}")
        stream_modes[k] = m

    episodes, ep_facts = [], []
    for b, r in enumerate(reads):
        bounds = _boundaries(r, split_gap, split_topic)
        n_eps = len(bounds) + 1
        eps: list[dict] = [{} for _ in range(n_eps)]
        for n, s in r.series.items():
            out = _stream_name(n, s.topic, rename)
            which = np.searchsorted(bounds, s.log, side="right") if len(bounds) else np.zeros(len(s.log), np.int64)
            values = _take(s.part.values, s.order)
            present = s.part.present[s.order] if s.part.present is not None else None
            for e in range(n_eps):
                idx = np.flatnonzero(which == e)
                if not len(idx):
                    continue
                v, t = _take(values, idx), s.times[idx]
                if present is not None:
                    v = fill_missing(v, present[idx], t, joint_fill).astype(s.part.cast)
                v = _align_columns(v, s.part.feature_names, names.get(out), out, r.bag)
                eps[e][out] = (v, t)
        for e, ep in enumerate(eps):
            if not ep:
                continue
            lo = int(bounds[e - 1]) if e > 0 else None
            hi = int(bounds[e]) if e < len(bounds) else None
            episodes.append(ep)
            ep_facts.append({"bag": b, "path": str(r.bag.path), "split_start_ns": lo, "split_end_ns": hi})
    if not episodes:
        raise ReaderError(f"{source}: no messages on the selected topics")
    held = {k for ep in episodes for k in ep}   # streams of topics without messages are left out
    for k in modes or {}:
        if k not in held:
            raise ValueError(f"modes: stream {k!r} has no messages")
    kinds = {k: v for k, v in kinds.items() if k in held}
    stream_modes = {k: v for k, v in stream_modes.items() if k in held}
    feature_names = {k: v for k, v in names.items() if v and k in held and kinds[k] != "image"}
    return Episodes(episodes=episodes, kinds=kinds, modes=stream_modes, rates={}, feature_names=feature_names,
                    source=source,
                    extra={"bags": [r.facts | {"streams": {_stream_name(n, s.topic, rename): s.diag | {
                        "topic": s.topic, "type": s.msgtype} for n, s in r.series.items()}} for r in reads],
                           "episodes": ep_facts})


def _align_columns(v, have, want, name, bag):
    """Columns in the union order of every bag; NaN where this bag lacks a column."""
    if have is None or want is None or list(have) == list(want) or v is None or isinstance(v, list):
        return v
    if v.dtype.kind != "f":
        raise ReaderError(f"{bag.path}: stream {name!r} has columns {have}, other bags {want}; integer streams "
                          f"cannot be padded (select fields= common to every bag)")
    out = np.full((len(v), len(want)), np.nan, dtype=v.dtype)
    pos = {f: i for i, f in enumerate(want)}
    out[:, [pos[f] for f in have]] = v
    return out


def note_clock_warnings(ep: Episodes) -> None:
    """Adds to each bag's ``warnings`` (``ep.extra["bags"]``) what its clocks make of it: streams on clocks
    too far apart to be aligned, stamps that go back or are 0. Warns nothing: the reader warns them
    (``warn_clocks``), the doctor reports them."""
    for bag in ep.extra["bags"]:
        bases = {}
        for n, d in bag["streams"].items():
            off = d.get("header_log_offset_ns")
            bases[n] = (-off["median"] if (d["clock"] == "header" and off) else 0)
        if bases and max(bases.values()) - min(bases.values()) > CLOCK_OFFSET_NS:
            hdr = sorted(n for n, b in bases.items() if abs(b) > CLOCK_OFFSET_NS)
            rest = sorted(n for n, b in bases.items() if abs(b) <= CLOCK_OFFSET_NS)
            bag.setdefault("warnings", []).append(
                f"streams on different clocks: header stamps of {hdr[:4]}{'...' if len(hdr) > 4 else ''} are far "
                f"from the log clock that {rest[:4]}{'...' if len(rest) > 4 else ''} use; "
                f"pass clock='log' to put every stream on the receive clock")
        for n, d in bag["streams"].items():
            for note in d["notes"]:
                if "stamps go back" in note or "are 0" in note:
                    bag.setdefault("warnings", []).append(f"{n}: {note}")


def warn_clocks(ep: Episodes) -> None:
    """One warning per clock problem of each bag (``note_clock_warnings``), at the user's call."""
    note_clock_warnings(ep)
    for bag in ep.extra["bags"]:
        for w in bag.get("warnings", []):
            warn(f"{bag['path']}: {w}")     # at the user's read_rosbag / from_rosbag call


def read_rosbag(path, *, topics: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                fields: Mapping[str, Sequence[str]] | None = None, rename: Mapping[str, str] | None = None,
                modes: Mapping[str, str] | None = None, clock: str | Mapping[str, str] = "header",
                dtype=np.float32, joint_fill: str = "interp", point_fields: Sequence[str] | Mapping = ("x", "y", "z"),
                drop_invalid_points: bool = True, load_images: bool = True,
                image_size: tuple[int, int] | None = None, split_gap: float | None = None,
                split_topic: str | None = None, typestore=None, recover: bool = False,
                show_progress: bool | None = None, _decode: bool = True) -> Episodes:
    """Read ROS 1 / ROS 2 bags and MCAP files into episodes of streams.

    See ``Dataset.from_rosbag`` for the parameters; this returns the ``Episodes`` (the keyword
    arguments of ``Dataset.from_episodes``, times int64 ns) with what was found about every bag
    in ``extra["bags"]`` (topics, message counts, skipped topics and why, clock diagnostics per
    stream) and ``extra["episodes"]`` (the bag of each episode).
    """
    _rosbags()
    bags = find_bags(path)
    if isinstance(topics, str):
        topics = [topics]
    if isinstance(exclude, str):
        exclude = [exclude]
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise ValueError(f"dtype must be a float dtype (or None to keep float64), got {dtype}")
    if image_size is not None and (len(image_size) != 2 or min(image_size) <= 0):
        raise ValueError(f"image_size must be (height, width), got {image_size!r}")
    if not isinstance(point_fields, Mapping):
        point_fields = tuple(point_fields)
    if isinstance(clock, str) and clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS} (or a dict topic -> clock), got {clock!r}")
    opts = Options(dtype=dtype, point_fields=point_fields if isinstance(point_fields, tuple) else ("x", "y", "z"),
                   drop_invalid_points=drop_invalid_points, image_size=image_size, load_images=load_images,
                   decode=_decode)
    reads = [read_bag(b, topics=topics, exclude=exclude, fields=fields, clock=clock, opts=opts,
                      point_fields=point_fields if isinstance(point_fields, Mapping) else None,
                      typestore=typestore, recover=recover, show_progress=show_progress) for b in bags]
    if topics is not None:
        seen = {t for r in reads for t in r.facts["topics"]}
        unmatched = [p for p in topics if not any(fnmatch.fnmatchcase(t, p) for t in seen)]
        if unmatched:
            raise ValueError(f"topics: {unmatched} match no topic of {path} (topics: {sorted(seen)})")
    all_topics = {t for r in reads for t in r.facts["topics"]}
    for opt, value in (("fields", fields), ("clock", clock), ("point_fields", point_fields)):
        if isinstance(value, Mapping):
            stray = [k for k in value if not any(fnmatch.fnmatchcase(t, k) for t in all_topics)]
            if stray:
                raise ValueError(f"{opt}: {stray} name no topic of {path} (topics: {sorted(all_topics)})")
    source = os.fspath(path) if not isinstance(path, (list, tuple)) else ", ".join(map(os.fspath, path))
    ep = assemble(reads, rename=rename, modes=modes, joint_fill=joint_fill, split_gap=split_gap,
                  split_topic=split_topic, source=source)
    warn_clocks(ep)
    return ep


__all__ = ["Bag", "BagRead", "find_bags", "note_clock_warnings", "open_bag", "read_bag", "read_rosbag"]
