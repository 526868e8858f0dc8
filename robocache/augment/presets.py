"""The image pipelines of GR00T's and LeRobot's fine-tuning, as Augments.

Taken from their public code (NVIDIA/Isaac-GR00T ``gr00t/data/transform/video.py``,
``gr00t/experiment/data_config.py``, ``gr00t/model/gr00t_n1d6/image_augmentations.py``; LeRobot's
``ImageTransformsConfig``). Where robocache's one-pass chain differs from theirs, the docstring says how.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import transforms as T
from .pipeline import Augment

#: GR00T N1.5's data configs (so100, gr1_arms_only, ...): VideoColorJitter's arguments
GROOT_N15_JITTER = dict(brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)


def groot_n15(*, height: int = 224, width: int = 224, scale: float = 0.95, color_jitter: Mapping | None = None,
              train: bool = True) -> Augment:
    """GR00T N1.5: ``VideoCrop(scale)`` (RandomCrop of ``int(H*scale) x int(W*scale)``, CenterCrop in eval)
    -> ``VideoResize(height, width)`` (bilinear, antialiased) -> ``VideoColorJitter`` (train only), one draw
    per sample shared by its frames and views. GR00T's ``VideoToNumpy`` truncates to uint8; robocache's
    uint8 output rounds (its float output is the float pipeline's)."""
    jitter = GROOT_N15_JITTER if color_jitter is None else dict(color_jitter)
    ts: list = [T.FractionCrop(scale), T.Resize((height, width))]
    if jitter:
        ts.append(T.ColorJitter(**jitter))
    return Augment(ts, share_cameras=True, training=train)


def groot_n16(*, shortest_image_edge: int | None = 256, crop_fraction: float | None = 0.95,
              image_target_size: tuple[int, int] | None = None, image_crop_size: tuple[int, int] | None = None,
              random_rotation_angle: float | None = None, color_jitter_params: Mapping | None = None,
              train: bool = True) -> Augment:
    """GR00T N1.6/N1.7's processor settings: a ``crop_fraction`` box (random in train, centered in eval;
    ``image_crop_size[0] / image_target_size[0]`` when no fraction is set), the shortest edge resized to
    ``shortest_image_edge`` (else ``image_target_size[0]``), then in train ``RandomRotation`` of
    ``+-random_rotation_angle`` and ``ColorJitter(**color_jitter_params)``; one draw per sample shared by its
    frames and views (GR00T replays the first view's). Differences from GR00T's albumentations path:
    GR00T resizes before and after the crop with cv2's INTER_AREA and rotates with reflected borders;
    robocache crops the stored frame and resizes once (torchvision's antialiased bilinear) and rotates
    bilinearly with fill 0 (torchvision's RandomRotation); N1.7's letterbox pad is not applied."""
    edge = shortest_image_edge or (image_target_size[0] if image_target_size else None)
    if edge is None:
        raise ValueError("groot_n16: give shortest_image_edge or image_target_size")
    fraction = crop_fraction
    if fraction is None:
        if not (image_crop_size and image_target_size):
            raise ValueError("groot_n16: give crop_fraction or image_crop_size with image_target_size")
        fraction = image_crop_size[0] / image_target_size[0]
    ts: list = [T.FractionCrop(fraction), T.Resize(int(edge))]
    if random_rotation_angle:
        ts.append(T.RandomRotation(float(random_rotation_angle), interpolation="bilinear"))
    if color_jitter_params:
        get = color_jitter_params.get
        ts.append(T.ColorJitter(get("brightness"), get("contrast"), get("saturation"), get("hue")))
    return Augment(ts, share_cameras=True, training=train)


#: LeRobot's ImageTransformsConfig defaults (0.4.x and 0.6.x): name -> (type, kwargs)
LEROBOT_TFS = {
    "brightness": ("ColorJitter", {"brightness": (0.8, 1.2)}),
    "contrast": ("ColorJitter", {"contrast": (0.8, 1.2)}),
    "saturation": ("ColorJitter", {"saturation": (0.5, 1.5)}),
    "hue": ("ColorJitter", {"hue": (-0.05, 0.05)}),
    "sharpness": ("SharpnessJitter", {"sharpness": (0.5, 1.5)}),
    "affine": ("RandomAffine", {"degrees": (-5.0, 5.0), "translate": (0.05, 0.05)}),
}
_LEROBOT_TYPES = {"ColorJitter": T.ColorJitter, "SharpnessJitter": T.SharpnessJitter, "RandomAffine": T.RandomAffine}


def _get(cfg: Any, name: str, default=None):
    return cfg.get(name, default) if isinstance(cfg, Mapping) else getattr(cfg, name, default)


def lerobot(cfg: Any = None, *, train: bool = True) -> Augment | None:
    """LeRobot's ``ImageTransforms`` from its ``ImageTransformsConfig`` (an object or a dict; None: the
    defaults, enabled): exactly ``min(len(tfs), max_num_transforms)`` of the ``tfs`` with weight > 0, drawn
    without replacement by weight, in their listed order (or drawn order with ``random_order``), each camera
    on its own draw. None when disabled or nothing would be applied. A type robocache lacks is an error."""
    if cfg is not None and not _get(cfg, "enable", False):
        return None
    tfs = _get(cfg, "tfs", None) if cfg is not None else None
    if tfs is None:
        items = [(n, 1.0, t, kw) for n, (t, kw) in LEROBOT_TFS.items()]
    else:
        items = [(n, float(_get(c, "weight", 1.0)), _get(c, "type"), dict(_get(c, "kwargs", {}) or {}))
                 for n, c in tfs.items()]
    members, weights = [], []
    for name, weight, kind, kwargs in items:
        if weight <= 0:
            continue
        if kind not in _LEROBOT_TYPES:
            raise ValueError(f"LeRobot image transform {name!r}: type {kind!r} is not supported by robocache's "
                             f"augmentation (supported: {sorted(_LEROBOT_TYPES)})")
        members.append(_LEROBOT_TYPES[kind](**kwargs))
        weights.append(weight)
    n = min(len(members), int(_get(cfg, "max_num_transforms", 3) if cfg is not None else 3))
    if n == 0:
        return None
    subset = T.RandomSubset(members, weights, n, bool(_get(cfg, "random_order", False) if cfg is not None else False))
    return Augment([subset], share_cameras=False, training=train)
