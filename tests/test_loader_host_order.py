"""Two live iterators of one loader over host-staged frames (disk tier): each batch's frames are its own
samples' (issue 34 item 12).

On a GPU the disk tier stages the sampled frames from the host, picking them from the epoch's order on the
host. That order was the loader's, replaced by a second iterator's epoch or by ``loader.order(e)``, so one
iterator's frames could be another order's samples while its state came from its own. On the CPU the disk
tier reads the device ids directly; the CPU test makes the store report ``host_staged`` as it does on a
GPU, so the loader computes the host ids the GPU would copy from, and checks them against the device ids.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402
from robocache.frames.store import FrameStore  # noqa: E402

H, W = 4, 6
WINDOWS = {"cam": Window("cam"), "state": Window("state", mode="nearest")}


def frames_dataset(tmp_path, device):
    """Camera frames on the disk tier whose first pixel names them (episode, frame), and a ``state`` stream on
    the same clock holding (episode, frame): a batch is consistent when its image agrees with its state."""
    rng = np.random.default_rng(0)
    eps, ctimes, rows = [], [], []
    for e, n in enumerate((9, 6, 11)):
        t = 10.0 * e + np.arange(n) / 10
        f = rng.integers(0, 256, (n, H, W, 3), dtype=np.uint8)
        f[:, 0, 0, 0], f[:, 0, 0, 1] = e, np.arange(n)
        rows.append(f)
        ctimes.append(t)
        eps.append({"state": (np.stack([np.full(n, e), np.arange(n)], 1).astype(np.float32), t)})
    store = FrameStore.create(np.concatenate(rows), format="rgb", height=H, width=W, channels=3, tier="disk",
                              device=device, path=tmp_path / "cam.npy")
    return robocache.Dataset.from_episodes(eps, device=device, frames={"cam": (store, ctimes)})


def check(batch):
    """The batch's image frames are its samples' (identity) and agree with its state."""
    first = batch["cam"][:, 0, 0, 0, :2].cpu().to(torch.int64)               # [B, 2]: (episode, frame)
    want = torch.stack([batch["episode_index"], batch["frame_index"]], 1).cpu()
    assert torch.equal(first, want)
    assert torch.equal(batch["state"][:, 0].cpu().to(torch.int64), want)


def interleave(loader):
    """Two iterators (epochs 0 and 1: two orders) taken in turn, with loader.order() asked in between."""
    a = iter(loader)
    batches = [next(a)]
    b = iter(loader)
    for k in range(len(loader) - 1):
        batches.append(next(b))
        loader.order(7)
        batches.append(next(a))
    return batches


def test_interleaved_iterators_stage_their_own_frames_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(FrameStore, "host_staged", property(lambda s: s.tier == "disk" or s.format == "jpeg"))
    staged = []
    gather = FrameStore.gather

    def spy(self, ids, **kw):
        staged.append((ids.clone(), kw.get("host_ids")))
        return gather(self, ids, **kw)

    monkeypatch.setattr(FrameStore, "gather", spy)
    ds = frames_dataset(tmp_path, "cpu")
    assert ds.streams["cam"].frames.tier == "disk"
    loader = DataLoader(ds, 4, shuffle=True, seed=1, anchor="state", windows=WINDOWS,
                        identity=["episode_index", "frame_index"])
    assert loader._host_plans        # the host-staged path runs
    for batch in interleave(loader):
        check(batch)
    assert len(staged) == 2 * len(loader) - 1
    for ids, host_ids in staged:
        assert host_ids is not None and np.array_equal(np.asarray(host_ids).reshape(ids.shape), ids.numpy())


@pytest.mark.cuda
def test_interleaved_iterators_stage_their_own_frames_cuda(tmp_path):
    ds = frames_dataset(tmp_path, "cuda")
    assert ds.streams["cam"].frames.host_staged
    loader = DataLoader(ds, 4, shuffle=True, seed=1, anchor="state", windows=WINDOWS,
                        identity=["episode_index", "frame_index"])
    for batch in interleave(loader):
        check(batch)
