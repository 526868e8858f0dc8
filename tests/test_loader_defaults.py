"""robocache.DataLoader keeps torch.utils.data.DataLoader's defaults: ``shuffle=False`` (sample order,
every epoch) unless asked, and a ``sampler`` works without touching ``shuffle`` (issue 33 item 2)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader  # noqa: E402


@pytest.fixture
def ds(rng):
    eps = [{"joints": (rng.standard_normal((n, 3)).astype(np.float32), np.arange(n) / 50.0)} for n in (11, 7, 9)]
    return robocache.Dataset.from_episodes(eps, device="cpu")


def test_defaults_are_torchs(ds):
    ours = inspect.signature(DataLoader).parameters
    theirs = inspect.signature(torch.utils.data.DataLoader).parameters
    for k in ("batch_size", "shuffle", "drop_last"):
        assert ours[k].default == (theirs[k].default or False), k      # torch: shuffle=None is False
    loader = DataLoader(ds, 4, windows={"j": "joints"})
    assert loader.shuffle is False and "shuffle=False" in repr(loader)
    N = loader.num_samples
    for epoch in range(3):            # sample order, every epoch (a new iter() moves to the next one)
        np.testing.assert_array_equal(loader.order(epoch).numpy(), np.arange(N))
        got = torch.cat([b["j"][:, 0] for b in loader])
        torch.testing.assert_close(got, ds.streams["joints"].values, rtol=0, atol=0)
    shuffled = DataLoader(ds, 4, shuffle=True, windows={"j": "joints"})
    assert not np.array_equal(shuffled.order(0).numpy(), np.arange(N))


def test_sampler_works_with_the_defaults(ds):
    """torch accepts DataLoader(data, 4, sampler=s); so does robocache (it raised "sampler and
    shuffle=True are mutually exclusive" while shuffle defaulted to True)."""
    N = ds.streams["joints"].num_samples
    picks = [5, 0, N - 1, 3, 3, 8]
    loader = DataLoader(ds, 4, windows={"j": "joints"}, sampler=picks)
    assert len(loader) == 2 and loader.num_samples == len(picks)
    got = torch.cat([b["j"][:, 0] for b in loader])
    torch.testing.assert_close(got, ds.streams["joints"].values[picks], rtol=0, atol=0)
    with pytest.raises(ValueError, match="sampler and shuffle=True are mutually exclusive"):
        DataLoader(ds, 4, shuffle=True, windows={"j": "joints"}, sampler=picks)     # as torch


def test_a_sampler_without_len_is_a_clear_error(ds):
    """The loader counts an epoch's samples by len(sampler), as torch does; a generator has none."""
    with pytest.raises(TypeError, match=r"sampler must have a len\(\) .* got generator"):
        DataLoader(ds, 4, windows={"j": "joints"}, sampler=(i for i in range(5)))
