"""robocache.viz: matplotlib views of a Dataset and of voxel grids, for notebooks.

- ``plot_episode``: each stream's raw samples (markers, at their own timestamps) against the
  curve ``Dataset.resample`` gives on one uniform grid (line): multi-rate alignment at a glance.
- ``show_frames``: a strip of an image stream's frames with their timestamps.
- ``voxels``: a voxel grid ``[X,Y,Z]`` as three max-projections or a 3-D scatter.

Every function returns the matplotlib ``Figure`` (drawn into ``ax=`` when given). Only what is
drawn is copied to the host, so CUDA datasets work as they are. matplotlib is imported when a
function is called: ``pip install robocache[viz]``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["plot_episode", "show_frames", "voxels"]

#: at most this many occupied voxels are scattered by ``voxels(view="3d")`` (evenly strided
#: beyond it: a 3-D scatter of millions of points is unreadable and slow)
MAX_SCATTER = 200_000
#: most points of plot_episode's resampling grid (a typo'd rate= should not fill the memory)
MAX_GRID = 2_000_000


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as e:
        raise ImportError("robocache.viz needs matplotlib: pip install robocache[viz]") from e
    return plt


def _host(a) -> np.ndarray:
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
            return _host(torch.from_dlpack(a))
    return np.asarray(a)


def _axes_list(ax, n: int, what: str):
    """``ax`` (one Axes or a sequence of them) as a list of n Axes; error when the count differs."""
    axes = list(np.ravel(np.asarray(ax, dtype=object))) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
    if len(axes) != n:
        raise ValueError(f"{what} draws {n} axes; ax= gave {len(axes)}")
    return axes


def _check_episode(ds, episode: int) -> int:
    E = len(ds)
    if not isinstance(episode, (int, np.integer)) or isinstance(episode, bool):
        raise TypeError(f"episode must be an int, got {type(episode).__name__}")
    if not -E <= episode < E:
        raise IndexError(f"episode {episode} out of range for {E} episodes")
    return int(episode) % E


def _episode_name(ds, e: int) -> str:
    """How titles name the episode at position e: the source's number (``Episode.index``: LeRobot's
    ``episode_index``, kept by ``from_lerobot(episodes=...)`` and ``subset``), and the position when they differ."""
    n = ds.episodes[e].index
    return f"episode {n}" if n == e else f"episode {n} (position {e})"


def _stream(ds, key: str):
    if key not in ds.streams:
        raise KeyError(f"no stream {key!r}; the dataset has: {', '.join(ds.streams)}")
    return ds.streams[key]


# ----------------------------------------------------------------------------
# plot_episode


def _dim_list(dims, D: int, key: str) -> list[int]:
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


def plot_episode(ds, episode: int, keys: str | Sequence[str] | None = None, *, rate: float | None = None,
                 mode: str | None = None, dims: int | Sequence[int] | None = None, ax=None):
    """Raw samples vs the resampled curve, one subplot per stream, for one episode.

    For each stream the episode's samples are drawn as markers at their own timestamps and the
    output of ``ds.resample`` on a uniform grid as a line of the same colour. The grid spans
    the episode over all the drawn streams (earliest first sample to latest last sample) at
    ``rate``; where a stream has no sample within its tolerance (``is_pad``) the line is left
    out. Streams of different rates therefore share one time axis, which is what the loader
    sees.

    Parameters
    ----------
    ds : robocache.Dataset
    episode : int
        Episode position, ``0 .. len(ds)-1`` (negative counts from the end); ``ds.position(n)`` gives the
        position of the source's episode n. Titles name the source's number (``Episode.index``).
    keys : str or list of str, optional
        Streams to draw (default: every continuous stream, at most 4). Image and point-cloud
        streams are refused (see ``show_frames``); text streams are drawn as their indices.
    rate : float, optional
        Grid rate in Hz. Default: the fastest of the drawn streams' measured rates.
    mode : str, optional
        Resample mode for every stream (default: each stream's own ``mode``).
    dims : int or list of int, optional
        Feature dims to draw of each multi-dim stream: a count (the first n) or indices into
        the flattened per-sample features. Default: the first 3.
    ax : Axes or sequence of Axes, optional
        One per key; default a new figure with one row per key.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    import torch

    e = _check_episode(ds, episode)
    if keys is None:
        keys = [n for n, s in ds.streams.items() if s.kind == "continuous"][:4]
        if not keys:
            raise ValueError("the dataset has no continuous stream; name the streams to draw with keys=")
    elif isinstance(keys, str):
        keys = [keys]
    keys = list(keys)
    if not keys:
        raise ValueError("keys is empty")
    streams = [_stream(ds, k) for k in keys]
    for s in streams:
        if s.kind in ("image", "pointcloud"):
            raise ValueError(f"stream {s.name!r} is a {s.kind} stream: plot_episode draws curves "
                             f"(use robocache.viz.show_frames for images)")

    # raw samples of the episode, on the host
    raw = []
    for s in streams:
        v, t = s.episode(e)
        v = _host(v)
        D = math.prod(s.shape)
        raw.append((v.reshape(v.shape[0], D).astype(np.float64), _host(t)))
    spans = [(t[0], t[-1]) for _, t in raw if t.shape[0]]
    if not spans:
        raise ValueError(f"{_episode_name(ds, e)} has no samples in {', '.join(map(repr, keys))}")
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)

    if rate is None:
        rates = [s.rate for s in streams if s.rate]
        if not rates:
            raise ValueError("no stream has a measured rate (one sample per episode?); give rate=")
        rate = max(rates)
    rate = float(rate)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a finite number > 0, got {rate}")
    T = int(math.floor((t1 - t0) * rate + 1e-9)) + 1
    if T > MAX_GRID:
        raise ValueError(f"a {rate:g} Hz grid over {t1 - t0:.3g} s is {T} points (more than {MAX_GRID}); "
                         f"give a lower rate=")
    grid = t0 + np.arange(T, dtype=np.float64) / rate
    grid_dev = torch.from_numpy(grid).to(ds.device)[None]
    index = torch.tensor([e], dtype=torch.int64, device=ds.device)

    if ax is None:
        fig, axes = plt.subplots(len(keys), 1, sharex=True, squeeze=False, figsize=(10.5, 2.4 * len(keys) + 0.4))
        axes = list(axes[:, 0])
    else:
        axes = _axes_list(ax, len(keys), "plot_episode")
        fig = axes[0].figure

    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for a, s, (v, t) in zip(axes, streams, raw):
        m = mode or s.mode
        D = v.shape[1]
        picked = _dim_list(dims, D, s.name)
        if t.shape[0]:
            out, pad = ds.resample(s.name, index, grid_dev, mode=m, return_mask=True)
            r = _host(out[0]).reshape(T, -1).astype(np.float64)
            r[_host(pad[0])] = np.nan
        else:
            r = np.full((T, D), np.nan)
        names = s.feature_names if s.feature_names and len(s.feature_names) == D else None
        handles = []
        for i, d in enumerate(picked):
            c = colors[i % len(colors)]
            label = names[d] if names else (f"[{d}]" if D > 1 else s.name)
            dots, = a.plot(t, v[:, d], linestyle="none", marker="o", markersize=3, color=c, alpha=0.6)
            line, = a.plot(grid, r[:, d], linestyle="-", linewidth=1.2, color=c)
            handles.append(((dots, line), label))
        shown = f", dims {picked}" if D > len(picked) else ""
        a.set_title(f"{s.name}: {len(t)} samples at {s.rate or 0:.4g} Hz (markers), {m} @ {rate:.4g} Hz (line)"
                    f"{shown}", fontsize=9, loc="left")
        if picked:
            # beside the axes, not over the curves; named features (LeRobot's names) label the lines
            a.legend([h for h, _ in handles], [lb for _, lb in handles], fontsize=7, loc="upper left",
                     bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, ncol=max(1, -(-len(picked) // 12)),
                     frameon=False)
    axes[-1].set_xlabel(f"time [s], {_episode_name(ds, e)}")
    if ax is None:
        fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------
# show_frames


def _as_image(frame: np.ndarray) -> np.ndarray:
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


def show_frames(ds, key: str, episode: int, *, times: Sequence[float] | None = None, n: int = 8, ax=None):
    """A strip of one image stream's frames, each titled with its timestamp.

    Parameters
    ----------
    ds : robocache.Dataset
    key : str
        An image stream: per-sample shape ``[H,W,C]`` (C = 1, 3 or 4) or ``[H,W]``, uint8 or
        float (floats above 1 are taken as 0..255); ``[C,H,W]`` is transposed.
    episode : int
        Episode position (as ``plot_episode``); the title names the source's number.
    times : list of float, optional
        Seconds (the dataset's time base); each shows the nearest frame (ties to the later
        frame, as ``resample(mode="nearest")``).
    n : int
        Without ``times``: n frames evenly spaced over the episode (all of them when it has
        fewer).
    ax : sequence of Axes, optional
        One per frame; default a new figure, one row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    import torch

    import robocache

    e = _check_episode(ds, episode)
    s = _stream(ds, key)
    if s.kind == "pointcloud" or not 2 <= len(s.shape) <= 3:
        raise ValueError(f"stream {key!r} ({s.kind}, per-sample shape {list(s.shape)}) is not an image stream")
    values, t = s.episode(e)
    th = _host(t)
    F = th.shape[0]
    if F == 0:
        raise ValueError(f"{_episode_name(ds, e)} has no frames in stream {key!r}")
    if times is not None:
        x = np.atleast_1d(np.asarray(times, dtype=np.float64))
        if x.ndim != 1 or x.size == 0:
            raise ValueError("times must be a non-empty list of seconds")
        if not np.all(np.isfinite(x)):
            raise ValueError("times must be finite")
        idx = robocache.resample(torch.arange(F, dtype=torch.int64), torch.from_numpy(np.ascontiguousarray(th)),
                                 torch.from_numpy(x), mode="nearest").numpy()
    else:
        if int(n) < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        idx = np.unique(np.linspace(0, F - 1, min(int(n), F)).round().astype(np.int64))
    # only the chosen frames leave the device
    frames = _host(values[torch.from_numpy(idx).to(values.device)])

    k = len(idx)
    if ax is None:
        fig, axes = plt.subplots(1, k, squeeze=False, figsize=(1.8 * k + 0.2, 2.2))
        axes = list(axes[0])
    else:
        axes = _axes_list(ax, k, "show_frames")
        fig = axes[0].figure
    for a, i, frame in zip(axes, idx, frames):
        img = _as_image(frame)
        a.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0 if img.ndim == 2 else None,
                 vmax=(1.0 if img.dtype.kind == "f" else 255) if img.ndim == 2 else None)
        a.set_title(f"t={th[i]:.3f} s", fontsize=8)
        a.set_axis_off()
    if ax is None:
        fig.suptitle(f"{key}, {_episode_name(ds, e)}", fontsize=9)
        fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------
# voxels


def voxels(grid, *, view: str = "max", ax=None, threshold: float = 0):
    """Draw a voxel grid as three max-projections or a 3-D scatter of its occupied voxels.

    Axes follow robocache.voxelize's layout ``out[b, x, y, z]`` (``out[b, c, x, y, z]`` for
    feature modes): the first grid axis is drawn as x, the second as y, the third as z, in
    voxel indices (voxel (0,0,0) at ``origin``; multiply by ``voxel_size`` for metres).

    Parameters
    ----------
    grid : array [X,Y,Z], or [B,X,Y,Z] / [F,X,Y,Z] / [B,F,X,Y,Z]
        torch (any device), numpy or DLPack. With more than 3 dims the first item is drawn
        (the first cloud of a batch, the first feature channel): ``grid[0]``, ``grid[0, 0]``.
    view : "max" or "3d"
        "max": three images, the maximum over z (XY, x right and y up), over y (XZ) and over x
        (YZ). "3d": the voxels above ``threshold`` as a 3-D scatter coloured by value (at most
        ``MAX_SCATTER`` of them, evenly strided).
    ax : optional
        "max": a sequence of 3 Axes; "3d": one Axes with ``projection="3d"``. Default: a new
        figure.
    threshold : float
        A voxel counts as occupied when its value is > threshold (default 0: any point,
        count or positive value). In "max" view, columns with no occupied voxel are blank.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    if view not in ("max", "3d"):
        raise ValueError(f"view must be 'max' or '3d', got {view!r}")
    g = grid
    nd = len(getattr(g, "shape", np.shape(g)))
    if nd < 3:
        raise ValueError(f"voxels needs a grid [X,Y,Z] (or with leading batch/feature dims), got {nd} dims")
    while nd > 3:
        g = g[0]
        nd -= 1
    v = _host(g).astype(np.float32)  # bool, uint8 and int grids too
    X, Y, Z = v.shape
    if v.size == 0:
        raise ValueError(f"voxel grid {list(v.shape)} is empty")
    occ = v > threshold

    if view == "max":
        if ax is None:
            fig, axes = plt.subplots(1, 3, figsize=(12, 4))
        else:
            axes = _axes_list(ax, 3, "voxels(view='max')")
            fig = axes[0].figure
        masked = np.where(occ, v, -np.inf)
        for a, over, (h, w), title in zip(axes, (2, 1, 0), (("x", "y"), ("x", "z"), ("y", "z")),
                                          ("XY (max over z)", "XZ (max over y)", "YZ (max over x)")):
            p = masked.max(axis=over)
            p = np.where(np.isfinite(p), p, np.nan)
            # rows of imshow are the vertical axis: transpose so the first named axis runs right
            a.imshow(p.T, origin="lower", aspect="equal" if over == 2 else "auto", interpolation="nearest",
                          cmap="viridis")
            a.set_xlabel(h)
            a.set_ylabel(w)
            a.set_title(title, fontsize=9)
        if ax is None:
            fig.suptitle(f"voxel grid [{X},{Y},{Z}], {int(occ.sum())} voxels > {threshold}", fontsize=9)
            fig.tight_layout()
        return fig

    if ax is None:
        fig = plt.figure(figsize=(7, 6))
        a = fig.add_subplot(projection="3d")
    else:
        a = ax
        if getattr(a, "name", "") != "3d":
            raise ValueError("voxels(view='3d') needs an Axes made with projection='3d'")
        fig = a.figure
    xs, ys, zs = np.nonzero(occ)
    total = xs.shape[0]
    if total > MAX_SCATTER:
        step = -(-total // MAX_SCATTER)
        xs, ys, zs = xs[::step], ys[::step], zs[::step]
    a.scatter(xs, ys, zs, c=v[xs, ys, zs], s=2, marker="s", cmap="viridis", depthshade=False)
    a.set_xlim(0, X)
    a.set_ylim(0, Y)
    a.set_zlim(0, Z)
    a.set_xlabel("x")
    a.set_ylabel("y")
    a.set_zlabel("z")
    drawn = f" ({xs.shape[0]} drawn)" if xs.shape[0] != total else ""
    a.set_title(f"voxel grid [{X},{Y},{Z}], {total} voxels > {threshold}{drawn}", fontsize=9)
    return fig
