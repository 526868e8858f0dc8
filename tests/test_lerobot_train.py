"""LeRobot's own training script fed by robocache (robocache/lerobot/train.py) and
examples/train_lerobot_policy.py, on the real CR5 sets. Runs only where LeRobot (0.4.x or 0.6.x) is installed:
it is an optional dependency, not in the test extra; CI's optional LeRobot step (.ci/run) installs 0.4.4 in a
venv of its own and runs this module there.

The batch contract is checked against LeRobot itself here (``LeRobotDataset`` items through
``default_collate``, the samples named by LeRobot's own ``EpisodeAwareSampler``, the shares of several
processes by accelerate's own ``BatchSamplerShard``); v2.x metadata, which LeRobot 0.4 and 0.6 no longer read,
against a NumPy pooling of ``episodes_stats.jsonl`` written in this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lerobot")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

from lerobot.configs.default import DatasetConfig  # noqa: E402
from lerobot.configs.train import TrainPipelineConfig  # noqa: E402
from lerobot.policies.factory import make_policy_config  # noqa: E402

from robocache.lerobot import compat as lerobot_compat, train as lerobot_train  # noqa: E402
from robocache.lerobot.train import DataLoader, IndexSampler, ImageTransformer, TrainSet, V2Meta  # noqa: E402
from robocache.readers.lerobot import lerobot_home  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TorchDataLoader = torch.utils.data.DataLoader       # torch's own, the oracle of order and random draws
#: a small ACT: the tests check the data path, not the model
SMALL_ACT = {"dim_model": 32, "dim_feedforward": 64, "n_heads": 2, "chunk_size": 5, "n_action_steps": 5,
             "latent_dim": 8}


def config(root, episodes=None, policy="act", **fields) -> TrainPipelineConfig:
    """What lerobot-train parses from ``--dataset.root=... --policy.type=...``."""
    settings = {**(SMALL_ACT if policy == "act" else {}), **fields}
    p = make_policy_config(policy, device="cpu", pretrained_backbone_weights=None, push_to_hub=False, **settings)
    return TrainPipelineConfig(dataset=DatasetConfig(repo_id=f"local/{Path(root).name}", root=str(root),
                                                     episodes=episodes), policy=p, seed=7)


@pytest.fixture(scope="module")
def v30_subset(cr5_v30):
    """Episodes 1 and 3 of the v3.0 set, loaded by robocache through make_dataset (as lerobot-train does)."""
    cfg = config(cr5_v30, episodes=[1, 3])
    return cfg, lerobot_train.make_dataset(cfg)


def lerobot_reference(cfg, absolute):
    """LeRobot's own batch of the samples at dataset-wide indices ``absolute``: its items, default_collate,
    the cameras as its training step gets them (LeRobot 0.6's items are uint8, which its script makes float32
    / 255 before the preprocessor; 0.4's are float32 already)."""
    from lerobot.datasets.factory import make_dataset

    lds = make_dataset(cfg)
    rows = {int(i): r for r, i in enumerate(lds.hf_dataset["index"])}
    batch = torch.utils.data.default_collate([lds[rows[i]] for i in absolute])
    for k in lds.meta.camera_keys:
        if batch[k].dtype == torch.uint8:
            batch[k] = batch[k].to(torch.float32) / 255.0
    return batch


def assert_same_batch(got: dict, ref: dict):
    assert set(got) == set(ref)
    for k, r in ref.items():
        if isinstance(r, torch.Tensor):
            g = got[k]
            assert (g.dtype, tuple(g.shape)) == (r.dtype, tuple(r.shape)), k
            assert torch.equal(g.cpu(), r), f"{k}: max |diff| {(g.cpu().double() - r.double()).abs().max()}"
        else:
            assert list(got[k]) == list(r), k


# ---------------------------------------------------------------------------------------------------------
# make_dataset: what LeRobot's make_dataset gives the script


def test_make_dataset_reads_the_config_as_lerobot(v30_subset):
    from lerobot.datasets.factory import IMAGENET_STATS, resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    cfg, ts = v30_subset
    assert isinstance(ts, TrainSet) and isinstance(ts.meta, LeRobotDatasetMetadata)
    assert ts.delta_timestamps == resolve_delta_timestamps(cfg.policy, ts.meta)
    assert ts.delta_timestamps["action"] == [i / 10 for i in range(SMALL_ACT["chunk_size"])]
    lengths = ts.meta.episodes["length"]
    assert ts.num_frames == len(ts) == lengths[1] + lengths[3] and ts.num_episodes == 2 and ts.episodes == [1, 3]
    assert ts.dataset.device.type == "cpu"          # the policy's device
    cam = ts.meta.camera_keys[0]                    # use_imagenet_stats (LeRobot's default) on the camera
    assert torch.equal(ts.meta.stats[cam]["mean"], torch.tensor(IMAGENET_STATS["mean"]))


def test_make_dataset_reads_a_repo_id_where_lerobot_keeps_it(tmp_path, cr5_v30, monkeypatch):
    """No --dataset.root: the set is read from LeRobot's cache folder, the one LeRobot's own constant names under
    each of the variables it reads (asked of LeRobot in a fresh process, as it fixes it at import)."""
    read = ("HF_LEROBOT_HOME", "HF_HOME", "XDG_CACHE_HOME")        # HOME stays set, as it always is
    for env in ({"HF_LEROBOT_HOME": str(tmp_path / "lr")}, {"HF_HOME": str(tmp_path / "hf")},
                {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, {"HOME": str(tmp_path / "home")}):
        clean = {k: v for k, v in os.environ.items() if k not in read}
        theirs = subprocess.run([sys.executable, "-c", "from lerobot.utils.constants import HF_LEROBOT_HOME as h; "
                                 "print(h)"], capture_output=True, text=True, env={**clean, **env}, check=True)
        for k in read:
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert str(lerobot_home()) == theirs.stdout.strip(), env
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lr"))
    (tmp_path / "lr" / "local").mkdir(parents=True)
    (tmp_path / "lr" / "local" / "cr5").symlink_to(cr5_v30)
    cfg = config(cr5_v30, episodes=[1])
    cfg.dataset.repo_id, cfg.dataset.root = "local/cr5", None
    ts = lerobot_train.make_dataset(cfg)
    assert ts.num_episodes == 1 and ts.num_frames == ts.meta.episodes["length"][1]


def test_make_dataset_errors_name_the_way_out(tmp_path, cr5_v30):
    with pytest.raises(FileNotFoundError, match=r"no LeRobot set there.*hf download local/nope"):
        lerobot_train.make_dataset(config(tmp_path / "nope"))
    cfg = config(cr5_v30)
    cfg.dataset.streaming = True
    with pytest.raises(ValueError, match=r"streaming=true: robocache does not stream.*frames=.*shard_episodes.*"
                                          r"hf download REPO --repo-type dataset --local-dir DIR"):
        lerobot_train.make_dataset(cfg)


# ---------------------------------------------------------------------------------------------------------
# the DataLoader switch: LeRobot's batches for LeRobot's samples


def test_loader_gives_lerobots_batch_for_its_sampler(v30_subset):
    """Diffusion's path in lerobot-train: an EpisodeAwareSampler of dataset-wide indices over the loaded
    episodes; the batch is LeRobot's default_collate of those items, key for key and bit for bit."""
    from lerobot.datasets.sampler import EpisodeAwareSampler

    cfg, ts = v30_subset
    eps = ts.meta.episodes

    def sampler():      # LeRobot 0.4 draws from torch's generator, 0.6 from (seed, epoch): one each time
        return EpisodeAwareSampler(eps["dataset_from_index"], eps["dataset_to_index"], episode_indices_to_use=[1, 3],
                                   drop_n_last_frames=7, shuffle=True)

    loader = DataLoader(ts, num_workers=4, batch_size=6, shuffle=False, sampler=sampler(), pin_memory=False,
                        drop_last=False, prefetch_factor=2)
    assert isinstance(loader, lerobot_train.RobocacheLoader)
    torch.manual_seed(11)
    batch = next(iter(loader))
    torch.manual_seed(11)                            # torch's loader of the same sampler, the same seed
    absolute = next(iter(TorchDataLoader(range(eps["dataset_to_index"][-1]), batch_size=6, sampler=sampler())))
    absolute = absolute.tolist()
    assert batch["index"].tolist() == absolute
    assert_same_batch(batch, lerobot_reference(cfg, absolute))


@pytest.mark.parametrize("persistent", [False, True])
def test_loader_draws_as_torchs_loader(v30_subset, persistent):
    """Epoch after epoch, torch's generator is left as torch's loader of the same sampler leaves it (a base
    seed drawn per iter(), the first only with persistent workers), so the policy's later draws are the same."""
    _, ts = v30_subset
    draw = [ts.dataset.meta.first_index[3] + i for i in (4, 0, 9, 2, 7)]
    workers = {"num_workers": 2, "persistent_workers": True} if persistent else {}

    def after_two_epochs(loader):
        torch.manual_seed(5)
        for _ in range(2):
            next(iter(loader))
        return torch.rand(3)

    ours = after_two_epochs(DataLoader(ts, batch_size=2, sampler=draw, **workers))
    theirs = after_two_epochs(TorchDataLoader(range(draw[0] + 10), batch_size=2, sampler=draw, **workers))
    assert torch.equal(ours, theirs)


def test_loader_shuffles_every_loaded_frame_once_per_epoch(v30_subset):
    _, ts = v30_subset
    loader = DataLoader(ts, batch_size=64, shuffle=True, drop_last=False)
    seen = torch.cat([b["index"] for b in loader]).sort().values
    first = ts.dataset.meta.first_index
    lengths = ts.meta.episodes["length"]
    expect = np.concatenate([np.arange(first[e], first[e] + lengths[e]) for e in (1, 3)])
    assert seen.tolist() == expect.tolist()


@pytest.mark.parametrize("batch_size, world", [(4, 3), (5, 2), (64, 2), (1, 3)])
def test_sampler_shares_between_ranks(v30_subset, monkeypatch, batch_size, world):
    """Under torch.distributed each rank takes the samples accelerate hands its process of LeRobot's
    sampler (accelerate's own BatchSamplerShard is the oracle): whole batches in turn, the pass completed from
    its start (64 x 2: fewer samples than one round)."""
    import robocache.loader.shard

    BatchSamplerShard = pytest.importorskip("accelerate.data_loader").BatchSamplerShard
    _, ts = v30_subset
    f, n = ts.dataset.meta.first_index[3], ts.meta.episodes["length"][3]
    draw = list(range(f, f + n)) + [ts.dataset.meta.first_index[1]]
    length1 = ts.meta.episodes["length"][1]
    position = {**{i: length1 + i - f for i in range(f, f + n)}, ts.dataset.meta.first_index[1]: 0}  # episode 1 first
    for rank in range(world):
        monkeypatch.setattr(robocache.loader.shard, "distributed", lambda r, w, rank=rank: (rank, world))
        s = IndexSampler(draw, ts.dataset, batch_size)
        batches = BatchSamplerShard(torch.utils.data.BatchSampler(draw, batch_size, False), world, rank)
        expect = [position[i] for b in batches for i in b]
        assert list(s) == expect and len(s) == len(expect)


def test_sampler_rejects_frames_not_loaded(v30_subset):
    _, ts = v30_subset
    outside = ts.dataset.meta.first_index[3] - 1          # the last frame of episode 2, not loaded
    with pytest.raises(IndexError, match=rf"\[{outside}\] are not frames of the loaded episodes"):
        list(IndexSampler([outside], ts.dataset))


def test_other_datasets_keep_torchs_loader():
    loader = DataLoader([1, 2, 3], batch_size=2)
    assert isinstance(loader, torch.utils.data.DataLoader) and [b.tolist() for b in loader] == [[1, 2], [3]]


def test_feeding_swaps_and_restores_the_scripts_data():
    import torch.utils.data as tud
    from lerobot.scripts import lerobot_train as script

    name = lerobot_compat.dataset_call(script)      # make_dataset (0.4), make_train_eval_datasets (0.6)
    before = getattr(script, name), tud.DataLoader
    with lerobot_train.feeding():
        assert getattr(script, name) is getattr(lerobot_train, name) and tud.DataLoader is DataLoader
    assert (getattr(script, name), tud.DataLoader) == before


def test_image_transforms_run_per_sample():
    calls = []

    def flip(x):
        calls.append(tuple(x.shape))
        return x.flip(-1)

    images = torch.rand(3, 2, 3, 4, 5)
    batch = ImageTransformer(flip, ["cam", "absent"])({"cam": images.clone(), "state": torch.zeros(3)})
    assert calls == [(2, 3, 4, 5)] * 3 and torch.equal(batch["cam"], images.flip(-1))
    # a collate_fn of the user's runs after them, on the whole batch
    then = ImageTransformer(flip, ["cam"], then=lambda b: b["cam"].sum(0))({"cam": images.clone()})
    assert torch.allclose(then, images.flip(-1).sum(0))


def test_loader_applies_image_transforms_then_collate(v30_subset):
    _, ts = v30_subset
    flipped = TrainSet(ts.dataset, ts.meta, ts.delta_timestamps, image_transforms=lambda x: x.flip(-1))
    cam = ts.meta.camera_keys[0]
    a = next(iter(DataLoader(ts, batch_size=3, sampler=[ts.dataset.meta.first_index[1]] * 3)))
    b = next(iter(DataLoader(flipped, batch_size=3, sampler=[ts.dataset.meta.first_index[1]] * 3,
                             collate_fn=lambda batch: {**batch, "seen": True})))
    assert torch.equal(b[cam], a[cam].flip(-1)) and b["seen"]


# ---------------------------------------------------------------------------------------------------------
# v2.x metadata (LeRobot 0.4 reads v3.0 only)


def test_v2_meta_is_lerobot_03s(cr5_v21):
    meta = V2Meta(cr5_v21, "local/cr5")
    info = json.loads((cr5_v21 / "meta" / "info.json").read_text())
    for feature in info["features"].values():
        feature["shape"] = tuple(feature["shape"])          # LeRobot's load_info makes shapes tuples
    assert meta.features == info["features"] and meta.fps == 10 and meta.camera_keys == ["observation.images.top"]
    assert meta.total_episodes == 52 and meta.robot_type == info["robot_type"]
    rows = [json.loads(line) for line in (cr5_v21 / "meta" / "episodes.jsonl").read_text().splitlines()]
    ends = np.cumsum([r["length"] for r in rows])
    assert meta.episodes["dataset_to_index"] == ends.tolist()
    assert meta.episodes["dataset_from_index"] == [0, *ends[:-1].tolist()]
    # statistics: every episode of episodes_stats.jsonl pooled (count-weighted mean, pooled variance)
    per = [json.loads(line)["stats"] for line in (cr5_v21 / "meta" / "episodes_stats.jsonl").read_text().splitlines()]
    for key in ("observation.state", "action", "observation.images.top"):
        n = np.array([s[key]["count"][0] for s in per], np.float64)
        means = np.array([s[key]["mean"] for s in per], np.float64)
        var = np.array([s[key]["std"] for s in per], np.float64) ** 2
        w = (n / n.sum()).reshape(-1, *[1] * (means.ndim - 1))
        mean = (w * means).sum(0)
        np.testing.assert_allclose(meta.stats[key]["mean"], mean, rtol=1e-12)
        np.testing.assert_allclose(meta.stats[key]["std"], np.sqrt((w * (var + (means - mean) ** 2)).sum(0)),
                                   rtol=1e-12)
        np.testing.assert_array_equal(meta.stats[key]["min"], np.min([s[key]["min"] for s in per], 0))
        np.testing.assert_array_equal(meta.stats[key]["max"], np.max([s[key]["max"] for s in per], 0))


def test_v2_set_builds_lerobots_policy(cr5_v21):
    from lerobot.policies.factory import make_policy

    meta = V2Meta(cr5_v21)
    policy = make_policy(config(cr5_v21).policy, ds_meta=meta)
    assert policy.config.input_features["observation.images.top"].shape == (3, 480, 640)
    assert policy.config.input_features["observation.state"].shape == (6,)
    assert policy.config.output_features["action"].shape == (7,)


# ---------------------------------------------------------------------------------------------------------
# the command line and the example, end to end


def run(args, cwd, timeout=900):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # LeRobot may be on it
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "ROBOCACHE_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


@pytest.mark.parametrize("policy", ["act", "diffusion"])
def test_lerobot_train_command_line(cr5_v30, tmp_path, policy):
    """`python -m robocache.lerobot.train` takes lerobot-train's arguments and trains (Diffusion: through its
    EpisodeAwareSampler)."""
    small = {"act": [f"--policy.{k}={v}" for k, v in SMALL_ACT.items()],
             "diffusion": ["--policy.down_dims=[16,32]", "--policy.crop_shape=[64,64]", "--policy.horizon=8",
                           "--policy.n_action_steps=4", "--policy.diffusion_step_embed_dim=16",
                           "--policy.spatial_softmax_num_keypoints=8"]}[policy]
    r = run(["-m", "robocache.lerobot.train", f"--dataset.repo_id=local/{cr5_v30.name}",
             f"--dataset.root={cr5_v30}", "--dataset.episodes=[0]", f"--policy.type={policy}",
             "--policy.device=cpu", "--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null",
             *small, "--steps=2", "--batch_size=2", "--num_workers=0", "--log_freq=1", "--save_checkpoint=false",
             f"--output_dir={tmp_path / 'out'}"], cwd=tmp_path)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-3000:]
    assert "dataset.num_frames=370" in log and "End of training" in log
    assert "step:2 smpl:4" in log


@pytest.mark.parametrize("policy", ["act", "diffusion"])
def test_example_smoke_matches_lerobot_fed(cr5_v30, tmp_path, policy):
    """The example's quick mode, both loaders: the first batches agree key for key and so do the losses
    (Diffusion: images and state with a time axis and their masks)."""
    out = tmp_path / "curve.json"
    r = run([str(ROOT / "examples" / "train_lerobot_policy.py"), "--smoke", "--policy", policy, "--loader", "both",
             "--data", str(cr5_v30), "--workers", "0", "--out", str(out)], cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rep = json.loads(out.read_text())
    diff = rep["first_batch_max_abs_difference"]
    assert ("observation.images.top_is_pad" in diff) == (policy == "diffusion")
    assert {k for k, v in diff.items() if v != 0} <= {"observation.images.top"}
    assert diff["observation.images.top"] <= 2 / 255        # another video decoder's rounding at most
    a, b = np.array(rep["robocache_fed"]["loss"]), np.array(rep["lerobot_fed"]["loss"])
    assert len(a) == len(b) == 3 and np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=1e-3)


def test_example_refuses_lerobot_loader_on_v2(cr5_v21, tmp_path):
    r = run([str(ROOT / "examples" / "train_lerobot_policy.py"), "--smoke", "--loader", "lerobot", "--data",
             str(cr5_v21)], cwd=tmp_path)
    assert r.returncode != 0 and "reads v3.0 sets only" in r.stderr
