"""Where a decoder's frames go: ``Rows``, the sink every decoder writes into, one frame at a time.

A decode job (one file, one or more of its spans) writes its frames in presentation order as job rows
0 .. n-1. The sink decides where a job row lives: in place (``buf[place(i)]``: a host buffer, a plain
in-memory array), or in a ring of two halves handed over a chunk at a time (``flush``: to the device,
to the cache or disk-tier file, to the JPEG encoder).
"""

from __future__ import annotations

import numpy as np


class Rows:
    """One job's destination: ``row(i)`` is job row i's writable uint8 view, and every ``chunk`` rows
    ``flush(first, sl)`` gets the rows just completed (``first``: the job row of the chunk's first frame;
    ``sl``: a slice of ``buf``, ring rows or, in place, job rows); it returns None or a handle whose
    ``wait()`` says it is done with them.

    In place (``place`` given, or no ``flush``): job row i is ``buf[place(i)]`` (identity without
    ``place``); flushed rows stay where they are (e.g. the cache file is written from them while the
    decoder goes on).
    Ring (``flush`` and no ``place``): ``buf`` is a worker's ring of two halves. A full half is handed over
    and the decoder goes on into the other one, which it writes again only after that half's handle is
    done; so a worker holds a few MB, not a whole file, and never waits on a copy or a write unless both
    halves are in flight."""

    def __init__(self, n: int, buf: np.ndarray, flush=None, *, place=None, chunk: int = 0):
        self.n, self.buf, self.flush, self.place = n, buf, flush, place
        self.in_place = place is not None or flush is None
        self.chunk = max(1, chunk or (n if self.in_place else max(1, len(buf) // 2)))
        self.base = 0               # job row of the current chunk's first frame
        self.half = 0               # ring: the half being written
        self.handles = [None, None]  # ring: what each half waits for before it is written again
        self.pending: list = []     # in place: every flush's handle

    def __len__(self):
        return self.n

    def row(self, i: int) -> np.ndarray:
        if i - self.base == self.chunk:  # the chunk is complete: hand it over before frame i
            self._hand_over(i)
        if self.in_place:
            return self.buf[self.place(i) if self.place is not None else i]
        return self.buf[self.half * self.chunk + i - self.base]

    def _hand_over(self, upto: int) -> None:
        if self.flush is not None and upto > self.base:
            if self.in_place:
                self.pending.append(self.flush(self.base, slice(self.base, upto)))
            else:
                lo = self.half * self.chunk
                self.handles[self.half] = self.flush(self.base, slice(lo, lo + upto - self.base))
                if len(self.buf) >= 2 * self.chunk:
                    self.half ^= 1
                wait(self.handles[self.half])  # the half written next: its last hand-over is done
                self.handles[self.half] = None
        self.base = upto

    def finish(self, decoded: int) -> list:
        """Hands over the last rows; waits until the ring can be reused. Returns the in-place
        handles (the caller waits on them once every file is decoded)."""
        if decoded > self.base:
            self._hand_over(decoded)
        for h in self.handles:
            wait(h)
        self.handles = [None, None]
        return self.pending


def wait(handle) -> None:
    if handle is not None:
        handle.wait()


class Ticker:
    """Frames done, for a progress bar; updated every few frames (tqdm takes a lock)."""

    def __init__(self, bar, every=16):
        self.bar, self.every, self.pending = bar, every, 0

    def __call__(self, n=1):
        if self.bar is None:
            return
        self.pending += n
        if self.pending >= self.every:
            self.bar.update(self.pending)
            self.pending = 0

    def flush(self):
        if self.bar is not None and self.pending:
            self.bar.update(self.pending)
            self.pending = 0
