"""Train straight from ROS bags: each stream on its own clock, batched on a uniform grid (50 Hz).

Needs robocache[rosbag] (rosbags; no ROS install) and torch; nothing to download. Given no bag it writes 4 small
ROS 2 bags of a 7-DoF arm once (examples/demo_data.py) and trains on them (on the project's PX4 flight instead
where ``$ROBOCACHE_DATA`` or ../shared/data holds it):

    python examples/train_from_rosbag.py --steps 100
    python examples/train_from_rosbag.py ../shared/data/rosbags/px4_flight_2025-12-03
    python examples/train_from_rosbag.py my_bags/ --state /imu.angular_velocity /joint_states.position \\
        --action /arm_controller/command.position --rate 30

No conversion step: ``Dataset.from_rosbag`` reads the bag (ROS 2 MCAP here; ROS 1 .bag, SQLite3
and bare .mcap alike) into streams that keep their own timestamps, and ``robocache.DataLoader``
cuts every batch on a uniform 50 Hz grid, resampling each stream there. On the demo bags the state is
the last 40 ms of the 100 Hz joint positions and velocities and the target the next 0.5 s of the 10 Hz
joint commands; on the PX4 flight the state is the 100 Hz attitude quaternion and angular velocity and the
target the 8.8 Hz servo commands (the arm's joint positions, a JointState). Both are normalized mean/std.
A small MLP learns the commands from the state; the loop prints the loss and samples/s. Pass
``--state``/``--action`` stream names for other bags (``python -m robocache doctor BAG`` lists them with
their rates).
"""

from __future__ import annotations

import argparse
import math
import os
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

STATE = ["/fmu/out/vehicle_attitude", "/fmu/out/vehicle_angular_velocity"]
ACTION = "/controller/out/servo_positions.position"
FIELDS = {"/fmu/out/vehicle_attitude": ["q"], "/fmu/out/vehicle_angular_velocity": ["xyz"]}
PICK = "name the streams with --state/--action (python -m robocache doctor BAG lists them)"


def default_bag() -> Path:
    root = os.environ.get("ROBOCACHE_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return base / "rosbags" / "px4_flight_2025-12-03"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", nargs="?", default=None, help="a bag, .mcap, ROS 2 bag folder or folder of bags "
                                                        "(default: the PX4 flight in ../shared/data if there, "
                                                        "else the demo bags, written once)")
    p.add_argument("--state", nargs="+", default=None, help="state streams (fused into one key)")
    p.add_argument("--action", default=None, help="the stream to predict")
    p.add_argument("--rate", type=float, default=50.0, help="batch grid in Hz (default 50)")
    p.add_argument("--history", type=int, default=3, help="state steps at the grid rate (default 3)")
    p.add_argument("--horizon", type=float, default=0.5, help="seconds of action to predict (default 0.5)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    return p, p.parse_args(argv)


def pick_bag(bag: str | None) -> tuple[Path, list[str], str, dict | None]:
    """(bag, state streams, action stream, fields) of the defaults: the given bag or the PX4 flight with the
    PX4 streams, else the demo bags with theirs."""
    if bag is None and not default_bag().exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import demo_data

        return demo_data.rosbag_set(), demo_data.BAG_STATE, demo_data.BAG_ACTION, None
    return Path(bag) if bag else default_bag(), STATE, ACTION, FIELDS


def main(argv=None) -> dict:
    p, args = parse(argv)
    dev = torch.device("cuda" if args.device == "auto" and robocache.cuda_available() else
                       ("cpu" if args.device == "auto" else args.device))
    try:
        # a missing bag or extra (rosbags) is a one-line error, not a traceback
        bag, state, action, fields = pick_bag(args.bag)
        state, action = args.state or state, args.action or action
        if args.state:
            fields = None
        topics = sorted({n.split(".")[0].split(":")[0] for n in state + [action]})
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # clock notes go to the doctor; these bags have none that matter
            ds = robocache.Dataset.from_rosbag(bag, topics=topics, fields=fields, device=dev)
    except (robocache.ReaderError, ImportError) as e:
        p.error(str(e))
    except ValueError as e:                       # topics the bag does not have
        p.error(f"{e}; {PICK}")
    missing = [n for n in state + [action] if n not in ds.streams]
    if missing:
        p.error(f"{bag}: no stream {', '.join(missing)}; it has {', '.join(sorted(ds.streams))}; {PICK}")
    print(f"{bag.name}: {len(ds)} episodes, " + ", ".join(
        f"{n} {ds.streams[n].rate:.1f} Hz {list(ds.streams[n].shape)}" for n in state + [action])
        + f" ({time.perf_counter() - t0:.1f} s to load)")

    a_rate = ds.streams[action].rate
    chunk = max(1, math.ceil(args.horizon * a_rate))
    windows = {
        "state": Window(state, offsets=[-(args.history - 1 - k) / args.rate for k in range(args.history)],
                        normalize="mean_std"),
        "action": Window(action, indices=range(1, chunk + 1), rate=a_rate, normalize="mean_std"),
    }
    loader = robocache.DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True, seed=args.seed,
                                  rate=args.rate, windows=windows)
    print(f"loader: {loader.num_samples} samples on a {args.rate:g} Hz grid, batch {args.batch_size}, "
          f"state {args.history} x {sum(math.prod(ds.streams[n].shape) for n in state)}, "
          f"action {chunk} x {math.prod(ds.streams[action].shape)}, device {dev}")

    torch.manual_seed(args.seed)
    batch = next(iter(loader))
    d_in, d_out = batch["state"][0].numel(), batch["action"][0].numel()
    policy = nn.Sequential(nn.Flatten(), nn.Linear(d_in, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(),
                           nn.Linear(256, d_out)).to(dev)
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr)

    def batches():
        while True:
            yield from loader

    losses, t_start, seen = [], None, 0
    for step, b in zip(range(args.steps), batches()):
        pred = policy(b["state"]).view_as(b["action"])
        valid = (~b["action_is_pad"]).unsqueeze(-1).to(pred.dtype)        # no loss past an episode's end
        loss = (((pred - b["action"]) ** 2) * valid).sum() / valid.expand_as(pred).sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 0:
            t_start = time.perf_counter()
        else:
            seen += args.batch_size
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            losses.append(loss.item())
            print(f"step {step:5d}  loss {losses[-1]:.4f}")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    rate = seen / (time.perf_counter() - t_start) if seen else float("nan")
    print(f"{args.steps} steps, {rate:,.0f} samples/s (training step included), "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return {"losses": losses, "samples_per_s": rate}


if __name__ == "__main__":
    main()
