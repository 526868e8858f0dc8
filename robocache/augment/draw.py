"""Per-sample parameters of an Augment, drawn on the device with torchvision's sampling rules.

Randomness is a pure function of (key, sample, camera): a splitmix64 hash of the loader's (seed,
epoch) key, the sample's episode and anchor time, the camera and a slot number gives each sample its
own uniforms, so an epoch is the same whatever the batch size, rank or resume point, with no
generator state to carry. Everything is a fixed number of tensor ops per batch (none per sample),
so a CUDA graph replays it. The rows' layout is the RC_AUG_* enum of csrc/robocache.h.
"""

from __future__ import annotations

import math

from .._util import torch as _torch

#: RC_AUG_* (csrc/robocache.h)
CROP_TOP, CROP_LEFT, CROP_H, CROP_W, RESIZE_H, RESIZE_W, OUT_TOP, OUT_LEFT, FLIP, AFFINE = range(10)
THETA, NCOLOR, COLOR, MAX_COLOR = 10, 16, 17, 8
NPARAMS = COLOR + 2 * MAX_COLOR
#: RC_COLOR_*
BRIGHTNESS, CONTRAST, SATURATION, HUE, SHARPNESS, GRAYSCALE, AFFINE_AT = range(1, 8)
JITTER_CODES = {"brightness": BRIGHTNESS, "contrast": CONTRAST, "saturation": SATURATION, "hue": HUE}

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _signed(v: int) -> int:
    v &= _M64
    return v - (1 << 64) if v >= 1 << 63 else v


def mix64(z: int) -> int:
    """splitmix64's finalizer on a Python int (the host side of ``_mix``)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def epoch_key(seed: int, epoch: int) -> int:
    """The int64 every sample's hash starts from in epoch ``epoch`` of a loader seeded ``seed``."""
    return _signed(mix64(mix64(int(seed) + _GOLDEN) ^ (int(epoch) * _GOLDEN)))


def _mix(z):
    """splitmix64's finalizer on int64 tensors: wrapping products, logical shifts (masked)."""
    z = z ^ ((z >> 30) & ((1 << 34) - 1))
    z = z * _signed(0xBF58476D1CE4E5B9)
    z = z ^ ((z >> 27) & ((1 << 37) - 1))
    z = z * _signed(0x94D049BB133111EB)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def uniforms(key, episodes, times, camera: int, n: int):
    """``[B, n]`` float64 uniforms in [0, 1) of each sample (episode, anchor time) and camera."""
    torch = _torch()
    h = _mix(key + episodes.to(torch.int64) * _signed(_GOLDEN))
    h = _mix(h ^ times.to(torch.float64).contiguous().view(torch.int64))
    h = _mix(h + _signed((int(camera) + 1) * 0xD1B54A32D192ED03))
    slots = torch.arange(1, n + 1, dtype=torch.int64, device=h.device) * _signed(_GOLDEN)
    z = _mix(h[:, None] + slots[None, :])
    return ((z >> 11) & ((1 << 53) - 1)).to(torch.float64) * (1.0 / (1 << 53))


class Slots:
    """Hands out consecutive columns of the batch's uniforms; ``count`` is how many were taken (a dry
    run on one sample sizes the draw)."""

    def __init__(self, u) -> None:
        self.u, self.count = u, 0

    def take(self, k: int = 1):
        cols = self.u[:, self.count:self.count + k]
        self.count += k
        return cols if k > 1 else cols[:, 0]


def uniform(u, lo: float, hi: float):
    return lo + (hi - lo) * u


def randint(u, n):
    """torch.randint(0, n): floor(u * n) (n a tensor or int >= 1)."""
    return (u * n).floor()


def round_half_even(x):
    return _torch().round(x)


def inverse_affine(angle, tx, ty, scale, shear_x, shear_y):
    """torchvision's ``_get_inverse_affine_matrix`` about center (0, 0), vectorized in float64:
    ``[B, 6]``. Angles in degrees."""
    torch = _torch()
    rot, sx, sy = torch.deg2rad(angle), torch.deg2rad(shear_x), torch.deg2rad(shear_y)
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    m2 = m0 * (-tx) + m1 * (-ty)
    m5 = m3 * (-tx) + m4 * (-ty)
    return torch.stack([m0, m1, m2, m3, m4, m5], dim=1)


def resized_crop_fallback(H: int, W: int, ratio) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box when its 10 tries fail (and its eval box): (top, left, h, w)."""
    in_ratio = W / H
    if in_ratio < min(ratio):
        w, h = W, int(round(W / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = H, int(round(H * max(ratio)))
    else:
        w, h = W, H
    return (H - h) // 2, (W - w) // 2, h, w


def resized_crop_box(slots: Slots, H: int, W: int, scale, ratio):
    """RandomResizedCrop.get_params for every sample: ``(top, left, h, w)`` float64 ``[B]`` each."""
    torch = _torch()
    area = float(H * W)
    target = area * uniform(slots.take(10), scale[0], scale[1])
    aspect = torch.exp(uniform(slots.take(10), math.log(ratio[0]), math.log(ratio[1])))
    w = round_half_even(torch.sqrt(target * aspect))
    h = round_half_even(torch.sqrt(target / aspect))
    ok = (w > 0) & (w <= W) & (h > 0) & (h <= H)
    first = ok.to(torch.int8).argmax(dim=1, keepdim=True)       # the first try that fits
    found = ok.any(dim=1)
    h = h.gather(1, first)[:, 0]
    w = w.gather(1, first)[:, 0]
    top, left = randint(slots.take(), H - h + 1), randint(slots.take(), W - w + 1)
    ft, fl, fh, fw = (float(v) for v in resized_crop_fallback(H, W, ratio))
    return (torch.where(found, top, ft), torch.where(found, left, fl), torch.where(found, h, fh),
            torch.where(found, w, fw))
