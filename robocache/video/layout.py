"""How a decoded frame is laid out in a row of bytes: ``FrameSpec`` (format, size, color facts) and the
copy of a decoder's planes into an I420 row."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .. import _C


def yuv420_bytes(height: int, width: int) -> int:
    """Bytes of one I420 frame: the Y plane plus two chroma planes of ceil(H/2) x ceil(W/2)."""
    return height * width + 2 * ((height + 1) // 2) * ((width + 1) // 2)


def yuv420_geometry(h: int, w: int) -> tuple:
    """_C.copy_planes' geometry of an I420 row: Y [h, w], U and V [ceil(h/2), ceil(w/2)]."""
    ch, cw = (h + 1) // 2, (w + 1) // 2
    return ((h, w), (ch, cw), (ch, cw))


def copy_planes(planes, dst: np.ndarray, geometry) -> None:
    """A decoder's planes (rows of line_size >= row_bytes bytes, alignment padding at the end) into
    dst, their rows back to back: one C call per frame, which releases the GIL once for all of them
    (_C.copy_planes; three NumPy copies were three GIL hand-overs per frame for 16 decode workers)."""
    _C.copy_planes(dst, planes, geometry)


@dataclass(frozen=True)
class FrameSpec:
    """The geometry of a stream's decoded frames (after resize).

    format      "yuv420": one row of ``frame_bytes`` = H*W + 2*ch*cw bytes per frame (Y plane H x W,
                then U, then V, each ch x cw with ch = (H+1)//2, cw = (W+1)//2, no padding);
                "rgb": rows [H, W, 3] uint8
    height, width, channels (3)
    matrix      "bt601" | "bt709" | "bt2020": the matrix that turns the stored YUV into the RGB PyAV's
                ``to_ndarray(format="rgb24")`` gives; for "rgb" the source's, informational ("" when
                the backend converted without saying how)
    full_range  True: Y/U/V span 0-255 (JPEG range); False: limited (Y 16-235, U/V 16-240)
    frame_bytes bytes per stored frame
    """

    format: str
    height: int
    width: int
    channels: int
    matrix: str
    full_range: bool
    frame_bytes: int

    @classmethod
    def make(cls, format: str, height: int, width: int, matrix: str = "", full_range: bool = False) -> FrameSpec:
        if format == "yuv420":
            nbytes = yuv420_bytes(height, width)
        elif format == "rgb":
            nbytes = height * width * 3
        else:
            raise ValueError(f"format must be 'yuv420' or 'rgb', got {format!r}")
        return cls(format, int(height), int(width), 3, matrix, bool(full_range), int(nbytes))

    @classmethod
    def from_dict(cls, m: dict) -> FrameSpec:
        return cls(m["format"], int(m["height"]), int(m["width"]), int(m["channels"]), m["matrix"],
                   bool(m["full_range"]), int(m["frame_bytes"]))

    @property
    def chroma_shape(self) -> tuple[int, int]:
        return (self.height + 1) // 2, (self.width + 1) // 2

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one frame in the tier buffer: (frame_bytes,) for yuv420, (H, W, 3) for rgb."""
        return (self.frame_bytes,) if self.format == "yuv420" else (self.height, self.width, 3)

    @property
    def geometry(self) -> tuple:
        """copy_planes' geometry of one row."""
        return yuv420_geometry(self.height, self.width) if self.format == "yuv420" else ((self.height, self.width * 3),)

    def to_dict(self) -> dict:
        return asdict(self)
