"""DROID-scale training from the compressed frame tier, against the loaders people use.

    python benchmarks/bench_scale.py [--frames 3000000] [--json OUT]
    python benchmarks/bench_scale.py --decode-only        # the codec comparison alone
    python benchmarks/bench_scale.py --tiers lossless --skip decode host   # the lossless tier's part
    python benchmarks/bench_scale.py --smoke              # CI: every part on the CPU at toy size

The set: DROID-shaped (3 cameras at 180x320, 15 fps, 300-step episodes, state [8], action chunks
[16, 7]) with --frames camera frames in the compressed tier (JPEG at --qscale, bytes in host RAM,
decoded per batch by nvJPEG on the GPU), sampled with a global shuffle. Its frames are --pool
distinct generated camera-like images (smooth moving fields + sensor noise), coded once and laid
out physically for every slot: the host holds every frame's bytes, the decoder decodes each.
Measured in one run, with the GPU's name:
  decode    frames/s, host ms per batch and bytes/frame of the GPU decoders on the same bitstreams:
            robocache (nvJPEG batched, each backend: the JPEG engines, GPU Huffman, CPU Huffman) and
            torchvision.io.decode_jpeg(device="cuda") (the same library, RGB out, one tensor per image);
            PyAV's CPU decode for scale; PSNR and bytes per --qscale setting
  loader    samples/s at batch --batch (3 frames + low-dim windows each) with each nvJPEG backend
            (--backends), and the loader's cost in the training step, paired against fixed in-memory
            batches, for three policies: "small" (a 3-camera conv policy, a step of ~5 ms: the
            loader-bound case), "wide" (the same 4x wider, ~14 ms) and "groot" (GR00T-sized: a frozen
            ViT-L/14 on every camera frame at 224x224 and a trained 8-layer flow-matching action head,
            benchmarks/groot_sized.py)
  torch     torch.utils.data.DataLoader, --workers workers, each sample decoding its 3 frames from
            short-GOP AV1 mp4s with PyAV (LeRobot's default; --mp4-episodes episodes encoded here,
            g=2 crf=30: its rate per sample does not depend on the set's size)
  lossless  the lossless tier (--tiers lossless): the same set's frames coded by the tier's coder (MED +
            rANS, decoded per batch on the GPU), bit-exact; its pool is --lossless-pool: "real" (the CR5
            arm's AV1 frames resized to 180x320, ROBOCACHE_DATA; the default when present) or the
            generated one (whose sensor noise no lossless coder removes); bytes/frame, host RAM, GPU
            memory, samples/s at --batch and 4x, energy, the step costs, and its ingest on the mp4s
  host      robocache's host tier (decoded YUV in pinned memory) on the largest subset that fits
  ingest    the real pipeline (AV1 decode + JPEG coding) on the mp4s, cold and from the cache
  energy    GPU energy (NVML's counter, nvidia-ml-py) and CPU core-seconds (/proc/stat) per 1,000 samples
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

import robocache  # noqa: E402
from bench_loader import endless, step_costs, sync  # noqa: E402
from groot_sized import GrootSized  # noqa: E402
from robocache import Window  # noqa: E402
from robocache.frames.jpeg import decode_rows_cpu, encode_all, pack  # noqa: E402
from robocache.frames.store import FrameStore, yuv420_bytes  # noqa: E402
from robocache.video.encode import encode_mp4  # noqa: E402

H, W, FPS, EP_LEN, CAMS = 180, 320, 15, 300, ("exterior_1", "exterior_2", "wrist")
STATE, ACTION, CHUNK = 8, 7, 16


# ---------------------------------------------------------------------------------------------
# frames


def camera_pool(n: int, h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    """n distinct camera-like I420 frames: moving smooth fields, edges, sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    ch, cw = (h + 1) // 2, (w + 1) // 2
    yc, xc = np.mgrid[0:ch, 0:cw].astype(np.float32)
    out = np.empty((n, yuv420_bytes(h, w)), np.uint8)
    for i in range(n):
        a, b, c = rng.uniform(0, 6.3, 3)
        Y = (120 + 70 * np.sin(x / (9 + 4 * a) + b) * np.cos(y / (13 + 3 * c) - a)
             + 30 * ((x + 40 * a) % 97 < 48) + rng.normal(0, 3, (h, w)))
        U = 128 + 40 * np.sin(xc / 11 + c) + rng.normal(0, 2, (ch, cw))
        V = 128 + 40 * np.cos(yc / 7 - b) + rng.normal(0, 2, (ch, cw))
        out[i] = np.concatenate([np.clip(p, 16, 235).astype(np.uint8).ravel() for p in (Y, U, V)])
    return out


def psnr(a, b) -> float:
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return float(10 * np.log10(255.0 ** 2 / mse)) if mse else float("inf")


def quality(pool: np.ndarray, qscales=(1, 2, 4, 8)) -> list:
    rows = []
    for q in qscales:
        data, offsets = pack(encode_all(pool, H, W, q))
        dec = np.empty_like(pool)
        decode_rows_cpu(data, offsets, np.arange(len(pool)), dec, H, W)
        rows.append({"qscale": q, "bytes_per_frame": data.nbytes / len(pool),
                     "ratio_vs_rgb": H * W * 3 * len(pool) / data.nbytes, "psnr_db": psnr(dec, pool)})
    return rows


def replicate(pool_data, pool_offsets, episodes: int, seed: int):
    """episodes x EP_LEN frames' bitstreams laid out physically: each episode a run of consecutive pool
    frames (like a video) from a random start, one copy per episode."""
    P = len(pool_offsets) - 1
    sizes = np.diff(pool_offsets)
    twice = np.tile(pool_data, 2 + EP_LEN // P)              # runs that wrap around the pool
    starts = np.random.default_rng(seed).integers(0, P, episodes)
    idx = (starts[:, None] + np.arange(EP_LEN)[None]) % P
    offsets = np.zeros(episodes * EP_LEN + 1, np.int64)
    np.cumsum(sizes[idx.ravel()], out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    for e, s in enumerate(starts):
        a, b = int(offsets[e * EP_LEN]), int(offsets[(e + 1) * EP_LEN])
        data[a:b] = twice[pool_offsets[s]:pool_offsets[s] + (b - a)]
    return data, offsets


def lowdim(E: int, rng) -> list:
    eps = []
    for e in range(E):
        t = np.arange(EP_LEN) / FPS
        eps.append({"state": (rng.normal(size=(EP_LEN, STATE)).astype(np.float32), t),
                    "action": (rng.normal(size=(EP_LEN, ACTION)).astype(np.float32), t)})
    return eps


def windows() -> dict:
    w = {"state": Window("state", indices=[0], rate=FPS, normalize="mean_std"),
         "action": Window("action", indices=range(CHUNK), rate=FPS, normalize="mean_std")}
    for c in CAMS:
        w[c] = Window(c, indices=[0], rate=FPS, layout="BTCHW")
    return w


# ---------------------------------------------------------------------------------------------
# the policy and its step


class Policy(nn.Module):
    """Small: a conv embedding per camera frame (shared), the state, an MLP head -> action chunk.
    ``width`` 32: a small policy (a few ms per step on an H100); 128: a step of tens of ms, nearer a
    real vision backbone's."""

    def __init__(self, hidden=256, width=32):
        super().__init__()
        w = width
        self.state = nn.Sequential(nn.Linear(STATE, hidden), nn.GELU())
        self.image = nn.Sequential(
            nn.Conv2d(3, w, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(4 * w, 4 * w, 3, stride=2, padding=1), nn.GELU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, hidden))
        self.head = nn.Sequential(nn.Linear(hidden * (1 + len(CAMS)), hidden), nn.GELU(),
                                  nn.Linear(hidden, CHUNK * ACTION))

    def forward(self, b):
        B = b["state"].shape[0]
        imgs = torch.cat([b[c][:, 0] for c in CAMS])                 # [3B, 3, H, W]
        z = self.image(imgs).view(len(CAMS), B, -1).permute(1, 0, 2).reshape(B, -1)
        return self.head(torch.cat([self.state(b["state"][:, 0]), z], 1)).view(B, CHUNK, ACTION)


POLICIES = ("small", "wide", "groot")


def make_policy(kind: str):
    """``dev -> (model, loss(model, batch))`` of a 3-camera policy (bf16 autocast), for
    bench_loader.step_costs."""
    def make(dev):
        if kind == "groot":
            model = GrootSized(len(CAMS), STATE, ACTION, CHUNK).to(dev)

            def loss(m, b):
                with torch.autocast("cuda", torch.bfloat16):
                    return m.loss(b["state"], [b[c][:, 0] for c in CAMS], b["action"])
        else:
            model = Policy(width={"small": 32, "wide": 128}[kind]).to(dev).to(memory_format=torch.channels_last)

            def loss(m, b):
                with torch.autocast("cuda", torch.bfloat16):
                    return ((m(b) - b["action"]) ** 2).mean()
        return model, loss
    return make


# ---------------------------------------------------------------------------------------------
# measurement helpers


class Meter:
    """GPU energy (NVML's total-energy counter, mJ) and CPU core-seconds (/proc/stat) over a span."""

    def __init__(self, dev):
        self.nvml = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
        except Exception as e:  # no nvidia-ml-py, or no NVML
            self.why = f"{type(e).__name__}: {e}"

    def _cpu(self):
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")   # all but idle and iowait

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), self._cpu()
        self.e0 = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) if self.nvml else None
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.cpu_core_s = self._cpu() - self.c0
        self.gpu_j = (self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self.e0) / 1e3 \
            if self.nvml else None

    def per_1000(self, samples: int) -> dict:
        k = 1000.0 / samples
        return {"gpu_joules": None if self.gpu_j is None else self.gpu_j * k,
                "gpu_watts": None if self.gpu_j is None else self.gpu_j / self.seconds,
                "cpu_core_seconds": self.cpu_core_s * k, "cores_busy": self.cpu_core_s / self.seconds}


def rate(make_iter, B: int, n: int, warm: int, dev) -> dict:
    it = endless(make_iter)
    for _ in range(warm):
        next(it)
    sync()
    with Meter(dev) as m:
        for _ in range(n):
            b = next(it)
        sync()
    del b
    return {"samples_per_s": B * n / m.seconds, **{f"per_1000_{k}": v for k, v in m.per_1000(B * n).items()}}


def rss_gb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2 ** 20
    return 0.0


# ---------------------------------------------------------------------------------------------
# decode comparison


def decode_bench(dev, qscale: int, batch: int, rounds: int = 30) -> dict:
    """Decoders on the same bitstreams: frames/s, host ms per call, bytes/frame (480x640 and 180x320)."""
    from robocache._C import decode_jpeg
    from robocache.frames.jpeg import _library, backend
    out = {"backend": backend(dev)}
    for h, w in ((H, W), (480, 640)):
        pool = camera_pool(512, h, w, seed=1)
        data, offsets = pack(encode_all(pool, h, w, qscale))
        rng = np.random.default_rng(0)
        ids = [rng.integers(0, 512, batch).astype(np.int64) for _ in range(rounds)]
        planes = torch.empty((batch, yuv420_bytes(h, w)), dtype=torch.uint8, device=dev)
        lib = _library()
        host, t = [], None
        for k in range(rounds + 3):
            if k == 3:
                sync()
                t = time.perf_counter()
            t0 = time.perf_counter()
            decode_jpeg(data, offsets, ids[k % rounds], planes, height=h, width=w, library=lib)
            host.append(time.perf_counter() - t0)
        sync()
        r = {"robocache_frames_per_s": batch * rounds / (time.perf_counter() - t),
             "robocache_host_ms_per_call": 1e3 * statistics.median(host[3:]),
             "bytes_per_frame": data.nbytes / 512}
        try:
            from torchvision.io import decode_jpeg as tv_decode
            blobs = [torch.from_numpy(data[offsets[i]:offsets[i + 1]].copy()) for i in range(512)]
            host = []
            for k in range(rounds + 3):
                if k == 3:
                    sync()
                    t = time.perf_counter()
                t0 = time.perf_counter()
                tv_decode([blobs[i] for i in ids[k % rounds]], device=dev)
                host.append(time.perf_counter() - t0)
            sync()
            r.update(torchvision_frames_per_s=batch * rounds / (time.perf_counter() - t),
                     torchvision_host_ms_per_call=1e3 * statistics.median(host[3:]))
        except Exception as e:  # noqa: BLE001 (reported, not fatal)
            r["torchvision"] = f"{type(e).__name__}: {e}"[:200]
        out_cpu = np.empty((64, yuv420_bytes(h, w)), np.uint8)
        t = time.perf_counter()
        decode_rows_cpu(data, offsets, ids[0][:64], out_cpu, h, w)
        r["pyav_cpu_frames_per_s_1core"] = 64 / (time.perf_counter() - t)
        out[f"{h}x{w}"] = r
    return out


def layout_bench(dev, qscale: int, batch: int, rounds: int = 30) -> dict:
    """Issue 32 item 2: the same 3 x ``batch`` camera frames (180x320) decoded by nvJPEG as 3 calls of
    ``batch`` (one per camera, today's loader), one call of 3 x ``batch``, or ``batch`` atlases (the 3
    cameras of a timestep stacked into one 540x320 JPEG); camera frames/s and bytes per camera frame."""
    from robocache._C import decode_jpeg
    from robocache.frames.jpeg import _library, backend
    lib = _library()
    pool = camera_pool(3 * 256, seed=2)
    Y, C = H * W, ((H + 1) // 2) * ((W + 1) // 2)
    atlas = np.concatenate([np.concatenate([pool[k::3, :Y] for k in range(3)], 1),        # 3 Y planes stacked
                            np.concatenate([pool[k::3, Y:Y + C] for k in range(3)], 1),
                            np.concatenate([pool[k::3, Y + C:] for k in range(3)], 1)], 1)
    single = pack(encode_all(pool, H, W, qscale))
    stacked = pack(encode_all(atlas, 3 * H, W, qscale))
    rng = np.random.default_rng(0)
    steps = [rng.integers(0, 256, batch).astype(np.int64) for _ in range(rounds)]
    planes = torch.empty((3 * batch, yuv420_bytes(H, W)), dtype=torch.uint8, device=dev)
    big = torch.empty((batch, yuv420_bytes(3 * H, W)), dtype=torch.uint8, device=dev)

    def per_camera(ids):
        for k in range(3):
            decode_jpeg(*single, 3 * ids + k, planes[k * batch:(k + 1) * batch], height=H, width=W, library=lib)

    def one_call(ids):
        decode_jpeg(*single, np.concatenate([3 * ids + k for k in range(3)]), planes, height=H, width=W, library=lib)

    def atlases(ids):
        decode_jpeg(*stacked, ids, big, height=3 * H, width=W, library=lib)

    out = {"backend": backend(dev), "batch": batch, "bytes_per_camera_frame": {
        "single": single[0].nbytes / len(pool), "atlas": stacked[0].nbytes / len(pool)}}
    for name, fn in (("per_camera", per_camera), ("one_call", one_call), ("atlas", atlases)):
        for k in range(3):
            fn(steps[k])
        sync()
        t = time.perf_counter()
        for ids in steps:
            fn(ids)
        sync()
        out[name + "_frames_per_s"] = 3 * batch * rounds / (time.perf_counter() - t)
    return out


# ---------------------------------------------------------------------------------------------
# the torch DataLoader contender


def encode_mp4s(pool, E: int, root: Path) -> list:
    """E episodes x 3 cameras of EP_LEN frames as AV1 mp4 (libsvtav1, g=2, crf=30: LeRobot's)."""
    from concurrent.futures import ProcessPoolExecutor
    jobs = [(str(root / f"ep{e:04d}_{c}.mp4"), e * 7 + k) for e in range(E) for k, c in enumerate(CAMS)]
    with ProcessPoolExecutor(min(16, os.cpu_count() or 1)) as pool_:
        list(pool_.map(_encode_one, [(p, s, pool) for p, s in jobs], chunksize=1))
    return [[jobs[e * 3 + k][0] for k in range(3)] for e in range(E)]


def _encode_one(args):
    os.environ["SVT_LOG"] = "1"          # SVT-AV1's banner per file, otherwise
    path, seed, pool = args
    pick = np.random.default_rng(seed).integers(0, len(pool), EP_LEN)
    # robocache's writer: an AV1 encode in a child with a deadline (SVT-AV1 can deadlock on a loaded machine)
    encode_mp4(path, pool[pick].reshape(EP_LEN, H * 3 // 2, W), "libsvtav1", FPS,
               {"g": "2", "crf": "30", "preset": "12"}, input_format="yuv420p")


class PyAVSamples(torch.utils.data.Dataset):
    """LeRobot's way: per sample, each camera's video opened, sought to the key frame before the
    timestamp and decoded up to it (PyAV), RGB -> [1, 3, H, W] float; low-dim windows in NumPy."""

    def __init__(self, mp4s, lows):
        self.mp4s, self.lows = mp4s, lows
        self.n = len(mp4s) * EP_LEN

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        from robocache.bench.torch_loader import pyav_frame_at
        e, k = divmod(i, EP_LEN)
        t = k / FPS
        st, act = self.lows[e]["state"][0], self.lows[e]["action"][0]
        out = {"state": torch.from_numpy(st[k:k + 1]),
               "action": torch.from_numpy(np.concatenate([act[k:k + CHUNK],
                                                          np.repeat(act[-1:], max(0, k + CHUNK - EP_LEN), 0)]))}
        for c, path in zip(CAMS, self.mp4s[e]):
            out[c] = pyav_frame_at(path, t)
        return out


# ---------------------------------------------------------------------------------------------


def jpeg_stores(pool, pdata, poff, E: int, layout: str, qscale: int, dev) -> dict:
    """{camera: FrameStore} of E episodes in the compressed tier. ``per_camera``: each camera's frames
    its own JPEGs (camera k: runs of the pool's bitstreams from its own random starts); ``atlas``: the
    cameras of a timestep one JPEG (robocache.frames.atlas), camera k showing pool frame (i + k * P/3) mod P
    in atlas i of the pool, the atlas pool laid out the same way."""
    if layout == "per_camera":
        stores = {}
        for k, c in enumerate(CAMS):
            data, offsets = replicate(pdata, poff, E, seed=k)
            stores[c] = FrameStore(data, format="jpeg", height=H, width=W, channels=3, tier="compressed",
                                   device=dev, matrix="bt601", offsets=offsets, qscale=qscale)
        return stores
    from robocache.frames import atlas
    P, lay = len(pool), atlas.AtlasLayout(len(CAMS), H, W)
    composed = lay.compose([pool[(np.arange(P) + k * (P // len(CAMS))) % P] for k in range(len(CAMS))])
    adata, aoff = pack(encode_all(composed, lay.atlas_height, W, qscale))
    data, offsets = replicate(adata, aoff, E, seed=0)
    return atlas.stores(data, offsets, CAMS, height=H, width=W, device=dev, qscale=qscale)


def compressed_part(args, dev, pool, pdata, poff, eps, times, res, save):
    """The set in the compressed (JPEG) tier, in each --jpeg-layout: samples/s per nvJPEG backend at
    --batch and 4x, and the step costs. Returns a fixed batch (for the paired step costs) and the loaders
    (kept for the host part)."""
    E = len(eps)
    fixed_batch, loaders = None, {}
    res["robocache_compressed"], res["set"] = {}, {}
    for layout in args.jpeg_layout:
        loaders = {}
        gc.collect()
        t = time.perf_counter()
        stores = jpeg_stores(pool, pdata, poff, E, layout, args.qscale, dev)
        ds = robocache.Dataset.from_episodes(eps, device=dev, frames={c: (s, times) for c, s in stores.items()})
        res["set"][layout] = {"episodes": E, "camera_frames": E * EP_LEN * len(CAMS), "samples": E * EP_LEN,
                              "rgb_gb": E * EP_LEN * len(CAMS) * H * W * 3 / 1e9,
                              "compressed_gb": sum(s.nbytes for s in stores.values()) / 1e9,
                              "bytes_per_camera_frame": sum(s.nbytes for s in stores.values()) / (E * EP_LEN * len(CAMS)),
                              "build_s": time.perf_counter() - t, "host_rss_gb": rss_gb(),
                              "gpu_allocated_gb": torch.cuda.memory_allocated(dev) / 1e9}
        print(layout, ds, flush=True)
        save()
        fixed_batch, loaders = _compressed_rates(args, dev, ds, layout, fixed_batch, res, save)
        stores = ds = None
    return fixed_batch, loaders


def _compressed_rates(args, dev, ds, layout, fixed_batch, res, save):
    B, loaders = args.batch, {}
    for backend_name in args.backends:
        name = f"{layout}:{backend_name}"
        # read at each batch; each backend keeps its own decoder (robocache.frames.jpeg.backend_choice)
        os.environ["ROBOCACHE_NVJPEG_BACKEND"] = backend_name
        loader = robocache.DataLoader(ds, B, shuffle=True, seed=0, windows=windows(), drop_last=True)
        torch.cuda.reset_peak_memory_stats(dev)
        r = rate(lambda: iter(loader), B, 300, 5, dev)
        r["gpu_peak_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
        r["decoder"] = robocache.frames.jpeg.backend(dev)
        big = robocache.DataLoader(ds, 4 * B, shuffle=True, seed=0, windows=windows(), drop_last=True)
        r["samples_per_s_batch_x4"] = rate(lambda: iter(big), 4 * B, 60, 3, dev)["samples_per_s"]
        big = None
        res["robocache_compressed"][name] = r
        print("compressed", name, r, flush=True)
        if fixed_batch is None:
            fixed_batch = {k: v.clone() for k, v in next(iter(loader)).items()}
        save()
        step_part(args, dev, name, loader, fixed_batch, res, save)
        loaders[name] = loader
    os.environ.pop("ROBOCACHE_NVJPEG_BACKEND", None)
    return fixed_batch, loaders


def step_part(args, dev, name, loader, fixed_batch, res, save) -> None:
    """The loader's cost in each policy's step, paired against fixed batches (before the torch
    DataLoader's workers exist in the process)."""
    fixed = lambda: iter(lambda: fixed_batch, None)  # noqa: E731
    mine = {name: (lambda: endless(lambda: iter(loader)), 3)}
    for policy in args.policies:
        rounds, steps = (args.rounds, args.steps) if policy == "small" else (2, max(10, args.steps // 2))
        res["step"][policy][name] = step_costs(fixed, mine, rounds, steps, dev, make_policy(policy))
        print("step", policy, name, res["step"][policy][name], flush=True)
        save()


def lossless_pool(args):
    """I420 frames the lossless set is laid out from, and what they are."""
    from real_frames import REAL, real_rows
    kind = args.lossless_pool or ("real" if any(REAL.glob("episode_*.mp4")) else "generated")
    if kind == "real":
        rows, h, w = real_rows(300, (H, W))
        assert (h, w) == (H, W), (h, w)
        return rows, f"real: {len(rows)} CR5 AV1 frames from 3 episodes, resized to {H}x{W}"
    return camera_pool(min(args.pool, 1024)), "generated: camera_pool (smooth fields + sensor noise)"


def lossless_part(args, dev, eps, times, fixed_batch, res, save):
    """The set in the lossless tier: bytes, memory, samples/s at --batch and 4x, step costs, and JPEG's
    bytes and PSNR on the same frames. Returns a fixed batch for the paired step costs."""
    from robocache.frames.lossless import encode_all as encode_lossless
    E, B = len(eps), args.batch
    rows, source = lossless_pool(args)
    t = time.perf_counter()
    pdata, poff = encode_lossless(rows, H, W)
    code_s = time.perf_counter() - t
    stores = {}
    for k, c in enumerate(CAMS):      # one camera at a time: its bytes laid out, then pinned by the store
        data, offsets = replicate(pdata, poff, E, seed=k)
        stores[c] = FrameStore(data, format="lossless", height=H, width=W, channels=3, tier="lossless",
                               device=dev, offsets=offsets)
        del data
    ds = robocache.Dataset.from_episodes(eps, device=dev, frames={c: (s, times) for c, s in stores.items()})
    res["lossless_set"] = {"pool": source, "bytes_per_frame": float(np.diff(poff).mean()),
                           "i420_bytes_per_frame": yuv420_bytes(H, W), "pool_code_s_1thread": code_s,
                           "lossless_gb": sum(s.nbytes for s in stores.values()) / 1e9,
                           "build_s": time.perf_counter() - t, "host_rss_gb": rss_gb(),
                           "gpu_allocated_gb": torch.cuda.memory_allocated(dev) / 1e9,
                           "jpeg_same_frames": quality(rows[:256], qscales=(args.qscale,))}
    print(ds, res["lossless_set"], flush=True)
    save()
    loader = robocache.DataLoader(ds, B, shuffle=True, seed=0, windows=windows(), drop_last=True)
    torch.cuda.reset_peak_memory_stats(dev)
    r = rate(lambda: iter(loader), B, 300, 5, dev)
    r["gpu_peak_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
    big = robocache.DataLoader(ds, 4 * B, shuffle=True, seed=0, windows=windows(), drop_last=True)
    torch.cuda.reset_peak_memory_stats(dev)
    r["batch_x4"] = rate(lambda: iter(big), 4 * B, 100, 3, dev)
    r["batch_x4"]["gpu_peak_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
    r["samples_per_s_batch_x4"] = r["batch_x4"]["samples_per_s"]
    big = None
    res["robocache_lossless"] = r
    print("lossless", r, flush=True)
    if fixed_batch is None:
        fixed_batch = {k: v.clone() for k, v in next(iter(loader)).items()}
    save()
    step_part(args, dev, "lossless", loader, fixed_batch, res, save)
    return fixed_batch


def smoke() -> int:
    """CI (--smoke): every part on the CPU at toy size, in seconds, nothing timed that means anything: the
    codec at one qscale, a 2-episode compressed set (decoded by PyAV on the CPU, the tier's reference)
    through the loader, a step of the small and GR00T-shaped policies on its batch, the PyAV torch
    contender on one AV1 episode, the host tier. Any error is raised (a non-zero exit)."""
    dev = torch.device("cpu")
    pool = camera_pool(8)
    q = quality(pool[:4], qscales=(2,))[0]
    assert q["psnr_db"] > 30, q
    pdata, poff = pack(encode_all(pool, H, W, 2))
    E, rng = 2, np.random.default_rng(0)
    times, eps = [np.arange(EP_LEN) / FPS] * E, lowdim(E, rng)
    for layout in ("atlas", "per_camera"):
        stores = jpeg_stores(pool, pdata, poff, E, layout, 2, dev)
        ds = robocache.Dataset.from_episodes(eps, device=dev, frames={c: (st, times) for c, st in stores.items()})
        loader = robocache.DataLoader(ds, 4, shuffle=True, seed=0, windows=windows(), drop_last=True)
        r = rate(lambda: iter(loader), 4, 2, 1, dev)
        batch = next(iter(loader))
        assert batch[CAMS[0]].shape == (4, 1, 3, H, W), batch[CAMS[0]].shape
    from robocache.frames.lossless import encode_all as encode_lossless
    ldata, loff = encode_lossless(pool, H, W)
    lstores = {}
    for k, c in enumerate(CAMS):
        data, offsets = replicate(ldata, loff, E, seed=k)
        lstores[c] = FrameStore(data, format="lossless", height=H, width=W, channels=3, tier="lossless",
                                device=dev, offsets=offsets)
    lds = robocache.Dataset.from_episodes(eps, device=dev, frames={c: (st, times) for c, st in lstores.items()})
    lb = next(iter(robocache.DataLoader(lds, 4, shuffle=True, seed=0, windows=windows(), drop_last=True)))
    assert lb[CAMS[0]].shape == (4, 1, 3, H, W), lb[CAMS[0]].shape
    model = Policy(width=8)
    ((model(batch) - batch["action"]) ** 2).mean().backward()
    groot = GrootSized(len(CAMS), STATE, ACTION, CHUNK, vision_layers=1, head_layers=1)
    groot.loss(batch["state"], [batch[c][:, 0] for c in CAMS], batch["action"]).backward()
    with tempfile.TemporaryDirectory(prefix="bench-scale-smoke-") as tmp:
        mp4s = encode_mp4s(pool, 1, Path(tmp))
        tds = PyAVSamples(mp4s, [{k: (v[0], v[1]) for k, v in eps[0].items()}])
        tb = next(iter(torch.utils.data.DataLoader(tds, 2, shuffle=True)))
        assert tb[CAMS[0]].shape[0] == 2, tb[CAMS[0]].shape
    dec = np.empty((len(poff) - 1, yuv420_bytes(H, W)), np.uint8)
    decode_rows_cpu(pdata, poff, np.arange(len(poff) - 1), dec, H, W)
    hstores = {c: FrameStore.create(dec[np.resize(np.arange(len(dec)), EP_LEN)], format="yuv420", height=H,
                                    width=W, tier="cpu", device=dev) for c in CAMS}
    hds = robocache.Dataset.from_episodes(eps[:1], device=dev, frames={c: (st, times[:1]) for c, st in hstores.items()})
    hb = next(iter(robocache.DataLoader(hds, 4, seed=0, windows=windows())))
    assert hb[CAMS[0]].shape == (4, 1, 3, H, W)
    print(f"bench_scale smoke: ok (codec {q['bytes_per_frame']:.0f} B/frame at {q['psnr_db']:.1f} dB; "
          f"compressed loader {r['samples_per_s']:.0f} samples/s on the CPU, not a measurement)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=3_060_000, help="camera frames in the set (all 3 cameras)")
    ap.add_argument("--pool", type=int, default=4096)
    ap.add_argument("--qscale", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--mp4-episodes", type=int, default=32)
    ap.add_argument("--host-frames", type=int, default=240_000, help="camera frames of the host-tier subset")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--backends", nargs="+", default=["hardware", "gpu_hybrid"],
                    choices=["auto", "hardware", "gpu_hybrid", "hybrid", "default"], help="nvJPEG backends measured")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES,
                    help="policies whose step cost is measured")
    ap.add_argument("--tiers", nargs="+", default=["compressed", "lossless"], choices=["compressed", "lossless"],
                    help="frame tiers of the DROID-shaped set measured (each built, timed, then freed)")
    ap.add_argument("--jpeg-layout", nargs="+", default=["atlas", "per_camera"], choices=["atlas", "per_camera"],
                    help="the compressed tier's layouts measured: the 3 cameras of a timestep one JPEG, or one each")
    ap.add_argument("--lossless-pool", choices=["real", "generated"], default=None,
                    help="frames the lossless set is laid out from (default: real when ROBOCACHE_DATA has them)")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--skip", nargs="*", default=[], choices=["decode", "ingest", "host"],
                    help="parts left out (a shorter run)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true", help="CI: every part on the CPU at toy size, not timed")
    args = ap.parse_args(argv)
    if args.smoke:
        return smoke()
    if not torch.cuda.is_available():
        print("bench_scale needs a CUDA GPU")
        return 1
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "args": vars(args) | {"json": None}}

    def save():
        print(json.dumps(res, indent=1, default=str)[-3000:], flush=True)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1, default=str))

    # ---- decoders -----------------------------------------------------------------------------
    res["decode"] = {}
    for b in () if "decode" in args.skip else ("hardware", "gpu_hybrid"):
        env = {**os.environ, "ROBOCACHE_NVJPEG_BACKEND": b}
        code = ("import json,sys,torch; sys.path.insert(0,'benchmarks'); import bench_scale as s; "
                f"print('@@'+json.dumps(s.decode_bench(torch.device('cuda',0), {args.qscale}, {args.batch * 3})))")
        p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("@@")]
        res["decode"][b] = json.loads(line[0][2:]) if line else {"error": (p.stderr or p.stdout)[-600:]}
        print(b, json.dumps(res["decode"][b])[:600], flush=True)
    pool = camera_pool(args.pool)
    res["quality"] = quality(pool[:256])
    save()
    if args.decode_only:
        return 0

    # ---- the compressed set ------------------------------------------------------------------
    E = -(-args.frames // (len(CAMS) * EP_LEN))
    rng = np.random.default_rng(0)
    times = [np.arange(EP_LEN) / FPS] * E
    eps = lowdim(E, rng)
    B = args.batch
    fixed_batch, loaders = None, {}
    res["step"] = {p: {} for p in args.policies}
    pdata, poff = pack(encode_all(pool, H, W, args.qscale))
    if "compressed" in args.tiers:
        fixed_batch, loaders = compressed_part(args, dev, pool, pdata, poff, eps, times, res, save)
    if "lossless" in args.tiers:
        loaders = None      # the compressed set freed before the lossless one is laid out
        gc.collect()
        fixed_batch = lossless_part(args, dev, eps, times, fixed_batch, res, save)
    # the torch contender's step costs are paired against the last tier's fixed batch (same shapes)
    fixed = lambda: iter(lambda: fixed_batch, None)  # noqa: E731

    # ---- the torch DataLoader over AV1 mp4s ----------------------------------------------------
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    atexit.register(shutil.rmtree, tmp, True)       # GBs of mp4s, gone however the run ends
    t = time.perf_counter()
    mp4s = encode_mp4s(pool[:1024], args.mp4_episodes, tmp)
    res["mp4"] = {"episodes": args.mp4_episodes, "encode_s": time.perf_counter() - t,
                  "bytes_per_frame": sum(os.path.getsize(p) for ps in mp4s for p in ps) / (len(mp4s) * 3 * EP_LEN)}
    lows = [{k: (v[0], v[1]) for k, v in eps[e].items()} for e in range(args.mp4_episodes)]
    tds = PyAVSamples(mp4s, lows)
    tl = torch.utils.data.DataLoader(tds, B, shuffle=True, num_workers=args.workers, drop_last=True,
                                     pin_memory=True, persistent_workers=True, prefetch_factor=4)

    def torch_iter():
        for b in tl:
            yield {k: v.to(dev, non_blocking=True) for k, v in b.items()}
    res["torch_pyav"] = rate(torch_iter, B, 20, 3, dev)
    print("torch", res["torch_pyav"], flush=True)
    save()

    for policy in args.policies:
        steps = args.steps if policy == "small" else max(10, args.steps // 2)
        res["step"][policy]["torch_pyav"] = step_costs(fixed, {"torch_pyav": (lambda: endless(torch_iter), 3)}, 1,
                                                       steps, dev, make_policy(policy))["torch_pyav"]
        print("step torch", policy, res["step"][policy]["torch_pyav"], flush=True)
    tl = None
    gc.collect()
    save()

    if "ingest" in args.skip and "host" in args.skip:
        return 0
    # ---- ingest: the real pipeline on the mp4s ------------------------------------------------
    from robocache.frames.compress import ingest_compressed
    os.environ["ROBOCACHE_CACHE_DIR"] = str(tmp / "cache")
    paths = [ps[0] for ps in mp4s]
    res["ingest"] = {}
    camera_frames = E * EP_LEN * len(CAMS)
    for tier in args.tiers:
        codec = {"compressed": "jpeg", "lossless": "lossless"}[tier]
        cold = ingest_compressed(paths, qscale=args.qscale if codec == "jpeg" else None, codec=codec,
                                 show_progress=False)
        warm = ingest_compressed(paths, qscale=args.qscale if codec == "jpeg" else None, codec=codec,
                                 show_progress=False)
        res["ingest"][tier] = {"frames": len(cold.offsets) - 1, "bytes": int(cold.offsets[-1]),
                               "cold_frames_per_s": cold.frames_per_s, "cache_frames_per_s": warm.frames_per_s,
                               "cores": os.cpu_count(),
                               "projected_cold_hours_for_set": camera_frames / cold.frames_per_s / 3600}
        print("ingest", tier, res["ingest"][tier], flush=True)
        save()
    if "compressed" in args.tiers and "atlas" in args.jpeg_layout:
        from robocache.frames.compress import ingest_atlas
        from robocache.video import probe_sources
        cams = [[ps[k] for ps in mp4s] for k in range(len(CAMS))]
        spec, counts, _ = probe_sources(cams[0], backend="pyav")
        cold = ingest_atlas(cams, qscale=args.qscale, spec=spec, counts=counts, show_progress=False)
        warm = ingest_atlas(cams, qscale=args.qscale, spec=spec, counts=counts, show_progress=False)
        res["ingest"]["compressed_atlas"] = {
            "camera_frames": (len(cold.offsets) - 1) * len(CAMS), "bytes": int(cold.offsets[-1]),
            "cold_frames_per_s": cold.frames_per_s, "cache_frames_per_s": warm.frames_per_s, "cores": os.cpu_count(),
            "projected_cold_hours_for_set": camera_frames / cold.frames_per_s / 3600}
        print("ingest atlas", res["ingest"]["compressed_atlas"], flush=True)
        save()

    # ---- the host tier on a subset that fits ------------------------------------------------------
    loader = loaders = ds = stores = None
    gc.collect()
    He = max(1, args.host_frames // (len(CAMS) * EP_LEN))
    dec = np.empty((len(poff) - 1, yuv420_bytes(H, W)), np.uint8)
    decode_rows_cpu(pdata, poff, np.arange(len(poff) - 1), dec, H, W)
    hstores = {}
    for k, c in enumerate(CAMS):
        pick = np.random.default_rng(k).integers(0, len(dec), He * EP_LEN)
        hstores[c] = FrameStore.create(dec[pick], format="yuv420", height=H, width=W, tier="host", device=dev)
    hds = robocache.Dataset.from_episodes(eps[:He], device=dev, frames={c: (s, times[:He]) for c, s in hstores.items()})
    hl = robocache.DataLoader(hds, B, shuffle=True, seed=0, windows=windows(), drop_last=True)
    res["robocache_host"] = {**rate(lambda: iter(hl), B, 150, 5, dev), "camera_frames": He * EP_LEN * 3,
                             "pinned_gb": sum(s.nbytes for s in hstores.values()) / 1e9}
    print("host", res["robocache_host"], flush=True)
    res["ratio_vs_torch"] = {name: r["samples_per_s"] / res["torch_pyav"]["samples_per_s"]
                             for name, r in {**res.get("robocache_compressed", {}),
                                             **({"lossless": res["robocache_lossless"]}
                                                if "robocache_lossless" in res else {})}.items()}
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
