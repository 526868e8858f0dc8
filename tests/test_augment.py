"""Augmentation in the frame gather (robocache.augment, gather_frames(augment=)) on the CPU.

- the kernel against the NumPy references of torchvision's ops (tests/reference_augment.py, held to
  torchvision itself in test_reference_augment.py): each op alone with chosen parameters, and rows drawn
  by real pipelines replayed op by op, from RGB and YUV storage, outputs poisoned first;
- the draws follow torchvision's sampling rules (ranges, probabilities, order, RandomResizedCrop's tries,
  LeRobot's weighted subsets against torch.multinomial), shown on fixed keys (deterministic statistics);
- determinism: a sample's row depends on (seed, epoch, episode, anchor time, camera) only; a loader's
  epoch repeats, the next differs, a resumed loader continues exactly; every tier gives the same batch;
- errors name the transform or argument.
"""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import reference_augment as R  # noqa: E402
import robocache  # noqa: E402
import robocache.augment as A  # noqa: E402
from robocache import DataLoader, Window, _C  # noqa: E402
from robocache.augment import draw as D  # noqa: E402
from robocache.frames.store import FrameStore  # noqa: E402
from robocache.video.layout import yuv420_bytes  # noqa: E402
from pairs import paired  # noqa: E402
from reference import split_i420, yuv420_to_rgb_ref  # noqa: E402

H, W = 30, 40


# --- replaying a row with the references ---------------------------------------------------------

def replay(img, row, out_hw, antialias=True, norm=None):
    """The op-by-op meaning of a parameter row, on a [3, H, W] float image in [0, 1]."""
    r = [float(v) for v in row]
    t, l, ch, cw, rh, rw, ot, ol = (int(v) for v in r[:8])
    flip, interp = int(r[D.FLIP]), int(r[D.AFFINE])
    x = R.crop(img, t, l, ch, cw)
    if (rh, rw) != (ch, cw):
        x = R.resize(x, rh, rw, antialias=antialias)
    x = R.crop(x, ot, ol, *out_hw)
    if flip == 2:
        x = R.horizontal_flip(x)
    for k in range(int(r[D.NCOLOR])):
        code, f = int(r[D.COLOR + 2 * k]), r[D.COLOR + 2 * k + 1]
        if code == D.AFFINE_AT and interp:
            x = R.warp(x, np.float32(r[D.THETA:D.THETA + 6]).tolist(), "nearest" if interp == 1 else "bilinear",
                       fill=0)
        elif code == D.BRIGHTNESS:
            x = R.adjust_brightness(x, f)
        elif code == D.CONTRAST:
            x = R.adjust_contrast(x, f)
        elif code == D.SATURATION:
            x = R.adjust_saturation(x, f)
        elif code == D.HUE:
            x = R.adjust_hue(x, f)
        elif code == D.SHARPNESS:
            x = R.adjust_sharpness(x, f)
        elif code == D.GRAYSCALE:
            x = R.rgb_to_grayscale(x)
    if flip == 1:
        x = R.horizontal_flip(x)
    if norm is not None:
        x = R.normalize(x, *norm)
    return x


def run_kernel(storage, fmt, rows, out_hw, *, group=1, antialias=True, norm=None, dtype=np.float32, ids=None):
    M = rows.shape[0] * group
    out = np.full((M, *out_hw, 3), np.nan if dtype == np.float32 else 0xAB, dtype)  # poisoned
    ids = np.arange(M, dtype=np.int64) % storage.shape[0] if ids is None else ids
    kw = dict(mean=norm[0], std=norm[1]) if norm is not None else {}
    scratch = np.full(M * (out_hw[0] + 1) + (3 * M * out_hw[0] * out_hw[1] + 1) // 2, np.nan)
    _C.gather_frames(storage, ids, out, format=fmt, height=H, width=W, channels=3, augment=rows,
                     augment_group=group, scratch=scratch, antialias=antialias, **kw)
    return out


def frames(rng, n, fmt):
    """Stored frames and their RGB as the kernel decodes them ([n, 3, H, W] float in [0, 1])."""
    if fmt == "rgb":
        st = rng.integers(0, 256, (n, H, W, 3), dtype=np.uint8)
        rgb = st
    else:
        st = rng.integers(16, 240, (n, yuv420_bytes(H, W)), dtype=np.uint8)
        rgb = np.stack([yuv420_to_rgb_ref(*split_i420(f, H, W)) for f in st])
    return st, rgb.transpose(0, 3, 1, 2).astype(np.float32) / 255


def row(**kw):
    r = np.zeros(D.NPARAMS, np.float32)
    r[[D.CROP_H, D.CROP_W, D.RESIZE_H, D.RESIZE_W]] = [H, W, H, W]
    r[D.THETA:D.THETA + 6] = [1, 0, 0, 0, 1, 0]
    ops = kw.pop("ops", [])
    for k, v in kw.items():
        r[getattr(D, k.upper())] = v
    r[D.NCOLOR] = len(ops)
    for k, (c, f) in enumerate(ops):
        r[D.COLOR + 2 * k], r[D.COLOR + 2 * k + 1] = c, f
    return r


def assert_close(got, want, tol=2e-5, msg=""):
    assert got.shape == want.shape, f"{msg}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{msg}: unwritten (NaN) elements"
    d = np.abs(got.astype(np.float64) - want)
    assert d.max() <= tol, f"{msg}: max diff {d.max() * 255:.4f}/255 at {np.unravel_index(d.argmax(), d.shape)}"


# --- each op against its reference ------------------------------------------------------------------

def _single_ops():
    m = R.affine_inverse_matrix(-17.0, [0, 0], 1.0, [0.0, 0.0])
    m2 = R.affine_inverse_matrix(6.0, [3, -2], 1.1, [5.0, -2.0])
    return {
        "crop": (row(crop_top=3, crop_left=5, crop_h=20, crop_w=27, resize_h=20, resize_w=27), (20, 27)),
        "resize_aa_down": (row(resize_h=13, resize_w=17), (13, 17)),
        "resize_aa_up": (row(crop_top=2, crop_left=1, crop_h=11, crop_w=13, resize_h=23, resize_w=31), (23, 31)),
        "resized_window": (row(resize_h=24, resize_w=28, out_top=3, out_left=2), (19, 22)),
        "flip": (row(flip=1), (H, W)),
        "rotate_nearest": (row(affine=1, theta=0, ops=[(D.AFFINE_AT, 0)]), (H, W)),
        "brightness": (row(ops=[(D.BRIGHTNESS, 1.37)]), (H, W)),
        "contrast": (row(ops=[(D.CONTRAST, 0.55)]), (H, W)),
        "saturation": (row(ops=[(D.SATURATION, 1.8)]), (H, W)),
        "hue": (row(ops=[(D.HUE, -0.21)]), (H, W)),
        "hue_half": (row(ops=[(D.HUE, 0.5)]), (H, W)),
        "sharpness": (row(ops=[(D.SHARPNESS, 1.9)]), (H, W)),
        "grayscale": (row(ops=[(D.GRAYSCALE, 0)]), (H, W)),
    }, m, m2


@pytest.mark.parametrize("fmt", ["rgb", "yuv420"])
def test_each_op_matches_its_reference(rng, fmt):
    ops, m, m2 = _single_ops()
    st, rgb = frames(rng, 2, fmt)
    for name, (r, hw) in ops.items():
        if name == "rotate_nearest":
            r[D.THETA:D.THETA + 6] = m
        got = run_kernel(st, fmt, r[None], hw)[0].transpose(2, 0, 1)
        assert_close(got, replay(rgb[0], r, hw), msg=f"{fmt} {name}")
    # warps: nearest and bilinear (fill 0, torchvision's transforms), away from rounding ties
    for interp in (1, 2):
        r = row(affine=interp, ops=[(D.AFFINE_AT, 0)])
        r[D.THETA:D.THETA + 6] = m2
        got = run_kernel(st, fmt, r[None], (H, W))[0].transpose(2, 0, 1)
        assert_close(got, replay(rgb[0], r, (H, W)), tol=1e-5 if interp == 2 else 0, msg=f"{fmt} affine {interp}")


def test_normalize_and_dtypes(rng):
    st, rgb = frames(rng, 1, "rgb")
    r = row(ops=[(D.BRIGHTNESS, 0.9)])
    norm = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    got = run_kernel(st, "rgb", r[None], (H, W), norm=norm)[0].transpose(2, 0, 1)
    assert_close(got, replay(rgb[0], r, (H, W), norm=norm), tol=1e-4, msg="normalize")
    u8 = run_kernel(st, "rgb", r[None], (H, W), dtype=np.uint8)[0].transpose(2, 0, 1)
    want = np.clip(np.rint(replay(rgb[0], r, (H, W)) * 255), 0, 255)
    assert np.abs(u8.astype(np.int32) - want).max() <= 1   # rounding of float32 v * 255


# --- pipelines: drawn rows replayed op by op --------------------------------------------------------

PIPELINES = {
    "groot_n15": lambda: A.groot_n15(height=24, width=24),
    "groot_n16": lambda: A.groot_n16(shortest_image_edge=20, crop_fraction=0.9, random_rotation_angle=10,
                                     color_jitter_params=dict(brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)),
    "lerobot": lambda: A.lerobot(),
    "lerobot_random_order": lambda: A.lerobot(dict(enable=True, max_num_transforms=4, random_order=True)),
    "rrc_flip_rotate": lambda: A.Augment([A.RandomHorizontalFlip(0.5), A.RandomResizedCrop((20, 26)),
                                          A.RandomRotation(15, interpolation="bilinear"),
                                          A.ColorJitter(0.2, 0.2, 0.2, 0.1), A.RandomGrayscale(0.3),
                                          A.RandomAdjustSharpness(2.0, 0.5)]),
    "crop_resize_crop_affine_flip": lambda: A.Augment([A.RandomCrop((26, 36)), A.Resize(22), A.CenterCrop(20),
                                                       A.RandomAffine(8, translate=(0.1, 0.1), scale=(0.9, 1.1)),
                                                       A.RandomHorizontalFlip(0.7), A.Normalize()]),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("fmt", ["rgb", "yuv420"])
def test_drawn_rows_match_the_references(rng, name, fmt):
    aug = PIPELINES[name]()
    lay = aug.layout(H, W)
    n = 6
    st, rgb = frames(rng, n, fmt)
    key = torch.tensor([A.epoch_key(int(rng.integers(1 << 30)), 3)])
    rows = aug.params(key, torch.arange(n), torch.linspace(0, 2, n, dtype=torch.float64), 1, H, W).numpy()
    norm = (lay.normalize.mean, lay.normalize.std) if lay.normalize else None
    out = run_kernel(st, fmt, rows, lay.out, antialias=lay.antialias, norm=norm)
    for i in range(n):
        want = replay(rgb[i], rows[i], lay.out, antialias=lay.antialias, norm=norm)
        tol = 1e-4 if norm else 2e-5
        if int(rows[i, D.AFFINE]) == 1:     # nearest warps: a drawn angle rarely lands on a rounding tie
            d = np.abs(out[i].transpose(2, 0, 1) - want)
            assert (d > tol).mean() < 0.01, f"{name} {fmt} sample {i}: {(d > tol).mean():.3%} pixels differ"
        else:
            assert_close(out[i].transpose(2, 0, 1), want, tol=tol, msg=f"{name} {fmt} sample {i}")


def test_time_steps_share_their_samples_row(rng):
    st, rgb = frames(rng, 6, "rgb")
    aug = A.Augment([A.RandomResizedCrop(16), A.ColorJitter(0.4, 0.4, 0.4, 0.1)])
    rows = aug.params(torch.tensor([5]), torch.arange(2), torch.zeros(2, dtype=torch.float64), 0, H, W).numpy()
    out = run_kernel(st, "rgb", rows, (16, 16), group=3)
    for m in range(6):
        assert_close(out[m].transpose(2, 0, 1), replay(rgb[m], rows[m // 3], (16, 16)), msg=f"frame {m}")


def test_padding_frames_are_zero(rng):
    st, _ = frames(rng, 2, "rgb")
    rows = np.stack([row(ops=[(D.CONTRAST, 0.5)])] * 3)
    out = run_kernel(st, "rgb", rows, (H, W), ids=np.array([0, -1, 1]))
    assert (out[1] == 0).all() and np.isfinite(out).all()


# --- the draws follow torchvision's rules ------------------------------------------------------------

def draws(aug, n=20000, camera=0, h=H, w=W, seed=11):
    return aug.params(torch.tensor([A.epoch_key(seed, 0)]), torch.arange(n), torch.zeros(n, dtype=torch.float64),
                      camera, h, w).numpy().astype(np.float64)


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    return np.abs(np.searchsorted(a, x, "right") / len(a) - np.searchsorted(b, x, "right") / len(b)).max()


def rrc_params_numpy(rng, H, W, scale, ratio):
    """torchvision's RandomResizedCrop.get_params, restated with NumPy's generator."""
    area = H * W
    for _ in range(10):
        ta = area * rng.uniform(*scale)
        ar = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(ta * ar))), int(round(math.sqrt(ta / ar)))
        if 0 < w <= W and 0 < h <= H:
            return rng.integers(0, H - h + 1), rng.integers(0, W - w + 1), h, w
    return D.resized_crop_fallback(H, W, ratio)


def test_resized_crop_draws_follow_torchvision():
    scale, ratio = (0.2, 1.0), (0.5, 2.0)
    got = draws(A.Augment([A.RandomResizedCrop(16, scale=scale, ratio=ratio)]), n=8000)
    g = np.random.default_rng(0)
    ref = np.array([rrc_params_numpy(g, H, W, scale, ratio) for _ in range(8000)], np.float64)
    crit = 1.95 * math.sqrt(2 / 8000)                          # alpha = 0.001
    for j, name in enumerate(("top", "left", "h", "w")):
        assert ks(got[:, j], ref[:, j]) < crit, name
    assert (got[:, 0] + got[:, 2] <= H).all() and (got[:, 1] + got[:, 3] <= W).all()


def test_color_jitter_draws_follow_torchvision():
    got = draws(A.Augment([A.ColorJitter(brightness=0.3, contrast=(0.6, 1.4), saturation=0.5, hue=0.08)]), n=24000)
    codes = got[:, D.COLOR:D.COLOR + 8:2]
    facs = got[:, D.COLOR + 1:D.COLOR + 8:2]
    # the order: a uniform permutation of the four ops (torch.randperm)
    perms = {p: 0 for p in permutations((1, 2, 3, 4))}
    for c in codes.astype(int):
        perms[tuple(c)] += 1
    chi2 = sum((v - 1000) ** 2 / 1000 for v in perms.values())
    assert chi2 < 49.7, chi2                                   # df 23, alpha 0.001
    crit = 1.95 * math.sqrt(1 / 24000)                         # one-sample KS bound, alpha 0.001
    for code, (lo, hi) in {1: (0.7, 1.3), 2: (0.6, 1.4), 3: (0.5, 1.5), 4: (-0.08, 0.08)}.items():
        f = facs[codes == code]
        assert lo <= f.min() and f.max() < hi
        u = np.sort((f - lo) / (hi - lo))
        assert np.abs(u - (np.arange(len(u)) + 0.5) / len(u)).max() < crit, code


def test_flip_grayscale_sharpness_probabilities():
    got = draws(A.Augment([A.RandomHorizontalFlip(0.3), A.RandomGrayscale(0.2), A.RandomAdjustSharpness(2, 0.6)]))
    n = len(got)
    for rate, p in (((got[:, D.FLIP] > 0).mean(), 0.3), ((got[:, D.COLOR] == D.GRAYSCALE).mean(), 0.2),
                    ((got[:, D.COLOR + 2] == D.SHARPNESS).mean(), 0.6)):
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n), (rate, p)


def test_affine_draws_follow_torchvision():
    deg, tr = (-5.0, 5.0), (0.05, 0.1)
    got = draws(A.Augment([A.RandomAffine(deg, translate=tr)]), n=20000)
    theta = got[:, D.THETA:D.THETA + 6]
    angle = np.degrees(np.arctan2(-theta[:, 3], theta[:, 0]))  # inverse rotation: [cos, sin; -sin, cos]
    crit = 1.95 * math.sqrt(1 / 20000)
    u = np.sort((angle - deg[0]) / (deg[1] - deg[0]))
    assert np.abs(u - (np.arange(len(u)) + 0.5) / len(u)).max() < crit
    # translation: round(uniform(-t W, t W)) pixels; the matrix holds -R^-1 t
    rot = np.radians(angle)
    tx = -(np.cos(rot) * theta[:, 2] - np.sin(rot) * theta[:, 5])
    ty = -(np.sin(rot) * theta[:, 2] + np.cos(rot) * theta[:, 5])
    g = np.random.default_rng(1)
    for t, m in ((tx, tr[0] * W), (ty, tr[1] * H)):
        assert np.allclose(t, np.round(t), atol=1e-4)
        ref = np.round(g.uniform(-m, m, 20000))
        assert ks(np.round(t), ref) < 1.95 * math.sqrt(2 / 20000)


def test_lerobot_subset_draws_follow_torch_multinomial():
    weights = [1.0, 2.0, 3.0, 1.0, 0.5, 2.0]
    members = [A.ColorJitter(brightness=(0.8, 1.2)), A.ColorJitter(contrast=(0.8, 1.2)),
               A.ColorJitter(saturation=(0.5, 1.5)), A.ColorJitter(hue=(-0.05, 0.05)), A.SharpnessJitter((0.5, 1.5)),
               A.RandomAffine((-5, 5), translate=(0.05, 0.05))]
    n = 20000
    for random_order in (False, True):
        got = draws(A.Augment([A.RandomSubset(members, weights, 3, random_order)]), n=n)
        codes = got[:, D.COLOR:D.COLOR + 12:2].astype(int)
        g = torch.Generator().manual_seed(0)
        ref = [torch.multinomial(torch.tensor(weights), 3, generator=g) for _ in range(n)]
        code_of = [D.BRIGHTNESS, D.CONTRAST, D.SATURATION, D.HUE, D.SHARPNESS, D.AFFINE_AT]
        if random_order:     # the ordered draw (multinomial's order) against ours
            mine = [tuple(c[c > 0]) for c in codes]
            theirs = [tuple(code_of[i] for i in r.tolist()) for r in ref]
        else:                # listed order: only the set matters
            mine = [tuple(c[c > 0]) for c in codes]
            theirs = [tuple(code_of[i] for i in sorted(r.tolist())) for r in ref]
        assert all(len(m) == 3 for m in mine)
        keys = sorted(set(mine) | set(theirs))
        a = np.array([mine.count(k) for k in keys], float)
        b = np.array([theirs.count(k) for k in keys], float)
        chi2 = (((a - b) ** 2) / np.maximum(a + b, 1)).sum()   # two-sample chi-square, equal sizes
        df = len(keys) - 1
        assert chi2 < df + 4.5 * math.sqrt(2 * df), (random_order, chi2, df)
        # the affine is on exactly when it was chosen
        assert ((got[:, D.AFFINE] > 0) == (codes == D.AFFINE_AT).any(1)).all()


def test_eval_mode_is_deterministic_and_centered():
    aug = A.Augment([A.RandomResizedCrop(16), A.RandomHorizontalFlip(), A.ColorJitter(0.5), A.RandomRotation(30)])
    aug.eval()
    got = draws(aug, n=50)
    assert (got == got[0]).all()
    assert got[0, D.NCOLOR] == 0 and got[0, D.FLIP] == 0 and got[0, D.AFFINE] == 0
    top, left, h, w = D.resized_crop_fallback(H, W, (3 / 4, 4 / 3))
    assert tuple(got[0, :4]) == (top, left, h, w)


# --- determinism, resume, tiers, cameras ---------------------------------------------------------

def test_a_samples_row_depends_on_the_sample_only():
    aug = PIPELINES["rrc_flip_rotate"]()
    key = torch.tensor([A.epoch_key(7, 2)])
    ep, t = torch.arange(40) % 5, torch.arange(40, dtype=torch.float64) * 0.1
    full = aug.params(key, ep, t, 0, H, W)
    perm = torch.randperm(40)
    part = aug.params(key, ep[perm][:13], t[perm][:13], 0, H, W)
    assert torch.equal(part, full[perm][:13])
    assert not torch.equal(aug.params(torch.tensor([A.epoch_key(7, 3)]), ep, t, 0, H, W), full)
    assert not torch.equal(aug.params(key, ep, t, 1, H, W), full)
    shared = A.Augment(aug.transforms, share_cameras=True)
    assert torch.equal(shared.params(key, ep, t, 0, H, W), shared.params(key, ep, t, 3, H, W))


def _dataset(rng, fmt, tier, tmp_path, cams=("cam",)):
    eps, ctimes = [], {c: [] for c in cams}
    rows = []
    for e in range(3):
        n = 12
        t = e + np.arange(n) / 10.0
        eps.append({"state": (rng.normal(size=(n, 2)).astype(np.float32), t)})
        for c in cams:
            ctimes[c].append(t.copy())
    frames_ = {}
    for c in cams:
        r = (rng.integers(0, 256, (36, H, W, 3), dtype=np.uint8) if fmt == "rgb"
             else rng.integers(16, 240, (36, yuv420_bytes(H, W)), dtype=np.uint8))
        store = FrameStore.create(r, format=fmt, height=H, width=W, channels=3, tier=tier, device="cpu",
                                  path=tmp_path / f"{c}-{fmt}-{tier}.npy" if tier == "disk" else None)
        frames_[c] = (store, ctimes[c])
        rows.append(r)
    return robocache.Dataset.from_episodes(eps, device="cpu", frames=frames_)


def _windows(aug, cams=("cam",)):
    w = {c: Window(c, offsets=[-0.1, 0.0], layout="BTCHW", augment=aug) for c in cams}
    w["state"] = Window("state")
    return w


def _epoch(loader):
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def test_loader_epochs_repeat_resume_and_differ(rng, tmp_path):
    ds = _dataset(rng, "yuv420", "cpu", tmp_path)
    aug = PIPELINES["rrc_flip_rotate"]()
    loader = DataLoader(ds, 5, windows=_windows(aug), seed=4)
    loader.set_epoch(1)
    e1 = _epoch(loader)
    loader.set_epoch(1)
    again = _epoch(loader)
    assert len(e1) == len(again) == len(loader) > 2
    for a, b in paired(e1, again):
        assert a.keys() == b.keys() and torch.equal(a["cam"], b["cam"])
    e2 = _epoch(loader)                       # epoch 2
    assert not torch.equal(e1[0]["cam"], e2[0]["cam"])
    # resume mid-epoch 1 in a new loader: the rest equals the uninterrupted run
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    fresh = DataLoader(ds, 5, windows=_windows(PIPELINES["rrc_flip_rotate"]()), seed=4)
    fresh.load_state_dict(state)
    rest = _epoch(fresh)
    assert len(rest) == len(e1) - 2
    for a, b in paired(rest, e1[2:]):
        assert torch.equal(a["cam"], b["cam"]) and torch.equal(a["state"], b["state"])


def test_batch_size_does_not_change_a_samples_augmentation(rng, tmp_path):
    ds = _dataset(rng, "rgb", "cpu", tmp_path)
    aug = PIPELINES["groot_n16"]()
    one = torch.cat([b["cam"] for b in DataLoader(ds, 36, windows=_windows(aug), shuffle=False)])
    small = torch.cat([b["cam"] for b in DataLoader(ds, 7, windows=_windows(aug), shuffle=False)])
    assert one.shape == small.shape and torch.equal(one, small)


@pytest.mark.parametrize("tier", ["disk", "lossless"])
def test_every_tier_gives_the_same_augmented_batches(rng, tmp_path, tier):
    seed = int(rng.integers(1 << 30))
    a = _dataset(np.random.default_rng(seed), "yuv420", "cpu", tmp_path)
    b = _dataset(np.random.default_rng(seed), "yuv420", tier, tmp_path)
    aug = PIPELINES["lerobot"]()
    x = _epoch(DataLoader(a, 6, windows=_windows(aug), seed=1))
    y = _epoch(DataLoader(b, 6, windows=_windows(aug), seed=1))
    assert len(x) == len(y) > 0
    for p, q in zip(x, y):
        assert p.keys() == q.keys() and torch.equal(p["cam"], q["cam"])


def test_cameras_draw_apart_unless_shared(tmp_path):
    # two cameras holding the same frames: their images are equal exactly when their draws are
    same = _dataset(np.random.default_rng(0), "rgb", "cpu", tmp_path, cams=("a",))
    store = same.streams["a"].frames
    twin = robocache.Dataset.from_episodes(
        [{"state": (np.zeros((12, 2), np.float32), e + np.arange(12) / 10.0)} for e in range(3)], device="cpu",
        frames={"a": (store, [e + np.arange(12) / 10.0 for e in range(3)]),
                "b": (store, [e + np.arange(12) / 10.0 for e in range(3)])})
    for share in (False, True):
        aug = A.Augment([A.RandomResizedCrop(12), A.ColorJitter(0.5, 0.5, 0.5, 0.2)], share_cameras=share)
        b = next(iter(DataLoader(twin, 8, windows=_windows(aug, ("a", "b")), seed=2)))
        assert torch.equal(b["a"], b["b"]) == share


# --- torchvision's objects and the API --------------------------------------------------------------

def test_structural_errors_name_the_transform():
    with pytest.raises(ValueError, match="RandomCrop after ColorJitter"):
        A.Augment([A.ColorJitter(0.2), A.RandomCrop(10)])
    with pytest.raises(ValueError, match="two resizes"):
        A.Augment([A.Resize(20), A.Resize(10)])
    with pytest.raises(ValueError, match="Normalize comes last"):
        A.Augment([A.Normalize(), A.ColorJitter(0.1)])
    with pytest.raises(ValueError, match="hue"):
        A.ColorJitter(hue=0.7)
    with pytest.raises(ValueError, match="does not fit"):
        A.Augment([A.RandomCrop(50)]).out_size(H, W)
    with pytest.raises(TypeError, match="not a robocache.augment transform"):
        A.Augment([lambda x: x])
    with pytest.raises(ValueError, match="GaussianNoise"):
        A.lerobot(dict(enable=True, tfs={"noise": dict(type="GaussianNoise", kwargs={})}))


def test_window_checks():
    with pytest.raises(ValueError, match="resize with augment"):
        Window("cam", resize=(10, 10), augment=A.groot_n15())
    ds2 = robocache.Dataset.from_episodes([{"x": (np.zeros((4, 8, 8, 3), np.float32), np.arange(4) / 10)}],
                                          device="cpu", kinds={"x": "image"})
    with pytest.raises(ValueError, match="3-channel uint8"):
        DataLoader(ds2, 2, windows={"x": Window("x", augment=A.groot_n15())})


def test_kernel_checks_rows_on_the_cpu(rng):
    st, _ = frames(rng, 1, "rgb")
    for bad, match in ((row(crop_top=25), "outside the frame"), (row(ops=[(D.CONTRAST, 1.2)]), None),
                       (row(ops=[(99, 1.0)]), "unknown colour op"), (row(affine=1), "its place in the op list")):
        out = np.zeros((1, H, W, 3), np.float32)
        kw = {} if match is None else dict(scratch=np.zeros(H + 1 + (3 * H * W + 1) // 2))
        with pytest.raises(ValueError, match=match or "needs scratch"):
            _C.gather_frames(st, np.zeros(1, np.int64), out, format="rgb", height=H, width=W, channels=3,
                             augment=bad[None], **kw)
    with pytest.raises(ValueError, match=r"augment: expected a float32 \[2, 33\]"):
        _C.gather_frames(st, np.zeros(2, np.int64), np.zeros((2, H, W, 3), np.float32), format="rgb", height=H,
                         width=W, channels=3, augment=row()[None])
    with pytest.raises(ValueError, match="mean and std"):
        _C.gather_frames(st, np.zeros(1, np.int64), np.zeros((1, H, W, 3), np.float32), format="rgb", height=H,
                         width=W, channels=3, augment=row()[None], mean=(0, 0, 0))


def test_from_torchvision_converts_and_refuses_by_name():
    v2 = pytest.importorskip("torchvision.transforms.v2")
    compose = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                          v2.RandomRotation(10), v2.ColorJitter(0.3, 0.4, 0.5, 0.08),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)])
    aug = A.Augment.from_torchvision(compose)
    names = [type(t).__name__ for t in aug.transforms]
    assert names == ["RandomResizedCrop", "RandomHorizontalFlip", "RandomRotation", "ColorJitter", "Normalize"]
    assert aug.transforms[3].hue == (-0.08, 0.08) and aug.out_size(480, 640) == (224, 224)
    with pytest.raises(ValueError, match="GaussianBlur is not supported"):
        A.Augment.from_torchvision(v2.Compose([v2.GaussianBlur(3)]))
    w = Window("cam", layout="BTCHW", augment=compose)        # a Compose given to a Window is converted
    assert isinstance(w.augment, A.Augment)


def test_ranks_draw_their_own_samples_and_agree_on_each(rng, tmp_path):
    """Two ranks take disjoint samples, so their draws differ; a sample's augmentation is the same at any
    world size (an elastic resume at another size reproduces it)."""
    ds = _dataset(rng, "yuv420", "cpu", tmp_path)
    aug = PIPELINES["rrc_flip_rotate"]()

    def by_sample(**kw):
        out = {}
        for b in DataLoader(ds, 4, windows=_windows(aug), seed=9, identity=True, **kw):
            for i, s in enumerate(b["index"].tolist()):
                out[s] = b["cam"][i]
        return out

    whole = by_sample()
    r0, r1 = by_sample(rank=0, world_size=2), by_sample(rank=1, world_size=2)
    assert r0 and r1 and len(set(r0) & set(r1)) <= 1           # disjoint shares (wrap padding aside)
    for part in (r0, r1):
        for s, img in part.items():
            assert torch.equal(img, whole[s]), s
    a, b = next(iter(r0.values())), next(iter(r1.values()))
    assert not torch.equal(a, b)
