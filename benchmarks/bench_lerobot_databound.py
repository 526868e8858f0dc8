"""The data-bound LeRobot case (issue 44): LeRobot's own training script fed by its own loader against the
same script fed by robocache (`python -m robocache.lerobot.train`), on a 4-camera 480x640 AV1 set
(tools/make_aloha_set.py: ALOHA-shaped, written by LeRobot's recording API), batch 64, ACT and
Diffusion (ResNet-18 backbones), one GPU, in one run. Reported: LeRobot's own `data_s` and `updt_s` per
step (the mean of its log lines after the first), the steps/s they imply, and the loader's share of the
step; target data_s <= 3% of the step with robocache.

LeRobot's loader runs at its own best settings: `--num_workers` (default: the machine's cores), its
decoding backend (torchcodec where installed, else PyAV). Backbones start from random weights
(`pretrained_backbone_weights=null`: the machine may be offline; the compute is the same).

    python benchmarks/bench_lerobot_databound.py --set DIR [--steps 40] [--json OUT]
    python benchmarks/bench_lerobot_databound.py --smoke      (CPU, a tiny set, 3 steps: checks it runs)
Needs LeRobot (0.4.4, or its current code).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"lerobot": "lerobot.scripts.lerobot_train", "robocache": "robocache.lerobot.train"}
FIELD = re.compile(r"\b(step|loss|updt_s|data_s):([\d.]+)")     # LeRobot's log line (its field order varies)


def policy_args(policy: str, smoke: bool) -> list[str]:
    if policy == "act":
        return ["--policy.dim_model=64", "--policy.dim_feedforward=128", "--policy.n_encoder_layers=1",
                "--policy.n_decoder_layers=1", "--policy.chunk_size=10", "--policy.n_action_steps=10"] if smoke else []
    crop = "[40,56]" if smoke else "[432,576]"           # 90% of the frame (the default 84x84 suits 96x96 sets)
    small = ["--policy.down_dims=[16,32]", "--policy.horizon=8", "--policy.n_action_steps=4",
             "--policy.diffusion_step_embed_dim=16"] if smoke else []
    return [f"--policy.crop_shape={crop}", *small]


def backend() -> str:
    try:
        import torchcodec  # noqa: F401
        return "torchcodec"
    except Exception:                                  # not installed, or its FFmpeg libraries missing
        return "pyav"


def run(loader: str, policy: str, data: Path, args, out: Path, logs: Path) -> dict:
    """One training run; LeRobot's log lines (after the first) averaged. A failed run is reported, not raised:
    the other runs still measure."""
    cmd = [sys.executable, "-m", SCRIPTS[loader], "--dataset.repo_id=local/aloha_bench", f"--dataset.root={data}",
           f"--dataset.video_backend={backend()}", f"--policy.type={policy}", f"--policy.device={args.device}",
           "--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null",
           *policy_args(policy, args.smoke), f"--steps={args.steps}", f"--batch_size={args.batch_size}",
           f"--num_workers={args.workers}", f"--log_freq={args.log_freq}", "--save_checkpoint=false",
           f"--output_dir={out / f'{loader}_{policy}'}", "--seed=1000"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "HF_HUB_OFFLINE": "1", "ROBOCACHE_NO_PROGRESS": "1"}
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out, timeout=args.timeout)
    wall = time.perf_counter() - t
    log = r.stdout + r.stderr
    (logs / f"{loader}_{policy}.log").write_text(log)
    rows = []
    for line in log.splitlines():
        f = dict(FIELD.findall(line))
        if {"loss", "updt_s", "data_s"} <= f.keys():
            rows.append((float(f["loss"]), float(f["updt_s"]), float(f["data_s"])))
    if r.returncode != 0 or not rows:
        print(f"{loader} {policy} failed (exit {r.returncode}):\n{log[-3000:]}", flush=True)
        return {"error": log[-3000:], "exit": r.returncode}
    kept = rows[1:] or rows                            # the first interval holds start-up (workers, caches)
    updt = sum(u for _, u, _ in kept) / len(kept)
    data = sum(d for _, _, d in kept) / len(kept)
    return {"updt_s": updt, "data_s": data, "steps_per_s": 1.0 / (updt + data), "data_share": data / (updt + data),
            "loss_first": rows[0][0], "loss_last": rows[-1][0], "log_lines": len(rows), "wall_s": wall,
            "first_interval_data_s": rows[0][2], "first_interval_updt_s": rows[0][1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", help="a set made by tools/make_aloha_set.py")
    ap.add_argument("--policies", nargs="+", default=["act", "diffusion"])
    ap.add_argument("--loaders", nargs="+", default=["lerobot", "robocache"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--log-freq", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--json")
    ap.add_argument("--logs", help="keep each run's log in this folder (default: dropped with the scratch folder)")
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny generated set, 3 steps: checks it runs")
    args = ap.parse_args(argv)
    try:
        import lerobot  # noqa: F401
    except ImportError:
        print("bench_lerobot_databound: needs LeRobot (pip install lerobot==0.4.4, or its current code); skipped")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        data = Path(args.set) if args.set else None
        if args.smoke:
            args.device, args.steps, args.log_freq, args.batch_size, args.workers = "cpu", 3, 1, 2, 0
            if data is None:
                sys.path.insert(0, str(ROOT / "tools"))
                from make_aloha_set import main as make
                data = out / "aloha_smoke"
                if make([str(data), "--smoke"]) != 0:
                    return 1
        if data is None:
            raise SystemExit("bench_lerobot_databound: give --set DIR (tools/make_aloha_set.py makes one)")
        gpu = "CPU"
        if args.device.startswith("cuda"):
            import torch
            gpu = torch.cuda.get_device_name(0)
        result: dict = {"gpu": gpu, "set": str(data), "batch_size": args.batch_size, "steps": args.steps,
                        "lerobot_workers": args.workers, "lerobot_backend": backend()}
        for policy in args.policies:
            for loader in args.loaders:
                logs = Path(args.logs) if args.logs else out
                logs.mkdir(parents=True, exist_ok=True)
                result[f"{loader}_{policy}"] = r = run(loader, policy, data, args, out, logs)
                if "error" in r:
                    continue
                print(f"{policy:9s} {loader:9s} updt_s {r['updt_s']:.4f}  data_s {r['data_s']:.4f}  "
                      f"{r['steps_per_s']:.2f} steps/s  data {100 * r['data_share']:.1f}% of the step  loss "
                      f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}  ({r['wall_s']:.0f} s in all)", flush=True)
    print(f"bench_lerobot_databound on {gpu}: batch {args.batch_size}, {args.steps} steps"
          + (" (smoke: untimed)" if args.smoke else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
