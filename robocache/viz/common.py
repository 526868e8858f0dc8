"""What the robocache.viz modules share: matplotlib on demand, arrays to the host, argument checks."""

from __future__ import annotations

import numpy as np


def pyplot():
    try:
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as e:
        raise ImportError('robocache.viz needs matplotlib: pip install "robocache[viz]", or from a checkout of '
                          'robocache: pip install -e ".[viz]" (or only it: pip install matplotlib)') from e
    return plt


def host(a) -> np.ndarray:
    """A numpy copy (or view) on the host of a torch tensor (any device), numpy array or
    DLPack array. bfloat16/float16 become float32 (numpy/matplotlib draw neither)."""
    if isinstance(a, np.ndarray):
        return a
    mod = type(a).__module__.split(".")[0]
    if mod == "torch":
        import torch
        t = a.detach()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.cpu().numpy()
    if hasattr(a, "__dlpack__"):
        try:
            return np.from_dlpack(a)
        except (RuntimeError, BufferError, TypeError):
            import torch  # a device array (cupy, jax on GPU): through torch to the host
            return host(torch.from_dlpack(a))
    return np.asarray(a)


def axes_list(ax, n: int, what: str):
    """``ax`` (one Axes or a sequence of them) as a list of n Axes; error when the count differs."""
    axes = list(np.ravel(np.asarray(ax, dtype=object))) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
    if len(axes) != n:
        raise ValueError(f"{what} draws {n} axes; ax= gave {len(axes)}")
    return axes


def check_episode(ds, episode: int) -> int:
    E = len(ds)
    if not isinstance(episode, (int, np.integer)) or isinstance(episode, bool):
        raise TypeError(f"episode must be an int, got {type(episode).__name__}")
    if not -E <= episode < E:
        raise IndexError(f"episode {episode} out of range for {E} episodes")
    return int(episode) % E


def episode_name(ds, e: int) -> str:
    """How titles name the episode at position e: the source's number (``Episode.index``: LeRobot's
    ``episode_index``, kept by ``from_lerobot(episodes=...)`` and ``subset``), and the position when they differ."""
    n = ds.episodes[e].index
    return f"episode {n}" if n == e else f"episode {n} (position {e})"


def stream(ds, key: str):
    if key not in ds.streams:
        raise KeyError(f"no stream {key!r}; the dataset has: {', '.join(ds.streams)}")
    return ds.streams[key]


def as_image(frame: np.ndarray) -> np.ndarray:
    """One frame as something imshow draws: [H,W], [H,W,3] or [H,W,4]; channel-first [C,H,W]
    is transposed, float frames with values above 1 are taken as 0..255."""
    if frame.ndim == 3 and frame.shape[-1] not in (1, 3, 4) and frame.shape[0] in (1, 3, 4):
        frame = np.moveaxis(frame, 0, -1)
    if frame.ndim == 3 and frame.shape[-1] == 1:
        frame = frame[..., 0]
    if frame.dtype == np.bool_:
        frame = frame.astype(np.uint8) * 255
    if frame.dtype.kind == "f":
        frame = frame.astype(np.float32)
        hi = np.nanmax(frame) if frame.size else 0.0
        if hi > 1.0:
            frame = frame / 255.0
        frame = np.clip(frame, 0.0, 1.0)
    elif frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    return frame


def dim_list(dims, D: int, key: str) -> list[int]:
    if dims is None:
        return list(range(min(3, D)))
    if isinstance(dims, (int, np.integer)):
        if dims < 1:
            raise ValueError(f"dims={dims}: give a count >= 1 or a list of feature indices")
        return list(range(min(int(dims), D)))
    out = [int(d) for d in dims]
    for d in out:
        if not -D <= d < D:
            raise IndexError(f"dims: feature {d} out of range for stream {key!r} with {D} features")
    return [d % D for d in out]
