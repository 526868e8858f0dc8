"""LeRobot dataset reader (v2.0, v2.1, v3.0 layouts) with GR00T ``meta/modality.json`` sub-keys.

v2.x: ``meta/info.json``, ``meta/episodes.jsonl``, ``meta/tasks.jsonl``, ``meta/stats.json`` or
``meta/episodes_stats.jsonl``; one parquet per episode at ``info["data_path"]``; one video per
(episode, camera) at ``info["video_path"]``.
v3.0: ``meta/episodes/**/*.parquet`` (one row per episode: tasks, length, data/video file
indices, video from/to timestamps), ``meta/tasks.parquet``; data and video files each hold many
episodes.
Every file is opened read-only. Errors name the file.
"""

from __future__ import annotations

import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._common import Episodes, ReaderError, check_times, infer_kind, require
from .lerobot_images import decode_image_column, is_depth_map
from .lerobot_info import check_fps, check_info, check_template, chunks_size, inside, unlisted_videos
from .lerobot_stats import pooled_episode_stats, stats_json
from ..video import VideoSource

#: parquet columns that index rows rather than hold data (LeRobot bookkeeping)
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index")


@dataclass
class LeRobotMeta:
    """What LeRobot's ``LeRobotDatasetMetadata`` tells of a set, kept as ``Dataset.meta``:
    ``info`` (meta/info.json), ``fps``, ``features`` (info's), the first dataset-wide ``index`` of each loaded
    episode (by its ``episode_index``), and where the statistics came from."""

    info: dict
    fps: float
    features: dict
    first_index: dict = field(default_factory=dict)
    root: str = ""

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]


# ----------------------------------------------------------------------------
# metadata


def load_json(path: Path):
    """A metadata file (``meta/info.json``...) parsed, or ReaderError naming it."""
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ReaderError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReaderError(f"{path}: not valid JSON ({e})") from e


def load_jsonl(path: Path):
    """A JSON-lines metadata file (v2.x ``meta/episodes.jsonl``...) as a list of rows, or ReaderError naming
    the file and line."""
    rows = []
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append(json.loads(line))
    except FileNotFoundError:
        raise ReaderError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReaderError(f"{path}: line {n} is not valid JSON ({e})") from e
    return rows


def read_parquet(path: Path, columns=None):
    """A parquet file as a pyarrow Table (``columns``: all when None), or ReaderError naming it."""
    pq = require("pyarrow.parquet", "lerobot", "from_lerobot")
    if not path.is_file():
        raise ReaderError(f"{path}: parquet file not found")
    try:
        return pq.read_table(path, columns=columns, memory_map=False)
    except Exception as e:  # pyarrow.ArrowInvalid, OSError on truncated footers
        raise ReaderError(f"{path}: cannot read parquet file (corrupt or truncated?): {e}") from e


def _version(info: dict, path: Path) -> int:
    v = str(info.get("codebase_version", ""))
    try:
        major = int(v.lstrip("v").split(".")[0])
    except ValueError:
        raise ReaderError(f"{path}: unknown codebase_version {v!r}") from None
    if major not in (2, 3):
        raise ReaderError(f"{path}: LeRobot codebase_version {v} is not supported (v2.0, v2.1, v3.0 are)")
    return major


def _feature_names(feature: dict, dim: int | None):
    """The per-feature names of a LeRobot feature, in the forms LeRobot's ``info.json`` writes them:
    a flat list (``["x", "y"]``), a nested list (``[["x", "y"]]``, one list per feature axis of a
    ``[1, D]``-style shape, concatenated) or a dict of groups (``{"motors": [...]}``, or several
    groups ``{"arm": [...], "gripper": [...]}`` concatenated in the file's order). None when there are
    none, when they are not strings, or when their count differs from ``dim`` (image features name their
    axes, ``["height", "width", "channel"]``: not features)."""
    names = feature.get("names")

    def flat(x):
        if isinstance(x, str):
            return [x]
        if isinstance(x, dict):
            return [n for v in x.values() for n in flat(v)]
        if isinstance(x, (list, tuple)):
            return [n for v in x for n in flat(v)]
        raise TypeError(type(x).__name__)

    if not isinstance(names, (list, tuple, dict)) or not names:
        return None
    try:
        out = flat(names)
    except TypeError:                     # numbers, null: not names
        return None
    if not out or (dim is not None and len(out) != dim):
        return None
    return out


def read_stats(root: Path, features: dict | None = None) -> dict:
    """meta/stats.json (v2.0, v3.0, GR00T) or, failing that, meta/episodes_stats.jsonl (v2.1) pooled
    over episodes as LeRobot does; each statistic checked against ``features`` (info.json's) as
    lerobot_stats.py says. {} when neither file exists."""
    meta = Path(root) / "meta"
    if (meta / "stats.json").is_file():
        return stats_json(load_json(meta / "stats.json"), meta / "stats.json", features or {})
    if (meta / "episodes_stats.jsonl").is_file():
        path = meta / "episodes_stats.jsonl"
        return pooled_episode_stats(load_jsonl(path), path, features or {})
    return {}


def read_modality(root) -> dict:
    """GR00T meta/modality.json as {alias: (original_key, start, end)}; start/end None for
    whole-stream aliases (video, annotation). {} when the file is absent."""
    path = Path(root) / "meta" / "modality.json"
    if not path.is_file():
        return {}
    raw = load_json(path)
    out: dict[str, tuple[str, int | None, int | None]] = {}
    for group, default in (("state", "observation.state"), ("action", "action")):
        for sub, spec in (raw.get(group) or {}).items():
            try:
                start, end = int(spec["start"]), int(spec["end"])
            except (KeyError, TypeError, ValueError):
                raise ReaderError(f"{path}: {group}.{sub} needs integer 'start' and 'end'") from None
            out[f"{group}.{sub}"] = (spec.get("original_key", default), start, end)
    for sub, spec in (raw.get("video") or {}).items():
        out[f"video.{sub}"] = ((spec or {}).get("original_key", f"observation.images.{sub}"), None, None)
    for sub, spec in (raw.get("annotation") or {}).items():
        out[f"annotation.{sub}"] = ((spec or {}).get("original_key", f"annotation.{sub}"), None, None)
    return out


# ----------------------------------------------------------------------------
# parquet columns to arrays


def _column_to_numpy(col, name: str, shape, where: str):
    """One arrow column to [n, *feature_shape]. Lists become dense dims (all rows equal length)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    if col.null_count:
        raise ReaderError(f"{where}: column '{name}' has {col.null_count} null values")
    dims = []
    arr = col
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        if pa.types.is_fixed_size_list(arr.type):
            width = arr.type.list_size
        else:
            lens = np.diff(arr.offsets.to_numpy())
            width = int(lens[0]) if len(lens) else 0
            if len(lens) and np.any(lens != width):
                bad = int(np.flatnonzero(lens != width)[0])
                raise ReaderError(f"{where}: column '{name}' row {bad} has {lens[bad]} values, row 0 has {width}")
        dims.append(width)
        arr = arr.flatten()
        if arr.null_count:
            raise ReaderError(f"{where}: column '{name}' has null elements")
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        values = np.asarray(arr.to_pylist(), dtype=str)
    elif pa.types.is_boolean(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        values = arr.to_numpy(zero_copy_only=False)
    else:
        return None
    values = values.reshape((n, *dims))
    if shape and len(shape) > 1 and values.ndim == 2 and int(np.prod(shape)) == values.shape[1]:
        values = values.reshape((n, *shape))  # nested features stored flat
    return values


# ----------------------------------------------------------------------------
# the reader


def read_lerobot(path, *, load_video: bool = True, episodes=None, modality_subkeys: bool = True,
                 annotations: str = "text", max_workers: int | None = None, missing_files: str = "error",
                 missing_videos: str = "error") -> Episodes:
    """Read a LeRobot v2.x/v3.0 dataset's rows (optionally GR00T-flavoured) and locate its videos.

    See ``robocache.Dataset.from_lerobot`` for the parameters; this returns the ``Episodes`` (the keyword
    arguments of ``Dataset.from_episodes``) instead of a Dataset. Videos are never decoded here: with
    ``load_video``, ``extra["videos"]`` maps each video key to ``{"sources": [one robocache.video.VideoSource
    per episode], "fps": float, "rows": [parquet rows per episode]}`` (v2.x: whole files; v3.0: each episode's
    ``[from_timestamp, to_timestamp)`` span of a shared mp4), which ``robocache.frames`` turns into a frame
    store. v3.0 rows are found by the dataset-wide index (``episode_index``/``index`` columns), whatever data
    file the episode metadata names.
    """
    require("pyarrow", "lerobot", "from_lerobot")
    root, info_path, info, major = open_info(path)
    if annotations not in ("text", "index"):
        raise ValueError(f"annotations must be 'text' or 'index', got {annotations!r}")
    fps, data_tmpl = float(info["fps"]), info["data_path"]   # checked by open_info
    features = info.get("features") or {}
    if load_video:
        unlisted_videos(root, features, info_path)
    chunks = chunks_size(info, info_path)
    workers = max_workers or min(16, os.cpu_count() or 1)

    # --- episode table: index, length, tasks, where its rows are
    table = episode_table(root, info, major, data_tmpl, chunks)
    selected = _select(root, table, episodes)
    if not selected:
        raise ReaderError(f"{root}: the dataset lists no episodes")
    selected, cameras, skipped = _present(root, info, table, selected, major, chunks, load_video, missing_files,
                                          missing_videos)

    # --- tabular data: one parquet read per file, in threads (pyarrow releases the GIL)
    rows = _episode_rows(root, table, selected, major, workers)
    out_eps, tasks = [], []
    kinds: dict[str, str] = {}
    rates: dict[str, float] = {}
    names: dict[str, list | None] = {}
    first_index = {}  # episode -> its first row's dataset-wide index (LeRobot's `index` column)
    all_times = []
    for e in selected:
        t, f = rows[e]
        where = f"{f}, episode {e}"
        # a file of another tool (with a timestamp of its own) would fail the fps check instead
        lerobot = [c for c in BOOKKEEPING if c in t.column_names]
        if "timestamp" not in lerobot or lerobot == ["timestamp"]:
            missing = [c for c in BOOKKEEPING if c not in lerobot]
            foreign = f"; it has {t.column_names[:8]}: this does not look like a LeRobot data file"
            raise ReaderError(f"{f}: no {', '.join(map(repr, missing))} column{'s' * (len(missing) > 1)}"
                              + (foreign if len(lerobot) < 2 else ""))
        times = _column_to_numpy(t.column("timestamp"), "timestamp", None, where).astype(np.float64)
        check_times(times, where)
        all_times.append(times)
        if major == 2 and table[e]["length"] >= 0 and table[e]["length"] != len(times):
            warnings.warn(f"{where}: {len(times)} rows, the episode metadata says {table[e]['length']}",
                          stacklevel=2)
        streams = {}
        for name in t.column_names:
            if name in BOOKKEEPING:
                continue
            feat = features.get(name, {})
            if feat.get("dtype") == "image":
                values = decode_image_column(t.column(name), name, feat, where)
                kinds.setdefault(name, "image")   # whatever its size: infer_kind wants 8 x 8 at least
            else:
                values = _column_to_numpy(t.column(name), name, feat.get("shape"), where)
            if values is None:
                warnings.warn(f"{f}: column '{name}' of type {t.schema.field(name).type} is not supported; skipped",
                              stacklevel=2)
                continue
            streams[name] = (values, times)
            kinds.setdefault(name, infer_kind(values))
            rates.setdefault(name, fps)
            if name not in names:
                names[name] = _feature_names(feat, int(np.prod(values.shape[1:])))
        out_eps.append(streams)
        tasks.append(table[e]["tasks"])
        if "index" in t.column_names and t.num_rows:
            first_index[e] = int(t.column("index")[0].as_py())
    check_fps(fps, all_times, info_path)

    # --- GR00T modality sub-keys: sliced copies sharing the parent's times
    aliases = read_modality(root)
    stats = read_stats(root, features)
    if modality_subkeys:
        for alias, (orig, start, end) in aliases.items():
            if start is None or orig not in out_eps[0]:
                continue
            dim = out_eps[0][orig][0].shape[-1]
            if not 0 <= start < end <= dim:
                raise ReaderError(f"{root / 'meta' / 'modality.json'}: {alias} slice [{start}, {end}) is outside "
                                  f"'{orig}' of width {dim}")
            for streams in out_eps:
                v, tt = streams[orig]
                streams[alias] = (np.ascontiguousarray(v[:, start:end]), tt)
            kinds[alias], rates[alias] = kinds[orig], rates[orig]
            orig_names = names.get(orig)
            if orig_names:
                names[alias] = orig_names[start:end]
            if orig in stats:
                stats[alias] = {s: a[start:end] if a.ndim == 1 and a.shape[0] == dim else a
                                for s, a in stats[orig].items()}

    # --- GR00T annotation keys: task-index columns as text streams (the task strings)
    task_table = _task_table(root, major)
    if annotations == "text" and out_eps:
        raw = [dict(streams) for streams in out_eps]  # the integer columns, before aliases replace them
        for alias, (orig, start, end) in aliases.items():
            if start is not None or not alias.startswith("annotation.") or orig not in raw[0]:
                continue
            if raw[0][orig][0].dtype.kind not in "iu" or raw[0][orig][0].ndim != 1:
                continue
            for e, streams, cols in zip(selected, out_eps, raw):
                idx, tt = cols[orig]
                unknown = np.setdiff1d(idx, list(task_table))
                if len(unknown):
                    raise ReaderError(f"{rows[e][1]}, episode {e}: column '{orig}' holds task index "
                                      f"{int(unknown[0])}, which meta/tasks is missing")
                streams[alias] = (np.array([task_table[int(i)] for i in idx], dtype=str), tt)
            kinds[alias], rates[alias] = "text", rates[orig]

    # --- videos: where each episode's frames are (decoded by robocache.frames, never here)
    sources = {}
    if load_video:
        sources = _video_sources(root, info, table, selected, cameras, major, chunks, fps, out_eps)
        for key, v in sources.items():
            kinds[key], rates[key] = "image", v["fps"]
            names.pop(key, None)

    present_keys = set(out_eps[0]) if out_eps else set()
    for streams in out_eps[1:]:
        if set(streams) != present_keys:
            raise ReaderError(f"{root}: episodes have different columns: {sorted(set(streams) ^ present_keys)}")
    return Episodes(
        episodes=out_eps, kinds=kinds, rates=rates, tasks=tasks,
        stats={k: v for k, v in stats.items() if (k in present_keys or k in sources) and kinds.get(k) != "text"} or None,
        feature_names={k: v for k, v in names.items() if v} or None,
        source=str(root),
        extra={"version": info.get("codebase_version"), "episode_index": selected, "aliases": aliases,
               "skipped_videos": skipped, "fps": fps, "videos": sources, "task_table": task_table,
               "meta": LeRobotMeta(info=info, fps=fps, features=dict(features), first_index=first_index,
                                   root=str(root)),
               "files": [str(rows[e][1]) for e in selected]})


def _video_sources(root, info, table, selected, cameras, major, chunks_size, fps, out_eps) -> dict:
    """``{key: {"sources", "fps", "rows"}}``: the source of each camera of ``cameras`` (whose files
    ``_present`` found) per selected episode."""
    out = {}
    features = info.get("features") or {}
    for key in cameras:
        paths = [video_file(root, info, table, e, key, major, chunks_size) for e in selected]
        feat = features[key]
        vfps = float((feat.get("video_info") or feat.get("info") or {}).get("video.fps") or fps)
        srcs = []
        for e, p in zip(selected, paths):
            if major == 2:
                srcs.append(VideoSource(str(p)))
                continue
            row = table[e]["row"]
            try:
                t0, t1 = float(row[f"videos/{key}/from_timestamp"]), float(row[f"videos/{key}/to_timestamp"])
            except (KeyError, TypeError, ValueError):
                raise ReaderError(f"{root / 'meta' / 'episodes'}: episode {e} has no videos/{key}/from_timestamp "
                                  f"and to_timestamp") from None
            try:
                srcs.append(VideoSource(str(p), start=t0, end=t1))
            except ValueError as err:
                raise ReaderError(f"{root / 'meta' / 'episodes'}, episode {e}: {err}") from None
        rows = [len(next(iter(s.values()))[1]) if s else 0 for s in out_eps]
        out[key] = {"sources": srcs, "fps": vfps, "rows": rows}
    return out


def video_file(root: Path, info: dict, table: dict, e: int, key: str, major: int, chunks_size: int) -> Path:
    """Where episode ``e``'s video of camera ``key`` is (v2.x: its own file; v3.0: the shared file its
    ``videos/<key>/chunk_index`` and ``file_index`` name), whether or not it exists."""
    tmpl, info_path = info["video_path"], root / "meta" / "info.json"
    what = f"video_path for feature '{key}', episode {e}"
    if major == 2:
        return inside(root, tmpl.format(episode_chunk=e // chunks_size, video_key=key, episode_index=e), what,
                      info_path)
    row = table[e]["row"]
    try:
        rel = tmpl.format(video_key=key, chunk_index=int(row[f"videos/{key}/chunk_index"]),
                          file_index=int(row[f"videos/{key}/file_index"]))
    except (KeyError, TypeError, ValueError):
        raise ReaderError(f"{root / 'meta' / 'episodes'}: episode {e} has no videos/{key}/chunk_index and "
                          f"file_index") from None
    return inside(root, rel, what, info_path)


def _episode_rows(root: Path, table: dict, selected: list, major: int, workers: int) -> dict:
    """{episode: (its rows as an arrow table, the file they came from)}. v2.x: the episode's own file. v3.0:
    the rows whose ``episode_index`` is the episode's (or, without that column, whose ``index`` is in
    ``[dataset_from_index, dataset_to_index)``), sorted by ``index``, from the data file the metadata names
    and, where they are not all there, from every other data file (LeRobot 0.4.0-0.4.4's v2.1 -> v3.0
    converter wrote the wrong ``data/file_index`` for the first episode of every data file after the first,
    lerobot#2401: sets converted with those releases exist, and LeRobot's own reader finds the rows)."""
    named = sorted({table[e]["data"] for e in selected})
    tables = _read_all([f for f in named if Path(f).is_file()], workers)
    if major == 2:
        return {e: (tables[table[e]["data"]], table[e]["data"]) for e in selected}
    want = {e: expected_rows(table[e]) for e in selected}
    found = collect_rows(tables, selected, table)
    short = [e for e in selected if sum(len(i) for _, i in found.get(e, [])) < max(want[e], 1)]
    if short:
        others = [f for f in sorted((root / "data").glob("**/*.parquet")) if f not in tables]
        holders = [f for f in others if _holds_any(f, short, table)]
        tables.update(_read_all(holders, workers))
        found = collect_rows(tables, selected, table)
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

    out = {}
    for e in selected:
        pieces = found.get(e, [])
        n = sum(len(i) for _, i in pieces)
        if n == 0 or (want[e] >= 0 and n != want[e]):
            raise ReaderError(f"{table[e]['data']}, episode {e}: {n} rows in the data files, the episode metadata "
                              f"says {want[e]} (dataset_from_index {table[e]['row'].get('dataset_from_index')} .. "
                              f"dataset_to_index {table[e]['row'].get('dataset_to_index')})")
        files = [f for f, _ in pieces]
        if table[e]["data"] not in files:
            warnings.warn(f"{root}: episode {e}'s rows are in {files[0]}, not in {table[e]['data']} as its "
                          f"metadata says (data/file_index written wrong by LeRobot 0.4.0-0.4.4's v2.1 -> v3.0 "
                          f"converter, lerobot#2401); read from where they are", stacklevel=4)
        t = pa.concat_tables([tables[f].take(i) for f, i in pieces]) if len(pieces) > 1 else \
            tables[pieces[0][0]].take(pieces[0][1])
        if "index" in t.column_names and len(pieces) > 1:
            t = t.take(np.argsort(t.column("index").to_numpy(), kind="stable"))
        out[e] = (t, files[0])
    return out


def expected_rows(entry: dict) -> int:
    """The rows an episode-table entry promises: ``dataset_to_index - dataset_from_index`` (v3.0), else its
    ``length`` (-1: none listed)."""
    row = entry.get("row") or {}
    lo, hi = row.get("dataset_from_index"), row.get("dataset_to_index")
    if lo is not None and hi is not None:
        return int(hi) - int(lo)
    return entry["length"]


def _row_keys(t, path) -> tuple[str, np.ndarray]:
    """The column a v3.0 data file's rows are located by, and its values."""
    for col in ("episode_index", "index"):
        if col in t.column_names:
            return col, t.column(col).to_numpy()
    raise ReaderError(f"{path}: no 'episode_index' or 'index' column to find episodes' rows in")


def collect_rows(tables: dict, selected: list, table: dict) -> dict:
    """{episode: [(file, row indices)]} over every table read so far, the metadata's file first."""
    found: dict = {}
    wanted = set(selected)
    for f, t in sorted(tables.items(), key=lambda kv: str(kv[0])):
        col, keys = _row_keys(t, f)
        if col == "episode_index":
            order = np.argsort(keys, kind="stable")
            uniq, first = np.unique(keys[order], return_index=True)
            bounds = np.append(first, len(keys))
            for k, e in enumerate(uniq.tolist()):
                if e in wanted:
                    found.setdefault(e, []).append((f, order[bounds[k]:bounds[k + 1]]))
        else:
            for e in selected:
                row = table[e].get("row") or {}
                lo, hi = row.get("dataset_from_index"), row.get("dataset_to_index")
                if lo is None or hi is None:
                    raise ReaderError(f"{f}: no 'episode_index' column and no dataset_from_index/dataset_to_index "
                                      f"for episode {e} to find its rows by")
                idx = np.flatnonzero((keys >= int(lo)) & (keys < int(hi)))
                if len(idx):
                    found.setdefault(e, []).append((f, idx))
    for e, pieces in found.items():
        pieces.sort(key=lambda p: p[0] != table[e]["data"])
    return found


def _holds_any(path: Path, episodes: list, table: dict) -> bool:
    """Whether a data file holds rows of any of `episodes` (its key column alone is read)."""
    pq = require("pyarrow.parquet", "lerobot", "from_lerobot")
    try:
        names = pq.read_schema(path).names
        col = "episode_index" if "episode_index" in names else "index"
        keys = pq.read_table(path, columns=[col], memory_map=False).column(col).to_numpy()
    except Exception as e:
        raise ReaderError(f"{path}: cannot read parquet file (corrupt or truncated?): {e}") from e
    if col == "episode_index":
        return bool(np.isin(keys, episodes).any())
    for ep in episodes:
        row = table[ep].get("row") or {}
        if row.get("dataset_from_index") is not None and \
                ((keys >= int(row["dataset_from_index"])) & (keys < int(row["dataset_to_index"]))).any():
            return True
    return False


def _read_all(files, workers: int) -> dict:
    if not files:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(files)))) as pool:
        return dict(zip(files, pool.map(read_parquet, files)))


def lerobot_home() -> Path:
    """LeRobot's folder of downloaded sets, as LeRobot reckons it: ``$HF_LEROBOT_HOME``, else
    ``$HF_HOME/lerobot`` (``$HF_HOME``: else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``)."""
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.environ.get("HF_LEROBOT_HOME") or Path(os.path.expandvars(os.path.expanduser(hf_home))) / "lerobot"
                ).expanduser()


def is_repo_id(path) -> bool:
    """Whether ``path`` reads as a Hub repo id (``owner/name``: one slash, no leading ``/``, ``.`` or ``~``)."""
    text = os.fspath(path)
    parts = text.split("/") if isinstance(text, str) else []
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~")) and ":" not in text


def lerobot_root(path) -> Path:
    """The folder of the set ``path`` names: ``path`` itself when it is a folder; else, for a Hub repo id
    (``"lerobot/pusht"``), LeRobot's downloaded copy ``lerobot_home() / repo_id``, as ``LeRobotDataset(repo_id)``
    finds it. Neither: ReaderError saying how to fetch the set (a URL goes through robocache.remote first)."""
    root = Path(os.fspath(path))
    if root.is_dir():
        return root
    if is_repo_id(path):
        text = os.fspath(path)
        cached = lerobot_home() / text
        if cached.is_dir():
            return cached
        raise ReaderError(f"{text}: no such dataset folder, nor LeRobot's downloaded copy {cached}. Pass the "
                          f"Hub's URL, `hf://datasets/{text}`, to fetch only the episodes this rank loads "
                          f"(docs/remote.md), fetch the set once (`hf download {text} --repo-type dataset "
                          f"--local-dir {cached}`), or pass the folder's path")
    raise ReaderError(f"{root}: no such dataset folder")


def open_info(path):
    """``(root, info_path, info, major version)`` of a LeRobot set folder, or ReaderError."""
    root = lerobot_root(path)
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise ReaderError(f"{info_path}: file not found; {root} is not a LeRobot dataset (meta/info.json is missing)")
    info = check_info(load_json(info_path), info_path)
    major = _version(info, info_path)
    for name in ("data_path", "video_path"):
        if info.get(name) is not None:
            check_template(info[name], name, major, info_path)
    return root, info_path, info, major


def _select(root: Path, table: dict, episodes) -> list:
    """The episodes asked for (all when None), each checked to be in the table."""
    if episodes is None:
        return sorted(table)
    if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__iter__"):
        raise TypeError(f"episodes={episodes!r} ({type(episodes).__name__}): expected a list of episode indices "
                        f"(e.g. [{episodes!r}])")
    try:
        selected = [int(e.__index__()) for e in episodes]
    except (AttributeError, TypeError):
        raise TypeError(f"episodes must hold integer episode indices, got {list(episodes)[:8]!r}") from None
    twice = sorted({e for e in selected if selected.count(e) > 1})
    if twice:
        raise ValueError(f"episodes lists episode {twice[0]} more than once ({twice[:8]} repeat): each episode "
                         f"is loaded once; sample it more often with a weighted sampler")
    missing = [e for e in selected if e not in table]
    if missing:
        raise ValueError(f"episodes {missing} are not in {root} (it has {len(table)}: {sorted(table)[:10]}...)")
    return selected


def episode_table(root: Path, info: dict, major: int, data_tmpl: str, chunks_size: int) -> dict:
    """{episode: {"length", "tasks", "data" (its parquet file), "row" (v3: the metadata row)}} from the
    episode metadata (v2.x episodes.jsonl, v3.0 meta/episodes parquet files)."""
    info_path = root / "meta" / "info.json"
    if major == 2:
        table = {}
        for n, r in enumerate(load_jsonl(root / "meta" / "episodes.jsonl"), 1):
            e = _episode_index(r, root / "meta" / "episodes.jsonl", n)
            table[e] = {"length": int(r.get("length", -1)), "tasks": list(r.get("tasks") or []),
                        "data": inside(root, data_tmpl.format(episode_chunk=e // chunks_size, episode_index=e),
                                       f"data_path for episode {e}", info_path)}
    else:
        ep_files = sorted((root / "meta" / "episodes").glob("**/*.parquet"))
        if not ep_files:
            raise ReaderError(f"{root / 'meta' / 'episodes'}: no episode metadata parquet files (LeRobot v3.0)")
        table = {}
        for f in ep_files:
            t = read_parquet(f).to_pydict()
            for i, e in enumerate(t["episode_index"]):
                row = {k: v[i] for k, v in t.items()}
                table[int(e)] = {"length": int(row.get("length", -1)), "tasks": list(row.get("tasks") or []),
                                 "data": inside(root, data_tmpl.format(chunk_index=int(row["data/chunk_index"]),
                                                                       file_index=int(row["data/file_index"])),
                                                f"data_path for episode {e}", info_path),
                                 "row": row}
    return table


def _episode_index(row, path: Path, line: int) -> int:
    """A v2.x episodes.jsonl row's ``episode_index`` (a non-negative integer), or ReaderError naming the
    file and line."""
    e = row.get("episode_index") if isinstance(row, dict) else None
    if isinstance(e, bool) or not isinstance(e, int) or e < 0:
        got = "no 'episode_index'" if e is None else f"episode_index {e!r}"
        raise ReaderError(f"{path}: entry {line} has {got}; each line is an object with a non-negative integer "
                          f"'episode_index'")
    return e


def episode_weights(path, *, episodes=None, video_resize=None):
    """``(episodes, rows, weights)`` from the metadata alone, before anything is read: each episode's
    rows (the length its metadata lists) and rows x the pixels of one frame of every video key (rows
    when there is none), what ``shard_episodes`` balances the ranks by."""
    root, _, info, major = open_info(path)
    table = episode_table(root, info, major, info.get("data_path", ""), int(info.get("chunks_size") or 1000))
    ids = _select(root, table, episodes)
    rows = np.array([table[e]["length"] for e in ids], np.int64)
    if (rows < 0).any():
        raise ReaderError(f"{root}: the episode metadata lists no length for episodes "
                          f"{[e for e, n in zip(ids, rows) if n < 0][:10]}; shard_episodes needs them")
    pixels = 0
    for feat in (info.get("features") or {}).values():
        if feat.get("dtype") == "video":
            shape, names = list(feat.get("shape") or []), list(feat.get("names") or [])
            if video_resize is not None:
                h, w = video_resize
            elif "height" in names and "width" in names:
                h, w = shape[names.index("height")], shape[names.index("width")]
            else:
                h, w = (shape + [1, 1])[:2]
            pixels += int(h) * int(w)
    return ids, rows, rows * max(pixels, 1)


def unread_cameras(root: Path, features: dict) -> set:
    """The video features of ``features`` that GR00T's loader never reads: with a ``meta/modality.json`` naming
    the set's cameras, those it does not name. Only these may lack every file without an error: GR00T's
    PickNPlace lists a second camera (``observation.images.egoview``) that it never shipped and nothing reads."""
    named = {orig for alias, (orig, start, _) in read_modality(root).items()
             if start is None and alias.startswith("video.")}
    if not named:
        return set()
    return {k for k, f in features.items() if f.get("dtype") == "video" and k not in named}


def _present(root: Path, info: dict, table: dict, selected: list, major: int, chunks_size: int, load_video: bool,
             missing_files: str, missing_videos: str) -> tuple[list, list, list]:
    """``(episodes, cameras, skipped cameras)``: the selected episodes whose data (and cameras' video) files
    exist, the video keys to load, and the listed ones left out. A listed camera without its video is an error
    naming the camera, the episodes and the file: ``missing_videos="drop"`` loads without it (a warning).
    Sets published partly (meta lists more episodes than the files hold) load with ``episodes=`` or
    ``missing_files="skip"``."""
    if missing_files not in ("error", "skip"):
        raise ValueError(f"missing_files must be 'error' or 'skip', got {missing_files!r}")
    if missing_videos not in ("error", "drop"):
        raise ValueError(f"missing_videos must be 'error' or 'drop', got {missing_videos!r}")
    features = info.get("features") or {}
    listed = [k for k, f in features.items() if f.get("dtype") == "video"] if load_video else []
    if listed and not info.get("video_path"):
        raise ReaderError(f"{root / 'meta' / 'info.json'}: video feature '{listed[0]}' but no 'video_path'")
    depth = [k for k in listed if is_depth_map(features[k])]
    if depth:
        # LeRobot 0.6 encodes depth as 12-bit codes it dequantizes after decoding: read as colour frames they
        # would be wrong values, not an error
        raise ReaderError(f"{root / 'meta' / 'info.json'}: camera '{depth[0]}' is a depth-map video "
                          f"(info.is_depth_map), which robocache does not decode; load the set with "
                          f"load_video=False, or store the depth maps as image features (dtype 'image')")

    def vpath(e, k):
        return video_file(root, info, table, e, k, major, chunks_size)

    unread = unread_cameras(root, features)
    gone = {k: [e for e in selected if not vpath(e, k).is_file()] for k in listed}
    cameras, skipped = [], []
    for k in listed:
        es = gone[k]
        never = len(es) == len(selected)          # no episode has it
        unshipped = never and k in unread         # listed, never shipped, read by nothing
        if not es:
            cameras.append(k)
        elif unshipped or missing_videos == "drop":
            skipped.append(k)
            if unshipped:
                msg = (f"{root}: camera '{k}' is listed in meta/info.json but none of its files exist (e.g. "
                       f"{vpath(es[0], k)}) and meta/modality.json does not name it; left out")
            else:
                msg = (f"{vpath(es[0], k)}: video file not found; camera '{k}' is left out (missing_videos='drop'): "
                       f"{len(es)} of {len(selected)} episodes lack its video")
            warnings.warn(msg, stacklevel=3)
        elif never:
            raise ReaderError(f"{vpath(es[0], k)}: video file not found; camera '{k}' is listed in meta/info.json "
                              f"but none of the {len(selected)} episodes has its video (episodes {es[:5]}"
                              f"{'...' if len(es) > 5 else ''}). Pass missing_videos='drop' to load without "
                              f"camera '{k}', or load_video=False to load no video")
        else:
            cameras.append(k)                     # some episodes lack it: said with the episodes below
    lost = {}
    for e in selected:
        if not Path(table[e]["data"]).is_file():
            lost[e] = (table[e]["data"], "parquet file not found")
            continue
        k = next((k for k in cameras if e in gone[k]), None)
        if k is not None:
            lost[e] = (vpath(e, k), f"video file not found for camera '{k}'")
    if not lost:
        return selected, cameras, skipped
    keep = [e for e in selected if e not in lost]
    first, what = next(iter(lost.values()))
    if missing_files == "skip":
        if not keep:
            raise ReaderError(f"{first}: {what}; none of the {len(selected)} selected episodes has its files")
        warnings.warn(f"{root}: skipping {len(lost)} of {len(selected)} episodes whose files are missing "
                      f"(first: {first})", stacklevel=3)
        return keep, cameras, skipped
    shown = f"{keep[:20]}" + ("..." if len(keep) > 20 else "")
    drop = "" if what.startswith("parquet") else ", every episode without the camera with missing_videos='drop'"
    raise ReaderError(f"{first}: {what} ({len(lost)} of {len(selected)} episodes lack their files, e.g. "
                      f"episodes {sorted(lost)[:5]}); load the {len(keep)} present ones with episodes={shown}{drop}, "
                      f"or pass missing_files='skip' to skip the others with a warning")


def _task_table(root: Path, major: int) -> dict[int, str]:
    """task_index -> task string (tasks.jsonl in v2, tasks.parquet in v3); {} when absent."""
    if major == 2:
        p = root / "meta" / "tasks.jsonl"
        return {int(r["task_index"]): r["task"] for r in load_jsonl(p)} if p.is_file() else {}
    p = root / "meta" / "tasks.parquet"
    if not p.is_file():
        return {}
    t = read_parquet(p).to_pydict()
    col = "task" if "task" in t else next((k for k in t if k != "task_index"), None)
    return {int(i): s for i, s in zip(t["task_index"], t[col])} if col else {}
