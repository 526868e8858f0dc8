"""Still images (PNG, JPEG bytes, as LeRobot's image features store them in parquet) to uint8 arrays:
OpenCV when installed, else Pillow."""

from __future__ import annotations

import io

import numpy as np

from .._util import require


def decode_images(blobs) -> np.ndarray:
    """Encoded images (bytes each, one size) -> uint8 ``[n, H, W, C]`` (RGB, or C = 1 for grayscale).
    Raises ValueError naming the first image that does not decode."""
    try:
        import cv2  # type: ignore[import-not-found]  # optional, no stubs where absent

        def dec(b):
            img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_UNCHANGED)
            if img is None:
                raise ValueError("undecodable image")
            return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if img.ndim == 3 and img.shape[2] == 3 else img
    except ImportError:
        pil = require("PIL.Image", "lerobot", "decoding parquet images (pip install pillow)")

        def dec(b):
            return np.asarray(pil.open(io.BytesIO(b)))
    imgs = []
    for k, b in enumerate(blobs):
        try:
            imgs.append(dec(b))
        except Exception as e:
            raise ValueError(f"image {k}: {e}") from e
    out = np.stack(imgs)
    return out[..., None] if out.ndim == 3 else out
