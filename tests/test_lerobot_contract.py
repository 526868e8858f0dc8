"""LeRobot's batch contract (DESIGN.md §3d) against LeRobot itself, on sets LeRobot's own code made: robocache's
``DataLoader(ds, B, delta_timestamps=dt)`` batches, ``lerobot_item``, metadata and statistics against
``LeRobotDataset(..., delta_timestamps=dt)``: its items through ``default_collate``, key for key, bit for bit
(its default decoder, torchcodec or PyAV, converts to RGB as robocache does).

Runs where LeRobot (0.4.x or 0.6.x) is installed; CI's optional LeRobot step (.ci/run) installs 0.4.4 and runs
it on every submission. Without LeRobot, test_lerobot_batches.py holds the same contract to LeRobot's rules.

- ``recorded``: a v3.0 set written by LeRobot's recording API (``create``, ``add_frame``, ``save_episode``,
  ``finalize``; LeRobot encodes the mp4), every episode a span of one mp4, one episode changing task midway.
- ``converted``: lerobot_forge's v2.1 set (a camera, per-episode statistics) converted by LeRobot's own
  v2.1 -> v3.0 converter, its files closed small so the episodes spread over several data files and mp4s.
  The converter copies the mp4s' packets, so robocache reading the v2.1 source must give LeRobot's items of
  the conversion too (LeRobot 0.4 and 0.6 read no v2.x).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot", reason="LeRobot is the oracle here (CI's optional LeRobot step installs it)")
pytest.importorskip("av")
pytest.importorskip("pyarrow")

import robocache  # noqa: E402
from conftest import fresh_seed  # noqa: E402
from lerobot_forge import (CAMERA, TASKS, assert_lerobot_batch, convert_with_lerobot, record_lerobot,  # noqa: E402
                           write_lerobot)
from robocache import DataLoader, Window  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache_env")
LENGTHS = (12, 17, 9, 14, 20, 11, 15, 8)
FPS, SIZE = 10, (24, 32)
DT = {CAMERA: [-0.1, 0.0], "observation.state": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]}
SETS = ["recorded", "converted"]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The forge's v2.1 set (a fresh seed each run: ROBOCACHE_TEST_SEED replays) and the two v3.0 sets
    LeRobot made of it."""
    seed = fresh_seed(4)
    base = tmp_path_factory.mktemp(f"lerobot-seed{seed}")
    written = write_lerobot(base / "v21", np.random.default_rng(seed), lengths=LENGTHS, fps=FPS, camera=SIZE,
                            stats=True)
    switch = [[TASKS[written["task_index"][e]]] * n for e, n in enumerate(LENGTHS)]
    switch[2][5:] = [TASKS[(written["task_index"][2] + 1) % len(TASKS)]] * (LENGTHS[2] - 5)   # midway
    recorded = record_lerobot(base / "recorded", written, FPS, SIZE, row_tasks=switch)
    # each data file and mp4 closed once it passes the size of about two episodes' files
    mb = {kind: 2 * np.median([p.stat().st_size for p in (base / "v21").glob(f"**/*.{kind}")]) / 2 ** 20
          for kind in ("parquet", "mp4")}
    converted = convert_with_lerobot(base / "v21", base / "local" / "converted", data_mb=mb["parquet"],
                                     video_mb=mb["mp4"])
    return {"v21": base / "v21", "recorded": recorded, "converted": converted}


def load(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return robocache.Dataset.from_lerobot(root, device="cpu", **kw)


def lerobot(root, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(f"local/{root.name}", root=root, **kw)
    at = {int(i): p for p, i in enumerate(ds.hf_dataset["index"])}     # dataset-wide index -> its item
    return ds, at


def same_epoch(ds, lds, at, dt, where, **loader):
    """Every batch of an epoch of ``DataLoader(ds, 8, delta_timestamps=dt, **loader)`` against
    ``default_collate`` of LeRobot's items of the same dataset-wide indices; each of LeRobot's samples once."""
    from torch.utils.data import default_collate

    seen = []
    for b in DataLoader(ds, 8, delta_timestamps=dt, **loader):
        idx = b["index"].tolist()
        assert_lerobot_batch(b, default_collate([lds[at[i]] for i in idx]), f"{where}, indices {idx}")
        seen += idx
    assert sorted(seen) == sorted(at), where


def test_the_sets_are_what_lerobot_made(sets):
    """The layouts the tests below rely on: every episode a span of a shared mp4, the conversion spread over
    several data files and mp4s, a task change inside an episode of the recorded set."""
    lds, _ = lerobot(sets["recorded"])
    eps = lds.meta.episodes
    assert list(eps["length"]) == list(LENGTHS) and len(set(eps[f"videos/{CAMERA}/file_index"])) == 1
    assert len({lds[i]["task"] for i in range(eps["dataset_from_index"][2], eps["dataset_to_index"][2])}) == 2
    conv, _ = lerobot(sets["converted"])
    ceps = conv.meta.episodes
    assert list(ceps["length"]) == list(LENGTHS)
    assert len(set(ceps["data/file_index"])) > 1 and len(set(ceps[f"videos/{CAMERA}/file_index"])) > 2


@pytest.mark.parametrize("kind", SETS)
def test_batches_are_lerobots(sets, kind):
    """Every sample of the set, once, in shuffled batches: LeRobot's items, pads at both ends of episodes."""
    root = sets[kind]
    lds, at = lerobot(root, delta_timestamps=DT)
    ds = load(root)
    assert ds.num_frames == len(lds) == sum(LENGTHS)
    same_epoch(ds, lds, at, DT, kind, shuffle=True, seed=3)


@pytest.mark.parametrize("kind", SETS)
def test_a_subset_is_lerobots(sets, kind):
    """Episodes 1, 4 and 6 alone (LeRobot's ``episodes=``): the dataset-wide index and the episodes' own
    bounds, whatever else is loaded."""
    root = sets[kind]
    eps = [1, 4, 6]
    dt = {CAMERA: [0.0, 0.1], "action": [-0.1, 0.0, 0.3]}
    lds, at = lerobot(root, episodes=eps, delta_timestamps=dt)
    ds = load(root, episodes=eps)
    assert ds.num_frames == len(lds) and ds.num_episodes == lds.num_episodes == 3
    same_epoch(ds, lds, at, dt, f"{kind} {eps}")


def test_v21_source_gives_lerobots_items_of_its_conversion(sets):
    """robocache reading the v2.1 set gives what LeRobot gives for the v3.0 set its converter made of it."""
    lds, at = lerobot(sets["converted"], delta_timestamps=DT)
    same_epoch(load(sets["v21"]), lds, at, DT, "v2.1", shuffle=True, seed=4)


@pytest.mark.parametrize("kind", SETS)
def test_items_metadata_and_statistics_are_lerobots(sets, kind):
    root = sets[kind]
    dt = {"observation.state": [-0.1, 0.0], "action": [0.0, 0.1]}
    lds, at = lerobot(root, delta_timestamps=dt)
    meta = lds.meta
    ds = load(root)
    assert ds.fps == meta.fps and ds.camera_keys == meta.camera_keys == [CAMERA]
    assert ds.num_episodes == meta.total_episodes == len(LENGTHS)
    assert {k: (f["dtype"], tuple(f["shape"])) for k, f in ds.features.items()} == \
        {k: (f["dtype"], tuple(f["shape"])) for k, f in meta.features.items()}
    assert ds.meta.first_index == dict(enumerate(meta.episodes["dataset_from_index"]))
    # lerobot_item: LeRobot's __getitem__, for the k-th loaded sample
    for k in (0, 11, 12, 57, ds.num_frames - 1):
        item = robocache.lerobot_item(ds, k, dt)
        want = lds[at[ds.meta.first_index[0] + k]]
        item = {n: (v.contiguous() if isinstance(v, torch.Tensor) else v) for n, v in item.items()}   # a view's
        assert_lerobot_batch(item, want, f"{kind}, item {k}")
    # normalization by LeRobot's statistics of the set
    for key in ("observation.state", "action"):
        s = ds.streams[key]
        assert s.stats_source == "dataset", key
        for stat in ("mean", "std"):
            np.testing.assert_allclose(s.stats[stat].cpu().numpy(), np.asarray(meta.stats[key][stat]), rtol=1e-6,
                                       atol=1e-7, err_msg=f"{kind} {key} {stat}")
    b = next(iter(DataLoader(ds, 16, shuffle=True, seed=5, windows={
        "z": Window("observation.state", normalize="mean_std"), "x": Window("observation.state")})))
    mean, std = (torch.as_tensor(np.asarray(meta.stats["observation.state"][s]), dtype=torch.float64)
                 for s in ("mean", "std"))
    torch.testing.assert_close(b["z"], ((b["x"].double() - mean) / std).float())
