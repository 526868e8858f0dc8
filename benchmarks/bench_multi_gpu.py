"""Multi-GPU scaling of the loader: samples/s per rank and in total at 1, 2 and 4 ranks, per frame tier.

    python benchmarks/bench_multi_gpu.py [--ranks 1,2,4] [--tiers lowdim,device,host,compressed] [--json OUT]
    python benchmarks/bench_multi_gpu.py --smoke      # CI: ranks 1 and 2 on the CPU over gloo, toy sizes

Launches its own ranks (torch.multiprocessing.spawn, one process per GPU: NCCL,
``torch.cuda.set_device(rank)``; without GPUs, gloo on the CPU). Every rank builds the same generated set
on the CPU (``--episodes-per-rank`` x world episodes of ``--steps`` steps at 10 Hz: the work per rank stays
the same as ranks are added, so flat per-rank rates are perfect scaling) and the DataLoader keeps its shard
(``shard_episodes=True``, ``device=cuda:RANK``: the recipe of docs/loader.md). Sets (``--tiers``):

  lowdim      state [1, 14] + action chunk [16, 7], mean/std normalized
  device      + one 480x640 camera frame per sample, YUV 4:2:0 in GPU memory
  host        the same frames in pinned host memory, read by the GPU per batch
  compressed  the same frames as JPEG bytes in host RAM, decoded per batch (nvJPEG on the GPU)
  lossless    camera-like generated frames (bench_scale.camera_pool: random bytes do not compress) coded
              losslessly, bytes in pinned host RAM, decoded per batch on the GPU (cuda/lossless.cu)
  copy        no loader: the host tier's hardware floor. Each rank copies a batch of its frames' bytes
              from pinned host memory to its GPU per step (one cudaMemcpyAsync), all ranks at once;
              samples/s = bytes/s over one frame's bytes. Where the host tier loses per rank as ranks
              are added and this loses as much, the bound is the machine's (PCIe, host memory), not ours.

Each (set, world size) is timed twice: the loader alone (batches taken and waited for), and with a DDP
step of a small policy (a conv embedding of the frame + MLPs, gradients all-reduced every step).
Per rank: samples/s over ``--batches`` batches after a warm-up; the table gives the slowest and the
median rank and the total, with the device named. Frames are random bytes (their cost is their size),
coded once from a pool of ``--pool`` frames for the compressed tier.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import robocache  # noqa: E402
from robocache import Window  # noqa: E402
from robocache.frames import numa  # noqa: E402

STATE, ACTION, CHUNK, FPS = 14, 7, 16, 10.0
TIERS = ("lowdim", "device", "host", "compressed", "lossless", "copy")


def dataset(cfg: dict, world: int, tier: str) -> robocache.Dataset:
    """The whole generated set on the CPU (the same on every rank: seeded), frames in ``tier``."""
    from robocache.frames.store import FrameStore, yuv420_bytes
    rng = np.random.default_rng(0)
    E, n, h, w = cfg["episodes_per_rank"] * world, cfg["steps"], cfg["height"], cfg["width"]
    times = [np.arange(n) / FPS for _ in range(E)]
    eps = [{"state": (rng.normal(size=(n, STATE)).astype(np.float32), times[e]),
            "action": (rng.normal(size=(n, ACTION)).astype(np.float32), times[e])} for e in range(E)]
    if tier == "lowdim":
        return robocache.Dataset.from_episodes(eps, device="cpu")
    pool = rng.integers(0, 256, (cfg["pool"], yuv420_bytes(h, w)), dtype=np.uint8)
    pick = np.arange(E * n) % cfg["pool"]
    if tier == "compressed":
        # the pool coded once, each frame's bytes then laid out per sample (a frame's cost is its size)
        coded = FrameStore.create(pool, format="yuv420", height=h, width=w, tier="compressed", device="cpu")
        sizes = np.diff(coded.offsets)[pick]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        data = np.concatenate([coded.data[coded.offsets[i]:coded.offsets[i + 1]] for i in pick])
        store = FrameStore(data, format="jpeg", height=h, width=w, channels=3, tier="compressed", device="cpu",
                           matrix="bt601", offsets=offsets, qscale=coded.qscale)
    elif tier == "lossless":
        from bench_scale import camera_pool     # (benchmarks/ is the script's own folder, first on sys.path)
        coded = FrameStore.create(camera_pool(cfg["pool"], h, w), format="yuv420", height=h, width=w,
                                  tier="lossless", device="cpu")
        sizes = np.diff(coded.offsets)[pick]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        data = np.concatenate([coded.data[coded.offsets[i]:coded.offsets[i + 1]] for i in pick])
        store = FrameStore(data, format="lossless", height=h, width=w, channels=3, tier="lossless", device="cpu",
                           offsets=offsets)
    elif tier == "host":
        # not pinned here: the loader pins the rank's shard when it moves it to the GPU (FrameStore.to),
        # so no rank pins the whole set
        store = FrameStore(torch.from_numpy(pool[pick]), format="yuv420", height=h, width=w, channels=3,
                           tier="host", device="cpu", matrix="bt601")
    else:
        # "device": held on the CPU until the loader moves the rank's shard to its GPU
        store = FrameStore.create(pool[pick], format="yuv420", height=h, width=w, tier="cpu", device="cpu")
    return robocache.Dataset.from_episodes(eps, device="cpu", frames={"cam": (store, times)})


def windows(tier: str) -> dict:
    w = {"state": Window("state", indices=[0], rate=FPS, normalize="mean_std"),
         "action": Window("action", indices=range(CHUNK), rate=FPS, normalize="mean_std")}
    if tier != "lowdim":
        w["cam"] = Window("cam", indices=[0], rate=FPS, layout="BTCHW")
    return w


class Policy(nn.Module):
    """A small policy: a strided conv embedding of the frame (when there is one), the state, an MLP head."""

    def __init__(self, image: bool, hidden: int = 256):
        super().__init__()
        self.state = nn.Sequential(nn.Linear(STATE, hidden), nn.GELU())
        self.image = nn.Sequential(nn.Conv2d(3, 32, 8, stride=8), nn.GELU(), nn.Conv2d(32, 64, 4, stride=4),
                                   nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, hidden)) \
            if image else None
        self.head = nn.Sequential(nn.Linear(hidden * (2 if image else 1), hidden), nn.GELU(),
                                  nn.Linear(hidden, CHUNK * ACTION))

    def forward(self, b):
        z = [self.state(b["state"][:, 0])]
        if self.image is not None:
            z.append(self.image(b["cam"][:, 0]))
        return self.head(torch.cat(z, 1)).view(-1, CHUNK, ACTION)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def rate(loader, dev, batches: int, warm: int, step=None) -> float:
    """This rank's samples/s over ``batches`` batches after ``warm`` (each waited for; with ``step``, a
    training step on each). All ranks start timing together."""
    def endless():
        while True:
            yield from loader
    it = endless()
    for _ in range(warm):
        b = next(it)
        if step is not None:
            step(b)
    sync(dev)
    dist.barrier()
    t = time.perf_counter()
    n = 0
    for _ in range(batches):
        b = next(it)
        if step is not None:
            step(b)
        n += b["state"].shape[0]
    sync(dev)
    return n / (time.perf_counter() - t)


def copy_rate(cfg: dict, dev, batches: int, warm: int) -> float:
    """This rank's pinned host -> GPU copy rate in frames/s: a batch of frames (contiguous bytes of a
    pinned buffer of 8 batches, cycled) per cudaMemcpyAsync. All ranks start timing together."""
    from robocache.frames.pinned import pinned_empty
    from robocache.frames.store import yuv420_bytes
    frame = yuv420_bytes(cfg["height"], cfg["width"])
    src = pinned_empty((8, cfg["batch"] * frame), fill=lambda a: a.fill(7))
    dst = torch.empty(cfg["batch"] * frame, dtype=torch.uint8, device=dev)
    for i in range(warm):
        dst.copy_(src[i % 8], non_blocking=True)
    sync(dev)
    dist.barrier()
    t = time.perf_counter()
    for i in range(batches):
        dst.copy_(src[i % 8], non_blocking=True)
    sync(dev)
    return batches * cfg["batch"] / (time.perf_counter() - t)


def rank_main(rank: int, world: int, port: int, cfg: dict, out: str) -> None:
    # a benchmark never hangs silently: past --watchdog seconds every rank prints its stack and exits
    faulthandler.dump_traceback_later(cfg["watchdog"], exit=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpu = cfg["backend"] == "nccl"
    if gpu:
        torch.cuda.set_device(rank)             # one GPU per rank, before NCCL makes its communicator
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))     # the ranks share the cores
    dist.init_process_group(cfg["backend"], rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if gpu else torch.device("cpu")
    torch.manual_seed(0)
    rows = []
    for tier in cfg["tiers"]:
        if tier == "copy":
            rows.append({"tier": tier, "ddp": False, "rank": rank, "build_s": 0.0, "shard_samples": 0,
                         "samples_per_s": copy_rate(cfg, dev, cfg["batches"], cfg["warm"])})
            if rank == 0:
                print(f"  {world} rank(s), copy: rank 0 {rows[-1]['samples_per_s']:,.0f} frames/s", flush=True)
            continue
        ds = dataset(cfg, world, tier)
        t = time.perf_counter()
        loader = robocache.DataLoader(ds, cfg["batch"], seed=0, windows=windows(tier), drop_last=True,
                                      shard_episodes=True, device=dev)
        build_s = time.perf_counter() - t
        del ds
        model = Policy(tier != "lowdim").to(dev)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if gpu else None)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

        def step(b, ddp=ddp, opt=opt):
            loss = ((ddp(b) - b["action"]) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()                         # DDP all-reduces the gradients here
            opt.step()

        for ddp_step in (False, True):
            r = rate(loader, dev, cfg["batches"], cfg["warm"], step if ddp_step else None)
            rows.append({"tier": tier, "ddp": ddp_step, "rank": rank, "samples_per_s": r, "build_s": build_s,
                         "shard_samples": loader.num_samples})
            if rank == 0:
                print(f"  {world} rank(s), {tier}, DDP step {ddp_step}: rank 0 {r:,.0f} samples/s "
                      f"(shard built in {build_s:.2f} s)", flush=True)
        del loader, ddp, model, opt
        if gpu:
            torch.cuda.empty_cache()
    got = [None] * world
    dist.all_gather_object(got, rows)
    if rank == 0:
        Path(out).write_text(json.dumps([r for per in got for r in per]))
    dist.barrier()
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    # the results are written and the group is gone: leave without C++ static destructors, where torch 2.13's
    # CPU build aborted a gloo rank after Python had finished, now and then ("terminate called without an
    # active exception", no Python frame; 2 of 11 local --smoke runs, once in CI)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cfg: dict) -> dict:
    res = {"device": cfg["device_name"], "torch": torch.__version__, "robocache": robocache.__version__,
           "config": {k: v for k, v in cfg.items() if k != "device_name"}, "rows": []}
    with tempfile.TemporaryDirectory(prefix="bench-multi-gpu-") as tmp:
        for world in cfg["ranks"]:
            out = os.path.join(tmp, f"world{world}.json")
            mp.spawn(rank_main, args=(world, free_port(), cfg, out), nprocs=world, join=True)
            for r in json.loads(Path(out).read_text()):
                res["rows"].append({**r, "world": world})
    return res


def table(res: dict) -> list[str]:
    lines = [f"{res['device']}, torch {res['torch']}, robocache {res['robocache']}; batch {res['config']['batch']} "
             f"per rank, {res['config']['episodes_per_rank']} episodes x {res['config']['steps']} steps per rank, "
             f"frames {res['config']['height']}x{res['config']['width']}",
             "| set | DDP step | ranks | per rank, slowest | per rank, median | total | per rank vs 1 rank "
             "| shard build s |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for r in res["rows"]:
        groups.setdefault((r["tier"], r["ddp"], r["world"]), []).append(r)
    for (tier, ddp, world), rs in groups.items():
        rates = [r["samples_per_s"] for r in rs]
        one = groups.get((tier, ddp, 1))
        base = statistics.median(r["samples_per_s"] for r in one) if one else None
        vs = f"{statistics.median(rates) / base:.2f}" if base else "-"
        lines.append(f"| {tier} | {'yes' if ddp else 'no'} | {world} | {min(rates):,.0f} | "
                     f"{statistics.median(rates):,.0f} | {sum(rates):,.0f} | {vs} | "
                     f"{max(r['build_s'] for r in rs):.2f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4", help="world sizes (default 1,2,4; at most the GPUs present)")
    ap.add_argument("--tiers", default=",".join(TIERS), help=f"sets, of {', '.join(TIERS)}")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per batch")
    ap.add_argument("--batches", type=int, default=200, help="timed batches per rank")
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--episodes-per-rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300, help="steps per episode (10 Hz)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--pool", type=int, default=256, help="distinct frames (coded once for the compressed tier)")
    ap.add_argument("--watchdog", type=float, default=300,
                    help="seconds a world size may take before its ranks print their stacks and exit")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="CI: ranks 1 and 2 on the CPU over gloo, every set at toy size (not a measurement)")
    args = ap.parse_args(argv)
    tiers = [t for t in args.tiers.split(",") if t]
    bad = [t for t in tiers if t not in TIERS]
    if bad:
        ap.error(f"--tiers: unknown {bad}; choose from {list(TIERS)}")
    ranks = [int(x) for x in args.ranks.split(",") if x]
    if args.smoke:
        gpu, ranks = False, [1, 2]
        args.batch, args.batches, args.warm, args.episodes_per_rank, args.steps = 4, 3, 1, 2, 12
        args.height, args.width, args.pool = 32, 48, 4
    else:
        gpu = torch.cuda.is_available()
        if not gpu:
            print("bench_multi_gpu needs CUDA GPUs (--smoke runs it on the CPU over gloo, untimed)")
            return 1
        have = torch.cuda.device_count()
        if max(ranks) > have:
            print(f"bench_multi_gpu: {have} GPUs here; world sizes above it are left out", file=sys.stderr)
            ranks = [r for r in ranks if r <= have]
    cfg = {"backend": "nccl" if gpu else "gloo", "ranks": ranks, "tiers": tiers, "batch": args.batch,
           "batches": args.batches, "warm": args.warm, "episodes_per_rank": args.episodes_per_rank,
           "steps": args.steps, "height": args.height, "width": args.width, "pool": args.pool,
           "watchdog": args.watchdog,
           "device_name": torch.cuda.get_device_name(0) if gpu else "CPU (gloo; smoke run, not a measurement)"}
    res = run(cfg)
    res["numa"] = {"nodes": numa.nodes(), "gpu_node": [numa.gpu_node(i) for i in range(max(ranks))] if gpu else [],
                   "pinned_on_gpu_node": os.environ.get("ROBOCACHE_PIN_NUMA", "1") != "0"}
    print(f"NUMA: {res['numa']['nodes']} node(s); GPU i on node {res['numa']['gpu_node']}; pinned frames placed on "
          f"the GPU's node: {res['numa']['pinned_on_gpu_node'] and res['numa']['nodes'] > 1}")
    print("\n".join(table(res)))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
