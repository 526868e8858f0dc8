"""One episode whose timestamps disagree with its video (issue 46 item 2): in milliseconds, shifted by +100 s,
or with a 5 s gap the video does not have. Each used to load without a word, and most of the episode's
samples got the wrong frame; the doctor said nothing of the shift (its fps check takes the median step over
every episode). Now each episode's timestamps are held to its frames' times by LeRobot's rule (row i on frame
i within ``tolerance_s`` = 1e-4 s): units and a shift, where no frame could be trusted, are errors; a gap,
which dropped frames can make on purpose, a warning. Either names the file, the episode, the first row off
its frame and both times, and the doctor reports the same.

Sets are LeRobot v2.1 (``lerobot_forge.write_lerobot``) with one PyAV-encoded mp4 per episode, a frame per
row at ``k / FPS``; the expected row and times come from what the test writes, never from the code.
"""

from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import robocache  # noqa: E402
from lerobot_forge import CAMERA, noise_pictures, write_lerobot  # noqa: E402
from robocache import doctor  # noqa: E402
from robocache.readers import ReaderError  # noqa: E402
from robocache.video.times import TOLERANCE_S, check_episode  # noqa: E402

VIDEO = "videos/chunk-000/{key}/episode_{e:06d}.mp4"
FPS = 10
# the healthy episodes outnumber the bad one's steps, so the set's median step (the reader's fps check) is 1/FPS
LENGTHS = (40, 30, 40)
BAD = 1                                     # the episode whose timestamps are edited
GAP_ROW, GAP_S = 12, 5.0


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    """A v2.1 set of 3 episodes with a camera: one mp4 per episode, frame k at k / FPS for row k."""
    root = tmp_path_factory.mktemp("times") / "set"
    write_lerobot(root, np.random.default_rng(0), lengths=LENGTHS, fps=float(FPS), camera=(32, 32),
                  pictures=noise_pictures)
    return root


def with_times(master, tmp_path, change):
    """A copy of the set whose episode BAD has timestamps ``change(ts)`` (float32, as LeRobot writes them);
    returns (root, the timestamps written, the episode's video file)."""
    root = shutil.copytree(master, tmp_path / "set")
    path = root / f"data/chunk-000/episode_{BAD:06d}.parquet"
    t = pq.read_table(path)
    ts = change(t.column("timestamp").to_numpy().astype(np.float64)).astype(np.float32)
    pq.write_table(t.set_column(t.column_names.index("timestamp"), "timestamp", pa.array(ts)), path)
    return root, ts.astype(np.float64), root / VIDEO.format(key=CAMERA, e=BAD)


def load(root):
    return robocache.Dataset.from_lerobot(root, device="cpu", cache=False)


def first_off(message):
    """(row, row time, frame, frame time) the message names."""
    m = re.search(r"row (\d+) is at (-?[\d.]+) s, its video frame (\d+) at (-?[\d.]+) s", message)
    assert m, message
    return int(m[1]), float(m[2]), int(m[3]), float(m[4])


def assert_names(message, ts, row, video=None):
    """The message names episode BAD, ``row`` and both its times: the timestamp written and its frame's time
    (row / FPS: one frame per row from t = 0), and the file ``video`` when given (the doctor's finding gives
    it as ``where``)."""
    assert f"episode {BAD}:" in message and (video is None or str(video) in message), message
    k, at, frame, frame_at = first_off(message)
    assert (k, frame) == (row, row)
    assert at == pytest.approx(ts[row], abs=1e-5) and frame_at == pytest.approx(row / FPS, abs=1e-5)


def frame_times_findings(report):
    return [f for f in report.findings if f.code == "frame_times"]


# ---------------------------------------------------------------------------------------------
# the three faults, at load and in the doctor

def test_timestamps_in_milliseconds_are_an_error(master, tmp_path):
    root, ts, video = with_times(master, tmp_path, lambda t: t * 1000)
    with pytest.raises(ReaderError, match="milliseconds") as err:
        load(root)
    assert_names(str(err.value), ts, row=1, video=video)        # row 0 (t = 0) is on its frame in any unit
    (found,) = frame_times_findings(doctor.diagnose(root))
    assert found.level == "error" and found.where == str(video) and "milliseconds" in found.message
    assert_names(found.message, ts, row=1)


def test_timestamps_shifted_by_100_s_are_an_error(master, tmp_path):
    root, ts, video = with_times(master, tmp_path, lambda t: t + 100)
    with pytest.raises(ReaderError, match=r"no row is on a frame: the timestamps are shifted by \+100 s") as err:
        load(root)
    assert_names(str(err.value), ts, row=0, video=video)
    report = doctor.diagnose(root)
    (found,) = frame_times_findings(report)
    assert found.level == "error" and found.where == str(video) and "shifted by +100" in found.message
    assert_names(found.message, ts, row=0)
    assert report.exit_code() == 1


def test_a_5_s_gap_the_video_lacks_is_a_warning(master, tmp_path):
    root, ts, video = with_times(master, tmp_path, lambda t: t + GAP_S * (np.arange(len(t)) >= GAP_ROW))
    gap = r"the first row off the frames: the timestamps step by 5\.1 s there, the frames by 0\.1 s \(a gap"
    with pytest.warns(UserWarning, match=gap) as said:
        ds = load(root)
    (w,) = [w for w in said if "off the frames" in str(w.message)]
    assert_names(str(w.message), ts, row=GAP_ROW, video=video)
    assert "video_timestamps='parquet'" in str(w.message)
    assert len(ds) == len(LENGTHS)                            # loaded: the gap can be meant
    (found,) = frame_times_findings(doctor.diagnose(root))
    assert found.level == "warning" and found.where == str(video)
    assert_names(found.message, ts, row=GAP_ROW)
    # video_timestamps="parquet" pairs row i with frame i: nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        robocache.Dataset.from_lerobot(root, device="cpu", cache=False, video_timestamps="parquet")


def test_a_healthy_set_loads_and_checks_without_a_word(master):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = load(master)
    assert len(ds) == len(LENGTHS)
    report = doctor.diagnose(master)
    assert not frame_times_findings(report) and report.ok


# ---------------------------------------------------------------------------------------------
# the check itself, on arrays

def test_check_episode_on_arrays():
    v = np.arange(20) / FPS
    assert check_episode(v + TOLERANCE_S / 2, v, episode=0) is None              # within LeRobot's tolerance
    # rows a frame after the video's (GR00T's PickNPlace): each on a frame, the last within a frame of the end
    assert check_episode(v + 1 / FPS, v, episode=0) is None
    late = v + 3.0 * (np.arange(20) >= 5)                                     # 3 s late from row 5
    found = check_episode(late, v, episode=4)
    assert (found.level, found.kind, found.row, found.frame, found.far, found.rows, found.episode) == \
        ("warning", "off_frames", 5, 5, 15, 20, 4)
    assert found.row_time == pytest.approx(3.5) and found.frame_time == pytest.approx(0.5)
    # a gap of whole frames inside the video: every late row is on a frame, but not on its own
    found = check_episode(v + 0.5 * (np.arange(20) >= 5), v, episode=4)
    # rows 15.. are past the last frame (1.9 s), row 15 (2.0 s) within a frame of it: 4 rows with no frame
    assert (found.kind, found.row, found.frame, found.far) == ("off_frames", 5, 5, 4)
    # counts differ: the frame nearest the row's timestamp, as LeRobot's decoder picks it
    found = check_episode(late[:10], v, episode=4)                            # past the video: its last frame
    assert (found.kind, found.row, found.frame, found.far) == ("off_frames", 5, 19, 5)
    found = check_episode(np.array([0.0, 0.1, 0.27]), v, episode=2)
    assert (found.kind, found.row, found.frame) == ("off_frames", 2, 3)
    assert check_episode(np.array([0.0, 0.1, 0.3]), v, episode=2) is None
    assert check_episode(v * 1e6, v, episode=1).message.count("microseconds") == 1
    found = check_episode(v + 0.25, v, episode=1)
    assert (found.level, found.kind, found.row) == ("error", "shifted", 0) and "shifted by +0.25 s" in found.message
    assert check_episode(np.zeros(0), v, episode=1) is None and check_episode(v, np.zeros(0), episode=1) is None
