"""LeRobot image features stored in the parquet (``dtype: "image"``, what ``LeRobotDataset.create(...,
use_videos=False)`` writes, v2.x and v3.0 alike), decoded to the values LeRobot's items hold.

Each cell is a struct ``{bytes, path}`` holding one encoded image: PNG, or TIFF for LeRobot 0.6's depth
maps. LeRobot makes a tensor of it by its PIL mode (``lerobot.datasets.io_utils.pil_to_chw_tensor``):
8-bit RGB or grayscale to float32 / 255; 16-bit (``I;16``) and float (``F``) maps to float32 in their
native units, and a depth feature recorded in metres (``info.depth_unit: "m"``) in millimetres, LeRobot's
default output unit. The frames kept here are uint8 (batches divide by 255, as LeRobot) or float32 in
those units (batches pass them on as they are).
"""

from __future__ import annotations

import numpy as np

from ._common import ReaderError
from ..video.images import decode_images

#: LeRobot's default unit for depth maps (``configs.video.DEFAULT_DEPTH_UNIT``) and metres -> it
DEPTH_UNIT = "mm"
MM_PER_METRE = 1000.0


def is_depth_map(feature: dict) -> bool:
    """Whether LeRobot flags ``feature`` as a depth map: ``info.is_depth_map``, or the legacy
    ``video.is_depth_map`` in ``info`` or ``video_info`` (``lerobot.configs.video.is_depth_map``)."""
    info = feature.get("info") or {}
    video_info = feature.get("video_info")
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map")
                or (isinstance(video_info, dict) and video_info.get("video.is_depth_map")))


def decode_image_column(col, name: str, feature: dict, where: str) -> np.ndarray:
    """One parquet image column to ``[n, H, W, C]``: uint8 for 8-bit images, float32 for 16-bit and float
    maps (depth in millimetres where the feature records metres). ReaderError naming ``where`` and the
    column for a cell without image bytes, an image that does not decode, or one of another bit depth."""
    cells = col.to_pylist()
    empty = next((k for k, c in enumerate(cells) if not isinstance(c, dict) or c.get("bytes") is None), None)
    if empty is not None:
        path = cells[empty].get("path") if isinstance(cells[empty], dict) else None
        # LeRobot's writers embed every image; a cell naming only a file is not resolved against the set's
        # root by LeRobot either (its loader opens the path from the working directory)
        raise ReaderError(f"{where}: column '{name}' row {empty} holds no image bytes"
                          f"{f' (only the path {path!r})' if path else ''}; LeRobot sets embed each image in "
                          f"the parquet file")
    try:
        values = decode_images([c["bytes"] for c in cells])
    except ValueError as e:
        raise ReaderError(f"{where}: cannot decode image column '{name}': {e}") from e
    if values.dtype == np.uint8:
        return values
    if values.dtype.kind not in "uif":
        raise ReaderError(f"{where}: image column '{name}' decodes to {values.dtype}; LeRobot's images are 8-bit, "
                          f"16-bit or float")
    values = values.astype(np.float32)
    if is_depth_map(feature) and (feature.get("info") or {}).get("depth_unit") == "m":
        values *= MM_PER_METRE
    return values
