"""episode_view: one episode's camera frames above its joint and action curves, on one time axis.

In Jupyter with ipywidgets a time slider (and a play button) moves the frames and a cursor over
the curves together; without ipywidgets (or with ``interactive=False``) the view is a static grid:
a row of frames per camera at a few times, and the curves with a numbered cursor at each of them.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Sequence

import numpy as np

from .common import as_image, check_episode, dim_list, episode_name, host, pyplot, stream

#: the most feature dims drawn per curve stream by default (a 7-DoF arm and its gripper fit)
DEFAULT_DIMS = 8


def _default_keys(ds) -> list[str]:
    """State and action streams first (what a policy reads and predicts), else any continuous ones."""
    cont = [n for n, s in ds.streams.items() if s.kind == "continuous" and len(s.shape) <= 1]
    named = [n for n in cont if "state" in n.lower() or "action" in n.lower()]
    # GR00T sub-keys (state.left_arm) repeat their whole key's columns: the whole keys suffice
    whole = [n for n in named if not any(n != m and n.startswith(m + ".") for m in named)] or named
    return (whole or cont)[:3]


def _nearest(times: np.ndarray, t: float) -> int:
    """Index of the sample nearest to t (ties to the later one, as resample(mode="nearest"))."""
    i = int(np.searchsorted(times, t, side="left"))
    if i <= 0:
        return 0
    if i >= times.shape[0]:
        return times.shape[0] - 1
    return i if times[i] - t <= t - times[i - 1] else i - 1


class EpisodeView:
    """What ``episode_view`` returns: the figure and the time it shows.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
    times : numpy.ndarray
        The times (seconds) the frame columns show: one per column (static grid) or the current
        time (interactive).
    span : (float, float)
        The episode's first and last sample time over the drawn streams.
    interactive : bool
        Displayed in Jupyter as a slider + figure (True) or as the figure alone (False).
    """

    def __init__(self, ds, episode: int, keys: list[str], cameras: list[str], dims, columns: int,
                 interactive: bool):
        pyplot()                                  # matplotlib present, or the error naming the extra
        from matplotlib.figure import Figure

        self.episode = check_episode(ds, episode)
        self.interactive = interactive
        e = self.episode
        self._curves = []
        for k in keys:
            s = stream(ds, k)
            if s.kind in ("image", "pointcloud"):
                raise ValueError(f"keys: stream {k!r} is a {s.kind} stream; give it as cameras= (images)")
            v, t = s.episode(e)
            v = host(v)
            D = math.prod(s.shape)
            self._curves.append((s, v.reshape(v.shape[0], D).astype(np.float64), host(t),
                                 dim_list(DEFAULT_DIMS if dims is None else dims, D, k)))
        self._cameras = []
        for k in cameras:
            s = stream(ds, k)
            if s.kind != "image":
                raise ValueError(f"cameras: stream {k!r} is a {s.kind} stream, not an image stream")
            values, t = s.episode(e)
            self._cameras.append((s, values, host(t)))
        spans = [(t[0], t[-1]) for t in [c[2] for c in self._curves] + [c[2] for c in self._cameras] if t.shape[0]]
        if not spans:
            raise ValueError(f"{episode_name(ds, e)} has no samples in {', '.join(map(repr, keys + cameras))}")
        self.span = (float(min(a for a, _ in spans)), float(max(b for _, b in spans)))
        t0, t1 = self.span
        self.times = (np.array([t0]) if interactive
                      else np.linspace(t0, t1, columns) if columns > 1 else np.array([t0]))
        cols = self.times.shape[0]

        # frames on top, curves below on one shared time axis. Static: a row of `cols` frames per
        # camera; interactive: the cameras side by side in one row, at most 3 inches tall
        aspect = [s.shape[0] / s.shape[1] for s, *_ in self._cameras]
        width = 11.0
        ncam = len(self._cameras)
        if interactive:
            frame_h = [min(3.0, width / ncam * max(aspect) * 0.9)] if ncam else []
            grid_cols = max(1, ncam)
        else:
            frame_h = [width / cols * a * 0.9 for a in aspect]
            grid_cols = cols
        heights = frame_h + [1.9] * len(self._curves)
        fig = Figure(figsize=(width, sum(heights) + 0.6), layout="constrained")
        grid = fig.add_gridspec(len(heights), grid_cols, height_ratios=heights)
        self._images = []
        for r in range(ncam):
            cells = [grid[0, r]] if interactive else [grid[r, c] for c in range(cols)]
            row = [fig.add_subplot(cell) for cell in cells]
            for a in row:
                a.set_axis_off()
            self._images.append(row)
        self._cursors = []
        shared = last = None
        for r, (s, v, t, picked) in enumerate(self._curves, start=len(frame_h)):
            a = fig.add_subplot(grid[r, :], sharex=shared)
            shared, last = shared or a, a
            names = s.feature_names if s.feature_names and len(s.feature_names) == v.shape[1] else None
            for d in picked:
                a.plot(t, v[:, d], linewidth=1.1, label=names[d] if names else f"[{d}]")
            a.set_title(f"{s.name}: {len(t)} samples at {s.rate or 0:.4g} Hz", fontsize=9, loc="left")
            a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False,
                     borderaxespad=0.0)
            a.set_xlim(t0, t1)
            self._cursors.append([a.axvline(x, color="k", linewidth=1.0, alpha=0.7) for x in self.times])
            if not interactive:
                for i, x in enumerate(self.times):
                    a.annotate(str(i + 1), (x, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                               ha="center", va="bottom")
        if last is not None:
            last.set_xlabel(f"time [s], {episode_name(ds, e)}")
        fig.suptitle(f"{episode_name(ds, e)}: {', '.join(s.name for s, *_ in self._cameras + self._curves)}",
                     fontsize=9)
        self.figure = fig
        self._artists: list[list[Any]] = [[None] * cols for _ in self._cameras]
        for i, x in enumerate(self.times):
            self._show(i, float(x))

    def _show(self, column: int, t: float) -> None:
        """Column ``column`` shows each camera's frame nearest to t and puts its cursors at t."""
        for r, (s, values, times) in enumerate(self._cameras):
            a = self._images[r][column]
            if times.shape[0] == 0:
                a.set_title("no frames", fontsize=8)
                continue
            i = _nearest(times, t)
            img = as_image(host(values[i:i + 1])[0])       # only the shown frame leaves the device
            artist = self._artists[r][column]
            if artist is None:
                gray = img.ndim == 2
                self._artists[r][column] = a.imshow(img, cmap="gray" if gray else None, vmin=0 if gray else None,
                                                    vmax=(1.0 if img.dtype.kind == "f" else 255) if gray else None)
            else:
                artist.set_data(img)
            label = f"{column + 1}: " if not self.interactive else ""
            a.set_title(f"{label}{s.name.rsplit('.', 1)[-1]} t={times[i]:.2f} s", fontsize=8)
        for cursors in self._cursors:
            cursors[column].set_xdata([t, t])

    @property
    def time(self) -> float:
        """The time the (first) frame column shows."""
        return float(self.times[0])

    def set_time(self, t: float) -> None:
        """Show time t (seconds, clamped into the episode's span) in the first column: the frames
        nearest to it and the cursor at it."""
        t = float(np.clip(float(t), *self.span))
        self.times[0] = t
        self._show(0, t)

    def widget(self):
        """An ipywidgets box: a play button and a time slider above the figure, redrawn on each move."""
        try:
            import ipywidgets as widgets  # type: ignore[import-untyped]  # no stubs; optional
        except ImportError as e:
            raise ImportError('the slider needs ipywidgets: pip install ipywidgets (without it, '
                              'episode_view(..., interactive=False) draws a static grid)') from e
        t0, t1 = self.span
        rates = [s.rate for s, *_ in self._curves + self._cameras if s.rate]
        step = 1.0 / max(rates) if rates else (t1 - t0) / 100 or 1.0
        n = int(round((t1 - t0) / step))
        slider = widgets.FloatSlider(value=self.time, min=t0, max=t1, step=step, description="t [s]",
                                     readout_format=".2f", layout=widgets.Layout(width="80%"))
        play = widgets.Play(value=0, min=0, max=max(n, 1), step=1, interval=int(1000 * step))
        # the figure as an Image widget's PNG, not display()ed into an Output widget: nbclient (under
        # jupyter nbconvert --execute and papermill) stands in for an Output widget's frontend by sending
        # the captured outputs back to the kernel on the shell socket while it awaits the cell's reply on
        # that socket, and the reply can then stay unread for good (jupyter/nbclient#312; it hung
        # examples/explore.ipynb in 2 of 7 runs)
        image = widgets.Image(value=self._png(), format="png")

        def draw(_=None):
            self.set_time(slider.value)
            image.value = self._png()

        play.observe(lambda ch: setattr(slider, "value", min(t1, t0 + ch["new"] * step)), names="value")
        slider.observe(draw, names="value")
        return widgets.VBox([widgets.HBox([play, slider]), image])

    def _png(self) -> bytes:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """Jupyter's display: the slider box (interactive) or the figure. The figure's PNG goes in
        either way: a viewer without a widget manager (GitHub, nbconvert to markdown or HTML) shows
        it where a notebook shows the slider."""
        bundle = self.widget()._repr_mimebundle_() if self.interactive else {}
        bundle.update({"text/plain": f"<EpisodeView of episode {self.episode}>",
                       "image/png": base64.b64encode(self._png()).decode("ascii")})
        return bundle


def _has_ipywidgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def episode_view(ds, episode: int, keys: str | Sequence[str] | None = None,
                 cameras: str | Sequence[str] | None = None, *, dims: int | Sequence[int] | None = None,
                 frames: int = 6, interactive: bool | None = None) -> EpisodeView:
    """One episode's camera frames and joint/action curves, moved together by one time.

    Parameters
    ----------
    ds : robocache.Dataset
    episode : int
        Episode position (negative counts from the end); titles name the source's number.
    keys : str or list of str, optional
        Curve streams (default: the state and action streams, else the first continuous ones; at
        most 3).
    cameras : str or list of str, optional
        Image streams (default: every image stream, at most 3; ``[]`` for none).
    dims : int or list of int, optional
        Feature dims drawn per curve stream: a count or indices (default: the first 8).
    frames : int
        Static grid: how many times (frame columns and numbered cursors), evenly over the episode.
    interactive : bool, optional
        True: in Jupyter the view shows a time slider and play button (ipywidgets) moving the frames
        and the cursor. False: the static grid. Default: True when ipywidgets is installed.

    Returns
    -------
    EpisodeView
        Displayed by Jupyter as the slider and figure (or the figure); ``.figure`` is the
        matplotlib Figure, ``.set_time(t)`` moves the view from code.
    """
    if keys is None:
        keys = _default_keys(ds)
    keys = [keys] if isinstance(keys, str) else list(keys)
    if cameras is None:
        cameras = [n for n, s in ds.streams.items() if s.kind == "image"][:3]
    cameras = [cameras] if isinstance(cameras, str) else list(cameras)
    if not keys and not cameras:
        raise ValueError("nothing to draw: the dataset has no continuous or image stream (give keys= or cameras=)")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or not 1 <= frames <= 24:
        raise ValueError(f"frames must be an int in 1..24, got {frames!r}")
    if interactive is None:
        interactive = _has_ipywidgets()
    return EpisodeView(ds, episode, keys, cameras, dims, int(frames), bool(interactive))
