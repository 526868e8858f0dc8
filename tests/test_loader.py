"""robocache.DataLoader / Window on the CPU: every window equals a per-sample NumPy reference
(np.interp / nearest) on a synthetic multi-rate set and on the real GR00T PickNPlace; transforms
match their formulas; order, epochs, resume, sampler, collate_fn and bad input."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from pairs import paired  # noqa: E402

TOL = 1e-4


# ----------------------------------------------------------------------------
# references, one sample at a time


def ref_window(t, v, x, mode):
    """Stream (times t [n], values v [n, ...]) at targets x [T]: (values [T, ...], is_pad [T])."""
    n = len(t)
    if n == 0:
        return np.zeros((len(x),) + v.shape[1:], v.dtype), np.ones(len(x), bool)
    pad = (x < t[0] - TOL) | (x > t[-1] + TOL)
    if mode == "linear":
        flat = v.reshape(n, -1).astype(np.float64)
        out = np.stack([np.interp(x, t, flat[:, f]) for f in range(flat.shape[1])], -1)
        return out.reshape((len(x),) + v.shape[1:]), pad
    j = np.clip(np.searchsorted(t, x, side="right") - 1, 0, n - 1)
    if mode == "nearest":
        k = np.minimum(j + 1, n - 1)
        j = np.where((k > j) & (t[k] - x < x - t[j]), k, j)  # a tie: the earlier sample (LeRobot)
    else:
        assert mode == "previous", mode
    return v[j], pad


def host_episode(ds, name, e):
    v, t = ds.episode(e)[name]
    return t.numpy(), v.numpy()


def check_loader(loader, refs, epoch=None):
    """Every batch of one epoch against refs[key](episode, anchor) -> (values, is_pad)."""
    order = loader.order(epoch).numpy()
    ep_all, t_all = (x.numpy() for x in loader.samples)
    B = loader.batch_size
    nb = 0
    for k, batch in enumerate(loader):
        idx = order[k * B:(k + 1) * B]
        for key, ref in refs.items():
            got, pad = batch[key].numpy(), batch[key + "_is_pad"].numpy()
            assert got.shape[0] == len(idx) and pad.shape == got.shape[:2], (key, got.shape, pad.shape)
            for b, i in enumerate(idx):
                want, want_pad = ref(int(ep_all[i]), float(t_all[i]))
                # float32 lerp against a float64 reference: a few ulps of the neighbours (|x| ~ 10
                # here: ~1e-6 each), not of the result, which can be near zero
                np.testing.assert_allclose(got[b], want, rtol=1e-6, atol=5e-6,
                                           err_msg=f"{key} batch {k} row {b} (episode {ep_all[i]}, t={t_all[i]})")
                np.testing.assert_array_equal(pad[b], want_pad, err_msg=f"{key}_is_pad batch {k} row {b}")
        nb += 1
    assert nb == len(loader)


# ----------------------------------------------------------------------------
# synthetic multi-rate set: joints 100 Hz float32, camera 30 Hz uint8 frames, actions 50 Hz


def make_episodes(rng, E=5):
    eps = []
    for e in range(E):
        dur = rng.uniform(0.6, 2.0)
        t0 = rng.uniform(0.0, 0.05)
        tj = t0 + np.arange(int(dur * 100)) / 100 + rng.uniform(-1e-3, 1e-3, int(dur * 100))
        tj.sort()
        tc = t0 + 0.04 + np.arange(int(dur * 30)) / 30
        ta = t0 + np.arange(int(dur * 50)) / 50
        j = rng.standard_normal((len(tj), 7)).astype(np.float32)
        j[:, 6] = 0.5                                   # a constant feature: normalizes to 0
        cam = rng.integers(0, 255, (len(tc), 6, 8, 3), dtype=np.uint8)
        a = (rng.standard_normal((len(ta), 4)) * 3 + 1).astype(np.float32)
        eps.append({"joints": (j, tj), "camera": (cam, tc), "actions": (a, ta)})
    return eps


@pytest.fixture
def synth(rng):
    return robocache.Dataset.from_episodes(make_episodes(rng), device="cpu")


def ref_for(ds, name, offsets, mode):
    def ref(e, t):
        tt, vv = host_episode(ds, name, e)
        return ref_window(tt, vv, t + np.asarray(offsets, np.float64), mode)
    return ref


def test_windows_equal_reference_synthetic(synth):
    offs_j = [-0.05, 0.0, 0.013, 0.5]
    loader = DataLoader(synth, 7, shuffle=True, seed=3, windows={
        "joints": Window("joints", offsets=offs_j),
        "camera": Window("camera", offsets=[-0.1, 0.0]),
        "actions": Window("actions", indices=range(8), rate=50),
        "actions_lin": Window("actions", offsets=[0.0, 0.011], mode="linear"),
        "prev": Window("joints", offsets=[0.004], mode="previous"),
    })
    assert loader.anchor == "joints" and loader.num_samples == synth.streams["joints"].num_samples
    b = next(iter(DataLoader(synth, 7, shuffle=True, windows=loader.windows)))
    assert b["joints"].shape == (7, 4, 7) and b["joints"].dtype == torch.float32
    assert b["camera"].shape == (7, 2, 6, 8, 3) and b["camera"].dtype == torch.uint8
    assert b["actions"].shape == (7, 8, 4)
    check_loader(loader, {
        "joints": ref_for(synth, "joints", offs_j, "linear"),
        "camera": ref_for(synth, "camera", [-0.1, 0.0], "nearest"),
        "actions": ref_for(synth, "actions", np.arange(8) / 50, "nearest"),
        "actions_lin": ref_for(synth, "actions", [0.0, 0.011], "linear"),
        "prev": ref_for(synth, "joints", [0.004], "previous"),
    })


@pytest.mark.parametrize("drop_last", [False, True])
def test_each_epoch_is_a_permutation_of_the_dataset_frames(synth, drop_last):
    """The order from first principles (check_loader above takes it from the loader): the anchor's
    frames, counted from the dataset's own episodes (not the loader's tables), each come exactly once
    an epoch, at their own time and with their own values; with drop_last, N // B * B distinct frames.
    Each epoch is shuffled anew. A regression that drops or repeats samples fails here."""
    B = 7
    times = [host_episode(synth, "joints", e) for e in range(len(synth))]
    frames = {(e, i) for e, (t, _) in enumerate(times) for i in range(len(t))}
    n = len(frames) // B * B if drop_last else len(frames)
    loader = DataLoader(synth, B, shuffle=True, seed=3, drop_last=drop_last, identity=True,
                        windows={"j": Window("joints")})
    assert len(loader) == (n // B if drop_last else -(-n // B))
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        got = []
        for b in loader:
            assert len(b["j"]) == B or not drop_last
            for e, i, ts, v in zip(b["episode_index"].tolist(), b["frame_index"].tolist(), b["timestamp"].tolist(),
                                   b["j"].numpy()):
                t, vals = times[e]
                assert ts == t[i], f"episode {e} frame {i}: timestamp {ts}, the frame's time is {t[i]}"
                np.testing.assert_allclose(v[0], vals[i], rtol=1e-6, atol=1e-6, err_msg=f"episode {e} frame {i}")
                got.append((e, i))
        assert len(got) == n, f"epoch {epoch}: {len(got)} samples, the dataset has {len(frames)} frames"
        assert len(set(got)) == n, f"epoch {epoch}: {n - len(set(got))} samples repeated"
        assert set(got) <= frames and (drop_last or set(got) == frames)
        epochs.append(got)
    assert epochs[0] != epochs[1], "both epochs in the same order: set_epoch did not reshuffle"


def test_fused_key_equals_per_stream_reference(synth):
    offs = [-0.02, 0.0, 0.07]
    loader = DataLoader(synth, 16, shuffle=True, windows={"state": Window(["joints", "actions"], offsets=offs,
                                                            mode={"actions": "nearest"})})

    def ref(e, t):
        a, pa = ref_for(synth, "joints", offs, "linear")(e, t)
        b, pb = ref_for(synth, "actions", offs, "nearest")(e, t)
        return np.concatenate([a, b], -1), pa | pb
    check_loader(loader, {"state": ref})
    assert next(iter(loader))["state"].shape == (16, 3, 11)


def test_anchor_stream_and_rate_grid(synth):
    cam = synth.streams["camera"]
    loader = DataLoader(synth, 5, shuffle=True, anchor="camera", windows={"j": Window("joints")})
    ep, t = (x.numpy() for x in loader.samples)
    np.testing.assert_array_equal(t, cam.times.numpy())
    np.testing.assert_array_equal(ep, np.repeat(np.arange(len(synth)), cam.lengths))
    check_loader(loader, {"j": ref_for(synth, "joints", [0.0], "linear")})

    rate = 10.0
    loader = DataLoader(synth, 4, shuffle=True, rate=rate,
                        windows={"j": Window("joints"), "a": Window("actions", offsets=[0.1])})
    ep, t = (x.numpy() for x in loader.samples)
    want_ep, want_t = [], []
    for e in range(len(synth)):
        firsts = [host_episode(synth, n, e)[0][0] for n in ("joints", "actions")]
        lasts = [host_episode(synth, n, e)[0][-1] for n in ("joints", "actions")]
        lo, hi = min(firsts), max(lasts)
        k = np.arange(int(np.floor((hi - lo) * rate + 1e-9)) + 1)
        want_ep.append(np.full(len(k), e))
        want_t.append(lo + k / rate)
    np.testing.assert_array_equal(ep, np.concatenate(want_ep))
    np.testing.assert_allclose(t, np.concatenate(want_t), rtol=0, atol=1e-12)
    check_loader(loader, {"j": ref_for(synth, "joints", [0.0], "linear"),
                          "a": ref_for(synth, "actions", [0.1], "linear")})


# ----------------------------------------------------------------------------
# transforms


@pytest.mark.parametrize("how", ["min_max", "mean_std", "q01_q99"])
def test_normalization_formulas(synth, how):
    st = {k: v.numpy() for k, v in synth.streams["joints"].stats.items()}
    loader = DataLoader(synth, 32, shuffle=False, windows={"raw": Window("joints", offsets=[0.0, 0.3]),
                                                           "n": Window("joints", offsets=[0.0, 0.3], normalize=how)})
    for batch in loader:
        x, y = batch["raw"].numpy().astype(np.float64), batch["n"].numpy()
        assert batch["n"].dtype == torch.float32
        if how == "mean_std":
            with np.errstate(divide="ignore", invalid="ignore"):
                want = (x - st["mean"]) / st["std"]
            want[..., st["std"] == 0] = 0
        else:
            lo, hi = (st["min"], st["max"]) if how == "min_max" else (st["q01"], st["q99"])
            with np.errstate(divide="ignore", invalid="ignore"):
                want = 2 * (x - lo) / (hi - lo) - 1
            want[..., hi == lo] = 0
            if how == "q01_q99":
                want = np.clip(want, -1, 1)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        assert np.all(y[..., 6] == 0), "a constant feature normalizes to 0"
        if how == "min_max":
            assert y.min() >= -1 - 1e-6 and y.max() <= 1 + 1e-6
        if how == "q01_q99":
            assert y.min() >= -1 and y.max() <= 1


def test_normalization_fused_uses_each_streams_stats(synth):
    sj, sa = synth.streams["joints"].stats, synth.streams["actions"].stats
    loader = DataLoader(synth, 64, shuffle=False, windows={
        "raw": Window(["joints", "actions"]), "n": Window(["joints", "actions"], normalize="mean_std")})
    mean = np.concatenate([sj["mean"].numpy(), sa["mean"].numpy()])
    std = np.concatenate([sj["std"].numpy(), sa["std"].numpy()])
    b = next(iter(loader))
    x = b["raw"].numpy().astype(np.float64)
    want = np.where(std > 0, (x - mean) / np.where(std > 0, std, 1), 0)
    np.testing.assert_allclose(b["n"].numpy(), want, rtol=1e-5, atol=1e-5)


def test_max_dim_padding_and_mask(synth):
    loader = DataLoader(synth, 8, shuffle=True, windows={"a": Window("actions", indices=range(3), max_dim=10),
                                           "raw": Window("actions", indices=range(3))})
    for batch in loader:
        a, m = batch["a"], batch["a_dim_mask"]
        assert a.shape == (a.shape[0], 3, 10) and m.shape == a.shape and m.dtype == torch.bool
        torch.testing.assert_close(a[..., :4], batch["raw"], rtol=0, atol=0)
        assert torch.all(a[..., 4:] == 0)
        assert torch.all(m[..., :4]) and not torch.any(m[..., 4:])
        m.fill_(True)                    # the caller's to write: later batches keep their mask
    with pytest.raises(ValueError, match="max_dim 3 is below the 4 features"):
        DataLoader(synth, 8, shuffle=True, windows={"a": Window("actions", max_dim=3)})


def test_image_layouts_and_resize(synth):
    loader = DataLoader(synth, 6, shuffle=True, seed=1, windows={
        "hwc": Window("camera", offsets=[0.0, 0.05]),
        "chw": Window("camera", offsets=[0.0, 0.05], layout="BTCHW"),
        "small": Window("camera", offsets=[0.0, 0.05], layout="BTCHW", resize=(3, 4)),
        "small8": Window("camera", offsets=[0.0, 0.05], resize=(3, 4))})
    for batch in loader:
        hwc = batch["hwc"]
        B = hwc.shape[0]
        chw = batch["chw"]
        assert chw.shape == (B, 2, 3, 6, 8) and chw.dtype == torch.float32
        torch.testing.assert_close(chw, hwc.permute(0, 1, 4, 2, 3).float() / 255, rtol=0, atol=0)
        ref = torch.nn.functional.interpolate(hwc.reshape(B * 2, 6, 8, 3).permute(0, 3, 1, 2).float(), size=(3, 4),
                                              mode="bilinear", align_corners=False, antialias=False)
        torch.testing.assert_close(batch["small"], (ref / 255).reshape(B, 2, 3, 3, 4), rtol=1e-6, atol=1e-6)
        assert batch["small8"].shape == (B, 2, 3, 4, 3) and batch["small8"].dtype == torch.uint8
        torch.testing.assert_close(batch["small8"], ref.round().clamp(0, 255).to(torch.uint8)
                                   .permute(0, 2, 3, 1).reshape(B, 2, 3, 4, 3), rtol=0, atol=0)


def test_dtype_cast(synth):
    b = next(iter(DataLoader(synth, 4, shuffle=True, windows={"j": Window("joints", dtype=torch.float64)})))
    assert b["j"].dtype == torch.float64


# ----------------------------------------------------------------------------
# order, epochs, length, resume


def batches(loader, n=None):
    """The next n batches (all of the epoch when None), taking no more than that from the loader."""
    out, it = [], iter(loader)
    for _ in range(len(loader) if n is None else n):
        b = next(it, None)
        if b is None:
            break
        out.append({key: v.clone() for key, v in b.items()})
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in paired(a, b):
        assert x.keys() == y.keys()
        for k in x:
            torch.testing.assert_close(x[k], y[k], rtol=0, atol=0)


WIN = {"j": Window("joints", offsets=[0.0, 0.02]), "a": Window("actions", indices=range(4))}


def test_shuffle_deterministic_per_seed_and_epoch(synth):
    N = synth.streams["joints"].num_samples
    mk = lambda seed=0, shuffle=True, **kw: DataLoader(synth, 9, shuffle, seed=seed, windows=WIN, **kw)
    a, b = mk(), mk()
    assert_same(batches(a), batches(b))
    o0, o1 = mk().order(0).numpy(), mk().order(1).numpy()
    assert sorted(o0) == list(range(N)) and sorted(o1) == list(range(N)), "an epoch takes every sample once"
    assert not np.array_equal(o0, o1), "epochs differ"
    assert not np.array_equal(o0, mk(seed=1).order(0).numpy()), "seeds differ"
    np.testing.assert_array_equal(mk(shuffle=False).order(5).numpy(), np.arange(N))
    # iterating again moves to the next epoch; set_epoch goes back
    c = mk()
    first, second = batches(c), batches(c)
    assert c.epoch == 1
    c.set_epoch(0)
    assert_same(batches(c), first)
    d = mk()
    d.set_epoch(1)
    assert_same(batches(d), second)
    assert not torch.equal(first[0]["j"], second[0]["j"])


def test_generator_seeds_order(synth):
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = DataLoader(synth, 9, shuffle=True, windows=WIN, generator=g1)
    b = DataLoader(synth, 9, shuffle=True, windows=WIN, generator=g2)
    assert a.seed == b.seed
    assert_same(batches(a), batches(b))
    c = DataLoader(synth, 9, shuffle=True, windows=WIN, generator=torch.Generator().manual_seed(8))
    assert not np.array_equal(a.order(0).numpy(), c.order(0).numpy())


@pytest.mark.parametrize("B", [1, 7, 10_000])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_and_drop_last(synth, B, drop_last):
    N = synth.streams["joints"].num_samples
    with warnings.catch_warnings(record=True) as said:      # an empty epoch warns (tests/test_strict_args.py)
        warnings.simplefilter("always")
        loader = DataLoader(synth, B, shuffle=True, drop_last=drop_last, windows={"j": "joints"})
    assert len(said) == (drop_last and B > N)
    want = N // B if drop_last else -(-N // B)
    assert len(loader) == want
    sizes = [b["j"].shape[0] for b in loader]
    assert len(sizes) == want
    assert all(s == B for s in sizes[:-1])
    assert not sizes or sizes[-1] == (B if drop_last else N - B * (want - 1))
    assert sum(sizes) == (want * B if drop_last else N)


@pytest.mark.parametrize("stop", [0, 1, 5, 13])
def test_resume_equals_straight_run(synth, stop):
    mk = lambda: DataLoader(synth, 8, shuffle=True, seed=11, windows=WIN)
    straight = mk()
    full = batches(straight) + batches(straight)          # epochs 0 and 1
    assert len(full) == 2 * len(straight)

    run = mk()
    got = batches(run, stop)
    state = run.state_dict()
    assert state["epoch"] == 0 and state["batch"] == stop
    resumed = mk()
    resumed.load_state_dict(state)
    got += batches(resumed)                               # the rest of epoch 0
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["batch"] == 0
    got += batches(resumed)                               # epoch 1
    assert_same(got, full)


def test_resume_state_checks(synth):
    a = DataLoader(synth, 8, shuffle=True, seed=1, windows=WIN)
    with pytest.raises(ValueError, match="seed was 2"):
        a.load_state_dict({**a.state_dict(), "seed": 2})
    with pytest.raises(ValueError, match="total_samples was 7"):
        a.load_state_dict({**a.state_dict(), "total_samples": 7})
    with pytest.raises(ValueError, match="out of range"):
        a.load_state_dict({**a.state_dict(), "batch": len(a) + 1})
    # issue 34 item 11: a count that is not a non-negative int names the key and the value
    for key, bad in (("epoch", -1), ("epoch", 1.9), ("epoch", "1"), ("epoch", True), ("batch", -2),
                     ("batch", 2.0), ("world_size", 0), ("batch_size", "8"), ("segments", [[2, 8]]),
                     ("segments", [[0, 8, 1]]), ("segments", "none")):
        with pytest.raises(ValueError, match=f"{key} must be .*{bad!r}" if key != "segments" else "segments"):
            a.load_state_dict({**a.state_dict(), key: bad})
    with pytest.raises(ValueError, match="no 'batch'"):
        a.load_state_dict({"epoch": 0})
    with pytest.raises(TypeError, match="state must be a dict"):
        a.load_state_dict([0, 1])
    a.load_state_dict({**a.state_dict(), "epoch": np.int64(2), "batch": np.int32(1)})   # NumPy ints are ints
    assert a.state_dict()["epoch"] == 2 and a.state_dict()["batch"] == 1


def test_state_dict_counts_per_iterator(synth):
    """Two live iterators of one loader: each counts its own batches; state_dict saves the last created
    one's position (issue 34 item 11: they counted each other's)."""
    ld = DataLoader(synth, 8, seed=3, windows=WIN)
    first = iter(ld)
    for _ in range(5):
        next(first)
    assert ld.state_dict()["epoch"] == 0 and ld.state_dict()["batch"] == 5
    second = iter(ld)                                   # the next epoch, from its start
    next(second)
    assert (ld.state_dict()["epoch"], ld.state_dict()["batch"]) == (1, 1)
    for _ in range(3):
        next(first)                                     # the older iterator moves its own count only
    assert (ld.state_dict()["epoch"], ld.state_dict()["batch"]) == (1, 1)
    next(second)
    assert (ld.state_dict()["epoch"], ld.state_dict()["batch"]) == (1, 2)
    # resuming from that state gives what `second` yields next
    resumed = DataLoader(synth, 8, seed=3, windows=WIN)
    resumed.load_state_dict(ld.state_dict())
    assert_same([next(iter(resumed))], [next(second)])


# ----------------------------------------------------------------------------
# torch keywords


class EpochSampler:
    def __init__(self, n):
        self.n, self.epoch = n, 0

    def set_epoch(self, e):
        self.epoch = e

    def __len__(self):
        return self.n // 2

    def __iter__(self):
        return iter(range(self.epoch, 2 * (self.n // 2), 2))   # every other sample, shifted by the epoch


def test_sampler_replaces_order(synth):
    N = synth.streams["joints"].num_samples
    s = EpochSampler(N)
    loader = DataLoader(synth, 5, shuffle=False, sampler=s, windows={"j": "joints"})
    assert loader.num_samples == N // 2 and len(loader) == -(-(N // 2) // 5)
    t_all = loader.samples[1]
    got = torch.cat([b["j"][:, 0] for b in loader])
    want_idx = torch.arange(0, N, 2)[:N // 2]
    torch.testing.assert_close(got, synth.streams["joints"].values[want_idx], rtol=0, atol=0)
    loader.set_epoch(1)
    assert s.epoch == 1
    np.testing.assert_array_equal(loader.order().numpy(), np.arange(1, N, 2)[:N // 2])
    assert t_all.shape == (N,)
    with pytest.raises(IndexError, match="sampler yielded"):
        next(iter(DataLoader(synth, 5, shuffle=False, sampler=[0, N], windows={"j": "joints"})))
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(synth, 5, shuffle=True, sampler=[0, 1], windows={"j": "joints"})


def test_collate_fn_and_worker_keywords(synth):
    """torch's worker keywords are accepted and named in one warning (torch's defaults say nothing);
    collate_fn gets the batch dict; torch's default_collate is a no-op; a function written for torch's
    list of samples fails with a note saying what it gets."""
    seen = []

    def collate(batch):
        seen.append(sorted(batch))
        return {"obs": batch["j"], "n": batch["j"].shape[0]}

    with pytest.warns(UserWarning, match="num_workers=8, pin_memory=True, persistent_workers=True, "
                      "prefetch_factor=4, worker_init_fn=.* ignored: robocache makes each batch") as got:
        loader = DataLoader(synth, 16, shuffle=False, windows={"j": "joints"}, collate_fn=collate, num_workers=8,
                            pin_memory=True, persistent_workers=True, prefetch_factor=4,
                            worker_init_fn=lambda i: 1 / 0, timeout=0, device="cpu")
    assert len(got) == 1 and "timeout" not in str(got[0].message) and got[0].filename == __file__
    out = list(loader)
    assert seen[0] == ["j", "j_is_pad"] and len(out) == len(loader)
    assert out[0]["obs"].shape == (16, 1, 7) and out[0]["n"] == 16
    assert out[0]["obs"].device.type == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # torch's defaults, spelled out: no warning
        quiet = DataLoader(synth, 16, shuffle=False, windows={"j": "joints"}, num_workers=0, pin_memory=False,
                           timeout=0, in_order=True, collate_fn=torch.utils.data.default_collate)
    first = next(iter(quiet))
    assert sorted(first) == ["j", "j_is_pad"] and torch.equal(first["j"], next(iter(loader))["obs"])

    for kw, shown in (({"multiprocessing_context": "spawn"}, "multiprocessing_context='spawn'"),
                      ({"pin_memory_device": "cuda"}, "pin_memory_device='cuda'"), ({"in_order": False}, "in_order=False"),
                      ({"timeout": 5.0}, "timeout=5.0")):
        with pytest.warns(UserWarning, match=f"DataLoader: {shown} ignored"):
            DataLoader(synth, 16, windows={"j": "joints"}, **kw)

    def torch_style(samples):                  # a list of sample dicts, as torch's collate_fn gets
        return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}

    with pytest.raises(KeyError) as e:
        next(iter(DataLoader(synth, 16, windows={"j": "joints"}, collate_fn=torch_style)))
    if sys.version_info >= (3, 11):
        assert "not torch's list of samples" in "".join(e.value.__notes__)


def test_bad_input(synth):
    with pytest.raises(KeyError, match="unknown stream 'nope'"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("nope")})
    with pytest.raises(KeyError, match="anchor: unknown stream"):
        DataLoader(synth, 4, shuffle=True, windows={"x": "joints"}, anchor="nope")
    for w in (None, {}):
        with pytest.raises(ValueError, match="windows: give at least one output key.*delta_timestamps="):
            DataLoader(synth, 4, shuffle=True, windows=w)
    for B in (0, -3, True, 2.5, None):
        with pytest.raises(ValueError, match="batch_size"):
            DataLoader(synth, B, shuffle=True, windows={"x": "joints"})
    with pytest.raises(ValueError, match="not both"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", offsets=[0.0], indices=[0])})
    with pytest.raises(ValueError, match="normalize 'zscore'"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", normalize="zscore")})
    with pytest.raises(ValueError, match="mode 'cubic'"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", mode="cubic")})
    with pytest.raises(ValueError, match="non-empty"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", offsets=[])})
    with pytest.raises(ValueError, match="image streams cannot be fused"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window(["camera", "joints"])})
    with pytest.raises(ValueError, match="layout/resize are for image streams"):
        DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", layout="BTCHW")})
    with pytest.raises(TypeError, match="robocache.Dataset"):
        DataLoader([1, 2], 4, shuffle=True, windows={"x": "joints"})
    with pytest.raises(ValueError, match="rate"):
        DataLoader(synth, 4, shuffle=True, windows={"x": "joints"}, rate=-1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(synth, 4, shuffle=True, windows={"x": "joints"}, rate=10, anchor="joints")


def test_window_dtype_by_name(synth):
    """A window's dtype may be a torch dtype, its name or a NumPy dtype (the image window of a
    BTCHW batch in bf16 is a common ask); anything else fails when the Window is made, naming it."""
    for given, want in (("bfloat16", torch.bfloat16), ("torch.float16", torch.float16), (np.float64, torch.float64),
                        (torch.float32, torch.float32)):
        b = next(iter(DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", offsets=[0.0], dtype=given)})))
        assert b["x"].dtype == want
    for bad in ("floaty", 3, "Tensor"):
        with pytest.raises(TypeError, match=r"Window\('joints'\): dtype must be a torch dtype"):
            DataLoader(synth, 4, shuffle=True, windows={"x": Window("joints", dtype=bad)})


def test_fused_mixed_dtypes_raise(rng):
    eps = make_episodes(rng, 2)
    for ep in eps:
        v, t = ep["actions"]
        ep["actions"] = (v.astype(np.float64), t)
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    with pytest.raises(TypeError, match="share one dtype"):
        DataLoader(ds, 4, shuffle=True, windows={"x": Window(["joints", "actions"])})


# ----------------------------------------------------------------------------
# real data: GR00T PickNPlace (LeRobot v2.0, 20 Hz, 44-dim state and action)


@pytest.fixture(scope="module")
def groot(DATA):
    pytest.importorskip("pyarrow")
    path = DATA / "groot_picknplace"
    if not path.is_dir():
        pytest.skip(f"{path} is not present")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(path, load_video=False, device="cpu")


def test_groot_state_and_action_chunk(groot):
    loader = DataLoader(groot, 32, shuffle=True, seed=5, windows={
        "state": Window("observation.state"),
        "action": Window("action", indices=range(16), rate=20)})
    assert loader.num_samples == 2096
    st, ac = groot.streams["observation.state"], groot.streams["action"]
    off = st.offsets_host
    order = loader.order(0).numpy()
    pads = 0
    for k, batch in enumerate(loader):
        idx = order[k * 32:(k + 1) * 32]
        B = len(idx)
        assert batch["state"].shape == (B, 1, 44) and batch["action"].shape == (B, 16, 44)
        e = np.searchsorted(off, idx, side="right") - 1
        # GR00T: frame i + k of the episode, clamped at its end, padded past it
        j = idx[:, None] + np.arange(16)[None, :]
        end = off[e + 1][:, None]
        want = ac.values.numpy()[np.minimum(j, end - 1)]
        np.testing.assert_array_equal(batch["action"].numpy(), want)
        np.testing.assert_array_equal(batch["action_is_pad"].numpy(), j >= end)
        np.testing.assert_array_equal(batch["state"].numpy()[:, 0], st.values.numpy()[idx])
        assert not batch["state_is_pad"].any()
        pads += int(batch["action_is_pad"].sum())
    assert pads == 5 * sum(range(16)), "each episode's last 15 frames pad 1..15 steps"


def test_groot_normalized_padded_like_groot(groot):
    st = groot.streams["action"].stats
    loader = DataLoader(groot, 64, shuffle=True, windows={
        "action": Window("action", indices=range(16), normalize="min_max", max_dim=64),
        "raw": Window("action", indices=range(16))})
    lo, hi = st["min"].numpy(), st["max"].numpy()
    for batch in loader:
        a = batch["action"].numpy()
        assert a.shape[1:] == (16, 64) and a.dtype == np.float32
        x = batch["raw"].numpy()
        want = np.where(hi > lo, 2 * (x - lo) / np.where(hi > lo, hi - lo, 1) - 1, 0)
        np.testing.assert_allclose(a[..., :44], want, rtol=1e-5, atol=1e-5)
        assert np.all(a[..., 44:] == 0)
        assert batch["action_dim_mask"][..., :44].all() and not batch["action_dim_mask"][..., 44:].any()


def test_groot_video_frames(DATA):
    pytest.importorskip("pyarrow")
    from robocache.readers import available_backends
    if not available_backends():
        pytest.skip("no video backend (PyAV, OpenCV, torchvision) installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = robocache.Dataset.from_lerobot(DATA / "groot_picknplace", device="cpu")
    name = "observation.images.ego_view"
    loader = DataLoader(ds, 16, shuffle=True, seed=2, anchor="observation.state", windows={
        "img": Window(name, layout="BTCHW"), "raw": Window(name)})
    batch = next(iter(loader))
    assert batch["img"].shape == (16, 1, 3, 256, 256) and batch["raw"].shape == (16, 1, 256, 256, 3)
    # by time, as every window: the video's frames are stamped from 0 s, the parquet rows from
    # 0.05 s (a quirk of this set), so state frame i meets video frame i + 1 (clamped at the end)
    order, (ep_all, t_all) = loader.order(0).numpy(), loader.samples
    ref = ref_for(ds, name, [0.0], "nearest")
    for b, i in enumerate(order[:16]):
        want, pad = ref(int(ep_all[i]), float(t_all[i]))
        np.testing.assert_array_equal(batch["raw"][b].numpy(), want)
        np.testing.assert_array_equal(batch["raw_is_pad"][b].numpy(), pad)
    torch.testing.assert_close(batch["img"], batch["raw"].permute(0, 1, 4, 2, 3).float() / 255, rtol=0, atol=0)


def test_graph_launch_rejects_bad_handles():
    """The loader's C graph launch checks its arguments before any CUDA call."""
    from robocache import _C
    with pytest.raises(TypeError, match="expected 7 arguments, got 2"):
        _C._graph_launch(1, 2)
    with pytest.raises(ValueError, match="argument 0 is a null handle"):
        _C._graph_launch(0, 0, 0, 1, 1, 0, 0)
    with pytest.raises(ValueError, match="argument 3 is a null handle"):
        _C._graph_launch(1, 0, 0, 0, 1, 0, 0)
    with pytest.raises(ValueError, match="argument 4 is a null handle"):
        _C._graph_launch(1, 0, 0, 1, 0, 0, 0)
    with pytest.raises(ValueError, match="device: expected a CUDA device index, got -1"):
        _C._graph_launch(1, 0, 0, 1, 1, 1, -1)
    with pytest.raises(TypeError):
        _C._graph_launch("graph", 0, 0, 1, 1, 0, 0)


def test_graph_slot_outputs_know_when_a_batch_is_alive():
    """The graph slots' bookkeeping (robocache/loader/batch_graph.py), on CPU tensors: outputs that
    share memory with anything are copied; a slot is busy while any alias of its batch, or a
    view of one, is alive, and free again once they are gone."""
    from robocache.loader.batch_graph import Outputs, _owned
    mask = torch.tensor([True, True, False])
    grid = torch.arange(32.0)
    frames = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 4, 5, 3)
    raw = {"state": torch.randn(4, 1, 6), "grid": grid.reshape(2, 16), "mask": mask.expand(4, 3),
           "part": torch.randn(10)[2:5], "frames": frames.permute(0, 3, 1, 2)}
    raw["twin"] = raw["state"].view(4, 6)
    del grid, frames
    out = Outputs(_owned(raw))
    want = {k: v.clone() for k, v in raw.items()}
    t = out.tensors
    assert t["grid"] is raw["grid"] and t["frames"] is raw["frames"]     # whole views of fresh memory
    for k in ("mask", "part", "state"):                                    # a broadcast, a slice, shared
        assert t[k] is not raw[k] and torch.equal(t[k], want[k]), k
    assert t["frames"].stride() == want["frames"].stride()
    ptrs = [x.untyped_storage().data_ptr() for x in t.values()]
    assert len(set(ptrs)) == len(ptrs)
    mask.fill_(False)                                                      # the constant changes later:
    assert torch.equal(t["mask"], want["mask"])                            # the slot kept a copy
    del raw
    assert out.free()
    batch = out.aliases()
    assert not out.free()
    assert all(torch.equal(batch[k], want[k]) for k in want)
    view = batch["frames"][:, 1]
    del batch
    assert not out.free()                                                  # a view of one key is enough
    del view
    assert out.free()
    kept = out.aliases()["twin"]
    assert not out.free()
    kept.fill_(0)                                                          # the caller's own writes
    del kept
    assert out.free()
