"""The image transforms an Augment is made of, named and parametrized as torchvision v2's.

Each class only holds and checks its arguments (an error names the transform and the argument);
``draw.py`` turns a list of them into per-sample parameter rows on the device, with torchvision's
sampling rules, and the frame gather applies them (csrc/augment_math.h). Ranges follow torchvision:
a number ``b`` for brightness/contrast/saturation means ``[max(0, 1 - b), 1 + b]``, a hue ``h`` means
``[-h, h]``, ``degrees`` ``d`` means ``[-d, d]``; a pair is the range itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INTERPOLATIONS = ("nearest", "bilinear")


def _pair(name: str, arg: str, value, *, center: float | None, bound: tuple[float, float] | None = None,
          clip_low: float | None = None) -> tuple[float, float] | None:
    """A range as torchvision reads it: a number v -> [center - v, center + v] (clipped below at
    ``clip_low``), a pair -> itself; None or 0 -> None (the op is off)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}: {arg} must be a non-negative number or a (min, max) pair, got {value!r}")
        if value == 0:
            return None
        if center is None:
            raise TypeError(f"{name}: {arg} must be a (min, max) pair, got {value!r}")
        lo, hi = center - value, center + value
        if clip_low is not None:
            lo = max(clip_low, lo)
    else:
        try:
            lo, hi = (float(v) for v in value)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: {arg} must be a number or a (min, max) pair, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"{name}: {arg} must be a finite range with min <= max, got {value!r}")
    if bound is not None and (lo < bound[0] or hi > bound[1]):
        raise ValueError(f"{name}: {arg} must lie in [{bound[0]}, {bound[1]}], got ({lo}, {hi})")
    return lo, hi


def _size(name: str, value) -> tuple[int, ...]:
    """A size as torchvision takes it: an int or [s] (a square; for Resize the shortest edge), or (h, w)."""
    vals = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        vals = [v for v in vals]
    except TypeError:
        raise TypeError(f"{name}: size must be an int or (h, w), got {value!r}") from None
    if len(vals) not in (1, 2) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in vals):
        raise ValueError(f"{name}: size must be a positive int or (h, w) of positive ints, got {value!r}")
    return tuple(vals)


def _interp(name: str, value) -> str:
    v = str(getattr(value, "value", value)).lower()
    if v not in INTERPOLATIONS:
        raise ValueError(f"{name}: interpolation must be one of {INTERPOLATIONS} (torchvision's NEAREST, "
                         f"BILINEAR), got {value!r}")
    return v


def _prob(name: str, p) -> float:
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0):
        raise ValueError(f"{name}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


class Transform:
    """Base of the transforms (kind: ``crop``, ``resize``, ``flip``, ``affine``, ``colour``, ``normalize``)."""
    kind = ""


@dataclass(frozen=True)
class RandomResizedCrop(Transform):
    """torchvision's RandomResizedCrop: a box of ``scale`` of the area and aspect ``ratio`` (log-uniform),
    10 tries then the centered fallback, resized to ``size``. Eval: that fallback box."""
    size: Any                 # int or (h, w); (h, w) or (s,) after checking
    scale: Any = (0.08, 1.0)
    ratio: Any = (3 / 4, 4 / 3)
    antialias: bool = True
    kind = "crop"

    def __post_init__(self):
        object.__setattr__(self, "size", _size("RandomResizedCrop", self.size))
        object.__setattr__(self, "scale", _pair("RandomResizedCrop", "scale", self.scale, center=None))
        object.__setattr__(self, "ratio", _pair("RandomResizedCrop", "ratio", self.ratio, center=None))
        if self.scale is None or self.scale[0] <= 0 or self.ratio is None or self.ratio[0] <= 0:
            raise ValueError("RandomResizedCrop: scale and ratio must be positive (min, max) pairs")


@dataclass(frozen=True)
class RandomCrop(Transform):
    """torchvision's RandomCrop (no padding): a ``size`` box at a uniform position. Eval: centered."""
    size: Any
    kind = "crop"

    def __post_init__(self):
        object.__setattr__(self, "size", _size("RandomCrop", self.size))


@dataclass(frozen=True)
class CenterCrop(Transform):
    """torchvision's CenterCrop: top = round((H - h) / 2), left = round((W - w) / 2)."""
    size: Any
    kind = "crop"

    def __post_init__(self):
        object.__setattr__(self, "size", _size("CenterCrop", self.size))


@dataclass(frozen=True)
class FractionCrop(Transform):
    """GR00T's crop: a box of ``int(H * fraction) x int(W * fraction)`` at a uniform position in train
    (N1.5 ``VideoCrop``: RandomCrop; N1.6 ``FractionalRandomCrop``), centered in eval."""
    fraction: float
    kind = "crop"

    def __post_init__(self):
        if not (isinstance(self.fraction, (int, float)) and 0.0 < self.fraction <= 1.0):
            raise ValueError(f"FractionCrop: fraction must be in (0, 1], got {self.fraction!r}")


@dataclass(frozen=True)
class Resize(Transform):
    """torchvision's Resize: ``size`` (h, w), or an int for the shortest edge (the long one
    ``int(size * long / short)``, capped by ``max_size``); bilinear, antialiased by default."""
    size: Any
    max_size: int | None = None
    antialias: bool = True
    kind = "resize"

    def __post_init__(self):
        object.__setattr__(self, "size", _size("Resize", self.size))
        if self.max_size is not None and (len(self.size) != 1 or self.max_size <= self.size[0]):
            raise ValueError(f"Resize: max_size caps a shortest-edge size and must exceed it, got size "
                             f"{self.size!r}, max_size {self.max_size!r}")


@dataclass(frozen=True)
class RandomHorizontalFlip(Transform):
    """torchvision's RandomHorizontalFlip: mirrored with probability ``p``."""
    p: float = 0.5
    kind = "flip"

    def __post_init__(self):
        _prob("RandomHorizontalFlip", self.p)


@dataclass(frozen=True)
class RandomAffine(Transform):
    """torchvision's RandomAffine about the image center, fill 0: angle uniform in ``degrees``,
    translation ``round(uniform(-t * size, t * size))`` pixels per axis, ``scale`` uniform, ``shear``
    (x range, or x and y ranges) uniform; ``interpolation`` nearest (torchvision's default) or bilinear."""
    degrees: Any = 0.0              # a number or (min, max); (min, max) after checking
    translate: Any = None
    scale: Any = None
    shear: Any = None
    interpolation: str = "nearest"
    kind = "affine"

    def __post_init__(self):
        name = type(self).__name__
        object.__setattr__(self, "degrees", _pair(name, "degrees", self.degrees, center=0.0) or (0.0, 0.0))
        if self.translate is not None:
            t = tuple(float(v) for v in self.translate)
            if len(t) != 2 or not all(0.0 <= v <= 1.0 for v in t):
                raise ValueError(f"{name}: translate must be (tx, ty) fractions in [0, 1], got {self.translate!r}")
            object.__setattr__(self, "translate", t)
        if self.scale is not None:
            object.__setattr__(self, "scale", _pair(name, "scale", self.scale, center=None))
            if self.scale[0] <= 0:
                raise ValueError(f"{name}: scale must be positive, got {self.scale!r}")
        if self.shear is not None:
            s = self.shear
            if isinstance(s, (int, float)):
                s = (-abs(float(s)), abs(float(s)))
            s = tuple(float(v) for v in s)
            if len(s) not in (2, 4):
                raise ValueError(f"{name}: shear must be a number, (min, max) or (xmin, xmax, ymin, ymax)")
            object.__setattr__(self, "shear", s)
        object.__setattr__(self, "interpolation", _interp(name, self.interpolation))


class RandomRotation(RandomAffine):
    """torchvision's RandomRotation (about the center, no expand, fill 0): angle uniform in ``degrees``."""

    def __init__(self, degrees, interpolation: str = "nearest"):
        super().__init__(degrees=degrees, interpolation=interpolation)


@dataclass(frozen=True)
class ColorJitter(Transform):
    """torchvision v2's ColorJitter: each given factor uniform in its range, the four ops in a random
    order per sample (``fixed_order=True``: brightness, contrast, saturation, hue)."""
    brightness: Any = None          # a number or (min, max); (min, max) or None after checking
    contrast: Any = None
    saturation: Any = None
    hue: Any = None
    fixed_order: bool = False
    kind = "colour"

    def __post_init__(self):
        for arg in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, arg, _pair("ColorJitter", arg, getattr(self, arg), center=1.0, clip_low=0.0,
                                                bound=(0.0, math.inf)))
        object.__setattr__(self, "hue", _pair("ColorJitter", "hue", self.hue, center=0.0, bound=(-0.5, 0.5)))

    @property
    def ranges(self) -> list[tuple[str, Any]]:
        return [("brightness", self.brightness), ("contrast", self.contrast), ("saturation", self.saturation),
                ("hue", self.hue)]


@dataclass(frozen=True)
class SharpnessJitter(Transform):
    """LeRobot's SharpnessJitter: ``adjust_sharpness`` with a factor uniform in ``sharpness``."""
    sharpness: Any
    kind = "colour"

    def __post_init__(self):
        object.__setattr__(self, "sharpness", _pair("SharpnessJitter", "sharpness", self.sharpness, center=1.0,
                                                    clip_low=0.0, bound=(0.0, math.inf)))


@dataclass(frozen=True)
class RandomAdjustSharpness(Transform):
    """torchvision's RandomAdjustSharpness: ``adjust_sharpness(sharpness_factor)`` with probability ``p``."""
    sharpness_factor: float
    p: float = 0.5
    kind = "colour"

    def __post_init__(self):
        if not (isinstance(self.sharpness_factor, (int, float)) and self.sharpness_factor >= 0):
            raise ValueError(f"RandomAdjustSharpness: sharpness_factor must be >= 0, got {self.sharpness_factor!r}")
        _prob("RandomAdjustSharpness", self.p)


@dataclass(frozen=True)
class RandomGrayscale(Transform):
    """torchvision's RandomGrayscale: three equal channels of ``rgb_to_grayscale`` with probability ``p``."""
    p: float = 0.1
    kind = "colour"

    def __post_init__(self):
        _prob("RandomGrayscale", self.p)


@dataclass(frozen=True)
class RandomSubset(Transform):
    """LeRobot's RandomSubsetApply: ``n`` of ``transforms`` (colour jitters, sharpness, an affine) drawn
    without replacement with probabilities proportional to ``weights`` (torch.multinomial's rule), applied
    in their listed order, or in the drawn order with ``random_order``."""
    transforms: Any                 # a sequence of transforms; a tuple after checking
    weights: Any = None
    n: Any = None
    random_order: bool = False
    kind = "colour"

    def __post_init__(self):
        ts = tuple(self.transforms)
        if not ts:
            raise ValueError("RandomSubset: no transforms")
        for t in ts:
            if not isinstance(t, (ColorJitter, SharpnessJitter, RandomAdjustSharpness, RandomGrayscale,
                                  RandomAffine)):
                raise TypeError(f"RandomSubset: {type(t).__name__} cannot be a member (colour jitters, "
                                "sharpness, grayscale and one affine can)")
        if sum(isinstance(t, RandomAffine) for t in ts) > 1:
            raise ValueError("RandomSubset: at most one affine/rotation member")
        w = tuple(float(v) for v in (self.weights if self.weights is not None else [1.0] * len(ts)))
        if len(w) != len(ts) or not all(math.isfinite(v) and v > 0 for v in w):
            raise ValueError(f"RandomSubset: weights must be {len(ts)} positive numbers, got {self.weights!r}")
        n = len(ts) if self.n is None else int(self.n)
        if not 0 <= n <= len(ts):
            raise ValueError(f"RandomSubset: n must be in [0, {len(ts)}], got {self.n!r}")
        object.__setattr__(self, "transforms", ts)
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "n", n)


@dataclass(frozen=True)
class Normalize(Transform):
    """torchvision's Normalize: ``(v - mean) / std`` per channel, after everything else."""
    mean: Any = field(default=(0.485, 0.456, 0.406))
    std: Any = field(default=(0.229, 0.224, 0.225))
    kind = "normalize"

    def __post_init__(self):
        m, s = tuple(float(v) for v in self.mean), tuple(float(v) for v in self.std)
        if len(m) != 3 or len(s) != 3 or not all(math.isfinite(v) for v in m + s) or any(v == 0 for v in s):
            raise ValueError(f"Normalize: mean and std must be 3 finite numbers each, std nonzero; got {self.mean!r}, "
                             f"{self.std!r}")
        object.__setattr__(self, "mean", m)
        object.__setattr__(self, "std", s)
