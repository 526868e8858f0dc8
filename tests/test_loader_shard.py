"""Multi-rank DataLoader on the CPU, ranks simulated in one process with explicit
rank/world_size (tests/test_distributed.py runs the same under torchrun on 2 GPUs):
shards disjoint and complete, equal batch counts, shard_episodes, Dataset.subset."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from robocache.loader import shard  # noqa: E402
from pairs import paired  # noqa: E402
from test_loader import make_episodes  # noqa: E402
from test_loader_pointcloud import VOXEL, make_episodes as make_cloud_episodes  # noqa: E402

WINDOWS = {"joints": Window("joints", offsets=[0.0, 0.02]), "actions": Window("actions", indices=range(4), rate=50)}


@pytest.fixture
def synth(rng):
    return robocache.Dataset.from_episodes(make_episodes(rng, E=7), device="cpu")


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_permutation_shards_disjoint_and_complete(synth, world, drop_last, shuffle):
    N = synth.streams["joints"].num_samples
    loaders = [DataLoader(synth, 8, shuffle=shuffle, drop_last=drop_last, seed=5, windows=WINDOWS,
                          rank=r, world_size=world) for r in range(world)]
    per = N // world if drop_last else -(-N // world)
    assert {ld.num_samples for ld in loaders} == {per}
    assert len({len(ld) for ld in loaders}) == 1                 # same batch count on every rank
    for epoch in (0, 3):
        orders = [ld.order(epoch).numpy() for ld in loaders]
        allidx = np.concatenate(orders)
        if drop_last:
            assert len(set(allidx)) == allidx.size == per * world      # disjoint, N - (N % world) seen
        else:
            assert set(allidx) == set(range(N))                        # complete
            assert allidx.size - len(set(allidx)) == per * world - N   # only the wrap repeats
        # rank r takes every world-th entry of the one global permutation
        glob = DataLoader(synth, 8, shuffle=shuffle, seed=5, windows=WINDOWS).order(epoch).numpy()
        wrapped = np.resize(glob, per * world)
        for r in range(world):
            np.testing.assert_array_equal(orders[r], wrapped[r::world])


def test_rank_batches_are_the_ranks_samples(synth):
    full = DataLoader(synth, 6, seed=2, shuffle=True, windows=WINDOWS)
    glob = full.order().numpy()
    ep, t = (x.numpy() for x in full.samples)
    for r in range(3):
        ld = DataLoader(synth, 6, shuffle=True, seed=2, windows=WINDOWS, rank=r, world_size=3)
        mine = np.resize(glob, ld.num_samples * 3)[r::3]
        got = torch.cat([b["joints"] for b in ld])
        want = torch.cat([b["joints"] for b in DataLoader(synth, 6, shuffle=False, windows=WINDOWS,
                                                          sampler=[int(i) for i in mine])])
        assert torch.equal(got, want)


def test_resume_on_a_rank(synth):
    kw = dict(shuffle=True, seed=9, windows=WINDOWS, world_size=2)
    straight = {r: [b["actions"] for b in DataLoader(synth, 5, rank=r, **kw)] for r in range(2)}
    a = DataLoader(synth, 5, rank=1, **kw)
    it = iter(a)
    first = [next(it)["actions"] for _ in range(3)]
    state = a.state_dict()
    assert state["rank"] == 1 and state["world_size"] == 2 and state["samples"] == 3 * 5 * 2
    # any rank's copy restores the job: rank 0 loads rank 1's state and goes on as rank 0 would have
    for r in range(2):
        b = DataLoader(synth, 5, rank=r, **kw)
        b.load_state_dict(state)
        rest = [x["actions"] for x in b]
        assert len(rest) == len(straight[r]) - 3 and all(torch.equal(x, y) for x, y in paired(rest, straight[r][3:]))
    assert all(torch.equal(x, y) for x, y in paired(first, straight[1][:3]))


def sample_ids(ld, order=None):
    """(source episode, anchor time) of each index of ``order`` (default the loader's current one)."""
    order = ld.order().numpy() if order is None else order
    ep, t = (x.numpy() for x in ld.samples)
    return [(int(ld.dataset.episode_index[ep[i]]), float(t[i])) for i in order]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shard_episodes(synth, world, drop_last):
    loaders = [DataLoader(synth, 8, shuffle=True, seed=4, drop_last=drop_last, windows=WINDOWS, rank=r, world_size=world,
                          shard_episodes=True) for r in range(world)]
    held = [[ep.index for ep in ld.dataset.episodes] for ld in loaders]
    assert sorted(set(e for h in held for e in h)) == list(range(len(synth)))     # every episode held
    # an episode is held by at most two ranks (whole-episode shards, or runs of samples cut at episode
    # boundaries but for one episode per cut)
    assert max(sum(e in h for h in held) for e in range(len(synth))) <= 2
    assert sum(len(h) for h in held) <= len(synth) + world - 1
    N = synth.streams["joints"].num_samples
    mine = [sample_ids(ld, np.unique(ld.order(2).numpy())) for ld in loaders]
    flat = [x for m in mine for x in m]
    assert len(flat) == len(set(flat))                               # disjoint
    counts = [len(m) for m in mine]
    per = min(counts) if drop_last else max(counts)
    assert {ld.num_samples for ld in loaders} == {per} and len({len(ld) for ld in loaders}) == 1
    if not drop_last:
        assert len(flat) == N                                        # complete
    # balanced: whole episodes within shard.TOLERANCE of an epoch both ways, else to a sample
    slack = max(world - 1, shard.TOLERANCE * N)
    assert world * max(counts) - N <= slack and N - world * min(counts) <= slack
    for ld, h in zip(loaders, held):
        assert len(ld.dataset) == len(h)                             # only the rank's episodes held
        order = ld.order(2).numpy()
        assert order.size == per and (drop_last or set(order) <= set(range(int(ld.samples[0].shape[0]))))
        # values come from the rank's subset: equal to the full dataset's episodes
        for k, b in enumerate(ld):
            for row, i in enumerate(ld.order(0).numpy()[k * 8:(k + 1) * 8][:2]):
                e_local, t = int(ld.samples[0][i]), float(ld.samples[1][i])
                e = h[e_local]
                ref = next(iter(DataLoader(synth.subset([e]), 1, shuffle=False, windows=WINDOWS,
                                           sampler=[int(np.searchsorted(synth.streams["joints"].episode(e)[1].numpy(), t))])))
                assert torch.equal(b["joints"][row], ref["joints"][0])
            if k == 1:
                break


@pytest.mark.parametrize("lengths,world", [((40,) * 5, 4), ((300, 20, 20, 20), 4), ((50,) * 3 + (400,), 2),
                                           ((7,) * 61, 8), ((1000,), 3)])
def test_shards_balanced_at_any_episode_count(lengths, world):
    """Issue 31 item 3: 5 episodes on 4 ranks dropped 27% of an epoch with drop_last; episodes split at
    sample granularity when whole ones cannot balance, so drop_last drops < 2% and the shards stay
    disjoint and complete (without drop_last: only the wrap repeats, < 2%)."""
    eps = [{"x": (np.arange(n, dtype=np.float32)[:, None] + 1000 * e, np.arange(n) / 10.0)}
           for e, n in enumerate(lengths)]
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    N = sum(lengths)
    for drop_last in (True, False):
        got = []
        for r in range(world):
            # batch 1: what drop_last drops here is the shards' imbalance, not a last short batch
            ld = DataLoader(ds, 1, shuffle=True, seed=1, drop_last=drop_last, windows={"x": "x"}, rank=r, world_size=world,
                            shard_episodes=True)
            got.append([float(v) for b in ld for v in b["x"].reshape(-1)])     # the values name the samples
        assert len({len(g) for g in got}) == 1
        flat = [v for g in got for v in g]
        if drop_last:
            assert len(flat) == len(set(flat)) and (N - len(flat)) / N < 0.02, (N, len(flat))
        else:
            assert len(set(flat)) == N and (len(flat) - N) / N < 0.02, (N, len(flat))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_shard_episodes_keeps_global_stats(synth, device):
    w = {"j": Window("joints", normalize="mean_std")}
    ld = DataLoader(synth, 4, shuffle=True, windows=w, rank=1, world_size=2, shard_episodes=True, device=device)
    assert ld.dataset.device.type == device
    for k in ("mean", "std", "q01"):       # the whole set's, also on another device (Stream.to)
        assert torch.equal(ld.dataset.streams["joints"].stats[k].cpu(), synth.streams["joints"].stats[k])


def test_shards_compute_statistics_only_for_normalized_windows(rng, monkeypatch):
    """Issue 31 item 2: a sharded loader over a CPU-loaded set spent 73-85 s per rank computing statistics
    over every image frame in its first subset, for nothing. Statistics are computed only for a stream a
    window normalizes, once, over the whole set; normalized batches are what they were."""
    from robocache.data import stream
    calls = []
    compute = stream.compute_stats
    monkeypatch.setattr(stream, "compute_stats", lambda s: calls.append(s.name) or compute(s))
    ds = robocache.Dataset.from_episodes(make_episodes(rng, E=7), device="cpu")     # joints, camera, actions
    for r in range(2):
        ld = DataLoader(ds, 4, shuffle=True, windows={**WINDOWS, "cam": Window("camera", layout="BTCHW")}, rank=r, world_size=2,
                        shard_episodes=True)
        next(iter(ld))
        ld.dataset.subset([0]).to("cpu")
    assert calls == []                      # the camera's frames above all
    w = {"j": Window("joints", normalize="mean_std"), "raw": Window("joints"), "cam": Window("camera")}
    got = [next(iter(DataLoader(ds, 4, shuffle=True, windows=w, rank=r, world_size=2, shard_episodes=True))) for r in range(2)]
    assert calls == ["joints"]              # once, over the whole set, shared by both shards
    full = ds.streams["joints"].stats
    for b in got:
        want = ((b["raw"].double() - full["mean"]) / torch.where(full["std"] > 0, full["std"], torch.inf)).float()
        torch.testing.assert_close(b["j"], want, rtol=1e-6, atol=1e-6)


def test_shard_episodes_point_clouds(rng):
    ds = robocache.Dataset.from_episodes(make_cloud_episodes(rng), device="cpu")
    w = {"g": Window("lidar", voxel=dict(VOXEL, mode="count")), "j": "joints"}
    full = {}
    for b in DataLoader(ds, 1000, shuffle=False, windows=w):
        for j, g in zip(b["j"], b["g"]):
            full[j.numpy().tobytes()] = g
    for r in range(2):
        for b in DataLoader(ds, 16, shuffle=True, windows=w, rank=r, world_size=2, shard_episodes=True):
            for j, g in zip(b["j"], b["g"]):
                assert torch.equal(g, full[j.numpy().tobytes()])


def test_subset(synth):
    sub = synth.subset([4, 0, 6])
    assert len(sub) == 3 and [e.index for e in sub.episodes] == [4, 0, 6]
    for i, e in enumerate([4, 0, 6]):
        for n in synth.streams:
            (va, ta), (vb, tb) = synth.episode(e)[n], sub.episode(i)[n]
            assert torch.equal(va, vb) and torch.equal(ta, tb)
    assert len(synth.subset([])) == 0
    with pytest.raises(IndexError, match="out of range"):
        synth.subset([7])


def test_bad_distributed_arguments(synth):
    with pytest.raises(ValueError, match="give both or neither"):
        DataLoader(synth, 4, shuffle=True, windows=WINDOWS, rank=0)
    with pytest.raises(ValueError, match="0 <= rank < world_size"):
        DataLoader(synth, 4, shuffle=True, windows=WINDOWS, rank=2, world_size=2)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(synth, 4, shuffle=False, windows=WINDOWS, sampler=[0], shard_episodes=True)
    N = synth.streams["joints"].num_samples
    with pytest.raises(ValueError, match="ranks get no samples"):
        DataLoader(synth, 4, shuffle=True, windows=WINDOWS, rank=1, world_size=N + 1, shard_episodes=True)


@pytest.mark.parametrize("world", [2, 3])
def test_lerobot_loaded_as_shards(tmp_path, rng, world):
    """Dataset.from_lerobot(shard_episodes=(rank, world)) reads only the rank's episodes, chosen from the
    metadata; its loader (shard_episodes=True) yields what the loader over the whole set gives that rank."""
    from lerobot_forge import write_lerobot
    import robocache
    from robocache.readers.lerobot import episode_weights
    lengths = (6, 9, 5, 7, 12, 3, 8)
    write_lerobot(tmp_path, rng, lengths=lengths)
    ids, rows, weights = episode_weights(tmp_path)
    assert ids == list(range(7)) and rows.tolist() == list(lengths) and np.array_equal(weights, rows)
    whole = robocache.Dataset.from_lerobot(tmp_path, device="cpu")
    w = {"state": robocache.Window("observation.state", offsets=[0.0]),
         "action": robocache.Window("action", indices=range(3), rate=10)}
    held = []
    for r in range(world):
        part = robocache.Dataset.from_lerobot(tmp_path, device="cpu", shard_episodes=(r, world))
        assert part.shard[:2] == (r, world) and sum(part.shard[2]) == sum(lengths)
        mine = DataLoader(part, 4, shuffle=True, seed=3, windows=w, rank=r, world_size=world, shard_episodes=True)
        ref = DataLoader(whole, 4, shuffle=True, seed=3, windows=w, rank=r, world_size=world, shard_episodes=True)
        assert part.episode_index.tolist() == ref.dataset.episode_index.tolist()
        assert part.shard.samples == [int(p.size) for p in ref._table.shard.plan(world)]
        held += part.episode_index.tolist()
        assert len(mine) == len(ref)
        for a, b in paired(mine, ref):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        with pytest.raises(ValueError, match="shard_episodes=True"):
            DataLoader(part, 4, shuffle=True, windows=w, rank=r, world_size=world)
        with pytest.raises(ValueError, match="rank"):
            DataLoader(part, 4, shuffle=True, windows=w, rank=(r + 1) % world, world_size=world, shard_episodes=True)
    assert sorted(set(held)) == list(range(7)) and len(held) <= 7 + world - 1   # split episodes on two ranks
    with pytest.raises(ValueError, match="rank 3 is not in"):
        robocache.Dataset.from_lerobot(tmp_path, device="cpu", shard_episodes=(3, 3))
    with pytest.raises(ValueError, match="torch.distributed"):
        robocache.Dataset.from_lerobot(tmp_path, device="cpu", shard_episodes=True)
    # cameras weigh by their pixels: rows x (h x w) of every video key, or a resize's
    info = tmp_path / "meta" / "info.json"
    meta = json.loads(info.read_text())
    meta["features"]["observation.images.cam"] = {"dtype": "video", "shape": [48, 64, 3],
                                                  "names": ["height", "width", "channel"]}
    info.write_text(json.dumps(meta))
    assert np.array_equal(episode_weights(tmp_path)[2], rows * 48 * 64)
    assert np.array_equal(episode_weights(tmp_path, episodes=[4, 1], video_resize=(10, 20))[2],
                          rows[[4, 1]] * 200)


def test_lerobot_loaded_shard_resumes(tmp_path, rng):
    """A set loaded as one rank's episodes resumes at its saved world size exactly; at another it does not
    hold the episodes the rest of the epoch needs, and says so (the whole set, sharded by the loader, can)."""
    from lerobot_forge import write_lerobot
    write_lerobot(tmp_path, rng, lengths=(6, 9, 5, 7, 12, 3, 8))
    w = {"state": Window("observation.state")}
    parts = [robocache.Dataset.from_lerobot(tmp_path, device="cpu", shard_episodes=(r, 2)) for r in range(2)]
    mk = lambda r: DataLoader(parts[r], 4, shuffle=True, seed=3, windows=w, rank=r, world_size=2, shard_episodes=True)  # noqa: E731
    a = mk(0)
    it = iter(a)
    next(it), next(it)
    state = a.state_dict()
    for r in range(2):
        straight = [b["state"] for b in mk(r)]
        b = mk(r)
        b.load_state_dict(state)
        rest = [x["state"] for x in b]
        assert len(rest) == len(straight) - 2 and all(torch.equal(x, y) for x, y in paired(rest, straight[2:]))
    part3 = robocache.Dataset.from_lerobot(tmp_path, device="cpu", shard_episodes=(0, 3))
    with pytest.raises(ValueError, match="loaded as one rank's episodes"):
        DataLoader(part3, 4, shuffle=True, seed=3, windows=w, rank=0, world_size=3, shard_episodes=True).load_state_dict(state)
    whole = robocache.Dataset.from_lerobot(tmp_path, device="cpu")
    DataLoader(whole, 4, shuffle=True, seed=3, windows=w, rank=0, world_size=3, shard_episodes=True).load_state_dict(state)


@pytest.mark.parametrize("seed", range(6))
def test_rank_samples(seed):
    """shard.rank_samples: every sample on exactly one rank; whole episodes where they balance the ranks to
    TOLERANCE of an epoch both ways, else runs balanced to a sample, an episode cut at most once per rank
    boundary."""
    from robocache.loader.shard import TOLERANCE, assign, rank_samples
    r = np.random.default_rng(seed)
    counts = r.integers(1, 400, r.integers(1, 40))
    weights = counts * r.integers(1, 5, counts.size)
    start = np.concatenate([[0], np.cumsum(counts)])
    N = int(start[-1])
    for world in (1, 2, 3, 8):
        plan = rank_samples(counts, weights, world)
        flat = np.concatenate(plan)
        assert np.array_equal(np.sort(flat), np.arange(N)) and all(np.all(np.diff(p) > 0) for p in plan)
        sizes = np.array([p.size for p in plan])
        eps = [set(np.searchsorted(start, p, side="right") - 1) for p in plan]
        owner = assign(weights, world)
        held = np.bincount(owner, weights=counts, minlength=world)
        whole = held.min() > 0 and max(world * held.max() - N, N - world * held.min()) <= TOLERANCE * N
        if whole:
            assert [sorted(e) for e in eps] == [sorted(np.flatnonzero(owner == k)) for k in range(world)]
        else:
            assert sizes.max() - sizes.min() <= 1
            assert sum(len(e) for e in eps) <= counts.size + world - 1
