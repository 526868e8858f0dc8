"""The MCAP recovery scan (``doctor`` on a damaged .mcap, ``read_rosbag(recover=True)``) on hostile and
cut-off files: memory stays O(chunk) (peak RSS checked in a child process), the damage is reported
naming the file, and the doctor never shows a traceback."""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rosbags")
from robocache import doctor  # noqa: E402
from robocache.readers import ReaderError, read_rosbag  # noqa: E402
from robocache.readers.mcap_scan import MAGIC, MAX_RECORD_BYTES, ScannedMcap  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
RSS_LIMIT_MB = 300
# the sanitized CI pass preloads ASan: its shadow memory cannot live under RLIMIT_AS, and its quarantine
# of freed blocks (256 MiB) would be counted as the scan's, so there the child runs unbounded, unmeasured
ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
# thread stacks and malloc arenas reserve address space per core: a 64-core runner must fit 2 GiB too
THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}

# the doctor in a child process under a 2 GiB address-space limit (so the old unbounded scan fails
# there, not on the machine), printing its peak RSS: VmHWM, the high-water mark of the memory map exec
# made (getrusage's ru_maxrss starts a forked child at its parent's RSS, pytest's)
CHILD = """
import sys
from robocache import doctor
code = doctor.main(sys.argv[1:])
with open("/proc/self/status") as f:
    print("peak_kib", next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")), file=sys.stderr)
sys.exit(code)
"""


def _doctor_child(*args):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    r = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), **THREADS), cwd=ROOT, preexec_fn=None if ASAN else limit,
                       timeout=300)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    rss = [int(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("peak_kib")]
    assert rss, r.stderr[-3000:]
    return r, 0 if ASAN else rss[0] / 1024


# ----------------------------------------------------------------------------
# crafted files

def _rec(op: int, body: bytes) -> bytes:
    return bytes([op]) + struct.pack("<Q", len(body)) + body


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def _message(t: int, value: float) -> bytes:
    cdr = b"\x00\x01\x00\x00" + struct.pack("<d", value)      # std_msgs/Float64, little-endian CDR
    return _rec(0x05, struct.pack("<HIQQ", 1, 0, t, t) + cdr)


def _chunk(records: bytes, *, compression="", data=None, declared=None) -> bytes:
    data = records if data is None else data
    size = len(records) if declared is None else declared
    return _rec(0x06, struct.pack("<QQQI", 0, 0, size, 0) + _s(compression) + struct.pack("<Q", len(data)) + data)


def _crafted(path: Path, bad_chunk: bytes) -> Path:
    """An MCAP with one Float64 topic: a chunk of 10 good messages, then ``bad_chunk``, no footer."""
    head = MAGIC + _rec(0x01, _s("ros2") + _s("crafted"))
    schema = _rec(0x03, struct.pack("<H", 1) + _s("std_msgs/msg/Float64") + _s("ros2msg") + _s("float64 data"))
    channel = _rec(0x04, struct.pack("<HH", 1, 1) + _s("/x") + _s("cdr") + struct.pack("<I", 0))
    good = _chunk(b"".join(_message(10**9 + i * 10**7, float(i)) for i in range(10)))
    path.write_bytes(head + schema + channel + good + bad_chunk)
    return path


def _zstd():
    try:
        from compression import zstd  # Python 3.14
    except ImportError:
        zstd = pytest.importorskip("backports.zstd")
    return zstd


def _zstd_bomb(inflated: int) -> bytes:
    """zstd data of ``inflated`` zero bytes (about 0.1 MiB for 3 GiB)."""
    zstd = _zstd()
    c = zstd.ZstdCompressor()
    block = bytes(64 * MiB)
    out = [c.compress(block) for _ in range(inflated // len(block))]
    return b"".join(out) + c.flush()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    lz4 = pytest.importorskip("lz4.frame")
    bomb = _zstd_bomb(3 << 30)
    assert len(bomb) < 0.2 * MiB
    return {
        # claims a chunk of 1 TiB
        "huge": (_crafted(d / "huge.mcap", _chunk(b"", data=b"\0" * 100, declared=1 << 40)),
                 r"declares 1,099,511,627,776 bytes uncompressed, more than the scan's 268,435,456-byte limit"),
        # 0.1 MiB that inflate to 3 GiB, declaring 64 MiB
        "bomb": (_crafted(d / "bomb.mcap", _chunk(b"", compression="zstd", data=bomb, declared=64 * MiB)),
                 r"decompresses to more than 67,108,864 bytes its header says"),
        # lz4 data that is not lz4 (the lz4 library raises RuntimeError)
        "garbage": (_crafted(d / "garbage.mcap", _chunk(b"", compression="lz4", data=b"\x04\x22\x4d\x18junk" * 50,
                                                        declared=1000)), r"does not decompress as lz4"),
        # a top-level record longer than the file
        "long": (_crafted(d / "long.mcap", _rec(0x05, b"x" * 10)[:1] + struct.pack("<Q", 1 << 50)),
                 r"is 1,125,899,906,842,624 bytes long but the file ends"),
        "lz4_ok": (_crafted(d / "lz4_ok.mcap", _chunk(_message(2 * 10**9, 42.0), compression="lz4",
                                                      data=lz4.compress(_message(2 * 10**9, 42.0)))), None),
    }


def test_scan_reports_hostile_chunks(hostile):
    for name, (path, why) in hostile.items():
        scan = ScannedMcap(path)
        scan.open()
        got = list(scan.messages())
        if why is None:         # a good lz4 chunk after the plain one, then the file just ends
            assert scan.damage["reason"] == "the file ends without a footer (recording cut off)"
            assert [t for _, t, _ in got][-1] == 2 * 10**9 and scan.message_count == len(got) == 11
            continue
        assert scan.damage is not None, name
        assert scan.damage["size"] == path.stat().st_size
        assert scan.damage["offset"] > 8
        assert re.search(why, scan.damage["reason"]), (name, scan.damage)
        # the 10 messages before the damage, in order, and nothing of the bad chunk
        assert scan.message_count == len(got) == 10
        assert [t for _, t, _ in got] == [10**9 + i * 10**7 for i in range(10)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = read_rosbag(path, recover=True)
        np.testing.assert_array_equal(ep.episodes[0]["/x"][0].ravel(), np.arange(10.0))
        assert ep.extra["bags"][0]["recovered"]["offset"] == scan.damage["offset"]


@pytest.mark.parametrize("name", ["huge", "bomb", "garbage"])
def test_doctor_on_hostile_files_is_bounded(hostile, name):
    path, why = hostile[name]
    r, rss_mb = _doctor_child(path, "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    report = json.loads(r.stdout)
    (f,) = [f for f in report["findings"] if f["code"] == "truncated"]
    assert f["level"] == "error" and f["where"] == str(path)
    assert rss_mb < RSS_LIMIT_MB, f"{name}: peak RSS {rss_mb:.0f} MB"


def test_record_cap_is_the_documented_figure():
    assert MAX_RECORD_BYTES == 256 * MiB


# ----------------------------------------------------------------------------
# a cut-off recording with a large record, from the real arm log's bytes


def _cut_with_attachment(src: Path, dst: Path, pad: int) -> tuple[Path, Path]:
    """The real MCAP cut at 2/3 (a recording that did not close), and the same with a ``pad``-byte
    attachment record after its header (written sparse: holes cost no disk). Returns (plain, padded)."""
    data = src.read_bytes()
    cut = len(data) * 2 // 3
    plain = dst / "cut.mcap"
    plain.write_bytes(data[:cut])
    assert data[8] == 0x01                                   # the header record comes first
    after_header = 8 + 9 + struct.unpack_from("<Q", data, 9)[0]
    fields = struct.pack("<QQ", 0, 0) + _s("calibration.bin") + _s("application/octet-stream")
    padded = dst / "cut_padded.mcap"
    with open(padded, "wb") as f:
        f.write(data[:after_header])
        f.write(bytes([0x09]) + struct.pack("<Q", len(fields) + 8 + pad + 4) + fields + struct.pack("<Q", pad))
        f.seek(pad, 1)
        f.write(struct.pack("<I", 0) + data[after_header:cut])
    return plain, padded


def test_cut_off_recording_streams(sim_dir, tmp_path):
    (src,) = sim_dir.glob("*.mcap")
    plain, padded = _cut_with_attachment(src, tmp_path, 1 << 30)
    assert padded.stat().st_size > 1 << 30
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = read_rosbag(plain, recover=True), read_rosbag(padded, recover=True)
    assert a.episodes[0].keys() == b.episodes[0].keys()
    for k, (v, t) in a.episodes[0].items():
        np.testing.assert_array_equal(b.episodes[0][k][0], v)
        np.testing.assert_array_equal(b.episodes[0][k][1], t)
    assert 1000 < len(a.episodes[0]["/imu/data.orientation"][1]) < 4712

    r, rss_mb = _doctor_child(padded, "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    report = json.loads(r.stdout)
    (f,) = [f for f in report["findings"] if f["code"] == "truncated"]
    assert f["where"] == str(padded) and "but the file ends" in f["message"]
    assert rss_mb < RSS_LIMIT_MB, f"peak RSS {rss_mb:.0f} MB for a {padded.stat().st_size / 1e9:.1f} GB file"


def test_doctor_never_tracebacks(tmp_path, monkeypatch, capsys):
    """A failure the doctor does not expect (here injected into the bag reader) is an error finding
    naming the file, and an exception from the source as a whole is one line on stderr."""
    from robocache.readers import rosbag
    path = _crafted(tmp_path / "x.mcap", b"")

    def boom(*a, **k):
        raise IndexError("list index out of range")
    monkeypatch.setattr(rosbag, "read_bag", boom)
    r = doctor.diagnose(path)
    (f,) = r.findings
    assert (f.level, f.code, f.where) == ("error", "unreadable", str(path))
    assert f.message == f"{path}: cannot read: IndexError: list index out of range"
    monkeypatch.setattr(doctor, "diagnose", boom)
    assert doctor.main([str(path)]) == 2
    assert capsys.readouterr().err == f"doctor: {path}: cannot check it: IndexError: list index out of range\n"


def test_recover_names_the_file(tmp_path):
    bad = tmp_path / "not.mcap"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ReaderError, match=r"not\.mcap"):
        read_rosbag(bad, recover=True)
