"""Frames to an mp4 with PyAV's encoders (the demo's LeRobot set; LeRobot's own AV1 settings)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .._util import require


def pick_encoder(codec: str | None = None) -> str:
    """The first video encoder PyAV has of: LeRobot's default AV1 (libsvtav1), H.264, MPEG-4 part 2."""
    av = require("av", "lerobot", "encoding video")

    for name in ([codec] if codec else ["libsvtav1", "libx264", "mpeg4"]):
        try:
            av.codec.Codec(name, "w")
            return name
        except Exception:  # noqa: BLE001 - PyAV raises UnknownCodecError or ValueError by version
            if codec:
                raise ValueError(f"codec={codec!r}: this PyAV ({av.__version__}) has no such encoder") from None
    raise RuntimeError("PyAV has none of the encoders libsvtav1, libx264, mpeg4")


def encode_mp4(path, video: np.ndarray, codec: str, fps: int) -> None:
    """Frames [n, H, W, 3] uint8 into an mp4, one frame per 1/fps from t = 0."""
    av = require("av", "lerobot", "encoding video")
    H, W = video.shape[1:3]
    with av.open(str(path), "w") as out:
        opts = {"g": "2", "crf": "30"} if codec == "libsvtav1" else {"g": "2"}    # LeRobot's AV1 settings
        s = out.add_stream(codec, rate=fps, options=opts)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.codec_context.time_base = Fraction(1, fps)
        for i, img in enumerate(video):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, fps)
            out.mux(s.encode(f))
        out.mux(s.encode())
