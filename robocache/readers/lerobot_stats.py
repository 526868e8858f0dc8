"""A LeRobot set's statistics files, checked and pooled: ``meta/stats.json`` (v2.0, v3.0, GR00T) and v2.1's
``meta/episodes_stats.jsonl`` (one entry per episode, pooled as LeRobot's ``aggregate_stats`` does).

Each statistic of a feature must have the feature's shape: ``info.json``'s ``shape`` for a numeric feature
(``[6]`` for a 6-joint state), ``[C, 1, 1]`` for a camera (per channel, LeRobot's layout), and, for a
feature ``info.json`` does not list, the shape its first statistic has. A numeric feature's statistics of
another shape are a ReaderError naming the file, the episode, the feature, the statistic and both shapes
(they were dropped silently and the statistics computed over the loaded episodes instead, which differ from
subset to subset); a camera's a warning, and the file's figures for it are left out (robocache computes
image statistics itself). v3.0's per-episode ``stats/*`` columns of ``meta/episodes`` are not read:
v3.0 sets have ``stats.json``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ._common import ReaderError
from ..user_warning import warn

#: the statistics robocache keeps (LeRobot's and GR00T's names)
STATS_KEYS = ("min", "max", "mean", "std", "q01", "q99")
#: what an episode's entry must hold for its feature to be pooled over episodes
POOLED = ("min", "max", "mean", "std", "count")
_CAMERA = ("video", "image")
_FIX = ("fix or remove it; without the file robocache computes the statistics over the episodes it loads, "
        "which differ from subset to subset")


def feature_shape(feature) -> tuple | None:
    """The shape a feature's statistics have: info.json's ``shape`` (numeric features), ``(C, 1, 1)``
    for a camera (C: the axis ``names`` calls channel(s), else the last one of size 1, 3 or 4); None
    when info.json gives none."""
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if not isinstance(shape, (list, tuple)) or not shape or \
            not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return None
    if feature.get("dtype") not in _CAMERA:
        return tuple(shape)
    names = feature.get("names")
    names = [str(n).lower() for n in names] if isinstance(names, (list, tuple)) and len(names) == len(shape) else []
    axis = next((i for i, n in enumerate(names) if n in ("channel", "channels")), None)
    if axis is None:
        axis = next((i for i in (-1, 0) if shape[i] in (1, 3, 4)), -1)
    return (shape[axis], 1, 1)


def _same(found: tuple, expected: tuple) -> bool:
    return found == expected or (math.prod(found) == 1 and math.prod(expected) == 1)


class _Checker:
    """Shapes of one file's statistics, against info.json's features (or a feature's first statistic)."""

    def __init__(self, path: Path, features: dict):
        self.path = path
        self.features = features if isinstance(features, dict) else {}
        self.first: dict[str, tuple[tuple, str]] = {}   # feature -> (shape, where) of its first statistic
        self.dropped: set[str] = set()                   # cameras whose figures are left out

    def array(self, key: str, stat: str, value, where: str) -> np.ndarray | None:
        """``value`` as float64 with the feature's shape; ReaderError naming everything (a camera: warning
        and None)."""
        at = f"{self.path}{where}: feature '{key}', statistic '{stat}'"
        try:
            a = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ReaderError(f"{at} is not an array of numbers ({str(value)[:60]}); {_FIX}") from None
        feature = self.features.get(key)
        expected = feature_shape(feature)
        if expected is not None and isinstance(feature, dict):
            src = f"info.json's {feature.get('dtype')} feature shape {list(feature['shape'])}"
        elif key in self.first:
            expected, first_at = self.first[key]
            src = f"its first statistic ({first_at})"
        else:
            self.first[key] = (a.shape, f"{stat}{where}")
            return a
        if _same(a.shape, expected):
            return a.reshape(expected)      # [1] and () alike: one shape to pool
        message = f"{at} has shape {a.shape}, expected {expected} (from {src})"
        if isinstance(feature, dict) and feature.get("dtype") in _CAMERA:
            if key not in self.dropped:
                self.dropped.add(key)
                warn(f"{message}; the file's statistics of this camera are left out (robocache computes image "
                     f"statistics itself)")
            return None
        raise ReaderError(f"{message}; {_FIX}")


def stats_json(raw, path: Path, features: dict) -> dict:
    """meta/stats.json's ``{feature: {stat: array}}`` (the STATS_KEYS only), each checked (module doc)."""
    if not isinstance(raw, dict):
        raise ReaderError(f"{path}: expected an object of features, got {type(raw).__name__}")
    check = _Checker(path, features)
    out = {}
    for key, stats in raw.items():
        if not isinstance(stats, dict):
            continue
        arrays = {s: check.array(key, s, stats[s], "") for s in STATS_KEYS if s in stats}
        if key not in check.dropped:
            out[key] = arrays
    return out


def pooled_episode_stats(rows: list, path: Path, features: dict) -> dict:
    """v2.1's meta/episodes_stats.jsonl entries, each checked (module doc), pooled over episodes as
    LeRobot's ``aggregate_stats``: count-weighted mean, pooled variance, min of mins, max of maxes;
    quantiles cannot be pooled and are left out. A feature some episode lacks a statistic of is left out
    (the Dataset computes its own)."""
    check = _Checker(path, features)
    per: dict[str, list] = {}
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ReaderError(f"{path}: entry {n} is not an object")
        ep = row.get("episode_index", f"at entry {n}")
        where = f", episode {ep}"
        stats = row.get("stats", {})
        if not isinstance(stats, dict):
            raise ReaderError(f"{path}{where}: 'stats' is not an object of features")
        for key, st in stats.items():
            if not isinstance(st, dict):
                raise ReaderError(f"{path}{where}: feature '{key}' is not an object of statistics")
            got = {s: check.array(key, s, st[s], where) for s in STATS_KEYS if s in st}
            if "count" in st:
                try:
                    count = np.asarray(st["count"], dtype=np.float64)
                except (TypeError, ValueError):
                    count = np.array([math.nan, math.nan])
                if count.size != 1 or not count.reshape(-1)[0] > 0 or not np.isfinite(count).all():
                    raise ReaderError(f"{path}{where}: feature '{key}', statistic 'count' is "
                                      f"{str(st['count'])[:60]}, expected one positive number; {_FIX}")
                got["count"] = count.reshape(-1)[:1]
            per.setdefault(key, []).append(got)
    out = {}
    for key, sts in per.items():
        if key in check.dropped or not all(all(s in st for s in POOLED) for st in sts):
            continue
        cnt = np.concatenate([st["count"] for st in sts])
        means = np.stack([st["mean"] for st in sts])
        stds = np.stack([st["std"] for st in sts])
        w = (cnt / cnt.sum()).reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (w * means).sum(0)
        var = (w * (stds ** 2 + (means - mean) ** 2)).sum(0)
        out[key] = {"min": np.min(np.stack([st["min"] for st in sts]), 0),
                    "max": np.max(np.stack([st["max"] for st in sts]), 0), "mean": mean, "std": np.sqrt(var)}
    return out
