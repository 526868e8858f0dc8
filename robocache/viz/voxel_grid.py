"""voxels: a voxel grid [X,Y,Z] as three max-projections or a 3-D scatter."""

from __future__ import annotations

import numpy as np

from .common import axes_list, host, pyplot

#: at most this many occupied voxels are scattered by ``voxels(view="3d")`` (evenly strided
#: beyond it: a 3-D scatter of millions of points is unreadable and slow)
MAX_SCATTER = 200_000


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
    plt = pyplot()
    if view not in ("max", "3d"):
        raise ValueError(f"view must be 'max' or '3d', got {view!r}")
    g = grid
    nd = len(getattr(g, "shape", np.shape(g)))
    if nd < 3:
        raise ValueError(f"voxels needs a grid [X,Y,Z] (or with leading batch/feature dims), got {nd} dims")
    while nd > 3:
        g = g[0]
        nd -= 1
    v = host(g).astype(np.float32)  # bool, uint8 and int grids too
    X, Y, Z = v.shape
    if v.size == 0:
        raise ValueError(f"voxel grid {list(v.shape)} is empty")
    occ = v > threshold

    if view == "max":
        if ax is None:
            fig, axes = plt.subplots(1, 3, figsize=(12, 4))
        else:
            axes = axes_list(ax, 3, "voxels(view='max')")
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
