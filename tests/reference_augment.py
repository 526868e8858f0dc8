"""NumPy references of torchvision.transforms.v2.functional image augmentations (float path).

Images are float32 arrays shaped [3, H, W] with values in [0, 1]. Each function restates the
maths of torchvision 0.29 / torch 2.14 in plain NumPy, in float32 where torch computes in float32,
so that it can be read rather than trusted. tests/test_reference_augment.py holds every function
here to torchvision on random inputs. No torch import: these run where torch is absent.
"""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

F32 = np.float32


def _image(img) -> np.ndarray:
    img = np.asarray(img, dtype=np.float32)
    if img.ndim != 3:
        raise ValueError(f"expected an image shaped [C, H, W], got {img.shape}")
    return img


# ----------------------------------------------------------------------------
# geometry: crop, flip, resize


def crop(img, top: int, left: int, h: int, w: int) -> np.ndarray:
    """img[:, top:top+h, left:left+w]; the part of the box outside the image is 0 (torchvision pads with 0).
    Not for a box that ends above or left of the image (top + h < 0 or left + w < 0): torchvision's
    slice then wraps around (a negative end) and its output is not that box."""
    img = _image(img)
    _, H, W = img.shape
    out = np.zeros((img.shape[0], h, w), np.float32)
    y0, y1 = max(top, 0), min(top + h, H)
    x0, x1 = max(left, 0), min(left + w, W)
    if y0 < y1 and x0 < x1:
        out[:, y0 - top:y1 - top, x0 - left:x1 - left] = img[:, y0:y1, x0:x1]
    return out


def horizontal_flip(img) -> np.ndarray:
    return _image(img)[:, :, ::-1].copy()


def _linear_taps(in_size: int, out_size: int, antialias: bool) -> list[tuple[list[int], list[np.float32]]]:
    """For each output index along one axis: the input indices it reads and their weights, computed
    as torch's CPU kernels compute them (float32, where C++ promotes to double we do too)."""
    scale = F32(in_size) / F32(out_size)
    taps = []
    if antialias:
        # _upsample_bilinear2d_aa: a triangle filter stretched by the scale when downscaling
        support = scale if scale >= 1 else F32(1)
        invscale = F32(1.0 / float(scale)) if scale >= 1 else F32(1)
        max_taps = math.ceil(support) * 2 + 1
        for i in range(out_size):
            center = F32(float(scale) * (i + 0.5))
            xmin = max(int(float(center - support) + 0.5), 0)
            xmax = min(int(float(center + support) + 0.5), in_size)
            n = min(max(xmax - xmin, 0), max_taps)
            weights = []
            for j in range(n):
                x = abs(F32((float(F32(j + xmin) - center) + 0.5) * float(invscale)))
                weights.append(F32(1) - x if x < 1 else F32(0))
            total = F32(0)
            for wj in weights:
                total = F32(total + wj)
            if total != 0:
                weights = [F32(wj / total) for wj in weights]
            taps.append((list(range(xmin, xmin + n)), weights))
    else:
        # upsample_bilinear2d, align_corners=False: source = scale * (i + 0.5) - 0.5, at least 0
        for i in range(out_size):
            src = F32(scale * (F32(i) + F32(0.5)) - F32(0.5))
            src = max(src, F32(0))
            i0 = min(int(np.floor(src)), in_size - 1)
            lam = F32(min(max(F32(src - F32(i0)), F32(0)), F32(1)))
            i1 = i0 + 1 if i0 < in_size - 1 else i0
            taps.append(([i0, i1], [F32(1) - lam, lam]))
    return taps


def _resample_axis(img: np.ndarray, taps, axis: int) -> np.ndarray:
    """out[..., i, ...] = sum_k w_k * img[..., idx_k, ...] along `axis`, accumulated in float32 in tap order."""
    x = np.moveaxis(img, axis, -1)
    out = np.empty(x.shape[:-1] + (len(taps),), np.float32)
    for i, (idx, weights) in enumerate(taps):
        acc = x[..., idx[0]] * weights[0]
        for j, wj in zip(idx[1:], weights[1:]):
            acc = acc + x[..., j] * wj
        out[..., i] = acc
    return np.moveaxis(out, -1, axis)


def resize(img, h: int, w: int, antialias: bool = True) -> np.ndarray:
    """Bilinear resize to [C, h, w] (align_corners=False): the width pass, then the height pass;
    an axis whose size does not change is not touched, and same size in and out is a copy.
    Known difference: with antialias=True, output width 1 and a height change, torch 2.14's CPU
    kernel gives wrong values (e.g. [4, 1] -> [8, 1] repeats the first row); this does the maths."""
    img = _image(img)
    _, H, W = img.shape
    out = img.copy()
    if (h, w) == (H, W):
        return out
    if w != W:
        out = _resample_axis(out, _linear_taps(W, w, antialias), axis=2)
    if h != H:
        out = _resample_axis(out, _linear_taps(H, h, antialias), axis=1)
    return out


# ----------------------------------------------------------------------------
# geometry: affine warps


def affine_inverse_matrix(angle: float, translate, scale: float, shear) -> list[float]:
    """The 2x3 matrix (row-major, 6 floats) that maps output pixel positions to input ones, both
    relative to the image centre, for torchvision's affine (center [0, 0]); float64 throughout.

    Forward map: x -> T + R(angle) S(scale) SHy(shear_y) SHx(shear_x) x, with
    SHx(s) = [[1, -tan s], [0, 1]] and SHy(s) = [[1, 0], [-tan s, 1]], giving the unit-scale block
    [[a, b], [c, d]] below (its determinant is 1). The inverse is [[d, -b], [-c, a]] / scale,
    followed by the inverse translation -inverse(T)."""
    if isinstance(shear, Number):
        shear = [shear, 0.0]
    shear = list(shear)
    if len(shear) == 1:
        shear = [shear[0], shear[0]]
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    tx, ty = float(translate[0]), float(translate[1])

    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    c = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - c * math.tan(sx)

    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    m[2] += 0.0 - m[0] * tx - m[1] * ty
    m[5] += 0.0 - m[3] * tx - m[4] * ty
    return m


def _sample(img: np.ndarray, ix: np.ndarray, iy: np.ndarray, interpolation: str) -> np.ndarray:
    """grid_sample at input pixel coordinates (ix, iy) with zero padding: [C, *ix.shape]."""
    C, H, W = img.shape

    def at(xi, yi):  # img[:, yi, xi] where inside, 0 outside
        inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
        vals = img[:, np.clip(yi, 0, H - 1), np.clip(xi, 0, W - 1)]
        return np.where(inside, vals, F32(0))

    if interpolation == "nearest":
        return at(np.rint(ix).astype(np.int64), np.rint(iy).astype(np.int64))  # rint: half to even
    if interpolation == "bilinear":
        x0, y0 = np.floor(ix), np.floor(iy)
        wx1, wy1 = ix - x0, iy - y0            # distance to the west / north neighbour
        wx0, wy0 = F32(1) - wx1, F32(1) - wy1  # distance to the east / south neighbour
        x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
        out = at(x0, y0) * (wy0 * wx0) + at(x0 + 1, y0) * (wy0 * wx1)
        out = out + at(x0, y0 + 1) * (wy1 * wx0)
        return out + at(x0 + 1, y0 + 1) * (wy1 * wx1)
    raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")


def warp(img, matrix, interpolation: str = "nearest", fill=None) -> np.ndarray:
    """torchvision's _affine_grid + _apply_grid_transform (grid_sample, align_corners=False, zeros):
    output pixel (i, j) reads the input at matrix @ (x, y, 1), where (x, y) is the pixel centre
    relative to the image centre; output size = input size.

    fill None: outside pixels are 0 (bilinear fades to 0 at the border). fill a number (or one per
    channel): a ones channel is warped alongside; nearest: where it is < 0.5 the pixel is fill;
    bilinear: (out - fill) * mask + fill (= out * mask + (1 - mask) * fill)."""
    img = _image(img)
    C, H, W = img.shape
    theta = np.asarray(matrix, dtype=np.float32).reshape(2, 3)
    # the grid is normalised to [-1, 1] by dividing theta (not the product) by half the size
    t = theta / np.array([[0.5 * W], [0.5 * H]], dtype=np.float32)
    xs = np.linspace((1.0 - W) * 0.5, (W - 1.0) * 0.5, W).astype(np.float32)[None, :]
    ys = np.linspace((1.0 - H) * 0.5, (H - 1.0) * 0.5, H).astype(np.float32)[:, None]
    gx = xs * t[0, 0] + ys * t[0, 1] + t[0, 2]
    gy = xs * t[1, 0] + ys * t[1, 1] + t[1, 2]
    # grid_sample's unnormalisation for align_corners=False
    ix = ((gx + F32(1)) * F32(W) - F32(1)) / F32(2)
    iy = ((gy + F32(1)) * F32(H) - F32(1)) / F32(2)

    out = _sample(img, ix, iy, interpolation)
    if fill is None:
        return out
    mask = _sample(np.ones((1, H, W), np.float32), ix, iy, interpolation)
    fill_c = np.asarray(fill if isinstance(fill, (list, tuple)) else [fill], np.float32).reshape(-1, 1, 1)
    if interpolation == "nearest":
        return np.where(mask < 0.5, np.broadcast_to(fill_c, out.shape), out)
    return (out - fill_c) * mask + fill_c


def rotate(img, angle: float, interpolation: str = "nearest", fill=None) -> np.ndarray:
    """Counter-clockwise rotation by `angle` degrees about the centre, same size out. Like torchvision,
    angles 0 and 180 (any size) and 90 and 270 (square images) are exact index shuffles."""
    img = _image(img)
    _, H, W = img.shape
    angle = angle % 360
    if angle == 0:
        return img.copy()
    if angle == 180:
        return img[:, ::-1, ::-1].copy()
    if H == W and angle in (90, 270):
        return np.rot90(img, k=1 if angle == 90 else 3, axes=(1, 2)).copy()
    # torchvision's rotate and affine turn opposite ways: rotate passes -angle
    return warp(img, affine_inverse_matrix(-angle, [0.0, 0.0], 1.0, [0.0, 0.0]), interpolation, fill)


def affine(img, angle: float, translate, scale: float, shear, interpolation: str = "nearest",
           fill=None) -> np.ndarray:
    """torchvision's affine about the image centre (no fast paths)."""
    return warp(img, affine_inverse_matrix(angle, translate, scale, shear), interpolation, fill)


# ----------------------------------------------------------------------------
# colour


def _gray(img: np.ndarray) -> np.ndarray:
    r, g, b = img
    return (r * F32(0.2989) + g * F32(0.587) + b * F32(0.114))[None]  # [1, H, W]


def rgb_to_grayscale(img) -> np.ndarray:
    """ITU-R 601 luma (0.2989, 0.587, 0.114), repeated on 3 channels."""
    return np.repeat(_gray(_image(img)), 3, axis=0)


def _blend(img: np.ndarray, other, ratio: float) -> np.ndarray:
    return np.clip(img * F32(ratio) + other * F32(1.0 - ratio), F32(0), F32(1))


def adjust_brightness(img, factor: float) -> np.ndarray:
    return np.clip(_image(img) * F32(factor), F32(0), F32(1))


def adjust_contrast(img, factor: float) -> np.ndarray:
    """Blend with the mean of the grayscale image (one number for the whole image)."""
    img = _image(img)
    mean = F32(_gray(img).astype(np.float64).mean())
    return _blend(img, mean, factor)


def adjust_saturation(img, factor: float) -> np.ndarray:
    """Blend with the grayscale image."""
    img = _image(img)
    return _blend(img, _gray(img), factor)


def adjust_sharpness(img, factor: float) -> np.ndarray:
    """Blend with a 3x3 blur ([[1,1,1],[1,5,1],[1,1,1]] / 13) on interior pixels; the one-pixel border
    is kept as is; clamp to [0, 1]. Images of height or width <= 2 are returned unchanged."""
    img = _image(img)
    _, H, W = img.shape
    if H <= 2 or W <= 2:
        return img.copy()
    kernel = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float64) / 13.0
    kernel = kernel.astype(np.float32)
    blurred = np.zeros((img.shape[0], H - 2, W - 2), np.float32)
    for dy in range(3):
        for dx in range(3):
            blurred += img[:, dy:dy + H - 2, dx:dx + W - 2] * kernel[dy, dx]
    out = img.copy()
    inner = out[:, 1:-1, 1:-1]
    out[:, 1:-1, 1:-1] = inner + F32(1.0 - factor) * (blurred - inner)
    return np.clip(out, F32(0), F32(1))


def _rgb_to_hsv(img: np.ndarray) -> np.ndarray:
    r, g, b = img
    maxc, minc = img.max(axis=0), img.min(axis=0)
    gray = maxc == minc  # hue and saturation are 0 there
    one = F32(1)
    spread = maxc - minc
    s = spread / np.where(gray, one, maxc)
    div = np.where(gray, one, spread)
    rc, gc, bc = (maxc - r) / div, (maxc - g) / div, (maxc - b) / div
    hr = np.where(maxc == r, bc - gc, F32(0))
    hg = np.where((maxc == g) & (maxc != r), (rc + F32(2)) - bc, F32(0))
    hb = np.where((maxc != g) & (maxc != r), (gc + F32(4)) - rc, F32(0))
    h = (hr + hg) + hb
    h = np.fmod(h * F32(1.0 / 6.0) + F32(1), F32(1))
    return np.stack([h, s, maxc])


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    h, s, v = hsv
    h6 = h * F32(6)
    i = np.floor(h6)
    f = h6 - i
    i = np.remainder(i.astype(np.int32), 6)
    sf = s * f
    p = np.clip((F32(1) - s) * v, F32(0), F32(1))
    q = np.clip((F32(1) - sf) * v, F32(0), F32(1))
    t = np.clip((sf + (F32(1) - s)) * v, F32(0), F32(1))
    r = np.choose(i, [v, q, p, p, t, v])
    g = np.choose(i, [t, v, v, q, p, p])
    b = np.choose(i, [p, p, t, v, v, q])
    return np.stack([r, g, b])


def adjust_hue(img, factor: float) -> np.ndarray:
    """Shift the hue by `factor` turns (in [-0.5, 0.5]) in HSV space."""
    if not -0.5 <= factor <= 0.5:
        raise ValueError(f"hue factor {factor} is not in [-0.5, 0.5]")
    hsv = _rgb_to_hsv(_image(img))
    hsv[0] = np.remainder(hsv[0] + F32(factor), F32(1))
    return _hsv_to_rgb(hsv)


def normalize(img, mean, std) -> np.ndarray:
    """(img - mean) / std per channel."""
    mean = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    std = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return (_image(img) - mean) / std
