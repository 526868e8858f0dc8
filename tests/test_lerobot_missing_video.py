"""A camera listed in meta/info.json whose video is missing (issue 43 item 4): ``from_lerobot`` stops with an
error naming the camera, the episodes and the file, unless ``missing_videos="drop"`` (then it loads without
the camera); ``doctor`` calls the set broken and names the file. The doctor checks v3.0 sets as it checks v2.1:
files present, rows against the metadata, each episode's span against its video, timestamps against frames.

Sets are written here: v3.0 by ``robocache.demo.write_lerobot`` (one camera, every episode a span of one
mp4), v2.1 by ``lerobot_forge.write_lerobot`` with its camera (one mp4 of noise per episode).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import robocache  # noqa: E402
from lerobot_forge import CAMERA, noise_pictures  # noqa: E402
from lerobot_forge import write_lerobot as write_v21  # noqa: E402
from robocache import doctor  # noqa: E402
from robocache.demo import LEROBOT_CAMERA, write_lerobot  # noqa: E402
from robocache.readers import ReaderError, read_lerobot  # noqa: E402

V21_VIDEO = "videos/chunk-000/{key}/episode_{e:06d}.mp4"
FPS = 15


@pytest.fixture(scope="module")
def v30_master(tmp_path_factory):
    return write_lerobot(tmp_path_factory.mktemp("v30") / "set", num_episodes=3, fps=FPS, image_size=(32, 32))


@pytest.fixture
def v30(v30_master, tmp_path):
    return shutil.copytree(v30_master, tmp_path / "v30")


@pytest.fixture
def v21(tmp_path, rng):
    """A v2.1 set of 3 episodes (lengths 6, 9, 5 at 10 fps) with a camera: one mp4 per episode, a frame per row."""
    root = tmp_path / "v21"
    lengths = (6, 9, 5)
    write_v21(root, rng, lengths=lengths, fps=10.0, camera=(32, 32), pictures=noise_pictures)
    return root


def v30_video(root):
    return root / f"videos/{LEROBOT_CAMERA}/chunk-000/file-000.mp4"


def errors(report, code):
    return [f for f in report.findings if f.level == "error" and f.code == code]


def edit_episodes(root, column, change):
    """meta/episodes of a v3.0 set with ``column`` of the last episode changed by ``change(value)``."""
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(path)
    values = t.column(column).to_pylist()
    values[-1] = change(values[-1])
    pq.write_table(t.set_column(t.column_names.index(column), column, pa.array(values, t.schema.field(column).type)),
                   path)


# ---------------------------------------------------------------------------------------------
# loading


def test_v30_missing_camera_video_is_an_error_naming_camera_episodes_and_file(v30):
    video = v30_video(v30)
    video.unlink()
    with pytest.raises(ReaderError) as err:
        robocache.Dataset.from_lerobot(v30, device="cpu")
    msg = str(err.value)
    assert msg.startswith(f"{video}: video file not found")
    assert f"camera '{LEROBOT_CAMERA}'" in msg and "episodes [0, 1, 2]" in msg and "missing_videos='drop'" in msg


def test_v30_missing_videos_drop_loads_without_the_camera(v30):
    v30_video(v30).unlink()
    with pytest.warns(UserWarning, match=rf"camera '{LEROBOT_CAMERA}' is left out \(missing_videos='drop'\)"):
        ds = robocache.Dataset.from_lerobot(v30, device="cpu", missing_videos="drop")
    assert LEROBOT_CAMERA not in ds.streams and {"observation.state", "action"} <= set(ds.streams)
    assert ds.episode_index.tolist() == [0, 1, 2]


def test_missing_videos_takes_error_or_drop(v30):
    with pytest.raises(ValueError, match="missing_videos must be 'error' or 'drop'"):
        read_lerobot(v30, missing_videos="ignore")


def test_load_video_false_does_not_need_the_videos(v30):
    v30_video(v30).unlink()
    eps = read_lerobot(v30, load_video=False)
    assert eps.extra["episode_index"] == [0, 1, 2] and not eps.extra["videos"]


def test_v21_camera_without_any_video_is_an_error(v21):
    for e in range(3):
        (v21 / V21_VIDEO.format(key=CAMERA, e=e)).unlink()
    with pytest.raises(ReaderError, match=rf"episode_000000\.mp4: video file not found; camera '{CAMERA}' .*"
                                          r"episodes \[0, 1, 2\].*missing_videos='drop'"):
        read_lerobot(v21)
    with pytest.warns(UserWarning, match="missing_videos='drop'"):
        eps = read_lerobot(v21, missing_videos="drop")
    assert CAMERA not in eps.episodes[0] and not eps.extra["videos"]


def test_v21_one_episode_without_its_video_names_camera_episode_and_options(v21):
    gone = v21 / V21_VIDEO.format(key=CAMERA, e=1)
    gone.unlink()
    with pytest.raises(ReaderError) as err:
        read_lerobot(v21)
    msg = str(err.value)
    assert msg.startswith(f"{gone}: video file not found for camera '{CAMERA}'")
    assert "episodes [1]" in msg and "episodes=[0, 2]" in msg and "missing_videos='drop'" in msg
    with pytest.warns(UserWarning, match="1 of 3 episodes lack its video"):
        eps = read_lerobot(v21, missing_videos="drop")
    assert eps.extra["episode_index"] == [0, 1, 2] and not eps.extra["videos"]


def test_camera_no_modality_json_names_and_never_shipped_is_left_out(v21):
    """GR00T's loader reads the cameras meta/modality.json names; one listed beside them and never shipped
    (GR00T's PickNPlace lists such a camera) is left out with a warning, by the loader and the doctor alike."""
    info = json.loads((v21 / "meta/info.json").read_text())
    info["features"]["observation.images.unshipped"] = dict(info["features"][CAMERA])
    (v21 / "meta/info.json").write_text(json.dumps(info))
    (v21 / "meta/modality.json").write_text(json.dumps({"video": {"wrist": {"original_key": CAMERA}}}))
    with pytest.warns(UserWarning, match="'observation.images.unshipped' is listed .* none of its files exist"):
        eps = read_lerobot(v21)
    assert list(eps.extra["videos"]) == [CAMERA]
    r = doctor.diagnose(v21)
    assert r.ok and [f.code for f in r.findings if f.level == "warning"] == ["video_not_shipped"]


# ---------------------------------------------------------------------------------------------
# the doctor


def test_doctor_healthy_v30_set_is_ok(v30, capsys):
    r = doctor.diagnose(v30)
    assert r.ok and not [f for f in r.findings if f.level in ("error", "warning")], r.table()
    cam = {s.name: s for s in r.streams}[LEROBOT_CAMERA]
    rows = pq.read_table(v30 / "data/chunk-000/file-000.parquet").num_rows
    assert cam.kind == "image" and cam.episodes == 3 and cam.count == rows
    assert doctor.main([str(v30)]) == 0 and "-- ok" in capsys.readouterr().out


def test_doctor_v30_missing_video_names_the_file(v30, capsys):
    video = v30_video(v30)
    video.unlink()
    r = doctor.diagnose(v30)
    (miss,) = errors(r, "missing_files")
    assert miss.where == str(video) and LEROBOT_CAMERA in miss.message and "episodes 0-2" in miss.message
    assert not r.ok and doctor.main([str(v30)]) == 1
    assert str(video) in capsys.readouterr().out


def test_doctor_v21_missing_video_names_the_file(v21):
    gone = v21 / V21_VIDEO.format(key=CAMERA, e=2)
    gone.unlink()
    r = doctor.diagnose(v21)
    (miss,) = errors(r, "missing_files")
    assert miss.where == str(gone) and CAMERA in miss.message and "episodes 2" in miss.message
    assert r.exit_code() == 1


def test_doctor_healthy_v21_set_is_ok(v21):
    r = doctor.diagnose(v21)
    assert r.ok and not [f for f in r.findings if f.level in ("error", "warning")], r.table()


def test_doctor_v30_span_past_the_end_of_its_video(v30):
    edit_episodes(v30, f"videos/{LEROBOT_CAMERA}/to_timestamp", lambda t: t + 1.0)
    r = doctor.diagnose(v30)
    (past,) = errors(r, "span_outside")
    assert past.where == str(v30_video(v30)) and "episode 2" in past.message and "ends past the video" in past.message


def test_doctor_v30_rows_fewer_than_the_metadata_says(v30):
    data = v30 / "data/chunk-000/file-000.parquet"
    t = pq.read_table(data)
    ep = t.column("episode_index").to_numpy()
    last = np.flatnonzero(ep == 1)[-3:]                         # episode 1 loses its last 3 rows
    t = t.filter(pa.array(~np.isin(np.arange(t.num_rows), last)))
    pq.write_table(t, data)
    r = doctor.diagnose(v30)
    want = int((ep == 1).sum())
    rows = [f for f in errors(r, "frame_count") if f.where == str(data)]
    assert len(rows) == 1 and f"episode 1: {want - 3} rows in the data files, the episode metadata says {want}" \
        in rows[0].message
    spans = [f for f in errors(r, "frame_count") if f.where == str(v30_video(v30))]
    assert len(spans) == 1 and f"holds {want} video frames, the episode has {want - 3} rows" in spans[0].message


def test_doctor_v30_timestamps_off_their_frames(v30):
    """A span moved by 0.3 frame keeps the same frames (the half-frame span rule) but each row's timestamp
    now asks for a time 0.3 / fps from its frame: LeRobot's decoder would raise its tolerance error."""
    shift = 0.3 / FPS
    for side in ("from_timestamp", "to_timestamp"):
        edit_episodes(v30, f"videos/{LEROBOT_CAMERA}/{side}", lambda t: t + shift)
    r = doctor.diagnose(v30)
    (off,) = errors(r, "frame_times")
    assert "episode 2" in off.message and "tolerance" in off.message
    assert not errors(r, "frame_count") and not errors(r, "span_outside")
