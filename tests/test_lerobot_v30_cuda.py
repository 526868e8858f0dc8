"""LeRobot v3.0 on the GPU (cuda marker: skipped without one): the device, host and disk tiers of a v3.0 set
give the frames and batches the CPU gives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

av = pytest.importorskip("av")
torch = pytest.importorskip("torch")

import robocache  # noqa: E402
from pairs import paired  # noqa: E402
from lerobot_forge import convert_v21_to_v30  # noqa: E402
from robocache import DataLoader, Window  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cache_env")]
CAM = "observation.images.top"


@pytest.fixture(scope="module")
def v30(cr5_v21, tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    root = tmp_path_factory.mktemp("v30") / "cr5"
    convert_v21_to_v30(cr5_v21, root, [0, 1, 2, 3, 4], per_data_file=2, per_video_file=2)
    return root


def load(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(root, **kw)


def batches(ds):
    loader = DataLoader(ds, batch_size=32, shuffle=True, seed=5, identity=True, windows={
        "state": Window("observation.state", indices=[-1, 0]), "action": Window("action", indices=range(8)),
        "image": Window(CAM, indices=[-1, 0], layout="BTCHW", resize=(96, 128))})
    out = []
    for k, b in enumerate(loader):
        out.append({n: (v.cpu() if isinstance(v, torch.Tensor) else v) for n, v in b.items()})
        if k == 5:
            break
    return out


@pytest.mark.parametrize("tier", ["device", "host", "disk"])
def test_v30_tiers_on_the_gpu_equal_the_cpu(v30, tier):
    cpu = load(v30, device="cpu", frames="host")
    gpu = load(v30, device="cuda", frames=tier)
    assert gpu.streams[CAM].frames.tier == tier
    a = cpu.streams[CAM].frames[:].numpy()
    b = gpu.streams[CAM].frames[:].cpu().numpy()
    assert np.array_equal(a, b)
    for x, y in paired(batches(cpu), batches(gpu)):
        assert set(x) == set(y)
        for k in x:
            assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k], k


DT = {CAM: [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [0.1 * i for i in range(8)]}


def lerobot_batches(ds, n=6):
    loader = DataLoader(ds, 16, shuffle=True, seed=4, delta_timestamps=DT)
    out = []
    for k, b in enumerate(loader):
        out.append({n_: (v.cpu() if isinstance(v, torch.Tensor) else v) for n_, v in b.items()})
        if k + 1 == n:
            break
    return out


def test_lerobot_batches_on_the_gpu_equal_the_cpus_in_every_tier(v30):
    """DataLoader(ds, B, delta_timestamps=dt): the same batches from the device, host and disk tiers as on
    the CPU (whose batches tests/test_lerobot_batches.py checks against LeRobot's rules)."""
    want = lerobot_batches(load(v30, device="cpu", frames="host"))
    for tier in ("device", "host", "disk"):
        got = lerobot_batches(load(v30, device="cuda", frames=tier))
        for x, y in paired(want, got):
            assert set(x) == set(y)
            for k in x:
                assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k], (tier, k)


def test_a_lerobot_epoch_without_host_sync(v30):
    """An epoch of LeRobot batches under torch's sync debug mode "error": no host sync per batch (the
    task strings come from the host-side order, never read back)."""
    ds = load(v30, device="cuda", frames="device")
    loader = DataLoader(ds, 32, shuffle=True, seed=1, delta_timestamps=DT)
    next(iter(loader))                     # construction and the first batch's capture may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        n = 0
        for b in loader:
            n += b["action"].shape[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert n == ds.num_frames
