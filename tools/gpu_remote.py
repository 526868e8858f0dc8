"""A remote-ingested LeRobot set on a GPU (issue 48's GPU check): the demo v3.0 set served over HTTP with Range
(RangeHTTPServer, a real server in a subprocess), loaded by ``Dataset.from_lerobot("http://...")`` with rank 0 of
2's episodes (the shard plan's) into the lossless and the compressed tier on the GPU, its batches compared bit for bit with the same load
from the local folder, and the bytes fetched against the files' sizes.

    python3 tools/gpu_remote.py [--episodes 8] [--tiers lossless compressed]
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

import robocache
from robocache.demo import write_lerobot
from robocache.remote import mirror_lerobot


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(folder: Path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "RangeHTTPServer", str(port), "--bind", "127.0.0.1"],
                            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("RangeHTTPServer did not start")


def batches(ds, n: int = 6) -> list:
    keys = [k for k in ds.streams if k.startswith("observation.images")]
    step = 1.0 / ds.meta.fps
    dt = {k: [0.0] for k in keys}
    dt.update({"observation.state": [-step, 0.0], "action": [0.0, step, 2 * step]})
    loader = robocache.DataLoader(ds, 16, shuffle=True, seed=3, delta_timestamps=dt, drop_last=True)
    out = []
    for b in loader:
        out.append({k: v.cpu().clone() if torch.is_tensor(v) else v for k, v in b.items()})
        if len(out) == n:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--tiers", nargs="+", default=["lossless", "compressed"])
    a = ap.parse_args()
    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")   # cpu: a dry run
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sets" / "demo"
        write_lerobot(root, num_episodes=a.episodes)
        proc, base = serve(root.parent)
        try:
            url = f"{base}/demo"
            rep = mirror_lerobot(url, shard=(0, 2))
            sizes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
            print(json.dumps({"gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "none", "episodes": rep.episodes,
                              "fetched_bytes": rep.fetched, "set_bytes": sizes}), flush=True)
            for tier in a.tiers:
                # rank 0's episodes of the shard plan, named: the loader here runs as one process
                kw = dict(device=dev, frames=tier, episodes=rep.episodes)
                remote = robocache.Dataset.from_lerobot(url, **kw)
                local = robocache.Dataset.from_lerobot(root, **kw)
                got, want = batches(remote), batches(local)
                assert len(got) == len(want) > 0, (len(got), len(want))
                same = all(set(g) == set(w) and all(
                    torch.equal(g[k], w[k]) if torch.is_tensor(w[k]) else g[k] == w[k] for k in w)
                    for g, w in zip(got, want))
                tiers = {k: s.frames.tier for k, s in remote.streams.items() if s.frames is not None}
                print(json.dumps({"tier": tier, "stores": tiers, "batches": len(got), "equal_to_local": same,
                                  "remote_episodes": remote.num_episodes}), flush=True)
                if not same:
                    return 1
        finally:
            proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
