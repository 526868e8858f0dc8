"""The stream model: a Dataset's named streams, stored ragged over all its episodes.

A :class:`Stream` is three torch tensors on one device: ``values [N,...]`` (any dtype; an image stream's
frames in a :class:`robocache.frames.FrameStore`), ``times [N]`` float64 seconds and ``offsets [E+1]``
int64 (episode e is samples ``[offsets[e], offsets[e+1])``): the ragged form ``robocache.resample`` reads
directly. Point clouds add one level: ``values [P,C]`` points, ``frame_offsets [M+1]`` over points,
``times [M]`` per frame, ``offsets [E+1]`` over frames. :class:`Episode` is one episode's metadata.
Streams are built by ``robocache.data.build.EpisodeBuilder``; their statistics come from ``robocache.data.stats``.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .._util import dtype_name, fmt_bytes, fmt_rate, fmt_seconds, resolve_device
from .._util import torch as _torch
from ..frames.store import FrameStore
from .stats import compute_stats

__all__ = ["COPY_MODES", "DEFAULT_MODES", "Episode", "KINDS", "MODES", "PointClouds", "Stream", "Streams"]

KINDS = ("continuous", "discrete", "image", "pointcloud", "text")
#: the statistics a stream has (Stream.stats), as LeRobot and GR00T name them
STATS_KEYS = ("min", "max", "mean", "std", "q01", "q99")
MODES = ("linear", "nearest", "previous", "next", "slerp")
DEFAULT_MODES = {"continuous": "linear", "discrete": "nearest", "image": "nearest",
                 "pointcloud": "nearest", "text": "previous"}
COPY_MODES = ("nearest", "previous", "next")


class Streams(dict[str, "Stream"]):
    """``ds.streams``: stream name -> :class:`Stream`, a dict whose missing name is a KeyError that names
    the streams there are (and the closest one), not a bare ``KeyError: 'actions'``."""

    def __missing__(self, name):
        near = difflib.get_close_matches(str(name), [str(n) for n in self], n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise KeyError(f"unknown stream {name!r}; the dataset has {sorted(self)}{hint}")


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])``, int64."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


@dataclass(frozen=True)
class PointClouds:
    """The point clouds of one episode: ``points [P,C]`` and ``offsets [M+1]`` (int64, from 0),
    frame m being ``points[offsets[m]:offsets[m+1]]``."""

    points: Any
    offsets: Any

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, m: int):
        if not -len(self) <= m < len(self):
            raise IndexError(f"frame {m} out of range for {len(self)} frames")
        m %= len(self)
        return self.points[int(self.offsets[m]):int(self.offsets[m + 1])]


class Stream:
    """One named stream of a Dataset, stored ragged over all episodes.

    Attributes
    ----------
    name, kind, mode : str
        ``kind`` is continuous / discrete / image / pointcloud / text; ``mode`` the default
        resample mode (linear, nearest, previous, next, slerp).
    values : torch.Tensor or FrameStore
        ``[N, ...]`` samples back to back (point clouds: ``[P, C]`` points). Image streams hold a
        :class:`robocache.frames.FrameStore` (``frames``): RGB or YUV frames in the device, pinned-host or
        disk tier; indexing it gives decoded ``[n, H, W, C]`` frames on the dataset's device.
    times : torch.Tensor
        ``[N]`` float64 seconds (point clouds: one time per frame, ``[M]``).
    offsets : torch.Tensor
        ``[E+1]`` int64 into ``times`` (point clouds: into frames).
    frame_offsets : torch.Tensor or None
        Point clouds only: ``[M+1]`` int64 into ``values`` (points).
    feature_names : list or None
    file_stats : dict or None
        Statistics shipped with the source (e.g. LeRobot ``stats.json``), kept as given
        (numeric entries as float64 tensors on the device).
    nominal_rate : float or None
        The rate the source declares (e.g. LeRobot ``fps``); ``rate`` is the measured one.
    vocab : list of str or None
        Text streams built from strings: ``values`` are int64 indices into ``vocab``.
    """

    def __init__(self, name: str, kind: str, mode: str, values, times, offsets, *, frame_offsets=None,
                 feature_names: Sequence[str] | None = None, file_stats: Mapping | None = None,
                 nominal_rate: float | None = None, vocab: Sequence[str] | None = None):
        self.name = name
        self.kind = kind
        self.mode = mode
        if (kind == "image" and not isinstance(values, FrameStore)
                and (values.dim() == 3 or (values.dim() == 4 and 1 <= values.shape[-1] <= 4))):
            # frames [H, W, C] go to frame storage; other "images" (channel-first, stacks) stay values
            values = FrameStore.from_rgb(values)
        self.values = values
        self.times = times
        self.offsets = offsets
        self.frame_offsets = frame_offsets
        self.feature_names = list(feature_names) if feature_names is not None else None
        self.file_stats = dict(file_stats) if file_stats is not None else None
        self.nominal_rate = float(nominal_rate) if nominal_rate is not None else None
        self.vocab = list(vocab) if vocab is not None else None
        # host mirror of the offsets: episode slicing and metadata never read the device
        self.offsets_host = offsets.cpu().numpy()
        self.frame_offsets_host = frame_offsets.cpu().numpy() if frame_offsets is not None else None
        self._cache: dict[str, Any] = {}
        # a subset's or a copy's statistics are those of the stream it came from, computed there
        # when first asked for (a shard's construction then costs the bytes it keeps, not a pass
        # over every frame of the whole set for statistics no window may use)
        self._stats_of: Stream | None = None

    # --- shape and size ------------------------------------------------------------------

    @property
    def device(self):
        return self.values.device

    @property
    def frames(self) -> FrameStore | None:
        """Image streams: where the frames live (``frames.tier``) and how batches read them."""
        return self.values if isinstance(self.values, FrameStore) else None

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """Per-sample shape (``values.shape[1:]``): ``(D,)``, ``(H, W, C)``, ``()``; for point
        clouds the per-point shape ``(C,)`` (points per frame vary)."""
        return tuple(self.values.shape[1:])

    @property
    def num_episodes(self) -> int:
        return len(self.offsets_host) - 1

    @property
    def num_samples(self) -> int:
        """Samples (frames for point clouds) over all episodes."""
        return int(self.times.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """Samples (frames) per episode, int64 numpy ``[E]`` (host mirror of ``offsets``)."""
        return np.diff(self.offsets_host)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stream: values (an image stream's frames in their tier), times, offsets."""
        tensors = (self.times, self.offsets, self.frame_offsets)
        n = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        v = self.values
        return n + (v.nbytes if isinstance(v, FrameStore) else v.numel() * v.element_size())

    # --- time ----------------------------------------------------------------------------

    def episode_ends(self):
        """(first, last) time per episode, float64 ``[E]`` on the device, NaN when empty."""
        if "ends" not in self._cache:
            torch = _torch()
            off = self.offsets
            n = off[1:] - off[:-1]
            nan = torch.full((self.num_episodes,), math.nan, dtype=torch.float64, device=self.device)
            if self.num_samples:
                first = self.times[off[:-1].clamp(max=self.num_samples - 1)]
                last = self.times[(off[1:] - 1).clamp(min=0)]
                first, last = torch.where(n > 0, first, nan), torch.where(n > 0, last, nan)
            else:
                first, last = nan, nan.clone()
            self._cache["ends"] = (first, last)
        return self._cache["ends"]

    @property
    def durations(self):
        """Per-episode ``t_last - t_first`` in seconds, float64 tensor ``[E]`` on the device
        (0 for empty and one-sample episodes)."""
        first, last = self.episode_ends()
        return (last - first).nan_to_num(0.0)

    @property
    def duration(self) -> float:
        """Sum of the per-episode durations, seconds."""
        return float(self.durations.sum())

    @property
    def rate(self) -> float | None:
        """Measured rate in Hz: 1 / median of the positive sample intervals within episodes,
        over all episodes (computed on the device once). Falls back to ``nominal_rate`` when no
        episode has two distinct times."""
        if "rate" not in self._cache:
            torch = _torch()
            t = self.times
            rate = None
            if t.shape[0] >= 2:
                d = t[1:] - t[:-1]
                inner = torch.ones_like(d, dtype=torch.bool)
                starts = torch.from_numpy(self.offsets_host[1:-1]).to(self.device)
                starts = starts[(starts >= 1) & (starts <= d.shape[0])]
                inner[starts - 1] = False  # interval ending at an episode's first sample
                d = d[inner & (d > 0)]
                if d.numel():
                    rate = 1.0 / float(d.median())
            self._cache["rate"] = rate if rate is not None else self.nominal_rate
        return self._cache["rate"]

    # --- statistics ----------------------------------------------------------------------

    @property
    def stats(self) -> dict:
        """min, max, mean, std, q01, q99 as float64 tensors on the device.

        Reduced over samples, keeping the per-sample shape (``[D]`` for a state vector);
        images and point clouds are reduced per channel (last dim: ``[C]``). std is the
        population std (ddof=0, as numpy and LeRobot). min/max/mean/std use every row;
        q01/q99 use ``torch.quantile`` (linear interpolation, numpy's default) on all rows up
        to ``robocache.data.stats.QUANTILE_ROWS`` rows, else on that many evenly spaced rows (deterministic).
        8-bit values (uint8 images, int8, bool) use per-feature 256-bin histograms instead:
        exact over all rows, quantiles included. Text streams have no statistics (``{}``);
        empty streams give NaN.
        """
        if "stats" not in self._cache:
            own = self._dataset_stats()
            if own is not None and all(k in own for k in STATS_KEYS):
                self._cache["stats"] = own
            elif self._stats_of is not None:
                self._cache["stats"] = {k: v.to(self.device) for k, v in self._stats_of.stats.items()}
                self._stats_of = None
            else:
                self._cache["stats"] = {} if self.kind == "text" else compute_stats(self)
            if own is not None:   # the source's figures win; computed ones fill what it lacks (v2.1: quantiles)
                self._cache["stats"] = {**self._cache["stats"], **own}
        return self._cache["stats"]

    @property
    def stats_source(self) -> str:
        """Where ``stats`` come from: "dataset" (the source's dataset-level statistics: LeRobot's
        meta/stats.json, or v2.1's episodes_stats.jsonl pooled over every episode of the set; the same for
        every episode subset and rank), or "computed" (over this stream's samples, on first use: a source
        without statistics, images, point clouds)."""
        return "dataset" if self._dataset_stats() is not None else "computed"

    def _dataset_stats(self):
        """The source's statistics as float64 tensors on the device, or None (none given, an image or point
        cloud stream: LeRobot's image statistics are in [0, 1] units per channel, or a shape that is not
        this stream's per-sample shape)."""
        if not self.file_stats or self.kind in ("image", "pointcloud", "text"):
            return None
        torch = _torch()
        out = {}
        for k in STATS_KEYS:
            if k in self.file_stats:
                v = self.file_stats[k]
                v = torch.as_tensor(np.asarray(v.cpu() if isinstance(v, torch.Tensor) else v, np.float64),
                                    device=self.device)
                if tuple(v.shape) != tuple(self.shape) and not (v.numel() == 1 and not self.shape):
                    return None
                out[k] = v.reshape(self.shape)
        return out or None

    def _share_stats(self, other: "Stream") -> None:
        """``other`` (a subset or a copy of this stream) takes this stream's statistics: now when they are
        computed, else when first asked for."""
        if "stats" in self._cache:
            other._cache["stats"] = {k: v.to(other.device) for k, v in self._cache["stats"].items()}
        else:
            other._stats_of = self._stats_of if self._stats_of is not None else self

    # --- access --------------------------------------------------------------------------

    def episode(self, e: int):
        """``(values, times)`` of episode e as views of the storage (no copy). Point clouds
        give ``(PointClouds(points, offsets), times)`` with episode-local frame offsets."""
        a, b = int(self.offsets_host[e]), int(self.offsets_host[e + 1])
        if self.kind != "pointcloud":
            return self.values[a:b], self.times[a:b]
        fo, fo_host = self.frame_offsets, self.frame_offsets_host
        assert fo_host is not None  # a point-cloud stream always has them (mypy cannot know the kind)
        p0, p1 = int(fo_host[a]), int(fo_host[b])
        return PointClouds(self.values[p0:p1], fo[a:b + 1] - p0), self.times[a:b]

    def to(self, device) -> "Stream":
        """A copy of the stream on ``device`` (self when it is there already)."""
        device = resolve_device(device)
        return self if device == self.device else self._moved(device)

    def _moved(self, device) -> "Stream":
        """The stream with every tensor on ``device`` (frames already there stay: FrameStore.to)."""
        move = lambda t: None if t is None else t.to(device)
        fs = None
        if self.file_stats is not None:
            fs = {k: (v.to(device) if isinstance(v, _torch().Tensor) else v) for k, v in self.file_stats.items()}
        s = Stream(self.name, self.kind, self.mode, move(self.values), move(self.times), move(self.offsets),
                   frame_offsets=move(self.frame_offsets), feature_names=self.feature_names, file_stats=fs,
                   nominal_rate=self.nominal_rate, vocab=self.vocab)
        if "rate" in self._cache:
            s._cache["rate"] = self._cache["rate"]
        self._share_stats(s)
        return s

    def subset(self, episodes: Sequence[int] | np.ndarray, device=None) -> "Stream":
        """The stream with only ``episodes`` (in that order), copied onto ``device`` (default: this
        stream's; frames are copied once, straight there: FrameStore.subset).
        Statistics and the measured rate are the full stream's, so a shard normalizes
        exactly as the whole dataset does (the statistics computed when first asked for: the
        subset holds the full stream until then)."""
        torch = _torch()
        dest = self.device if device is None else resolve_device(device)
        eps = np.asarray(episodes, dtype=np.int64).reshape(-1)
        off = self.offsets_host
        lengths = off[eps + 1] - off[eps]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        rows = _ranges(off[eps], lengths)                            # sample (frame) indices kept
        put = lambda a: torch.from_numpy(a).to(self.device)
        times = self.times[put(rows)]
        frame_offsets, values = None, None
        if self.kind == "pointcloud":
            fo = self.frame_offsets_host
            assert fo is not None  # as in episode()
            sizes = fo[rows + 1] - fo[rows]
            frame_offsets = put(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
            values = self.values[put(_ranges(fo[rows], sizes))]
        elif isinstance(self.values, FrameStore):
            values = self.values.subset(rows, device=dest)
        else:
            values = self.values[put(rows)]
        s = Stream(self.name, self.kind, self.mode, values, times, put(offsets), frame_offsets=frame_offsets,
                   feature_names=self.feature_names, file_stats=self.file_stats,
                   nominal_rate=self.nominal_rate, vocab=self.vocab)
        self._share_stats(s)
        s._cache["rate"] = self.rate
        return s if dest == self.device else s._moved(dest)

    def frame_ids(self):
        """``arange(num_samples)`` int64 on the device (cached): resampled, it picks frames."""
        ids = self._cache.get("frame_ids")
        if ids is None:
            ids = self._cache["frame_ids"] = _torch().arange(self.num_samples, dtype=_torch().int64,
                                                             device=self.device)
        return ids

    def _shape_text(self) -> str:
        if self.kind == "pointcloud":
            return "[P," + ",".join(map(str, self.shape)) + "]"
        return "[" + ",".join(map(str, self.shape)) + "]"

    def summary(self) -> dict:
        return {"name": self.name, "kind": self.kind, "dtype": dtype_name(self.dtype), "shape": self._shape_text(),
                "mode": self.mode, "rate": fmt_rate(self.rate), "samples": self.num_samples,
                "episodes": f"{int((self.lengths > 0).sum())}/{self.num_episodes} ep",
                "duration": fmt_seconds(self.duration),
                "memory": fmt_bytes(self.nbytes), "storage": self._storage_text()}

    def _storage_text(self) -> str:
        """Where the values live: the device type, or an image stream's tier and frame format."""
        f = self.frames
        if f is None:
            return self.device.type
        tier = f"{f.tier} (pinned)" if f.kind.pinned(f) else f.tier
        return f"{tier}, {f.format}"

    def __repr__(self) -> str:
        s = self.summary()
        n = f", {self.values.shape[0]} points" if self.kind == "pointcloud" else ""
        return (f"Stream({s['name']!r}, {s['kind']} {s['dtype']} {s['shape']}, mode {s['mode']}, {s['rate']}, "
                f"{s['samples']} samples{n}, {s['episodes']}, {s['duration']}, "
                f"{s['memory']}, {s['storage'] if self.frames is not None else self.device})")


@dataclass
class Episode:
    """Metadata of one episode: ``index`` is the source's number for it (LeRobot ``episode_index``; kept
    by ``subset`` and ``from_lerobot(episodes=...)``), ``length`` counts the samples of the dataset's anchor
    stream (its first stream), ``lengths`` those of every stream."""

    index: int
    length: int
    lengths: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)


