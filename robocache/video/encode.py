"""Frames to an mp4 with PyAV's encoders (the demo's LeRobot set; LeRobot's own AV1 settings).

Imports nothing of robocache at module level: the AV1 encode runs this file in a child process (see
``encode_mp4``), which then needs only PyAV and NumPy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

#: tries of an AV1 encode before giving up, and its deadline: generous (a loaded 2-core machine encodes
#: the demo's frames in seconds; a deadline missed only costs a retry)
AV1_TRIES = 3
AV1_DEADLINE_S = 120.0


def _av():
    from .._util import require
    return require("av", "lerobot", "encoding video")


def pick_encoder(codec: str | None = None) -> str:
    """The first video encoder PyAV has of: LeRobot's default AV1 (libsvtav1), H.264, MPEG-4 part 2."""
    av = _av()
    for name in ([codec] if codec else ["libsvtav1", "libx264", "mpeg4"]):
        try:
            av.codec.Codec(name, "w")
            return name
        except Exception:  # noqa: BLE001 - PyAV raises UnknownCodecError or ValueError by version
            if codec:
                raise ValueError(f"codec={codec!r}: this PyAV ({av.__version__}) has no such encoder") from None
    raise RuntimeError("PyAV has none of the encoders libsvtav1, libx264, mpeg4")


def encode_mp4(path, video: np.ndarray, codec: str, fps: int, options: dict | None = None,
               container_options: dict | None = None, *, pix_fmt: str = "yuv420p", colorspace: int | None = None,
               color_range: int | None = None, input_format: str = "rgb24") -> None:
    """Frames [n, H, W, 3] uint8 RGB (``input_format="yuv420p"``: I420 planes [n, H * 3 / 2, W], as decoders
    hand them back) into an mp4, one frame per 1/fps from t = 0. ``options`` are the encoder's
    (LeRobot's settings when None), ``container_options`` the muxer's (``{"movflags": "faststart"}``, say).
    ``colorspace`` and ``color_range`` (FFmpeg's AVColorSpace / AVColorRange numbers: colorspace 1 BT.709,
    9 BT.2020; color_range 1 limited, 2 full) tag the stream, and the frames are converted to ``pix_fmt``
    with that matrix and range, so the pixels say what the tags say; untagged by default, as LeRobot writes.

    SVT-AV1, the AV1 encoder PyAV bundles, now and then stops for good inside ``svt_av1_enc_send_picture``
    on a loaded machine (an encoder deadlock: idle CPU, no error; seen about once in 40 demo sets on the
    2-core CI machine, SVT-AV1 issues 2300 and 2311). So an AV1 encode runs in a child process with a
    deadline, started again when it misses it; a process stopped for good is killed, not waited on."""
    _av()                                   # a clear error here when PyAV is missing, not in the child
    kw: dict[str, Any] = {"options": options, "container_options": container_options, "pix_fmt": pix_fmt,
                          "colorspace": colorspace, "color_range": color_range, "input_format": input_format}
    if codec != "libsvtav1":
        encode_frames(path, video, codec, fps, **kw)
        return
    with tempfile.TemporaryDirectory(prefix="robocache-encode-") as tmp:
        frames, part = Path(tmp) / "frames.npy", Path(tmp) / "out.mp4"
        np.save(frames, np.ascontiguousarray(video))
        run = (f"import json, runpy, sys, numpy as np; runpy.run_path({__file__!r})['encode_frames']"
               f"(sys.argv[1], np.load(sys.argv[2]), sys.argv[3], int(sys.argv[4]), **json.loads(sys.argv[5]))")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        for attempt in range(1, AV1_TRIES + 1):
            try:
                done = subprocess.run([sys.executable, "-c", run, str(part), str(frames), codec, str(int(fps)),
                                       json.dumps(kw)],
                                      env=env, capture_output=True, text=True, timeout=AV1_DEADLINE_S)
            except subprocess.TimeoutExpired:
                continue                    # the deadlock above: the child was killed, start it again
            if done.returncode != 0:
                raise RuntimeError(f"{path}: encoding {len(video)} frames with {codec} failed: "
                                   f"{done.stderr.strip()[-2000:]}")
            _move(part, Path(path))
            return
    raise RuntimeError(f"{path}: the {codec} encoder stopped without finishing {len(video)} frames {AV1_TRIES} "
                       f"times ({AV1_DEADLINE_S:.0f} s each); encode with codec='libx264' instead")


def _move(src: Path, dst: Path) -> None:
    """``src`` to ``dst`` (another file system, possibly): copied, then renamed into place."""
    import shutil
    tmp = dst.with_name(dst.name + ".part")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def encode_frames(path, video: np.ndarray, codec: str, fps: int, options: dict | None = None,
                  container_options: dict | None = None, pix_fmt: str = "yuv420p", colorspace: int | None = None,
                  color_range: int | None = None, input_format: str = "rgb24") -> None:
    """The encode itself, in this process (PyAV and NumPy only)."""
    import av
    H, W = video.shape[1:3] if input_format == "rgb24" else (video.shape[1] * 2 // 3, video.shape[2])
    if options is None:
        options = {"g": "2", "crf": "30"} if codec == "libsvtav1" else {"g": "2"}    # LeRobot's AV1 settings
    with av.open(str(path), "w", options=container_options or {}) as out:
        s: Any = out.add_stream(codec, rate=fps, options=options)  # a VideoStream (PyAV types it as any stream)
        s.width, s.height, s.pix_fmt = W, H, pix_fmt
        s.codec_context.time_base = Fraction(1, fps)
        tagged = colorspace is not None or color_range is not None
        if colorspace is not None:
            s.codec_context.colorspace = colorspace
        if color_range is not None:
            s.codec_context.color_range = color_range
        for i, img in enumerate(video):
            f = av.VideoFrame.from_ndarray(img, format=input_format)
            if tagged or pix_fmt != "yuv420p":     # converted by the tags' matrix and range (the encoder's own
                f = f.reformat(format=pix_fmt, dst_colorspace=colorspace, dst_color_range=color_range)  # is 601)
            f.pts, f.time_base = i, Fraction(1, fps)
            out.mux(s.encode(f))
        out.mux(s.encode())
