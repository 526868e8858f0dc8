"""``python -m robocache demo``: the main job. A multi-rate dataset fed through
``robocache.DataLoader`` into a small transformer policy's training loop for N steps.

By default the dataset is generated in memory (64 episodes of 10-20 s: joints 100 Hz [14],
gripper 50 Hz [2], camera 15 Hz uint8 [32, 32, 3], actions 50 Hz [7], each stream on its own
jittered clock); ``--lerobot`` / ``--robomimic`` / ``--zarr`` / ``--rosbag PATH`` load a real one through the
readers instead. Per sample (anchored on the action stream's frames) the loader makes, on the
dataset's device: a normalized state history (streams fused at the anchor), the latest camera
frame, and a normalized action chunk of 16 steps with its ``action_is_pad`` mask. The policy is a
``torch.nn.TransformerEncoder`` over [state tokens, image patch tokens, action query tokens]
trained with an MSE loss that skips padded steps. Prints samples/s of the loader alone and of
the whole training step, and the loss at the start and at the end.

Runs on the CPU when there is no GPU (``--device auto``; 300 steps there by default, ``--full`` for 1000).
``--write-lerobot DIR`` (``write_lerobot``) writes the generated task to disk as a LeRobot v3.0 dataset
instead, to train on with ``--lerobot DIR`` or to try the LeRobot path on without downloading anything.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from ._util import progress_bar
from ._util import torch as _torch

CHUNK = 16          # action steps the policy predicts
HISTORY = 4         # state steps it sees (the anchor and the 3 before)


# --------------------------------------------------------------------------------------------
# the generated dataset


def _sines(rng, n_dims: int, n_terms: int = 3):
    """Random smooth signal per dimension: a sum of sines, returned as a function of time."""
    amp = rng.uniform(0.2, 1.0, (n_terms, n_dims)) / n_terms
    freq = rng.uniform(0.1, 0.8, (n_terms, n_dims))                   # Hz
    phase = rng.uniform(0, 2 * np.pi, (n_terms, n_dims))
    bias = rng.uniform(-0.5, 0.5, n_dims)

    def f(t):                                                         # t [n] -> [n, n_dims]
        return bias + (amp * np.sin(2 * np.pi * freq * t[:, None, None] + phase)).sum(1)
    return f


def _clock(rng, duration: float, rate: float):
    """Timestamps of a stream sampled at ``rate`` Hz: its own start offset plus a small jitter."""
    n = int(duration * rate)
    jitter = rng.uniform(-0.1, 0.1, n) / rate                        # keeps the times increasing
    return rng.uniform(0, 1 / rate) + np.arange(n) / rate + jitter


def generate(num_episodes: int = 64, seed: int = 0, *, device=None):
    """A genuinely multi-rate Dataset made in memory.

    Streams per episode of 10-20 s: ``joints`` 100 Hz float32 [14], ``gripper`` 50 Hz float32 [2],
    ``camera`` 15 Hz uint8 [32, 32, 3] (a blob at a position given by joints 0-1, brightness by
    the gripper), ``actions`` 50 Hz float32 [7]: the joint targets 0.1 s ahead (joints 0-5) and
    the gripper command 0.1 s ahead, so a policy that reads the state history can learn them.
    """
    from .data.dataset import Dataset

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    episodes, tasks = [], []
    for _ in range(num_episodes):
        duration = rng.uniform(10.0, 20.0)
        joints_f = _sines(rng, 14)
        grip_f = _sines(rng, 1, n_terms=1)

        def gripper(t):                                               # two fingers, in [0, 1]
            g = 0.5 + 0.5 * np.tanh(3 * grip_f(t))
            return np.concatenate([g, g], axis=1)

        tj, tg, tc, ta = (_clock(rng, duration, r) for r in (100.0, 50.0, 15.0, 50.0))
        joints = joints_f(tj) + rng.normal(0, 0.01, (tj.size, 14))
        grip = gripper(tg) + rng.normal(0, 0.01, (tg.size, 2))
        actions = np.concatenate([joints_f(ta + 0.1)[:, :6], gripper(ta + 0.1)[:, :1]], axis=1)
        q = joints_f(tc)                                              # the camera sees the arm
        cy, cx = 16 + 10 * np.tanh(q[:, 0]), 16 + 10 * np.tanh(q[:, 1])
        blob = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 18.0)
        bright = gripper(tc)[:, :1, None]                             # [n, 1, 1]
        rgb = np.stack([blob * 255, blob * 255 * bright, 255 * (1 - blob) * 0.3], axis=-1)
        camera = (rgb + rng.normal(0, 4, rgb.shape)).clip(0, 255).astype(np.uint8)
        episodes.append({"joints": (joints.astype(np.float32), tj), "gripper": (grip.astype(np.float32), tg),
                         "camera": (camera, tc), "actions": (actions.astype(np.float32), ta)})
        tasks.append("follow the target")
    return Dataset.from_episodes(episodes, rates={"joints": 100.0, "gripper": 50.0, "camera": 15.0, "actions": 50.0},
                                 tasks=tasks, device=device, source="generated")


# --------------------------------------------------------------------------------------------
# the same task written to disk as a LeRobot v3.0 dataset (what a user's own set looks like)

LEROBOT_TASKS = ["reach the red square", "reach the red square and close the gripper", "follow the target"]
LEROBOT_CAMERA = "observation.images.top"
_JOINTS = [f"joint_{i}" for i in range(6)] + ["gripper"]


def _render(q, grip, height: int, width: int, rng) -> np.ndarray:
    """Camera frames [n, H, W, 3] uint8 of a top view: a grey table, a fixed red target square and
    the end effector as a disk at a position given by joints 0-1, green when the gripper is open,
    blue when closed, plus sensor noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    n = q.shape[0]
    img = np.empty((n, height, width, 3), np.float32)
    img[:] = np.array([150.0, 140.0, 120.0]) + 30 * (yy / height)[..., None]             # table, lit from below
    ty, tx = int(0.3 * height), int(0.7 * width)
    r = max(2, height // 12)
    img[:, ty - r:ty + r, tx - r:tx + r] = (200.0, 40.0, 40.0)                           # the target
    cy = height / 2 + 0.4 * height * np.tanh(q[:, 0])
    cx = width / 2 + 0.4 * width * np.tanh(q[:, 1])
    disk = ((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) < (1.5 * r) ** 2
    g = grip[:, None, None, None]
    color = (1 - g) * np.array([40.0, 190.0, 60.0]) + g * np.array([40.0, 60.0, 200.0])  # open -> closed
    img = np.where(disk[..., None], color, img)
    return (img + rng.normal(0, 3, img.shape)).clip(0, 255).astype(np.uint8)


def _feature_stats(x: np.ndarray) -> dict:
    """LeRobot's per-feature statistics of rows x [n, D] (or [n] for scalars)."""
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    q = {f"q{k:02d}": np.quantile(x, k / 100, axis=0).tolist() for k in (1, 10, 50, 90, 99)}
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
            "std": x.std(0).tolist(), "count": [int(x.shape[0])], **q}


def _image_stats(frames: np.ndarray) -> dict:
    """LeRobot's image statistics: per channel, values in [0, 1], shaped [3, 1, 1]."""
    x = frames.reshape(-1, 3).astype(np.float64) / 255.0
    st = _feature_stats(x)
    st = {k: (v if k == "count" else [[[c]] for c in v]) for k, v in st.items()}
    st["count"] = [int(frames.shape[0])]
    return st


DEMO_MARKER = ".robocache-demo"   # in a folder write_lerobot made: a rerun may replace it without overwrite=True
_CODEC_NAMES = {"libsvtav1": "av1", "libx264": "h264"}   # info.json names the format, not the encoder


def write_lerobot(path, num_episodes: int = 8, seed: int = 0, *, fps: int = 15, image_size=(96, 128),
                  codec: str | None = None, overwrite: bool = False):
    """Write a small LeRobot **v3.0** dataset of the demo task to ``path`` and return the path.

    The layout is what LeRobot 0.4 writes (``meta/info.json`` codebase_version v3.0,
    ``meta/episodes/chunk-000/file-000.parquet``, ``meta/tasks.parquet``, ``meta/stats.json``,
    ``data/chunk-000/file-000.parquet`` and ``videos/observation.images.top/chunk-000/file-000.mp4``
    holding every episode back to back), so ``Dataset.from_lerobot(path)`` and LeRobot's own
    ``LeRobotDataset`` read it as they read a set from the Hub. Episodes of 4-8 s at ``fps``:
    ``observation.state`` float32 [7] (6 joints + gripper), ``action`` float32 [7] (the joint targets
    and the gripper command 0.2 s ahead), a ``observation.images.top`` camera (H, W = ``image_size``)
    encoded with PyAV (AV1 as LeRobot does, else H.264), one of three tasks per episode.

    Needs pyarrow and PyAV (``pip install "robocache[lerobot]"``, or ``pip install -e ".[lerobot]"`` from a
    checkout). ``path`` must not exist, or be empty, or hold a set this function wrote (its marker file
    ``.robocache-demo``: a rerun of the same command replaces it), unless ``overwrite=True``. The output
    is the same bytes for the same arguments; a rewrite leaves every file that comes out the same
    untouched, its mtime too, so the decoded-frame cache of an earlier load stays valid (a notebook
    cell run twice decodes the video once).
    """
    import shutil
    from pathlib import Path

    from ._util import require
    from .video.encode import pick_encoder

    what = "writing the demo LeRobot dataset"
    pa = require("pyarrow", "lerobot", what)
    pq = require("pyarrow.parquet", "lerobot", what)
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, (int, np.integer)) or num_episodes < 1:
        raise ValueError(f"num_episodes must be an int >= 1, got {num_episodes!r}")
    if isinstance(fps, bool) or not isinstance(fps, (int, np.integer)) or not 1 <= fps <= 240:
        raise ValueError(f"fps must be an int in 1..240 (LeRobot's fps is a whole number), got {fps!r}")
    H, W = (int(v) for v in image_size)
    if H < 16 or W < 16 or H % 2 or W % 2:
        raise ValueError(f"image_size must be (height, width), even and >= 16 (yuv420p), got {image_size!r}")
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise FileExistsError(f"{root} exists and is not a folder; pick a new path")
    encoder = pick_encoder(codec)
    if not (root.exists() and any(root.iterdir())):
        _write_v30(root, int(num_episodes), seed, int(fps), (H, W), encoder, pa, pq)
        return root
    if not overwrite and not (root / DEMO_MARKER).is_file():
        raise FileExistsError(f"{root} exists, is not empty and is not a demo set this function wrote; "
                              "pick a new folder or pass overwrite=True")
    fresh = root.parent / f".{root.name}.writing-{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        _write_v30(fresh, int(num_episodes), seed, int(fps), (H, W), encoder, pa, pq)
        _settle(fresh, root)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return root


def _write_v30(root, num_episodes: int, seed: int, fps: int, size: tuple[int, int], encoder: str, pa, pq) -> None:
    """The demo set's files under ``root`` (write_lerobot's arguments, checked; pyarrow and its parquet
    module passed in)."""
    import json

    from .video.encode import encode_mp4

    H, W = size
    rng = np.random.default_rng(seed)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("observation.state", "action", "timestamp", "frame_index",
                                                         "episode_index", "index", "task_index")}
    frames: list[np.ndarray] = []
    episodes: list[tuple[int, int, str]] = []          # (first row, length, task) per episode
    start = 0
    for e in range(int(num_episodes)):
        n = int(rng.uniform(4.0, 8.0) * fps)
        t = np.arange(n) / fps                                          # LeRobot's frame_index / fps
        joints = _sines(rng, 6)
        grip_f = _sines(rng, 1, n_terms=1)
        gripper = lambda tt: (0.5 + 0.5 * np.tanh(3 * grip_f(tt)))[:, 0]  # noqa: E731 - [n] in [0, 1]
        state = np.concatenate([joints(t), gripper(t)[:, None]], 1) + rng.normal(0, 0.005, (n, 7))
        action = np.concatenate([joints(t + 0.2), (gripper(t + 0.2) > 0.5)[:, None]], 1)
        task = e % len(LEROBOT_TASKS)
        frames.append(_render(state[:, :6], gripper(t), H, W, rng))
        for k, v in (("observation.state", state.astype(np.float32)), ("action", action.astype(np.float32)),
                     ("timestamp", t.astype(np.float32)), ("frame_index", np.arange(n)),
                     ("episode_index", np.full(n, e)), ("index", start + np.arange(n)),
                     ("task_index", np.full(n, task))):
            rows[k].append(v)
        episodes.append((start, n, LEROBOT_TASKS[task]))
        start += n
    cols = {k: np.concatenate(v) for k, v in rows.items()}
    video = np.concatenate(frames)

    for sub in ("meta/episodes/chunk-000", "data/chunk-000", f"videos/{LEROBOT_CAMERA}/chunk-000"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    vector = lambda a: pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[1])  # noqa: E731
    pq.write_table(pa.table({
        "observation.state": vector(cols["observation.state"]), "action": vector(cols["action"]),
        "timestamp": cols["timestamp"], **{k: cols[k].astype(np.int64) for k in
                                           ("frame_index", "episode_index", "index", "task_index")}}),
        root / "data/chunk-000/file-000.parquet")

    # the video: every episode back to back, one frame per 1/fps (the episodes' spans in meta)
    # SVT-AV1 prints its banner and settings to fd 2 unless told otherwise (1: errors only)
    quiet = "SVT_LOG" not in os.environ
    if quiet:
        os.environ["SVT_LOG"] = "1"
    try:
        encode_mp4(root / f"videos/{LEROBOT_CAMERA}/chunk-000/file-000.mp4", video, encoder, int(fps))
    finally:
        if quiet:
            os.environ.pop("SVT_LOG", None)

    key = f"videos/{LEROBOT_CAMERA}"
    meta = []
    for e, (a, n, task_text) in enumerate(episodes):
        sl = slice(a, a + n)
        stats = {"observation.state": _feature_stats(cols["observation.state"][sl]),
                 "action": _feature_stats(cols["action"][sl]), LEROBOT_CAMERA: _image_stats(video[sl][::4]),
                 **{k: _feature_stats(cols[k][sl]) for k in ("timestamp", "frame_index", "episode_index",
                                                               "index", "task_index")}}
        meta.append({"episode_index": e, "tasks": [task_text], "length": n,
                     "data/chunk_index": 0, "data/file_index": 0, "dataset_from_index": a,
                     "dataset_to_index": a + n, f"{key}/chunk_index": 0, f"{key}/file_index": 0,
                     f"{key}/from_timestamp": a / fps, f"{key}/to_timestamp": (a + n) / fps,
                     **{f"stats/{f}/{k}": v for f, st in stats.items() for k, v in st.items()},
                     "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    pq.write_table(pa.Table.from_pylist(meta), root / "meta/episodes/chunk-000/file-000.parquet")
    # as LeRobot writes it through pandas: the task string is the (named-less) index
    pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None}], "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}
    tasks = pa.table({"task_index": pa.array(range(len(LEROBOT_TASKS)), pa.int64()),
                      "__index_level_0__": pa.array(LEROBOT_TASKS, pa.large_string())})
    pq.write_table(tasks.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), root / "meta/tasks.parquet")

    stats = {"observation.state": _feature_stats(cols["observation.state"]), "action": _feature_stats(cols["action"]),
             LEROBOT_CAMERA: _image_stats(video[::4]),
             **{k: _feature_stats(cols[k]) for k in ("timestamp", "frame_index", "episode_index", "index",
                                                     "task_index")}}
    (root / "meta/stats.json").write_text(json.dumps(stats, indent=4))
    scalar = lambda dtype: {"dtype": dtype, "shape": [1], "names": None}  # noqa: E731
    info = {
        "codebase_version": "v3.0", "robot_type": "robocache_demo_arm", "total_episodes": len(episodes),
        "total_frames": int(start), "total_tasks": len(LEROBOT_TASKS), "chunks_size": 1000,
        "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": int(fps),
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [7], "names": _JOINTS},
            "action": {"dtype": "float32", "shape": [7], "names": _JOINTS},
            LEROBOT_CAMERA: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channel"],
                             "info": {"video.height": H, "video.width": W,
                                      "video.codec": _CODEC_NAMES.get(encoder, encoder),
                                      "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": int(fps),
                                      "video.channels": 3, "has_audio": False}},
            "timestamp": scalar("float32"), "frame_index": scalar("int64"), "episode_index": scalar("int64"),
            "index": scalar("int64"), "task_index": scalar("int64")}}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    (root / DEMO_MARKER).write_text("written by robocache.demo.write_lerobot: running it again replaces this folder\n")


def _settle(fresh, root) -> None:
    """The folder ``root`` made to hold exactly ``fresh``'s files (moved in). A file whose bytes are
    already there stays as it is, mtime included: the frame cache keys a source by its size and mtime."""
    import filecmp
    import shutil

    kept = set()
    for src in sorted(p for p in fresh.rglob("*") if p.is_file()):
        rel = src.relative_to(fresh)
        kept.add(rel)
        dst = root / rel
        if dst.is_file() and not dst.is_symlink() and filecmp.cmp(src, dst, shallow=False):
            continue
        for up in reversed(rel.parents[:-1]):           # a file or link where a folder goes
            if (root / up).is_symlink() or (root / up).exists() and not (root / up).is_dir():
                (root / up).unlink()
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    for p in sorted(root.rglob("*"), key=lambda q: len(q.parts), reverse=True):    # deepest first
        if p.is_symlink() or p.is_file():
            if p.relative_to(root) not in kept:
                p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()


# --------------------------------------------------------------------------------------------
# which windows to read from a dataset


@dataclass
class Setup:
    """What the demo reads: the loader's windows and anchor, and what the policy is built for."""
    windows: dict
    anchor: str
    state_dim: int
    action_dim: int
    image_channels: int          # 0: no image
    image_scale: float           # multiply the BTCHW image by this to get [0, 1]
    description: str


def _pick_state(ds, action: str) -> list[str]:
    for name in ("observation.state", "state", "obs/state"):
        if name in ds.streams:
            return [name]
    skip = ("action", "reward", "done", "next_obs", "annotation", "task", "index")
    cand = [n for n, s in ds.streams.items() if s.kind == "continuous" and len(s.shape) == 1 and n != action
            and not any(k in n for k in skip)]
    if not cand:
        raise ValueError(f"demo: no state stream found among {sorted(ds.streams)}")
    dtype = ds.streams[cand[0]].dtype
    return [n for n in cand if ds.streams[n].dtype == dtype][:16]   # one fuse launch: one dtype, <= 16


def setup_for(ds, generated: bool, image_size: int = 64, *, action: str | None = None,
              state: list[str] | None = None) -> Setup:
    """Windows for the generated dataset, or sensible ones picked from a reader's streams (``action`` /
    ``state`` name them; each stream keeps its own clock, a bag's too)."""
    from .loader.dataloader import Window

    image: str | None
    if generated:
        state, action, image = ["joints", "gripper"], "actions", "camera"
        # 4 states over the last 60 ms, linear over both clocks, fused into one key
        state_w = Window(state, offsets=[-0.06, -0.04, -0.02, 0.0], normalize="mean_std")
        action_w = Window(action, indices=range(CHUNK), rate=50.0, normalize="mean_std")
    else:
        for n in [action] + list(state or []):
            if n is not None and n not in ds.streams:
                raise ValueError(f"demo: no stream {n!r}; the dataset has {sorted(ds.streams)}")
        if action is None:
            action = next((n for n in ("action", "actions") if n in ds.streams), None)
        if action is None:
            action = next((n for n, s in ds.streams.items()
                           if n.startswith("action") and s.kind == "continuous" and len(s.shape) == 1), None)
        if action is None:
            raise ValueError(f"demo: no action stream found among {sorted(ds.streams)}")
        state = list(state) if state else _pick_state(ds, action)
        rate = ds.streams[action].nominal_rate or ds.streams[action].rate
        srate = ds.streams[state[0]].nominal_rate or ds.streams[state[0]].rate
        state_w = Window(state, offsets=[(k - HISTORY + 1) / srate for k in range(HISTORY)], normalize="mean_std")
        action_w = Window(action, indices=range(CHUNK), rate=rate, normalize="mean_std")
        image = next((n for n, s in ds.streams.items() if s.kind == "image"), None)
    windows = {"state": state_w, "action": action_w}
    channels, scale = 0, 1.0
    if image is not None:
        s = ds.streams[image]
        H, W = s.shape[:2]
        channels = s.shape[2] if len(s.shape) == 3 else 1
        resize = None if max(H, W) <= image_size else (image_size, image_size)
        # the frame the robot has seen at the anchor: the latest one, not the nearest
        windows["image"] = Window(image, mode="previous", layout="BTCHW", resize=resize)
        if s.dtype != _torch().uint8:          # float frames (PushT stores 0-255 as float32)
            scale = 1.0 / 255.0 if float(s.stats["max"].max()) > 1.5 else 1.0
    dims = lambda names: sum(math.prod(ds.streams[n].shape) for n in names)
    desc = (f"state {'+'.join(state)} x{HISTORY}, action {action} x{CHUNK}"
            + (f", image {image}" if image else ""))
    return Setup(windows, action, dims(state), dims([action]), channels, scale, desc)


# --------------------------------------------------------------------------------------------
# the policy


def make_policy(setup: Setup, d_model: int = 64, layers: int = 2, heads: int = 4):
    """A small transformer: [state tokens, image patch tokens, action queries] -> action chunk."""
    torch = _torch()                       # installed, or the error that says how to install it
    from torch import nn                   # a module, so that mypy takes nn.Module as a base class

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.state_in = nn.Linear(setup.state_dim, d_model)
            self.image_in = None
            n_img = 0
            if setup.image_channels:
                # tiny conv to a 2x2 grid of patch tokens, whatever the frame size
                self.image_in = nn.Sequential(
                    nn.Conv2d(setup.image_channels, 16, 5, stride=2, padding=2), nn.GELU(),
                    nn.Conv2d(16, d_model, 3, stride=2, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(2))
                n_img = 4
            self.queries = nn.Parameter(torch.randn(CHUNK, d_model) * 0.02)
            self.pos = nn.Parameter(torch.randn(HISTORY + n_img + CHUNK, d_model) * 0.02)
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, setup.action_dim)

        def forward(self, batch):
            state = batch["state"]                                   # [B, HISTORY, S] normalized
            B = state.shape[0]
            tokens = [self.state_in(state)]
            if self.image_in is not None:
                img = batch["image"][:, -1] * setup.image_scale      # [B, C, H, W] in [0, 1]
                tokens.append(self.image_in(img).flatten(2).transpose(1, 2))   # [B, 4, d]
            tokens.append(self.queries.expand(B, -1, -1))
            x = self.encoder(torch.cat(tokens, 1) + self.pos)
            return self.head(x[:, -CHUNK:])                         # [B, CHUNK, A]

    return Policy()


def masked_mse(pred, batch):
    """MSE over the action steps that are not padding (past an episode's end)."""
    keep = (~batch["action_is_pad"]).to(pred.dtype)[..., None]      # [B, CHUNK, 1]
    err = (pred - batch["action"]) ** 2 * keep
    return err.sum() / (keep.sum() * pred.shape[-1]).clamp_min(1.0)


# --------------------------------------------------------------------------------------------
# the run


def _device(name: str):
    torch = _torch()
    if name == "auto":
        import robocache
        name = "cuda" if torch.cuda.is_available() and robocache.build_info()["cuda"] else "cpu"
    return torch.device(name)


def _int_list(text: str) -> list[int]:
    """``--episodes`` items: ints, also comma-separated (``0,1,2``, as the reader's messages print them)."""
    try:
        return [int(x) for x in text.strip("[]").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected episode numbers like 0 1 2 or 0,1,2, got {text!r}") from None


def _parser():
    p = argparse.ArgumentParser(prog="python -m robocache demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--lerobot", metavar="PATH", help="a LeRobot v2/v3 (or GR00T) dataset folder")
    src.add_argument("--robomimic", metavar="PATH", help="a robomimic HDF5 file")
    src.add_argument("--zarr", metavar="PATH", help="a diffusion-policy ReplayBuffer zarr")
    src.add_argument("--rosbag", metavar="PATH", help="a ROS 1/2 bag, MCAP file or folder of bags (with --action)")
    p.add_argument("--action", metavar="STREAM", help="the stream to predict (default: one named action*; "
                   "bags: `python -m robocache doctor PATH` lists the streams)")
    p.add_argument("--state", metavar="STREAM", nargs="+", help="state streams, fused (default: picked by name)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default 300 on CPU: its summary in well under a minute; 2000 on GPU)")
    p.add_argument("--full", action="store_true", help="the full run: 1000 steps on CPU (a few minutes), 2000 on GPU")
    p.add_argument("--batch-size", type=int, default=None, help="default 32 on CPU, 256 on GPU")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", metavar="N", nargs="+", type=_int_list,
                   help="generated (and --write-lerobot): how many episodes (default 64; 8 for --write-lerobot); "
                        "--lerobot: which episode indices to load (e.g. --episodes 0 1 2 or 0,1,2; default all)")
    p.add_argument("--missing-files", choices=["error", "skip"], default="error",
                   help="LeRobot: episodes whose files are missing stop the load (error, default) or are "
                        "skipped with a warning (skip)")
    p.add_argument("--no-video", action="store_true", help="LeRobot: leave the videos out")
    p.add_argument("--write-lerobot", metavar="DIR",
                   help="write the generated task as a LeRobot v3.0 dataset (parquet + mp4) to DIR and stop; "
                        "then train on it with --lerobot DIR")
    p.add_argument("--overwrite", action="store_true", help="--write-lerobot: replace DIR when it is not empty")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-progress", action="store_true", help="periodic lines instead of a progress bar")
    return p


def run(argv=None, *, out=print) -> dict:
    """Run the demo; returns ``{"loss_first", "loss_last", "losses", "loader_samples_per_s",
    "step_samples_per_s", "steps", "batch_size", "device", "source"}`` (with ``--write-lerobot``:
    ``{"source", "written"}``, the folder written)."""
    torch = _torch()
    import robocache
    from .loader.dataloader import DataLoader

    parser = _parser()
    args = parser.parse_args(argv)
    if args.episodes is not None:                      # each item is a list (``0,1,2``): one flat list
        args.episodes = [e for item in args.episodes for e in item]
    if args.episodes is not None and not args.lerobot and len(args.episodes) != 1:
        parser.error(f"--episodes: a count of generated episodes, got {args.episodes} (a list is for --lerobot)")
    count = args.episodes[0] if args.episodes and not args.lerobot else None
    if count is not None and count < 1:
        parser.error(f"--episodes: a count >= 1, got {count}")
    if args.write_lerobot:
        if args.lerobot or args.robomimic or args.zarr or args.rosbag:
            parser.error("--write-lerobot writes the generated task: it takes no --lerobot/--robomimic/--zarr/--rosbag")
        try:
            path = write_lerobot(args.write_lerobot, count or 8, args.seed, overwrite=args.overwrite)
        except FileExistsError:
            parser.error(f"--write-lerobot {args.write_lerobot}: the folder exists, is not empty and is not a "
                         "demo set written before; give a new one, or --overwrite to replace it")
        out(f"wrote a LeRobot v3.0 dataset of {count or 8} episodes to {path}; "
            f"train on it: python -m robocache demo --lerobot {path}")
        return {"source": str(path), "written": str(path)}
    dev = _device(args.device)
    cuda = dev.type == "cuda"
    steps = args.steps if args.steps is not None else (2000 if cuda else 1000 if args.full else 300)
    batch_size = args.batch_size if args.batch_size is not None else (256 if cuda else 32)
    if steps < 2 or batch_size < 1:
        raise SystemExit("demo: --steps must be >= 2 and --batch-size >= 1")
    torch.manual_seed(args.seed)
    if not cuda:
        # tiny weights early in training make denormal floats, 2-3x slower on x86 CPUs
        torch.set_flush_denormal(True)

    try:
        t0 = time.perf_counter()
        if args.lerobot:
            from .readers import available_backends
            video = not args.no_video and bool(available_backends())
            ds = robocache.Dataset.from_lerobot(args.lerobot, load_video=video, video_resize=(64, 64) if video else None,
                                                device=dev, episodes=args.episodes,
                                                missing_files=args.missing_files)
        elif args.robomimic:
            ds = robocache.Dataset.from_robomimic(args.robomimic, device=dev)
        elif args.zarr:
            ds = robocache.Dataset.from_zarr(args.zarr, device=dev)
        elif args.rosbag:
            ds = robocache.Dataset.from_rosbag(args.rosbag, device=dev)
        else:
            ds = generate(count or 64, args.seed, device=dev)
        setup = setup_for(ds, generated=not (args.lerobot or args.robomimic or args.zarr or args.rosbag),
                          action=args.action, state=args.state)
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True, seed=args.seed,
                            windows=setup.windows, anchor=setup.anchor)
        out(f"dataset: {ds.source or 'generated'}, {len(ds)} episodes, "
            + ", ".join(f"{n} {s.rate:.0f} Hz {list(s.shape)}" for n, s in ds.streams.items()
                        if s.rate and n in {m for w in setup.windows.values() for m in w.names})
            + f" ({time.perf_counter() - t0:.1f} s to build)")
        out(f"loader: {loader.num_samples} samples, batch {batch_size}, {setup.description}, device {dev}")

        def batches():
            while True:                                  # as many epochs as the steps need
                yield from loader

        def sync():
            if cuda:
                torch.cuda.synchronize(dev)

        # the loader alone: a few batches, timed to the end of their kernels
        probe = min(50, max(5, steps // 4))
        it = batches()
        next(it)
        sync()
        t = time.perf_counter()
        for _ in range(probe):
            next(it)
        sync()
        loader_rate = probe * batch_size / (time.perf_counter() - t)

        policy = make_policy(setup).to(dev)
        opt = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
        n_params = sum(p.numel() for p in policy.parameters())
        out(f"policy: transformer, {n_params / 1e3:.0f}k parameters; {steps} steps")

        bar = progress_bar(steps, "train", enable=not args.no_progress and sys.stderr.isatty(), unit="step")
        every = max(1, steps // 10)
        losses = []                                      # device scalars: no host sync per step
        loader.set_epoch(0)
        it = batches()
        t_start = t_warm = time.perf_counter()
        for step in range(steps):
            batch = next(it)
            loss = masked_mse(policy(batch), batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.detach())
            if step == 0:
                sync()
                t_warm = time.perf_counter()             # rates leave out the first step (warm-up)
            if (step + 1) % every == 0 or step + 1 == steps:
                recent = float(torch.stack(losses[-every:]).mean())
                done = step + 1
                rate = (done - 1) * batch_size / max(time.perf_counter() - t_warm, 1e-9) if done > 1 else 0.0
                if bar is not None:
                    bar.update(done - bar.n)
                    bar.set_postfix(loss=f"{recent:.4f}", samples_s=f"{rate:,.0f}")
                else:
                    out(f"step {done:>6}/{steps}  loss {recent:.4f}  {rate:,.0f} samples/s")
        sync()
        t_end = time.perf_counter()
        if bar is not None:
            bar.close()
    finally:  # the flag is process-wide: restore it even when training fails
        if not cuda:
            torch.set_flush_denormal(False)
    hist = torch.stack(losses).float().cpu().numpy()
    k = max(1, min(10, steps // 10))
    first, last = float(hist[:k].mean()), float(hist[-k:].mean())
    step_rate = (steps - 1) * batch_size / max(t_end - t_warm, 1e-9)
    out(f"loader alone: {loader_rate:,.0f} samples/s ({probe} batches of {batch_size})")
    out(f"training step (loader + forward + backward + optimizer): {step_rate:,.0f} samples/s, "
        f"{(t_end - t_warm) / (steps - 1) * 1e3:.1f} ms/step, {t_end - t_start:.1f} s in all")
    out(f"loss: first {k} steps {first:.4f} -> last {k} steps {last:.4f} "
        f"({'down' if last < first else 'NOT down'} {first / max(last, 1e-12):.1f}x)")
    return {"loss_first": first, "loss_last": last, "losses": hist, "loader_samples_per_s": loader_rate,
            "step_samples_per_s": step_rate, "steps": steps, "batch_size": batch_size, "device": str(dev),
            "source": ds.source or "generated"}


def main(argv=None) -> int:
    """The command: a source that cannot be read (a missing or corrupt file, a missing optional
    dependency) is a message and exit status 2, not a traceback."""
    from .readers import ReaderError

    try:
        res = run(argv)
    except (ReaderError, ImportError) as e:
        msg = str(e)
        if "missing_files=" in msg:     # the reader speaks Python; say it as this command's options
            msg += ("\n(on this command line: --episodes 0 1 2 ... loads those episodes, "
                    "--missing-files skip skips the incomplete ones)")
        print(f"python -m robocache demo: error: {msg}", file=sys.stderr)
        return 2
    return 0 if "written" in res or math.isfinite(res["loss_last"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
