"""LeRobot's contract for a drop-in (DESIGN.md §3d): its dataset metadata, its ``delta_timestamps``, its
batch format.

``DataLoader(ds, B, delta_timestamps=dt)`` yields, batch for batch, what ``torch.utils.data.default_collate``
of ``LeRobotDataset(..., delta_timestamps=dt)`` items gives for the same samples:

- every feature of the dataset (LeRobot's ``info.json`` features present as streams); a key in ``dt`` with a
  time axis ``[B, T, ...]`` and ``{key}_is_pad`` ``[B, T]``, every other key without either (``[B, ...]``);
- camera images float32 CHW in [0, 1], contiguous (``[B, C, H, W]``, or ``[B, T, C, H, W]`` in ``dt``);
- ``timestamp`` float32, ``frame_index``, ``episode_index``, ``index`` (dataset-wide, whatever episodes are
  loaded), ``task_index`` (the frame's own) int64 ``[B]``, ``task`` a list of B strings;
- offsets are LeRobot's: ``round(d * fps)`` frames from the sample's frame (Python's round), clamped into the
  episode (the edge frame repeated) and padded where outside; a delta off the ``1 / fps`` grid by more than
  ``tolerance_s`` (LeRobot's 1e-4 s) is a ValueError naming the key and the values.

The batch is made on the device like every robocache batch (windows of ``indices`` at ``fps``, then views,
casts and one contiguous copy for images): no host sync, CUDA graphs as for any loader.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .._util import torch as _torch_module

#: LeRobot's bookkeeping columns: batch keys of their own, never windows
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
TOLERANCE_S = 1e-4


def check_delta_timestamps(delta_timestamps: Mapping, fps: float, tolerance_s: float = TOLERANCE_S) -> None:
    """LeRobot's check: every delta a multiple of ``1 / fps`` within ``tolerance_s``; else a ValueError naming
    each key and its values off the grid."""
    if not isinstance(delta_timestamps, Mapping):
        raise TypeError(f"delta_timestamps: expected a dict {{key: [seconds, ...]}}, got "
                        f"{type(delta_timestamps).__name__}")
    off = {}
    for key, deltas in delta_timestamps.items():
        if isinstance(deltas, (str, bytes)) or not hasattr(deltas, "__iter__"):
            raise TypeError(f"delta_timestamps[{key!r}]: expected a list of seconds, got {deltas!r}")
        values = [float(d) for d in deltas]
        if not values:
            raise ValueError(f"delta_timestamps[{key!r}] is empty; give at least one offset (e.g. [0.0])")
        bad = [d for d in values if not np.isfinite(d) or abs(d * fps - round(d * fps)) / fps > tolerance_s]
        if bad:
            off[key] = bad
    if off:
        raise ValueError(f"delta_timestamps: values off the 1/{fps:g} s frame grid by more than tolerance_s="
                         f"{tolerance_s:g} s (LeRobot raises the same; use multiples of {1 / fps:.6g} s): {off}")


def delta_indices(delta_timestamps: Mapping, fps: float) -> dict[str, list[int]]:
    """``{key: [round(d * fps), ...]}``: LeRobot's frame offsets (Python's round, half to even)."""
    return {k: [round(float(d) * fps) for d in v] for k, v in delta_timestamps.items()}


class LeRobotBatches:
    """The windows that make LeRobot's batch keys, and the per-batch step that gives them LeRobot's shapes
    and dtypes (views and casts on the device)."""

    def __init__(self, ds, delta_timestamps: Mapping | None, tolerance_s: float = TOLERANCE_S, image_transforms=None):
        from ..loader.windows import Window

        if delta_timestamps is None:
            raise ValueError("image_transforms: for LeRobot's batches (with delta_timestamps); a Window takes "
                             "augment= otherwise")

        fps = dataset_fps(ds)
        check_delta_timestamps(delta_timestamps, fps, tolerance_s)
        features = feature_keys(ds)
        unknown = [k for k in delta_timestamps if k not in features and k not in BOOKKEEPING]
        if unknown:
            raise ValueError(f"delta_timestamps: {unknown} are not features of this dataset; its features are "
                             f"{features}")
        steps = delta_indices(delta_timestamps, fps)
        self.timed = [k for k in features if k in steps]
        self.flat = [k for k in features if k not in steps]
        self.images = {k for k in features if ds.streams[k].kind == "image"}
        self.windows: dict[str, Any] = {}
        for k in features:
            kw: dict[str, Any] = {"layout": "BTCHW", "augment": image_transforms} if k in self.images else {}
            self.windows[k] = Window(k, indices=steps.get(k, [0]), rate=fps, mode="nearest", **kw)

    def __call__(self, batch: dict) -> dict:
        torch = _torch_module()
        for k in self.flat:
            batch[k] = batch[k][:, 0]
            batch.pop(f"{k}_is_pad", None)
        for k in self.images:
            batch[k] = batch[k].contiguous()          # LeRobot's frames are NCHW in memory
        if "timestamp" in batch:
            batch["timestamp"] = batch["timestamp"].to(torch.float32)
        return batch


def dataset_fps(ds) -> float:
    """The set's frame rate (``ds.fps``), which ``delta_timestamps`` needs."""
    fps = ds.fps
    if not fps:
        raise ValueError("delta_timestamps needs the dataset's fps: it is not a LeRobot set and its anchor stream "
                         "has no rate")
    return float(fps)


def feature_keys(ds) -> list[str]:
    """The LeRobot features a batch holds: ``info.json``'s features that are streams here (a LeRobot set), or
    every stream but text ones; LeRobot's bookkeeping columns are batch keys of their own."""
    meta = getattr(ds, "meta", None)
    names = list(meta.features) if meta is not None else list(ds.streams)
    return [k for k in names if k in ds.streams and k not in BOOKKEEPING and ds.streams[k].kind != "text"]
