"""robocache.DataLoader on CUDA: the same batches as on the CPU, an epoch with no host sync, and
the side-stream prefetch ordered against the consumer's stream."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from pairs import paired  # noqa: E402
from gpu_gate import hold  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from test_loader import EpochSampler, make_episodes  # noqa: E402

pytestmark = pytest.mark.cuda


def windows():
    return {"joints": Window("joints", offsets=[-0.05, 0.0, 0.013, 0.5]),
            "camera": Window("camera", offsets=[-0.1, 0.0], layout="BTCHW", resize=(4, 4)),
            "frames": Window("camera"),
            "actions": Window("actions", indices=range(8), rate=50, normalize="min_max", max_dim=6),
            "state": Window(["joints", "actions"], offsets=[0.0, 0.02], normalize="mean_std")}


@pytest.fixture
def pair(rng):
    eps = make_episodes(rng)
    return (robocache.Dataset.from_episodes(eps, device="cpu"),
            robocache.Dataset.from_episodes(eps, device="cuda"))


@pytest.mark.parametrize("rate", [None, 12.5])
def test_cuda_batches_equal_cpu(pair, rate):
    cpu, gpu = pair
    a = DataLoader(cpu, 9, shuffle=True, seed=4, windows=windows(), rate=rate)
    b = DataLoader(gpu, 9, shuffle=True, seed=4, windows=windows(), rate=rate)
    assert len(a) == len(b)
    for x, y in paired(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert y[k].device.type == "cuda", k
            # bit-exact except the float math after resampling (normalize/resize), which
            # cuBLAS-free elementwise kernels may round differently
            tol = 0 if k.endswith(("_is_pad", "_dim_mask")) or k in ("frames", "joints") else 1e-5
            torch.testing.assert_close(y[k].cpu(), x[k], rtol=tol, atol=tol, msg=k)


def test_cuda_epoch_without_host_sync(pair):
    _, gpu = pair
    loader = DataLoader(gpu, 16, shuffle=True, seed=1, windows=windows())
    for _ in loader:                 # first pass: lazy stats, allocator warm-up
        pass
    torch.cuda.synchronize()
    loader.set_epoch(3)
    n = 0
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in loader:
            batch["joints"].mul(2)  # consumer work on the current stream
            n += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert n == len(loader)


def test_side_stream_ordering(pair, sleep_cycles):
    """The consumer's stream waits for the batch it is given; batches stay valid while the
    consumer holds them (record_stream), even when the consumer's stream is busy."""
    cpu, gpu = pair
    want = [{k: v.clone() for k, v in b.items()} for b in DataLoader(cpu, 8, shuffle=True, seed=2, windows=windows())]
    side = torch.cuda.Stream()
    got = []
    with torch.cuda.stream(side):  # the consumer on a non-default stream too
        for batch in DataLoader(gpu, 8, shuffle=True, seed=2, windows=windows()):
            torch.cuda._sleep(sleep_cycles // 20)    # a slow consumer: the prefetch runs ahead
            got.append({k: v.clone() for k, v in batch.items()})
            del batch
    torch.cuda.synchronize()
    assert len(got) == len(want)
    for x, y in paired(want, got):
        for k in x:
            tol = 0 if k.endswith(("_is_pad", "_dim_mask")) or k in ("frames", "joints") else 1e-5
            torch.testing.assert_close(y[k].cpu(), x[k], rtol=tol, atol=tol, msg=k)


def test_cuda_resume_equals_straight(pair):
    _, gpu = pair
    mk = lambda: DataLoader(gpu, 8, shuffle=True, seed=9, windows=windows())
    straight = [b["state"].clone() for b in mk()]
    run = mk()
    it = iter(run)
    got = [next(it)["state"].clone() for _ in range(3)]
    resumed = mk()
    resumed.load_state_dict(run.state_dict())
    got += [b["state"].clone() for b in resumed]
    assert len(got) == len(straight)
    for x, y in paired(got, straight):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    # the order is drawn on the host: the same on every device
    np.testing.assert_array_equal(mk().order(0).cpu().numpy(),
                                  DataLoader(gpu.to("cpu"), 8, shuffle=True, seed=9,
                                             windows=windows()).order(0).numpy())


@pytest.fixture
def cloud_pair(rng):
    from test_loader_pointcloud import make_episodes as make_cloud_episodes
    eps = make_cloud_episodes(rng)
    return (robocache.Dataset.from_episodes(eps, device="cpu"),
            robocache.Dataset.from_episodes(eps, device="cuda"))


def cloud_windows():
    from test_loader_pointcloud import VOXEL
    return {"occ": Window("lidar", offsets=[-0.2, 0.0, 0.3], voxel=dict(VOXEL, dtype=torch.uint8)),
            "mean": Window("lidar", offsets=[0.0], pad="zero", voxel=dict(VOXEL, mode="mean")),
            "count": Window("lidar", indices=range(-2, 1), rate=10, mode="previous", voxel=dict(VOXEL, mode="count")),
            "joints": Window("joints", indices=range(-3, 5), rate=100, pad="zero")}


def test_cuda_point_cloud_windows_equal_cpu(cloud_pair):
    cpu, gpu = cloud_pair
    a = DataLoader(cpu, 11, shuffle=True, seed=2, windows=cloud_windows())
    b = DataLoader(gpu, 11, shuffle=True, seed=2, windows=cloud_windows())
    for x, y in paired(a, b):
        for k in x:
            assert y[k].device.type == "cuda", k
            # deterministic voxelize: CPU == GPU bit for bit, mean included
            assert torch.equal(y[k].cpu(), x[k]), k


def test_cuda_point_cloud_epoch_without_host_sync(cloud_pair):
    _, gpu = cloud_pair
    loader = DataLoader(gpu, 16, shuffle=True, seed=1, windows=cloud_windows())
    for _ in loader:
        pass
    torch.cuda.synchronize()
    loader.set_epoch(2)
    torch.cuda.set_sync_debug_mode("error")
    try:
        n = sum(1 for _ in loader)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert n == len(loader)


def test_cuda_shards_equal_cpu_shards(pair):
    cpu, gpu = pair
    for r in range(2):
        kw = dict(shuffle=True, seed=3, windows=windows(), rank=r, world_size=2)
        a = DataLoader(cpu, 8, **kw)
        b = DataLoader(cpu, 8, device="cuda", shard_episodes=True, **{**kw, "seed": 4})
        c = DataLoader(cpu, 8, shard_episodes=True, **{**kw, "seed": 4})
        assert b.dataset.device.type == "cuda" and len(b.dataset) < len(cpu)
        for x, y in paired(a, DataLoader(gpu, 8, **kw)):
            assert torch.equal(x["joints"], y["joints"].cpu())
        for x, y in paired(c, b):
            assert torch.equal(x["joints"], y["joints"].cpu())


# --- the CUDA graph path (batch_graph.py): full batches replay into static output slots ------


def graph_windows():
    return {**windows(), "pix": Window("camera", offsets=[0.0, 0.05], layout="BTCHW", dtype=torch.float16)}


def from_slot(loader, batch) -> bool:
    """Whether the batch aliases one of the loader's graph slots (else it was made eagerly)."""
    ptrs = {x.untyped_storage().data_ptr() for s in loader._batches.graph.slots for x in s.outputs.tensors.values()}
    return all(x.untyped_storage().data_ptr() in ptrs for x in batch.values())


def same_batch(x, y, strides=True):
    assert list(x) == list(y)
    for k in x:
        assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
        assert torch.equal(x[k], y[k]), k
        if strides:
            live = lambda t: [st for n, st in zip(t.shape, t.stride()) if n > 1]
            assert live(x[k]) == live(y[k]), k


def test_graph_batches_equal_eager(pair):
    """Batches taken one at a time (each dropped before the next is asked for, as a training
    loop does) come from the slots, bit for bit the eager batches, strides included."""
    _, gpu = pair
    n = DataLoader(gpu, 1, shuffle=True, windows=graph_windows()).num_samples
    B = next(b for b in (7, 8, 9, 11) if n % b)       # a short last batch (made eagerly)
    g = DataLoader(gpu, B, shuffle=True, seed=5, windows=graph_windows())
    e = DataLoader(gpu, B, shuffle=True, seed=5, windows=graph_windows(), cuda_graph=False)
    replayed = 0
    for epoch in range(2):
        for i, (x, y) in enumerate(zip(g, e)):
            same_batch(x, y)
            if g._batches.graph is not None and from_slot(g, x):
                replayed += 1
            elif epoch == 1 and i < len(g) - 1:
                raise AssertionError(f"batch {i} of epoch 1 was made eagerly")
    assert e._batches.graph is None
    assert replayed == 2 * (len(g) - 1) - 1     # all full batches but the first (the warm-up)


def test_graph_kept_batches_are_never_overwritten(pair):
    """A caller keeping every batch (list(loader)) holds every slot: later batches are made
    eagerly, and no kept batch changes."""
    _, gpu = pair
    g = DataLoader(gpu, 5, shuffle=True, seed=2, windows=graph_windows())
    e = DataLoader(gpu, 5, shuffle=True, seed=2, windows=graph_windows(), cuda_graph=False)
    got = [b for _ in range(2) for b in g]
    want = [b for _ in range(2) for b in e]
    torch.cuda.synchronize()
    assert len(got) == len(want) and len(g) > 2 * len(g._batches.graph.slots)
    for x, y in paired(got, want):
        same_batch(x, y)
    assert 0 < sum(from_slot(g, b) for b in got) <= len(g._batches.graph.slots)


def test_graph_views_and_in_place_writes(pair):
    """A view of one key keeps its whole slot out of use, and a caller writing into a batch
    in place changes neither later batches nor the one it keeps a view of."""
    _, gpu = pair
    g = DataLoader(gpu, 4, shuffle=True, seed=6, windows=graph_windows())
    e = DataLoader(gpu, 4, shuffle=True, seed=6, windows=graph_windows(), cuda_graph=False)
    want = list(e)
    kept = {}
    for i, b in enumerate(g):
        same_batch(b, want[i], strides=False)
        if i == 3:
            assert from_slot(g, b)
            kept["view"] = b["joints"][:, 1:]          # only a view survives the batch
        for x in b.values():                          # the caller scribbles over every output
            x.fill_(1) if x.dtype == torch.bool else x.fill_(-7)
    again = list(g)                                   # the next epoch, from the same slots
    e.set_epoch(1)
    for x, y in paired(again, e):
        same_batch(x, y, strides=False)
    torch.cuda.synchronize()
    assert torch.equal(kept["view"], torch.full_like(kept["view"], -7))   # its own write, no replay's


def test_graph_point_clouds_equal_eager(cloud_pair):
    _, gpu = cloud_pair
    g = DataLoader(gpu, 6, shuffle=True, seed=8, windows=cloud_windows())
    e = DataLoader(gpu, 6, shuffle=True, seed=8, windows=cloud_windows(), cuda_graph=False)
    replayed = 0
    for _ in range(2):
        for x, y in zip(g, e):
            replayed += g._batches.graph is not None and from_slot(g, x)
            for k in x:
                assert torch.equal(x[k], y[k]), k
    assert replayed >= len(g)


def test_graph_replay_waits_for_the_consumer(pair):
    """A dropped batch's slot is rewritten only after the consumer's queued work on it has run:
    the consumer held at a gate (tests/gpu_gate.py) reads batch 0 after four more batches were
    replayed."""
    _, gpu = pair
    g = DataLoader(gpu, 4, shuffle=True, seed=9, windows=graph_windows())
    e = DataLoader(gpu, 4, shuffle=True, seed=9, windows=graph_windows(), cuda_graph=False)
    list(g)                                           # captured
    e.set_epoch(1)
    want = list(e)
    it = iter(g)
    b = next(it)
    assert from_slot(g, b)
    with hold() as gate:                              # the consumer busy
        late = {k: x.clone() for k, x in b.items()}   # queued behind the gate
        del b
        rest = [next(it) for _ in range(2 * len(g._batches.graph.slots))]   # every slot rewritten meanwhile
        assert gate.pending(), "the loader waited on the host for the consumer: the test tested nothing"
    same_batch(late, want[0], strides=False)
    for i, x in enumerate(rest, start=1):
        same_batch(x, want[i], strides=False)


def test_graph_unsupported_torch_warns_and_stays_eager(pair, monkeypatch):
    from robocache.loader import batch_graph
    monkeypatch.setattr(batch_graph, "supported", lambda: False)
    _, gpu = pair
    g = DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows())
    with pytest.warns(RuntimeWarning, match="torch >= 2.9") as caught:
        got = list(g)
    assert len(got) > 3 and len([w for w in caught if w.category is RuntimeWarning]) == 1   # tried once
    assert g._batches.graph is None and not g.cuda_graph
    for x, y in paired(got, DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows(), cuda_graph=False)):
        same_batch(x, y)


def test_graph_capture_oom_empties_the_cache_once_and_retries(pair, monkeypatch):
    from robocache.loader import batch_graph
    real, calls, emptied = batch_graph.BatchGraph, [], []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (test)")
        return real(*a, **k)

    monkeypatch.setattr(batch_graph, "BatchGraph", flaky)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    _, gpu = pair
    g = DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = list(g)
    assert len(calls) == 2 and len(emptied) == 1 and g._batches.graph is not None and g.cuda_graph
    for x, y in paired(got, DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows(), cuda_graph=False)):
        same_batch(x, y)


def test_a_loader_per_epoch_under_a_memory_cap(pair):
    """A new loader each epoch captures new graphs; the dead ones' pools stay reserved until the
    allocator empties its cache, which a capture cannot do. Under a cap that a few dozen dead pools
    exceed, every loader still captures (no warning) and its batches are right."""
    _, gpu = pair
    want = [b for b in DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows(), cuda_graph=False)]
    torch.cuda.synchronize()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_reserved() + (64 << 20)) / total))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for _ in range(40):
                g = DataLoader(gpu, 6, shuffle=True, seed=4, windows=graph_windows())
                got = list(g)
                assert g._batches.graph is not None
        for x, y in paired(got, want):
            same_batch(x, y)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_graph_capture_without_host_sync(pair):
    """The capture itself (batch 2 of a fresh loader) and every replay run under sync debug."""
    _, gpu = pair
    loader = DataLoader(gpu, 16, shuffle=True, seed=1, windows=graph_windows())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        n = sum(1 for _ in loader) + sum(1 for _ in loader)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert loader._batches.graph is not None and n == 2 * len(loader)


def test_graph_interrupted_iterators_and_resume(pair):
    """Breaking out mid-epoch, a second live iterator (made eagerly), resume into a loader whose
    graph was captured at another batch: batch for batch the eager loader's."""
    _, gpu = pair
    mk = lambda **kw: DataLoader(gpu, 5, shuffle=True, seed=3, windows=windows(), **kw)
    want = [b for b in mk(cuda_graph=False)]
    loader = mk()
    it = iter(loader)
    first = [next(it) for _ in range(4)]           # eager, capture, replay, replay
    other = iter(mk())                               # another loader's graph meanwhile
    next(other)
    second = iter(loader)                            # the graph is busy: eager, and a new epoch
    assert loader._batches.graph is not None
    nxt = next(second)
    del it                                           # frees the graph for the next iterator
    for x, y in paired(first, want[:4]):
        assert all(torch.equal(x[k], y[k]) for k in x)
    e1 = mk(cuda_graph=False)
    e1.set_epoch(1)
    want1 = list(e1)
    assert all(torch.equal(nxt[k], want1[0][k]) for k in nxt)
    state = None
    for i, b in enumerate(second, start=1):
        assert all(torch.equal(b[k], want1[i][k]) for k in b), i
        if i == 6:
            state = loader.state_dict()
            break
    resumed = mk()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(want1) - 7
    for x, y in paired(rest, want1[7:]):
        assert all(torch.equal(x[k], y[k]) for k in x)


class Shrinking(EpochSampler):
    """A sampler whose length changes every epoch (the graph's tables are re-made)."""

    def __len__(self):
        return self.n - 3 * self.epoch

    def __iter__(self):
        return iter(np.random.default_rng(self.epoch).permutation(self.n)[:len(self)].tolist())


def test_graph_sampler_length_changes(pair):
    _, gpu = pair
    n = DataLoader(gpu, 4, shuffle=True, windows=windows()).num_samples
    g = DataLoader(gpu, 4, shuffle=False, sampler=Shrinking(n), windows=windows())
    e = DataLoader(gpu, 4, shuffle=False, sampler=Shrinking(n), windows=windows(), cuda_graph=False)
    for epoch in range(3):
        g.set_epoch(epoch)
        e.set_epoch(epoch)
        got, want = list(g), list(e)
        assert len(got) == len(want) == -(-(n - 3 * epoch) // 4)
        for x, y in paired(got, want):
            assert all(torch.equal(x[k], y[k]) for k in x)


def test_graph_teardown_waits_for_queued_replays(pair, monkeypatch):
    """A loader dropped with replays still queued (prefetched, never taken) waits for them
    before the graph's memory pool goes back to the allocator (for any stream to reuse). The
    consumer is held at a gate (tests/gpu_gate.py) so the replays stay queued; the teardown's host
    wait on the replays' stream is what opens it (a teardown that does not wait leaves it shut)."""
    import gc
    _, gpu = pair
    loader = DataLoader(gpu, 8, shuffle=True, seed=1, windows=graph_windows())
    for _ in loader:                   # capture
        pass
    torch.cuda.synchronize()
    side = loader._batches.side
    waited = []
    real_sync = torch.cuda.Stream.synchronize

    def sync(stream):                  # a host wait on a stream: record which, open the gate, wait
        waited.append(stream)
        gate.release()
        return real_sync(stream)

    with hold() as gate:               # the consumer busy: the next replays queue behind it
        it = iter(loader)
        batch = next(it)               # batch 0 handed over, batch 1 queued
        assert not side.query(), "the replays should still be queued behind the gate"
        monkeypatch.setattr(torch.cuda.Stream, "synchronize", sync)
        del batch, it, loader
        gc.collect()
        monkeypatch.undo()
        assert side in waited, "the graph was freed without waiting for its queued replays"
        assert side.query(), "the graph was freed while its replays were still queued"
