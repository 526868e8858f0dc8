"""End-to-end loader benchmark: robocache.DataLoader against the loaders a user has today.

    python benchmarks/bench_loader.py [--quick] [--batch-size 64] [--workers 8] [--json PATH]

Sets (each checked first: the contenders' batches equal robocache's for the same samples):
  picknplace        GR00T PickNPlace low-dim: state [B,1,44] + action [B,16,44], min/max normalized
  picknplace+frame  the same + the ego_view frame [B,1,3,256,256] float in [0,1] (pre-decoded)
  multirate         generated: joints 100 Hz [10,14] mean/std, camera 30 Hz [2,3,96,96],
                    point clouds 10 Hz (4096 points) voxelized to 64^3 occupancy, actions 50 Hz [16,7]
Contenders:
  robocache         robocache.DataLoader on the GPU-resident Dataset (side-stream prefetch, full
                    batches replayed from a CUDA graph)
  robocache eager   the same with cuda_graph=False (every batch launched op by op from Python)
  torch DL, mp4 decode  (PickNPlace + frame) the LeRobot/GR00T default: each sample decodes its
                    frame from the episode's mp4 in __getitem__ (OpenCV seek + read)
  torch DL          torch.utils.data.DataLoader, --workers workers, pin_memory, NumPy windows in
                    __getitem__ (robocache/bench/torch_loader.py), batches copied to the GPU
  torch GPU gather  plain PyTorch on GPU-resident tensors: randint, index arithmetic, clamp, gather,
                    masks, normalization (and a scatter for voxels): what a skilled user writes
Measured: samples/s over many batches (loader alone, nothing else on the GPU), per-batch
latency (next() until the batch is on the GPU, p50), and inside a GR00T-style training loop
(examples/train_groot_style.py's policy with the frame) the step time, the GPU idle fraction
(1 - model GPU time / wall time) and the loader's cost (step time over fixed in-memory batches).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import robocache  # noqa: E402
from robocache import Window  # noqa: E402
from robocache.bench.torch_loader import make_torch_loader  # noqa: E402

import train_groot_style as groot  # noqa: E402

IMAGE = groot.IMAGE
VOXEL = dict(grid=64, voxel_size=0.05, origin=(-1.6, -1.6, -0.4))


# --------------------------------------------------------------------------------------------
# sets


def picknplace(data: Path, frames: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_lerobot(data, load_video=frames, device="cpu")
    w = {"state": Window("observation.state", indices=[0], rate=20, normalize="min_max"),
         "action": Window("action", indices=range(16), rate=20, normalize="min_max")}
    if frames:
        w["image"] = Window(IMAGE, indices=[0], rate=20, layout="BTCHW")
    return ds, w


def multirate(quick: bool):
    """E episodes of 15 s on exact clocks (so index arithmetic is exact for the gather contender)."""
    rng = np.random.default_rng(0)
    E, dur = (8, 6.0) if quick else (40, 15.0)
    eps = []
    for e in range(E):
        # clock offsets keep index arithmetic (the gather contender) off nearest-frame ties
        tj, tc, tl, ta = (np.arange(int(dur * r)) / r + o for r, o in ((100, 0), (30, 0.004), (10, 0.013), (50, 0.002)))
        joints = np.cumsum(rng.normal(0, 0.02, (len(tj), 14)), 0).astype(np.float32)
        cam = rng.integers(0, 256, (len(tc), 96, 96, 3), dtype=np.uint8)
        clouds = []
        for _ in tl:
            p = rng.normal(0, 0.6, (4096, 3)).astype(np.float32)
            p[:, 2] = np.abs(p[:, 2])
            clouds.append(p)
        act = rng.normal(0, 1, (len(ta), 7)).astype(np.float32)
        eps.append({"joints": (joints, tj), "camera": (cam, tc), "lidar": (clouds, tl), "action": (act, ta)})
    ds = robocache.Dataset.from_episodes(eps, rates={"joints": 100, "camera": 30, "lidar": 10, "action": 50},
                                         device="cpu")
    w = {"joints": Window("joints", indices=range(-9, 1), rate=100, normalize="mean_std"),
         "camera": Window("camera", indices=[-1, 0], rate=30, layout="BTCHW"),
         "cloud": Window("lidar", indices=[0], rate=10, voxel=VOXEL),
         "action": Window("action", indices=range(16), rate=50, normalize="min_max")}
    return ds, w


class Mp4Frames(torch.utils.data.Dataset):
    """The LeRobot/GR00T default: each sample decodes its frame from the episode's mp4 in
    ``__getitem__`` (OpenCV: open, seek, read, as LeRobot opens the file per sample); the
    low-dim windows as the torch DL contender (NumPy)."""

    def __init__(self, data: Path, ds, windows: dict, key: str):
        import json
        from robocache.bench.torch_loader import WindowDataset
        self.low = WindowDataset(ds, {k: w for k, w in windows.items() if k != key})
        self.key = key
        info = json.loads((data / "meta" / "info.json").read_text())
        tmpl, chunk = info["video_path"], int(info.get("chunks_size", 1000))
        self.paths = [str(data / tmpl.format(episode_chunk=e.index // chunk, video_key=IMAGE, episode_index=e.index))
                      for e in ds.episodes]
        # sample i (a frame of the anchor stream) -> nearest video frame of its episode
        s, a = ds.streams[IMAGE], ds.streams[ds.anchor]
        self.frame = np.empty(len(self.low), dtype=np.int64)
        vo, ao = s.offsets_host, a.offsets_host
        vt, at = s.times.cpu().numpy(), a.times.cpu().numpy()
        for e in range(len(ds.episodes)):
            ft, t = vt[vo[e]:vo[e + 1]], at[ao[e]:ao[e + 1]]
            j = np.clip(np.searchsorted(ft, t), 1, len(ft) - 1)
            self.frame[ao[e]:ao[e + 1]] = np.where(t - ft[j - 1] <= ft[j] - t, j - 1, j)

    def __len__(self):
        return len(self.low)

    def __getitem__(self, i):
        import cv2
        out = self.low[i]
        cap = cv2.VideoCapture(self.paths[int(self.low.episode[i])])
        try:
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(self.frame[i]))
            ok, bgr = cap.read()
        finally:
            cap.release()
        if not ok:
            raise RuntimeError(f"{self.paths[int(self.low.episode[i])]}: no frame {int(self.frame[i])}")
        rgb = torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        out[self.key] = rgb.permute(2, 0, 1)[None].float().div_(255)             # [1, 3, H, W]
        out[self.key + "_is_pad"] = torch.zeros(1, dtype=torch.bool)
        return out


# --------------------------------------------------------------------------------------------
# the plain-PyTorch GPU contender


class GpuGather:
    """What a skilled user writes on GPU-resident tensors. Once, per sample and key: the global
    row of the frame nearest the anchor (anchor frame + round(offset * rate) is then the row
    plus a step) and the episode's first/last rows. Per batch and key: one gather of those,
    steps added, is_pad from the unclamped rows, clamp, one gather of the values,
    normalization as (x - center) * scale; images permuted and scaled; voxels by a scatter."""

    def __init__(self, ds, windows, anchor: str, device):
        self.dev = device
        a = ds.streams[anchor]
        self.N = a.num_samples
        ep = torch.repeat_interleave(torch.arange(len(ds)), torch.from_numpy(a.lengths)).to(device)
        t = a.times.to(device)
        self.keys = []
        for key, w in windows.items():
            s = ds.streams[w.names[0]]
            start, end = s.offsets[:-1].to(device)[ep], s.offsets[1:].to(device)[ep]
            anchor_row = start + torch.floor((t - s.episode_ends()[0].to(device)[ep]) * float(w.rate) + 0.5).long()
            k = {"key": key, "steps": torch.as_tensor(list(w.indices), device=device)[None, :],
                 "rows": torch.stack([anchor_row, start, end - 1], 1),     # [N, 3]: one gather per batch
                 # image streams hold a FrameStore, whose indexing flattens the index: a user of plain
                 # PyTorch holds the decoded [N, H, W, C] frames as one tensor
                 "values": (s.values[:] if s.frames is not None else s.values).to(device), "kind": s.kind,
                 "layout": w.layout}
            if w.normalize:
                st = s.stats
                if w.normalize == "mean_std":
                    c, width = st["mean"], st["std"]
                else:
                    c, width = (st["max"] + st["min"]) / 2, (st["max"] - st["min"]) / 2
                k["center"] = c.float().to(device)
                k["scale"] = torch.where(width > 0, 1 / width, 0).float().to(device)
            if s.kind == "pointcloud":
                k["fo"] = s.frame_offsets.to(device)
                k["nmax"] = int(np.diff(s.frame_offsets_host).max())
            self.keys.append(k)

    def batch(self, B: int, idx=None) -> dict:
        if idx is None:
            idx = torch.randint(0, self.N, (B,), device=self.dev)
        out = {}
        for k in self.keys:
            rows = k["rows"][idx]                                             # [B, 3]
            first, last = rows[:, 1:2], rows[:, 2:3]
            j = rows[:, :1] + k["steps"]                                      # [B, T]
            pad = (j < first) | (j > last)
            j = j.clamp(first, last)
            if k["kind"] == "pointcloud":
                x = self._voxels(k, j)
            else:
                x = k["values"][j]
            if k["kind"] == "image" and k["layout"] == "BTCHW":
                x = x.permute(0, 1, 4, 2, 3).div(255.0)                      # one pass, uint8 in
            if "scale" in k:
                x = (x.float() - k["center"]) * k["scale"]
            out[k["key"]], out[k["key"] + "_is_pad"] = x, pad
        return out

    def _voxels(self, k, j):
        B, T = j.shape
        g, vs, origin = VOXEL["grid"], VOXEL["voxel_size"], torch.tensor(VOXEL["origin"], dtype=torch.float64, device=self.dev)
        fo = k["fo"]
        first, n = fo[j.reshape(-1)], fo[j.reshape(-1) + 1] - fo[j.reshape(-1)]
        r = torch.arange(k["nmax"], device=self.dev)
        pts = k["values"][(first[:, None] + r).clamp_(max=k["values"].shape[0] - 1)]     # [BT, nmax, 3]
        v = torch.floor((pts.double() - origin) / vs).long()
        ok = ((v >= 0) & (v < g)).all(-1) & (r[None, :] < n[:, None])
        lin = ((torch.arange(B * T, device=self.dev)[:, None] * g + v[..., 0]) * g + v[..., 1]) * g + v[..., 2]
        occ = torch.zeros(B * T * g ** 3, device=self.dev)
        occ.index_put_((lin[ok],), torch.ones((), device=self.dev))
        return occ.view(B, T, g, g, g)


# --------------------------------------------------------------------------------------------
# timing


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def endless(make_iter):
    """Batches forever, a new epoch (iterator) when one ends."""
    while True:
        yield from make_iter()


def throughput(batches, B: int, n: int, warm: int) -> dict:
    """samples/s over n batches after warm ones, and per-batch latency (next() to on-GPU, each
    batch waited for)."""
    for _ in range(warm):
        next(batches)
    sync()
    t = time.perf_counter()
    for _ in range(n):
        b = next(batches)
    sync()
    rate = n * B / (time.perf_counter() - t)
    lat = []
    for _ in range(min(n, 50)):
        t = time.perf_counter()
        b = next(batches)
        sync()
        lat.append(time.perf_counter() - t)
    del b
    return {"samples_per_s": rate, "latency_ms_p50": 1e3 * statistics.median(lat)}


def to_gpu(it, dev):
    for b in it:
        yield {k: v.to(dev, non_blocking=True) for k, v in b.items()}


def mp4_row(args, ds, w, first, B, dev) -> dict:
    """torch DataLoader decoding each sample's frame from the mp4 (few batches: ~200 samples/s).
    Its frames are checked against robocache's (decoded once, whole videos, at load)."""
    from robocache.bench.torch_loader import EpochSampler
    data = Mp4Frames(args.data, ds, w, "image")
    dl = torch.utils.data.DataLoader(data, batch_size=B, sampler=EpochSampler(len(data), 0, 0, True),
                                     num_workers=args.workers, pin_memory=True, drop_last=True,
                                     persistent_workers=args.workers > 0, prefetch_factor=2 if args.workers else None)
    b = next(iter(dl))
    same(first, b, [k for k in w if k != "image"], "torch DL, mp4 decode")
    # as 8-bit pixels: the two / 255 (CPU here, the GPU there) may differ in the last float bit
    px = lambda x: (x.float().cpu() * 255).round().to(torch.uint8)
    same_px = (px(b["image"]) == px(first["image"])).flatten(1).all(1)
    print(f"  mp4 seek-decoded frames vs robocache's (decoded whole at load): "
          f"{100 * same_px.float().mean().item():.0f}% of frames identical pixel for pixel")
    n = 3 if args.quick else 6
    r = throughput(to_gpu(endless(lambda: iter(dl)), dev), B, n, warm=args.workers)
    del dl
    return r


def same(a: dict, b: dict, keys, what: str):
    for k in keys:
        x, y = a[k].cpu(), b[k].cpu()
        if x.shape != y.shape or not torch.allclose(x.float(), y.float(), rtol=1e-5, atol=1e-5):
            raise AssertionError(f"{what}: key {k!r} differs from robocache")


def make_policy(policy, dev):
    """``(model, loss(model, batch))`` of ``policy``: "small", examples/train_groot_style.py's policy (a
    conv embedding of the frame, a step of a few ms); "groot", GR00T-sized (benchmarks/groot_sized.py:
    frozen ViT-L/14 + flow-matching action head); or a callable ``dev -> (model, loss)`` (bench_scale's
    3-camera policies)."""
    if callable(policy):
        return policy(dev)
    if policy == "groot":
        from groot_sized import GrootSized

        def loss(m, b):
            with torch.autocast("cuda", torch.bfloat16):
                return m.loss(b["state"], [b["image"][:, 0]], b["action"], b["action_is_pad"])
        return GrootSized(1, 44, 44, groot.CHUNK).to(dev), loss
    return groot.Policy(video=True).to(dev), \
        lambda m, b: groot.masked_mse(m(b["state"], b["image"]), b["action"], b["action_is_pad"])


def train_loop(batches, steps: int, warm: int, dev, policy="small") -> dict:
    """Training steps of `policy` (make_policy) with the frame: wall time per step, GPU busy
    fraction, on the GPU's timeline the median gap between one step's last kernel and the next
    one's first (where next() sits: its host time when the host is the bottleneck, or a wait on
    the batch), and the median host time of next() inside the loop."""
    torch.manual_seed(0)
    model, loss_of = make_policy(policy, dev)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    events, waits = [], []
    for i in range(warm + steps):
        if i == warm:
            sync()
            t = time.perf_counter()
        t0 = time.perf_counter()
        b = next(batches)
        waits.append(time.perf_counter() - t0)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        loss = loss_of(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        e.record()
        if i >= warm:
            events.append((s, e))
    sync()
    wall = time.perf_counter() - t
    busy = sum(s.elapsed_time(e) for s, e in events) / 1e3
    gaps = [events[i - 1][1].elapsed_time(events[i][0]) * 1e3 for i in range(1, len(events))]
    return {"step_ms": 1e3 * wall / steps, "gpu_idle": max(0.0, 1 - busy / wall),
            "gap_us": statistics.median(gaps), "next_us": 1e6 * statistics.median(waits[warm:])}


def step_costs(fixed, loops: dict, rounds: int, steps: int, dev, policy="small") -> dict:
    """Each loader's cost in the training step, paired against fixed batches (already in GPU
    memory, no loader work): every round runs fixed, loader 1, fixed, loader 2, ..., fixed, and a
    loader's cost in that round is its step time over the mean of the fixed-batch steps run just
    before and after it. The lent machines
    drift by +-20% over a run (docs/perf-notes.md v8); neighbours in time see the same drift, so
    the median over rounds of the paired cost is what is reported, with its p25-p75. The gap
    cost is the loader's added gap between steps on the GPU's timeline over the step time,
    paired the same way: per-step medians, so free of the hiccups that move a round's mean."""
    fixed_ms, per = [], {who: [] for who in loops}
    for _ in range(rounds):
        before = train_loop(fixed(), steps, 5, dev, policy)
        fixed_ms.append(before)
        for who, (batches, warm) in loops.items():
            r = train_loop(batches(), steps, warm, dev, policy)
            after = train_loop(fixed(), steps, 5, dev, policy)
            fixed_ms.append(after)
            base = (before["step_ms"] + after["step_ms"]) / 2
            gap = (before["gap_us"] + after["gap_us"]) / 2
            per[who].append({**r, "cost": (r["step_ms"] - base) / r["step_ms"],
                             "gap_cost": (r["gap_us"] - gap) / 1e3 / base})
            before = after
    q = lambda xs, f: float(np.quantile(xs, f))
    keys = ("step_ms", "gpu_idle", "gap_us", "next_us")
    out = {"fixed batches": {k: q([r[k] for r in fixed_ms], 0.5) for k in keys}}
    for who, rs in per.items():
        costs = [r["cost"] for r in rs]
        out[who] = {**{k: q([r[k] for r in rs], 0.5) for k in keys},
                    "loader_cost": q(costs, 0.5), "cost_p25": q(costs, 0.25), "cost_p75": q(costs, 0.75),
                    "gap_cost": q([r["gap_cost"] for r in rs], 0.5), "rounds": costs}
    return out


def host_us_per_batch(loader, n: int = 24, rounds: int = 5) -> float:
    """Host µs per next() with the GPU blocked by a sleep, so launches only queue: what the loader
    adds to a host-bound training loop, free of the step's own noise. Median of round medians."""
    for _ in loader:                                   # captured, warm
        pass
    sync()
    n = min(n, len(loader))
    meds = []
    for _ in range(rounds):
        torch.cuda._sleep(500_000_000)                 # ~0.25 s; the side stream waits behind it
        it = iter(loader)
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            next(it)
            ts.append(time.perf_counter() - t)
        del it
        meds.append(statistics.median(ts[2:]) * 1e6)  # the first: the epoch's tables
        sync()
    return statistics.median(meds)


# --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=groot.default_data())
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="CI: every contender's checks and loops on the CPU in seconds (batch 8, a few batches, "
                         "no workers); not a measurement")
    args = ap.parse_args(argv)
    if args.smoke:
        args.quick, args.batch_size, args.workers = True, 8, 0
    if not torch.cuda.is_available() and not args.smoke:
        print("bench_loader needs a CUDA GPU (--smoke runs its checks and loops on the CPU, untimed)")
        return 1
    dev = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    B = args.batch_size
    n = 3 if args.smoke else 30 if args.quick else 300
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU (smoke run, not a measurement)"
    print(f"{gpu}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
          f"robocache {robocache.__version__}; batch {B}, torch DL {args.workers} workers")
    results = {"device": gpu, "cpu_cores": os.cpu_count(), "batch_size": B, "rows": []}

    sets = [("picknplace", *picknplace(args.data, False), "observation.state"),
            ("picknplace+frame", *picknplace(args.data, True), "observation.state"),
            ("multirate", *multirate(args.quick), "joints")]
    trained = {}
    for name, cpu_ds, w, anchor in sets:
        gpu_ds = cpu_ds.to(dev)
        rc = robocache.DataLoader(gpu_ds, B, shuffle=True, seed=0, windows=w, drop_last=True)
        rce = robocache.DataLoader(gpu_ds, B, shuffle=True, seed=0, windows=w, drop_last=True, cuda_graph=False)
        tdl = make_torch_loader(cpu_ds, w, B, seed=0, num_workers=args.workers, pin_memory=True,
                                drop_last=True, persistent_workers=args.workers > 0,
                                prefetch_factor=4 if args.workers else None)
        gg = GpuGather(gpu_ds, w, anchor, dev)
        # correctness first: the same samples through each contender
        first = next(iter(rc))
        same(first, next(iter(tdl)), w.keys(), "torch DL")
        same(first, gg.batch(B, rc.order(0)[:B]), w.keys(), "torch GPU gather")
        rc.set_epoch(0)
        for x, y in zip(itertools.islice(iter(rc), 4), itertools.islice(iter(rce), 4)):
            same(x, y, x.keys(), "robocache eager")      # batches 2-4 come from the graph

        rows = {}
        rows["robocache"] = throughput(endless(lambda: iter(rc)), B, n, warm=5)
        rows["robocache eager"] = throughput(endless(lambda: iter(rce)), B, n, warm=5)
        rows["torch GPU gather"] = throughput(iter(lambda: gg.batch(B), None), B, n, warm=5)
        nt = n if args.smoke else max(10, n // (5 if name != "picknplace" else 2))
        rows["torch DL"] = throughput(to_gpu(endless(lambda: iter(tdl)), dev), B, nt, warm=2 * args.workers + 2)
        if name == "picknplace+frame" and not args.smoke:
            rows["torch DL, mp4 decode"] = mp4_row(args, cpu_ds, w, first, B, dev)
        for who, r in rows.items():
            results["rows"].append({"set": name, "loader": who, **r})
        if name == "picknplace+frame" and dev.type == "cuda":
            # the zero-cost baseline: batches already in GPU memory, four of them in turn (one
            # batch read every step would stay in the L2, which no loader's batches do: 50 MB)
            fixed = [{k: v.clone() for k, v in b.items()} for b in itertools.islice(iter(rce), 4)]
            loops = {
                "robocache": (lambda: endless(lambda: iter(rc)), 5),
                "robocache eager": (lambda: endless(lambda: iter(rce)), 5),
                "torch GPU gather": (lambda: iter(lambda: gg.batch(B), None), 5),
                "torch DL": (lambda: to_gpu(endless(lambda: iter(tdl)), dev), 2 * args.workers + 2),
            }
            trained = step_costs(lambda: itertools.cycle(fixed), loops, 1 if args.quick else 30,
                                 20 if args.quick else 100, dev)
            for who, ld in (("robocache", rc), ("robocache eager", rce)):
                trained[who]["host_us_per_batch"] = host_us_per_batch(ld)
        del tdl, rc, rce, gg, gpu_ds

    print(f"\n{'set':18s} {'loader':18s} {'samples/s':>12s} {'latency p50':>12s} {'vs torch DL':>12s} {'vs gather':>10s}")
    for name in dict.fromkeys(r["set"] for r in results["rows"]):
        rs = {r["loader"]: r for r in results["rows"] if r["set"] == name}
        for who, r in rs.items():
            r["x_torch_dl"] = r["samples_per_s"] / rs["torch DL"]["samples_per_s"]
            r["x_gather"] = r["samples_per_s"] / rs["torch GPU gather"]["samples_per_s"]
            print(f"{name:18s} {who:18s} {r['samples_per_s']:12,.0f} {r['latency_ms_p50']:9.3f} ms "
                  f"{r['x_torch_dl']:11.1f}x {r['x_gather']:9.2f}x")
    if trained:
        print(f"\nGR00T-style training step (policy with the frame, batch {B}); loader cost = step time over the "
              f"steps on 4 fixed in-memory batches run just before and after, median of rounds (p25-p75):")
        print(f"{'loader':18s} {'step ms':>9s} {'GPU idle':>9s} {'loader cost':>12s} {'p25-p75':>14s} "
              f"{'gap us':>8s} {'gap cost':>9s} {'next() us':>10s} {'host us/batch':>14s}")
        for who, r in trained.items():
            cost = f"{100 * r['loader_cost']:11.1f}%" if "loader_cost" in r else f"{'-':>12s}"
            iqr = f"{100 * r['cost_p25']:6.1f}-{100 * r['cost_p75']:.1f}%" if "cost_p25" in r else "-"
            gap = f"{100 * r['gap_cost']:8.1f}%" if "gap_cost" in r else f"{'-':>9s}"
            host = f"{r['host_us_per_batch']:.1f}" if "host_us_per_batch" in r else "-"
            print(f"{who:18s} {r['step_ms']:9.3f} {100 * r['gpu_idle']:8.1f}% {cost} {iqr:>14s} "
                  f"{r['gap_us']:8.1f} {gap} {r['next_us']:10.1f} {host:>14s}")
        results["training"] = trained
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
