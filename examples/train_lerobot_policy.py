# mypy: disable-error-code="import-untyped,import-not-found"
"""One of LeRobot's own policies (ACT, or Diffusion) trained on a LeRobot set, fed by robocache, and
optionally by LeRobot's own loader for the same steps, seed and samples, to compare the loss curves.

Needs LeRobot 0.4.x or 0.6.x (``pip install lerobot==0.4.4``; robocache itself does not) and robocache[lerobot];
nothing to download. Without --data it trains on the project's CR5 set where $ROBOCACHE_DATA (else
../shared/data) holds it as cr5_v30/, else on the README's demo set (``python -m robocache demo
--write-lerobot``), written once by examples/demo_data.py:

    python examples/train_lerobot_policy.py --smoke                 # a few tiny steps on the CPU
    python examples/train_lerobot_policy.py --data demo_lerobot --loader both --steps 100 --out curve.json
    python examples/train_lerobot_policy.py --data ../shared/data/cr5_flashdrive_av1 --episodes 0-13   # v2.1

Everything but the loader is LeRobot's:
``make_policy`` and ``make_pre_post_processors`` read the set's metadata and statistics
(``robocache.lerobot.train.make_dataset``: LeRobot's ``LeRobotDatasetMetadata`` for v3.0, the same fields for
v2.x), the optimizer and scheduler are the policy's presets (``make_optimizer_and_scheduler``), and each step is
``lerobot-train``'s: preprocessor, ``policy.forward``, backward, gradient clipping, optimizer and scheduler.
robocache's batches come from ``robocache.DataLoader(dataset, B, delta_timestamps=...)``; ``--loader lerobot``
feeds the same policy from ``LeRobotDataset`` + ``torch.utils.data.DataLoader`` instead (v3.0 sets only: LeRobot
0.4 and 0.6 do not read v2.x; 0.6's uint8 frames made float32 / 255 as its training step makes them). Both take
the same sample order (one seeded permutation of the frames, given to both as ``sampler``), the policy starts
from the same weights, and the policy's own randomness (ACT's latent sample and dropout, Diffusion's noise and
crops) is reseeded at every step, so the curves differ only where the batches do.

Images: the policy sees ``--image-size`` (default 96x128 on the CPU, the set's own 480x640 on CUDA), resized by
the same ``torch.nn.functional.interpolate`` call for both loaders (Diffusion: by the policy itself, its
``resize_shape``); LeRobot applies no image transforms by
default (``image_transforms.enable`` is off) and neither does this script. The vision backbone starts from random
weights (``pretrained_backbone_weights=None``: this runs without network access). Prints the loss per step,
steps/s and the device; ``--out`` writes the curves as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

try:
    import robocache
except ModuleNotFoundError:  # run from a checkout without installing: the repo root is the package's parent
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import robocache

#: the smoke run: a tiny ACT on two episodes, small images, a few steps (seconds on a CPU)
SMOKE = {"steps": 3, "batch_size": 2, "image_size": "48x64", "episodes": "0-1",
         "act": ["dim_model=32", "dim_feedforward=64", "n_heads=2", "chunk_size=5", "n_action_steps=5",
                 "latent_dim=8"],
         "diffusion": ["down_dims=[16,32]", "horizon=8", "n_action_steps=4",
                       "diffusion_step_embed_dim=16", "spatial_softmax_num_keypoints=8", "num_inference_steps=4"]}


def default_data() -> Path:
    root = os.environ.get("ROBOCACHE_DATA")
    return (Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data") / "cr5_v30"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help="a LeRobot v3.0 or v2.x set (folder; default: cr5_v30 in "
                   "$ROBOCACHE_DATA or ../shared/data if there, else the demo set, written once)")
    p.add_argument("--policy", default="act", choices=["act", "diffusion"])
    p.add_argument("--loader", default="robocache", choices=["robocache", "lerobot", "both"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", default=None, help="HxW the policy sees (default: 96x128 on the CPU, the "
                   "set's own on CUDA; 'native' keeps the set's). Diffusion resizes itself (resize_shape)")
    p.add_argument("--episodes", default=None, help="episodes to load, e.g. 0-13 or 0,3,5 (default: all)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=1000, help="weights, sample order and per-step randomness")
    p.add_argument("--workers", type=int, default=2, help="worker processes of LeRobot's torch DataLoader")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of torch and robocache (default theirs; "
                   "1 is fastest on a CPU other jobs share)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the policy's LeRobot config, e.g. --set chunk_size=20 (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="write the curves and timings here as JSON")
    p.add_argument("--image-transforms", action="store_true",
                   help="LeRobot's --dataset.image_transforms.enable=true (its default ImageTransforms): per item "
                        "in LeRobot's loader, inside the frame gather in robocache's (draws differ: the curves "
                        "then agree in law, not step by step)")
    p.add_argument("--smoke", action="store_true", help="a few steps of a tiny ACT on small images")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.batch_size = SMOKE["steps"], SMOKE["batch_size"]
        args.image_size = args.image_size or SMOKE["image_size"]
        args.episodes = args.episodes or SMOKE["episodes"]
        args.set = SMOKE[args.policy] + args.set
    missing = lerobot_missing()
    if missing:
        p.exit(2, f"{p.prog}: {missing}\n")
    if args.data is None:
        args.data = default_data() if default_data().is_dir() else demo_set()
    if not (args.data / "meta" / "info.json").is_file():
        p.error(f"--data {args.data}: not a LeRobot set (no meta/info.json); any LeRobot v3.0 or v2.x folder works, "
                "and without --data this trains on robocache's demo set")
    return args


def lerobot_missing() -> str:
    """Why this script cannot run here ("" when it can): it needs LeRobot (0.4.x or 0.6.x)."""
    try:
        import lerobot  # noqa: F401
    except ImportError:
        return "needs LeRobot 0.4.x or 0.6.x (its policies, configs and optimizers): pip install lerobot==0.4.4"
    return ""


def demo_set() -> Path:
    """The README's demo set, written once (examples/demo_data.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import demo_data

    return demo_data.lerobot_set()


def parse_episodes(text: str | None) -> list[int] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return sorted(set(out))       # in the set's order: LeRobot keeps it whatever order they are given in


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def train_config(args, size):
    """LeRobot's TrainPipelineConfig for this run (what ``lerobot-train`` parses from its command line).
    Diffusion resizes images itself (its ``resize_shape``): it gets ``size`` there."""
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.factory import make_policy_config

    overrides = dict(kv.split("=", 1) for kv in args.set)
    if args.policy == "diffusion" and size is not None:
        overrides.setdefault("resize_shape", json.dumps(list(size)))
    policy = make_policy_config(args.policy, device=args.device, pretrained_backbone_weights=None,
                                push_to_hub=False, **{k: parse_value(v) for k, v in overrides.items()})
    try:
        from lerobot.transforms import ImageTransformsConfig            # LeRobot 0.6
    except ImportError:
        from lerobot.datasets.transforms import ImageTransformsConfig   # LeRobot 0.4

    cfg = TrainPipelineConfig(dataset=DatasetConfig(repo_id=f"local/{args.data.name}", root=str(args.data),
                                                    episodes=parse_episodes(args.episodes),
                                                    image_transforms=ImageTransformsConfig(
                                                        enable=bool(getattr(args, "image_transforms", False)))),
                              policy=policy, seed=args.seed, batch_size=args.batch_size, steps=args.steps,
                              num_workers=args.workers)
    cfg.optimizer, cfg.scheduler = policy.get_optimizer_preset(), policy.get_scheduler_preset()
    return cfg


def sample_order(lengths, steps: int, batch_size: int, seed: int, drop_last_frames: int = 0) -> list[int]:
    """Rows of the loaded frames (LeRobot's dataset positions, robocache's samples; episodes of ``lengths``
    back to back) for ``steps`` batches: seeded permutations back to back, both loaders take the same. A policy
    with ``drop_n_last_frames`` (Diffusion) never samples an episode's last frames, as LeRobot's
    ``EpisodeAwareSampler`` does in ``lerobot-train``."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    rows = np.concatenate([np.arange(a, a + n - drop_last_frames) for a, n in zip(starts, lengths)])
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    return np.concatenate([rng.permutation(rows) for _ in range(-(-need // rows.size))])[:need].tolist()


def robocache_batches(train_set, order, batch_size):
    loader = robocache.DataLoader(train_set.dataset, batch_size, sampler=order,
                                  delta_timestamps=train_set.delta_timestamps, image_transforms=train_set.augment)
    return iter(loader)


def lerobot_batches(cfg, order, batch_size, workers):
    """LeRobot's own loader: its ``make_dataset`` and torch's DataLoader, the cameras as its training step hands
    them to the preprocessor (LeRobot 0.6's items are uint8, made float32 / 255 there; 0.4's are float32)."""
    from lerobot.datasets.factory import make_dataset

    dataset = make_dataset(cfg)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=order, num_workers=workers,
                                         pin_memory=cfg.policy.device.startswith("cuda"),
                                         persistent_workers=workers > 0)
    for batch in loader:
        for k in dataset.meta.camera_keys:
            if batch[k].dtype == torch.uint8:
                batch[k] = batch[k].to(torch.float32) / 255.0
        yield batch


def resize_images(batch: dict, camera_keys, size) -> dict:
    """The policy's image size, the same call for both loaders (bilinear with antialiasing)."""
    if size is None:
        return batch
    for k in camera_keys:
        x = batch[k]
        flat = x.reshape(-1, *x.shape[-3:])
        batch[k] = torch.nn.functional.interpolate(flat, size=size, mode="bilinear", antialias=True,
                                                   align_corners=False).reshape(*x.shape[:-2], *size)
    return batch


def run(cfg, meta, batches, steps, size, seed):
    """``steps`` of LeRobot's training step on batches from ``batches``: the losses, steps/s (after the first
    two steps) and the seconds spent waiting for data."""
    from lerobot.optim.factory import make_optimizer_and_scheduler
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(seed)
    policy = make_policy(cfg.policy, ds_meta=meta)
    preprocessor, _ = make_pre_post_processors(cfg.policy, dataset_stats=meta.stats)
    optimizer, scheduler = make_optimizer_and_scheduler(cfg, policy)
    policy.train()
    losses, data_s, t0 = [], 0.0, None
    for step in range(steps):
        if step == 2:
            t0, data_s = time.perf_counter(), 0.0
        t = time.perf_counter()
        batch = preprocessor(resize_images(next(batches), meta.camera_keys, size))
        data_s += time.perf_counter() - t
        torch.manual_seed(seed + 1 + step)        # the policy's own randomness, the same for both loaders
        loss, _ = policy.forward(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optimizer.grad_clip_norm)
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())               # a sync, as lerobot-train's loss.item()
        print(f"  step {step:4d}  loss {losses[-1]:.5f}", flush=True)
    timed = steps - 2
    wall = time.perf_counter() - t0 if t0 is not None else float("nan")
    return {"loss": losses, "steps_per_s": timed / wall if timed > 0 else None,
            "data_s_per_step": data_s / timed if timed > 0 else None}


def first_batch_difference(cfg, train_set, order, batch_size, workers) -> dict:
    """max |robocache - LeRobot| per key of the first batch (0 where equal; tensors only)."""
    a = next(robocache_batches(train_set, order, batch_size))
    b = next(lerobot_batches(cfg, order, batch_size, 0))
    out = {}
    for k, v in b.items():
        if isinstance(v, torch.Tensor):
            out[k] = float((a[k].double().cpu() - v.double()).abs().max())
        else:
            out[k] = 0.0 if list(a[k]) == list(v) else float("nan")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    from robocache.lerobot.train import make_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
        robocache.set_num_threads(args.threads)
    version = json.loads((args.data / "meta" / "info.json").read_text()).get("codebase_version", "")
    if str(version).startswith("v2") and args.loader != "robocache":
        raise SystemExit(f"--loader {args.loader}: LeRobot {lerobot_version()} reads v3.0 sets only and "
                         f"{args.data} is {version}; robocache reads it (--loader robocache). For the comparison "
                         "use the v3.0 copy of the same episodes (cr5_v30).")
    missing = lerobot_decoder_missing() if args.loader != "robocache" else ""
    if missing:
        raise SystemExit(f"--loader {args.loader}: {missing}")
    text = args.image_size or ("native" if args.device.startswith("cuda") else "96x128")
    size = None if text == "native" else tuple(int(v) for v in text.split("x"))
    cfg = train_config(args, size)
    train_set = make_dataset(cfg)
    meta = train_set.meta
    native = meta.features[meta.camera_keys[0]]["shape"][:2] if meta.camera_keys else None
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    lengths = np.diff(train_set.dataset.streams[train_set.dataset.anchor].offsets.cpu().numpy())
    order = sample_order(lengths, args.steps, args.batch_size, args.seed,
                         getattr(cfg.policy, "drop_n_last_frames", 0))
    print(f"{args.policy} on {args.data} ({version}, {train_set.num_episodes} episodes, "
          f"{train_set.num_frames} frames), images {native} -> {size or native}, batch {args.batch_size}, "
          f"{args.steps} steps, {device_name}")

    report = {"data": str(args.data), "policy": args.policy, "device": args.device, "device_name": device_name,
              "steps": args.steps, "batch_size": args.batch_size, "image_size": list(size or native or []),
              "seed": args.seed, "policy_overrides": args.set, "lerobot": lerobot_version(),
              "torch": torch.__version__, "robocache": robocache.__version__}
    if args.policy == "diffusion":
        size = None                          # the policy's resize_shape does it (train_config)
    if args.loader in ("robocache", "both"):
        print("fed by robocache")
        report["robocache_fed"] = run(cfg, meta, robocache_batches(train_set, order, args.batch_size),
                                      args.steps, size, args.seed)
    if args.loader in ("lerobot", "both"):
        print("fed by LeRobot (LeRobotDataset + torch DataLoader)")
        report["lerobot_fed"] = run(cfg, meta, lerobot_batches(cfg, order, args.batch_size, args.workers),
                                    args.steps, size, args.seed)
    if args.loader == "both":
        a, b = np.array(report["robocache_fed"]["loss"]), np.array(report["lerobot_fed"]["loss"])
        report["max_abs_loss_difference"] = float(np.abs(a - b).max())
        report["first_batch_max_abs_difference"] = first_batch_difference(cfg, train_set, order, args.batch_size,
                                                                          args.workers)
        print(f"max |loss difference| over {args.steps} steps: {report['max_abs_loss_difference']:.3g}; first "
              f"batch, max |difference| per key: {report['first_batch_max_abs_difference']}")
    for name in ("robocache_fed", "lerobot_fed"):
        if name in report and report[name]["steps_per_s"]:
            r = report[name]
            print(f"{name}: {r['steps_per_s']:.2f} steps/s, {1e3 * r['data_s_per_step']:.1f} ms/step for data "
                  f"({device_name})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
        print(f"wrote {args.out}")
    return 0


def lerobot_decoder_missing() -> str:
    """Why LeRobot's own loader cannot decode video here ("" when it can): LeRobot 0.4 needs torchcodec, or
    torchvision's ``io.VideoReader`` (gone from torchvision 0.26); 0.6 falls back on its own PyAV decoder."""
    try:
        from lerobot.datasets.video_utils import get_safe_default_codec
    except ImportError:                 # LeRobot 0.6 (get_safe_default_video_backend: torchcodec, else PyAV)
        return ""
    if get_safe_default_codec() == "torchcodec":
        return ""
    import torchvision.io

    if hasattr(torchvision.io, "VideoReader"):
        return ""
    return (f"LeRobot's loader decodes video with torchcodec (not installed) or torchvision.io.VideoReader "
            f"(not in torchvision {torchvision.__version__}): pip install the torchcodec release made for "
            f"torch {torch.__version__.split('+')[0]}, or use --loader robocache")


def lerobot_version() -> str:
    from importlib.metadata import version
    return version("lerobot")


if __name__ == "__main__":
    sys.exit(main())
