"""Small LeRobot sets written on the fly: what a user's own set looks like to ``Dataset.from_lerobot``.

- ``write_lerobot``: v2.1, with the bookkeeping columns LeRobot writes and feature names in any of the forms
  LeRobot's ``info.json`` uses; optionally a camera (one mp4 per episode, each frame a picture that says which
  frame it is: ``picture``) and the per-episode statistics v2.1 keeps (``meta/episodes_stats.jsonl``).
- ``convert_v21_to_v30``: a v3.0 copy, made as LeRobot's v2.1 -> v3.0 converter makes one.
- where LeRobot is installed, the same made by LeRobot's own code: ``record_lerobot`` (its recording API) and
  ``convert_with_lerobot`` (its converter).
- ``assert_lerobot_batch``: a batch or item against LeRobot's, key for key and bit for bit.

Everything a test expects of the sets written here can be derived from the arrays returned and LeRobot's
rules, without reading the files back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

TASKS = ["pick the cube", "place the cube", "open the drawer"]


CAMERA = "observation.images.top"
V21_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def write_lerobot(root: Path, rng, lengths=(6, 9, 5, 7), fps=10.0, state_names=None, action_names=None,
                  episode_tasks=None, camera=None, stats=False, pictures=None) -> dict:
    """Episodes 0..E-1 of ``lengths`` rows: ``observation.state`` [3] float32, ``action`` [2] float32,
    ``timestamp``, ``frame_index``, ``episode_index``, ``index`` (global), ``task_index`` (LeRobot's).
    ``camera=(H, W)``: a ``CAMERA`` video feature, episode e's mp4 holding ``picture(e, f, (H, W))`` for its
    rows f (one frame per row from t = 0, yuv420p; at most 23 rows an episode), or ``pictures(e, n, (H, W))``'s
    [n, H, W, 3] uint8 frames when given (any length). ``stats``: each episode's
    statistics of state and action in ``meta/episodes_stats.jsonl``, computed as LeRobot's v2.1 recorder does.
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
    if camera is not None:
        H, W = camera
        feats[CAMERA] = {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"],
                         "info": {"video.fps": fps, "video.height": H, "video.width": W, "video.channels": 3,
                                  "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "has_audio": False}}
    # the fields LeRobot's v2.1 writer fills in (its converter reads total_chunks and total_videos)
    info = {"codebase_version": "v2.1", "robot_type": None, "fps": fps, "chunks_size": 1000,
            "total_episodes": len(lengths), "total_frames": int(sum(lengths)), "total_tasks": len(TASKS),
            "total_videos": len(lengths) if camera is not None else 0, "total_chunks": 1,
            "splits": {"train": f"0:{len(lengths)}"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": V21_VIDEO if camera is not None else None, "features": feats}
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
        if camera is not None:
            frames = pictures(e, n, camera) if pictures else np.stack([picture(e, f, camera) for f in range(n)])
            _write_episode_video(root / V21_VIDEO.format(episode_chunk=0, video_key=CAMERA, episode_index=e),
                                 frames, fps)
        g += n
    if stats:
        (root / "meta/episodes_stats.jsonl").write_text("".join(
            json.dumps({"episode_index": e, "stats": {"observation.state": feature_stats(st),
                                                      "action": feature_stats(ac)}}) + "\n"
            for e, (st, ac) in enumerate(zip(out["state"], out["action"]))))
    return out


def picture(episode: int, frame: int, size) -> np.ndarray:
    """[H, W, 3] uint8: red says the frame (20 + 9 f, flat), green rises along the width, blue along the height
    from a level that says the episode (modulo 4): which frame and which way round it is stay readable
    after lossy coding (a few levels of error against steps of 9 and 40)."""
    if not 0 <= frame < 23:
        raise ValueError(f"picture: frame {frame} outside 0..22 (red 20 + 9 f must stay below 256)")
    H, W = size
    yy, xx = np.mgrid[0:H, 0:W]
    return np.stack([np.full((H, W), 20 + 9 * frame), 40 + (150 * xx) // max(W - 1, 1),
                     30 + 40 * (episode % 4) + (60 * yy) // max(H - 1, 1)], -1).astype(np.uint8)


def noise_pictures(episode: int, n: int, size) -> np.ndarray:
    """[n, H, W, 3] uint8 of uniform noise seeded by the episode: a video of any length (``pictures=``)."""
    return np.random.default_rng(episode).integers(0, 256, (n, *size, 3), dtype=np.uint8)


def _write_episode_video(path: Path, frames: np.ndarray, fps) -> None:
    from robocache.video.encode import encode_mp4, pick_encoder

    path.parent.mkdir(parents=True, exist_ok=True)
    encode_mp4(path, frames, pick_encoder(), int(fps))


def feature_stats(x: np.ndarray) -> dict:
    """One episode's statistics of a [n, ...] feature, LeRobot's ``compute_episode_stats``: over the rows,
    population std, count the rows."""
    x = np.asarray(x, np.float64)
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
            "std": x.std(0).tolist(), "count": [len(x)]}


def pooled_stats(per_episode: list) -> dict:
    """Episodes' statistics pooled as LeRobot's ``aggregate_stats`` pools them: count-weighted mean, the
    variance of the union (each episode's variance plus its mean's squared distance to the pooled mean, count
    weighted), min of mins, max of maxes, counts summed. Features lacking one of these are left out."""
    out = {}
    for key in dict.fromkeys(k for st in per_episode for k in st):
        sts = [st[key] for st in per_episode if key in st]
        if not all({"min", "max", "mean", "std", "count"} <= set(st) for st in sts):
            continue
        n = np.array([np.asarray(st["count"], np.float64).reshape(-1)[0] for st in sts])
        means = np.array([st["mean"] for st in sts], np.float64)
        w = (n / n.sum()).reshape(-1, *[1] * (means.ndim - 1))
        mean = (w * means).sum(0)
        var = (w * (np.array([st["std"] for st in sts], np.float64) ** 2 + (means - mean) ** 2)).sum(0)
        out[key] = {"min": np.min([st["min"] for st in sts], 0).tolist(),
                    "max": np.max([st["max"] for st in sts], 0).tolist(),
                    "mean": mean.tolist(), "std": np.sqrt(var).tolist(), "count": [int(n.sum())]}
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
    ``meta/stats.json`` (the v2.1 statistics of the episodes converted, pooled: ``pooled_stats``). Episodes
    are renumbered 0..E-1 in the order given, as the converter does for a subset.

    ``wrong_file_index``: the metadata of the first episode of every data file after the first names the
    previous data file, as LeRobot 0.4.0-0.4.4's converter wrote it (lerobot#2401). ``tasks``: per new
    episode, a list of per-row task strings (a task change mid-episode) instead of the v2.1 tasks.
    Returns ``{"lengths", "video_files", "data_files", "spans"}``.
    """
    av = pytest.importorskip("av")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

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
    # tasks: the v2.1 ones, or per-row ones given; the v2.1 table keeps its numbers, as LeRobot's converter
    # keeps them, and a text only ``tasks`` names takes the next one
    row_tasks = tasks or [[task_text[int(i)] for i in t.column("task_index").to_pylist()] for t in tables]
    number = {text: i for i, text in sorted(task_text.items())}
    for text in (x for rows in row_tasks for x in rows):
        number.setdefault(text, max(number.values(), default=-1) + 1)
    g = 0
    for new, t in enumerate(tables):
        n = t.num_rows
        for name, col in (("episode_index", np.full(n, new)), ("index", np.arange(g, g + n)),
                          ("task_index", np.array([number[x] for x in row_tasks[new]]))):
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
        spans[key] = concat_videos(av, [src / info["video_path"].format(episode_chunk=0, video_key=key,
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
    pq.write_table(pa.table({"task_index": list(number.values()), "task": list(number)}), dst / "meta/tasks.parquet")
    path = src / "meta/episodes_stats.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    per = {int(r["episode_index"]): r["stats"] for r in rows}
    (dst / "meta/stats.json").write_text(json.dumps(pooled_stats([per[e] for e in episodes if e in per])))
    for key in video_keys:
        info["features"][key].setdefault("info", info["features"][key].get("video_info", {}))
    info.update({"codebase_version": "v3.0", "total_episodes": len(tables), "total_frames": int(starts[-1]),
                 "total_tasks": len(number), "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
                 "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                 "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
                 "splits": {"train": f"0:{len(tables)}"}})
    for k in ("total_videos", "total_chunks"):
        info.pop(k, None)
    (dst / "meta/info.json").write_text(json.dumps(info, indent=2))
    return {"lengths": lengths, "data_files": sorted(set(data_file)), "spans": spans}


def concat_videos(av, paths, folder: Path, per_file: int, fps: float) -> list:
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


# ---------------------------------------------------------------------------------------------
# the same sets made by LeRobot's own code (where LeRobot is installed)


def record_lerobot(root: Path, written: dict, fps: int, size, *, row_tasks=None) -> Path:
    """The episodes ``written`` (what ``write_lerobot(..., camera=size)`` returned) recorded again through
    LeRobot's recording API: ``LeRobotDataset.create`` (v3.0, videos), ``add_frame`` per row with the row's
    state, action, ``picture`` and task, ``save_episode``, ``finalize``; LeRobot encodes the mp4s itself.
    ``row_tasks``: per episode, a task text per row (a task change mid-episode) instead of its one task."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    H, W = size
    feats = {"observation.state": {"dtype": "float32", "shape": (3,), "names": ["s0", "s1", "s2"]},
             "action": {"dtype": "float32", "shape": (2,), "names": ["a0", "a1"]},
             CAMERA: {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]}}
    ds = LeRobotDataset.create(repo_id=f"local/{Path(root).name}", fps=int(fps), features=feats, root=root,
                               use_videos=True)
    for e, (state, action) in enumerate(zip(written["state"], written["action"])):
        tasks = row_tasks[e] if row_tasks else [TASKS[written["task_index"][e]]] * len(state)
        for f in range(len(state)):
            ds.add_frame({"observation.state": state[f], "action": action[f], CAMERA: picture(e, f, size),
                          "task": tasks[f]})
        ds.save_episode()
    ds.finalize()
    return Path(root)


def convert_with_lerobot(src: Path, dst: Path, *, data_mb: float, video_mb: float) -> Path:
    """The v2.1 set at ``src`` copied to ``dst`` and converted there to v3.0 by LeRobot's own converter
    (``convert_dataset`` of ``convert_dataset_v21_to_v30``: LeRobot 0.4's ``lerobot.datasets.v30``, 0.6's
    ``lerobot.scripts``), data files and mp4s closed past ``data_mb`` and ``video_mb`` megabytes; the v2.1
    copy is left beside it as ``dst`` + ``_old``, as the converter leaves it. ``dst``'s parent's name and
    its own make the repo id LeRobot 0.4 wants."""
    import shutil

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    try:                                     # LeRobot 0.6: root is the set itself
        from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset
        where = dst
    except ImportError:                      # LeRobot 0.4: the set is root / repo_id
        from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset
        where = dst.parent.parent
    convert_dataset(f"{dst.parent.name}/{dst.name}", root=where, push_to_hub=False, data_file_size_in_mb=data_mb,
                    video_file_size_in_mb=video_mb)
    return dst


# ---------------------------------------------------------------------------------------------
# a batch against LeRobot's


def assert_lerobot_batch(got: dict, want: dict, where: str = "", contiguous: bool = True) -> None:
    """``got`` (robocache's batch, or item) against ``want`` (LeRobot's, or one built with its rules): the same
    keys; each tensor of the same dtype and shape, equal bit for bit, and contiguous unless told (``ds[i]``'s
    frames are views of a channels-last gather); the rest (task texts) equal."""
    import torch

    assert set(got) == set(want), (where, set(got) ^ set(want))
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape, (where, k, g.dtype, w.dtype, g.shape, w.shape)
            assert torch.equal(g.cpu(), w), (where, k, (g.cpu().double() - w.double()).abs().max())
            assert g.is_contiguous() or not contiguous, (where, k)
        else:
            assert (list(g) == list(w)) if isinstance(w, list) else g == w, (where, k, g, w)
