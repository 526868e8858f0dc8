"""Paired comparisons that cannot pass on nothing (issue 47 item 3): `zip` stops at the shorter side and
`all()` of nothing is True, so two producers compared batch by batch must first agree on how many
items they made, and, for dicts, on their keys.

    for got, want in paired(gpu_loader, cpu_loader):
        ...
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any


def paired(a: Iterable, b: Iterable, what: str = "items", allow_empty: bool = False) -> Iterator[tuple[Any, Any]]:
    """Both sides materialised, then the pairs: equal counts, non-empty (unless allow_empty), and for
    dicts (batches) the same keys in each pair."""
    a, b = list(a), list(b)
    assert len(a) == len(b), f"{len(a)} {what} on one side, {len(b)} on the other"
    assert a or allow_empty, f"no {what} on either side: the comparison would check nothing"
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, Mapping) or isinstance(y, Mapping):
            assert isinstance(x, Mapping) and isinstance(y, Mapping), f"{what} {i}: a dict against a {type(y)}"
            assert x.keys() == y.keys(), f"{what} {i}: keys {sorted(x)} against {sorted(y)}"
        yield x, y
