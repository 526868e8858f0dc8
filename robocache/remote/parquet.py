"""Which row groups of a LeRobot v3.0 data file hold an episode's rows, and a parquet file of just those.

The footer (read from the file's tail by range) gives each row group's byte span (its column chunks, from
the dictionary page on) and the min/max statistics of ``episode_index`` (or of ``index``, matched against
the episodes' ``[dataset_from_index, dataset_to_index)``); a row group without statistics is taken. The
chosen row groups' bytes are fetched and read by pyarrow from memory (``Ranges``: a file object that
serves the bytes fetched and refuses any other read, so a read outside them is an error, never zeros),
and written as a valid parquet file of those row groups (``compact``): robocache's reader reads every
row of a data file, and a file with holes would not parse.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from .._util import require
from .ranges import merge

#: how much of a file's end is read first: the footer's length, and the footer itself when it is small
TAIL = 16 * 1024


class Ranges(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only ``parts`` (``{start: bytes}``) are known."""

    def __init__(self, size: int, parts: dict, name: str):
        self.size, self.name, self.pos = size, name, 0
        self.parts: dict[int, bytes] = {}
        at, buf = None, b""
        for start in sorted(parts):                 # touching or overlapping parts as one buffer
            data = parts[start]
            if at is not None and start <= at + len(buf):
                buf = buf[:start - at] + data if start + len(data) >= at + len(buf) else buf
                continue
            if at is not None:
                self.parts[at] = buf
            at, buf = start, data
        if at is not None:
            self.parts[at] = buf
        self.starts = sorted(self.parts)

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, b):
        n = min(len(b), max(0, self.size - self.pos))
        if n == 0:
            return 0
        i = int(np.searchsorted(self.starts, self.pos, side="right")) - 1
        if i < 0 or self.pos + n > self.starts[i] + len(self.parts[self.starts[i]]):
            raise OSError(f"{self.name}: bytes {self.pos}-{self.pos + n} were not fetched")
        at = self.pos - self.starts[i]
        b[:n] = self.parts[self.starts[i]][at:at + n]
        self.pos += n
        return n


def footer_span(tail: bytes, size: int, name: str) -> int:
    """The offset of the footer (its length field and magic included) in a file of ``size`` bytes whose last
    ``len(tail)`` bytes are ``tail``; ValueError when they do not end a parquet file."""
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise ValueError(f"{name}: not a parquet file (no PAR1 at its end)")
    n = struct.unpack("<I", tail[-8:-4])[0]
    if n + 8 > size:
        raise ValueError(f"{name}: a footer of {n} bytes in a file of {size}")
    return size - n - 8


def metadata(tail: bytes, tail_at: int, size: int, name: str):
    """pyarrow's FileMetaData from the file's tail (held from ``tail_at`` to the end, the footer in it): the
    footer parsed alone (behind a magic number, as a file of no rows), whatever else the tail holds."""
    pq = require("pyarrow.parquet", "lerobot", "reading LeRobot data files")
    footer = tail[footer_span(tail, size, name) - tail_at:]
    try:
        return pq.read_metadata(io.BytesIO(b"PAR1" + footer))
    except Exception as e:  # pyarrow.ArrowInvalid, OSError: a damaged footer
        raise ValueError(f"{name}: cannot read its parquet footer: {e}") from e


def group_span(md, i: int) -> tuple[int, int]:
    """Bytes ``[start, end)`` of row group ``i``: its column chunks, each from its dictionary page on."""
    rg = md.row_group(i)
    lo, hi = None, 0
    for c in range(rg.num_columns):
        col = rg.column(c)
        start = col.data_page_offset
        if col.has_dictionary_page and col.dictionary_page_offset is not None and col.dictionary_page_offset > 0:
            start = min(start, col.dictionary_page_offset)
        lo = start if lo is None else min(lo, start)
        hi = max(hi, start + col.total_compressed_size)
    return (lo or 0), hi


def key_column(md) -> str | None:
    names = md.schema.to_arrow_schema().names
    return next((c for c in ("episode_index", "index") if c in names), None)


def groups_for(md, episodes: list, rows: dict) -> list[int]:
    """Row groups that may hold rows of ``episodes``: by ``episode_index`` statistics, else by ``index``
    statistics against ``rows`` (episode -> ``(dataset_from_index, dataset_to_index)``); every row group
    without statistics, and every one when the file has neither column."""
    col = key_column(md)
    out = []
    if col is None:
        return list(range(md.num_row_groups))
    names = md.schema.to_arrow_schema().names
    at = names.index(col)
    wanted = np.asarray(sorted(episodes), np.int64)
    spans = [rows[e] for e in episodes if rows.get(e) is not None and None not in rows[e]]
    for i in range(md.num_row_groups):
        if md.row_group(i).num_rows == 0:
            continue
        st = _column(md.row_group(i), at, col).statistics
        if st is None or not st.has_min_max:
            out.append(i)
            continue
        lo, hi = int(st.min), int(st.max)
        if col == "episode_index":
            hit = bool(((wanted >= lo) & (wanted <= hi)).any())
        else:
            hit = not spans or any(a < hi + 1 and lo < b for a, b in spans)
        if hit:
            out.append(i)
    return out


def _column(rg, at: int, name: str):
    """The column chunk of leaf ``name`` (its schema position ``at`` when the columns are flat)."""
    if at < rg.num_columns and rg.column(at).path_in_schema == name:
        return rg.column(at)
    for c in range(rg.num_columns):
        if rg.column(c).path_in_schema == name:
            return rg.column(c)
    raise KeyError(name)


def group_ranges(md, groups: list[int]) -> list[tuple[int, int]]:
    return merge([group_span(md, i) for i in groups])


def read_groups(md, size: int, parts: dict, groups: list[int], name: str) -> dict:
    """{row group: arrow Table} of ``groups``, read from the fetched ``parts`` alone (``md``: the footer)."""
    pq = require("pyarrow.parquet", "lerobot", "reading LeRobot data files")
    f = pq.ParquetFile(Ranges(size, parts, name), metadata=md, pre_buffer=False)
    return {i: f.read_row_group(i) for i in groups}


def compact(path, schema, tables: list) -> None:
    """``tables`` (one per row group, in order) as a parquet file at ``path``, one row group each."""
    pq = require("pyarrow.parquet", "lerobot", "writing the mirror's parquet files")
    with pq.ParquetWriter(str(path), schema) as w:
        for t in tables:
            w.write_table(t.cast(schema) if t.schema != schema else t, row_group_size=max(t.num_rows, 1))
