"""Frame times against row times: which video frame each row of an episode gets, checked once per episode.

A reader that returns videos gives, per episode, its rows' times (LeRobot's ``timestamp`` column) and one
video source per camera; the decoder gives each frame its presentation time from the source's start. A row
gets the frame at its timestamp, as LeRobot's decoder gives it, which raises ``FrameTimestampError`` when no
frame is within ``tolerance_s`` (default 1e-4 s, ``TOLERANCE_S``); LeRobot's writer encodes one frame per
row, in order. ``check_episode`` holds one episode's rows to both, in a few NumPy passes over its times (no
decoding: frame times come from the packets); ``reconcile`` runs it on every episode of a stream at load and
picks the frame times the dataset keeps (``video_timestamps``), and the doctor runs it on every episode's
video (``readers/lerobot_audit.py``), so a load and the doctor cannot disagree on which episode is off, from
which row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .._util import ReaderError
from ..user_warning import warn

__all__ = ["TIMESTAMP_MODES", "TOLERANCE_S", "Mismatch", "check_episode", "check_span_counts", "check_span_times",
           "check_timestamps_mode", "reconcile"]

#: LeRobot's default ``tolerance_s``: a row's timestamp and its frame's time at most this far apart (seconds)
TOLERANCE_S = 1e-4
#: where a dataset's frame times come from (``Dataset.from_lerobot(video_timestamps=)``)
TIMESTAMP_MODES = ("pts", "parquet")
#: timestamps stepping this many times the frames' step were written in another unit than seconds
UNITS = {1e3: "milliseconds", 1e6: "microseconds", 1e9: "nanoseconds"}


@dataclass(frozen=True)
class Mismatch:
    """An episode whose rows are off its video's frames (``check_episode``).

    level     "error": no frame of the episode can be trusted (timestamps in another unit; no row on a
              frame: a shifted clock); "warning": rows off the frames from some row on (a gap in the
              timestamps the video does not have: frames dropped while recording can mean it), or here and
              there (jitter beyond the tolerance).
    kind      "units", "shifted" or "off_frames"
    row       the first row off, at ``row_time`` seconds; ``frame`` its frame (frame ``row`` when the video
              holds a frame per row, else the frame nearest its timestamp), at ``frame_time`` seconds
    far, rows how many of the episode's rows have no frame within the tolerance, of how many
    episode   the source's number of the episode
    message   all of it in words, naming the episode (the caller adds the file)
    """

    level: str
    kind: str
    row: int
    row_time: float
    frame: int
    frame_time: float
    far: int
    rows: int
    episode: int
    message: str


def check_episode(row_t, frame_t, *, episode, tolerance: float = TOLERANCE_S) -> Mismatch | None:
    """One episode's rows against its video's frames; None when they agree, else the ``Mismatch``.

    ``row_t``, ``frame_t``: seconds from the episode's (span's) start, frame times sorted. A row is off when
    no frame is within ``tolerance`` of its timestamp (LeRobot's decoder rule), except a row within a frame
    past either end of the video, which gets the end frame (GR00T's PickNPlace: rows start a frame after
    the video, so its last row is a frame past the last frame; docs/dataset.md). When the video holds a frame
    per row, a row is also off where the rows' step differs from the frames' by more than ``tolerance`` (a
    gap the video does not have is caught where it starts, even where the late times land on other frames).
    """
    p = np.asarray(row_t, np.float64).reshape(-1)
    v = np.asarray(frame_t, np.float64).reshape(-1)
    n, m = len(p), len(v)
    if not n or not m:
        return None
    hi = np.minimum(np.searchsorted(v, p), m - 1)
    lo = np.maximum(hi - 1, 0)
    near = np.where(np.abs(p - v[lo]) <= np.abs(v[hi] - p), lo, hi)     # the nearest frame, ties to the earlier
    reach = (float(np.median(np.diff(v))) if m > 1 else 0.0) + tolerance
    edge = ((p > v[-1]) & (p <= v[-1] + reach)) | ((p < v[0]) & (p >= v[0] - reach))
    far = (np.abs(p - v[near]) > tolerance) & ~edge
    jump = np.zeros(n, bool)
    if n == m:
        jump[1:] = np.abs(np.diff(p) - np.diff(v)) > tolerance
    off = far | jump
    if not off.any():
        return None
    k = int(np.argmax(off))
    f = k if n == m else int(near[k])
    nfar = int(far.sum())
    at = f"row {k} is at {p[k]:.6f} s, its video frame {f} at {v[f]:.6f} s ({abs(p[k] - v[f]):.4g} s apart)"
    count = (f"{nfar} of {n} rows with no frame within LeRobot's tolerance of {tolerance:g} s" if nfar else
             f"every row within LeRobot's tolerance of {tolerance:g} s of a frame, but not of its own")
    unit = _unit(p, v)
    if unit is not None:
        level, kind = "error", "units"
        what = (f"the timestamps look like {unit[0]}: they step by {unit[1]:.6g}, the frames by {unit[2]:.6g} s "
                f"({count}). No frame could be trusted; write the timestamps in seconds")
    elif (~edge).any() and far[~edge].all():
        level, kind = "error", "shifted"
        delta = p - (v if n == m else v[near])
        what = (f"no row is on a frame: the timestamps are {_shift(delta[~edge])} ({count}). No frame could be "
                f"trusted; fix the episode's timestamps or leave it out (episodes=)")
    else:
        level, kind = "warning", "off_frames"
        step = ""
        if jump[k]:
            dp, dv = p[k] - p[k - 1], v[k] - v[k - 1]
            gap = " (a gap the video does not have: frames dropped while recording?)" if dp - dv > dv / 2 else ""
            step = f"the timestamps step by {dp:.6g} s there, the frames by {dv:.6g} s{gap}; "
        what = (f"the first row off the frames: {step}{count}. Rows off the frames get the frame nearest their "
                f"timestamp; if the video holds row i's frame as its frame i, video_timestamps='parquet' pairs "
                f"them by index")
    return Mismatch(level, kind, k, float(p[k]), f, float(v[f]), nfar, n, int(episode),
                    f"episode {episode}: {at}: {what}")


def _unit(p: np.ndarray, v: np.ndarray):
    """(unit, row step, frame step) when the rows step a power of 1000 times the frames: timestamps written
    in ms, us or ns; else None."""
    if len(p) < 2 or len(v) < 2:
        return None
    sp, sv = float(np.median(np.diff(p))), float(np.median(np.diff(v)))
    if not (sp > 0 and sv > 0):
        return None
    for scale, unit in UNITS.items():
        if abs(sp / sv / scale - 1) < 0.05:
            return unit, sp, sv
    return None


def _shift(delta: np.ndarray) -> str:
    """How rows are off their frames, all of them: by one offset, or by offsets over a range (seconds)."""
    lo, hi = float(delta.min()), float(delta.max())
    if hi - lo <= 2 * TOLERANCE_S:
        return f"shifted by {float(np.median(delta)):+.6g} s from the video's frame times"
    return f"off the video's frame times by {lo:+.6g} .. {hi:+.6g} s"


def check_timestamps_mode(video_timestamps: str) -> None:
    if video_timestamps not in TIMESTAMP_MODES:
        raise ValueError(f"video_timestamps must be 'pts' or 'parquet', got {video_timestamps!r}")


def check_span_counts(video: dict, counts, ids) -> None:
    """A LeRobot v3.0 episode's span of a shared mp4 must hold one frame per parquet row: else the span and
    the rows describe different things (a wrong from/to_timestamp), and no frame could be trusted."""
    for src, n, rows, e in zip(video["sources"], counts, video["rows"], ids):
        if not src.whole and int(n) != int(rows):
            raise ReaderError(f"{src}, episode {e}: the span [from_timestamp, to_timestamp) holds {int(n)} video "
                              f"frames, the episode has {int(rows)} rows in the data files")


def check_span_times(where: str, frame_t, row_t, fps: float) -> None:
    """Each frame of a v3.0 span within 1/fps of its row's timestamp (the frame LeRobot would pick)."""
    if len(frame_t) != len(row_t) or not len(frame_t):
        return
    d = np.abs(np.asarray(frame_t, np.float64) - np.asarray(row_t, np.float64))
    k = int(np.argmax(d))
    if d[k] > 1.0 / fps:
        raise ReaderError(f"{where}: frame {k} is at {frame_t[k]:.4f} s from the span's start, its row's "
                          f"timestamp is {row_t[k]:.4f} s ({d[k]:.4f} s apart, more than 1/fps = "
                          f"{1.0 / fps:.4f} s)")


def reconcile(key: str, times: list, video: dict, row_times: Sequence, ids: Sequence[int],
              video_timestamps: str = "pts") -> list:
    """The frame times a dataset keeps for stream ``key``, one array per episode, checked against its rows.

    ``times``: the decoded frames' times per episode (from the source's start); ``video``: the reader's
    ``{"sources", "fps", "rows"}`` of the stream; ``row_times``: each episode's rows' times (None for an
    episode without rows); ``ids``: the source's episode numbers. A v3.0 span must hold its rows' times within
    1/fps (``check_span_times``). "pts" keeps the frames' own times, after ``check_episode`` on every episode:
    the first error raises (ReaderError naming the file, the episode, the row and both times); warnings come
    as one per stream, the first in full. "parquet" takes each episode's row times as its frames' (one frame
    per row, row i is frame i: nothing to check).
    """
    out = list(times)
    errors: list = []       # (source, finding) per episode, by level
    warned: list = []
    for i, (t, rows, src, row_t) in enumerate(zip(times, video["rows"], video["sources"], row_times)):
        where = f"{src}, episode {ids[i]}"
        if not src.whole and row_t is not None:
            check_span_times(where, t, row_t, video["fps"])
        if video_timestamps == "parquet":
            if len(t) != rows:
                raise ValueError(f"{where}: video_timestamps='parquet' needs one frame per row, the video "
                                 f"has {len(t)} frames and the parquet {rows} rows")
            out[i] = row_t
            continue
        if len(t) != rows:
            warn(f"{where}: {len(t)} video frames for {rows} parquet rows")
        found = check_episode(row_t, t, episode=ids[i]) if row_t is not None else None
        if found is not None:
            (errors if found.level == "error" else warned).append((src, found))
    if errors:
        src, first = errors[0]
        more = f" (episodes {_list(errors[1:])} of camera '{key}' too)" if len(errors) > 1 else ""
        raise ReaderError(f"{src}, {first.message}{more}")
    if warned:
        src, first = warned[0]
        more = f"; episodes {_list(warned[1:])} of camera '{key}' too" if len(warned) > 1 else ""
        warn(f"{src}, {first.message}{more}")
    return out


def _list(found: list, shown: int = 8) -> str:
    """The episodes of ``[(source, Mismatch)]``, the first ``shown`` of them."""
    ids = [str(m.episode) for _, m in found]
    return ", ".join(ids[:shown]) + (", ..." if len(ids) > shown else "")
