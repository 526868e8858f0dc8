"""A hand-edited or hostile meta/info.json (issue 34, items 5 and 11): each fault a ReaderError naming
info.json (or the file at fault) or a warning, never a silent change, a file read outside the root, a
memory blow-up or a bare AttributeError/KeyError."""

import json
import warnings

import numpy as np
import pytest

from lerobot_forge import write_lerobot
from robocache import Dataset
from robocache.readers import ReaderError, read_lerobot

pytest.importorskip("pyarrow")


@pytest.fixture
def ds(tmp_path):
    root = tmp_path / "set"
    write_lerobot(root, np.random.default_rng(0), fps=10.0)
    return root


def edit_info(root, **changes):
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    for k, v in changes.items():
        if v is KeyError:
            info.pop(k, None)
        else:
            info[k] = v
    path.write_text(json.dumps(info))
    return path


def read_quietly(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return read_lerobot(root, **kw)


# --- item 5: fps against the timestamps


def test_fps_30_on_10hz_timestamps_is_an_error_naming_info_json(ds):
    info = edit_info(ds, fps=30)
    with pytest.raises(ReaderError, match=r"info\.json: fps is 30 .* 10 Hz") as e:
        read_lerobot(ds)
    assert str(e.value).startswith(str(info)) and "Set 'fps'" in str(e.value)
    with pytest.raises(ReaderError, match="info.json: fps is 30"):
        Dataset.from_lerobot(ds)


def test_fps_slightly_off_warns_with_the_measured_rate(ds):
    edit_info(ds, fps=10.5)
    with pytest.warns(UserWarning, match=r"info\.json: fps is 10\.5 but the timestamps step by 0\.1 s .*: 10 Hz") as w:
        read_lerobot(ds)
    assert w[0].filename == __file__      # at the user's call


def test_fps_that_matches_loads_quietly(ds):
    eps = read_quietly(ds)
    assert eps.extra["fps"] == 10.0 and len(eps.episodes) == 4


@pytest.mark.parametrize("fps", [0, -10, float("nan"), float("inf"), "30", None, True])
def test_fps_not_a_positive_number_names_info_json(ds, fps):
    path = ds / "meta" / "info.json"
    info = json.loads(path.read_text())
    info["fps"] = fps
    # json.dumps writes NaN and Infinity, which Python's json reads back: what a hostile file can hold
    path.write_text(json.dumps(info))
    with pytest.raises(ReaderError, match=r"info\.json: 'fps' must be a finite number > 0"):
        read_lerobot(ds)


# --- item 5: templates and feature keys confined to the root


@pytest.mark.parametrize("tmpl", ["../outside/episode_{episode_index:06d}.parquet",
                                  "data/../../outside/episode_{episode_index:06d}.parquet",
                                  "/tmp/episode_{episode_index:06d}.parquet"])
def test_data_path_outside_the_root_is_refused(ds, tmp_path, tmpl):
    # a planted file there: without the check it would be read
    (tmp_path / "outside").mkdir(exist_ok=True)
    for f in sorted((ds / "data" / "chunk-000").iterdir()):
        (tmp_path / "outside" / f.name).write_bytes(f.read_bytes())
    edit_info(ds, data_path=tmpl)
    with pytest.raises(ReaderError, match=r"info\.json: data_path for episode 0 gives .* outside the dataset root"):
        read_lerobot(ds)


def test_video_key_with_dotdot_is_refused(ds):
    info = edit_info(ds, video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    data = json.loads(info.read_text())
    data["features"]["../../../etc"] = {"dtype": "video", "shape": [4, 4, 3], "names": ["height", "width", "channel"]}
    info.write_text(json.dumps(data))
    with pytest.raises(ReaderError, match=r"video_path for feature '\.\./\.\./\.\./etc'.* outside the dataset root"):
        read_lerobot(ds)


def test_symlinks_inside_the_root_are_followed(tmp_path):
    # Hugging Face's cache: the snapshot folder and every file in it are links into a blob store
    real = tmp_path / "blobs"
    write_lerobot(real, np.random.default_rng(1))
    snap = tmp_path / "hub" / "snapshots"
    snap.mkdir(parents=True)
    (snap / "rev").symlink_to(real)
    linked = tmp_path / "linked"
    (linked / "data" / "chunk-000").mkdir(parents=True)
    (linked / "meta").symlink_to(real / "meta")
    for f in (real / "data" / "chunk-000").iterdir():
        (linked / "data" / "chunk-000" / f.name).symlink_to(f)
    for root in (snap / "rev", linked):
        eps = read_quietly(root)
        assert len(eps.episodes) == 4


@pytest.mark.parametrize("tmpl, what", [
    ("data/episode_{episode_index:>2000000000}.parquet", "formats {episode_index}"),
    ("data/episode_{episode_index:0999d}.parquet", "formats {episode_index}"),
    ("data/episode_{episode_index!r}.parquet", "formats {episode_index}"),
    ("data/episode_{episode_index.real}.parquet", "has the field {episode_index.real}"),
    ("data/{foo}/episode_{episode_index:06d}.parquet", "has the field {foo}"),
    ("data/{chunk_index:03d}/episode_{episode_index:06d}.parquet", "has the field {chunk_index}"),
    ("data/episode_{episode_index:06d.parquet", "not a valid template"),
])
def test_template_fields_and_specs_are_lerobots(ds, tmpl, what):
    edit_info(ds, data_path=tmpl)
    with pytest.raises(ReaderError, match=r"info\.json: data_path .*" + "".join(
            "\\" + c if c in "{}.()[]!*+?^$|" else c for c in what)):
        read_lerobot(ds)


def test_lerobots_own_templates_pass(ds):
    edit_info(ds, data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
              video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
    assert len(read_quietly(ds).episodes) == 4


# --- item 11: info.json's shape, episodes.jsonl, features


@pytest.mark.parametrize("content, what", [("[1, 2]", "got list"), ("null", "got NoneType"), ('"v2.1"', "got str")])
def test_info_json_not_an_object(ds, content, what):
    (ds / "meta" / "info.json").write_text(content)
    with pytest.raises(ReaderError, match=r"info\.json: expected a JSON object, " + what):
        read_lerobot(ds)


@pytest.mark.parametrize("features, what", [([1, 2], "'features' must be an object"),
                                            ("camera", "'features' must be an object"),
                                            ({"action": [2]}, "feature 'action' must be an object")])
def test_features_not_objects(ds, features, what):
    edit_info(ds, features=features)
    with pytest.raises(ReaderError, match=r"info\.json: " + what):
        read_lerobot(ds)


def test_episodes_jsonl_without_episode_index(ds):
    path = ds / "meta" / "episodes.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = json.dumps({"tasks": ["x"], "length": 5})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReaderError, match=r"episodes\.jsonl: entry 3 has no 'episode_index'"):
        read_lerobot(ds)
    lines[2] = json.dumps({"episode_index": "2", "length": 5})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReaderError, match=r"episodes\.jsonl: entry 3 has episode_index '2'"):
        read_lerobot(ds)
    lines[2] = "[2, 5]"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReaderError, match=r"episodes\.jsonl: entry 3 has no 'episode_index'"):
        read_lerobot(ds)


def test_info_without_features_warns_naming_the_video_folder(ds):
    (ds / "videos" / "chunk-000" / "observation.images.top").mkdir(parents=True)
    (ds / "videos" / "chunk-000" / "observation.images.top" / "episode_000000.mp4").write_bytes(b"\0" * 64)
    edit_info(ds, features=KeyError)
    with pytest.warns(UserWarning, match=rf"{ds / 'videos'} holds videos but .*info\.json lists no video feature "
                                         r"\(no features\)") as w:
        eps = read_lerobot(ds)
    assert w[0].filename == __file__
    assert len(eps.episodes) == 4
    read_quietly(ds, load_video=False)   # videos not asked for: nothing to say


def test_checks_run_before_shard_metadata(ds):
    from robocache.readers.lerobot import episode_weights
    edit_info(ds, data_path="../x/{episode_index}.parquet")
    with pytest.raises(ReaderError, match="outside the dataset root"):
        episode_weights(ds)
