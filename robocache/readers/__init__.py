"""File readers: LeRobot v2.x/v3 (+ GR00T modality.json), robomimic HDF5, diffusion-policy zarr,
ROS 1/ROS 2 bags and MCAP.

Each ``read_<format>`` reads the files once (read-only) into plain NumPy episodes, an ``Episodes``
(the keyword arguments of ``Dataset.from_episodes``); readers know nothing of ``Dataset``:
``Dataset.from_<format>`` builds one from what they read. Optional
dependencies are imported when used: ``pip install -e ".[lerobot]"`` from a checkout (``pip install
"robocache[lerobot]"`` from a package index) for pyarrow and av, ``[robomimic]`` (h5py), ``[zarr]``
(zarr), ``[rosbag]`` (rosbags).
A missing, corrupt or truncated file raises ``ReaderError`` (a ValueError) naming the file. Differences from LeRobot / GR00T /
robomimic / diffusion-policy semantics: docs/dataset.md, "Readers".
"""

from __future__ import annotations

from ._common import Episodes, ReaderError
from .lerobot import is_repo_id, lerobot_home, lerobot_root, read_lerobot, read_modality, read_stats
from .robomimic import read_robomimic
from .rosbag import read_rosbag
from ..video import available_backends, decode_video, decode_videos
from .zarr_store import read_zarr

__all__ = ["Episodes", "ReaderError", "available_backends", "decode_video", "decode_videos", "is_repo_id",
           "lerobot_home", "lerobot_root", "read_lerobot", "read_modality", "read_robomimic", "read_rosbag",
           "read_stats", "read_zarr"]
