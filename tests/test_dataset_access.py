"""What a LeRobot user reaches for first: the dataset's own episode numbers (kept through
``from_lerobot(episodes=...)``, ``subset``, repr, plots, errors), map-style ``ds[i]`` / ``frames_view``,
and feature names in every form LeRobot's ``info.json`` writes them (plot legends beside the curves).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from lerobot_forge import TASKS, write_lerobot  # noqa: E402
from robocache.readers.lerobot import _feature_names  # noqa: E402


def multirate(rng, episode_index=None):
    """3 episodes: joints 50 Hz [3], camera 10 Hz uint8 [8, 6, 3], a text phase, a point cloud at 5 Hz."""
    eps = []
    for dur in (1.0, 0.6, 0.8):
        tj = np.arange(0, dur, 1 / 50)
        tc = 0.02 + np.arange(0, dur, 1 / 10)
        tp = np.arange(0, dur, 1 / 5)
        eps.append({"joints": (rng.standard_normal((len(tj), 3)).astype(np.float32), tj),
                    "camera": (rng.integers(0, 256, (len(tc), 8, 6, 3), dtype=np.uint8), tc),
                    "phase": (np.array(["reach", "grasp", "lift"])[np.arange(len(tp)) % 3], tp),
                    "lidar": ([rng.standard_normal((int(rng.integers(1, 6)), 3)).astype(np.float32) for _ in tp], tp)})
    return robocache.Dataset.from_episodes(eps, tasks=["a", "b", "a"], device="cpu", episode_index=episode_index)


# --------------------------------------------------------------------------------------------
# episode numbers


def test_from_lerobot_keeps_episode_numbers(tmp_path, rng):
    pytest.importorskip("pyarrow")
    src = write_lerobot(tmp_path, rng)
    ds = robocache.Dataset.from_lerobot(tmp_path, episodes=[1, 2], device="cpu")
    assert [ep.index for ep in ds.episodes] == [1, 2]
    assert ds.episode_index.tolist() == [1, 2] and ds.episode_index.dtype == np.int64
    assert ds.position(2) == 1 and ds.position(1) == 0
    with pytest.raises(ValueError, match=r"no episode numbered 0 in this dataset; its episodes are \[1, 2\]"):
        ds.position(0)
    assert "episodes [1, 2], 2 episodes" in repr(ds).splitlines()[0]
    # the same as subset of the whole set, which always kept them
    full = robocache.Dataset.from_lerobot(tmp_path, device="cpu")
    sub = full.subset([1, 2])
    assert sub.episode_index.tolist() == ds.episode_index.tolist()
    assert "episodes [" not in repr(full).splitlines()[0]             # 0..E-1: nothing to say
    for name in ("observation.state", "action"):
        for e in range(2):
            torch.testing.assert_close(ds.episode(e)[name][0], sub.episode(e)[name][0], rtol=0, atol=0)
    np.testing.assert_array_equal(ds.episode(1)["observation.state"][0].numpy(), src["state"][2])
    with pytest.raises(IndexError, match=r"episode 5 out of range for 2 episodes \(positions; ds.position"):
        ds.episode(5)


def test_load_errors_name_the_source_episode(rng):
    eps = [{"x": (np.zeros((3, 1), np.float32), np.arange(3.0))},
           {"x": (np.zeros((3, 1), np.float32), np.array([0.0, 2.0, 1.0]))}]
    with pytest.raises(ValueError, match=r"episode 9, stream 'x': times decrease at index 2"):
        robocache.Dataset.from_episodes(eps, device="cpu", episode_index=[7, 9])
    with pytest.raises(ValueError, match="episode_index must hold one integer per episode"):
        robocache.Dataset.from_episodes(eps[:1], device="cpu", episode_index=[7, 9])
    with pytest.raises(ValueError, match="episode_index must hold one integer per episode"):
        robocache.Dataset.from_episodes(eps[:1], device="cpu", episode_index=[1.5])


def test_viz_titles_name_the_source_episode(rng):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from robocache import viz
    ds = multirate(rng, episode_index=[4, 7, 9])
    try:
        fig = viz.plot_episode(ds, 1, keys="joints")
        assert fig.axes[-1].get_xlabel() == "time [s], episode 7 (position 1)"
        fig = viz.show_frames(ds, "camera", -1, n=2)
        assert fig._suptitle.get_text() == "camera, episode 9 (position 2)"
        plain = robocache.Dataset.from_episodes([{"j": (np.zeros((4, 2)), np.arange(4.0))}], device="cpu")
        assert viz.plot_episode(plain, 0).axes[-1].get_xlabel() == "time [s], episode 0"
    finally:
        plt.close("all")


# --------------------------------------------------------------------------------------------
# ds[i]


def test_getitem_is_a_frame_of_the_anchor_stream(rng):
    ds = multirate(rng, episode_index=[4, 7, 9])
    assert len(ds) == 3 and ds.num_episodes == 3                  # len stays the number of episodes
    joints = ds.streams["joints"]
    N = ds.num_frames
    assert N == joints.num_samples == len(ds.frames_view)
    off = joints.offsets_host
    for i in [0, 1, int(off[1]) - 1, int(off[1]), N - 1, -1, -N]:
        f = ds[i]
        g = i % N
        e = int(np.searchsorted(off, g, side="right") - 1)
        t = float(joints.times[g])
        assert int(f["index"]) == g and int(f["episode_index"]) == [4, 7, 9][e]
        assert int(f["frame_index"]) == g - off[e] and float(f["timestamp"]) == t
        assert f["task"] == ["a", "b", "a"][e] and int(f["task_index"]) == ds.tasks.index(f["task"])
        torch.testing.assert_close(f["joints"], joints.values[g], rtol=0, atol=0)
        # the other streams: their value at that time, as resample gives it
        cv, ct = ds.episode(e)["camera"]
        k = int(np.abs(ct.numpy() - t).argmin())
        torch.testing.assert_close(f["camera"], cv[k], rtol=0, atol=0)
        assert f["camera"].shape == (8, 6, 3) and f["camera"].dtype == torch.uint8
        pv, pt = ds.episode(e)["phase"]
        prev = int(np.searchsorted(pt.numpy(), t, side="right") - 1)
        assert f["phase"] == ds.streams["phase"].vocab[int(pv[max(prev, 0)])]
        clouds, lt = ds.episode(e)["lidar"]
        m = int(np.abs(lt.numpy() - t).argmin())
        torch.testing.assert_close(f["lidar"], clouds[m], rtol=0, atol=0)
        assert ds.frames_view[i].keys() == f.keys()


def test_getitem_errors_and_iteration(rng):
    ds = multirate(rng)
    N = ds.num_frames
    with pytest.raises(IndexError, match=rf"frame {N} out of range for the {N} frames of the anchor stream "
                                         r"'joints' \(len\(ds\) = 3 counts episodes"):
        ds[N]
    for bad in (slice(0, 2), 1.0, True, "0"):
        with pytest.raises(TypeError, match="ds\\[i\\] takes an int frame index"):
            ds[bad]
    assert int(ds[np.int64(3)]["index"]) == 3 and int(ds[torch.tensor(3)]["index"]) == 3
    with pytest.raises(TypeError, match="not iterable: iterate ds.episodes"):
        iter(ds)
    assert len(list(ds.frames_view)) == N


def test_getitem_lerobot(tmp_path, rng):
    """On a LeRobot set, ds[i] is LeRobotDataset[i]'s frame: the row's values, the bookkeeping columns."""
    pytest.importorskip("pyarrow")
    src = write_lerobot(tmp_path, rng, lengths=(6, 9, 5, 7))
    ds = robocache.Dataset.from_lerobot(tmp_path, device="cpu")
    f = ds[6 + 4]                                               # LeRobot's global index 10: episode 1, row 4
    assert (int(f["episode_index"]), int(f["frame_index"]), int(f["index"])) == (1, 4, 10)
    np.testing.assert_array_equal(f["observation.state"].numpy(), src["state"][1][4])
    np.testing.assert_array_equal(f["action"].numpy(), src["action"][1][4])
    assert int(f["task_index"]) == src["task_index"][1] and f["task"] == TASKS[src["task_index"][1]]
    assert abs(float(f["timestamp"]) - 0.4) < 1e-6


@pytest.mark.cuda
def test_getitem_cuda_stays_on_device(rng):
    ds = multirate(rng).to("cuda")
    f = ds[5]
    assert f["joints"].device.type == "cuda" and f["camera"].device.type == "cuda"
    assert f["timestamp"].device.type == "cuda" and f["index"].device.type == "cpu"


# --------------------------------------------------------------------------------------------
# feature names


@pytest.mark.parametrize("names,dim,want", [
    (["a", "b"], 2, ["a", "b"]),
    ([["a", "b"]], 2, ["a", "b"]),                                  # nested (LeRobot's [1, D] style)
    ({"motors": ["a", "b"]}, 2, ["a", "b"]),                        # grouped
    ({"arm": ["a", "b"], "gripper": ["g"]}, 3, ["a", "b", "g"]),    # several groups, in order
    ({"motors": [["a", "b"]]}, 2, ["a", "b"]),
    (["height", "width", "channel"], 256 * 256 * 3, None),          # an image's axes, not features
    (["a", "b"], 3, None),                                          # count differs
    ([1, 2], 2, None), (None, 2, None), ([], 0, None), ({"motors": None}, 1, None),
])
def test_feature_names_forms(names, dim, want):
    assert _feature_names({"names": names}, dim) == want


@pytest.mark.parametrize("form", ["nested", "dict"])
def test_lerobot_feature_names_reach_the_plot(tmp_path, rng, form):
    pytest.importorskip("pyarrow")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from robocache import viz
    joints = ["kLeftShoulderPitch", "kLeftShoulderRoll", "kLeftElbow"]
    state = [joints] if form == "nested" else {"motors": joints}
    write_lerobot(tmp_path, rng, state_names=state, action_names={"motors": ["grip", "wrist"]})
    ds = robocache.Dataset.from_lerobot(tmp_path, device="cpu")
    assert ds.streams["observation.state"].feature_names == joints
    assert ds.streams["action"].feature_names == ["grip", "wrist"]
    try:
        fig = viz.plot_episode(ds, 0, keys=["observation.state", "action"])
        fig.canvas.draw()
        for a, want in zip(fig.axes, (joints, ["grip", "wrist"])):
            legend = a.get_legend()
            assert [t.get_text() for t in legend.get_texts()] == want
            # beside the axes: no curve is hidden behind it
            assert not legend.get_window_extent().overlaps(a.get_window_extent())
            assert legend.get_window_extent().x1 <= fig.bbox.x1 + 1       # and inside the figure
    finally:
        plt.close("all")


def test_channel_first_images_resample_as_values():
    """Image stacks that are not frames [H, W, C] (channel-first here) stay plain values: resampled
    like any stream (nearest), not through a frame store they do not have (was AttributeError)."""
    rng = np.random.default_rng(0)
    eps = [{"cam": (rng.integers(0, 256, (n, 3, 8, 8), dtype=np.uint8), np.arange(n) / 10.0)} for n in (5, 4)]
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    assert ds.streams["cam"].kind == "image" and ds.streams["cam"].frames is None
    out = ds.resample("cam", torch.tensor([1]), torch.tensor([[0.1, 0.26]], dtype=torch.float64))
    want = eps[1]["cam"][0][[1, 3]]
    assert out.shape == (1, 2, 3, 8, 8) and torch.equal(out[0], torch.from_numpy(want))


def test_torch_dataloader_over_a_dataset_fails_clearly_and_frames_view_works():
    """len(ds) counts episodes while ds[i] is frame i: torch's DataLoader over ds would silently read
    len(ds) frames of an epoch, so its first fetch is a TypeError saying what to use; over ds.frames_view it
    reads every frame (issue 43 item 2)."""
    import robocache
    torch = pytest.importorskip("torch")
    eps = [{"x": (np.arange(5, dtype=np.float32)[:, None] + 10 * e, np.arange(5) / 10.0)} for e in range(3)]
    ds = robocache.Dataset.from_episodes(eps, device="cpu")
    assert len(ds) == 3 and ds.num_frames == 15
    for kw in ({}, {"batch_size": 4}):
        with pytest.raises(TypeError, match="frames_view"):
            next(iter(torch.utils.data.DataLoader(ds, **kw)))
    seen = [int(i) for b in torch.utils.data.DataLoader(ds.frames_view, batch_size=4) for i in b["index"]]
    assert sorted(seen) == list(range(15))
    import pickle
    import traceback
    with pytest.raises(robocache.ReaderError) as got:
        robocache.Dataset.from_lerobot("/nonexistent/robocache-set")
    e = got.value                               # named as a user imports it, and it crosses processes
    assert traceback.format_exception_only(type(e), e)[0].startswith("robocache.ReaderError: ")
    assert type(pickle.loads(pickle.dumps(e))) is robocache.ReaderError
