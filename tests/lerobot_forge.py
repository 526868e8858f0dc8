"""A small LeRobot v2.1 dataset written on the fly (no video): what a user's own set looks like to
``Dataset.from_lerobot``, with the bookkeeping columns LeRobot writes and feature names in any of the
forms LeRobot's ``info.json`` uses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

TASKS = ["pick the cube", "place the cube", "open the drawer"]


def write_lerobot(root: Path, rng, lengths=(6, 9, 5, 7), fps=10.0, state_names=None, action_names=None,
                  episode_tasks=None) -> dict:
    """Episodes 0..E-1 of ``lengths`` rows: ``observation.state`` [3] float32, ``action`` [2] float32,
    ``timestamp``, ``frame_index``, ``episode_index``, ``index`` (global), ``task_index`` (LeRobot's).
    Returns ``{"state": [per-episode arrays], "action": [...], "task_index": [per episode]}``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    episode_tasks = episode_tasks or [[TASKS[e % 3]] for e in range(len(lengths))]
    feats = {"observation.state": {"dtype": "float32", "shape": [3]},
             "action": {"dtype": "float32", "shape": [2]},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None},
             "frame_index": {"dtype": "int64", "shape": [1], "names": None},
             "episode_index": {"dtype": "int64", "shape": [1], "names": None},
             "index": {"dtype": "int64", "shape": [1], "names": None},
             "task_index": {"dtype": "int64", "shape": [1], "names": None}}
    if state_names is not None:
        feats["observation.state"]["names"] = state_names
    if action_names is not None:
        feats["action"]["names"] = action_names
    info = {"codebase_version": "v2.1", "fps": fps, "chunks_size": 1000, "total_episodes": len(lengths),
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": None, "features": feats}
    (root / "meta").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                   for i, t in enumerate(TASKS)))
    (root / "meta/episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": episode_tasks[e], "length": n}) + "\n"
        for e, n in enumerate(lengths)))
    out = {"state": [], "action": [], "task_index": []}
    g = 0
    for e, n in enumerate(lengths):
        st = rng.standard_normal((n, 3)).astype(np.float32)
        ac = rng.standard_normal((n, 2)).astype(np.float32)
        ti = TASKS.index(episode_tasks[e][0])
        pq.write_table(pa.table({
            "observation.state": pa.array(list(st), type=pa.list_(pa.float32())),
            "action": pa.array(list(ac), type=pa.list_(pa.float32())),
            "timestamp": (np.arange(n) / fps).astype(np.float32), "frame_index": np.arange(n),
            "episode_index": np.full(n, e), "index": np.arange(g, g + n), "task_index": np.full(n, ti)}),
            root / f"data/chunk-000/episode_{e:06d}.parquet")
        out["state"].append(st)
        out["action"].append(ac)
        out["task_index"].append(ti)
        g += n
    return out


# ---------------------------------------------------------------------------------------------
# LeRobot v3.0 from a v2.1 set, as LeRobot's own converter makes it


def convert_v21_to_v30(src: Path, dst: Path, episodes, *, per_data_file: int = 3, per_video_file: int = 4,
                       wrong_file_index: bool = False, tasks=None) -> dict:
    """A LeRobot v3.0 copy of ``episodes`` of the v2.1 set at ``src``, made as LeRobot's
    ``convert_dataset_v21_to_v30`` makes one: the episodes' parquet rows concatenated into data files of
    ``per_data_file`` episodes and their mp4s concatenated, packets copied without re-encoding, into video
    files of ``per_video_file`` episodes (so every frame decodes bit for bit as in v2.1), an episode's frames
    the span ``[from_timestamp, to_timestamp)`` of its file; ``meta/episodes``, ``meta/tasks.parquet`` and
    ``meta/stats.json`` (the v2.1 per-episode stats pooled). Episodes are renumbered 0..E-1 in the order
    given, as the converter does for a subset.

    ``wrong_file_index``: the metadata of the first episode of every data file after the first names the
    previous data file, as LeRobot 0.4.0-0.4.4's converter wrote it (lerobot#2401). ``tasks``: per new
    episode, a list of per-row task strings (a task change mid-episode) instead of the v2.1 tasks.
    Returns ``{"lengths", "video_files", "data_files", "spans"}``.
    """
    av = pytest.importorskip("av")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from robocache.readers import read_stats

    src, dst = Path(src), Path(dst)
    info = json.loads((src / "meta/info.json").read_text())
    fps = float(info["fps"])
    v21_tasks = [json.loads(x) for x in (src / "meta/tasks.jsonl").read_text().splitlines() if x.strip()]
    task_text = {int(t["task_index"]): t["task"] for t in v21_tasks}
    video_keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    (dst / "meta/episodes/chunk-000").mkdir(parents=True)
    (dst / "data/chunk-000").mkdir(parents=True)
    tables, lengths = [], []
    for new, e in enumerate(episodes):
        t = pq.read_table(src / info["data_path"].format(episode_chunk=0, episode_index=e))
        lengths.append(t.num_rows)
        tables.append(t)
    # tasks: the v2.1 ones, or per-row ones given; a table of every text, indexed in first-seen order
    row_tasks = tasks or [[task_text[int(i)] for i in t.column("task_index").to_pylist()] for t in tables]
    texts = list(dict.fromkeys(x for rows in row_tasks for x in rows))
    g = 0
    for new, t in enumerate(tables):
        n = t.num_rows
        for name, col in (("episode_index", np.full(n, new)), ("index", np.arange(g, g + n)),
                          ("task_index", np.array([texts.index(x) for x in row_tasks[new]]))):
            t = t.set_column(t.schema.get_field_index(name), name, pa.array(col, pa.int64()))
        tables[new] = t
        g += n
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    data_file = [new // per_data_file for new in range(len(tables))]
    for f in sorted(set(data_file)):
        pq.write_table(pa.concat_tables([t for t, d in zip(tables, data_file) if d == f]),
                       dst / f"data/chunk-000/file-{f:03d}.parquet")
    meta = {"episode_index": [], "tasks": [], "length": [], "data/chunk_index": [], "data/file_index": [],
            "dataset_from_index": [], "dataset_to_index": []}
    spans = {}
    for key in video_keys:
        (dst / f"videos/{key}/chunk-000").mkdir(parents=True)
        spans[key] = _concat_videos(av, [src / info["video_path"].format(episode_chunk=0, video_key=key,
                                                                          episode_index=e) for e in episodes],
                                    dst / f"videos/{key}/chunk-000", per_video_file, fps)
        for col in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            meta[f"videos/{key}/{col}"] = []
    for new in range(len(tables)):
        d = data_file[new]
        first_of_file = new > 0 and data_file[new - 1] != d
        meta["episode_index"].append(new)
        meta["tasks"].append(list(dict.fromkeys(row_tasks[new])))
        meta["length"].append(lengths[new])
        meta["data/chunk_index"].append(0)
        meta["data/file_index"].append(d - 1 if wrong_file_index and first_of_file else d)
        meta["dataset_from_index"].append(int(starts[new]))
        meta["dataset_to_index"].append(int(starts[new + 1]))
        for key in video_keys:
            f, t0, t1 = spans[key][new]
            meta[f"videos/{key}/chunk_index"].append(0)
            meta[f"videos/{key}/file_index"].append(f)
            meta[f"videos/{key}/from_timestamp"].append(t0)
            meta[f"videos/{key}/to_timestamp"].append(t1)
    pq.write_table(pa.table(meta), dst / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": list(range(len(texts))), "task": texts}), dst / "meta/tasks.parquet")
    stats = read_stats(src)
    (dst / "meta/stats.json").write_text(json.dumps({k: {s: np.asarray(v).tolist() for s, v in st.items()}
                                                      for k, st in stats.items()}))
    for key in video_keys:
        info["features"][key].setdefault("info", info["features"][key].get("video_info", {}))
    info.update({"codebase_version": "v3.0", "total_episodes": len(tables), "total_frames": int(starts[-1]),
                 "total_tasks": len(texts), "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
                 "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                 "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
                 "splits": {"train": f"0:{len(tables)}"}})
    for k in ("total_videos", "total_chunks"):
        info.pop(k, None)
    (dst / "meta/info.json").write_text(json.dumps(info, indent=2))
    return {"lengths": lengths, "data_files": sorted(set(data_file)), "spans": spans}


def _concat_videos(av, paths, folder: Path, per_file: int, fps: float) -> list:
    """mp4s concatenated ``per_file`` at a time, packets copied (no re-encoding), each one's timestamps moved
    to follow the previous one's; returns (file index, from_timestamp, to_timestamp) per input."""
    out = []
    for f in range(0, len(paths), per_file):
        with av.open(str(folder / f"file-{f // per_file:03d}.mp4"), "w") as dst:
            ost, at = None, 0.0
            for p in paths[f:f + per_file]:
                with av.open(str(p)) as srcc:
                    ist = srcc.streams.video[0]
                    if ost is None:
                        ost = dst.add_stream_from_template(ist, opaque=True)
                    tb = ist.time_base
                    shift = int(round(at / tb))
                    n = 0
                    for pkt in srcc.demux(ist):
                        if pkt.dts is None:
                            continue
                        pkt.pts += shift
                        pkt.dts += shift
                        pkt.stream = ost
                        dst.mux(pkt)
                        n += 1
                    dur = n / fps
                    out.append((f // per_file, round(at, 6), round(at + dur, 6)))
                    at += dur
    return out
