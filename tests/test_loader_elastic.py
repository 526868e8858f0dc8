"""Elastic exact resume (issue 31 item 1), ranks simulated in one process: a state saved by one rank of
a job at W ranks restores the job at W' ranks. The rest of the epoch is exactly the samples no rank
had yielded (none lost, none repeated but the wrap padding of the last part), replicated or
``shard_episodes``; at the same world and batch size it is batch for batch the straight run.
tests/test_distributed.py runs the same under torchrun over gloo."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader  # noqa: E402


def id_dataset(lengths):
    """Episodes whose one stream's value is the sample's id (1000 * episode + step): a batch names its samples."""
    eps = [{"x": (np.arange(n, dtype=np.float64)[:, None] + 1000 * e, np.arange(n) / 10.0 + e)}
           for e, n in enumerate(lengths)]
    return robocache.Dataset.from_episodes(eps, device="cpu")


LENGTHS = (37, 12, 50, 8, 23, 41, 5, 30)      # 206 samples, uneven episodes


def run(ds, world, batch_size, stop=None, state=None, **kw):
    """Each rank's sample ids over ``stop`` batches (the rest of the epoch when None), and rank 0's state
    after them (every rank runs in lockstep, as DDP makes them)."""
    out, states = [], []
    kw = {"shuffle": True, **kw}              # a shuffled epoch, what resume must reproduce
    for r in range(world):
        ld = DataLoader(ds, batch_size, windows={"x": "x"}, rank=r, world_size=world, **kw)
        if state is not None:
            ld.load_state_dict(state)
        it, ids = iter(ld), []
        for _ in range(stop if stop is not None else len(ld)):
            b = next(it, None)
            if b is None:
                break
            ids += b["x"].reshape(-1).long().tolist()
        out.append(ids)
        states.append(ld.state_dict())
    assert len({len(x) for x in out}) == 1, "ranks yielded different counts"
    # every rank's state is the job's but for its rank
    assert all({k: v for k, v in s.items() if k != "rank"} == {k: v for k, v in states[0].items() if k != "rank"}
               for s in states)
    return out, states[0]


def all_ids(lengths):
    return {1000 * e + i for e, n in enumerate(lengths) for i in range(n)}


def check_rest(before, after, lengths, drop_last):
    """before + after cover the epoch, nothing yielded twice before the save; returns the repeats after it
    (the wrap padding: what the rest yields beyond the samples no rank had yielded)."""
    seen = [x for r in before for x in r]
    assert len(seen) == len(set(seen)), "a sample yielded twice before the save"
    flat = [x for r in after for x in r]
    fresh = set(flat) - set(seen)
    union = set(seen) | fresh
    if drop_last:
        assert union <= all_ids(lengths) and len(flat) == len(set(flat)) == len(fresh), "drop_last repeated"
    else:
        assert union == all_ids(lengths), f"{len(all_ids(lengths) - union)} samples lost"
    return len(flat) - len(fresh)


@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "shard_episodes"])
@pytest.mark.parametrize("w1,w2", [(2, 3), (3, 1), (2, 2), (1, 4), (4, 2), (3, 5)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_at_another_world_size(shard, w1, w2, shuffle):
    ds = id_dataset(LENGTHS)
    kw = dict(seed=7, shuffle=shuffle, shard_episodes=shard)
    before, state = run(ds, w1, 6, stop=3, **kw)
    assert state["epoch"] == 0 and state["world_size"] == w1 and state["samples"] == 3 * 6 * w1
    assert state["total_samples"] == sum(LENGTHS)
    after, end = run(ds, w2, 6, state=state, **kw)
    pad = check_rest(before, after, LENGTHS, drop_last=False)
    # the rest is spread evenly, to the sample: the wrap pads < w2 (as DistributedSampler's)
    rest = len(all_ids(LENGTHS)) - state["samples"]
    assert pad == w2 * len(after[0]) - rest and pad < w2, (pad, rest)
    assert end["epoch"] == 1 and end["batch"] == 0 and end["segments"] == []
    # the next epoch is a whole one at the new world size, as a fresh loader gives it
    nxt = run(ds, w2, 6, state=end, **kw)[0]
    fresh = DataLoader(ds, 6, windows={"x": "x"}, rank=0, world_size=w2, **{"shuffle": True, **kw})
    fresh.set_epoch(1)
    assert nxt[0] == [int(v) for b in fresh for v in b["x"].reshape(-1)]
    if w1 == w2:
        # the same world: batch for batch the straight run
        straight = run(ds, w1, 6, **kw)[0]
        assert [a + b for a, b in zip(before, after)] == straight


@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "shard_episodes"])
def test_resume_twice_and_at_another_batch_size(shard):
    """2 ranks x 6 -> 3 ranks x 4 (the global batch kept) -> saved mid-way -> 2 ranks x 6 again: nothing lost."""
    ds = id_dataset(LENGTHS)
    kw = dict(seed=3, shard_episodes=shard)
    a, s1 = run(ds, 2, 6, stop=4, **kw)
    b, s2 = run(ds, 3, 4, stop=3, state=s1, **kw)
    assert s2["segments"] == [[2, 6, 4]] and s2["batch"] == 3 and s2["samples"] == 4 * 6 * 2 + 3 * 4 * 3
    # the same world and batch size again: the segment goes on exactly
    b_rest = run(ds, 3, 4, state=s2, **kw)[0]
    assert [x + y for x, y in zip(b, b_rest)] == run(ds, 3, 4, state=s1, **kw)[0]
    c, _ = run(ds, 2, 6, state=s2, **kw)
    check_rest([*a, *b], c, LENGTHS, drop_last=False)


@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "shard_episodes"])
def test_resume_drop_last(shard):
    ds = id_dataset(LENGTHS)
    kw = dict(seed=5, drop_last=True, shard_episodes=shard)
    before, state = run(ds, 3, 5, stop=2, **kw)
    after, _ = run(ds, 2, 5, state=state, **kw)
    check_rest(before, after, LENGTHS, drop_last=True)
    assert all(len(set(x)) == len(x) for x in after)          # drop_last never repeats
    assert len(after[0]) % 5 == 0


def test_resume_a_finished_epoch_and_bad_states():
    ds = id_dataset(LENGTHS)
    _, state = run(ds, 2, 6, seed=1)                            # a whole epoch: the next starts at 0
    assert state["epoch"] == 1 and state["batch"] == 0 and state["samples"] == 0
    ld = DataLoader(ds, 6, shuffle=True, windows={"x": "x"}, seed=1, rank=2, world_size=3)
    ld.load_state_dict(state)
    assert len(list(ld)) == len(ld)
    with pytest.raises(ValueError, match="total_samples was 205"):
        ld.load_state_dict({**state, "total_samples": 205})
    with pytest.raises(ValueError, match="shuffle was False"):
        ld.load_state_dict({**state, "shuffle": False})
    # a sampler orders the samples itself: it is resumed at its own world and batch size only
    sl = DataLoader(ds, 6, shuffle=False, windows={"x": "x"}, sampler=range(50))
    with pytest.raises(ValueError, match="sampler"):
        sl.load_state_dict({**sl.state_dict(), "batch_size": 3})


@pytest.mark.cuda
@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "shard_episodes"])
def test_resume_at_another_world_size_cuda(shard):
    """The same on the GPU (graph-replayed batches over a resumed epoch's shorter tables; a shard moved to
    the device, and the episodes of the rest copied there at the resume)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    ds = id_dataset(LENGTHS)
    kw = dict(seed=7, shard_episodes=shard, device="cuda")
    before, state = run(ds, 2, 6, stop=3, **kw)
    after, _ = run(ds, 3, 6, state=state, **kw)
    rest = len(all_ids(LENGTHS)) - state["samples"]
    assert check_rest(before, after, LENGTHS, drop_last=False) == 3 * len(after[0]) - rest
    cpu = run(ds, 3, 6, state=state, **{**kw, "device": "cpu"})[0]
    assert after == cpu
