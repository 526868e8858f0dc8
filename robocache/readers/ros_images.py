"""ROS Image and CompressedImage messages to numpy frames: raw encodings (rgb8, bgr8, mono16, 32FC1,
packed YUV 4:2:2...) and compressed ones (JPEG/PNG through Pillow), and resizing. ``ImageConverter`` in
ros_messages.py feeds them a topic's messages."""

from __future__ import annotations

import io

import numpy as np

from ._common import ReaderError, require

__all__ = ["ENCODINGS", "YUV422", "decode_compressed", "decode_image", "resize_image"]


# encoding -> (channels, numpy dtype, channel order to RGB(A), packed YUV 4:2:2 layout)
ENCODINGS = {
    "rgb8": (3, np.uint8, None), "bgr8": (3, np.uint8, [2, 1, 0]), "rgba8": (4, np.uint8, None),
    "bgra8": (4, np.uint8, [2, 1, 0, 3]), "mono8": (1, np.uint8, None), "8uc1": (1, np.uint8, None),
    "8uc3": (3, np.uint8, None), "8uc4": (4, np.uint8, None), "mono16": (1, np.uint16, None),
    "16uc1": (1, np.uint16, None), "16sc1": (1, np.int16, None), "32fc1": (1, np.float32, None),
    "64fc1": (1, np.float64, None), "rgb16": (3, np.uint16, None), "bgr16": (3, np.uint16, [2, 1, 0]),
    "rgba16": (4, np.uint16, None), "bgra16": (4, np.uint16, [2, 1, 0, 3]),
    "bayer_rggb8": (1, np.uint8, None), "bayer_bggr8": (1, np.uint8, None), "bayer_gbrg8": (1, np.uint8, None),
    "bayer_grbg8": (1, np.uint8, None),
}
YUV422 = {"yuv422": "uyvy", "uyvy": "uyvy", "yuv422_yuy2": "yuyv", "yuyv": "yuyv"}


def _yuv422_to_rgb(raw: np.ndarray, h: int, w: int, layout: str) -> np.ndarray:
    """Packed 4:2:2 (2 bytes/pixel) to RGB uint8, BT.601 limited range (what cv2's
    COLOR_YUV2RGB_UYVY / _YUY2 compute)."""
    px = raw.reshape(h, w // 2, 4).astype(np.float32)
    if layout == "uyvy":
        u, y0, v, y1 = px[..., 0], px[..., 1], px[..., 2], px[..., 3]
    else:
        y0, u, y1, v = px[..., 0], px[..., 1], px[..., 2], px[..., 3]
    y = np.stack([y0, y1], -1).reshape(h, w) - 16.0
    u = np.repeat(u, 2, axis=1) - 128.0
    v = np.repeat(v, 2, axis=1) - 128.0
    r = 1.164 * y + 1.596 * v
    g = 1.164 * y - 0.392 * u - 0.813 * v
    b = 1.164 * y + 2.017 * u
    return np.clip(np.stack([r, g, b], -1) + 0.5, 0, 255).astype(np.uint8)


def decode_image(msg, where: str) -> np.ndarray:
    """sensor_msgs/Image to ``[H, W, C]`` in its own dtype: 8-bit colour as RGB(A), mono as C=1,
    16-bit and float depth kept (native byte order), packed YUV 4:2:2 to RGB."""
    enc = msg.encoding.lower()
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, dtype=np.uint8)
    if enc in YUV422:
        if w % 2 or step < 2 * w or data.size < h * step:
            raise ReaderError(f"{where}: {enc} image {w}x{h}, step {step}, holds {data.size} bytes")
        return _yuv422_to_rgb(np.ascontiguousarray(data[:h * step].reshape(h, step)[:, :2 * w]), h, w, YUV422[enc])
    if enc not in ENCODINGS:
        raise ReaderError(f"{where}: image encoding {msg.encoding!r} is not supported "
                          f"(supported: {sorted(ENCODINGS) + sorted(YUV422)})")
    c, code, order = ENCODINGS[enc]
    dt = np.dtype(code)
    row = w * c * dt.itemsize
    if step < row or data.size < h * step:
        raise ReaderError(f"{where}: {enc} image {w}x{h} needs {row} bytes a row and {h * step} in all; "
                          f"step is {step}, data {data.size} bytes")
    rows = np.ascontiguousarray(data[:h * step].reshape(h, step)[:, :row])
    img = rows.view(dt.newbyteorder(">" if msg.is_bigendian else "<")).reshape(h, w, c)
    img = img.astype(dt, copy=False)  # native byte order
    if order is not None:   # channel by channel: ~10x faster than one copy through img[..., ::-1]
        out = np.empty_like(img)
        for k, src in enumerate(order):
            out[..., k] = img[..., src]
        img = out
    return img


def _pil():
    return require("PIL.Image", "rosbag", "decoding CompressedImage topics (pip install pillow)")


def decode_compressed(msg, where: str) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg, png; image_transport's ``compressedDepth`` png too)
    to ``[H, W, C]``: colour as RGB uint8, grey as C=1, 16-bit png as uint16, compressedDepth
    32FC1 back to float32 metres (NaN where the depth was invalid)."""
    Image = _pil()
    fmt = msg.format.lower()
    buf = bytes(msg.data)
    depth = "compresseddepth" in fmt
    quant = None
    if depth:
        # image_transport's compressedDepth: a 12-byte header (format, depthQuantA, depthQuantB)
        if len(buf) < 12:
            raise ReaderError(f"{where}: compressedDepth image shorter than its 12-byte header")
        if "rvl" in fmt:
            raise ReaderError(f"{where}: compressedDepth format {msg.format!r} (RVL) is not supported")
        quant = np.frombuffer(buf[4:12], "<f4")
        buf = buf[12:]
    try:
        with Image.open(io.BytesIO(buf)) as im:
            if im.mode in ("P", "CMYK", "YCbCr", "LAB", "HSV", "1"):
                im = im.convert("RGB")
            elif im.mode == "LA":
                im = im.convert("RGBA")
            img = np.array(im)
    except Exception as e:
        raise ReaderError(f"{where}: cannot decode {msg.format!r} image ({len(buf)} bytes): {e}") from e
    if img.dtype == np.int32:        # PIL opens 16-bit png as I;16 or I (int32)
        img = img.astype(np.uint16)
    if quant is not None and fmt.startswith("32fc1"):      # compressedDepth (quant read above)
        a, b = float(quant[0]), float(quant[1])
        v = img.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            img = np.where(v > 0, a / (v - b), np.nan).astype(np.float32)
    return img[..., None] if img.ndim == 2 else img


def resize_image(img: np.ndarray, size, where: str) -> np.ndarray:
    Image = _pil()
    h, w = size
    if img.shape[:2] == (h, w):
        return img
    c = img.shape[2]
    if img.dtype == np.uint8 and c in (1, 3, 4):
        im = Image.fromarray(img[..., 0] if c == 1 else img)
        out = np.asarray(im.resize((w, h), Image.BILINEAR))
        return out[..., None] if out.ndim == 2 else out
    # 16-bit / float depth: per channel in float32 ("F" mode), back to the dtype
    chans = [np.asarray(Image.fromarray(img[..., k].astype(np.float32), "F").resize((w, h), Image.NEAREST))
             for k in range(c)]
    return np.stack(chans, -1).astype(img.dtype)
