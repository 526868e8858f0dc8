"""File-level checks of a LeRobot set, v2.x and v3.0 alike: what ``python -m robocache doctor`` reports
before a load (ours, or LeRobot's tolerance checks) would stop on it.

- every file the metadata promises is there: each episode's data rows and each listed camera's video;
- each episode's rows agree with its metadata (``length``; v3.0 ``dataset_from_index .. dataset_to_index``);
- its timestamps step by 1/fps within LeRobot's tolerance;
- each camera's video holds one frame per row: v2.x the episode's own file (its header's frame count);
  v3.0 the episode's ``[from_timestamp, to_timestamp)`` span of a shared mp4, which must lie inside the
  file, with the rows' timestamps inside the span;
- each row's timestamp is on its frame (``robocache.video.times.check_episode``, the check a load makes, at
  the level the load gives it: an error where no frame of the episode can be trusted, a warning for rows off
  their frames from some row on; a v3.0 span's rows more than 1/fps off are an error, as the load raises).

Videos are demuxed (packet times) or their headers read, never decoded. Where each file is comes from the
reader's own rules (``episode_table``, ``video_file``, ``collect_rows``, ``unread_cameras``), so the doctor
and ``from_lerobot`` cannot disagree on what is missing. Findings are ``(level, where, code, message)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._common import ReaderError, require
from .lerobot import collect_rows, episode_table, expected_rows, open_info, read_parquet, unread_cameras, video_file
from .lerobot_info import chunks_size
from ..video import VideoSource, frame_times, probe_video
from ..video.source import span_bounds
from ..video.times import TOLERANCE_S, check_episode

#: the data columns the checks read (the values are the stream checks' job)
ROW_COLUMNS = ("timestamp", "episode_index", "index")


@dataclass
class Audit:
    findings: list = field(default_factory=list)   # (level, where, code, message)
    present: list = field(default_factory=list)    # episodes whose rows were found
    cameras: dict = field(default_factory=dict)    # video key -> [(frames, fps)] per episode with a video
    summary: dict = field(default_factory=dict)    # the set: path, version, fps, episodes listed and present

    def add(self, level: str, where, code: str, message: str) -> None:
        self.findings.append((level, str(where), code, message))


def audit_lerobot(path) -> Audit:
    """The findings on the LeRobot set at ``path`` (see the module's docstring)."""
    require("pyarrow", "lerobot", "the LeRobot checks")
    a = Audit()
    try:
        root, info_path, info, major = open_info(path)
        chunks = chunks_size(info, info_path)
        table = episode_table(root, info, major, info["data_path"], chunks)
    except ReaderError as err:
        a.add("error", path, "unreadable", str(err))
        return a
    fps = float(info["fps"])
    _totals(a, info, info_path, table)
    rows, unreadable = _rows(a, root, table, major)
    a.present = sorted(rows)
    lost = [e for e in sorted(table) if e not in rows and e not in unreadable]
    if lost:
        a.add("error", root, "missing_files", f"{len(lost)} of {len(table)} episodes have no data parquet file: "
              f"episodes {_ranges(lost)}")
    for e, (ts, n, f) in sorted(rows.items()):
        _check_rows(a, e, ts, n, f, table[e], fps)
    keys = [k for k, feat in (info.get("features") or {}).items() if feat.get("dtype") == "video"]
    if keys and not info.get("video_path"):
        a.add("error", info_path, "unreadable", f"video feature '{keys[0]}' but no 'video_path'")
        keys = []
    unread = unread_cameras(root, info.get("features") or {})
    probed: dict = {}                         # file -> (frame times, fps), None when unreadable
    for key in keys:
        gone = []                             # (episode, the file it lacks)
        for e, (ts, n, _) in sorted(rows.items()):
            try:
                vp = video_file(root, info, table, e, key, major, chunks)
            except ReaderError as err:
                # v2.x has no meta/episodes folder: its video_path template is info.json's
                a.add("error", root / "meta" / ("episodes" if major == 3 else "info.json"), "unreadable", str(err))
                break
            if not vp.is_file():
                gone.append((e, vp))
            elif major == 2:
                _check_file(a, key, e, vp, ts, n, fps)
            else:
                _check_span(a, key, e, vp, ts, n, table[e]["row"], fps, probed)
        if not gone:
            continue
        if len(gone) == len(rows) and key in unread:
            # listed, shipped for no episode, named by no meta/modality.json: GR00T's PickNPlace lists a second
            # camera it never shipped; from_lerobot leaves it out with a warning (the set trains)
            a.add("warning", root, "video_not_shipped", f"video '{key}' is listed in meta/info.json but no "
                  "episode has its file and meta/modality.json does not name it; from_lerobot leaves it out")
        else:
            a.add("error", gone[0][1], "missing_files", f"{len(gone)} of {len(table)} episodes have no video "
                  f"'{key}' file: episodes {_ranges([e for e, _ in gone])}; from_lerobot raises "
                  f"(missing_videos='drop' loads the set without this camera)")
    a.summary = {"path": str(root), "version": str(info.get("codebase_version", "")), "fps": fps,
                 "episodes_listed": len(table), "episodes_present": len(rows)}
    return a


def _totals(a: Audit, info: dict, info_path: Path, table: dict) -> None:
    if info.get("total_episodes") is not None and int(info["total_episodes"]) != len(table):
        a.add("warning", info_path, "meta_mismatch",
              f"total_episodes is {info['total_episodes']}, the episode metadata lists {len(table)}")
    total = sum(max(t["length"], 0) for t in table.values())
    if info.get("total_frames") is not None and int(info["total_frames"]) != total:
        a.add("warning", info_path, "meta_mismatch",
              f"total_frames is {info['total_frames']}, the episodes' lengths sum to {total}")


def _rows(a: Audit, root: Path, table: dict, major: int) -> tuple[dict, set]:
    """``({episode: (timestamps or None, rows, data file)}, episodes whose data file is unreadable)`` for the
    episodes whose rows were found. v2.x: the episode's own file; v3.0: every data file read once (its
    bookkeeping columns), the rows located as the reader locates them."""
    pa = require("pyarrow", "lerobot", "the LeRobot checks")
    pq = require("pyarrow.parquet", "lerobot", "the LeRobot checks")
    files = {table[e]["data"] for e in table if table[e]["data"].is_file()}
    if major == 3:        # rows in a file the metadata does not name (lerobot#2401): the reader finds them there
        files |= set((root / "data").glob("**/*.parquet"))
    tables, bad = {}, set()
    for f in sorted(files):
        try:
            tables[f] = read_parquet(f, columns=[c for c in ROW_COLUMNS if c in pq.read_schema(f).names])
        except (ValueError, OSError) as err:    # ReaderError, or pyarrow's ArrowInvalid from read_schema
            a.add("error", f, "unreadable", str(err) if isinstance(err, ReaderError) else
                  f"{f}: cannot read parquet file (corrupt or truncated?): {err}")
            bad.add(f)
    unreadable = {e for e in table if table[e]["data"] in bad}
    if major == 2:
        found = {e: [(table[e]["data"], np.arange(len(tables[table[e]["data"]])))]
                 for e in table if table[e]["data"] in tables}
    else:
        try:
            found = collect_rows(tables, sorted(table), table)
        except ReaderError as err:
            a.add("error", root / "data", "unreadable", str(err))
            return {}, unreadable
    out = {}
    for e, pieces in found.items():
        t = pa.concat_tables([tables[f].take(i) for f, i in pieces])
        if "index" in t.column_names and len(pieces) > 1:     # as the reader orders rows from several files
            t = t.take(np.argsort(t.column("index").to_numpy(), kind="stable"))
        ts = t.column("timestamp").to_numpy().astype(np.float64) if "timestamp" in t.column_names else None
        out[e] = (ts, t.num_rows, pieces[0][0])
    return out, unreadable


def _check_rows(a: Audit, e: int, ts, n: int, f: Path, entry: dict, fps: float) -> None:
    """An episode's row count against its metadata; its timestamps against the fps grid."""
    want = expected_rows(entry)
    if want >= 0 and n != want:
        row = entry.get("row") or {}
        span = (f" (dataset_from_index {row['dataset_from_index']} .. dataset_to_index {row['dataset_to_index']})"
                if row.get("dataset_from_index") is not None else "")
        a.add("error", f, "frame_count", f"episode {e}: {n} rows in the data files, the episode metadata says "
              f"{want}{span}")
    if ts is None:
        a.add("error", f, "no_timestamp", f"episode {e}: no 'timestamp' column")
        return
    d = np.diff(ts)
    if (d < 0).any():
        a.add("error", f, "non_monotonic", f"episode {e}: timestamps go back in time at "
              f"{int(np.flatnonzero(d < 0)[0]) + 1}")
    bad = np.abs(d - 1.0 / fps) > TOLERANCE_S
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        a.add("error", f, "off_grid", f"episode {e}: {int(bad.sum())} timestamp steps are off the {fps:g} fps grid "
              f"by more than {TOLERANCE_S:g} s (first at row {i + 1}: {ts[i]:.6f} -> {ts[i + 1]:.6f}); "
              f"LeRobot raises a tolerance error there")


def _check_file(a: Audit, key: str, e: int, vp: Path, ts, n: int, fps: float) -> None:
    """A v2.x episode's own video: one frame per row (its header's count), at the set's fps, each row's
    timestamp on its frame (the frames' times demuxed, not decoded)."""
    try:
        got = probe_video(vp)
        times = frame_times(vp)
        frames, vfps = got.frames or len(times), got.fps or None
    except (ReaderError, ImportError, ValueError, OSError) as err:
        a.add("error", vp, "unreadable", f"cannot open the video: {err}")
        return
    a.cameras.setdefault(key, []).append((frames, vfps))
    if frames != n:
        a.add("error", vp, "frame_count", f"episode {e}: {frames} video frames, {n} parquet rows")
    if vfps and abs(vfps - fps) > 1e-3:
        a.add("warning", vp, "fps", f"video at {vfps:g} fps, meta/info.json says {fps:g}")
    if ts is not None:
        _check_times(a, key, e, vp, ts, times)


def _check_times(a: Audit, key: str, e: int, vp: Path, ts, frame_t, span_fps: float | None = None) -> None:
    """Each row's timestamp on its frame of camera ``key``, by the load's own check and at its level; for a
    v3.0 span (``span_fps``), rows more than 1/fps from their frames are an error (the load raises there)."""
    found = check_episode(ts, frame_t, episode=e)
    if found is None:
        return
    level = found.level
    if span_fps and len(ts) == len(frame_t) and float(np.abs(np.asarray(ts) - frame_t).max()) > 1.0 / span_fps:
        level = "error"
    lerobot = ("LeRobot's decoder raises a tolerance error on the rows with no frame" if found.far else
               "LeRobot's decoder gives those rows other frames without a word")
    a.add(level, vp, "frame_times", f"camera '{key}', {found.message}; {lerobot}")


def _check_span(a: Audit, key: str, e: int, vp: Path, ts, n: int, row: dict, fps: float, probed: dict) -> None:
    """A v3.0 episode's span of a shared video: inside the file, one frame per row, each row's timestamp on its
    frame (``from_timestamp + timestamp``, as LeRobot's decoder asks for it). ``probed`` caches each file's
    frame times (demuxed, not decoded) and rate."""
    try:
        t0, t1 = float(row[f"videos/{key}/from_timestamp"]), float(row[f"videos/{key}/to_timestamp"])
        src = VideoSource(str(vp), start=t0, end=t1)
    except (KeyError, TypeError, ValueError) as err:
        a.add("error", vp, "span", f"episode {e}: no valid videos/{key}/from_timestamp and to_timestamp ({err})")
        return
    if vp not in probed:
        try:
            probed[vp] = (frame_times(vp), probe_video(vp).fps or None)
        except (ReaderError, ImportError, ValueError, OSError) as err:
            a.add("error", vp, "unreadable", f"cannot open the video: {err}")
            probed[vp] = None
        else:
            vfps = probed[vp][1]
            if vfps and abs(vfps - fps) > 1e-3:
                a.add("warning", vp, "fps", f"video at {vfps:g} fps, meta/info.json says {fps:g}")
    if probed[vp] is None:
        return
    times, vfps = probed[vp]
    half = 0.5 / fps
    end = float(times[-1]) + 1.0 / fps if len(times) else 0.0
    lo, hi = span_bounds([src], fps)[0]
    kept = times[(times >= lo) & (times < hi)] - t0
    a.cameras.setdefault(key, []).append((len(kept), vfps))
    if t1 > end + half:
        a.add("error", vp, "span_outside", f"episode {e}: the span [{t0:g}, {t1:g}) s of camera '{key}' ends past "
              f"the video, whose {len(times)} frames end at {end:g} s")
    if len(kept) != n:
        a.add("error", vp, "frame_count", f"episode {e}: the span [{t0:g}, {t1:g}) s holds {len(kept)} video frames, "
              f"the episode has {n} rows in the data files")
    if ts is None:
        return
    out = (ts < -half) | (ts >= t1 - t0 - half)       # the span rule of VideoSource, on the rows' times
    if out.any():
        a.add("error", vp, "outside_span", f"episode {e}: {int(out.sum())} row timestamps lie outside the span "
              f"[{t0:g}, {t1:g}) s of camera '{key}' ({ts[0]:g} .. {ts[-1]:g} s into an episode of {t1 - t0:g} s)")
    elif len(kept) == n:
        _check_times(a, key, e, vp, ts, kept, span_fps=fps)


def _ranges(xs) -> str:
    """Sorted integers as runs: "0-3, 7, 9-10"."""
    xs = sorted(xs)
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)
