"""GR00T-style training loop on a LeRobot set, with the loader as a switch.

Needs torch and robocache[lerobot] (pyarrow, PyAV); nothing to download. Without --data it trains on GR00T's
PickNPlace set where the project's data folder ($ROBOCACHE_DATA, else ../shared/data) holds it, else on the
README's demo set (``python -m robocache demo --write-lerobot``), written once by examples/demo_data.py:

    python examples/train_groot_style.py --steps 50 --batch-size 16
    python examples/train_groot_style.py --data Isaac-GR00T/demo_data/robot_sim.PickNPlace --steps 200
    python examples/train_groot_style.py --loader torch --no-video
    python examples/train_groot_style.py --augment n15     # GR00T's fine-tune image augmentation

Batches as GR00T builds them (``delta_indices``, min/max normalization): state ``[B, 1, S]`` (index 0),
action chunk ``[B, 16, A]`` (indices 0..15 at the set's fps, the last action repeated past an episode's end
with ``action_is_pad`` True) and, with ``--video``, the camera frame nearest to the anchor as
``[B, 1, 3, H, W]`` float in [0, 1] (PickNPlace: S = A = 44 at 20 fps, the 256x256 ego_view; the demo set:
S = A = 7 at 15 fps, a 96x128 top view); the policy's sizes come from the set. ``--loader torch`` is the
plain ``torch.utils.data.DataLoader`` baseline (robocache/bench/torch_loader.py, NumPy in
``__getitem__``); ``--loader robocache`` is ``robocache.DataLoader``. Both give the same batches
for the same seed (tests/test_train_groot_style.py). The policy predicts the action chunk from the
state (and frame) with a masked MSE; the loop prints the time each step waits for data and the
time it computes, and samples/s at the end. ``--augment n15`` / ``n16`` (robocache loader) augments the
frame as GR00T's fine-tuning does (``robocache.augment.groot_n15``: crop 0.95, resize 224x224, color jitter;
``groot_n16``: crop 0.95, shortest edge 224, rotation +-5 degrees, color jitter), inside the frame gather.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

try:
    import robocache
except ModuleNotFoundError:  # run from a checkout without installing: the repo root is the package's parent
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import robocache
from robocache import Window

STATE, ACTION = "observation.state", "action"
IMAGE = "observation.images.ego_view"   # PickNPlace's camera; another set's first camera where it has none
CHUNK = 16


def default_data() -> Path:
    """GR00T PickNPlace in the project's data folder ($ROBOCACHE_DATA, else ../shared/data beside the checkout)."""
    root = os.environ.get("ROBOCACHE_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return base / "groot_picknplace"


def pick_data(parser, path: Path | None) -> Path:
    """--data; without it PickNPlace where the project's data folder has it, else the demo set (written once).
    A missing --data folder is a usage error saying where the sets come from, not a traceback."""
    if path is None:
        if default_data().is_dir():
            return default_data()
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import demo_data

        try:
            return demo_data.lerobot_set()
        except ImportError as e:                  # pyarrow or PyAV missing
            parser.error(str(e))
    if not Path(path).is_dir():
        parser.error(f"--data {path}: no such folder. Leave --data out to train on robocache's demo set, or "
                     "for GR00T's PickNPlace: git clone --depth 1 https://github.com/NVIDIA/Isaac-GR00T and pass "
                     "--data Isaac-GR00T/demo_data/robot_sim.PickNPlace (or set ROBOCACHE_DATA to a folder "
                     "holding it as groot_picknplace/)")
    return Path(path)


def load_dataset(path, video: bool = True, device="cpu", shard_episodes=False) -> robocache.Dataset:
    """The PickNPlace set as a robocache Dataset (``video=False`` skips decoding the mp4s;
    ``shard_episodes=True``: only this torch.distributed rank's episodes are read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the set lists a second camera whose files it does not ship
        return robocache.Dataset.from_lerobot(path, load_video=video, device=device, shard_episodes=shard_episodes)


def augmentation(name: str | None):
    """GR00T's fine-tune image pipeline (train mode) for ``--augment``, or None."""
    from robocache import augment
    if name in (None, "none"):
        return None
    if name == "n15":
        return augment.groot_n15()
    if name == "n16":
        return augment.groot_n16(shortest_image_edge=224, crop_fraction=0.95, random_rotation_angle=5,
                                 color_jitter_params=dict(augment.presets.GROOT_N15_JITTER))
    raise ValueError(f"augment must be none, n15 or n16, got {name!r}")


def camera(ds: robocache.Dataset) -> str:
    """The camera the policy sees: PickNPlace's ego_view, else the set's first."""
    if not ds.camera_keys:
        raise ValueError(f"{ds.source or 'the dataset'} has no camera stream loaded (a LeRobot set's videos load "
                         "with a video backend: pip install av); train without it: --no-video")
    return IMAGE if IMAGE in ds.camera_keys else ds.camera_keys[0]


def windows(ds: robocache.Dataset, video: bool = True, augment=None) -> dict:
    """GR00T's modality config as robocache Windows: what both loaders produce (``augment``: robocache's).
    GR00T's delta_indices are frames: the windows step at the set's fps."""
    fps = ds.fps
    w = {"state": Window(STATE, indices=[0], rate=fps, normalize="min_max"),
         "action": Window(ACTION, indices=range(CHUNK), rate=fps, normalize="min_max")}
    if video:
        w["image"] = Window(camera(ds), indices=[0], rate=fps, layout="BTCHW", augment=augmentation(augment))
    return w


def make_loader(kind: str, ds: robocache.Dataset, batch_size: int = 64, seed: int = 0, epoch: int = 0,
                video: bool = True, num_workers: int = 0, augment: str | None = None):
    """An iterable of batch dicts for epoch ``epoch``; the same batches for either ``kind``.

    ``robocache``: made on ``ds.device``. ``torch``: made on the CPU by torch's DataLoader.
    """
    if augment not in (None, "none") and kind != "robocache":
        raise ValueError("--augment runs in robocache's frame gather; the torch baseline has none "
                         "(benchmarks/bench_augment.py times torchvision workers)")
    spec = windows(ds, video, augment)
    if kind == "robocache":
        loader = robocache.DataLoader(ds, batch_size, shuffle=True, seed=seed, windows=spec)
        loader.set_epoch(epoch)
        return loader
    if kind == "torch":
        from robocache.bench.torch_loader import make_torch_loader
        return make_torch_loader(ds, spec, batch_size, seed=seed, epoch=epoch, num_workers=num_workers,
                                 pin_memory=torch.cuda.is_available())
    raise ValueError(f"loader must be 'torch' or 'robocache', got {kind!r}")


class Policy(nn.Module):
    """State (+ frame) -> action chunk: an MLP over the state and a small conv image embedding
    (the default sizes are PickNPlace's; ``make_policy`` takes them from a dataset)."""

    def __init__(self, state_dim=44, action_dim=44, chunk=CHUNK, hidden=256, video=True):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.state = nn.Sequential(nn.Linear(state_dim, hidden), nn.GELU())
        self.image = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=4, padding=2), nn.GELU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.GELU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, hidden)) if video else None
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, chunk * action_dim))

    def forward(self, state, image=None):
        h = self.state(state[:, 0])                                   # [B, hidden]
        if self.image is not None:
            h = h + self.image(image[:, 0])                           # one frame per sample
        return self.head(h).view(-1, self.chunk, self.action_dim)


def make_policy(ds: robocache.Dataset, video: bool = True) -> Policy:
    """The policy sized for ``ds``: its state and action widths (the conv embedding takes any frame size)."""
    return Policy(state_dim=math.prod(ds.streams[STATE].shape), action_dim=math.prod(ds.streams[ACTION].shape),
                  video=video)


def masked_mse(pred, action, is_pad):
    """MSE over the real (not padded) steps of the chunk."""
    keep = (~is_pad).unsqueeze(-1).to(pred.dtype)                    # [B, T, 1]
    return ((pred - action) ** 2 * keep).sum() / (keep.sum() * pred.shape[-1]).clamp_min(1)


def train(ds, kind: str, steps: int, batch_size: int = 64, device="cpu", video: bool = True, seed: int = 0,
          lr: float = 1e-3, num_workers: int = 0, log_every: int = 10, quiet: bool = False,
          augment: str | None = None) -> dict:
    """Train for ``steps`` steps; returns ``{"losses", "data_s", "compute_s", "samples", "step_data_s",
    "step_compute_s"}`` (totals, then per-step times)."""
    device = torch.device(device)
    torch.manual_seed(seed)
    model = make_policy(ds, video).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    # the step's own stream only: a device-wide sync would also wait for the batch the loader
    # is already preparing on its side stream for the next step, and count it as this step's wait
    sync = torch.cuda.current_stream(device).synchronize if device.type == "cuda" else (lambda: None)
    losses, step_data, step_compute, samples, epoch = [], [], [], 0, 0
    it = iter(make_loader(kind, ds, batch_size, seed, epoch, video, num_workers, augment))
    while len(losses) < steps:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            epoch += 1
            it = iter(make_loader(kind, ds, batch_size, seed, epoch, video, num_workers, augment))
            continue
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync()
        t1 = time.perf_counter()
        pred = model(batch["state"], batch.get("image"))
        loss = masked_mse(pred, batch["action"], batch["action_is_pad"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())                                    # syncs: compute is finished
        t2 = time.perf_counter()
        step_data.append(t1 - t0)
        step_compute.append(t2 - t1)
        samples += batch["action"].shape[0]
        step = len(losses)
        if not quiet and (step % log_every == 0 or step == 1):
            print(f"step {step:5d}  loss {losses[-1]:.4f}  data {1e3 * (t1 - t0):7.2f} ms  "
                  f"compute {1e3 * (t2 - t1):7.2f} ms")
    return {"losses": losses, "data_s": sum(step_data), "compute_s": sum(step_compute), "samples": samples,
            "step_data_s": step_data, "step_compute_s": step_compute}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="a LeRobot set with observation.state and action (default: GR00T PickNPlace in "
                         "$ROBOCACHE_DATA or ../shared/data if there, else the demo set, written once)")
    ap.add_argument("--loader", choices=("torch", "robocache"), default="robocache")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--video", action=argparse.BooleanOptionalAction, default=True,
                    help="feed a camera's frame to the policy (decodes the mp4s at load)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-workers", type=int, default=0, help="torch loader only")
    ap.add_argument("--augment", choices=("none", "n15", "n16"), default="none",
                    help="GR00T's fine-tune image augmentation (N1.5 or N1.6 settings), robocache loader")
    args = ap.parse_args(argv)
    data = pick_data(ap, args.data)
    if args.augment != "none" and args.loader != "robocache":
        ap.error("--augment runs in robocache's frame gather: use --loader robocache")

    t = time.perf_counter()
    # robocache makes batches where the data lives; the torch baseline reads host arrays
    ds = load_dataset(data, args.video, device=args.device if args.loader == "robocache" else "cpu")
    print(f"loaded {ds.num_frames} frames of {data} in {time.perf_counter() - t:.1f} s; loader {args.loader}, "
          f"batch {args.batch_size}, device {args.device}, video {args.video}")
    if args.video and not ds.camera_keys:
        ap.error(f"{data}: no camera stream loaded (LeRobot videos load with a video backend: pip install av); "
                 "train without frames: --no-video")
    r = train(ds, args.loader, args.steps, args.batch_size, args.device, args.video, args.seed,
              num_workers=args.num_workers, augment=args.augment)
    total = r["data_s"] + r["compute_s"]
    n = len(r["losses"])
    print(f"{n} steps: data {1e3 * r['data_s'] / n:.2f} ms/step ({100 * r['data_s'] / total:.1f}%), "
          f"compute {1e3 * r['compute_s'] / n:.2f} ms/step; {r['samples'] / total:.0f} samples/s; "
          f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
    # the totals include the first steps' one-time work (CUDA graph captures, cuDNN autotuning);
    # the medians are what a long run sees per step
    data, compute = statistics.median(r["step_data_s"]), statistics.median(r["step_compute_s"])
    print(f"median step: data {1e3 * data:.2f} ms ({100 * data / (data + compute):.1f}%), "
          f"compute {1e3 * compute:.2f} ms")


if __name__ == "__main__":
    main()
