"""show_batch: a loader batch as pictures. One row per sample: each image key's frames over its
window, then each vector key's window as curves; steps past the episode's ends (``{key}_is_pad``)
are marked (a red frame and "pad" on images, a grey band on curves), so what the policy is fed,
padding included, can be seen before training on it."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .common import as_image, host, pyplot

PAD_COLOR = "#d62728"


def _is_image(shape) -> bool:
    """[B,T,H,W,C] / [B,T,C,H,W] (C in 1, 3, 4), or without T [B,H,W,C] / [B,C,H,W] with H, W >= 8
    (a smaller 4-D key is more likely a window of points, [B, T, K, 3])."""
    if len(shape) not in (4, 5) or not (shape[-1] in (1, 3, 4) or shape[-3] in (1, 3, 4)):
        return False
    hw = shape[-3:-1] if shape[-1] in (1, 3, 4) else shape[-2:]
    return len(shape) == 5 or min(hw) >= 8


def _frames(x: np.ndarray) -> np.ndarray:
    """An image key's batch as [B, T, H, W, C] (channel-last) for drawing."""
    if x.ndim == 4:
        x = x[:, None]
    if x.shape[-1] not in (1, 3, 4) and x.shape[2] in (1, 3, 4):
        x = np.moveaxis(x, 2, -1)
    return x


def _pick(n: int, k: int) -> list[int]:
    """k (or all n) indices evenly over range(n), first and last included."""
    return list(range(n)) if n <= k else sorted({int(round(i)) for i in np.linspace(0, n - 1, k)})


def _row_label(batch: Mapping, b: int) -> str:
    parts = [f"sample {b}"]
    for key, name in (("episode_index", "episode"), ("frame_index", "frame"), ("timestamp", "t")):
        v = batch.get(key)
        if v is not None and hasattr(v, "shape") and len(v.shape) >= 1 and v.shape[0] > b:
            x = host(v[b:b + 1]).reshape(-1)[0]
            parts.append(f"{name} {x:.2f}" if name == "t" else f"{name} {int(x)}")
    return "\n".join(parts)


def show_batch(batch: Mapping, keys: str | Sequence[str] | None = None, *, samples: int = 4, steps: int = 8):
    """Draw a batch from ``robocache.DataLoader`` (or any dict of ``[B, ...]`` tensors/arrays).

    Parameters
    ----------
    batch : dict
        Image keys ``[B, T, C, H, W]`` / ``[B, T, H, W, C]`` (or without T), float (``[0, 1]`` or
        ``0..255``) or uint8; vector keys ``[B, T, D]`` or ``[B, D]``; ``{key}_is_pad`` ``[B, T]`` bool
        marks a key's padded steps.
    keys : str or list of str, optional
        What to draw (default: every image and vector key that is not a mask or an identity
        column). Masks (``*_is_pad``, ``*_dim_mask``) are read, never drawn.
    samples : int
        Rows: the first ``samples`` samples of the batch.
    steps : int
        At most this many of an image window's steps are drawn (evenly, first and last included);
        curves show every step.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = pyplot()
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict of tensors (what DataLoader yields), got {type(batch).__name__}")
    for name, v in (("samples", samples), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    skip = ("_is_pad", "_dim_mask")
    ident = {"episode_index", "frame_index", "timestamp", "index", "task_index", "task"}
    if keys is None:
        keys = [k for k, v in batch.items() if k not in ident and not k.endswith(skip) and hasattr(v, "shape")
                and len(v.shape) >= 2 and str(getattr(v, "dtype", "")).split(".")[-1] != "bool"]
        if not keys:
            raise ValueError(f"no image or vector key to draw in the batch (keys: {', '.join(batch)})")
    keys = [keys] if isinstance(keys, str) else list(keys)
    arrays, images = {}, []
    for k in keys:
        if k not in batch:
            raise KeyError(f"no key {k!r} in the batch; it has: {', '.join(batch)}")
        shape = tuple(getattr(batch[k], "shape", ()))
        if len(shape) < 2:
            raise ValueError(f"batch[{k!r}] has shape {list(shape)}: show_batch draws [B, T, ...] windows")
        images.append(_is_image(shape))
    B = min(int(getattr(batch[k], "shape")[0]) for k in keys)
    rows = min(int(samples), B)
    for k, img in zip(keys, images):
        x = host(batch[k][:rows])                     # only the drawn samples leave the device
        x = _frames(x) if img else (x[:, None] if x.ndim == 2 else x.reshape(x.shape[0], x.shape[1], -1))
        pad = batch.get(f"{k}_is_pad")
        p = (host(pad[:rows]).astype(bool).reshape(rows, -1) if pad is not None
             else np.zeros((rows, x.shape[1]), bool))
        if p.shape[1] != x.shape[1]:
            raise ValueError(f"batch[{k!r}_is_pad] has {p.shape[1]} steps, batch[{k!r}] {x.shape[1]}")
        arrays[k] = (x, p)

    # columns: the drawn steps of each image key, then one (wider) column per vector key
    cols: list[tuple[str, int | None]] = []
    for k, img in zip(keys, images):
        cols += [(k, t) for t in _pick(arrays[k][0].shape[1], int(steps))] if img else [(k, None)]
    widths = [1.0 if t is not None else 2.6 for _, t in cols]
    fig, axes = plt.subplots(rows, len(cols), squeeze=False, width_ratios=widths,
                             figsize=(1.25 * sum(widths) + 1.0, 1.45 * rows + 0.6))
    for b in range(rows):
        for c, (k, t) in enumerate(cols):
            a = axes[b, c]
            x, p = arrays[k]
            if t is not None:
                a.imshow(as_image(x[b, t]))
                a.set_xticks([])
                a.set_yticks([])
                if p[b, t]:
                    for side in a.spines.values():
                        side.set_edgecolor(PAD_COLOR)
                        side.set_linewidth(3)
                    a.text(0.5, 0.5, "pad", transform=a.transAxes, ha="center", va="center", color=PAD_COLOR,
                           fontsize=10, fontweight="bold")
                if b == 0:
                    a.set_title(f"{k.rsplit('.', 1)[-1]}[{t}]", fontsize=7)
            else:
                if x.shape[1] == 1:                   # one step: its features as bars
                    D = min(x.shape[2], 32)
                    a.bar(np.arange(D), x[b, 0, :D].astype(np.float64), color=[f"C{d % 10}" for d in range(D)],
                          edgecolor=PAD_COLOR if p[b, 0] else "none", linewidth=2)
                    a.set_xlabel("feature", fontsize=6)
                else:                                  # a window: one curve per feature over the steps
                    steps_x = np.arange(x.shape[1])
                    for d in range(min(x.shape[2], 8)):
                        a.plot(steps_x, x[b, :, d].astype(np.float64), linewidth=1.0)
                    for s in np.flatnonzero(p[b]):
                        a.axvspan(s - 0.5, s + 0.5, color="0.8", zorder=0)
                a.tick_params(labelsize=6)
                if b == 0:
                    a.set_title(f"{k} [{x.shape[1]} steps x {x.shape[2]}]" + (", grey: pad" if p.any() else ""),
                                fontsize=7)
        axes[b, 0].set_ylabel(_row_label(batch, b), fontsize=7, rotation=0, ha="right", va="center")
    npad = {k: int(arrays[k][1].sum()) for k in keys}
    fig.suptitle(f"batch of {B}, first {rows} samples; padded steps: "
                 + ", ".join(f"{k} {n}" for k, n in npad.items()), fontsize=8)
    fig.tight_layout()
    return fig
