"""The dataset doctor: what is wrong with a source before it is trained on.

``python -m robocache doctor PATH`` (or ``diagnose(path_or_dataset)``) reads any source robocache
takes -- ROS 1/ROS 2 bags and MCAP files, LeRobot, robomimic, diffusion-policy zarr, or a loaded
``Dataset`` -- and reports per stream the message count, the rate (median and p10-p90 spread of
the instantaneous rate), gaps (the longest interval, and how many exceed ``gap`` seconds or
``gap_factor`` x the median interval), duplicate and non-monotonic stamps, NaN/Inf values,
constant features and episodes shorter than a window; for bags the clocks (header vs log time,
zero stamps, sim time) and file defects (truncated or unindexed files, unknown types, counts that
disagree with metadata.yaml); for LeRobot (v2.x and v3.0) the files the metadata promises but are
missing (a camera's video included), frame counts that disagree between parquet, video and meta,
v3.0 episode spans outside their video, and timestamps off the fps grid or off their frames (what
makes LeRobot raise its tolerance errors). Images are not decoded: the check is fast.

Findings are errors (the source cannot be trained on as is; the exit code is 1), warnings and
notes. Output: a table (``--json`` for machines; ``Report._repr_html_`` in Jupyter).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .readers.ros_messages import BOOKKEEPING_TYPES   # logging topics: event-driven, no gap findings

__all__ = ["Finding", "Report", "StreamCheck", "diagnose", "main"]

LEVELS = ("error", "warning", "note")


@dataclass
class Finding:
    level: str         # error, warning, note
    where: str         # a file, a stream, or the source
    code: str          # short machine name: truncated, gap, nan, off_grid, ...
    message: str


@dataclass
class StreamCheck:
    """What was measured on one stream (over all episodes)."""

    name: str
    kind: str = "continuous"
    type: str | None = None          # message type (bags)
    episodes: int = 0                # episodes with samples
    count: int = 0
    rate_hz: float | None = None     # 1 / median interval (bursty: the mean rate over the span)
    median_interval_s: float | None = None
    rate_p10_hz: float | None = None
    rate_p90_hz: float | None = None
    longest_gap_s: float | None = None
    gaps: int = 0                    # intervals over the gap threshold
    gap_threshold_s: float | None = None
    duplicates: int = 0
    non_monotonic: int = 0
    nan: int = 0
    inf: int = 0
    constant: list = field(default_factory=list)
    shortest_s: float | None = None  # shortest per-episode span
    clock: str | None = None         # bags: header or log
    offset_ms: float | None = None   # bags: median log - header time
    zero_stamps: int = 0
    sim_time: bool = False
    bursty: bool = False             # messages come in bursts: rate_hz is the mean over the span


def printable(text: str) -> str:
    """``text`` safe for a terminal: control and format characters other than a newline (ESC sequences from a
    file or topic name would recolour, retitle or rewrite the terminal; a bidi override reorders the line)
    shown escaped, as Python writes them (``\\x1b``, ``\\u202e``)."""
    return "".join(c if c == "\n" or unicodedata.category(c) not in ("Cc", "Cf") else
                   ascii(c)[1:-1] for c in text)


@dataclass
class Report:
    source: str
    format: str
    episodes: int = 0
    streams: list[StreamCheck] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)

    def add(self, level, where, code, message):
        self.findings.append(Finding(level, str(where), code, message))

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def exit_code(self, strict: bool = False) -> int:
        return 1 if self.errors or (strict and self.warnings) else 0

    def to_dict(self) -> dict:
        return {"source": self.source, "format": self.format, "episodes": self.episodes, "ok": self.ok,
                "streams": [asdict(s) for s in self.streams], "findings": [asdict(f) for f in self.findings],
                "files": self.files}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=_jsonable, **kw)

    # --- text ----------------------------------------------------------------------------

    COLUMNS = ("stream", "type", "eps", "count", "rate Hz", "p10-p90 Hz", "longest gap", "gaps", "clock",
               "log-header", "issues")

    def _row(self, s: StreamCheck) -> dict:
        counts = ((s.non_monotonic, "back in time"), (s.duplicates, "dup"), (s.zero_stamps, "zero stamps"),
                  (s.nan, "NaN"), (s.inf, "Inf"), (len(s.constant), "constant"))
        issues = [f"{n} {what}" for n, what in counts if n]
        if s.sim_time:
            issues.append("sim time")
        if s.bursty:
            issues.append("bursty (mean rate)")
        return {"stream": s.name, "type": _short_type(s.type) if s.type else s.kind, "eps": str(s.episodes),
                "count": str(s.count), "rate Hz": _rate(s.rate_hz),
                "p10-p90 Hz": "-" if s.rate_p10_hz is None else f"{_rate(s.rate_p10_hz)}-{_rate(s.rate_p90_hz)}",
                "longest gap": "-" if s.longest_gap_s is None else f"{s.longest_gap_s:.3g} s",
                "gaps": str(s.gaps), "clock": s.clock or "-", "log-header": _offset(s.offset_ms),
                "issues": ", ".join(issues)}

    def table(self) -> str:
        span = sum(1 for f in self.files if "path" in f)
        head = (f"robocache doctor: {self.source} ({self.format}"
                + (f", {span} files" if span > 1 else "") + f", {self.episodes} episodes, {len(self.streams)} streams)")
        rows = [self._row(s) for s in self.streams]
        lines = [head]
        if rows:
            width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in self.COLUMNS}
            right = {"eps", "count", "rate Hz", "p10-p90 Hz", "longest gap", "gaps", "log-header"}
            cell = lambda r, c: r[c].rjust(width[c]) if c in right else r[c].ljust(width[c])
            lines.append("  ".join(cell({c: c for c in self.COLUMNS}, c) for c in self.COLUMNS).rstrip())
            lines += ["  ".join(cell(r, c) for c in self.COLUMNS).rstrip() for r in rows]
        if self.findings:
            lines.append("")
            order = {lv: i for i, lv in enumerate(LEVELS)}
            for f in sorted(self.findings, key=lambda f: order[f.level]):
                lines.append(f"{f.level.upper():7s} {f.where}: {f.message}")
        n_e, n_w = len(self.errors), len(self.warnings)
        lines.append("")
        lines.append(f"{n_e} error{'s' * (n_e != 1)}, {n_w} warning{'s' * (n_w != 1)}, "
                     f"{len(self.findings) - n_e - n_w} notes" + ("" if n_e else " -- ok"))
        return printable("\n".join(lines))

    __str__ = table

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{esc(r[c])}</td>" for c in self.COLUMNS) + "</tr>"
                       for r in (self._row(s) for s in self.streams))
        colour = {"error": "#c00", "warning": "#b60", "note": "#555"}
        finds = "".join(f"<li style='color:{colour[f.level]}'><b>{f.level}</b> <code>{esc(f.where)}</code>: "
                        f"{esc(f.message)}</li>" for f in self.findings)
        return (f"<div class='robocache-doctor'><b>robocache doctor</b> <code>{esc(self.source)}</code> "
                f"({esc(self.format)}, {self.episodes} episodes, {len(self.errors)} errors, "
                f"{len(self.warnings)} warnings)<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<ul>{finds}</ul></div>")


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    return str(x)


def _offset(ms):
    if ms is None:
        return "-"
    return f"{ms:.3g} ms" if abs(ms) < 1000 else f"{ms / 1000:.4g} s"


def _rate(r):
    if r is None:
        return "-"
    return f"{r:.1f}" if r >= 1 else f"{r:.3g}"


def _short_type(t) -> str:
    if isinstance(t, list):
        return "/".join(_short_type(x) for x in t)
    return t.replace("/msg/", "/")


# ----------------------------------------------------------------------------
# per-stream checks on episode data


def _to_numpy(x):
    if x is None:
        return None
    if hasattr(x, "detach"):  # torch
        return x.detach().cpu().numpy()
    return x


def _seconds(t: np.ndarray) -> np.ndarray:
    """Times relative to the first one, float64 seconds (int64 ns differenced exactly first)."""
    t = np.asarray(t)
    if not len(t):
        return t.astype(np.float64)
    if t.dtype.kind in "iu":
        return (t - t[0]).astype(np.float64) / 1e9
    return t.astype(np.float64) - float(t[0])


#: a stream whose median-interval rate is this many times its mean rate over its span is bursty
BURST_FACTOR = 10.0


def check_stream(name: str, pieces: list, *, kind: str = "continuous", feature_names=None, gap=None,
                 gap_factor: float = 5.0) -> StreamCheck:
    """Measure one stream from its per-episode ``(values, times)`` (None where absent)."""
    s = StreamCheck(name, kind)
    intervals, spans = [], []
    nan = inf = 0
    lo = hi = None
    for piece in pieces:
        if piece is None:
            continue
        values, times = (_to_numpy(piece[0]), _to_numpy(piece[1]))
        t = _seconds(times)
        n = len(t)
        if not n:
            continue
        s.episodes += 1
        s.count += n
        spans.append(float(t[-1]) if n else 0.0)
        d = np.diff(t)
        intervals.append(d)
        s.non_monotonic += int((d < 0).sum())
        s.duplicates += int((d == 0).sum())
        if isinstance(values, np.ndarray) and values.dtype.kind == "f" and kind not in ("image", "pointcloud"):
            v = values.reshape(n, -1)
            nan += int(np.isnan(v).sum())
            inf += int(np.isinf(v).sum())
            fin = np.where(np.isfinite(v), v, np.nan)
            if v.size and not np.isnan(fin).all():
                with warnings_off():
                    cmin, cmax = np.nanmin(fin, 0), np.nanmax(fin, 0)
                lo = cmin if lo is None else np.fmin(lo, cmin)
                hi = cmax if hi is None else np.fmax(hi, cmax)
        elif isinstance(values, np.ndarray) and values.dtype.kind in "biu" and kind not in ("image", "pointcloud") \
                and values.ndim >= 1 and n:
            v = values.reshape(n, -1)
            cmin, cmax = v.min(0), v.max(0)
            lo = cmin if lo is None else np.minimum(lo, cmin)
            hi = cmax if hi is None else np.maximum(hi, cmax)
    s.nan, s.inf = nan, inf
    if lo is not None and s.count > 1:
        const = np.flatnonzero(np.asarray(lo == hi)).tolist()
        names = list(feature_names) if feature_names is not None and len(feature_names) == len(np.atleast_1d(lo)) \
            else None
        s.constant = [names[i] if names else i for i in const]
    if spans:
        s.shortest_s = min(spans)
    d = np.concatenate(intervals) if intervals else np.zeros(0)
    pos = d[d > 0]
    if len(pos):
        med = float(np.median(pos))
        s.rate_hz, s.median_interval_s = 1.0 / med, med
        # latched or event topics (/parameter_events, /rosout, /tf_static) publish in bursts: the median
        # interval is the burst's (4,627 Hz for 30 messages in 5 s); the mean over the span says how
        # often they really come
        mean_rate = len(pos) / float(pos.sum())
        if s.rate_hz > BURST_FACTOR * mean_rate:
            s.bursty, s.rate_hz = True, mean_rate
        p10, p90 = np.percentile(pos, [10, 90])
        s.rate_p10_hz, s.rate_p90_hz = 1.0 / float(p90), 1.0 / float(p10)
        s.longest_gap_s = float(pos.max())
        s.gap_threshold_s = float(gap) if gap is not None else gap_factor * med
        s.gaps = int((pos > s.gap_threshold_s).sum())
    return s


class warnings_off:
    """np.nanmin on all-NaN columns warns; the doctor counts NaN itself."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def check_episodes(report: Report, episodes: list[dict], *, kinds=None, feature_names=None, gap=None,
                   gap_factor: float = 5.0, window: float | None = None, types=None) -> None:
    """Per-stream checks over episodes ``[{name: (values, times)}]``; adds streams and findings."""
    kinds, feature_names, types = kinds or {}, feature_names or {}, types or {}
    names = list(dict.fromkeys(n for ep in episodes for n in ep))
    report.episodes = len(episodes)
    for n in names:
        s = check_stream(n, [ep.get(n) for ep in episodes], kind=kinds.get(n, "continuous"),
                         feature_names=feature_names.get(n), gap=gap, gap_factor=gap_factor)
        s.type = types.get(n)
        report.streams.append(s)
        if s.nan or s.inf:
            what = " and ".join(f"{k} {w}" for k, w in ((s.nan, "NaN"), (s.inf, "Inf")) if k)
            report.add("warning", n, "nan", f"{what} values")
        if s.constant:
            shown = ", ".join(map(str, s.constant[:8])) + ("..." if len(s.constant) > 8 else "")
            plural = "" if len(s.constant) == 1 else "s"
            report.add("note", n, "constant", f"{len(s.constant)} constant feature{plural}: {shown}")
        if s.gaps and types.get(n) not in BOOKKEEPING_TYPES:   # logging topics are bursty by nature
            report.add("warning", n, "gap", f"{s.gaps} gaps longer than {s.gap_threshold_s:.3g} s "
                       f"(longest {s.longest_gap_s:.3g} s; median interval {s.median_interval_s:.3g} s)")
        if s.non_monotonic:
            report.add("warning", n, "non_monotonic", f"{s.non_monotonic} timestamps go back in time")
        if s.duplicates:
            report.add("note", n, "duplicate", f"{s.duplicates} duplicate timestamps")
        if s.count == 0:
            report.add("note", n, "empty", "no samples")
    if window is not None and episodes:
        short = []
        for e, ep in enumerate(episodes):
            firsts, lasts = [], []
            for v, t in (x for x in ep.values() if x is not None):
                t = _to_numpy(t)
                if len(t):
                    firsts.append(t[0])
                    lasts.append(t[-1])
            if firsts:
                span = (max(lasts) - min(firsts))
                span = span / 1e9 if np.asarray(span).dtype.kind in "iu" else float(span)
                if span < window:
                    short.append(e)
        if short:
            report.add("warning", report.source, "short_episode",
                       f"{len(short)} episodes are shorter than the {window:g} s window: {short[:20]}"
                       + ("..." if len(short) > 20 else ""))


# ----------------------------------------------------------------------------
# sources


def detect(path) -> str:
    """rosbag, lerobot, zarr or robomimic (ValueError when it is none of them)."""
    if isinstance(path, (list, tuple)):
        return "rosbag"
    p = Path(os.fspath(path))
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.is_file():
        if p.suffix in (".bag", ".mcap", ".db3"):
            return "rosbag"
        if p.suffix in (".hdf5", ".h5", ".he5"):
            return "robomimic"
        if p.name.endswith(".zarr.zip") or p.suffix == ".zip":
            return "zarr"
    else:
        if (p / "metadata.yaml").is_file():
            return "rosbag"
        if (p / "meta" / "info.json").is_file():
            return "lerobot"
        if (p / ".zgroup").is_file() or (p / "zarr.json").is_file() or p.suffix == ".zarr":
            return "zarr"
        for q in p.rglob("*"):
            if q.suffix in (".bag", ".mcap", ".db3") or q.name == "metadata.yaml":
                return "rosbag"
    raise ValueError(f"{p}: not a source robocache reads (a ROS bag or MCAP file, a LeRobot folder with "
                     f"meta/info.json, a zarr ReplayBuffer or a robomimic HDF5 file)")


def _diagnose_rosbag(report: Report, path, gap, gap_factor, window) -> None:
    from ._util import ReaderError
    from .readers.rosbag import assemble, find_bags, read_bag
    from .readers.ros_messages import Options

    bags = find_bags(path)
    reads = []
    opts = Options(decode=False)
    for bag in bags:
        info: dict[str, Any] = {"path": str(bag.path), "format": bag.format}
        report.files.append(info)
        if not bag.ros1 and bag.path.is_dir() and not any(bag.path.glob("*.mcap")) and not any(bag.path.glob("*.db3")):
            report.add("error", bag.path, "missing_files", "ROS 2 bag folder without .mcap/.db3 files")
            continue
        try:
            read = read_bag(bag, topics=["*"], opts=opts, recover=True, skip_undecodable=True)
        except Exception as e:  # a damaged file is a finding, whatever the library it breaks raises
            why = str(e) if isinstance(e, (ReaderError, ValueError, OSError)) else \
                f"{bag.path}: cannot read: {type(e).__name__}: {e}"
            report.add("error", bag.path, "unreadable", why)
            info["error"] = why
            continue
        reads.append(read)
        facts = read.facts
        info.update({k: facts[k] for k in ("start_ns", "end_ns", "ros_distro") if k in facts})
        info["topics"] = facts["topics"]
        if facts.get("recovered"):
            d = facts["recovered"]
            n = sum(t["count"] for t in facts["topics"].values())
            report.add("error", bag.path, "truncated",
                       f"damaged at byte {d['offset']:,} of {d['size']:,} ({d['reason']}); the {n} messages "
                       f"before it are readable with recover=True")
        for topic, (n_bad, first) in facts["undecodable"].items():
            report.add("error", topic, "undecodable", f"{n_bad} of {facts['topics'][topic]['count']} messages "
                       f"cannot be decoded; the first: {first}")
        for topic, t in facts["topics"].items():
            why = facts["skipped"].get(topic)
            if why and any(w in why for w in ("unknown", "does not parse", "several message types")):
                report.add("warning", topic, "unknown_type", f"{_short_type(t['type'])}: {why}")
            if t["declared"] and t["count"] != t["declared"] and not facts.get("recovered") and not why:
                report.add("warning", topic, "count_mismatch",
                           f"{t['count']} messages read, the bag's index/metadata says {t['declared']}")
            if t["count"] == 0 and not why:
                report.add("note", topic, "empty", f"{_short_type(t['type'])}: no messages")
    if not reads:
        return
    ep = assemble(reads, source=str(path))
    types = {}
    for b in ep.extra["bags"]:
        for n, d in b["streams"].items():
            types[n] = d["type"]
    check_episodes(report, ep.episodes, kinds=ep.kinds, feature_names=ep.feature_names, gap=gap,
                   gap_factor=gap_factor, window=window, types=types)
    by_name = {s.name: s for s in report.streams}
    for b in ep.extra["bags"]:
        for n, d in b["streams"].items():
            s = by_name.get(n)
            if s is None:
                continue
            s.clock = d["clock"]
            s.non_monotonic += d.get("non_monotonic", 0)   # before the reader sorted them
            s.zero_stamps += d.get("zero_stamps", 0)
            off = d.get("header_log_offset_ns")
            if off:
                s.offset_ms = off["median"] / 1e6
            s.sim_time = s.sim_time or bool(d.get("sim_time"))
            where = f"{n}" if len(ep.extra["bags"]) == 1 else f"{b['path']}: {n}"
            if d.get("non_monotonic"):
                report.add("warning", where, "non_monotonic",
                           f"{d['non_monotonic']} {d['clock']} stamps go back in time (the reader sorts them)")
            if d.get("zero_stamps"):
                report.add("warning", where, "zero_stamps",
                           f"{d['zero_stamps']} header stamps are 0 (not filled in); the reader uses log time")
            if d.get("sim_time"):
                report.add("note", where, "sim_time", "header stamps are simulation/boot time, not wall clock")
            elif off and abs(off["median"]) > 1e9:
                report.add("warning", where, "clock_offset",
                           f"header clock is {off['median'] / 1e9:+.3f} s off the log (receive) clock")
            elif off and off["max"] - off["min"] > 0.5e9:
                report.add("note", where, "clock_jitter",
                           f"log - header time varies by {(off['max'] - off['min']) / 1e6:.0f} ms")
    from .readers.rosbag import note_clock_warnings  # the same mixed-clock test the reader warns with
    note_clock_warnings(ep)
    for b in ep.extra["bags"]:
        for w in b.get("warnings", []):
            if w.startswith("streams on different clocks"):
                report.add("warning", b["path"], "mixed_clocks", w)


def _diagnose_lerobot(report: Report, root: Path, gap, gap_factor, window) -> None:
    """The file-level checks of robocache.readers.lerobot_audit (v2.x and v3.0), then the stream checks of
    the episodes whose rows are there, and a row per camera (frames and rate from the files, not decoded)."""
    from .readers import read_lerobot
    from .readers.lerobot_audit import audit_lerobot

    audit = audit_lerobot(root)
    for finding in audit.findings:
        report.add(*finding)
    if not audit.summary:
        return                                # the metadata itself is unreadable: said above
    report.files.append(audit.summary)
    if audit.present:
        _generic(report, lambda: read_lerobot(root, load_video=False, episodes=audit.present), gap, gap_factor,
                 window)
    for key, per in audit.cameras.items():
        rates = [r for _, r in per if r]
        report.streams.append(StreamCheck(key, "image", episodes=len(per),
                                          count=sum(f for f, _ in per),
                                          rate_hz=float(np.median(rates)) if rates else None,
                                          rate_p10_hz=min(rates) if rates else None,
                                          rate_p90_hz=max(rates) if rates else None))


def _generic(report: Report, read, gap, gap_factor, window) -> None:
    from ._util import ReaderError

    import warnings
    try:
        with warnings.catch_warnings(record=True) as said:   # the reader's warnings become notes
            warnings.simplefilter("always")
            ep = read()
    except (ReaderError, ValueError, KeyError, OSError) as e:
        report.add("error", report.source, "unreadable", str(e))
        return
    for w in said:
        report.add("note", report.source, "reader", str(w.message))
    check_episodes(report, ep.episodes, kinds=ep.kinds, feature_names=ep.feature_names, gap=gap,
                   gap_factor=gap_factor, window=window)


def _zarr_keys(report: Report, path):
    """Arrays to check: images (4-D) are left out, they would be decoded whole (PushT: 709 MB)."""
    from .readers.zarr_store import check_store

    try:
        check_store(path)   # zarr 2 unpickles a fill value as it opens an array: check first
        import zarr
        store: Any = zarr.open(os.fspath(path), mode="r")   # a Group (zarr 2 and 3 type it differently)
        data = store["data"]
        keys = sorted(data.array_keys()) if hasattr(data, "array_keys") else sorted(data.keys())
        out = [k for k in keys if len(data[k].shape) < 4]
    except Exception:
        return None   # the reader says what is wrong
    left = sorted(set(keys) - set(out))
    if left:
        report.add("note", report.source, "not_checked", f"image arrays not decoded by the doctor: {left}")
    return out


def diagnose(source, *, gap: float | None = None, gap_factor: float = 5.0, window: float | None = None,
             format: str | None = None) -> Report:
    """Check a source (a path, a list of bags, or a robocache ``Dataset``) and return a Report.

    Parameters
    ----------
    gap : float, optional
        An interval longer than this many seconds is a gap (default: ``gap_factor`` x the
        stream's median interval).
    window : float, optional
        Report episodes shorter than this many seconds (the span a training window needs).
    format : {"rosbag", "lerobot", "zarr", "robomimic"}, optional
        Default: detected from the path.
    """
    if hasattr(source, "streams") and hasattr(source, "episode"):   # a loaded Dataset
        report = Report(str(source.source or "Dataset"), "dataset")
        eps = []
        for e in range(len(source)):
            ep = {}
            for n, st in source.streams.items():
                v, t = st.episode(e)
                ep[n] = (None if st.kind in ("pointcloud", "image") else v, t)   # pixels/points: not checked
            eps.append(ep)
        check_episodes(report, eps, kinds={n: s.kind for n, s in source.streams.items()},
                       feature_names={n: s.feature_names for n, s in source.streams.items() if s.feature_names},
                       gap=gap, gap_factor=gap_factor, window=window)
        return report
    if not isinstance(source, (list, tuple)) and not Path(os.fspath(source)).exists():
        from .readers import is_repo_id, lerobot_root
        if is_repo_id(source):
            source = lerobot_root(source)       # a set LeRobot downloaded; else the error says how to fetch it
    fmt = format or detect(source)
    name = source if isinstance(source, (list, tuple)) else os.fspath(source)
    report = Report(", ".join(map(str, name)) if isinstance(name, (list, tuple)) else str(name), fmt)
    if fmt == "rosbag":
        _diagnose_rosbag(report, source, gap, gap_factor, window)
    elif fmt == "lerobot":
        _diagnose_lerobot(report, Path(os.fspath(source)), gap, gap_factor, window)
    elif fmt == "zarr":
        from .readers import read_zarr
        keys = _zarr_keys(report, source)
        _generic(report, lambda: read_zarr(source, keys=keys), gap, gap_factor, window)
    elif fmt == "robomimic":
        from .readers import read_robomimic
        _generic(report, lambda: read_robomimic(source), gap, gap_factor, window)
    else:
        raise ValueError(f"format must be one of rosbag, lerobot, zarr, robomimic; got {fmt!r}")
    return report


def _parser():
    p = argparse.ArgumentParser(prog="python -m robocache doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="+", help="a bag / .mcap / ROS 2 bag folder (several: one episode each), "
                                          "a LeRobot folder, a zarr store or a robomimic .hdf5")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--gap", type=float, default=None, metavar="SECONDS",
                   help="an interval longer than this is a gap (default: GAP_FACTOR x the median interval)")
    p.add_argument("--gap-factor", type=float, default=5.0)
    p.add_argument("--window", type=float, default=None, metavar="SECONDS",
                   help="report episodes shorter than this (the span of a training window)")
    p.add_argument("--format", choices=["rosbag", "lerobot", "zarr", "robomimic"], default=None)
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    return p


def main(argv=None, *, out=None) -> int:
    """The ``doctor`` command: prints the report; exit code 1 when it has errors (or warnings with
    ``--strict``), 2 when the path is not a source or cannot be checked at all."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    src = args.path if len(args.path) > 1 else args.path[0]
    try:
        report = diagnose(src, gap=args.gap, gap_factor=args.gap_factor, window=args.window, format=args.format)
    except (ValueError, FileNotFoundError) as e:
        print(printable(f"doctor: {e}"), file=sys.stderr)
        return 2
    except Exception as e:  # a source that breaks the doctor itself: a message naming it, not a traceback
        print(printable(f"doctor: {src}: cannot check it: {type(e).__name__}: {e}"), file=sys.stderr)
        return 2
    print(report.to_json(indent=2) if args.json else report.table(), file=out)
    return report.exit_code(strict=args.strict)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

