# mypy: disable-error-code="import-untyped,import-not-found"
# (LeRobot ships no type information, and is optional: absent where robocache is checked)
"""What differs between the LeRobot versions ``robocache.lerobot.train`` feeds (0.4.x and 0.6.x), each found
by what the installed LeRobot has rather than by its version string:

- ``ImageTransforms``: ``lerobot.datasets.transforms`` (0.4) moved to ``lerobot.transforms`` (0.6);
- the trained model's config: ``cfg.policy`` (0.4), ``cfg.trainable_config`` (0.6: a policy or a reward model);
- ``resolve_delta_timestamps`` takes the config's ``rename_map`` (0.6) or not (0.4);
- episodes: ``--dataset.episodes`` (0.4), less ``--dataset.exclude_episodes`` (0.6, ``resolve_episode_indices``);
- the training script's data call: ``make_dataset(cfg)`` (0.4), ``make_train_eval_datasets(cfg)`` returning the
  training set and the held-out one of ``--dataset.eval_split`` (0.6).
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["dataset_call", "episode_indices", "image_transforms_class", "resolve_delta_timestamps",
           "trained_config"]


def image_transforms_class() -> type:
    """LeRobot's ``ImageTransforms``, wherever this version keeps it."""
    try:
        from lerobot.transforms import ImageTransforms
    except ImportError:
        from lerobot.datasets.transforms import ImageTransforms
    return ImageTransforms


def trained_config(cfg) -> Any:
    """The config of the model being trained, whose delta indices name the frames a sample holds."""
    return getattr(cfg, "trainable_config", cfg.policy)


def resolve_delta_timestamps(cfg, meta) -> dict | None:
    """LeRobot's ``resolve_delta_timestamps`` for ``cfg``'s model, with its ``rename_map`` where it takes one
    (a feature renamed onto a policy key gets that key's offsets)."""
    from lerobot.datasets.factory import resolve_delta_timestamps as resolve

    if "rename_map" in inspect.signature(resolve).parameters:
        return resolve(trained_config(cfg), meta, getattr(cfg, "rename_map", None))
    return resolve(trained_config(cfg), meta)


def episode_indices(cfg, total_episodes: int) -> list[int] | None:
    """The episodes LeRobot loads for ``cfg.dataset``: ``episodes`` (None: all), less ``exclude_episodes``
    where this LeRobot has them, indices outside the set dropped with its warning."""
    try:
        from lerobot.datasets.utils import resolve_episode_indices
    except ImportError:
        return cfg.dataset.episodes
    return resolve_episode_indices(cfg.dataset.episodes, total_episodes, getattr(cfg.dataset, "exclude_episodes",
                                                                                 None))


def dataset_call(script) -> str:
    """The name under which LeRobot's training script (module ``script``) builds its data."""
    return "make_train_eval_datasets" if hasattr(script, "make_train_eval_datasets") else "make_dataset"
