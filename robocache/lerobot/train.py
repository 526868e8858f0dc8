# mypy: disable-error-code="import-untyped,import-not-found"
# (LeRobot and datasets ship no type information, and are optional: absent where robocache is checked)
"""LeRobot's own training script (``lerobot-train``, LeRobot 0.4.x and 0.6.x) fed by robocache.

    python -m robocache.lerobot.train <the arguments of lerobot-train>
    accelerate launch --multi_gpu --num_processes 2 -m robocache.lerobot.train <the same>   # a process per GPU

runs ``lerobot.scripts.lerobot_train`` unchanged but for the two places where it builds its data: its data
call (``make_dataset(cfg)`` in 0.4, ``make_train_eval_datasets(cfg)`` in 0.6: robocache/lerobot/compat.py) loads
the set with ``robocache.Dataset.from_lerobot`` (decoded once, onto the training device) instead of a
``LeRobotDataset``, and its ``torch.utils.data.DataLoader(dataset, ...)`` calls get a
``robocache.DataLoader(..., delta_timestamps=...)``, whose batches are the ``default_collate`` of LeRobot's items
(robocache/lerobot/contract.py). Policy, processors, normalization, optimizer, accelerate, logging and checkpoints are
LeRobot's. In a training script of one's own the same two swaps are two lines::

    from robocache.lerobot.train import make_dataset, DataLoader   # LeRobot's make_dataset, torch's DataLoader

``dataset.meta`` is what LeRobot's policy factory and processors read: LeRobot's own ``LeRobotDatasetMetadata``
for a v3.0 set; for a v2.x set (which LeRobot 0.4 and 0.6 no longer read) the same fields made the way LeRobot
0.3 made them (``info.json`` features and fps, statistics of ``episodes_stats.jsonl`` aggregated over every episode
of the set by LeRobot's ``aggregate_stats``, or ``meta/stats.json``). See docs/loader.md, "Migrating".
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from . import compat as compat
from .._util import current_gpu
from ..data.dataset import Dataset
from ..loader.dataloader import DataLoader as RobocacheLoader
from ..readers.lerobot import lerobot_home, load_json, load_jsonl
from ..loader.torch_keywords import WORKER_KEYWORDS

__all__ = ["DataLoader", "TrainSet", "V2Meta", "feeding", "main", "make_dataset", "make_train_eval_datasets"]

TorchDataLoader = torch.utils.data.DataLoader


class TrainSet:
    """What ``make_dataset`` hands LeRobot's training in place of a ``LeRobotDataset``: the robocache
    ``dataset``, LeRobot's ``meta``, the ``delta_timestamps`` the policy asked for, and the fields the script
    logs (``num_frames``, ``num_episodes``, ``episodes``). ``DataLoader(train_set, ...)`` makes its batches."""

    #: LeRobot 0.6's samplers map dataset-wide indices to rows of the loaded episodes with this; None keeps them
    #: dataset-wide, which the loader maps itself (IndexSampler), whatever episodes are loaded
    absolute_to_relative_idx = None

    def __init__(self, dataset: Dataset, meta, delta_timestamps: dict | None, *, episodes=None,
                 image_transforms=None, augment=None, tolerance_s: float = 1e-4, seed: int = 0):
        self.dataset = dataset
        self.meta = meta
        self.delta_timestamps = dict(delta_timestamps or {})
        self.episodes = None if episodes is None else [int(e) for e in episodes]
        self.image_transforms = image_transforms       # LeRobot's, run per sample (the fallback)
        self.augment = augment                         # robocache's, inside the gather
        self.tolerance_s = float(tolerance_s)
        self.seed = int(seed)

    @property
    def num_frames(self) -> int:
        return self.dataset.num_frames

    @property
    def num_episodes(self) -> int:
        return self.dataset.num_episodes

    @property
    def fps(self) -> float:
        return float(self.meta.fps)

    @property
    def features(self) -> dict:
        return self.meta.features

    def __len__(self) -> int:
        return self.num_frames

    def __repr__(self) -> str:
        return f"TrainSet({self.dataset!r},\n  delta_timestamps={self.delta_timestamps})"

    def loader(self, batch_size: int = 1, shuffle: bool | None = None, sampler=None, *, drop_last: bool = False,
               **torch_keywords) -> TrainLoader:
        """``torch.utils.data.DataLoader(self, ...)`` as robocache's: LeRobot's batches made on the dataset's
        device. A ``sampler`` yields LeRobot's dataset-wide ``index`` values (its ``EpisodeAwareSampler``):
        they become robocache sample positions, and under ``torch.distributed`` each rank takes the batches
        accelerate would give its process. ``shuffle`` is robocache's permutation of the loaded frames for
        ``seed`` (each rank its share), not torch's ``RandomSampler`` order. ``augment`` (LeRobot's
        ``ImageTransforms`` mapped onto robocache.augment) runs inside the frame gather, a draw per sample and
        camera; ``image_transforms`` (the fallback for transforms robocache lacks) run per sample on the device,
        as LeRobot runs them per item."""
        rank = world = None             # torch.distributed's, as robocache's loader takes them
        if sampler is not None:
            sampler = IndexSampler(sampler, self.dataset, batch_size)
            rank, world = 0, 1          # the sampler gives this rank's share already
        persistent = bool(torch_keywords.get("persistent_workers")) and bool(torch_keywords.get("num_workers"))
        # a collate_fn is robocache's kind: it gets the whole batch dict, after the image transforms
        collate = torch_keywords.pop("collate_fn", None)
        for k in WORKER_KEYWORDS:       # LeRobot's script sets them, not its user: no warning about them here
            torch_keywords.pop(k, None)
        if self.image_transforms is not None:
            collate = ImageTransformer(self.image_transforms, self.meta.camera_keys, then=collate)
        return TrainLoader(self.dataset, batch_size, shuffle=bool(shuffle), drop_last=drop_last, seed=self.seed,
                           sampler=sampler, collate_fn=collate, delta_timestamps=self.delta_timestamps,
                           tolerance_s=self.tolerance_s, rank=rank, world_size=world, image_transforms=self.augment,
                           persistent=persistent, **torch_keywords)


class TrainLoader(RobocacheLoader):
    """robocache's loader drawing from torch's default generator where torch's ``DataLoader`` draws: one int64
    at each ``iter()`` (its workers' base seed; with persistent workers, at the first only), before the
    sampler's own draws. With the same sampler (LeRobot's ``EpisodeAwareSampler``), the training's later draws
    (LeRobot 0.4's sampler permutations, dropout, noise) are then those of the same run fed by torch's loader."""

    def __init__(self, *args, persistent: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.persistent = persistent
        self.iterated = False

    def __iter__(self) -> Iterator[dict]:
        if not (self.persistent and self.iterated):
            torch.empty((), dtype=torch.int64).random_()
        self.iterated = True
        return super().__iter__()


class IndexSampler:
    """LeRobot's sampler of dataset-wide ``index`` values (``EpisodeAwareSampler``) as robocache sample
    positions (the loaded episodes' frames in order), this rank's share of each pass as accelerate deals
    a sampler's batches out to its processes (``BatchSamplerShard``, ``even_batches``): batches of
    ``batch_size`` in turn, ``rank`` taking every ``world_size``-th from its own, the pass completed to
    whole batches on every rank with samples from its start."""

    sampler: Any            # LeRobot's samplers: iterable, sized, maybe set_epoch
    batch_size: int
    rank: int
    world_size: int
    position: np.ndarray    # [dataset-wide index] -> sample position, -1 where not loaded

    def __init__(self, sampler: Iterable[int], dataset: Dataset, batch_size: int = 1):
        from ..loader.shard import distributed

        if dataset.meta is None or dataset.anchor is None:
            raise ValueError("sampler: dataset-wide indices need a LeRobot set (Dataset.from_lerobot)")
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.rank, self.world_size = distributed(None, None)
        lengths = np.diff(dataset.streams[dataset.anchor].offsets.cpu().numpy())
        first = np.array([dataset.meta.first_index[int(e)] for e in dataset.episode_index], np.int64)
        self.position = np.full(int((first + lengths).max(initial=0)), -1, np.int64)
        start = 0
        for f, n in zip(first, lengths):
            self.position[f:f + n] = np.arange(start, start + n)
            start += n

    def __len__(self) -> int:
        if self.world_size == 1:
            return len(self.sampler)
        return -(-len(self.sampler) // (self.batch_size * self.world_size)) * self.batch_size

    def __iter__(self) -> Iterator[int]:
        idx = np.fromiter((int(i) for i in self.sampler), np.int64)
        inside = (idx >= 0) & (idx < self.position.size)
        pos = np.where(inside, self.position[np.where(inside, idx, 0)], -1)
        if (pos < 0).any():
            raise IndexError(f"sampler: dataset-wide indices {idx[pos < 0][:8].tolist()} are not frames of the "
                             "loaded episodes")
        if self.world_size == 1:
            return iter(pos.tolist())
        b, w = self.batch_size, self.world_size
        short = -pos.size % (b * w)
        pos = np.concatenate([pos, np.resize(pos[: b * w], short)])     # accelerate's cycle through the start
        return iter(pos.reshape(-1, w, b)[:, self.rank].ravel().tolist())

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)


class ImageTransformer:
    """LeRobot's ``image_transforms`` (random per item) applied to each sample's camera images of a batch,
    on the batch's device: B calls of the transform per camera, as LeRobot's ``__getitem__`` makes them."""

    def __init__(self, transforms, camera_keys: Iterable[str], then=None):
        self.transforms = transforms
        self.camera_keys = list(camera_keys)
        self.then = then

    def __call__(self, batch: dict):
        for k in self.camera_keys:
            if k in batch:
                batch[k] = torch.stack([self.transforms(x) for x in batch[k]])
        return batch if self.then is None else self.then(batch)


class DataLoader(TorchDataLoader):
    """``torch.utils.data.DataLoader``, except that for a :class:`TrainSet` it is the TrainSet's
    robocache loader (``TrainSet.loader``, same keywords); any other dataset gets torch's own."""

    def __new__(cls, dataset=None, *args, **kwargs):
        if isinstance(dataset, TrainSet):
            return dataset.loader(*args, **kwargs)
        return super().__new__(cls)


class V2Meta:
    """LeRobot 0.3's ``LeRobotDatasetMetadata`` of a v2.x set (LeRobot 0.4 reads v3.0 only), with the fields
    LeRobot 0.4's training reads: ``info``, ``features``, ``fps``, ``stats`` (numpy, per feature),
    ``camera_keys``, ``video_keys``, ``image_keys``, ``robot_type``, ``total_frames``, ``total_episodes``,
    ``episodes`` (a ``datasets.Dataset`` of ``episode_index``, ``tasks``, ``length``, ``dataset_from_index``,
    ``dataset_to_index``, as LeRobot 0.4's), ``repo_id`` and ``root``. Shapes are tuples, as LeRobot's
    ``load_info`` makes them."""

    def __init__(self, root, repo_id: str = ""):
        import datasets

        self.root, self.repo_id = Path(root), repo_id
        meta = self.root / "meta"
        self.info = load_json(meta / "info.json")
        for feature in self.info["features"].values():     # as LeRobot's load_info
            feature["shape"] = tuple(feature["shape"])
        self.features: dict = self.info["features"]
        self.fps = self.info["fps"]
        rows = sorted(load_jsonl(meta / "episodes.jsonl"), key=lambda r: r["episode_index"])
        lengths = np.array([r["length"] for r in rows], np.int64)
        ends = np.cumsum(lengths)
        self.episodes = datasets.Dataset.from_dict({
            "episode_index": [r["episode_index"] for r in rows], "tasks": [r.get("tasks", []) for r in rows],
            "length": lengths.tolist(), "dataset_from_index": (ends - lengths).tolist(),
            "dataset_to_index": ends.tolist()})
        self.stats = v2_stats(meta)

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "image"]

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_frames(self) -> int:
        return int(self.info["total_frames"])

    @property
    def total_episodes(self) -> int:
        return int(self.info["total_episodes"])


def v2_stats(meta: Path) -> dict:
    """A v2.x set's statistics as LeRobot 0.3 had them: ``meta/stats.json`` (v2.0), else every episode's
    ``episodes_stats.jsonl`` entry (v2.1) aggregated by LeRobot's ``aggregate_stats`` (count-weighted mean,
    pooled std, min of mins, max of maxes), as numpy arrays."""
    from lerobot.datasets.compute_stats import aggregate_stats

    def as_numpy(stats: dict) -> dict:
        return {k: {s: np.array(v) for s, v in st.items()} for k, st in stats.items()}

    if (meta / "stats.json").is_file():
        return as_numpy(load_json(meta / "stats.json"))
    return aggregate_stats([as_numpy(r["stats"]) for r in load_jsonl(meta / "episodes_stats.jsonl")])


def lerobot_meta(root, repo_id: str = "", revision: str | None = None):
    """LeRobot's metadata of the set at ``root``: ``LeRobotDatasetMetadata`` for v3.0, :class:`V2Meta` for v2.x."""
    info = load_json(Path(root) / "meta" / "info.json")
    if str(info.get("codebase_version", "")).startswith("v2"):
        return V2Meta(root, repo_id)
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata
    return LeRobotDatasetMetadata(repo_id, root=root, revision=revision)


def make_dataset(cfg) -> TrainSet:
    """LeRobot's ``make_dataset(cfg)`` (``lerobot.datasets.factory``) with robocache loading the set.

    The same reading of ``cfg``: ``delta_timestamps`` from the policy's delta indices
    (``resolve_delta_timestamps``), ``cfg.dataset.episodes`` (LeRobot 0.6: less ``exclude_episodes``),
    ``cfg.tolerance_s``, ImageNet statistics for the cameras with ``use_imagenet_stats`` (the default),
    ``image_transforms`` when enabled (off by default). The set is read from ``cfg.dataset.root``, else
    LeRobot's cache folder ``HF_LEROBOT_HOME / repo_id`` (:func:`~robocache.readers.lerobot.lerobot_home`,
    LeRobot's formula): a set not there yet is an error saying how to download it. ``video_backend`` and
    ``revision`` do not apply (robocache decodes the local files itself); ``streaming`` is refused."""
    root, meta = lerobot_set(cfg)
    return load(cfg, root, meta, compat.episode_indices(cfg, meta.total_episodes))


def make_train_eval_datasets(cfg) -> tuple[TrainSet, TrainSet | None]:
    """LeRobot 0.6's ``make_train_eval_datasets(cfg)`` (``lerobot.datasets.factory``) with robocache loading
    the sets: ``(make_dataset(cfg), None)`` when ``cfg.dataset.eval_split`` is 0 (the default), else the
    loaded episodes split as LeRobot splits them, per task (an episode's first task) the last
    ``ceil(n * eval_split)`` held out, the held-out set without image transforms."""
    import logging

    root, meta = lerobot_set(cfg)
    episodes = compat.episode_indices(cfg, meta.total_episodes)
    split = cfg.dataset.eval_split
    if split == 0.0:
        return load(cfg, root, meta, episodes), None
    tasks = meta.episodes["tasks"]
    by_task: dict[str, list[int]] = {}
    for e in range(meta.total_episodes) if episodes is None else episodes:
        by_task.setdefault(tasks[e][0] if tasks[e] else "", []).append(e)
    train, held = [], []
    for group in by_task.values():
        n = math.ceil(len(group) * split)
        train += group[: len(group) - n]
        held += group[len(group) - n:]
    if not train:
        raise ValueError(f"eval_split={split} leaves 0 training episodes from {sum(map(len, by_task.values()))} "
                         "total.")
    logging.info(f"Train/eval split: {len(train)} train, {len(held)} eval (eval_split={split}, {len(by_task)} "
                 "tasks)")
    return load(cfg, root, meta, train), load(cfg, root, meta, held, transforms=False)


def lerobot_set(cfg):
    """``(root, LeRobot's metadata)`` of ``cfg.dataset``, the cameras' statistics ImageNet's with
    ``use_imagenet_stats`` (depth cameras keep theirs, as in LeRobot 0.6)."""
    from lerobot.datasets.factory import IMAGENET_STATS

    data = cfg.dataset
    if not isinstance(data.repo_id, str):
        raise NotImplementedError("several datasets (a list of repo_id) are not supported, as in LeRobot")
    if data.streaming:
        raise ValueError("--dataset.streaming=true: robocache does not stream from the Hub; it reads a local copy "
                         "once and keeps the decoded frames in a tier that fits (device, pinned host, disk, JPEG "
                         "or lossless: Dataset.from_lerobot(frames=...)), each rank only its episodes "
                         "(shard_episodes). Download the set first (hf download REPO --repo-type dataset "
                         "--local-dir DIR, then --dataset.root=DIR) and leave streaming off")
    root = Path(data.root) if data.root else lerobot_home() / data.repo_id
    if not (root / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"{root}: no LeRobot set there (meta/info.json). robocache reads a local copy: "
                                f"pass --dataset.root=PATH, or download it first, e.g. `hf download {data.repo_id} "
                                f"--repo-type dataset --local-dir {root}`")
    meta = lerobot_meta(root, data.repo_id, data.revision)
    if data.use_imagenet_stats:
        for key in set(meta.camera_keys) - set(getattr(meta, "depth_keys", ())):
            for name, value in IMAGENET_STATS.items():
                meta.stats.setdefault(key, {})[name] = torch.tensor(value, dtype=torch.float32)
    return root, meta


def load(cfg, root: Path, meta, episodes, transforms: bool = True) -> TrainSet:
    """The TrainSet of ``episodes`` (None: all) of the set at ``root``, for the model ``cfg`` trains."""
    data = cfg.dataset
    model = compat.trained_config(cfg)
    dataset = Dataset.from_lerobot(root, episodes=episodes, device=training_device(model.device))
    per_sample, augment = image_augment(data.image_transforms) if transforms else (None, None)
    return TrainSet(dataset, meta, compat.resolve_delta_timestamps(cfg, meta), episodes=episodes,
                    image_transforms=per_sample, augment=augment, tolerance_s=cfg.tolerance_s,
                    seed=0 if cfg.seed is None else cfg.seed)


def image_augment(config):
    """``(per-sample transforms, augment)`` for LeRobot's ``ImageTransformsConfig``: disabled -> (None, None);
    every ``tfs`` type robocache has (ColorJitter, SharpnessJitter, RandomAffine: LeRobot's defaults) -> its
    subset as a robocache Augment run inside the gather; a type robocache lacks -> LeRobot's own
    ``ImageTransforms`` per sample (the documented fallback), with a warning naming it."""
    if not config.enable:
        return None, None
    from .. import augment
    try:
        return None, augment.lerobot(config)
    except ValueError as e:
        from ..user_warning import warn
        warn(f"robocache.lerobot.train: {e}; LeRobot's ImageTransforms run per sample instead (a Python call per "
             "sample and camera)", RuntimeWarning)
        return compat.image_transforms_class()(config), None


def training_device(name: str | None) -> torch.device:
    """Where the set lives: the current GPU (accelerate's, one per process) when the policy trains on CUDA,
    else the CPU (the preprocessor moves CPU batches to another device, e.g. mps)."""
    if name and str(name).startswith("cuda") and torch.cuda.is_available():
        return current_gpu()
    return torch.device("cpu")


@contextmanager
def feeding() -> Iterator[None]:
    """Within the block, LeRobot's training script (``lerobot.scripts.lerobot_train``) loads its sets with
    robocache (its ``make_dataset``, or 0.6's ``make_train_eval_datasets``) and ``torch.utils.data.DataLoader``
    gives a robocache loader for them (:class:`DataLoader`: torch's own for any other dataset); both are
    restored on exit."""
    import torch.utils.data as tud
    from lerobot.scripts import lerobot_train as script

    name = compat.dataset_call(script)
    saved = getattr(script, name), tud.DataLoader
    setattr(script, name, make_train_eval_datasets if name == "make_train_eval_datasets" else make_dataset)
    setattr(tud, "DataLoader", DataLoader)      # the script calls torch.utils.data.DataLoader(...) by that name
    try:
        yield
    finally:
        setattr(script, name, saved[0])
        setattr(tud, "DataLoader", saved[1])


def main() -> Any:
    """``lerobot-train`` with robocache feeding it (the command line, and its ``main``, are LeRobot's)."""
    from lerobot.scripts import lerobot_train as script

    with feeding():
        return script.main()


if __name__ == "__main__":
    # `python -m` runs this file as __main__: take the package's copy, so there is one TrainSet class
    from robocache.lerobot.train import main as package_main
    package_main()
