"""The demo's and the tests' video writer: an AV1 encode runs in a child process with a deadline, started
again when it misses it (SVT-AV1 now and then deadlocks on a loaded machine: robocache.video.encode)."""
import numpy as np
import pytest

av = pytest.importorskip("av")

from robocache.video import encode  # noqa: E402


def _frames(n=12):
    return np.random.default_rng(0).integers(0, 256, (n, 32, 48, 3), dtype=np.uint8)


def _codec():
    try:
        return encode.pick_encoder("libsvtav1")
    except ValueError:
        pytest.skip("this PyAV has no libsvtav1")


def test_av1_in_a_child_writes_every_frame(tmp_path):
    path = tmp_path / "a.mp4"
    encode.encode_mp4(path, _frames(), _codec(), 10)
    with av.open(str(path)) as f:
        assert sum(1 for _ in f.decode(video=0)) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"]      # nothing left beside it


def test_a_missed_deadline_is_retried_then_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(encode, "AV1_DEADLINE_S", 1e-3)     # every try "stops": the child is killed
    path = tmp_path / "a.mp4"
    with pytest.raises(RuntimeError, match=r"libsvtav1 encoder stopped .* 3 times.*codec='libx264'"):
        encode.encode_mp4(path, _frames(), _codec(), 10)
    assert not path.exists()


def test_a_folder_that_is_not_there_is_an_error_naming_it(tmp_path):
    with pytest.raises(OSError, match="no_such_dir"):
        encode.encode_mp4(tmp_path / "no_such_dir" / "a.mp4", _frames(), _codec(), 10)


@pytest.mark.parametrize("codec", ["libsvtav1", "libx264"])
def test_encoder_and_muxer_options_reach_the_file(tmp_path, codec):
    """Options travel to the encoder and the muxer, the AV1 child included: faststart puts the moov box
    before the media data, and a keyframe interval of 5 gives keyframes at 0, 5, 10 (x264's scene-cut
    keyframes off: every random frame is a scene cut)."""
    if codec == "libsvtav1":
        _codec()
    path = tmp_path / "a.mp4"
    encode.encode_mp4(path, _frames(), codec, 10, {"g": "5"} | ({"crf": "30"} if codec == "libsvtav1" else {"sc_threshold": "0"}),
                      {"movflags": "faststart"})
    data = path.read_bytes()
    assert 0 < data.index(b"moov") < data.index(b"mdat")
    with av.open(str(path)) as f:
        keys = sorted(round(float(p.pts * p.time_base) * 10) for p in f.demux(video=0) if p.size and p.is_keyframe)
    assert keys == [0, 5, 10], keys
    encode.encode_mp4(path, _frames(), codec, 10)                   # without: the moov at the end
    data = path.read_bytes()
    assert data.index(b"mdat") < data.index(b"moov")
