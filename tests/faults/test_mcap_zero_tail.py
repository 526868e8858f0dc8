"""The MCAP recovery scan on a zero-filled or garbage tail (issue 46, item 6): a recording whose last
blocks were never written (a crash before the filesystem flushed them, a preallocated file) ends in
zeros. Opcode 0 is no record: the scan reports damage at the first such byte, in a bounded number of
reads, instead of walking the zeros 9 bytes at a time. The work is counted (read calls and bytes, through
a counting file the scan is given), never timed."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rosbags")
from robocache import doctor  # noqa: E402
from robocache.readers import read_rosbag  # noqa: E402
from robocache.readers.mcap_scan import ScannedMcap  # noqa: E402

from test_mcap_recovery import _crafted, _rec  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
#: read calls a scan of the crafted file (header, schema, channel, one chunk) and its damaged tail may
#: make: each record is a header read and a body read; a scan through the tail makes millions
MAX_READS = 100


class _Counting(io.FileIO):
    """A file that counts the read calls and bytes the scan makes, and stops a runaway scan (one that
    walks the tail) with an error instead of letting it crawl for minutes."""

    reads = 0
    read_bytes = 0

    def read(self, n=-1):
        type(self).reads += 1
        if type(self).reads > 10 * MAX_READS:
            raise AssertionError(f"the scan made over {10 * MAX_READS} read calls: it walks the tail")
        b = super().read(n)
        type(self).read_bytes += len(b)
        return b


@pytest.fixture
def counted(monkeypatch):
    """Every file the scan opens is a _Counting (raw, unbuffered: each read the scan makes is counted)."""
    _Counting.reads = _Counting.read_bytes = 0
    monkeypatch.setattr(ScannedMcap, "_file", lambda self: _Counting(self.path, "r"))
    return _Counting


def _with_tail(path: Path, tail: int, garbage: bytes = b"") -> tuple[Path, int]:
    """The crafted recording (10 good messages, no footer) followed by ``garbage`` and ``tail`` zero bytes,
    the zeros a hole (sparse: no disk). Returns the path and the offset where the good records end."""
    _crafted(path, b"")
    good_end = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(good_end)
        f.write(garbage)
        f.truncate(good_end + len(garbage) + tail)
    return path, good_end


@pytest.mark.parametrize("tail", [256 * MiB, 200 * GiB], ids=["256MiB", "200GiB"])
def test_zero_tail_is_damage_found_in_bounded_reads(tmp_path, counted, tail):
    path, good_end = _with_tail(tmp_path / "zeros.mcap", tail)
    scan = ScannedMcap(path)
    scan.open()
    assert scan.damage is not None
    assert scan.damage["offset"] == good_end, scan.damage
    assert "opcode 0x00" in scan.damage["reason"], scan.damage
    assert scan.message_count == 10
    assert counted.reads <= MAX_READS and counted.read_bytes < 1 * MiB, (counted.reads, counted.read_bytes)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = read_rosbag(path, recover=True)
    np.testing.assert_array_equal(ep.episodes[0]["/x"][0].ravel(), np.arange(10.0))
    assert ep.extra["bags"][0]["recovered"]["offset"] == good_end
    assert counted.reads <= 3 * MAX_READS and counted.read_bytes < 3 * MiB, (counted.reads, counted.read_bytes)


@pytest.mark.parametrize("garbage,why", [
    (bytes([0x42]) + (5).to_bytes(8, "little") + b"junk!", "opcode 0x42"),        # a reserved opcode
    (bytes([0x0B]) + (0).to_bytes(8, "little"), "shorter than"),                  # an empty statistics record
], ids=["reserved-opcode", "empty-record"])
def test_garbage_tail_is_damage(tmp_path, counted, garbage, why):
    path, good_end = _with_tail(tmp_path / "garbage.mcap", 64 * MiB, garbage)
    scan = ScannedMcap(path)
    scan.open()
    assert scan.damage["offset"] == good_end and why in scan.damage["reason"], scan.damage
    assert scan.message_count == 10 and counted.reads <= MAX_READS


def test_zero_filled_chunk_is_damage(tmp_path):
    """Zeros inside a chunk (a chunk whose records were never written) end the chunk's records too."""
    from test_mcap_recovery import _chunk, _message
    path = _crafted(tmp_path / "chunk.mcap", _chunk(_message(2 * 10**9, 1.0) + bytes(9 * 1000)))
    scan = ScannedMcap(path)
    scan.open()
    assert "opcode 0x00" in scan.damage["reason"] and scan.message_count == 10, scan.damage


def test_doctor_reports_zero_tail(tmp_path, counted):
    path, good_end = _with_tail(tmp_path / "zeros.mcap", 200 * GiB)
    report = doctor.diagnose(path)
    (f,) = [f for f in report.findings if f.code == "truncated"]
    assert f.level == "error" and f.where == str(path) and f"damaged at byte {good_end:,} " in f.message, f.message
    assert "opcode 0x00" in f.message
    assert counted.reads <= 3 * MAX_READS


def test_private_records_still_skipped(tmp_path, counted):
    """Opcodes 0x80-0xFF are the spec's private records: skipped by seeking, as before."""
    private = _rec(0x80, b"vendor data")
    path, _ = _with_tail(tmp_path / "private.mcap", 0, private)
    scan = ScannedMcap(path)
    scan.open()
    assert scan.damage["reason"] == "the file ends without a footer (recording cut off)"
    assert scan.message_count == 10
