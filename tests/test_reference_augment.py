"""tests/reference_augment.py against torchvision.transforms.v2.functional, on fresh random images.

Skips where torchvision is absent (CI). Colour ops, resize and bilinear warps agree to 1e-5;
nearest warps agree exactly on every pixel whose source position is not within 1e-3 of a rounding tie.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix  # noqa: E402

import reference_augment as ref  # noqa: E402

ATOL = 1e-5
# (H, W): odd, even, square and not; for every one W - H is even, so a 90 degree turn of a
# non-square image does not put every pixel centre on a rounding tie
SIZES = [(17, 23), (16, 20), (31, 31), (9, 5), (24, 32)]


def random_image(rng, shape, quantized=None) -> np.ndarray:
    """[3, H, W] float32 in [0, 1]; half the time on the 1/255 grid, so channels tie (hue branches),
    with some gray pixels and some pixels at exactly 0 and 1."""
    H, W = shape
    if quantized is None:
        quantized = bool(rng.integers(2))
    if quantized:
        img = rng.integers(0, 256, (3, H, W)).astype(np.float32) / np.float32(255)
    else:
        img = rng.random((3, H, W), dtype=np.float32)
    gray = rng.random((H, W)) < 0.1
    img[:, gray] = img[0, gray]
    img[:, rng.random((H, W)) < 0.03] = 0.0
    img[:, rng.random((H, W)) < 0.03] = 1.0
    return img


def tv(fn, img, *args, **kwargs) -> np.ndarray:
    return fn(torch.from_numpy(img.copy()), *args, **kwargs).numpy()


def assert_close(got, want, atol=ATOL):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.float32
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = np.unravel_index(diff.argmax(), diff.shape) if diff.size else None
    assert diff.max(initial=0.0) <= atol, f"max abs difference {diff.max()} at {worst}"


def not_near_tie(matrix, H, W, eps=1e-3) -> np.ndarray:
    """[H, W] bool: output pixels whose source position (float64, input pixel units) is not within
    eps of x.5 in x or y, where nearest rounding could go either way."""
    m = np.asarray(matrix, np.float64)
    x = np.arange(W, dtype=np.float64)[None, :] - (W - 1) / 2
    y = np.arange(H, dtype=np.float64)[:, None] - (H - 1) / 2
    sx = m[0] * x + m[1] * y + m[2] + (W - 1) / 2
    sy = m[3] * x + m[4] * y + m[5] + (H - 1) / 2

    def tie(s):
        return np.abs(s - np.floor(s) - 0.5) < eps

    return ~(tie(sx) | tie(sy))


def check_warp(got, want, matrix, interpolation):
    if interpolation == "bilinear":
        assert_close(got, want)
        return
    assert got.shape == want.shape
    keep = not_near_tie(matrix, *got.shape[1:])
    assert keep.mean() > 0.25, "too few pixels away from rounding ties to compare"
    np.testing.assert_array_equal(got[:, keep], want[:, keep])


# ----------------------------------------------------------------------------
# crop, flip, resize


@pytest.mark.parametrize("shape", SIZES)
def test_crop(rng, shape):
    H, W = shape
    img = random_image(rng, shape)
    boxes = [(0, 0, H, W), (1, 2, H - 3, W - 4), (H - 1, W - 1, 1, 1)]
    while len(boxes) < 8:  # random boxes, some reaching past the image (torchvision pads with 0)
        top, left = int(rng.integers(-3, H)), int(rng.integers(-3, W))
        h, w = int(rng.integers(1, H + 4)), int(rng.integers(1, W + 4))
        if top + h >= 0 and left + w >= 0:  # see ref.crop on boxes wholly above or left of the image
            boxes.append((top, left, h, w))
    for top, left, h, w in boxes:
        want = tv(TF.crop, img, top, left, h, w)
        got = ref.crop(img, top, left, h, w)
        np.testing.assert_array_equal(got, want, err_msg=str((top, left, h, w)))


@pytest.mark.parametrize("shape", SIZES)
def test_horizontal_flip(rng, shape):
    img = random_image(rng, shape)
    np.testing.assert_array_equal(ref.horizontal_flip(img), tv(TF.horizontal_flip, img))


RESIZES = [
    ((17, 23), (34, 46)),   # x2 up
    ((17, 23), (8, 11)),    # down, odd
    ((31, 31), (13, 13)),   # down by a non-integer factor
    ((24, 32), (7, 100)),   # down in height, up in width
    ((9, 5), (9, 12)),      # width only
    ((16, 20), (5, 20)),    # height only, down by 3.2
    ((16, 20), (16, 20)),   # same size: unchanged
    ((40, 50), (3, 4)),     # strong downscale
    ((3, 4), (29, 31)),     # strong upscale
    ((5, 1), (9, 4)),       # one-pixel wide input
    ((1, 7), (4, 3)),       # one-pixel high input
    ((6, 9), (1, 5)),       # one-pixel high output
]


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("src,dst", RESIZES)
def test_resize(rng, src, dst, antialias):
    img = random_image(rng, src)
    want = tv(TF.resize, img, list(dst), antialias=antialias)
    got = ref.resize(img, *dst, antialias=antialias)
    assert_close(got, want)
    if src == dst:
        np.testing.assert_array_equal(got, img)


def test_resize_random_sizes(rng):
    # output width >= 2: see ref.resize on torch's antialiased kernel and one-pixel wide outputs
    for _ in range(12):
        src = tuple(int(v) for v in rng.integers(2, 40, 2))
        dst = (int(rng.integers(1, 60)), int(rng.integers(2, 60)))
        img = random_image(rng, src)
        for antialias in (True, False):
            want = tv(TF.resize, img, list(dst), antialias=antialias)
            assert_close(ref.resize(img, *dst, antialias=antialias), want)


# ----------------------------------------------------------------------------
# affine warps


def test_affine_inverse_matrix(rng):
    cases = [(0.0, [0.0, 0.0], 1.0, [0.0, 0.0]), (-90.0, [0.0, 0.0], 1.0, [0.0, 0.0]),
             (30.0, [2.0, -3.5], 1.3, [10.0, -5.0])]
    for _ in range(20):
        cases.append((float(rng.uniform(-180, 180)), [float(v) for v in rng.uniform(-8, 8, 2)],
                      float(rng.uniform(0.5, 2.0)), [float(v) for v in rng.uniform(-30, 30, 2)]))
    for angle, translate, scale, shear in cases:
        want = _get_inverse_affine_matrix([0.0, 0.0], angle, translate, scale, shear)
        got = ref.affine_inverse_matrix(angle, translate, scale, shear)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


ANGLES = [0, 90, 180, 270, -90, 30.5, -45.0, 123.4, 360]


@pytest.mark.parametrize("fill", [None, 0])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("shape", SIZES)
def test_rotate(rng, shape, interpolation, fill):
    img = random_image(rng, shape)
    mode = getattr(TF.InterpolationMode, interpolation.upper())
    for angle in ANGLES + [float(rng.uniform(-180, 180))]:
        want = tv(TF.rotate, img, angle, interpolation=mode, fill=fill)
        got = ref.rotate(img, angle, interpolation=interpolation, fill=fill)
        matrix = ref.affine_inverse_matrix(-(angle % 360), [0.0, 0.0], 1.0, [0.0, 0.0])
        check_warp(got, want, matrix, interpolation)


@pytest.mark.parametrize("fill", [None, 0])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("shape", SIZES)
def test_affine(rng, shape, interpolation, fill):
    img = random_image(rng, shape)
    mode = getattr(TF.InterpolationMode, interpolation.upper())
    cases = [(0.0, [0.0, 0.0], 1.0, [0.0, 0.0]), (90.0, [0.0, 0.0], 1.0, [0.0, 0.0]),
             (0.0, [3.0, -2.0], 1.0, [0.0, 0.0]), (0.0, [0.0, 0.0], 0.8, [0.0, 0.0])]
    for _ in range(4):
        cases.append((float(rng.uniform(-180, 180)), [float(v) for v in rng.uniform(-5, 5, 2)],
                      float(rng.uniform(0.6, 1.6)), [float(v) for v in rng.uniform(-20, 20, 2)]))
    for angle, translate, scale, shear in cases:
        want = tv(TF.affine, img, angle=angle, translate=translate, scale=scale, shear=shear,
                  interpolation=mode, fill=fill)
        got = ref.affine(img, angle, translate, scale, shear, interpolation=interpolation, fill=fill)
        matrix = ref.affine_inverse_matrix(angle, translate, scale, shear)
        check_warp(got, want, matrix, interpolation)


# ----------------------------------------------------------------------------
# colour

FACTORS = [0.0, 0.5, 1.0, 1.7, 3.0]


@pytest.mark.parametrize("shape", SIZES)
def test_adjust_brightness_contrast_saturation_sharpness(rng, shape):
    img = random_image(rng, shape)
    for factor in FACTORS + [float(rng.uniform(0, 2))]:
        for name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_sharpness"):
            want = tv(getattr(TF, name), img, factor)
            got = getattr(ref, name)(img, factor)
            assert_close(got, want)


def test_adjust_sharpness_tiny(rng):
    for shape in [(2, 7), (7, 2), (3, 3)]:
        img = random_image(rng, shape)
        assert_close(ref.adjust_sharpness(img, 2.0), tv(TF.adjust_sharpness, img, 2.0))


@pytest.mark.parametrize("shape", SIZES)
def test_adjust_hue(rng, shape):
    for quantized in (True, False):
        img = random_image(rng, shape, quantized=quantized)
        for factor in [-0.5, -0.27, 0.0, 0.13, 0.5, float(rng.uniform(-0.5, 0.5))]:
            assert_close(ref.adjust_hue(img, factor), tv(TF.adjust_hue, img, factor))


@pytest.mark.parametrize("shape", SIZES)
def test_rgb_to_grayscale(rng, shape):
    img = random_image(rng, shape)
    assert_close(ref.rgb_to_grayscale(img), tv(TF.rgb_to_grayscale, img, num_output_channels=3))


@pytest.mark.parametrize("shape", SIZES)
def test_normalize(rng, shape):
    img = random_image(rng, shape)
    for mean, std in [([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), ([0.5] * 3, [0.5] * 3),
                      (list(rng.uniform(0, 1, 3)), list(rng.uniform(0.1, 2, 3)))]:
        mean, std = [float(v) for v in mean], [float(v) for v in std]
        assert_close(ref.normalize(img, mean, std), tv(TF.normalize, img, mean, std))
