"""Byte ranges ``[start, end)`` as sorted lists of tuples: merged, subtracted, cut into requests."""

from __future__ import annotations


def merge(ranges, gap: int = 0) -> list[tuple[int, int]]:
    """Ranges sorted and merged where they overlap, touch or lie closer than ``gap`` bytes; empty dropped."""
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and a <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def subtract(want, have) -> list[tuple[int, int]]:
    """The parts of the sorted, merged ranges ``want`` that the sorted, merged ranges ``have`` lack."""
    out, j = [], 0
    have = list(have)
    for a, b in want:
        while j < len(have) and have[j][1] <= a:
            j += 1
        k = j
        while a < b:
            if k < len(have) and have[k][0] <= a:
                a = max(a, have[k][1])
                k += 1
            else:
                nxt = min(b, have[k][0]) if k < len(have) else b
                out.append((a, nxt))
                a = nxt
    return [(a, b) for a, b in out if b > a]


def chunks(ranges, size: int) -> list[tuple[int, int]]:
    """Ranges cut into requests of at most ``size`` bytes (parallel, bounded memory)."""
    out = []
    for a, b in ranges:
        while a < b:
            out.append((a, min(b, a + size)))
            a = min(b, a + size)
    return out


def total(ranges) -> int:
    return sum(b - a for a, b in ranges)
