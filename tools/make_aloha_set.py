"""An ALOHA-shaped LeRobot set written by LeRobot's own recording API, for the data-bound benchmark
(benchmarks/bench_lerobot_databound.py, issue 44): 4 cameras (cam_high, cam_low, cam_left_wrist,
cam_right_wrist) of 480x640, 14-dim state and action, at 50 fps as ALOHA records.

Frames come from a folder of real camera images (`--frames DIR` of .jpg/.png, e.g. frames of the dev
fixtures' CR5 AV1 video; each camera takes them at its own offset and mirror, so the four streams
differ) or, without one, from smooth moving colour fields. The set is made the way a LeRobot user makes
one: `LeRobotDataset.create(..., use_videos=True)`, `add_frame` per frame, `save_episode`, `finalize`
(LeRobot 0.4.4 and 0.6.x), so its videos are LeRobot's own encoder settings (AV1, libsvtav1).

    python tools/make_aloha_set.py OUT_DIR [--episodes 20] [--seconds 10] [--frames DIR]
Needs LeRobot (and its PyAV); --smoke writes 2 short episodes of 48x64.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

CAMERAS = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")


def load_frames(folder: str | None, size: tuple[int, int]) -> list[np.ndarray]:
    """RGB uint8 images of `size` (H, W) from `folder` (sorted), or 60 generated ones."""
    H, W = size
    if folder:
        from PIL import Image
        paths = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
        if not paths:
            raise SystemExit(f"make_aloha_set: --frames {folder}: no .jpg/.png images there")
        return [np.asarray(Image.open(p).convert("RGB").resize((W, H))) for p in paths]
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    return [np.stack([120 + 100 * np.sin(xx / (17 + 5 * c) + yy / 29 + i / 7) for c in range(3)], -1).astype(np.uint8)
            for i in range(60)]


def features(size: tuple[int, int]) -> dict:
    H, W = size
    joints = [f"{side}_{j}" for side in ("left", "right")
              for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")]
    out = {"observation.state": {"dtype": "float32", "shape": (14,), "names": joints},
           "action": {"dtype": "float32", "shape": (14,), "names": joints}}
    for c in CAMERAS:
        out[f"observation.images.{c}"] = {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]}
    return out


def write(root: Path, episodes: int, seconds: float, fps: int, size: tuple[int, int], frames: list[np.ndarray]):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(repo_id="local/aloha_bench", fps=fps, features=features(size), root=root,
                               robot_type="aloha", use_videos=True, image_writer_threads=8)
    rng = np.random.default_rng(0)
    n = int(seconds * fps)
    for e in range(episodes):
        q = np.cumsum(rng.normal(0, 0.01, (n + 10, 14)), 0).astype(np.float32)
        for i in range(n):
            frame = {"observation.state": q[i], "action": q[i + 10], "task": "transfer the cube"}
            for k, c in enumerate(CAMERAS):
                img = frames[(i + 13 * k + 7 * e) % len(frames)]
                frame[f"observation.images.{c}"] = img[:, ::-1] if k % 2 else img
            ds.add_frame(frame)
        ds.save_episode()
    if hasattr(ds, "finalize"):
        ds.finalize()
    return ds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--fps", type=int, default=50)
    ap.add_argument("--frames", help="a folder of real camera images (.jpg/.png)")
    ap.add_argument("--smoke", action="store_true", help="2 episodes of 1 s at 48x64")
    args = ap.parse_args(argv)
    try:
        import lerobot  # noqa: F401
    except ImportError:
        print("make_aloha_set: needs LeRobot (pip install lerobot==0.4.4, or LeRobot's current code from source)")
        return 2
    size = (48, 64) if args.smoke else (480, 640)
    episodes, seconds = (2, 1.0) if args.smoke else (args.episodes, args.seconds)
    root = Path(args.out)
    if root.exists():
        print(f"make_aloha_set: {root} exists; give a new folder")
        return 2
    t = time.perf_counter()
    ds = write(root, episodes, seconds, args.fps, size, load_frames(args.frames, size))
    print(f"make_aloha_set: {episodes} episodes, {ds.meta.total_frames} frames x {len(CAMERAS)} cameras of "
          f"{size[0]}x{size[1]} at {args.fps} fps into {root} in {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
