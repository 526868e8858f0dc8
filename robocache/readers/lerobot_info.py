"""Checks of a LeRobot ``meta/info.json`` before anything it names is read (issue 34, items 5 and 11).

info.json is input like any other file: a hand-edited or hostile one must not read files outside the
dataset root, exhaust memory through a format spec, or change the windows' time step without a word.
Every error is a ReaderError naming info.json (or the file the bad value is in).
"""

from __future__ import annotations

import math
import os
import re
import string
from pathlib import Path, PurePosixPath

import numpy as np

from ._common import ReaderError
from ..user_warning import warn

#: the fields each template is formatted with, per major version (what LeRobot's writers put there)
TEMPLATE_FIELDS = {
    (2, "data_path"): ("episode_chunk", "episode_index"),
    (2, "video_path"): ("episode_chunk", "video_key", "episode_index"),
    (3, "data_path"): ("chunk_index", "file_index"),
    (3, "video_path"): ("video_key", "chunk_index", "file_index"),
}
#: the format specs LeRobot writes (``{episode_index:06d}``, ``{chunk_index:03d}``) and plain ``d``: a
#: zero-padded width of at most MAX_WIDTH digits; anything else (``>2000000000``) could exhaust memory
MAX_WIDTH = 20
#: the fps of info.json and the timestamps' median step may differ by this fraction before a warning
FPS_WARN = 0.01
#: ... and by this fraction before the load fails (fps 30 on 10 Hz timestamps is off by 200%)
FPS_FAIL = 0.10


def check_info(info, path: Path) -> dict:
    """``info`` (parsed ``path``) when it has the shape the reader relies on; ReaderError naming ``path``
    otherwise: an object, ``features`` an object of objects, ``fps`` a finite number > 0, ``data_path``
    a string, ``video_path`` a string or null."""
    if not isinstance(info, dict):
        raise ReaderError(f"{path}: expected a JSON object, got {type(info).__name__} ({_short(info)})")
    features = info.get("features", {})
    if features is None:
        features = {}
    if not isinstance(features, dict):
        raise ReaderError(f"{path}: 'features' must be an object of features, got {type(features).__name__} "
                          f"({_short(features)})")
    for key, feat in features.items():
        if not isinstance(feat, dict):
            raise ReaderError(f"{path}: feature '{key}' must be an object (dtype, shape, names), got "
                              f"{type(feat).__name__} ({_short(feat)})")
    if "fps" not in info or "data_path" not in info:
        raise ReaderError(f"{path}: needs 'fps' and 'data_path'")
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise ReaderError(f"{path}: 'fps' must be a finite number > 0, got {_short(fps)}")
    for name in ("data_path", "video_path"):
        tmpl = info.get(name)
        if not (isinstance(tmpl, str) or (name == "video_path" and tmpl is None)):
            raise ReaderError(f"{path}: '{name}' must be a path template string, got {_short(tmpl)}")
    return info


def chunks_size(info: dict, path: Path) -> int:
    """info.json's ``chunks_size`` (episodes per chunk-NNN folder; LeRobot writes 1000), checked."""
    value = 1000 if info.get("chunks_size") is None else info["chunks_size"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReaderError(f"{path}: chunks_size is {value!r}; expected a positive integer (LeRobot writes 1000: "
                          f"episodes per data/chunk-NNN folder)")
    return value


def check_template(tmpl: str, name: str, major: int, path: Path) -> None:
    """ReaderError naming ``path`` and the template unless every ``{field:spec}`` of ``tmpl`` is one of
    the fields the reader formats it with, without conversion, attribute or index, with a spec LeRobot
    writes (``06d``, ``03d``, ``d`` or none)."""
    allowed = TEMPLATE_FIELDS[(major, name)]
    try:
        parts = list(string.Formatter().parse(tmpl))
    except ValueError as e:
        raise ReaderError(f"{path}: {name} {tmpl!r} is not a valid template ({e})") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in allowed:
            raise ReaderError(f"{path}: {name} {tmpl!r} has the field {{{field}}}; a LeRobot v{major} {name} "
                              f"may use {', '.join('{' + f + '}' for f in allowed)}")
        spec = spec or ""
        if conversion or not _plain_spec(spec):
            how = f"!{conversion}" if conversion else f":{spec}"
            raise ReaderError(f"{path}: {name} {tmpl!r} formats {{{field}}} with '{how}'; LeRobot writes specs like "
                              f"':06d' (a zero-padded width of at most {MAX_WIDTH} digits)")


def _plain_spec(spec: str) -> bool:
    m = re.fullmatch(r"(?:0?([0-9]{1,2}))?d", spec, flags=re.ASCII)
    return spec == "" or (m is not None and int(m.group(1) or 0) <= MAX_WIDTH)


def inside(root: Path, relative: str, what: str, path: Path) -> Path:
    """``root / relative`` when ``relative`` stays inside ``root``: not absolute, no ``..`` component.
    Symlinks are not resolved (the root's or the files'): Hugging Face's cache is a tree of links into
    its blob store, and a link the user made is the user's choice; only the template's own text is
    checked. ReaderError naming ``path`` and ``what`` otherwise."""
    parts = PurePosixPath(relative.replace("\\", "/"))
    if os.path.isabs(relative) or parts.is_absolute() or any(p == ".." for p in parts.parts) \
            or (len(relative) > 1 and relative[1] == ":"):
        raise ReaderError(f"{path}: {what} gives {relative!r}, which is outside the dataset root {root}; "
                          f"paths in a LeRobot set are relative to its root, without '..'")
    return root / relative


def check_fps(fps: float, times: list, path: Path) -> None:
    """The timestamps' rate against info.json's fps: the median step over every episode (robust to
    dropped frames and jitter). Off by more than FPS_FAIL: ReaderError naming ``path`` and the measured
    rate (the windows of ``indices=``/``delta_timestamps`` step by 1/fps, so a wrong fps silently
    changes what a window holds); more than FPS_WARN: a warning. Nothing when no episode has 2 rows."""
    steps = [np.diff(t) for t in times if len(t) > 1]
    if not steps:
        return
    step = float(np.median(np.concatenate(steps)))
    if not step > 0:
        return
    measured = 1.0 / step
    off = abs(measured - fps) / fps
    if off <= FPS_WARN:
        return
    msg = (f"{path}: fps is {fps:g} but the timestamps step by {step:.6g} s (median over "
           f"{sum(len(s) for s in steps)} steps): {measured:.4g} Hz")
    if off > FPS_FAIL:
        raise ReaderError(f"{msg}; windows would step by 1/{fps:g} s. Set 'fps' in {path} to the recording's "
                          f"rate ({measured:.4g})")
    warn(f"{msg}; windows step by 1/{fps:g} s")


def unlisted_videos(root: Path, features: dict, path: Path) -> None:
    """A warning naming the ``videos/`` folder when it holds files but info.json lists no video feature
    (a missing or empty ``features``): the cameras would be dropped without a word."""
    if any(f.get("dtype") == "video" for f in features.values()):
        return
    folder = root / "videos"
    if folder.is_dir() and next((p for p in folder.rglob("*") if p.is_file()), None) is not None:
        warn(f"{folder} holds videos but {path} lists no video feature "
             f"({'no features' if not features else 'features: ' + ', '.join(sorted(features))}); "
             f"the cameras are not loaded. Add them to 'features' with dtype 'video'")


def _short(value, n: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= n else r[:n] + "..."
