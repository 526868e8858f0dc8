"""GR00T-style training with DistributedDataParallel, one process per GPU (or CPU processes over gloo).

Needs torch and robocache[lerobot] (pyarrow, PyAV); nothing to download. Without --data it trains on GR00T's
PickNPlace set where the project's data folder ($ROBOCACHE_DATA, else ../shared/data) holds it, else on the
README's demo set, written once (examples/train_groot_style.py's ``pick_data``):

    python examples/train_ddp.py --steps 20     # without torchrun: one process (says so)
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --steps 200
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --video --no-shard-episodes

Each rank loads the dataset on the CPU and hands it to ``robocache.DataLoader`` with its GPU as
``device``. With ``--shard-episodes`` (default) each rank reads, decodes and holds only its own
episodes (split from the metadata, balanced by rows x pixels; statistics of the whole set from
meta/stats.json); without it every GPU holds the whole
set and takes every ``world_size``-th sample of each epoch's permutation. Either way all ranks
yield the same number of batches, so DDP's gradient all-reduce never waits on a rank that has run
out. Without GPUs it runs on the CPU over gloo (``torchrun --nproc_per_node=2`` still works).
The policy (sized from the set) and loss are examples/train_groot_style.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_groot_style as groot  # noqa: E402  (make_policy, masked_mse, windows, load_dataset, pick_data)

import robocache  # noqa: E402


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="a LeRobot set with observation.state and action (default: GR00T PickNPlace in "
                         "$ROBOCACHE_DATA or ../shared/data if there, else the demo set, written once)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--video", action=argparse.BooleanOptionalAction, default=False,
                    help="feed a camera's frame (each rank decodes the mp4s at load)")
    ap.add_argument("--shard-episodes", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--json", type=Path, help="rank 0 writes a summary here")
    args = ap.parse_args(argv)
    data = groot.pick_data(ap, args.data)        # every rank: a demo set written once, by whichever is first

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if "RANK" not in os.environ:
        # run plainly (python examples/train_ddp.py): one process, a group of one, same code path
        print("not started by torchrun: training on one process. For N GPUs: "
              "torchrun --standalone --nproc_per_node=N examples/train_ddp.py", file=sys.stderr)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    else:
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")

    t = time.perf_counter()
    # with --shard-episodes each rank reads and decodes only its own episodes (chosen from the metadata)
    ds = groot.load_dataset(data, args.video, device="cpu", shard_episodes=args.shard_episodes)
    loader = robocache.DataLoader(ds, args.batch_size, shuffle=True, seed=args.seed, drop_last=True,
                                  windows=groot.windows(ds, args.video), device=device,
                                  shard_episodes=args.shard_episodes)   # rank/world from torch.distributed
    if rank == 0:
        print(f"{world} ranks ({backend}); {data} loaded in {time.perf_counter() - t:.1f} s; per rank "
              f"{loader.num_samples} samples, {len(loader)} batches of {args.batch_size}; "
              f"shard_episodes={args.shard_episodes}")

    torch.manual_seed(args.seed)                  # the same initial weights on every rank
    model = DDP(groot.make_policy(ds, args.video).to(device), device_ids=[local] if cuda else None)
    del ds                                        # sized the policy; the loader holds what it needs
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    losses, epoch, step = [], 0, 0
    start = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            pred = model(batch["state"], batch.get("image"))
            loss = groot.masked_mse(pred, batch["action"], batch["action_is_pad"])
            opt.zero_grad(set_to_none=True)
            loss.backward()                       # DDP all-reduces the gradients here
            opt.step()
            losses.append(loss.detach())
            step += 1
            if step == args.steps:
                break
        epoch += 1
    # the mean loss over ranks, per step (one collective at the end, not per step)
    curve = torch.stack(losses)
    dist.all_reduce(curve)
    curve = (curve / world).tolist()
    elapsed = time.perf_counter() - start
    # DDP keeps the replicas equal: compare a checksum of the parameters across ranks
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    check = torch.stack([flat.sum(), (flat * torch.arange(flat.numel(), device=device, dtype=torch.float64)).sum()])
    gathered = [torch.zeros_like(check) for _ in range(world)]
    dist.all_gather(gathered, check)
    equal = all(torch.equal(g, gathered[0]) for g in gathered)
    if rank == 0:
        print(f"{step} steps in {elapsed:.1f} s, {world * args.batch_size * step / elapsed:.0f} samples/s over "
              f"{world} ranks; loss {curve[0]:.4f} -> {curve[-1]:.4f}; replicas equal: {equal}")
        if args.json:
            args.json.write_text(json.dumps({
                "world_size": world, "backend": backend, "steps": step, "first_loss": curve[0],
                "last_loss": sum(curve[-5:]) / len(curve[-5:]), "param_checksums_equal": equal,
                "samples_per_s": world * args.batch_size * step / elapsed, "epochs": epoch}))
    dist.barrier()  # every rank done with the group: gloo can abort at exit otherwise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
