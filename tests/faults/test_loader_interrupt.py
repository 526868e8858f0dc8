"""A training loop stopped by KeyboardInterrupt mid-epoch resumes exactly from the loader's
state_dict: the batches before the interrupt plus the resumed run equal a straight run, batch
for batch, over two epochs, wherever the interrupt lands:

- raised by the consumer after batch k (the loop body: a training step interrupted),
- raised while the loader is making a batch (from collate_fn: Ctrl-C inside the loader's work),
- a real SIGINT at a random moment of the run, delivered from another thread, landing wherever
  the main thread happens to be (inside the resample/fuse kernels, the loader's Python, or the
  loop body). The consumer counts what it received; state_dict must agree with that count.

The `cuda` variants run the same on a GPU dataset (side-stream prefetch: the interrupted
iterator holds a prepared batch that the resumed loader must make again).
"""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from pairs import paired  # noqa: E402
from test_loader import make_episodes  # noqa: E402

EPOCHS = 2
DEVICES = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda)]


def episodes(rng, E=6):
    """joints 100 Hz, camera 30 Hz, actions 50 Hz: test_loader's multi-rate episodes."""
    return make_episodes(rng, E)


WINDOWS = {"state": Window(["joints", "actions"], offsets=[-0.02, 0.0], normalize="mean_std"),
           "action": Window("actions", indices=range(8), rate=50),
           "image": Window("camera", offsets=[0.0], layout="BTCHW")}


@pytest.fixture
def dataset(rng):
    return lambda device: robocache.Dataset.from_episodes(episodes(rng), device=device)


def make(ds, **kw):
    return DataLoader(ds, 16, shuffle=True, seed=5, windows=WINDOWS, **kw)


def host(batch):
    return {k: v.detach().cpu().clone() for k, v in batch.items()}


def straight(ds):
    loader = make(ds)
    out = []
    for _ in range(EPOCHS):
        out += [host(b) for b in loader]
    return out


def assert_same(got, want, where=""):
    assert len(got) == len(want), f"{len(got)} batches, a straight run has {len(want)} {where}"
    for i, (a, b) in enumerate(paired(got, want)):
        assert a.keys() == b.keys(), f"batch {i} keys {where}"
        for k in a:
            assert torch.equal(a[k], b[k]), f"batch {i} key {k!r} differs from the straight run {where}"


def resume(ds, state, got, loader=None):
    """A fresh loader (or the interrupted one) loaded from `state`, run to the end of the last
    epoch, appended to got."""
    loader = loader or make(ds)
    loader.load_state_dict(state)
    for _ in range(state["epoch"], EPOCHS):
        got += [host(b) for b in loader]
    return got


def check_state(state, received, n_batches):
    """The state says exactly the batches the consumer received were handed over."""
    assert state["epoch"] * n_batches + state["batch"] == received, (
        f"state_dict says epoch {state['epoch']} batch {state['batch']} ({n_batches} a epoch) but the consumer "
        f"received {received} batches")


# ----------------------------------------------------------------------------
# raised by the consumer


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["first", "early", "middle", "last-of-epoch", "second-epoch"])
def test_interrupt_in_the_loop_body(dataset, device, where):
    ds = dataset(device)
    want = straight(ds)
    n = len(make(ds))
    stop_at = {"first": 0, "early": 1, "middle": n // 2, "last-of-epoch": n - 1, "second-epoch": n + n // 3}[where]
    loader, got = make(ds), []
    try:
        for _ in range(EPOCHS):
            for b in loader:
                got.append(host(b))
                if len(got) - 1 == stop_at:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        state = loader.state_dict()
    else:
        pytest.fail("the interrupt was not raised")
    check_state(state, len(got), n)
    # the same loader object resumes too once given its state back (a bare new iter() starts
    # the next epoch, as torch's DataLoader does); then a fresh loader in a "new process"
    again = resume(ds, state, list(got), loader)
    assert_same(again, want, f"(same loader, interrupted after batch {stop_at})")
    del loader
    assert_same(resume(ds, state, got), want, f"(interrupted after batch {stop_at})")


# ----------------------------------------------------------------------------
# raised while the loader makes a batch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("call", [0, 3, 11])
def test_interrupt_inside_the_loader(dataset, device, call):
    """collate_fn raises KeyboardInterrupt on its call-th call: that batch was never handed
    over, so the resumed loader must yield it."""
    ds = dataset(device)
    want = straight(ds)
    n = len(make(ds))
    calls = [0]

    def collate(batch):
        calls[0] += 1
        if calls[0] - 1 == call:
            raise KeyboardInterrupt
        return batch

    loader, got = make(ds, collate_fn=collate), []
    try:
        for _ in range(EPOCHS):
            for b in loader:
                got.append(host(b))
    except KeyboardInterrupt:
        state = loader.state_dict()
    else:
        pytest.fail("the interrupt was not raised")
    check_state(state, len(got), n)
    assert len(got) == call
    assert_same(resume(ds, state, got), want, f"(interrupted in collate_fn call {call})")


# ----------------------------------------------------------------------------
# a real SIGINT at random moments


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX signals")
@pytest.mark.parametrize("device", DEVICES)
def test_sigint_at_random_moments(dataset, device, rng):
    """SIGINT (Ctrl-C as a terminal sends it) in 10 trials, each sent by another thread once the
    consumer has received batch k (k spread over the two-epoch run): wherever it lands, the state
    agrees with what the consumer received and the resumed run completes the straight one.

    No timer: the sending thread waits for an event the consumer sets. In the even trials the
    consumer then waits until the signal was sent, so it lands right there (after exactly k + 1
    batches: ten distinct places, whatever the machine's pace); in the odd ones the consumer runs
    on, so the signal lands wherever the main thread happens to be (inside the resample/fuse
    kernels, the loader's Python, the loop body). Should the run end first, the consumer waits for
    the signal after the loop, so every trial is interrupted."""
    ds = dataset(device)
    want = straight(ds)
    n = len(make(ds))
    total = EPOCHS * n
    armed = [False]

    def on_sigint(signum, frame):
        if armed[0]:  # one interrupt per trial
            armed[0] = False
            raise KeyboardInterrupt

    def step(b):  # a consumer that takes some time per batch, like a training step
        x = b["state"].float()
        for _ in range(20):
            x = torch.tanh(x @ torch.ones(x.shape[-1], x.shape[-1], device=x.device) * 0.01)
        return x

    stops = rng.permutation(np.linspace(0, total - 1, 10).round().astype(int))   # batch k of each trial
    old = signal.signal(signal.SIGINT, on_sigint)
    landed = []
    try:
        for trial, k in enumerate(stops):
            pinned = trial % 2 == 0
            reached, sent = threading.Event(), threading.Event()

            def sender():
                reached.wait()
                os.kill(os.getpid(), signal.SIGINT)
                sent.set()

            loader, got = make(ds), []
            armed[0] = True
            th = threading.Thread(target=sender)
            th.start()
            state = None
            try:
                for _ in range(EPOCHS):
                    for b in loader:
                        # record receipt first, in one C call: an interrupt cannot land between
                        # getting b and recording it (a host copy first could be interrupted
                        # halfway, losing a batch the loader rightly counted as handed over)
                        got.append(b)
                        if len(got) == k + 1:
                            reached.set()
                            if pinned:
                                sent.wait()
                        step(b)
                    if device == "cuda":
                        torch.cuda.synchronize()
                sent.wait()   # the run ended before the signal landed: it lands here
            except KeyboardInterrupt:
                state = loader.state_dict()
            finally:
                reached.set()
                th.join()
                armed[0] = False
            got = [host(b) for b in got]
            assert state is not None, f"trial {trial}: the signal sent after batch {k} never interrupted the run"
            assert len(got) >= k + 1, f"trial {trial}: interrupted after {len(got)} batches, before batch {k} came"
            if pinned:
                assert len(got) == k + 1, f"trial {trial}: the signal sent at batch {k} landed after {len(got)}"
            landed.append(len(got))
            check_state(state, len(got), n)
            del loader
            assert_same(resume(ds, state, got), want, f"(trial {trial}: SIGINT sent after batch {k}, "
                                                      f"landed after {len(got)} batches)")
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(set(landed)) >= 5, f"the interrupts landed at too few places: {landed}"
