"""plot_episode (raw samples against the resampled curve per stream) and show_frames (a strip of
an image stream's frames)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .common import as_image, axes_list, check_episode, dim_list, episode_name, host, pyplot, stream

#: most points of plot_episode's resampling grid (a typo'd rate= should not fill the memory)
MAX_GRID = 2_000_000


# ----------------------------------------------------------------------------
# plot_episode


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
    plt = pyplot()
    import torch

    e = check_episode(ds, episode)
    if keys is None:
        keys = [n for n, s in ds.streams.items() if s.kind == "continuous"][:4]
        if not keys:
            raise ValueError("the dataset has no continuous stream; name the streams to draw with keys=")
    elif isinstance(keys, str):
        keys = [keys]
    keys = list(keys)
    if not keys:
        raise ValueError("keys is empty")
    streams = [stream(ds, k) for k in keys]
    for s in streams:
        if s.kind in ("image", "pointcloud"):
            raise ValueError(f"stream {s.name!r} is a {s.kind} stream: plot_episode draws curves "
                             f"(use robocache.viz.show_frames for images)")

    # raw samples of the episode, on the host
    raw = []
    for s in streams:
        v, t = s.episode(e)
        v = host(v)
        D = math.prod(s.shape)
        raw.append((v.reshape(v.shape[0], D).astype(np.float64), host(t)))
    spans = [(t[0], t[-1]) for _, t in raw if t.shape[0]]
    if not spans:
        raise ValueError(f"{episode_name(ds, e)} has no samples in {', '.join(map(repr, keys))}")
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
        axes = axes_list(ax, len(keys), "plot_episode")
        fig = axes[0].figure

    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for a, s, (v, t) in zip(axes, streams, raw):
        m = mode or s.mode
        D = v.shape[1]
        picked = dim_list(dims, D, s.name)
        if t.shape[0]:
            out, pad = ds.resample(s.name, index, grid_dev, mode=m, return_mask=True)
            r = host(out[0]).reshape(T, -1).astype(np.float64)
            r[host(pad[0])] = np.nan
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
    axes[-1].set_xlabel(f"time [s], {episode_name(ds, e)}")
    if ax is None:
        fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------
# show_frames


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
    plt = pyplot()
    import torch

    from .._C import resample

    e = check_episode(ds, episode)
    s = stream(ds, key)
    if s.kind == "pointcloud" or not 2 <= len(s.shape) <= 3:
        raise ValueError(f"stream {key!r} ({s.kind}, per-sample shape {list(s.shape)}) is not an image stream")
    values, t = s.episode(e)
    th = host(t)
    F = th.shape[0]
    if F == 0:
        raise ValueError(f"{episode_name(ds, e)} has no frames in stream {key!r}")
    if times is not None:
        x = np.atleast_1d(np.asarray(times, dtype=np.float64))
        if x.ndim != 1 or x.size == 0:
            raise ValueError("times must be a non-empty list of seconds")
        if not np.all(np.isfinite(x)):
            raise ValueError("times must be finite")
        idx = resample(torch.arange(F, dtype=torch.int64), torch.from_numpy(np.ascontiguousarray(th)),
                                 torch.from_numpy(x), mode="nearest").numpy()
    else:
        if int(n) < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        idx = np.unique(np.linspace(0, F - 1, min(int(n), F)).round().astype(np.int64))
    # only the chosen frames leave the device
    frames = host(values[torch.from_numpy(idx).to(values.device)])

    k = len(idx)
    if ax is None:
        fig, axes = plt.subplots(1, k, squeeze=False, figsize=(1.8 * k + 0.2, 2.2))
        axes = list(axes[0])
    else:
        axes = axes_list(ax, k, "show_frames")
        fig = axes[0].figure
    for a, i, frame in zip(axes, idx, frames):
        img = as_image(frame)
        a.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0 if img.ndim == 2 else None,
                 vmax=(1.0 if img.dtype.kind == "f" else 255) if img.ndim == 2 else None)
        a.set_title(f"t={th[i]:.3f} s", fontsize=8)
        a.set_axis_off()
    if ax is None:
        fig.suptitle(f"{key}, {episode_name(ds, e)}", fontsize=9)
        fig.tight_layout()
    return fig
