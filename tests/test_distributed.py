"""torchrun with 2 processes: each rank's shard of every epoch is disjoint from the other's and
together they cover all samples; ranks yield the same batch count; shard_episodes holds only the
rank's episodes (frame stores too: memory and mapped-file tiers give the same batches);
examples/train_ddp.py trains with DDP. On 2 GPUs over NCCL (marked cuda, skipped without 2 GPUs)
and on the CPU over gloo (runs in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BACKENDS = [pytest.param("gloo", id="gloo-cpu"),
            pytest.param("nccl", id="nccl-2gpu", marks=pytest.mark.cuda)]

ROOT = Path(__file__).resolve().parents[1]

WORKER = r'''
import json, os, sys
import numpy as np, torch, torch.distributed as dist
sys.path.insert(0, os.environ["TESTS_DIR"])
import robocache
from robocache import DataLoader, Window
from test_loader import make_episodes

backend = os.environ["BACKEND"]
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(rank)
eps = make_episodes(np.random.default_rng(7), E=9)
full = robocache.Dataset.from_episodes(eps, device=dev)
win = {"joints": Window("joints", offsets=[0.0, 0.01]), "actions": Window("actions", indices=range(4), rate=50)}
out = {"rank": rank, "world": world}
# replicated dataset: shards of the global permutation (rank/world from torch.distributed)
ld = DataLoader(full, 16, shuffle=True, seed=11, windows=win)
out["num_samples"], out["batches"] = ld.num_samples, len(ld)
out["orders"] = {e: ld.order(e).cpu().tolist() for e in (0, 1)}
n = 0
for e in (0, 1):
    ld.set_epoch(e)
    for b in ld:
        assert b["joints"].device == dev
        n += 1
out["yielded"] = n
out["total"] = int(ld.samples[0].shape[0])
# shard_episodes: loaded on the CPU, only this rank's episodes go to its GPU
cpu = robocache.Dataset.from_episodes(eps, device="cpu")
sh = DataLoader(cpu, 16, shuffle=True, seed=11, windows=win, shard_episodes=True, device=dev)
out["held"] = [ep.index for ep in sh.dataset.episodes]
out["sh_batches"] = len(sh)
out["sh_device"] = str(sh.dataset.device)
out["sh_yielded"] = sum(1 for _ in sh)
# frame tiers under shard_episodes: a YUV camera in memory and in a mapped file; each rank keeps only its
# episodes' frames (a disk store's subset maps the file through a row map) and both tiers give it the
# same batches
from robocache.frames.store import FrameStore, yuv420_bytes
frng = np.random.default_rng(3)
ctimes = [np.sort(frng.uniform(e * 0.3, e * 0.3 + 0.3, 5)) for e in range(9)]
frows = frng.integers(0, 256, (45, yuv420_bytes(10, 14)), dtype=np.uint8)
fwin = {"cam": Window("cam", offsets=[0.0, 0.05], layout="BTCHW"), "joints": Window("joints")}
got = {}
for tier in ("cpu", "disk"):
    path = os.path.join(os.environ["OUT_DIR"], f"frames{rank}.npy") if tier == "disk" else None
    st = FrameStore.create(frows, format="yuv420", height=10, width=14, tier=tier, device="cpu", path=path)
    fds = robocache.Dataset.from_episodes([{"joints": ep["joints"]} for ep in eps], device="cpu",
                                          frames={"cam": (st, ctimes)})
    fl = DataLoader(fds, 8, shuffle=True, seed=5, windows=fwin, shard_episodes=True, device=dev)
    got[tier] = (fl, [{k: v.cpu() for k, v in b.items()} for b in fl])
fl = got["disk"][0]
out["frames_held"] = len(fl.dataset.streams["cam"].frames)
out["frames_mine"] = 5 * len(fl.dataset.episodes)
out["frames_tier"] = fl.dataset.streams["cam"].frames.tier
out["tiers_equal"] = all(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
                         for a, b in zip(got["cpu"][1], got["disk"][1])) and len(got["cpu"][1]) == len(got["disk"][1])
# the same number of steps everywhere: a collective per batch would hang otherwise
t = torch.tensor([out["sh_yielded"]], device=dev)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
out["sh_max"] = int(t)
with open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
dist.barrier()  # every rank done with the group: gloo can abort at exit otherwise
dist.destroy_process_group()
'''


def torchrun(args, tmp_path, backend, nproc=2, **env_extra):
    if backend == "nccl" and torch.cuda.device_count() < nproc:
        pytest.skip(f"needs {nproc} GPUs")
    env = dict(os.environ, TESTS_DIR=str(ROOT / "tests"), OUT_DIR=str(tmp_path), PYTHONPATH=str(ROOT),
               BACKEND=backend, OMP_NUM_THREADS="1", **env_extra)
    if backend == "gloo":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r


@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_shards_disjoint_complete(tmp_path, backend):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    torchrun([str(script)], tmp_path, backend)
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in res] == [2, 2]
    N = res[0]["total"]
    assert res[0]["num_samples"] == res[1]["num_samples"] == -(-N // 2)
    assert res[0]["batches"] == res[1]["batches"] and res[0]["yielded"] == res[1]["yielded"] == 2 * res[0]["batches"]
    for e in ("0", "1"):
        a, b = res[0]["orders"][e], res[1]["orders"][e]
        assert set(a) | set(b) == set(range(N))                      # complete
        assert len(a) + len(b) - len(set(a) | set(b)) == 2 * len(a) - N   # disjoint but the wrap
    assert res[0]["orders"]["0"] != res[0]["orders"]["1"]            # a new permutation per epoch
    held0, held1 = set(res[0]["held"]), set(res[1]["held"])
    # whole episodes, or (when they cannot balance the ranks) runs of samples: one episode then on both
    assert len(held0 & held1) <= 1 and held0 | held1 == set(range(9))
    assert res[0]["sh_batches"] == res[1]["sh_batches"] == res[0]["sh_yielded"] == res[0]["sh_max"]
    assert [r["sh_device"] for r in res] == (["cuda:0", "cuda:1"] if backend == "nccl" else ["cpu", "cpu"])
    # frame tiers: each rank holds only its episodes' frames, the same batches from memory and a mapped file
    for r in res:
        assert r["frames_held"] == r["frames_mine"] and r["frames_tier"] == "disk" and r["tiers_equal"], r


@pytest.mark.parametrize("data", ["demo", "picknplace"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_train_ddp_example(tmp_path, backend, data, request):
    """On GR00T PickNPlace where the project's data folder has it, and on the demo set that the example writes
    itself when given no --data and no PickNPlace (both ranks at once: each reads the set whole)."""
    if data == "picknplace":
        DATA = request.getfixturevalue("DATA")
        if not (DATA / "groot_picknplace").is_dir():
            pytest.skip(f"{DATA / 'groot_picknplace'} is not present")
        where, env = ["--data", str(DATA / "groot_picknplace")], {}
    else:
        pytest.importorskip("pyarrow")
        pytest.importorskip("av")
        (tmp_path / "data").mkdir()
        where, env = [], {"ROBOCACHE_DATA": str(tmp_path / "data"), "ROBOCACHE_CACHE_DIR": str(tmp_path / "cache")}
    r = torchrun([str(ROOT / "examples" / "train_ddp.py"), *where, "--steps", "30",
                  "--batch-size", "32", "--json", str(tmp_path / "ddp.json")], tmp_path, backend, **env)
    if data == "demo":
        assert f"{tmp_path / 'cache' / 'demo' / 'lerobot'} loaded" in r.stdout
    res = json.loads((tmp_path / "ddp.json").read_text())
    assert res["world_size"] == 2 and res["backend"] == backend
    assert res["steps"] == 30 and res["last_loss"] < res["first_loss"], res
    # DDP keeps the replicas equal: every rank ends with the same parameters
    assert res["param_checksums_equal"], res


ELASTIC = r'''
import json, os
import numpy as np, torch, torch.distributed as dist
import robocache
from robocache import DataLoader

backend = os.environ["BACKEND"]
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(rank)
out_dir, phase, stop = os.environ["OUT_DIR"], os.environ["PHASE"], int(os.environ["STOP"])
lengths = (37, 12, 50, 8, 23, 41, 5, 30)
# one stream whose value is the sample's id (1000 * episode + step): a batch names its samples
eps = [{"x": (np.arange(n, dtype=np.float64)[:, None] + 1000 * e, np.arange(n) / 10.0 + e)}
       for e, n in enumerate(lengths)]
ds = robocache.Dataset.from_episodes(eps, device="cpu")
res = {"rank": rank, "world": world}
for mode in ("replicated", "shard"):
    ld = DataLoader(ds, 6, shuffle=True, seed=13, windows={"x": "x"}, shard_episodes=mode == "shard", device=dev)
    if phase == "load":     # every rank loads the state rank 0 saved, whatever the world size then
        with open(os.path.join(out_dir, f"state-{mode}.json")) as f:
            ld.load_state_dict(json.load(f))
    it, ids = iter(ld), []
    for _ in range(stop if phase == "save" else len(ld)):
        b = next(it, None)
        if b is None:
            break
        ids += b["x"].reshape(-1).long().tolist()
    res[mode] = ids
    if phase == "save" and rank == 0:
        with open(os.path.join(out_dir, f"state-{mode}.json"), "w") as f:
            json.dump(ld.state_dict(), f)
    if phase == "load":      # the straight run at this world size, for the same-world check
        res[mode + "-straight"] = [int(v) for b in DataLoader(ds, 6, shuffle=True, seed=13, windows={"x": "x"},
                                   shard_episodes=mode == "shard", device=dev) for v in b["x"].reshape(-1)]
with open(os.path.join(out_dir, f"{phase}{rank}.json"), "w") as f:
    json.dump(res, f)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.parametrize("w1,w2", [(2, 3), (3, 1), (2, 2)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_elastic_resume(tmp_path, backend, w1, w2):
    """Issue 31 item 1 under torchrun: a job of w1 ranks saves rank 0's state mid-epoch; a job of w2 ranks
    loads it on every rank and runs the rest of the epoch. Replicated and shard_episodes: the samples
    before and after make the epoch (sample ids: (episode, step)), nothing yielded twice but the wrap's
    padding (< w2); at the same world size, each rank's batches are its straight run's."""
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC)
    torchrun([str(script)], tmp_path, backend, nproc=w1, PHASE="save", STOP="3")
    torchrun([str(script)], tmp_path, backend, nproc=w2, PHASE="load", STOP="0")
    before = [json.loads((tmp_path / f"save{r}.json").read_text()) for r in range(w1)]
    after = [json.loads((tmp_path / f"load{r}.json").read_text()) for r in range(w2)]
    lengths = (37, 12, 50, 8, 23, 41, 5, 30)
    epoch = {1000 * e + i for e, n in enumerate(lengths) for i in range(n)}
    for mode in ("replicated", "shard"):
        seen = [x for r in before for x in r[mode]]
        assert len(seen) == len(set(seen)) == 3 * 6 * w1
        rest = [x for r in after for x in r[mode]]
        assert len({len(r[mode]) for r in after}) == 1                    # the same batch count everywhere
        assert set(seen) | set(rest) == epoch, mode                      # none lost
        assert not set(seen) & set(rest), mode                           # none yielded again
        assert len(rest) - len(set(rest)) < w2                           # only the wrap repeats
        assert len(rest) - len(set(rest)) == w2 * len(after[0][mode]) - (len(epoch) - len(seen))
        if w1 == w2:                                                     # bit for bit the straight run
            for b, a in zip(before, after):
                assert b[mode] + a[mode] == a[mode + "-straight"], mode


MULTINODE = r'''
import glob, json, os, warnings
import torch, torch.distributed as dist
import robocache
from robocache import DataLoader, Window

backend = os.environ["BACKEND"]
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cpu")
if backend == "nccl":       # each node sees its own GPUs (CUDA_VISIBLE_DEVICES), one per local rank
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")        # the set lists a camera it does not ship
    # each rank reads, decodes and caches only its episodes, in its node's cache dir
    ds = robocache.Dataset.from_lerobot(os.environ["DATA"], device="cpu", shard_episodes=True, show_progress=False)
ld = DataLoader(ds, 16, shuffle=True, seed=5, drop_last=True, shard_episodes=True, identity=["episode_index", "timestamp"],
                device=dev, windows={"state": Window("observation.state"), "cam": Window("observation.images.ego_view")})
res = {"rank": rank, "world": world, "node": int(os.environ["GROUP_RANK"]), "held": ds.episode_index.tolist(),
       "batches": len(ld), "ids": {}, "cam": {}}
for epoch in (0, 1):
    ld.set_epoch(epoch)
    it = iter(ld)
    got = [next(it) for _ in range(3)]
    res["ids"][epoch] = [[int(e), float(t)] for b in got for e, t in zip(b["episode_index"], b["timestamp"])]
    res["cam"][epoch] = [int(b["cam"].sum()) for b in got]
dist.barrier()             # every rank of the node has ingested before its cache is listed
sources = set()
for f in glob.glob(os.path.join(os.environ["ROBOCACHE_CACHE_DIR"], "frames", "*.json")):
    sources |= {s["path"] for s in json.load(open(f)).get("sources", [])}
res["cached"] = sorted(sources)
with open(os.path.join(os.environ["OUT_DIR"], f"{os.environ['RUN']}-rank{rank}.json"), "w") as f:
    json.dump(res, f)
dist.barrier()
dist.destroy_process_group()
'''


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(script, tmp_path, per_node: int, env_of_node) -> None:
    """``script`` as a job of 2 "nodes" x ``per_node`` processes: two torchrun agents on this machine
    (``--nnodes=2 --node_rank=0/1``), node k's environment ``env_of_node(k)``."""
    port = _free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={k}",
                               f"--nproc_per_node={per_node}", "--master_addr=127.0.0.1", f"--master_port={port}",
                               str(script)], env=env_of_node(k), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for k in range(2)]
    try:
        outs = [p.communicate(timeout=600)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in nodes), "\n".join(o[-3000:] for o in outs)


@pytest.mark.parametrize("backend,per_node", [pytest.param("gloo", 1, id="gloo-2x1-cpu"),
                                              pytest.param("nccl", 2, id="nccl-2x2-gpu", marks=pytest.mark.cuda)])
def test_two_nodes_hold_their_ranks_episodes(tmp_path, DATA, backend, per_node):
    """Issue 31 item 5: 2 "nodes" x ``per_node`` processes (torchrun --nnodes=2 --node_rank=0/1, two
    torchrun agents on one machine, each node its own ROBOCACHE_CACHE_DIR as nodes have their own disks, and
    over NCCL its own GPUs). Each node reads, decodes and caches only its ranks' episodes, and the batches
    (sample ids, frames) are those of the same job on one node of 2 x ``per_node`` processes."""
    world = 2 * per_node
    if backend == "nccl" and torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    script = tmp_path / "multinode.py"
    script.write_text(MULTINODE)
    base = dict(os.environ, OUT_DIR=str(tmp_path), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", BACKEND=backend,
                CUDA_VISIBLE_DEVICES="", DATA=str(DATA / "groot_picknplace"))
    run = [sys.executable, "-m", "torch.distributed.run"]

    def gpus(node):
        return ",".join(str(node * per_node + i) for i in range(per_node)) if backend == "nccl" else ""

    two_nodes(script, tmp_path, per_node, lambda k: dict(base, RUN="nodes", CUDA_VISIBLE_DEVICES=gpus(k),
                                                         ROBOCACHE_CACHE_DIR=str(tmp_path / f"cache-node{k}")))
    one = subprocess.run([*run, "--standalone", f"--nproc_per_node={world}", str(script)],
                         env=dict(base, RUN="one", ROBOCACHE_CACHE_DIR=str(tmp_path / "cache-one"),
                                  CUDA_VISIBLE_DEVICES=",".join(map(str, range(world))) if backend == "nccl" else ""),
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    nodes_res = [json.loads((tmp_path / f"nodes-rank{r}.json").read_text()) for r in range(world)]
    one_res = [json.loads((tmp_path / f"one-rank{r}.json").read_text()) for r in range(world)]
    for r, (a, b) in enumerate(zip(nodes_res, one_res)):
        assert a["world"] == world and a["node"] == r // per_node
        # the node has cached only its ranks' episodes' videos (each rank holds only its own)
        on_node = sorted({e for x in nodes_res if x["node"] == a["node"] for e in x["held"]})
        assert sorted(Path(p).name for p in a["cached"]) == [f"episode_{e:06d}.mp4" for e in on_node], a
        assert a["held"] != list(range(5))
        # the global order (and the frames) are the one-node job's
        assert (a["held"], a["batches"], a["ids"], a["cam"]) == (b["held"], b["batches"], b["ids"], b["cam"])
    assert {e for a in nodes_res for e in a["held"]} == set(range(5))
    assert nodes_res[0]["ids"]["0"] != nodes_res[0]["ids"]["1"]          # a new order per epoch


def test_resume_across_a_change_of_node_count(tmp_path):
    """Issue 31 item 5: a job of 2 "nodes" x 1 process (two torchrun agents, gloo) saves rank 0's state
    mid-epoch; a job of 1 node x 3 processes loads it and runs the rest of the epoch: nothing lost, nothing
    yielded twice but the wrap's padding (the loader sees only the global rank and world size)."""
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC)
    env = dict(os.environ, OUT_DIR=str(tmp_path), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", BACKEND="gloo",
               CUDA_VISIBLE_DEVICES="", PHASE="save", STOP="3")
    two_nodes(script, tmp_path, 1, lambda k: env)
    torchrun([str(script)], tmp_path, "gloo", nproc=3, PHASE="load", STOP="0")
    lengths = (37, 12, 50, 8, 23, 41, 5, 30)
    epoch = {1000 * e + i for e, n in enumerate(lengths) for i in range(n)}
    before = [json.loads((tmp_path / f"save{r}.json").read_text()) for r in range(2)]
    after = [json.loads((tmp_path / f"load{r}.json").read_text()) for r in range(3)]
    for mode in ("replicated", "shard"):
        seen = [x for r in before for x in r[mode]]
        rest = [x for r in after for x in r[mode]]
        assert len(seen) == len(set(seen)) == 3 * 6 * 2
        assert set(seen) | set(rest) == epoch and not set(seen) & set(rest), mode
        assert len(rest) - len(set(rest)) < 3
