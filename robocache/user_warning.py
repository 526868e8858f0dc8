"""Warnings that point at the user's line.

A fixed ``stacklevel`` names the right line only for one call depth: the same warning reached from
``Dataset.from_rosbag`` and from ``read_rosbag``, or from a loader's generator, would name a line of
robocache's own. ``warn`` walks up to the first frame outside this package instead, so
``warning.filename`` / ``lineno`` are the caller's (``warnings.warn``'s ``skip_file_prefixes`` does
the same from Python 3.12; robocache supports 3.10).
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn"]

# the package folder with a separator, so "robocache_extras/x.py" is not taken for ours
PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the innermost caller outside robocache."""
    level, frame = 2, sys._getframe(1)        # stacklevel 2: whoever called this function
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]  # None ends the walk
    warnings.warn(message, category, stacklevel=level)
