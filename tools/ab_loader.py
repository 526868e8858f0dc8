"""The DataLoader's time per batch in every frame tier, for an A/B of two source trees (issue 45 item 7:
"per-batch time within noise"). Only public names and FrameStore.create are used, so the same script runs
against the tree before and after a restructuring:

    for r in 1 2 3; do for t in old new; do PYTHONPATH=$t python3 tools/ab_loader.py --label $t; done; done

Each run builds one set (2 cameras of 240x320 I420 frames, 32 episodes x 100 frames, smooth fields plus
noise; state and action) in the tiers asked for, then times --batches batches of --batch samples after a
warm-up, with CUDA events around the whole loop (no sync per batch). On the CPU it runs the cpu tier, for
a smoke test. Prints one JSON line per tier."""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import torch

import robocache
from robocache import Window
from robocache.frames.store import FrameStore

H, W, EP, LEN, FPS = 240, 320, 32, 100, 30.0


def pool(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    ch, cw = H // 2, W // 2
    out = np.empty((n, H * W + 2 * ch * cw), np.uint8)
    for i in range(n):
        Y = 120 + 70 * np.sin(x / 17 + i / 9) * np.cos(y / 23) + rng.normal(0, 3, (H, W))
        C = 128 + 30 * np.sin(x[::2, ::2] / 11 - i / 7) + rng.normal(0, 2, (ch, cw))
        out[i] = np.concatenate([np.clip(p, 16, 235).astype(np.uint8).ravel() for p in (Y, C, C[::-1])])
    return out


def dataset(tier: str, dev, folder: str):
    rng = np.random.default_rng(0)
    frames = {}
    times = [np.arange(LEN) / FPS] * EP
    for c, cam in enumerate(("cam_a", "cam_b")):
        p = pool(50, c)
        rows = p[(np.arange(EP * LEN) * 7 + c) % len(p)]
        st = FrameStore.create(rows, format="yuv420", height=H, width=W, tier=tier, device=dev,
                               path=f"{folder}/{cam}.npy")
        frames[cam] = (st, times)
    eps = [{"state": (rng.normal(size=(LEN, 8)).astype(np.float32), times[0]),
            "action": (rng.normal(size=(LEN, 7)).astype(np.float32), times[0])} for _ in range(EP)]
    return robocache.Dataset.from_episodes(eps, device=dev, frames=frames)


def windows() -> dict:
    w = {"state": Window("state", indices=[0], rate=FPS, normalize="mean_std"),
         "action": Window("action", indices=range(16), rate=FPS, normalize="mean_std")}
    for cam in ("cam_a", "cam_b"):
        w[cam] = Window(cam, indices=[0], rate=FPS, layout="BTCHW", resize=(224, 224))
    return w


def measure(ds, batch: int, batches: int, dev) -> float:
    """Milliseconds per batch over `batches` batches, after 20 warm-up ones."""
    loader = robocache.DataLoader(ds, batch, shuffle=True, seed=0, windows=windows(), drop_last=True)
    it = iter(_endless(loader))
    for _ in range(20):
        next(it)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batches):
            next(it)
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / batches
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - t) * 1e3 / batches


def _endless(loader):
    while True:
        yield from loader


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="")
    ap.add_argument("--tiers", nargs="+", default=["device", "host", "disk", "compressed", "lossless"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=200)
    a = ap.parse_args()
    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    tiers = a.tiers if dev.type == "cuda" else ["cpu"]
    for tier in tiers:
        with tempfile.TemporaryDirectory() as folder:
            ds = dataset(tier, dev, folder)
            ms = measure(ds, a.batch, a.batches if dev.type == "cuda" else 3, dev)
            print(json.dumps({"label": a.label, "tier": tier, "batch": a.batch, "ms_per_batch": round(ms, 4),
                              "robocache": robocache.__file__,
                              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}), flush=True)
            del ds
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
