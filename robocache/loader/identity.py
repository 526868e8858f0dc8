"""Who each sample of a batch is (the loader's ``identity=``): LeRobot's batch keys.

The tables are built once per dataset the loader holds (``[E]`` per episode, ``[N]`` per sample on the
device, the task text per sample on the host); a batch gathers from them on the device (inside the CUDA
graph too, no host sync), and its ``task`` text is picked on the host from the epoch's host-side order.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .._util import torch as _torch

#: what ``identity=True`` adds to every batch: who each sample is (LeRobot's batch keys)
IDENTITY = ("episode_index", "frame_index", "timestamp", "index", "task_index", "task")
#: asked for by name only: ``row``, the sample's row in ``loader.samples`` (``index`` is LeRobot's)
EXTRA = ("row",)


def identity_keys(identity: bool | str | Iterable[str] | None, windows) -> tuple[str, ...]:
    """The identity keys asked for, in ``IDENTITY``'s order; an unknown key, or one a window's keys
    already take, is an error naming it."""
    if identity is True:
        keys: tuple = IDENTITY
    elif identity is False or identity is None:
        keys = ()
    else:
        keys = (identity,) if isinstance(identity, str) else tuple(identity)
        unknown = [k for k in keys if k not in IDENTITY + EXTRA]
        if unknown:
            raise ValueError(f"identity: unknown keys {unknown}; choose from {list(IDENTITY + EXTRA)} "
                             "(or True for all but row)")
    clash = [k for k in keys if k in windows or any(k == w + suffix for w in windows
                                                      for suffix in ("_is_pad", "_dim_mask"))]
    if clash:
        raise ValueError(f"identity: windows already have the keys {clash}; rename those windows")
    return tuple(k for k in IDENTITY + EXTRA if k in keys)


class Identity:
    """The identity keys of a loader's batches over ``ds``, whose samples are ``host_table``'s
    ``(episode [N], anchor time [N])`` host numpy, grouped by episode. ``tensors``: the keys made
    on the device (all but ``task``); with any, the loader's epoch tables hold sample rows, not
    episodes."""

    def __init__(self, keys: tuple[str, ...], ds, host_table) -> None:
        torch = _torch()
        self.keys = keys
        self.tensors = tuple(k for k in keys if k != "task")
        self._text: Any = None
        self._tables: dict = {}
        if not keys:
            return
        dev = ds.device
        ep_h, t_h = host_table()                   # host copies, once (construction may sync)
        first = np.searchsorted(ep_h, np.arange(len(ds)), side="left")     # the table is grouped by episode
        task = ds.frame_task_index(ep_h, t_h)      # per sample: a task may change within an episode
        frame = np.arange(ep_h.size) - first[ep_h]
        index = lerobot_index(ds, ep_h, frame)
        self._tables = {"episode_index": torch.from_numpy(ds.episode_index).to(dev),
                        "frame_index": torch.from_numpy(frame).to(dev), "task_index": torch.from_numpy(task).to(dev),
                        **({"index": torch.from_numpy(index).to(dev)} if index is not None else {})}
        text = np.array([*ds.tasks, ""], dtype=object)         # -1 (no task) -> ""
        self._text = text[task] if "task" in keys else None

    def add(self, rows, ep, t, out: dict) -> None:
        """The identity tensors of a batch into ``out``: ``rows`` (sample rows), ``ep`` (episode
        positions), ``t`` (anchor times), ``[B]`` each; gathers from the tables, copies of the views."""
        ids = self._tables
        make = {"episode_index": lambda: ids["episode_index"].index_select(0, ep),
                "frame_index": lambda: ids["frame_index"].index_select(0, rows),
                "timestamp": lambda: t.clone(), "row": lambda: rows.clone(),
                "index": lambda: ids["index"].index_select(0, rows) if "index" in ids else rows.clone(),
                "task_index": lambda: ids["task_index"].index_select(0, rows)}
        for k in self.tensors:
            out[k] = make[k]()

    def attach_task(self, batch, host_order, k: int, batch_size: int) -> None:
        """``batch["task"]``: the task text of batch k's samples from the epoch's host-side order (a
        Python list is no tensor: attached after the batch is made, outside any graph, never read from
        the GPU)."""
        if self._text is not None and isinstance(batch, dict):
            batch["task"] = self._text[host_order[k * batch_size:(k + 1) * batch_size]].tolist()


def lerobot_index(ds, episodes, frame_index) -> np.ndarray | None:
    """LeRobot's dataset-wide ``index`` of frames given as (episode position in ``ds`` [n], step within it
    [n]): the source's ``index`` column of each episode's first row plus the step, whatever subset of
    episodes is loaded. None when the source has no such column (not a LeRobot set)."""
    first = getattr(getattr(ds, "meta", None), "first_index", None)
    if not first or any(int(e) not in first for e in ds.episode_index):
        return None
    starts = np.array([first[int(e)] for e in ds.episode_index], np.int64)
    return starts[np.asarray(episodes)] + np.asarray(frame_index, np.int64)
