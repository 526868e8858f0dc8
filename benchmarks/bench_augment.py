"""Augmentation benchmark: robocache's augmented batches against the same loader without augmentation
and against a torch DataLoader whose workers run torchvision v2 per sample (GR00T's and LeRobot's way).

    python benchmarks/bench_augment.py [--batch-size 64] [--workers 16] [--json PATH] [--smoke]

Set: 3 cameras of 480x640 uint8 frames on the device (generated: smooth colour fields plus noise, 12
episodes of 10 s at 15 fps), one frame per camera per sample, out 224x224 float32 CHW.
Pipelines (train mode):
  groot     GR00T N1.5's fine-tune chain: VideoCrop 0.95 (random), Resize 224x224 (antialiased),
            ColorJitter(0.3, 0.4, 0.5, 0.08) in a random order, one draw per sample for every camera
  lerobot   LeRobot's ImageTransforms defaults (3 of brightness/contrast/saturation/hue/sharpness/affine
            by weight, in order), after a resize to 224x224 so that every row outputs the same size
  groot_plain_resize  the GR00T chain with the plain row's resize (bilinear, no antialias): what the
            augmentation itself costs next to the plain loader
Rows: the loader without augmentation (plain 224x224 resize: the 0.9x target's reference), with each
pipeline, a torch DataLoader with --workers workers running torchvision v2 on each sample (frames
pre-decoded in host memory: the workers do only the transforms), and the loader's share of a
GR00T-sized step (benchmarks/groot_sized.py) with augmentation on. Checked first: in eval mode
(center crop, no random op) robocache's batch equals torchvision's on the same frames within 1/255.
The plain and GR00T rows again with the frames stored as I420 planes (how video frames are kept).
--smoke: tiny sizes on the CPU, the checks and one pass of each row, untimed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import robocache  # noqa: E402
import robocache.augment as A  # noqa: E402
from robocache import Window  # noqa: E402

CAMERAS = ("observation.images.left", "observation.images.right", "observation.images.wrist")


def make_set(H: int, W: int, episodes: int, seconds: float, fps: float, device):
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    eps = []
    for e in range(episodes):
        n = int(seconds * fps)
        t = np.arange(n) / fps
        ep = {"observation.state": (rng.normal(size=(n, 7)).astype(np.float32), t)}
        for c in CAMERAS:
            base = np.stack([np.sin(xx / (20 + 7 * k + e) + yy / (31 + k)) for k in range(3)], -1)
            frames = np.empty((n, H, W, 3), np.uint8)
            for i in range(n):
                noise = rng.integers(0, 40, (H, W, 3), dtype=np.uint8)
                frames[i] = np.clip(110 + 90 * np.roll(base, i, axis=1), 0, 215).astype(np.uint8) + noise
            ep[c] = (frames, t)
        eps.append(ep)
    return robocache.Dataset.from_episodes(eps, device=device, rates={k: fps for k in eps[0]})


def make_yuv_set(H: int, W: int, episodes: int, seconds: float, fps: float, device):
    """The same shape of set with each camera's frames stored as video decodes them (I420 planes)."""
    from robocache.frames.store import FrameStore
    from robocache.video.layout import yuv420_bytes
    rng = np.random.default_rng(1)
    n = int(seconds * fps)
    times = [e * 100.0 + np.arange(n) / fps for e in range(episodes)]
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    base = (110 + 90 * np.sin(xx / 23 + yy / 31)).astype(np.uint8)
    ch, cw = (H + 1) // 2, (W + 1) // 2
    frames = {}
    for k, c in enumerate(CAMERAS):
        rows = np.empty((n * episodes, yuv420_bytes(H, W)), np.uint8)
        for i in range(len(rows)):
            y = np.roll(base, i + 7 * k, axis=1) + rng.integers(0, 30, (H, W), dtype=np.uint8)
            uv = np.full(2 * ch * cw, 128, np.uint8) + rng.integers(0, 20, 2 * ch * cw, dtype=np.uint8)
            rows[i] = np.concatenate([y.ravel(), uv])
        store = FrameStore.create(rows, format="yuv420", height=H, width=W, channels=3, tier="device"
                                  if device.type == "cuda" else "cpu", device=device)
        frames[c] = (store, times)
    eps = [{"observation.state": (rng.normal(size=(n, 7)).astype(np.float32), t)} for t in times]
    return robocache.Dataset.from_episodes(eps, device=device, frames=frames)


def pipelines(size: int) -> dict:
    lr = A.lerobot()
    return {"groot": A.groot_n15(height=size, width=size),
            # the same chain resized as the plain row is (bilinear, no antialias): augmentation's own cost
            "groot_plain_resize": A.Augment([A.FractionCrop(0.95), A.Resize((size, size), antialias=False),
                                             A.ColorJitter(**A.presets.GROOT_N15_JITTER)], share_cameras=True),
            "lerobot": A.Augment([A.Resize((size, size)), *lr.transforms], share_cameras=False)}


def windows(aug, size: int) -> dict:
    w = {"state": Window("observation.state")}
    for c in CAMERAS:
        w[c] = (Window(c, layout="BTCHW", augment=aug) if aug is not None
                else Window(c, layout="BTCHW", resize=(size, size)))
    return w


def torchvision_compose(name: str, size: int, H: int, W: int, train: bool = True):
    from torchvision.transforms import v2
    if name == "groot":
        crop = (int(H * 0.95), int(W * 0.95))
        return v2.Compose([v2.RandomCrop(crop) if train else v2.CenterCrop(crop), v2.Resize((size, size)),
                           *([v2.ColorJitter(0.3, 0.4, 0.5, 0.08)] if train else [])])
    members = [v2.ColorJitter(brightness=(0.8, 1.2)), v2.ColorJitter(contrast=(0.8, 1.2)),
               v2.ColorJitter(saturation=(0.5, 1.5)), v2.ColorJitter(hue=(-0.05, 0.05)), SharpnessJitter((0.5, 1.5)),
               v2.RandomAffine(degrees=(-5, 5), translate=(0.05, 0.05))]
    return v2.Compose([v2.Resize((size, size)), SubsetApply(members, 3)] if train else [v2.Resize((size, size))])


class SharpnessJitter(torch.nn.Module):
    """LeRobot's SharpnessJitter: adjust_sharpness with a factor uniform in the range."""

    def __init__(self, rng):
        super().__init__()
        self.rng = rng

    def forward(self, x):
        from torchvision.transforms.v2 import functional as F
        return F.adjust_sharpness(x, float(torch.empty(1).uniform_(*self.rng)))


class SubsetApply(torch.nn.Module):
    """LeRobot's RandomSubsetApply (equal weights, listed order): n of the members per call."""

    def __init__(self, members, n):
        super().__init__()
        self.members, self.n = members, n

    def forward(self, x):
        for i in torch.multinomial(torch.ones(len(self.members)), self.n).sort().values.tolist():
            x = self.members[i](x)
        return x


class TorchvisionSet(torch.utils.data.Dataset):
    """GR00T's way: each item's frames (pre-decoded, host memory) to float CHW, then torchvision v2 per sample."""

    def __init__(self, frames: dict, compose):
        self.frames, self.compose = frames, compose
        self.n = len(next(iter(frames.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        views = [torch.from_numpy(self.frames[c][i]).permute(2, 0, 1).float() / 255 for c in CAMERAS]
        out = self.compose(torch.stack(views))       # one draw for the sample's views (GR00T's sharing)
        return {c: out[k] for k, c in enumerate(CAMERAS)}


def host_frames(ds) -> dict:
    return {c: ds.streams[c].frames[:].cpu().numpy() for c in CAMERAS}


def check_eval(ds, size: int, H: int, W: int) -> float:
    """Eval mode (deterministic): robocache's batch against torchvision on the same frames."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("check: torchvision not installed, eval-mode comparison skipped")
        return float("nan")
    aug = A.groot_n15(height=size, width=size, train=False)
    loader = robocache.DataLoader(ds, 4, windows=windows(aug, size), shuffle=False, cuda_graph=False)
    batch = next(iter(loader))
    frames = host_frames(ds)
    tv = TorchvisionSet(frames, torchvision_compose("groot", size, H, W, train=False))
    worst = 0.0
    for i in range(4):
        ref = tv[i]
        for c in CAMERAS:
            worst = max(worst, float((batch[c][i, 0].cpu() - ref[c]).abs().max()))
    assert worst <= 1 / 255 + 1e-6, f"eval-mode batch differs from torchvision by {worst * 255:.3f}/255"
    print(f"check: eval-mode batches equal torchvision's within {worst * 255:.4f}/255")
    return worst


def samples_per_s(loader, B: int, n: int, dev) -> float:
    it = iter(loader)
    for _ in range(3):
        next(it)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            next(it)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return n * B / (time.perf_counter() - t)


def torch_dl_rate(ds, name, size, H, W, B, workers, n) -> float:
    tv = TorchvisionSet(host_frames(ds), torchvision_compose(name, size, H, W))
    dl = torch.utils.data.DataLoader(tv, B, shuffle=True, num_workers=workers, pin_memory=workers > 0,
                                     persistent_workers=workers > 0, drop_last=True)
    it = iter(dl)
    next(it)
    t = time.perf_counter()
    k = 0
    for _ in range(n):
        b = next(it, None)
        if b is None:
            it = iter(dl)
            b = next(it)
        k += 1
    return k * B / (time.perf_counter() - t)


def groot_step_share(ds, aug, size: int, B: int, steps: int, dev) -> dict:
    """Step time of the GR00T-sized policy fed by the augmenting loader against fixed batches."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from groot_sized import GrootSized
    model = GrootSized(len(CAMERAS), 7, 7, 16).to(dev)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    loader = robocache.DataLoader(ds, B, windows=windows(aug, size), drop_last=True)
    action = torch.randn(B, 16, 7, device=dev)

    def step(b):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model.loss(b["state"], [b[c][:, 0] for c in CAMERAS], action)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def timed(batches) -> float:
        for _ in range(3):
            step(next(batches))
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / steps

    def endless():
        while True:
            yield from loader

    fixed = next(iter(loader))
    t_fixed = timed(iter(lambda: fixed, None))
    t_loader = timed(endless())
    return {"step_ms_fixed": t_fixed * 1e3, "step_ms_loader": t_loader * 1e3,
            "loader_share": max(0.0, 1 - t_fixed / t_loader)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks and one pass, untimed")
    args = ap.parse_args(argv)
    smoke = args.smoke
    dev = torch.device("cuda" if (not smoke and torch.cuda.is_available() and robocache.cuda_available()) else "cpu")
    if not smoke and dev.type != "cuda":
        print("bench_augment needs a CUDA GPU (--smoke runs its checks on the CPU, untimed)")
        return 0
    H, W, size, B = (48, 64, 32, 4) if smoke else (480, 640, 224, args.batch_size)
    n = 1 if smoke else args.batches
    ds = make_set(H, W, 2 if smoke else 8, 2.0 if smoke else 10.0, 15.0, dev)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    result: dict = {"gpu": gpu, "batch_size": B, "frames": [H, W], "out": size, "cameras": len(CAMERAS),
                    "torch": torch.__version__, "eval_check_max_diff": check_eval(ds, size, H, W)}
    plain = robocache.DataLoader(ds, B, windows=windows(None, size), drop_last=True)
    result["plain"] = samples_per_s(plain, B, n, dev)
    for name, aug in pipelines(size).items():
        loader = robocache.DataLoader(ds, B, windows=windows(aug, size), drop_last=True)
        r = {"robocache": samples_per_s(loader, B, n, dev)}
        r["vs_plain"] = r["robocache"] / result["plain"]
        try:
            if name == "groot_plain_resize":
                raise ImportError
            r["torch_dl"] = torch_dl_rate(ds, name, size, H, W, B, 0 if smoke else args.workers, n)
            r["x_vs_torch_dl"] = r["robocache"] / r["torch_dl"]
        except ImportError:
            r["torch_dl"] = None
        if dev.type == "cuda" and name == "groot":
            r.update(groot_step_share(ds, aug, size, B, 20, dev))
        result[name] = r
    # frames stored as video decodes them (I420): the plain loader and the GR00T chain
    yds = make_yuv_set(H, W, 2 if smoke else 8, 2.0 if smoke else 10.0, 15.0, dev)
    yplain = samples_per_s(robocache.DataLoader(yds, B, windows=windows(None, size), drop_last=True), B, n, dev)
    ygroot = samples_per_s(robocache.DataLoader(yds, B, windows=windows(pipelines(size)["groot"], size),
                                                drop_last=True), B, n, dev)
    result["yuv"] = {"plain": yplain, "groot": ygroot, "vs_plain": ygroot / yplain}
    print(f"bench_augment on {gpu}: {len(CAMERAS)} cameras {H}x{W} -> {size}x{size}, batch {B}"
          + (" (smoke: untimed)" if smoke else ""))
    print(f"  {'pipeline':18s} {'robocache':>12s} {'vs plain':>9s} {'torch DL':>10s} {'x vs DL':>8s} {'step share':>10s}")
    print(f"  {'plain':18s} {result['plain']:12.0f}")
    for name in pipelines(size):
        r = result[name]
        dl = f"{r['torch_dl']:10.0f}" if r.get("torch_dl") else f"{'-':>10s}"
        x = f"{r['x_vs_torch_dl']:8.1f}" if r.get("torch_dl") else f"{'-':>8s}"
        share = f"{100 * r['loader_share']:9.1f}%" if "loader_share" in r else f"{'-':>10s}"
        print(f"  {name:18s} {r['robocache']:12.0f} {r['vs_plain']:9.2f} {dl} {x} {share}")
    y = result["yuv"]
    print(f"  I420 frames: plain {y['plain']:.0f}, groot {y['groot']:.0f} ({y['vs_plain']:.2f} of plain)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
