"""Frame tiers end to end: loader samples/s and GR00T-style step cost with one 480x640 frame per sample.

    python benchmarks/bench_tiers.py --data PATH [--big-gb 75] [--disk-gb 40] [--json OUT]
    python benchmarks/bench_tiers.py --smoke        # CI: every tier the CPU has, at toy size

Sets:
  real      a LeRobot v2.1 AV1 set (--data; e.g. shared/data/cr5_flashdrive_av1, one 480x640 camera),
            loaded once per tier (frames="device" | "host" | "disk"), YUV 4:2:0 frames
  rgb/yuv   generated 480x640 frames in device memory stored as RGB and as YUV: the YUV tier against
            RGB frames of the same size (the cost of converting in the batch)
  big       generated frames of --big-gb GB (YUV) in pinned host memory, and --disk-gb GB in a
            memory-mapped file (disk tier; cold page cache when run as root), trained end to end
Contender: torch.utils.data.DataLoader with --workers workers, each sample decoding its frame from the
episode's video with PyAV (LeRobot's default video path: open, seek to the key frame, decode to the
timestamp), low-dim windows in NumPy. Windows everywhere: state [B,1,44] and action [B,16,44]
(min/max normalized, padded to GR00T's 44), image [B,1,3,480,640] float in [0, 1].
Measured: samples/s (loader alone), and the loader's cost in the training step, paired against fixed
in-memory batches (bench_loader.step_costs), for --policies: "small" (examples/train_groot_style.py's
policy, a step of a few ms) and "groot" (GR00T-sized: a frozen ViT-L/14 on the frame at 224x224 and a
trained flow-matching action head, benchmarks/groot_sized.py)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

import robocache  # noqa: E402
from robocache import Window  # noqa: E402
from robocache.frames.store import FrameStore, yuv420_bytes  # noqa: E402
from robocache.frames.tiers.disk import from_map  # noqa: E402

import bench_loader as bl  # noqa: E402

H, W = 480, 640
CAM = "observation.images.top"


def windows(cam: str) -> dict:
    return {"state": Window("observation.state", indices=[0], rate=10, normalize="min_max", max_dim=44),
            "action": Window("action", indices=range(16), rate=10, normalize="min_max", max_dim=44),
            "image": Window(cam, indices=[0], rate=10, layout="BTCHW")}


def lowdim_episodes(lengths, rng) -> list:
    eps = []
    for n in lengths:
        t = np.arange(n) / 10.0
        eps.append({"observation.state": (rng.normal(size=(n, 6)).astype(np.float32), t),
                    "action": (rng.normal(size=(n, 7)).astype(np.float32), t)})
    return eps


def generated(lengths, fmt: str, tier: str, dev, path=None) -> robocache.Dataset:
    """A set of generated frames written straight into their tier (no decode: the loader is measured)."""
    rng = np.random.default_rng(0)
    N = int(sum(lengths))
    row = yuv420_bytes(H, W) if fmt == "yuv420" else H * W * 3
    shape = (N, row) if fmt == "yuv420" else (N, H, W, 3)
    chunk = max(1, min(N, (1 << 30) // row))
    src = torch.randint(0, 256, (chunk,) + shape[1:], dtype=torch.uint8, device=dev)  # up to 1 GB of pixels
    if tier in ("device", "cpu"):
        data = torch.empty(shape, dtype=torch.uint8, device=dev)
    elif tier == "host":
        from robocache.frames.pinned import pinned_empty
        data = pinned_empty(shape)
    else:
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
        data = torch.from_numpy(mm)
    for a in range(0, N, chunk):
        b = min(N, a + chunk)
        data[a:b].copy_(src[: b - a].roll(a % 7, 0))
    del src
    if tier == "disk":
        mm.flush()
        del data, mm
        data = from_map(np.load(path, mmap_mode="r"))
    store = FrameStore(data, format=fmt, height=H, width=W, channels=3, tier=tier, device=dev, matrix="bt601",
                       path=None if path is None else str(path))
    times = [np.arange(n) / 10.0 for n in lengths]
    return robocache.Dataset.from_episodes(lowdim_episodes(lengths, rng), device=dev, frames={"cam": (store, times)})


class PyAVFrames(torch.utils.data.Dataset):
    """LeRobot's way: each sample opens its episode's video, seeks to the key frame before the sample's
    timestamp and decodes up to it (PyAV), then RGB -> [1, 3, H, W] float; low-dim windows in NumPy."""

    def __init__(self, ds, paths, windows_):
        from robocache.bench.torch_loader import WindowDataset
        self.low = WindowDataset(ds, {k: w for k, w in windows_.items() if k != "image"})
        self.paths = paths
        a = ds.streams[ds.anchor]
        self.t = a.times.cpu().numpy()

    def __len__(self):
        return len(self.low)

    def __getitem__(self, i):
        from robocache.bench.torch_loader import pyav_frame_at
        out = self.low[i]
        e, t = int(self.low.episode[i]), float(self.t[i])
        out["image"] = pyav_frame_at(self.paths[e], t)
        out["image_is_pad"] = torch.zeros(1, dtype=torch.bool)
        return out


def loader_rate(ds, cam, B, n, **kw) -> dict:
    loader = robocache.DataLoader(ds, B, shuffle=True, seed=0, windows=windows(cam), drop_last=True, **kw)
    return bl.throughput(bl.endless(lambda: iter(loader)), B, n, warm=3)


def step_cost(loops: dict, fixed_batch, rounds, steps, dev, policy) -> dict:
    fixed = lambda: iter(lambda: fixed_batch, None)  # noqa: E731
    return bl.step_costs(fixed, loops, rounds, steps, dev, policy)


def smoke() -> int:
    """CI (--smoke): the generated sets in every tier the CPU has (memory as RGB and YUV, the host and the
    disk tiers' stores) through the loader, each tier's batches equal, and a step of the small policy on
    one; the PyAV contender on a sample of the real set when it is there. Any error is raised."""
    import tempfile
    dev, B = torch.device("cpu"), 4
    lengths = [12, 9]
    got = {}
    with tempfile.TemporaryDirectory(prefix="bench-tiers-smoke-") as tmp:
        for fmt, tier in (("rgb", "cpu"), ("yuv420", "cpu"), ("yuv420", "host"), ("yuv420", "disk")):
            path = Path(tmp) / "frames.npy" if tier == "disk" else None
            torch.manual_seed(0)                      # the same pixels in every tier
            ds = generated(lengths, fmt, tier, dev, path)
            r = loader_rate(ds, "cam", B, 2)
            got[(fmt, tier)] = next(iter(robocache.DataLoader(ds, B, seed=3, windows=windows("cam"))))
            print(f"bench_tiers smoke: generated {fmt} {tier}: {r['samples_per_s']:.0f} samples/s (not a measurement)")
    ref = got[("yuv420", "cpu")]
    for key, b in got.items():
        if key[0] == "yuv420":
            assert all(torch.equal(b[k], ref[k]) for k in ref), f"{key}: batches differ from the memory tier's"
    model, loss_of = bl.make_policy("small", dev)
    loss_of(model, ref).backward()
    data = ROOT.parent / "shared" / "data" / "cr5_flashdrive_av1"
    if (data / "meta" / "info.json").is_file():
        info = json.loads((data / "meta" / "info.json").read_text())
        tmpl, chunk = info["video_path"], int(info.get("chunks_size", 1000))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = robocache.Dataset.from_lerobot(data, episodes=[0], load_video=False, device=dev)
        paths = [str(data / tmpl.format(episode_chunk=e.index // chunk, video_key=CAM, episode_index=e.index))
                 for e in ds.episodes]
        sample = PyAVFrames(ds, paths, windows(CAM))[5]
        assert sample["image"].shape == (1, 3, H, W), sample["image"].shape
    print("bench_tiers smoke: ok")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=False, help="LeRobot v2.x AV1 set (one 480x640 camera)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--big-gb", type=float, default=0.0, help="generated YUV frames in pinned host memory (GB)")
    ap.add_argument("--disk-gb", type=float, default=0.0, help="generated YUV frames in a mapped file (GB)")
    ap.add_argument("--disk-dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--skip-contender", action="store_true")
    ap.add_argument("--policies", nargs="+", default=["small", "groot"], choices=["small", "groot"],
                    help="step cost with examples/train_groot_style.py's policy and/or the GR00T-sized one")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true", help="CI: every tier the CPU has, at toy size, not timed")
    args = ap.parse_args(argv)
    if args.smoke:
        return smoke()
    dev = torch.device("cuda")
    B = args.batch_size
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "batch": B, "rows": {}}
    rows = res["rows"]

    def report(name, r):
        rows[name] = r
        extra = "  ".join(f"{k} {v:.4g}" for k, v in r.items() if isinstance(v, (int, float)))
        print(f"{name:38s} {extra}", flush=True)

    # --- device tier: YUV frames against RGB frames of the same size
    lengths = [300] * 16
    for fmt in ("rgb", "yuv420"):
        ds = generated(lengths, fmt, "device", dev)
        report(f"generated {fmt} device", loader_rate(ds, "cam", B, args.batches))
        del ds
        torch.cuda.empty_cache()

    # --- the real set per tier, and the contender
    loops, fixed_batch = {}, None
    if args.data is not None:
        for tier in ("device", "host", "disk"):
            t = time.perf_counter()
            with warnings.catch_warnings():       # a carried subset of the set: its episodes present
                warnings.simplefilter("ignore")
                ds = robocache.Dataset.from_lerobot(args.data, frames=tier, device=dev, missing_files="skip")
            load_s = time.perf_counter() - t
            f = ds.streams[CAM].frames
            r = loader_rate(ds, CAM, B, args.batches)
            report(f"real {tier}", {**r, "load_s": load_s, "frames": len(f), "frame_GB": f.nbytes / 1e9})
            if fixed_batch is None:
                fixed_batch = next(iter(robocache.DataLoader(ds, B, shuffle=True, seed=9, windows=windows(CAM))))
                fixed_batch = {k: v.clone() for k, v in fixed_batch.items()}
            # one loader, an iterator per epoch (as a training script): a loader per epoch would
            # capture its batch graphs anew each time
            loader = robocache.DataLoader(ds, B, shuffle=True, seed=1, windows=windows(CAM))
            loops[f"robocache {tier}"] = (lambda loader=loader: iter(bl.endless(lambda: iter(loader))), 3)
        if not args.skip_contender:
            import json as js
            info = js.loads((args.data / "meta" / "info.json").read_text())
            tmpl, chunk = info["video_path"], int(info.get("chunks_size", 1000))
            paths = [str(args.data / tmpl.format(episode_chunk=e.index // chunk, video_key=CAM, episode_index=e.index))
                     for e in ds.episodes]
            from robocache.bench.torch_loader import EpochSampler
            data = PyAVFrames(ds, paths, windows(CAM))
            dl = torch.utils.data.DataLoader(data, batch_size=B, sampler=EpochSampler(len(data), 0, 0, True),
                                             num_workers=args.workers, pin_memory=True, drop_last=True,
                                             persistent_workers=True, prefetch_factor=4)
            r = bl.throughput(bl.to_gpu(bl.endless(lambda: iter(dl)), dev), B, 12, warm=args.workers)
            report(f"torch DL + PyAV decode ({args.workers} workers)", r)
            del dl
        for policy in args.policies:
            rounds, steps = (args.rounds, args.steps) if policy == "small" else (args.rounds, max(10, args.steps // 2))
            costs = step_cost(loops, fixed_batch, rounds, steps, dev, policy)
            for who, c in costs.items():
                report(f"step ({policy}): {who}", {k: v for k, v in c.items() if k != "rounds"})

    # --- bigger than the device budget / the GPU: host and disk tiers, trained end to end
    for tier, gb in (("host", args.big_gb), ("disk", args.disk_gb)):
        if gb <= 0:
            continue
        n = int(gb * 1e9 / yuv420_bytes(H, W))
        lengths = [300] * (n // 300)
        t = time.perf_counter()
        path = args.disk_dir / "robocache-bench-frames.npy" if tier == "disk" else None
        ds = generated(lengths, "yuv420", tier, dev, path)
        made = time.perf_counter() - t
        if tier == "disk" and os.geteuid() == 0:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3\n")          # cold: frames come from the disk
        f = ds.streams["cam"].frames
        r = loader_rate(ds, "cam", B, args.batches)
        loader = robocache.DataLoader(ds, B, shuffle=True, seed=2, windows=windows("cam"))
        rr = bl.train_loop(bl.endless(lambda loader=loader: iter(loader)),
                           args.steps * 5, 3, dev)
        report(f"big {tier} {f.nbytes / 1e9:.0f} GB YUV ({2 * f.nbytes / 1e9:.0f} GB as RGB)",
               {**r, "make_s": made, **{f"train_{k}": v for k, v in rr.items()}})
        del ds, f, loader
        if path is not None:
            path.unlink(missing_ok=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
