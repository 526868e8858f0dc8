"""A forward scan of an MCAP file that stops at the first damaged record: what is readable of a
recording that did not close cleanly (no footer, no summary, a chunk cut off).

``rosbags`` refuses such files (it needs the end magic and the summary). The scan reads records
from the start (spec: https://mcap.dev/spec): schemas, channels, messages and chunks (lz4, zstd
or none, checksum verified), until a record runs past the end of the file or does not decode.
``ScannedMcap`` offers the part of the rosbags reader interface that read_bag uses, so the
messages before the damage load like any bag (``read_rosbag(..., recover=True)``), and
``damage`` says where and why the scan stopped (the doctor reports it).
"""

from __future__ import annotations

import struct
from binascii import crc32
from pathlib import Path

from ._common import ReaderError

MAGIC = b"\x89MCAP0\r\n"
OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK, OP_FOOTER, OP_DATA_END = 0x03, 0x04, 0x05, 0x06, 0x02, 0x0F


class _Damaged(Exception):
    pass


def _decompress(data: bytes, compression: str, size: int, crc: int) -> bytes:
    if compression == "":
        raw = data
    elif compression == "lz4":
        from lz4.frame import decompress  # type: ignore[import-untyped]  # no stubs
        raw = decompress(data)
    elif compression == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
        except ImportError:
            from backports import zstd
        raw = zstd.decompress(data)
    else:
        raise _Damaged(f"unsupported chunk compression {compression!r}")
    if len(raw) != size:
        raise _Damaged(f"chunk decompresses to {len(raw)} bytes, its header says {size}")
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
        self.msgs: list[tuple[int, int, bytes]] = []     # (log_time, channel id, data)
        self.damage: dict | None = None
        self.connections: list = []
        self.ros_distro = None
        self.size = 0
        self._at = 0          # file offset of the top-level record being read

    # --- scan ----------------------------------------------------------------------------

    def _records(self, buf: _Buf, top: bool) -> None:
        while buf.pos < buf.end:
            start = buf.pos
            if top:
                self._at = start
            op = buf.take(1)[0]
            n = buf.u64()
            rec = _Buf(buf.data, buf.pos, buf.pos + n)
            if buf.pos + n > buf.end:
                raise _Damaged(f"record 0x{op:02x} at offset {start} is {n} bytes long but the "
                               f"{'file' if top else 'chunk'} ends {buf.end - buf.pos} bytes later")
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
                self.msgs.append((log_time, cid, rec.data[rec.pos:rec.end]))
            elif op == OP_CHUNK and top:
                rec.u64(), rec.u64()
                size, crc = rec.u64(), rec.u32()
                comp = rec.string()
                data = rec.take(rec.u64())
                self._records(_Buf(_decompress(data, comp, size, crc)), False)
            elif op in (OP_FOOTER, OP_DATA_END) and top:
                return

    def open(self) -> None:
        try:
            data = self.path.read_bytes()
        except OSError as e:
            raise ReaderError(f"{self.path}: cannot read: {e}") from e
        self.size = len(data)
        if data[:8] != MAGIC:
            raise ReaderError(f"{self.path}: not an MCAP file (no MCAP magic at the start)")
        buf = _Buf(data, 8)
        self._at = 8
        try:
            self._records(buf, True)
            if not data.endswith(MAGIC) or len(data) < 16:
                self.damage = {"offset": len(data), "size": len(data),
                               "reason": "the file ends without a footer (recording cut off)"}
        except _Damaged as e:
            self.damage = {"offset": self._at, "size": len(data), "reason": str(e)}
        self.msgs.sort(key=lambda m: m[0])
        self._connections()

    def _connections(self) -> None:
        from rosbags.interfaces import (Connection, ConnectionExtRosbag2, MessageDefinition,
                                        MessageDefinitionFormat)

        counts: dict[int, int] = {}
        for _, cid, _ in self.msgs:
            counts[cid] = counts.get(cid, 0) + 1
        fmts = {"ros2msg": MessageDefinitionFormat.MSG, "ros2idl": MessageDefinitionFormat.IDL}
        for cid, (sid, topic, encoding) in sorted(self.channels.items()):
            name, enc, text = self.schemas.get(sid, ("", "", ""))
            if encoding != "cdr" or not name:
                continue
            msgdef = MessageDefinition(fmts.get(enc, MessageDefinitionFormat.NONE), text if enc in fmts else "")
            self.connections.append(Connection(cid, topic, name, msgdef, "", counts.get(cid, 0),
                                               ConnectionExtRosbag2("cdr", []), self))

    # --- the rosbags reader interface read_bag uses -----------------------------------------

    @property
    def message_count(self) -> int:
        return len(self.msgs)

    @property
    def start_time(self) -> int:
        return self.msgs[0][0] if self.msgs else 0

    @property
    def end_time(self) -> int:
        return self.msgs[-1][0] + 1 if self.msgs else 0

    def messages(self, connections=()):
        by_id = {c.id: c for c in (connections or self.connections)}
        for t, cid, data in self.msgs:
            c = by_id.get(cid)
            if c is not None:
                yield c, t, data

    def close(self) -> None:
        self.msgs = []


__all__ = ["ScannedMcap"]
