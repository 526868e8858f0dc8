"""Statistics files of the wrong shape (issue 46 item 8): a v2.1 ``meta/episodes_stats.jsonl`` entry or a
``meta/stats.json`` figure whose shape is not the feature's was dropped silently (the set's statistics then
came from the loaded episodes, different for every subset), or crashed with a bare ValueError/TypeError.
Now it is a ReaderError naming the file, the episode, the feature, the statistic and both shapes; a
camera's statistics of the wrong shape are a warning (robocache computes image statistics itself).

tests/lerobot_forge.py writes no statistics: the tests write them here, from the rows it returns."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from lerobot_forge import write_lerobot
from robocache import Dataset
from robocache.readers import ReaderError, read_lerobot, read_stats

pytest.importorskip("pyarrow")

LENGTHS = (6, 9, 5, 7)


def _stats(x: np.ndarray) -> dict:
    """LeRobot's per-episode statistics of rows x [n, D] (lists, as the jsonl holds them)."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(),
            "std": x.std(0).tolist(), "count": [len(x)]}


@pytest.fixture
def lerobot_set(tmp_path):
    """A v2.1 set and its episodes_stats entries (edited by each test, then written with ``write``)."""
    root = tmp_path / "set"
    src = write_lerobot(root, np.random.default_rng(0), lengths=LENGTHS)
    rows = [{"episode_index": e, "stats": {"observation.state": _stats(src["state"][e]),
                                           "action": _stats(src["action"][e]),
                                           "timestamp": _stats(np.arange(n)[:, None] / 10.0)}}
            for e, n in enumerate(LENGTHS)]
    return root, src, rows


def write(root, rows) -> None:
    (root / "meta/episodes_stats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_quietly(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return read_lerobot(root, **kw)


def test_well_formed_stats_are_pooled_over_the_set(lerobot_set):
    """The reference: every episode's rows pooled (population std), whatever episodes are loaded."""
    root, src, rows = lerobot_set
    write(root, rows)
    for episodes in (None, [1, 3]):
        got = read_quietly(root, episodes=episodes).stats
        for key, cols in (("observation.state", src["state"]), ("action", src["action"])):
            every = np.concatenate(cols).astype(np.float64)
            np.testing.assert_allclose(got[key]["mean"], every.mean(0), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got[key]["std"], every.std(0), rtol=1e-10, atol=1e-12)
            np.testing.assert_array_equal(got[key]["min"], every.min(0))
            np.testing.assert_array_equal(got[key]["max"], every.max(0))


def _nested(rows):
    rows[2]["stats"]["observation.state"]["mean"] = [rows[2]["stats"]["observation.state"]["mean"]]


def _short(rows):
    for r in rows:
        r["stats"]["observation.state"]["std"] = r["stats"]["observation.state"]["std"][:2]


def _scalar(rows):
    rows[1]["stats"]["action"]["min"] = -1.0


@pytest.mark.parametrize("edit, episode, key, stat, found, expected", [
    (_nested, 2, "observation.state", "mean", "(1, 3)", "(3,)"),       # one episode: was dropped (np.stack)
    (_short, 0, "observation.state", "std", "(2,)", "(3,)"),           # every episode: was unused silently
    (_scalar, 1, "action", "min", "()", "(2,)"),
], ids=["nested", "short", "scalar"])
def test_wrong_shape_names_file_episode_feature_and_shapes(lerobot_set, edit, episode, key, stat, found, expected):
    root, _, rows = lerobot_set
    edit(rows)
    write(root, rows)
    with pytest.raises(ReaderError) as e:
        read_lerobot(root)
    msg = str(e.value)
    assert msg.startswith(str(root / "meta/episodes_stats.jsonl")), msg
    assert f"episode {episode}: feature '{key}', statistic '{stat}' has shape {found}, expected {expected}" in msg
    assert "info.json" in msg and "fix or remove it" in msg, msg


def test_wrong_shape_fails_the_dataset_load(lerobot_set):
    root, _, rows = lerobot_set
    _nested(rows)
    write(root, rows)
    with pytest.raises(ReaderError, match=r"episodes_stats.jsonl, episode 2: feature 'observation.state'"):
        Dataset.from_lerobot(root, device="cpu")


def test_a_feature_info_does_not_list_keeps_one_shape(lerobot_set):
    """No shape in info.json: every episode's figures must have the shape of the first one."""
    root, _, rows = lerobot_set
    for e, r in enumerate(rows):
        r["stats"]["observation.extra"] = _stats(np.zeros((LENGTHS[e], 5 if e == 1 else 4)))
    write(root, rows)
    with pytest.raises(ReaderError, match=r"episode 1: feature 'observation.extra', statistic 'min' has shape "
                                          r"\(5,\), expected \(4,\) \(from its first statistic \(min, episode 0\)\)"):
        read_lerobot(root)


@pytest.mark.parametrize("count", [[0], [3, 4], "many", [float("nan")]], ids=["zero", "two", "text", "nan"])
def test_bad_count_is_named(lerobot_set, count):
    root, _, rows = lerobot_set
    rows[3]["stats"]["action"]["count"] = count
    write(root, rows)
    with pytest.raises(ReaderError, match=r"episode 3: feature 'action', statistic 'count' is .*expected one "
                                          r"positive number"):
        read_lerobot(root)


def test_values_that_are_not_numbers_are_named(lerobot_set):
    """Was a bare ValueError (ragged lists) or TypeError (a feature that is not an object) naming nothing."""
    root, _, rows = lerobot_set
    rows[1]["stats"]["observation.state"]["max"] = ["a", "b", "c"]
    write(root, rows)
    with pytest.raises(ReaderError, match=r"episode 1: feature 'observation.state', statistic 'max' is not an "
                                          r"array of numbers"):
        read_lerobot(root)
    rows[1]["stats"]["observation.state"] = [1, 2, 3]
    write(root, rows)
    with pytest.raises(ReaderError, match=r"episode 1: feature 'observation.state' is not an object"):
        read_lerobot(root)


def test_set_level_stats_json_is_checked(lerobot_set):
    """meta/stats.json (v2.0, v3.0, GR00T): the same check, naming stats.json; one that is not an object
    of features (was AttributeError) too."""
    root, src, _ = lerobot_set
    every = {k: np.concatenate(src[k]) for k in ("state", "action")}
    stats = {"observation.state": _stats(every["state"]), "action": _stats(every["action"])}
    (root / "meta/stats.json").write_text(json.dumps(stats))
    np.testing.assert_allclose(read_quietly(root).stats["action"]["mean"], every["action"].mean(0))
    stats["action"]["mean"] = [0.0, 0.0, 0.0]
    (root / "meta/stats.json").write_text(json.dumps(stats))
    with pytest.raises(ReaderError) as e:
        read_lerobot(root)
    assert str(e.value).startswith(f"{root / 'meta/stats.json'}: feature 'action', statistic 'mean' has shape "
                                   f"(3,), expected (2,)"), str(e.value)
    (root / "meta/stats.json").write_text(json.dumps([stats]))
    with pytest.raises(ReaderError, match=r"stats.json: expected an object of features, got list"):
        read_lerobot(root)


def test_camera_stats_of_another_shape_warn_and_are_left_out(lerobot_set):
    """A camera's statistics are LeRobot's [C, 1, 1]; of another shape they are left out with one warning
    (robocache computes image statistics itself), and the other features' stay."""
    root, _, rows = lerobot_set
    features = json.loads((root / "meta/info.json").read_text())["features"]
    features["observation.images.top"] = {"dtype": "video", "shape": [48, 64, 3],
                                          "names": ["height", "width", "channels"]}
    per_channel = {"min": [[[0.0]]] * 3, "max": [[[1.0]]] * 3, "mean": [[[0.5]]] * 3, "std": [[[0.2]]] * 3,
                   "count": [10]}
    for r in rows:
        r["stats"]["observation.images.top"] = per_channel
    write(root, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = read_stats(root, features)
    assert got["observation.images.top"]["mean"].shape == (3, 1, 1)
    for r in rows:
        r["stats"]["observation.images.top"] = {k: np.asarray(v).reshape(-1).tolist() if k != "count" else v
                                                for k, v in per_channel.items()}
    write(root, rows)
    with pytest.warns(UserWarning, match=r"episode 0: feature 'observation.images.top', statistic 'min' has shape "
                                         r"\(3,\), expected \(3, 1, 1\).*left out") as seen:
        got = read_stats(root, features)
    assert len(seen) == 1
    assert "observation.images.top" not in got and got["observation.state"]["mean"].shape == (3,)


@pytest.mark.parametrize("name", ["cr5_flashdrive_av1", "cr5_v30", "groot_picknplace"])
def test_real_sets_pass_the_check(DATA, name):
    """LeRobot's own files (v2.1 episodes_stats, v3.0 stats.json, GR00T stats.json) pass, quietly."""
    root = DATA / name
    if not (root / "meta/info.json").is_file():
        pytest.skip(f"{root} is not present")
    features = json.loads((root / "meta/info.json").read_text())["features"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = read_stats(root, features)
    assert got, "no statistics read"
    for key, st in got.items():
        for s, a in st.items():
            if features.get(key, {}).get("dtype") not in ("video", "image"):
                assert a.shape == tuple(features[key]["shape"]), (key, s, a.shape)
