"""A forward scan of an MCAP file that stops at the first damaged record: what is readable of a
recording that did not close cleanly (no footer, no summary, a chunk cut off).

``rosbags`` refuses such files (it needs the end magic and the summary). The scan reads records
from the start (spec: https://mcap.dev/spec): schemas, channels, messages and chunks (lz4, zstd
or none, checksum verified), until a record runs past the end of the file or does not decode.
``ScannedMcap`` offers the part of the rosbags reader interface that read_bag uses, so the
messages before the damage load like any bag (``read_rosbag(..., recover=True)``), and
``damage`` says where and why the scan stopped (the doctor reports it).

Memory stays O(chunk) whatever the file (a damaged file is exactly where sizes cannot be trusted):
the file is read one record at a time (records the scan does not use, such as attachments, are
skipped by seeking), a chunk is inflated to at most the uncompressed size its header declares, and no
record or chunk may exceed ``MAX_RECORD_BYTES``. ``open`` counts the messages; ``messages``
reads the file again and yields them chunk by chunk (each chunk's in log-time order), so nothing
holds every message at once.

Work stays O(records) and a damaged tail costs O(1): opcode 0 (the zeros of blocks a crash never wrote,
or of a preallocated file) and the opcodes the spec reserves (0x10-0x7F) are no record, and a spec record
shorter than its smallest form (4 bytes) is none either; each is reported as damage at its offset rather
than skipped 9 bytes at a time (a 200 GiB sparse tail took minutes before). Private records (0x80-0xFF)
are skipped by seeking, as the spec asks.
"""

from __future__ import annotations

import struct
from binascii import crc32
from pathlib import Path

from ._common import ReaderError

MAGIC = b"\x89MCAP0\r\n"
OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK, OP_FOOTER, OP_DATA_END = 0x03, 0x04, 0x05, 0x06, 0x02, 0x0F
#: the largest record (a chunk: compressed or inflated) the scan reads. Writers make chunks of about
#: 1 MiB (rosbag2 768 KiB, the mcap CLI 4 MiB); one larger message makes a chunk its size, and 256 MiB
#: holds a 4K RGB frame 30 times over. A record claiming more is reported as damage, not read.
MAX_RECORD_BYTES = 256 << 20
#: the smallest body of a spec record (0x01-0x0F): Data End's 4-byte CRC; every other one is longer
MIN_SPEC_RECORD = 4


def _not_a_record(op: int, n: int) -> str | None:
    """Why a record header of opcode ``op`` and body length ``n`` cannot start a record (zero fill, garbage),
    or None: opcode 0 and the reserved 0x10-0x7F, a spec record too short to hold its fields."""
    if op == 0 or 0x10 <= op < 0x80:
        what = "zero fill" if op == 0 and n == 0 else "garbage"
        return f"opcode 0x{op:02x} is not an MCAP record (the bytes from here are {what})"
    if op < 0x10 and n < MIN_SPEC_RECORD:
        return f"record 0x{op:02x} of {n} bytes is shorter than any MCAP record ({MIN_SPEC_RECORD} bytes)"
    return None


class _Damaged(Exception):
    pass


def _decompress(data: bytes, compression: str, size: int, crc: int) -> bytes:
    """A chunk's records, inflated to at most ``size`` + 1 bytes (one more shows a chunk that holds
    more than its header says, without inflating the rest)."""
    if size > MAX_RECORD_BYTES:
        raise _Damaged(f"chunk declares {size:,} bytes uncompressed, more than the scan's "
                       f"{MAX_RECORD_BYTES:,}-byte limit (MAX_RECORD_BYTES)")
    try:
        if compression == "":
            raw = data
        elif compression == "lz4":
            from lz4.frame import LZ4FrameDecompressor  # type: ignore[import-untyped]  # no stubs
            raw = LZ4FrameDecompressor().decompress(data, max_length=size + 1)
        elif compression == "zstd":
            try:
                from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
            except ImportError:
                from backports import zstd
            raw = zstd.ZstdDecompressor().decompress(data, max_length=size + 1)
        else:
            raise _Damaged(f"unsupported chunk compression {compression!r}")
    except _Damaged:
        raise
    except Exception as e:  # lz4's RuntimeError, zstd's ZstdError, EOFError: the data is not what it says
        raise _Damaged(f"chunk does not decompress as {compression}: {e}") from e
    if len(raw) != size:
        more = "more than" if len(raw) > size else f"{len(raw):,} bytes,"
        raise _Damaged(f"chunk decompresses to {more} {size:,} bytes its header says")
    if crc and crc32(raw) != crc:
        raise _Damaged("chunk checksum mismatch")
    return raw


class _Buf:
    """Little-endian field reads from a bytes object; _Damaged past its end."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None):
        self.data, self.pos, self.end = data, pos, len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise _Damaged(f"record needs {n} bytes at offset {self.pos}, {self.end - self.pos} left")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u16(self):
        return struct.unpack("<H", self.take(2))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self) -> str:
        return self.take(self.u32()).decode("utf-8", "replace")


class ScannedMcap:
    """Messages of an MCAP file up to its first damaged record, with a rosbags-like interface:
    ``connections``, ``messages(connections)``, ``start_time``, ``end_time``, ``message_count``."""

    def __init__(self, path):
        self.path = Path(path)
        self.schemas: dict[int, tuple[str, str, str]] = {}
        self.channels: dict[int, tuple[int, str, str]] = {}
        self.counts: dict[int, int] = {}      # messages per channel id
        self.damage: dict | None = None
        self.connections: list = []
        self.ros_distro = None
        self.size = 0
        self.message_count = 0
        self._first = self._last = None      # log times (ns)
        self._end = 0         # file offset where the readable records end
        self._at = 0          # file offset of the top-level record being read

    # --- scan ----------------------------------------------------------------------------

    def _scan(self, f, end: int):
        """(log_time, channel id, data) of the records from offset 8 to ``end``, in file order, a chunk's
        in log-time order; schemas and channels are registered on the way. _Damaged at the first record
        that does not read, with ``self._at`` its offset."""
        pos = 8
        f.seek(pos)
        while pos < end:
            self._at = pos
            head = f.read(9)
            if len(head) < 9:
                raise _Damaged(f"record header at offset {pos} is cut off ({len(head)} of 9 bytes)")
            op, n = head[0], struct.unpack_from("<Q", head, 1)[0]
            bad = _not_a_record(op, n)
            if bad:
                raise _Damaged(f"{bad} at offset {pos}")
            if pos + 9 + n > self.size:
                raise _Damaged(f"record 0x{op:02x} at offset {pos} is {n:,} bytes long but the file ends "
                               f"{self.size - pos - 9:,} bytes later")
            if op in (OP_FOOTER, OP_DATA_END):
                return
            if op in (OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK):
                if n > MAX_RECORD_BYTES + 4096:       # + the chunk header's fields
                    raise _Damaged(f"record 0x{op:02x} at offset {pos} is {n:,} bytes long, more than the scan's "
                                   f"{MAX_RECORD_BYTES:,}-byte limit (MAX_RECORD_BYTES)")
                rec = _Buf(f.read(n))
                if op == OP_CHUNK:
                    rec.u64(), rec.u64()
                    size, crc = rec.u64(), rec.u32()
                    comp = rec.string()
                    inner = _Buf(_decompress(rec.take(rec.u64()), comp, size, crc))
                    yield from sorted(self._records(inner), key=lambda m: m[0])
                else:
                    yield from self._records(_Buf(head + rec.data))
            else:
                f.seek(n, 1)        # attachments, metadata, indexes: not needed, not read
            pos += 9 + n

    def _records(self, buf: "_Buf") -> list:
        """The messages among the records in ``buf`` (a chunk's, or one top-level record)."""
        msgs = []
        while buf.pos < buf.end:
            start = buf.pos
            op = buf.take(1)[0]
            n = buf.u64()
            bad = _not_a_record(op, n)
            if bad:
                raise _Damaged(f"{bad} at offset {start} of a chunk")
            if buf.pos + n > buf.end:
                raise _Damaged(f"record 0x{op:02x} at offset {start} of a chunk is {n:,} bytes long but the "
                               f"chunk ends {buf.end - buf.pos:,} bytes later")
            rec = _Buf(buf.data, buf.pos, buf.pos + n)
            buf.pos += n
            if op == OP_SCHEMA:
                sid = rec.u16()
                self.schemas[sid] = (rec.string(), rec.string(), rec.take(rec.u32()).decode("utf-8", "replace"))
            elif op == OP_CHANNEL:
                cid, sid = rec.u16(), rec.u16()
                self.channels[cid] = (sid, rec.string(), rec.string())
            elif op == OP_MESSAGE:
                cid = rec.u16()
                rec.u32()
                log_time = rec.u64()
                rec.u64()
                msgs.append((log_time, cid, rec.data[rec.pos:rec.end]))
        return msgs

    def _file(self):
        try:
            return open(self.path, "rb")
        except OSError as e:
            raise ReaderError(f"{self.path}: cannot read: {e}") from e

    def open(self) -> None:
        """Counts the readable messages and finds where the damage starts (nothing is kept but counts)."""
        with self._file() as f:
            try:
                self.size = f.seek(0, 2)
                f.seek(0)
                magic = f.read(8)
            except OSError as e:
                raise ReaderError(f"{self.path}: cannot read: {e}") from e
            if magic != MAGIC:
                raise ReaderError(f"{self.path}: not an MCAP file (no MCAP magic at the start)")
            self._at = self._end = 8
            try:
                for t, cid, _ in self._scan(f, self.size):
                    self.counts[cid] = self.counts.get(cid, 0) + 1
                    self._first = t if self._first is None else min(self._first, t)
                    self._last = t if self._last is None else max(self._last, t)
                self._end = self.size
                f.seek(self.size - 8)
                if self.size < 16 or f.read(8) != MAGIC:
                    self.damage = {"offset": self.size, "size": self.size,
                                   "reason": "the file ends without a footer (recording cut off)"}
            except _Damaged as e:
                self._end = self._at
                self.damage = {"offset": self._at, "size": self.size, "reason": str(e)}
            except OSError as e:
                raise ReaderError(f"{self.path}: cannot read at offset {self._at}: {e}") from e
        self.message_count = sum(self.counts.values())
        self._connections()

    def _connections(self) -> None:
        from rosbags.interfaces import (Connection, ConnectionExtRosbag2, MessageDefinition,
                                        MessageDefinitionFormat)

        fmts = {"ros2msg": MessageDefinitionFormat.MSG, "ros2idl": MessageDefinitionFormat.IDL}
        for cid, (sid, topic, encoding) in sorted(self.channels.items()):
            name, enc, text = self.schemas.get(sid, ("", "", ""))
            if encoding != "cdr" or not name:
                continue
            msgdef = MessageDefinition(fmts.get(enc, MessageDefinitionFormat.NONE), text if enc in fmts else "")
            self.connections.append(Connection(cid, topic, name, msgdef, "", self.counts.get(cid, 0),
                                               ConnectionExtRosbag2("cdr", []), self))

    # --- the rosbags reader interface read_bag uses -----------------------------------------

    @property
    def start_time(self) -> int:
        return self._first or 0

    @property
    def end_time(self) -> int:
        return self._last + 1 if self._last is not None else 0

    def messages(self, connections=()):
        """(connection, log time, data) of the messages ``open`` counted, read from the file again."""
        by_id = {c.id: c for c in (connections or self.connections)}
        with self._file() as f:
            try:
                for t, cid, data in self._scan(f, self._end):
                    c = by_id.get(cid)
                    if c is not None:
                        yield c, t, data
            except (_Damaged, OSError) as e:   # it read at open: the file changed since
                raise ReaderError(f"{self.path}: changed while it was read (offset {self._at}): {e}") from e

    def close(self) -> None:
        pass


__all__ = ["MAX_RECORD_BYTES", "ScannedMcap"]
