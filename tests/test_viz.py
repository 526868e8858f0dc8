"""robocache.viz on small synthetic data (Agg backend, no display); examples/explore.ipynb is
tests/test_notebook.py's.

Each viz function must return a Figure with the expected axes and artists, draw into given
axes, accept CPU and CUDA tensors, and refuse what it cannot draw with a message naming it.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402

import robocache  # noqa: E402
from robocache import viz  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def multirate(rng, device="cpu"):
    """Two episodes: joints [n,5] at 200 Hz, gripper [n] at 30 Hz, camera [n,8,6,3] uint8 at
    10 Hz, a float camera [n,3,8,6] (channel-first, 0..255), a text stream, a point-cloud stream."""
    eps = []
    for e, dur in enumerate((1.0, 0.6)):
        tj = np.arange(0, dur, 1 / 200)
        tg = 0.01 + np.arange(0, dur, 1 / 30)
        tc = np.arange(0, dur, 1 / 10)
        eps.append({
            "joints": (rng.standard_normal((len(tj), 5)).cumsum(0).astype(np.float32), tj),
            "gripper": (np.sin(2 * np.pi * tg), tg),
            "camera": (rng.integers(0, 256, (len(tc), 8, 6, 3), dtype=np.uint8), tc),
            "depth": (rng.uniform(0, 255, (len(tc), 3, 8, 6)).astype(np.float32), tc),
            "phase": (np.array(["reach", "grasp"] * 2)[: 2 + e], np.linspace(0, dur, 2 + e)),
            "lidar": ([rng.standard_normal((7, 3)).astype(np.float32) for _ in tc], tc),
        })
    kinds = {"camera": "image", "depth": "image"}
    return robocache.Dataset.from_episodes(eps, kinds=kinds, device=device,
                                           feature_names={"joints": [f"j{i}" for i in range(5)]})


@pytest.fixture
def ds(rng):
    return multirate(rng)


# ----------------------------------------------------------------------------
# plot_episode


def test_plot_episode_axes_and_artists(ds):
    fig = viz.plot_episode(ds, 0, ["joints", "gripper"], dims=2)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 2
    # per drawn dim: raw markers + resampled line
    assert len(fig.axes[0].lines) == 2 * 2
    assert len(fig.axes[1].lines) == 2 * 1  # gripper is scalar
    raw, line = fig.axes[1].lines
    v, t = ds.streams["gripper"].episode(0)
    np.testing.assert_array_equal(raw.get_xdata(), t.numpy())
    np.testing.assert_array_equal(raw.get_ydata(), v.numpy())
    assert raw.get_linestyle() == "None" and raw.get_marker() == "o"
    # default rate: the fastest stream (200 Hz), grid over the union of both streams' spans
    x = np.asarray(line.get_xdata())
    np.testing.assert_allclose(np.diff(x), 1 / 200, rtol=1e-9)
    assert x[0] == 0.0
    # line == ds.resample on that grid, NaN where the gripper stream is padded (before 0.01 s)
    out, pad = ds.resample("gripper", [0], torch.from_numpy(x)[None], return_mask=True)
    want = out[0].numpy().astype(np.float64)
    want[pad[0].numpy()] = np.nan
    np.testing.assert_array_equal(np.asarray(line.get_ydata()), want)
    assert np.isnan(line.get_ydata()[0])
    assert "j0" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_plot_episode_defaults_rate_mode_dims(ds):
    fig = viz.plot_episode(ds, -1)  # default keys: the continuous streams
    assert [a.get_title(loc="left").split(":")[0] for a in fig.axes] == ["joints", "gripper"]
    assert len(fig.axes[0].lines) == 2 * 3  # first 3 of 5 dims
    fig = viz.plot_episode(ds, 1, "joints", rate=50, mode="previous", dims=[4, -1, 0])
    (a,) = fig.axes
    assert len(a.lines) == 6
    x = np.asarray(a.lines[1].get_xdata())
    np.testing.assert_allclose(np.diff(x), 1 / 50, rtol=1e-9)
    v, _ = ds.streams["joints"].episode(1)
    out = ds.resample("joints", [1], torch.from_numpy(x)[None], mode="previous")[0]
    np.testing.assert_array_equal(a.lines[1].get_ydata(), out[:, 4].numpy())
    assert "previous" in a.get_title(loc="left")
    # text streams draw their indices
    fig = viz.plot_episode(ds, 0, "phase")
    assert len(fig.axes[0].lines) == 2


def test_plot_episode_into_given_axes(ds):
    fig, axes = plt.subplots(1, 2)
    assert viz.plot_episode(ds, 0, ["joints", "gripper"], ax=axes) is fig
    assert all(len(a.lines) for a in axes)
    fig1, a = plt.subplots()
    assert viz.plot_episode(ds, 0, "gripper", ax=a) is fig1
    with pytest.raises(ValueError, match="draws 2 axes; ax= gave 1"):
        viz.plot_episode(ds, 0, ["joints", "gripper"], ax=a)


def test_plot_episode_errors(ds):
    with pytest.raises(KeyError, match="no stream 'nope'.*joints"):
        viz.plot_episode(ds, 0, ["joints", "nope"])
    with pytest.raises(IndexError, match="episode 2 out of range for 2 episodes"):
        viz.plot_episode(ds, 2, "joints")
    with pytest.raises(IndexError, match="episode -3 out of range"):
        viz.plot_episode(ds, -3, "joints")
    with pytest.raises(TypeError, match="episode must be an int"):
        viz.plot_episode(ds, 0.5, "joints")
    with pytest.raises(ValueError, match="image stream.*show_frames"):
        viz.plot_episode(ds, 0, "camera")
    with pytest.raises(ValueError, match="pointcloud stream"):
        viz.plot_episode(ds, 0, "lidar")
    with pytest.raises(IndexError, match="feature 5 out of range for stream 'joints' with 5 features"):
        viz.plot_episode(ds, 0, "joints", dims=[0, 5])
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="rate must be"):
            viz.plot_episode(ds, 0, "joints", rate=bad)
    with pytest.raises(ValueError, match="give a lower rate="):
        viz.plot_episode(ds, 0, "joints", rate=1e8)
    with pytest.raises(ValueError, match="keys is empty"):
        viz.plot_episode(ds, 0, [])
    with pytest.raises(TypeError, match="mode"):
        viz.plot_episode(ds, 0, "phase", mode="linear")  # int64 text indices cannot be interpolated


def test_plot_episode_empty_stream_in_episode(rng):
    t = np.arange(10) / 10
    ds = robocache.Dataset.from_episodes([{"a": (np.ones(10), t), "b": (np.zeros(10), t)},
                                          {"a": (np.ones(10), t)}])
    fig = viz.plot_episode(ds, 1, ["a", "b"])  # b is empty in episode 1: no points, all-NaN line
    raw, line = fig.axes[1].lines
    assert len(raw.get_xdata()) == 0 and np.isnan(line.get_ydata()).all()
    ds2 = robocache.Dataset.from_episodes([{"a": (np.ones(3), t[:3])}, {"a": (np.zeros(0), t[:0])}])
    with pytest.raises(ValueError, match="episode 1 has no samples in 'a'"):
        viz.plot_episode(ds2, 1, "a")


# ----------------------------------------------------------------------------
# show_frames


def test_show_frames_evenly_spaced(ds):
    fig = viz.show_frames(ds, "camera", 0, n=4)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 4
    v, t = ds.streams["camera"].episode(0)  # 10 frames: 0, 3, 6, 9
    for a, i in zip(fig.axes, (0, 3, 6, 9)):
        (im,) = a.get_images()
        np.testing.assert_array_equal(np.asarray(im.get_array()), v[i].numpy())
        assert a.get_title() == f"t={float(t[i]):.3f} s"
    # more frames asked than the episode has: all of them
    assert len(viz.show_frames(ds, "camera", 1, n=50).axes) == 6


def test_show_frames_at_times_nearest(ds):
    # frames at 0.0, 0.1, ...: 0.06 -> 0.1; 0.05 is a tie -> the earlier frame (resample nearest, LeRobot's
    # rule); far -> last
    fig = viz.show_frames(ds, "camera", 0, times=[0.06, 0.05, 0.33, 99.0])
    assert [a.get_title() for a in fig.axes] == ["t=0.100 s", "t=0.000 s", "t=0.300 s", "t=0.900 s"]
    v, _ = ds.streams["camera"].episode(0)
    np.testing.assert_array_equal(np.asarray(fig.axes[1].get_images()[0].get_array()), v[0].numpy())
    fig = viz.show_frames(ds, "camera", 0, times=0.2)
    assert len(fig.axes) == 1


def test_show_frames_float_channel_first(ds):
    fig = viz.show_frames(ds, "depth", 1, n=2)
    img = np.asarray(fig.axes[0].get_images()[0].get_array())
    assert img.shape == (8, 6, 3) and img.dtype == np.float32
    assert 0 <= img.min() and img.max() <= 1  # 0..255 floats scaled to 0..1


def test_show_frames_into_given_axes_and_errors(ds):
    fig, axes = plt.subplots(1, 3)
    assert viz.show_frames(ds, "camera", 0, n=3, ax=axes) is fig
    with pytest.raises(ValueError, match="draws 2 axes; ax= gave 3"):
        viz.show_frames(ds, "camera", 0, n=2, ax=axes)
    with pytest.raises(KeyError, match="no stream 'cam'"):
        viz.show_frames(ds, "cam", 0)
    with pytest.raises(IndexError, match="episode 5 out of range for 2 episodes"):
        viz.show_frames(ds, "camera", 5)
    with pytest.raises(ValueError, match="'joints'.*is not an image stream"):
        viz.show_frames(ds, "joints", 0)
    with pytest.raises(ValueError, match="'lidar'.*is not an image stream"):
        viz.show_frames(ds, "lidar", 0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        viz.show_frames(ds, "camera", 0, n=0)
    with pytest.raises(ValueError, match="times must be finite"):
        viz.show_frames(ds, "camera", 0, times=[0.1, float("nan")])
    with pytest.raises(ValueError, match="non-empty"):
        viz.show_frames(ds, "camera", 0, times=[])


# ----------------------------------------------------------------------------
# voxels


def test_voxels_max_projections():
    g = np.zeros((5, 4, 3), np.float32)
    g[1, 2, 0] = 2.0
    g[4, 0, 2] = 1.0
    fig = viz.voxels(g)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 3
    xy, xz, yz = (np.ma.filled(np.asarray(a.get_images()[0].get_array(), dtype=float), np.nan) for a in fig.axes)
    # images are transposed so the first named axis runs right: [rows = second axis, cols = first axis]
    assert xy.shape == (4, 5) and xz.shape == (3, 5) and yz.shape == (3, 4)
    assert xy[2, 1] == 2.0 and xy[0, 4] == 1.0 and np.isnan(xy).sum() == 18
    assert xz[0, 1] == 2.0 and xz[2, 4] == 1.0
    assert yz[0, 2] == 2.0 and yz[2, 0] == 1.0
    assert [a.get_xlabel() + a.get_ylabel() for a in fig.axes] == ["xy", "xz", "yz"]
    # threshold hides the weaker voxel
    fig = viz.voxels(g, threshold=1.5)
    xy = np.ma.filled(np.asarray(fig.axes[0].get_images()[0].get_array(), dtype=float), np.nan)
    assert np.isnan(xy[0, 4]) and xy[2, 1] == 2.0


def test_voxels_3d_scatter_and_leading_dims():
    g = np.zeros((2, 1, 5, 4, 3), np.uint8)  # [B, F, X, Y, Z]: grid[0, 0] is drawn
    g[0, 0, 1, 2, 0] = 1
    g[0, 0, 3, 3, 2] = 1
    g[1, 0] = 1
    fig = viz.voxels(g, view="3d")
    (a,) = fig.axes
    assert a.name == "3d"
    (sc,) = a.collections
    xs, ys, zs = sc._offsets3d
    assert sorted(zip(xs, ys, zs)) == [(1, 2, 0), (3, 3, 2)]
    assert "2 voxels" in a.get_title()
    for shape in ((2, 5, 4, 3), (5, 4, 3)):
        assert len(viz.voxels(np.ones(shape, bool), view="3d").axes[0].collections[0].get_offsets()) == 60


def test_voxels_real_voxelize_output_torch(rng):
    pts = torch.from_numpy(rng.uniform(0, 1, (200, 3)).astype(np.float32))
    feats = torch.from_numpy(rng.uniform(1, 2, (200, 2)).astype(np.float32))
    grid = robocache.voxelize(pts, features=feats, grid=(6, 5, 4), voxel_size=(1 / 6, 1 / 5, 1 / 4),
                              origin=(0, 0, 0), mode="max")  # [F=2, X, Y, Z]
    fig = viz.voxels(grid, view="3d")
    n = int((grid[0] > 0).sum())
    assert len(fig.axes[0].collections[0].get_offsets()) == n
    fig = viz.voxels(grid.to(torch.bfloat16))
    assert len(fig.axes) == 3


def test_voxels_into_given_axes_and_errors():
    g = np.ones((3, 3, 3))
    fig, axes = plt.subplots(1, 3)
    assert viz.voxels(g, ax=axes) is fig
    fig3 = plt.figure()
    a3 = fig3.add_subplot(projection="3d")
    assert viz.voxels(g, view="3d", ax=a3) is fig3
    with pytest.raises(ValueError, match="projection='3d'"):
        viz.voxels(g, view="3d", ax=axes[0])
    with pytest.raises(ValueError, match="draws 3 axes; ax= gave 2"):
        viz.voxels(g, ax=axes[:2])
    with pytest.raises(ValueError, match="view must be 'max' or '3d'"):
        viz.voxels(g, view="side")
    with pytest.raises(ValueError, match="got 2 dims"):
        viz.voxels(np.ones((3, 3)))
    with pytest.raises(ValueError, match="empty"):
        viz.voxels(np.ones((0, 3, 3)))


# ----------------------------------------------------------------------------
# matplotlib missing


def test_missing_matplotlib_says_which_extra(ds, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_mpl(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    for call in (lambda: viz.plot_episode(ds, 0), lambda: viz.show_frames(ds, "camera", 0),
                 lambda: viz.voxels(np.ones((2, 2, 2))), lambda: viz.episode_view(ds, 0, interactive=False),
                 lambda: viz.plot_rates(ds), lambda: viz.show_batch({"a": np.zeros((2, 3))})):
        # the command from a package index and the one that works from a checkout
        with pytest.raises(ImportError, match=r'pip install "robocache\[viz\]", or from a checkout of '
                                              r'robocache: pip install -e "\.\[viz\]"'):
            call()


# ----------------------------------------------------------------------------
# episode_view, rate_table / plot_rates, show_batch


def test_robocache_exposes_viz_without_importing_it():
    """`import robocache` alone gives robocache.viz (the README's calls), without loading matplotlib."""
    import subprocess
    import sys

    code = ("import sys, robocache; assert callable(robocache.viz.episode_view); "
            "print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_episode_view_static_grid(ds):
    view = viz.episode_view(ds, 0, interactive=False, frames=4)
    fig = view.figure
    assert isinstance(view, viz.EpisodeView) and isinstance(fig, matplotlib.figure.Figure) and not view.interactive
    # cameras default to every image stream: camera and depth, 4 frames each; curves: joints, gripper
    images = [a for a in fig.axes if a.images]
    curves = [a for a in fig.axes if a.lines]
    assert len(images) == 2 * 4 and len(curves) == 2
    t0, t1 = view.span
    np.testing.assert_allclose(view.times, np.linspace(t0, t1, 4))
    for a in curves:                         # one cursor per frame column, at its time
        cursors = [ln for ln in a.lines if list(ln.get_xdata()) == [ln.get_xdata()[0]] * 2]
        assert sorted(c.get_xdata()[0] for c in cursors) == pytest.approx(sorted(view.times))
    # each drawn frame is the camera's frame nearest to its column's time
    v, t = ds.streams["camera"].episode(0)
    for a, x in zip(images[:4], view.times):
        i = int(np.argmin(np.abs(t.numpy() - x)))
        np.testing.assert_array_equal(a.images[0].get_array(), v[i].numpy())


def test_episode_view_set_time_moves_frames_and_cursors(ds):
    view = viz.episode_view(ds, 1, ["joints"], "camera", interactive=True)
    (img_ax,) = [a for a in view.figure.axes if a.images]
    (curve_ax,) = [a for a in view.figure.axes if a.lines]
    cursor = curve_ax.lines[-1]
    v, t = ds.streams["camera"].episode(1)
    for x in (0.31, 0.44, 10.0, -3.0):
        view.set_time(x)
        clamped = min(max(x, view.span[0]), view.span[1])
        assert view.time == pytest.approx(clamped) and list(cursor.get_xdata()) == pytest.approx([clamped] * 2)
        i = int(np.argmin(np.abs(t.numpy() - clamped)))
        np.testing.assert_array_equal(img_ax.images[0].get_array(), v[i].numpy())


def test_episode_view_widget(ds):
    pytest.importorskip("ipywidgets")
    view = viz.episode_view(ds, 0, "joints", "camera")
    assert view.interactive                  # ipywidgets installed: the slider by default
    box = view.widget()
    play, slider = box.children[0].children
    assert (slider.min, slider.max) == pytest.approx(view.span) and slider.step == pytest.approx(1 / 200)
    slider.value = 0.5
    assert view.time == pytest.approx(0.5)
    play.value = 20                          # the play button steps the slider
    assert slider.value == pytest.approx(20 / 200) and view.time == pytest.approx(0.1)


def test_episode_view_widget_draws_into_an_image(ds):
    """The figure goes to an Image widget as a PNG, redrawn per move, and no Output widget is in the
    box: nbclient answers an Output widget on the kernel's shell socket, which hung nbconvert --execute."""
    ipywidgets = pytest.importorskip("ipywidgets")
    view = viz.episode_view(ds, 0, "joints", "camera")
    box = view.widget()
    shown = box.children[1]
    assert isinstance(shown, ipywidgets.Image) and shown.format == "png"
    assert bytes(shown.value[:8]) == b"\x89PNG\r\n\x1a\n"
    before = bytes(shown.value)
    box.children[0].children[1].value = 0.7
    assert bytes(shown.value) != before      # the frame and cursor at 0.7 s, drawn again

    def widgets_in(w):
        return [w, *[x for c in getattr(w, "children", ()) for x in widgets_in(c)]]
    assert not [w for w in widgets_in(box) if isinstance(w, ipywidgets.Output)]


@pytest.mark.parametrize("interactive", [True, False])
def test_episode_view_display_carries_the_png(ds, interactive):
    """Jupyter's display: the slider box (interactive) and, either way, the figure as a PNG for the
    viewers that run no widgets (GitHub, docs/explore.md)."""
    if interactive:
        pytest.importorskip("ipywidgets")
    view = viz.episode_view(ds, 0, "joints", "camera", interactive=interactive)
    bundle = view._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert ("application/vnd.jupyter.widget-view+json" in bundle) == interactive


def test_episode_view_errors(ds):
    with pytest.raises(ValueError, match="keys: stream 'camera' is a image stream; give it as cameras="):
        viz.episode_view(ds, 0, "camera", interactive=False)
    with pytest.raises(ValueError, match="cameras: stream 'joints' is a continuous stream"):
        viz.episode_view(ds, 0, cameras="joints", interactive=False)
    with pytest.raises(ValueError, match=r"frames must be an int in 1..24, got 0"):
        viz.episode_view(ds, 0, frames=0, interactive=False)
    with pytest.raises(KeyError, match="no stream 'nope'"):
        viz.episode_view(ds, 0, "nope", interactive=False)
    with pytest.raises(IndexError, match="episode 5 out of range for 2 episodes"):
        viz.episode_view(ds, 5, interactive=False)


def test_rate_table_and_plot(ds):
    table = viz.rate_table(ds, ["joints", "gripper", "camera"])
    rows = {r["stream"]: r for r in table.records()}
    assert rows["joints"]["measured Hz"] == pytest.approx(200) and rows["camera"]["min Hz"] == pytest.approx(10)
    # episodes of 1.0 and 0.6 s: 200 and 120 joint samples
    assert (rows["joints"]["samples/ep min"], rows["joints"]["samples/ep max"]) == (120, 200)
    assert rows["gripper"]["s/ep max"] == pytest.approx(29 / 30)
    text = repr(table)
    assert text.splitlines()[1].startswith("stream") and "measured Hz" in text      # headers, then rows
    assert "<th>measured Hz</th>" in table._repr_html_()
    with pytest.raises(KeyError, match="no stream 'nope'"):
        viz.rate_table(ds, "nope")
    fig = viz.plot_rates(ds, ["joints", "gripper", "camera"])
    a, h = fig.axes
    assert [t.get_text() for t in a.get_yticklabels()] == ["joints", "gripper", "camera"]
    dots = a.lines[0]                        # joints: one dot per episode at its measured rate
    np.testing.assert_allclose(dots.get_xdata(), [200, 200], rtol=1e-6)
    assert sum(p.get_height() for p in h.patches) == 2          # the 2 episodes' durations


def _batch(B=3, T=5):
    rng = np.random.default_rng(0)
    pad = np.zeros((B, T), bool)
    pad[0, 3:] = True
    return {"image": torch.from_numpy(rng.uniform(0, 1, (B, T, 3, 16, 12)).astype(np.float32)),
            "image_is_pad": torch.from_numpy(pad.copy()),
            "action": torch.from_numpy(rng.standard_normal((B, T, 2)).astype(np.float32)),
            "action_is_pad": torch.from_numpy(pad.copy()),
            "state": torch.from_numpy(rng.standard_normal((B, 1, 4)).astype(np.float32)),
            "state_is_pad": torch.zeros(B, 1, dtype=torch.bool),
            "episode_index": torch.tensor([7, 8, 9]), "task": ["a", "b", "c"]}


def test_show_batch_marks_padded_steps():
    batch = _batch()
    fig = viz.show_batch(batch, samples=2, steps=5)
    axes = np.array(fig.axes).reshape(2, -1)           # 2 samples x (5 frames + action + state)
    assert axes.shape == (2, 7)
    for b in range(2):
        for t in range(5):
            a = axes[b, t]
            np.testing.assert_allclose(a.images[0].get_array(), batch["image"][b, t].permute(1, 2, 0).numpy())
            marked = any(x.get_text() == "pad" for x in a.texts)
            assert marked == bool(batch["image_is_pad"][b, t]), (b, t)
    # the action window: 2 curves over 5 steps, the padded steps of sample 0 shaded
    assert len(axes[0, 5].lines) == 2 and len(axes[0, 5].patches) == 2 and not axes[1, 5].patches
    assert len(axes[0, 6].patches) == 4                # state [1 step x 4]: bars
    assert "episode 7" in axes[0, 0].get_ylabel()
    assert "image 2" in fig._suptitle.get_text()


def test_show_batch_steps_and_errors():
    fig = viz.show_batch(_batch(T=12), "image", samples=1, steps=4)
    assert [a.get_title() for a in fig.axes] == ["image[0]", "image[4]", "image[7]", "image[11]"]
    with pytest.raises(TypeError, match="batch must be a dict of tensors"):
        viz.show_batch([1, 2])
    with pytest.raises(KeyError, match="no key 'nope' in the batch"):
        viz.show_batch(_batch(), "nope")
    with pytest.raises(ValueError, match="samples must be an int >= 1, got 0"):
        viz.show_batch(_batch(), samples=0)
    with pytest.raises(ValueError, match=r"show_batch draws \[B, T, ...\] windows"):
        viz.show_batch(_batch(), "episode_index")


def test_show_batch_from_the_loader(ds):
    """A real loader batch: uint8 frames [B,T,H,W,C], windows past the episodes' ends."""
    loader = robocache.DataLoader(ds, batch_size=4, shuffle=False, anchor="camera", windows={
        "camera": robocache.Window("camera", indices=range(0, 12, 3), rate=10.0),
        "joints": robocache.Window("joints", indices=range(8), rate=10.0)})
    batch = list(loader)[-1]                           # the last anchors: their windows run off the end
    assert batch["camera_is_pad"].any()
    fig = viz.show_batch(batch)
    padded = sum(any(t.get_text() == "pad" for t in a.texts) for a in fig.axes)
    assert padded == int(batch["camera_is_pad"][:4].sum())


# ----------------------------------------------------------------------------
# CUDA tensors are moved to the host for drawing


@pytest.mark.cuda
def test_viz_on_cuda(rng):
    ds = multirate(rng, device="cuda")
    cpu = multirate(np.random.default_rng(rng.seed), device="cpu")
    f_gpu, f_cpu = viz.plot_episode(ds, 0, ["joints", "gripper"]), viz.plot_episode(cpu, 0, ["joints", "gripper"])
    for a, b in zip(f_gpu.axes, f_cpu.axes):
        for la, lb in zip(a.lines, b.lines):
            np.testing.assert_array_equal(la.get_ydata(), lb.get_ydata())
    assert len(viz.show_frames(ds, "camera", 1, times=[0.0, 0.3]).axes) == 2
    g = torch.zeros((4, 3, 2), device="cuda")
    g[1, 1, 1] = 1
    assert len(viz.voxels(g).axes) == 3
    assert len(viz.voxels(g, view="3d").axes[0].collections[0].get_offsets()) == 1


def test_table_prints_aligned_and_as_escaped_html():
    """viz.Table, the public type rate_table returns: records, an aligned text form (floats to 4 significant
    digits, NaN and None as '-') and HTML with every cell escaped."""
    t = viz.Table(["stream", "Hz"], [["joints", 100.0], ["<cam>", float("nan")], ["gripper", None]], title="rates")
    assert t.records() == [{"stream": "joints", "Hz": 100.0}, {"stream": "<cam>", "Hz": t.rows[1][1]},
                           {"stream": "gripper", "Hz": None}]
    assert repr(t).splitlines() == ["rates", "stream   Hz", "-------  ---", "joints   100", "<cam>    -",
                                    "gripper  -"]
    page = t._repr_html_()
    assert "<caption>rates</caption>" in page and "<td>&lt;cam&gt;</td>" in page and "<cam>" not in page
    assert page.count("<tr>") == 4
