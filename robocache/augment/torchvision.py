"""torchvision v2 (and LeRobot's) transform objects -> robocache.augment transforms.

Read by class name and public attributes, so torchvision is never imported here. The format
conversions a frame gather already does (ToImage, ToDtype to a float with scale, ToPureTensor,
ConvertImageDtype) are dropped: the Window's layout and dtype decide the output. Any other
transform is an error naming it, never a silent skip.
"""

from __future__ import annotations

from . import transforms as T

#: conversions the gather does itself (layout, dtype, scaling to [0, 1])
PASS_THROUGH = ("ToImage", "ToTensor", "ToPureTensor", "ToDtype", "ConvertImageDtype", "Identity")


def _interp(t) -> str:
    return str(getattr(getattr(t, "interpolation", "bilinear"), "value", getattr(t, "interpolation", "bilinear")))


def _fill_zero(t, name: str) -> None:
    fill = getattr(t, "fill", 0)
    if isinstance(fill, dict):                       # v2 keeps {type: fill} in _fill; fill is the argument
        fill = next(iter(fill.values()), 0)
    if fill not in (0, 0.0, None) and not (isinstance(fill, (list, tuple)) and all(v == 0 for v in fill)):
        raise ValueError(f"{name}: fill={fill!r}: robocache fills with 0 (torchvision's default)")


def _one(t) -> list:
    name = type(t).__name__
    if name in PASS_THROUGH:
        if name == "ToDtype" and getattr(t, "scale", True) is False:
            raise ValueError("ToDtype(scale=False): robocache's float images are in [0, 1] (scale=True)")
        return []
    if name == "Compose":
        return [x for inner in t.transforms for x in _one(inner)]
    if name == "RandomResizedCrop":
        if _interp(t) != "bilinear":
            raise ValueError(f"RandomResizedCrop: interpolation {_interp(t)!r}: robocache resizes bilinearly")
        return [T.RandomResizedCrop(list(t.size), tuple(t.scale), tuple(t.ratio), antialias=bool(t.antialias))]
    if name == "RandomCrop":
        if getattr(t, "padding", None) or getattr(t, "pad_if_needed", False):
            raise ValueError("RandomCrop: padding / pad_if_needed are not supported (robocache does not pad)")
        return [T.RandomCrop(list(t.size))]
    if name == "CenterCrop":
        return [T.CenterCrop(list(t.size))]
    if name == "Resize":
        if _interp(t) != "bilinear":
            raise ValueError(f"Resize: interpolation {_interp(t)!r}: robocache resizes bilinearly")
        return [T.Resize(list(t.size) if not isinstance(t.size, int) else t.size, t.max_size,
                         antialias=bool(t.antialias if t.antialias is not None else True))]
    if name == "RandomHorizontalFlip":
        return [T.RandomHorizontalFlip(float(t.p))]
    if name in ("RandomRotation", "RandomAffine"):
        if getattr(t, "expand", False) or getattr(t, "center", None) is not None:
            raise ValueError(f"{name}: expand=True or a center are not supported (about the image center only)")
        _fill_zero(t, name)
        if name == "RandomRotation":
            return [T.RandomRotation(tuple(t.degrees), interpolation=_interp(t))]
        return [T.RandomAffine(tuple(t.degrees), t.translate, t.scale, t.shear, interpolation=_interp(t))]
    if name == "ColorJitter":
        return [T.ColorJitter(t.brightness, t.contrast, t.saturation, t.hue)]
    if name == "RandomAdjustSharpness":
        return [T.RandomAdjustSharpness(float(t.sharpness_factor), float(t.p))]
    if name == "RandomGrayscale":
        return [T.RandomGrayscale(float(t.p))]
    if name == "Normalize":
        return [T.Normalize(tuple(t.mean), tuple(t.std))]
    if name == "SharpnessJitter":                    # LeRobot's
        return [T.SharpnessJitter(tuple(t.sharpness))]
    if name == "RandomSubsetApply":                  # LeRobot's
        members = [m for x in t.transforms for m in _one(x)]
        if len(members) != len(t.transforms):
            raise ValueError("RandomSubsetApply: each member must be one supported transform")
        return [T.RandomSubset(members, list(t.p), int(t.n_subset), bool(t.random_order))]
    if name == "ImageTransforms":                    # LeRobot's wrapper around RandomSubsetApply
        return _one(t.tf)
    raise ValueError(f"Augment.from_torchvision: {name} is not supported (supported: RandomResizedCrop, RandomCrop, "
                     "CenterCrop, Resize, RandomHorizontalFlip, RandomRotation, RandomAffine, ColorJitter, "
                     "RandomAdjustSharpness, RandomGrayscale, Normalize, LeRobot's SharpnessJitter and "
                     "RandomSubsetApply; conversions ToImage/ToDtype/ToPureTensor are dropped)")


def convert(compose) -> list:
    """The robocache transforms of a torchvision ``Compose`` (or a list of transforms)."""
    items = compose.transforms if hasattr(compose, "transforms") and type(compose).__name__ == "Compose" else (
        compose if isinstance(compose, (list, tuple)) else [compose])
    return [x for t in items for x in _one(t)]
