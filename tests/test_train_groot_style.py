"""examples/train_groot_style.py: the torch baseline (robocache/bench/torch_loader.py) and
robocache.DataLoader give the same batches for the same (seed, epoch), and a few training steps
with either loader give a finite, falling loss, the policy sized from the set. CPU only, on the README's
demo set (generated: 7-D state and action, a 96x128 camera, 15 fps) and on the real GR00T PickNPlace set
(44-D, 256x256, 20 fps) where the project's data folder has it."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pairs import paired  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_groot_style.py"


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("train_groot_style", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: each set's camera the example feeds the policy: PickNPlace's ego_view (its info.json lists a second camera whose
#: files it does not ship), the demo set's only one
CAMERA = {"demo": "observation.images.top", "picknplace": "observation.images.ego_view"}


@pytest.fixture(scope="module", params=["demo", "picknplace"])
def groot(request, DATA, ex, tmp_path_factory):
    """(dataset, has_video, expect): frames are decoded when a video backend is installed; ``expect`` holds
    the set's frame and episode counts, state and action widths and the camera's frame shape [H, W, 3], read
    from its meta/info.json."""
    pytest.importorskip("pyarrow")
    if request.param == "demo":
        pytest.importorskip("av")                                     # the writer encodes the camera with PyAV
        from robocache.demo import write_lerobot
        path = write_lerobot(tmp_path_factory.mktemp("demo") / "demo_lerobot")
    else:
        path = DATA / "groot_picknplace"
        if not path.is_dir():
            pytest.skip(f"{path} is not present")
    from robocache.readers import available_backends
    video = bool(available_backends())
    info = json.loads((path / "meta" / "info.json").read_text())
    f = info["features"]
    expect = {"frames": info["total_frames"], "episodes": info["total_episodes"],
              "state": math.prod(f["observation.state"]["shape"]), "action": math.prod(f["action"]["shape"]),
              "image": tuple(f[CAMERA[request.param]]["shape"])}
    return ex.load_dataset(path, video=video, device="cpu"), video, expect


@pytest.mark.parametrize("seed,epoch", [(0, 0), (7, 3)])
def test_same_batches_from_both_loaders(ex, groot, seed, epoch):
    ds, video, expect = groot
    B = 16
    rc = ex.make_loader("robocache", ds, B, seed, epoch, video)
    tl = ex.make_loader("torch", ds, B, seed, epoch, video)
    assert len(rc) == len(tl) == math.ceil(expect["frames"] / B)
    keys = {"state", "state_is_pad", "action", "action_is_pad"} | ({"image", "image_is_pad"} if video else set())
    for k, (a, b) in enumerate(zip(rc, tl)):
        if k == 0:
            first = a["state"]
        assert set(a) == set(b) == keys
        assert a["state"].shape == (B, 1, expect["state"]) and a["action"].shape == (B, 16, expect["action"])
        if video:
            H, W, C = expect["image"]
            assert a["image"].shape == (B, 1, C, H, W) and a["image"].dtype == torch.float32
        for key in keys:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert torch.equal(a[key], b[key]), f"batch {k}, key {key} differs (seed {seed}, epoch {epoch})"
        if k == 3:
            break
    # the order really is the epoch's: the next epoch starts with other samples, and robocache's
    # next iter() (no set_epoch) is that epoch, as torch's RandomSampler draws a new order per iter()
    other = next(iter(ex.make_loader("torch", ds, B, seed, epoch + 1, video)))
    assert not torch.equal(other["state"], first)
    assert torch.equal(other["state"], next(iter(rc))["state"])


def test_padding_at_episode_ends(ex, groot):
    """Over a whole epoch (no video: fast) the batches agree, and each episode's last 15 frames
    pad 1..15 steps of the chunk with the last action repeated."""
    ds, _, expect = groot
    rc = ex.make_loader("robocache", ds, 256, 1, 0, video=False)
    tl = ex.make_loader("torch", ds, 256, 1, 0, video=False)
    pads = 0
    for a, b in paired(rc, tl):
        for key in a:
            assert torch.equal(a[key], b[key]), key
        p = a["action_is_pad"]
        pads += int(p.sum())
        rows = p.any(1)
        if rows.any():
            act = a["action"][rows]
            last = p[rows].float().argmax(1) - 1                      # the last real step
            edge = act[torch.arange(len(act)), last]
            assert torch.equal(act[p[rows]], edge[:, None].expand_as(act)[p[rows]])
    assert pads == expect["episodes"] * sum(range(16))


def test_policy_sized_from_the_set(ex, groot):
    """The policy's input and output widths are the set's state and action widths (not GR00T's 44)."""
    ds, video, expect = groot
    model = ex.make_policy(ds, video)
    assert model.state[0].in_features == expect["state"]
    assert model.head[-1].out_features == ex.CHUNK * expect["action"]
    batch = next(iter(ex.make_loader("robocache", ds, 4, video=video)))
    assert model(batch["state"], batch.get("image")).shape == batch["action"].shape


@pytest.mark.parametrize("kind", ["torch", "robocache"])
def test_training_steps_loss_falls(ex, groot, kind):
    ds, _, _ = groot
    r = ex.train(ds, kind, steps=12, batch_size=32, device="cpu", video=False, seed=0, quiet=True)
    losses = np.array(r["losses"])
    assert len(losses) == 12 and np.isfinite(losses).all()
    assert losses[-3:].mean() < losses[0], f"loss did not fall: {losses}"
    assert r["samples"] == 12 * 32 and r["data_s"] > 0 and r["compute_s"] > 0
    assert len(r["step_data_s"]) == len(r["step_compute_s"]) == 12
    assert sum(r["step_data_s"]) == pytest.approx(r["data_s"])


def test_same_loss_with_either_loader(ex, groot):
    """Same batches and same model seed: the same first losses."""
    ds, _, _ = groot
    a = ex.train(ds, "torch", steps=3, batch_size=32, video=False, seed=4, quiet=True)["losses"]
    b = ex.train(ds, "robocache", steps=3, batch_size=32, video=False, seed=4, quiet=True)["losses"]
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_unknown_loader(ex, groot):
    with pytest.raises(ValueError, match="torch' or 'robocache"):
        ex.make_loader("jax", groot[0])


@pytest.mark.parametrize("augment", ["n15", "n16"])
def test_trains_with_groots_augmentation(ex, groot, augment):
    """--augment: the frame comes out as GR00T's fine-tuning makes it (224 on a side), the same for the same
    (seed, epoch), and the policy trains on it."""
    ds, video, _ = groot
    if not video:
        pytest.skip("no video backend to decode the frames")
    batches = [next(iter(ex.make_loader("robocache", ds, 8, seed=1, epoch=0, augment=augment))) for _ in (0, 1)]
    img = batches[0]["image"]
    assert img.shape[:3] == (8, 1, 3) and min(img.shape[-2:]) == 224 and img.dtype == torch.float32
    plain = next(iter(ex.make_loader("robocache", ds, 8, seed=1, epoch=0)))
    assert torch.equal(batches[0]["action"], plain["action"])          # only the images change
    assert torch.equal(batches[0]["image"], batches[1]["image"])
    r = ex.train(ds, "robocache", 3, batch_size=8, video=True, augment=augment, quiet=True)
    assert len(r["losses"]) == 3 and all(math.isfinite(v) for v in r["losses"])
    with pytest.raises(ValueError, match="robocache's frame gather"):
        ex.make_loader("torch", ds, 8, augment=augment)
