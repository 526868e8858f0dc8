"""LeRobot's image transforms on robocache's augmentation, checked against LeRobot itself (0.4.x; its
optional dependency: CI skips this module).

- ``robocache.augment.lerobot(cfg)`` is what ``Augment.from_torchvision`` reads off LeRobot's own
  ``ImageTransforms(cfg)``: the same members, ranges, weights, subset size and order rule, for the defaults
  and for a custom config;
- the subsets and orders robocache draws have the law of LeRobot's ``RandomSubsetApply`` (its members
  replaced by recorders: what LeRobot itself applies, call by call);
- ``lerobot_train.make_dataset`` with ``--dataset.image_transforms.enable=true`` runs them inside the gather
  (no per-sample transforms), and falls back to LeRobot's per-sample ones, with a warning, for a type
  robocache lacks.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("lerobot")

try:                                   # LeRobot 0.6 moved them out of lerobot.datasets
    from lerobot.transforms import ImageTransformConfig, ImageTransforms, ImageTransformsConfig
except ImportError:
    from lerobot.datasets.transforms import ImageTransformConfig, ImageTransforms, ImageTransformsConfig  # noqa: E402

import robocache.augment as A  # noqa: E402
from robocache.augment import draw as D  # noqa: E402


def _norm(aug):
    (subset,) = aug.transforms
    total = sum(subset.weights)
    return ([repr(m) for m in subset.transforms], [w / total for w in subset.weights], subset.n, subset.random_order)


CUSTOM = ImageTransformsConfig(
    enable=True, max_num_transforms=2, random_order=True,
    tfs={"b": ImageTransformConfig(weight=2.0, type="ColorJitter", kwargs={"brightness": (0.5, 1.5)}),
         "s": ImageTransformConfig(weight=1.0, type="SharpnessJitter", kwargs={"sharpness": (0.2, 2.0)}),
         "off": ImageTransformConfig(weight=0.0, type="ColorJitter", kwargs={"hue": (-0.1, 0.1)}),
         "a": ImageTransformConfig(weight=3.0, type="RandomAffine", kwargs={"degrees": (-10.0, 10.0)})})


@pytest.mark.parametrize("cfg", [ImageTransformsConfig(enable=True), CUSTOM], ids=["defaults", "custom"])
def test_mapping_equals_lerobots_own_transforms(cfg):
    mine = A.lerobot(cfg)
    theirs = A.Augment.from_torchvision(ImageTransforms(cfg))
    m, t = _norm(mine), _norm(theirs)
    assert m[0] == t[0] and np.allclose(m[1], t[1]) and m[2:] == t[2:]
    assert A.lerobot(ImageTransformsConfig(enable=False)) is None


def test_subsets_have_lerobots_law():
    cfg = CUSTOM
    lt = ImageTransforms(cfg)
    applied: list = []

    class Recorder(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.i = i

        def forward(self, x):
            applied[-1].append(self.i)
            return x

    subset = lt.tf
    subset.transforms = [Recorder(i) for i in range(len(subset.transforms))]
    n = 6000
    torch.manual_seed(0)
    x = torch.zeros(3, 4, 4)
    for _ in range(n):
        applied.append([])
        lt(x)
    aug = A.lerobot(cfg)
    rows = aug.params(torch.tensor([A.epoch_key(3, 0)]), torch.arange(n), torch.zeros(n, dtype=torch.float64),
                      0, 32, 32).numpy()
    codes = rows[:, D.COLOR:D.COLOR + 6:2].astype(int)
    code_of = [D.BRIGHTNESS, D.SHARPNESS, D.AFFINE_AT]           # members with weight > 0, in order
    mine = [tuple(c[c > 0]) for c in codes]
    theirs = [tuple(code_of[i] for i in a) for a in applied]
    assert all(len(s) == 2 for s in mine) and all(len(s) == 2 for s in theirs)
    keys = sorted(set(mine) | set(theirs))
    a = np.array([mine.count(k) for k in keys], float)
    b = np.array([theirs.count(k) for k in keys], float)
    chi2 = (((a - b) ** 2) / np.maximum(a + b, 1)).sum()
    df = len(keys) - 1
    assert chi2 < df + 4.5 * math.sqrt(2 * df), (chi2, dict(zip(keys, zip(a, b))))


def test_make_dataset_runs_them_in_the_gather(tmp_path):
    pytest.importorskip("av")
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.factory import make_policy_config

    from robocache.lerobot import train as lerobot_train
    from robocache.demo import write_lerobot

    root = write_lerobot(tmp_path / "demo")

    def cfg(transforms):
        p = make_policy_config("act", device="cpu", pretrained_backbone_weights=None, push_to_hub=False,
                               dim_model=32, dim_feedforward=64, n_heads=2, chunk_size=5, n_action_steps=5,
                               latent_dim=8)
        return TrainPipelineConfig(dataset=DatasetConfig(repo_id="local/demo", root=str(root),
                                                         image_transforms=transforms), policy=p, seed=7)

    ts = lerobot_train.make_dataset(cfg(ImageTransformsConfig(enable=True)))
    assert ts.image_transforms is None and isinstance(ts.augment, A.Augment)
    loader = lerobot_train.DataLoader(ts, batch_size=4, shuffle=True)
    plain = lerobot_train.DataLoader(lerobot_train.make_dataset(cfg(ImageTransformsConfig())), batch_size=4,
                                     shuffle=True)
    a, b = next(iter(loader)), next(iter(plain))
    cam = ts.meta.camera_keys[0]
    assert a[cam].shape == b[cam].shape and a[cam].dtype == torch.float32
    assert not torch.equal(a[cam], b[cam]) and torch.equal(a["action"], b["action"])
    odd = ImageTransformsConfig(enable=True, tfs={"erase": ImageTransformConfig(type="RandomErasing", kwargs={})})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ts2 = lerobot_train.make_dataset(cfg(odd))
    assert ts2.augment is None and ts2.image_transforms is not None
    assert any("RandomErasing" in str(w.message) for w in seen)
