"""rate_table and plot_rates: how fast each stream really ticks, episode by episode, and how long
the episodes are (the first thing to check on a multi-rate set: a camera at 14.2 Hz instead of 15,
a topic with gaps, a few episodes far shorter than the rest)."""

from __future__ import annotations

import html
from typing import Any, Sequence

import numpy as np

from .common import axes_list, host, pyplot


def _episode_rates(s) -> np.ndarray:
    """Per-episode measured rate of stream s: 1 / median positive sample interval (NaN for an
    episode with fewer than two distinct times). Host numpy, float64 [E]."""
    t = host(s.times).astype(np.float64)
    off = np.asarray(s.offsets.cpu()).astype(np.int64)
    out = np.full(len(off) - 1, np.nan)
    for e in range(len(off) - 1):
        d = np.diff(t[off[e]:off[e + 1]])
        d = d[d > 0]
        if d.size:
            out[e] = 1.0 / np.median(d)
    return out


class Table:
    """A small table: ``columns`` (names) and ``rows`` (lists of values, in column order); prints
    aligned in a terminal and as HTML in Jupyter. ``records()`` gives one dict per row."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = ""):
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.title = title

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    @staticmethod
    def _cell(v) -> str:
        if isinstance(v, float):
            return "-" if not np.isfinite(v) else f"{v:.4g}"
        return "-" if v is None else str(v)

    def __repr__(self) -> str:
        cells = [self.columns] + [[self._cell(v) for v in r] for r in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(([self.title] if self.title else []) + lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(self._cell(v))}</td>" for v in r) + "</tr>"
                       for r in self.rows)
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _keys(ds, keys) -> list[str]:
    if keys is None:
        return list(ds.streams)
    keys = [keys] if isinstance(keys, str) else list(keys)
    for k in keys:
        if k not in ds.streams:
            raise KeyError(f"no stream {k!r}; the dataset has: {', '.join(ds.streams)}")
    return keys


def rate_table(ds, keys: str | Sequence[str] | None = None) -> Table:
    """Per stream: kind, declared and measured rate, the spread of the per-episode rates, samples
    and seconds per episode.

    Columns: ``stream``, ``kind``, ``declared Hz`` (the source's, e.g. LeRobot ``fps``; ``-`` when it
    declares none), ``measured Hz`` (``Stream.rate``: 1 / median interval over all episodes), ``min Hz``
    and ``max Hz`` (per-episode measured rates), ``samples/ep min|median|max`` and ``s/ep min|median|max``
    (seconds from an episode's first sample to its last).
    """
    rows = []
    for k in _keys(ds, keys):
        s = ds.streams[k]
        per = _episode_rates(s)
        n = s.lengths
        dur = host(s.durations).astype(np.float64)
        finite = per[np.isfinite(per)]
        rows.append([k, s.kind, s.nominal_rate, s.rate,
                     float(finite.min()) if finite.size else float("nan"),
                     float(finite.max()) if finite.size else float("nan"),
                     int(n.min()) if n.size else 0, float(np.median(n)) if n.size else 0.0, int(n.max()) if n.size else 0,
                     float(dur.min()) if dur.size else 0.0, float(np.median(dur)) if dur.size else 0.0,
                     float(dur.max()) if dur.size else 0.0])
    cols = ["stream", "kind", "declared Hz", "measured Hz", "min Hz", "max Hz", "samples/ep min", "samples/ep median",
            "samples/ep max", "s/ep min", "s/ep median", "s/ep max"]
    return Table(cols, rows, title=f"{len(ds)} episode{'s' if len(ds) != 1 else ''}, {len(rows)} "
                                   f"stream{'s' if len(rows) != 1 else ''}")


def plot_rates(ds, keys: str | Sequence[str] | None = None, *, ax=None):
    """Two panels: each stream's per-episode measured rates (one dot per episode, the declared rate
    as a bar, log scale), and a histogram of the episodes' durations in seconds.

    Parameters
    ----------
    ds : robocache.Dataset
    keys : str or list of str, optional
        Streams (default: all).
    ax : sequence of 2 Axes, optional
        Default: a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = pyplot()
    keys = _keys(ds, keys)
    if ax is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * len(keys) + 1.8), width_ratios=[1.4, 1])
    else:
        axes = axes_list(ax, 2, "plot_rates")
        fig = axes[0].figure
    a, h = axes
    from matplotlib.ticker import FormatStrFormatter

    rng = np.random.default_rng(0)               # the dots' vertical jitter: the same picture every time
    seen = []
    for i, k in enumerate(keys):
        s = ds.streams[k]
        per = _episode_rates(s)
        per = per[np.isfinite(per)]
        seen += list(per) + ([s.nominal_rate] if s.nominal_rate else [])
        a.plot(per, i + rng.uniform(-0.18, 0.18, per.size), "o", markersize=3, alpha=0.6, color=f"C{i % 10}")
        if s.nominal_rate:
            a.plot([s.nominal_rate] * 2, [i - 0.35, i + 0.35], "-", color="k", linewidth=1.5)
    a.set_yticks(range(len(keys)), keys, fontsize=8)
    a.set_ylim(len(keys) - 0.5, -0.5)
    a.set_xscale("log")
    if seen:                                      # at least a factor 1.25 either side: 15 Hz vs 15.02 Hz is no gap
        a.set_xlim(min(seen) / 1.25, max(seen) * 1.25)
    for axis in (a.xaxis.set_major_formatter, a.xaxis.set_minor_formatter):
        axis(FormatStrFormatter("%g"))
    a.tick_params(axis="x", which="minor", labelsize=7)
    a.set_xlabel("measured rate per episode [Hz] (dots); declared rate (bar)")
    a.set_title("stream rates", fontsize=9, loc="left")
    # duration of an episode: the span over all its streams
    first = np.full(len(ds), np.inf)
    last = np.full(len(ds), -np.inf)
    for k in keys:
        s = ds.streams[k]
        t = host(s.times).astype(np.float64)
        off = np.asarray(s.offsets.cpu()).astype(np.int64)
        has = off[1:] > off[:-1]
        first[has] = np.minimum(first[has], t[off[:-1][has]])
        last[has] = np.maximum(last[has], t[off[1:][has] - 1])
    dur = (last - first)[np.isfinite(last - first)]
    h.hist(dur, bins=min(30, max(5, len(dur) // 3)), color="C0", edgecolor="white")
    h.set_xlabel("episode duration [s]")
    h.set_ylabel("episodes")
    shown = f"{len(dur)} episodes, {dur.min():.3g}-{dur.max():.3g} s" if dur.size else "no episode has samples"
    h.set_title(f"episode lengths: {shown}", fontsize=9, loc="left")
    if ax is None:
        fig.tight_layout()
    return fig
