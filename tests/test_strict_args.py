"""What a user gets wrong in DataLoader / Window / Dataset arguments is a clear error naming the argument,
the value and what was expected (or, where it can be meant, a warning at the user's own line), never a
silent wrong batch or a foreign error from deep inside (issue 33 item 3)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402


@pytest.fixture
def ds(rng):
    eps = []
    for e in range(3):
        n, m = 40 + 5 * e, 12 + e
        eps.append({"joints": (rng.standard_normal((n, 3)).astype(np.float32), np.arange(n) / 50.0),
                    "cam": (rng.integers(0, 255, (m, 4, 6, 3), dtype=np.uint8), np.arange(m) / 15.0)})
    return robocache.Dataset.from_episodes(eps, device="cpu")


def build(ds, **windows):
    return DataLoader(ds, 4, windows=windows)


# ----------------------------------------------------------------------------
# Window


@pytest.mark.parametrize("norm", ["min_max", "mean_std", "q01_q99"])
@pytest.mark.parametrize("dtype", [torch.int32, "int64", torch.uint8, torch.bool])
def test_normalize_to_an_integer_dtype_raises(ds, norm, dtype):
    """The scaled values are floats in [-1, 1]: cast to int32 they were all 0 (and +-1), silently."""
    with pytest.raises(ValueError, match=rf"Window\('joints'\): dtype torch\.\w+ with normalize='{norm}'.*floating"):
        build(ds, j=Window("joints", normalize=norm, dtype=dtype))
    b = next(iter(build(ds, j=Window("joints", normalize=norm, dtype=torch.bfloat16))))   # a float dtype is fine
    assert b["j"].dtype == torch.bfloat16


def test_btchw_images_to_an_integer_dtype_raise(ds):
    with pytest.raises(ValueError, match=r"Window\('cam'\): dtype torch\.uint8 with layout='BTCHW'"):
        build(ds, c=Window("cam", layout="BTCHW", dtype=torch.uint8))
    assert next(iter(build(ds, c=Window("cam", dtype=torch.uint8))))["c"].dtype == torch.uint8   # BTHWC: stored


def test_indices_are_whole_steps(ds):
    with pytest.raises(ValueError, match=r"Window\('joints'\): indices are whole steps.*got 0\.5 in \[0, 0\.5\].*offsets="):
        build(ds, j=Window("joints", indices=[0, 0.5]))
    for ok in (range(3), [0, 1, 2], np.arange(3), np.array([0.0, 1.0, 2.0]), torch.arange(3)):
        loader = build(ds, j=Window("joints", indices=ok, rate=50))
        assert next(iter(loader))["j"].shape == (4, 3, 3)


@pytest.mark.parametrize("arg, value, error, match", [
    ("offsets", 0.1, TypeError, r"offsets must be a list of seconds.*got 0\.1 \(for one step: \[0\.1\]\)"),
    ("indices", 3, TypeError, r"indices must be a list of whole steps.*got 3 \(for one step: \[3\]\)"),
    ("offsets", "0.1", TypeError, r"offsets must be a list of seconds.*got '0\.1'"),
    ("offsets", np.float64(0.1), TypeError, r"offsets must be a list"),
    ("offsets", [0.0, "x"], TypeError, r"offsets must be a list of numbers.*\[0\.0, 'x'\]"),
    ("offsets", [0.0, float("nan")], ValueError, r"offsets must be a non-empty list of finite numbers.*nan"),
    ("indices", [[0, 1]], ValueError, r"indices must be a non-empty list"),
])
def test_offsets_and_indices_must_be_lists(ds, arg, value, error, match):
    with pytest.raises(error, match=r"Window\('joints'\): .*" + match):
        build(ds, j=Window("joints", **{arg: value}))


@pytest.mark.parametrize("resize, error, match", [
    ((96.5, 128), TypeError, r"resize must be \(H, W\), two ints of pixels, got \(96\.5, 128\)"),
    (96, TypeError, r"resize must be \(H, W\), two ints of pixels, got 96 \(a square: \(96, 96\)\)"),
    ((96,), TypeError, r"got \(96,\)"),
    ("96x96", TypeError, r"got '96x96'"),
    ((0, 8), ValueError, r"resize must be \(H, W\) > 0, got \(0, 8\)"),
])
def test_resize_is_two_positive_ints(ds, resize, error, match):
    with pytest.raises(error, match=r"Window\('cam'\): .*" + match):
        build(ds, c=Window("cam", resize=resize))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(pad="reflect"), ValueError, r"pad 'reflect' is not one of"),
    (dict(offsets=[0.0], indices=[0]), ValueError, r"not both"),
    (dict(offsets=[]), ValueError, r"offsets must be a non-empty list"),
    (dict(indices=[0, 1], rate=-2.0), ValueError, r"indices need a positive rate \(Hz\), got -2\.0"),
    (dict(mode="cubic"), ValueError, r"mode 'cubic' is not one of"),
    (dict(mode={"other": "nearest"}), ValueError, r"mode names streams not in this window: \['other'\]"),
    (dict(layout="NCHW"), ValueError, r"layout 'NCHW' is not one of"),
    (dict(resize=(0, 8)), ValueError, r"resize must be \(H, W\) > 0"),
    (dict(dtype="floaty"), TypeError, r"dtype must be a torch dtype"),
    (dict(normalize="zscore"), ValueError, r"normalize 'zscore' is not one of"),
    (dict(normalize="min_max", dtype=torch.int32), ValueError, r"dtype torch\.int32 with normalize='min_max'"),
    (dict(voxel=[1, 2]), TypeError, r"voxel must be a dict"),
    (dict(voxel={"grid": 4, "colour": 1}), ValueError, r"voxel has unknown keys \['colour'\]"),
])
def test_window_checks_its_arguments_when_made(kwargs, error, match):
    """What needs no dataset is checked by Window itself, at construction, naming the Window."""
    with pytest.raises(error, match=r"Window\('joints'\): .*" + match):
        Window("joints", **kwargs)


def test_window_changed_after_it_was_made_is_checked_by_the_loader(ds):
    w = Window("joints")
    w.pad = "reflect"
    with pytest.raises(ValueError, match=r"Window\('joints'\): pad 'reflect'"):
        build(ds, j=w)


def test_resize_takes_numpy_ints(ds):
    b = next(iter(build(ds, c=Window("cam", resize=np.array([3, 5])))))
    assert b["c"].shape == (4, 1, 3, 5, 3)


# ----------------------------------------------------------------------------
# DataLoader


def test_windows_must_be_a_dict(ds):
    with pytest.raises(TypeError, match=r"windows: expected a dict \{output key: Window or stream name\}, got list"):
        DataLoader(ds, 4, windows=[Window("joints")])
    with pytest.raises(TypeError, match="got str 'joints'"):
        DataLoader(ds, 4, windows="joints")


def test_drop_last_with_a_batch_larger_than_the_epoch_warns_at_the_call(ds):
    n = ds.streams["joints"].num_samples
    with pytest.warns(UserWarning, match=rf"drop_last=True with batch_size={n + 1} and {n} samples per epoch: "
                                         rf"every epoch has 0 batches; use a batch_size <= {n}") as rec:
        loader = DataLoader(ds, n + 1, drop_last=True, windows={"j": "joints"})
    assert len(loader) == 0 and rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(DataLoader(ds, n, drop_last=True, windows={"j": "joints"})) == 1
        assert len(DataLoader(ds, n + 1, windows={"j": "joints"})) == 1


@pytest.mark.skipif(robocache.cuda_available(), reason="the error is for machines without a usable GPU")
def test_cuda_device_without_cuda_is_a_value_error(ds, rng):
    """torch's own AssertionError ("Torch not compiled with CUDA enabled") named no argument."""
    for call in (lambda: DataLoader(ds, 4, windows={"j": "joints"}, device="cuda"),
                 lambda: ds.to("cuda"), lambda: ds.to("cuda:1"), lambda: ds.streams["joints"].to("cuda"),
                 lambda: robocache.Dataset.from_episodes([{"x": (np.zeros(3), np.arange(3.0))}], device="cuda")):
        with pytest.raises(ValueError, match=r"device='cuda(:1)?', but .*use device='cpu'"):
            call()
    with pytest.raises(ValueError, match=r"device='gpu' is not a device .*expected 'cpu', 'cuda' or 'cuda:N'"):
        ds.to("gpu")
    assert ds.to("cpu") is ds


@pytest.mark.cuda
def test_cuda_device_out_of_range_is_a_value_error(ds):
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"device='cuda:{n}', but torch sees {n} CUDA device"):
        ds.to(f"cuda:{n}")


# ----------------------------------------------------------------------------
# Dataset


def test_unknown_stream_names_the_streams(ds):
    for call in (lambda: ds.streams["actions"], lambda: ds.resample("actions", [0], [[0.0]]),
                 lambda: ds.frame_ids("actions", [0], [[0.0]])):
        with pytest.raises(KeyError, match=r"unknown stream 'actions'; the dataset has \['cam', 'joints'\]"):
            call()
    with pytest.raises(KeyError, match="did you mean 'joints'"):
        ds.streams["joint"]
    # still a dict: get, in, iteration, dict() as before
    assert isinstance(ds.streams, dict) and ds.streams.get("actions") is None and "actions" not in ds.streams
    assert list(ds.streams) == ["joints", "cam"] and dict(ds.streams) == ds.streams
    assert ds.subset([1]).streams["joints"].num_samples == 45


# ----------------------------------------------------------------------------
# warnings point at the user's line


def test_rosbag_warnings_point_at_the_users_call(tmp_path):
    """A reader warning reached through Dataset.from_rosbag named a line of robocache/data/dataset.py (a fixed
    stacklevel counts one call depth); it names the caller's line however deep robocache's frames go."""
    pytest.importorskip("rosbags")
    import rosbag_forge as forge
    scene = forge.scenario(seed=7)
    sim = [forge.Msg(m.topic, m.msgtype, m.log, m.stamp - forge.T0 + 100 * 10**9, m.fields)
           if m.stamp is not None else m for m in scene.msgs if m.topic in ("/odom", "/battery")]
    bag = forge.write_bag(forge.Scenario(sim), tmp_path / "sim", "mcap")
    from robocache.readers import read_rosbag
    for call in (lambda: robocache.Dataset.from_rosbag(bag, device="cpu"), lambda: read_rosbag(bag)):
        with pytest.warns(UserWarning, match="different clocks") as rec:
            call()
        assert [w.filename for w in rec if "different clocks" in str(w.message)] == [__file__]


@pytest.mark.cuda
def test_graph_capture_warning_points_at_the_users_loop(monkeypatch):
    """The capture runs inside the loader's generator, two calls below the user's for loop."""
    from robocache.loader import batch_graph
    monkeypatch.setattr(batch_graph, "supported", lambda: False)
    t = np.arange(40) / 50.0
    ds = robocache.Dataset.from_episodes([{"j": (np.zeros((40, 2), np.float32), t)}], device="cuda")
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed") as rec:
        for _ in DataLoader(ds, 4, windows={"j": "j"}):
            pass
    assert rec[0].filename == __file__


# ----------------------------------------------------------------------------
# from_lerobot's episodes= (the LeRobot reader is being rewritten: issue 28)


@pytest.fixture
def lerobot_set(tmp_path, rng):
    pytest.importorskip("pyarrow")
    from lerobot_forge import write_lerobot
    write_lerobot(tmp_path / "set", rng)
    return tmp_path / "set"


def test_from_lerobot_repeated_episodes_raise(lerobot_set):
    with pytest.raises(ValueError, match=r"(?i)episodes.*0.*(twice|repeat|duplicate|more than once)"):
        robocache.Dataset.from_lerobot(lerobot_set, episodes=[0, 0], device="cpu")


def test_from_lerobot_episodes_must_be_a_list(lerobot_set):
    with pytest.raises(TypeError, match=r"(?i)episodes.*3.*(list|sequence|iterable)"):
        robocache.Dataset.from_lerobot(lerobot_set, episodes=3, device="cpu")
