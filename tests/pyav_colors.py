"""What the installed PyAV's ``to_ndarray(format="rgb24")`` makes of a frame's colour tags, the behaviour
robocache's probe follows (``video.probe.pyav_rgb_colors`` asks PyAV itself; these are the facts the tests
hold it to). PyAV 17 and later convert by the tags: the matrix of ``colorspace``, the range of ``color_range``
or a yuvj pixel format. PyAV 15 and 16, the releases LeRobot 0.4 pins, convert every 4:2:0 frame as BT.601
limited range whatever its tags (measured with 15.1 and 16.0); a yuvj format is still recorded full range
(robocache's probe asks PyAV with a yuvj frame of its own, which those releases convert as full range)."""

from __future__ import annotations


def follows_tags(av) -> bool:
    """Whether this PyAV converts by a frame's colour tags (17 and later)."""
    return int(av.__version__.split(".")[0]) >= 17


def applied(av, matrix: str, full_range: bool, *, yuvj: bool = False) -> tuple[str, bool]:
    """(matrix, full_range) this PyAV applies to a frame tagged ``matrix`` and ``full_range``."""
    return (matrix, full_range) if follows_tags(av) else ("bt601", yuvj)
