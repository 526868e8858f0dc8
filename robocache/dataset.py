"""robocache.Dataset: episodes of named, timestamped streams held ragged on one device.

Every stream is three torch tensors on the dataset's device: ``values [N,...]`` (any dtype),
``times [N]`` float64 seconds and ``offsets [E+1]`` int64 (episode e is samples
``[offsets[e], offsets[e+1])``). That is the ragged form ``robocache.resample`` reads directly,
so a batch is one kernel launch over the whole dataset: nothing is padded or copied per episode.
Point clouds add one level: ``values [P,C]`` points, ``frame_offsets [M+1]`` over points,
``times [M]`` per frame, ``offsets [E+1]`` over frames.

Timestamps are validated once here (finite, non-decreasing per episode), which is why the
loader can call resample with ``check=False`` and never sync. torch is imported lazily:
``import robocache`` works with numpy alone. See docs/dataset.md.
"""

from __future__ import annotations

import difflib
import html
import math
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ._C import resample as _resample
from .frames.store import FrameStore
from .shard import lerobot_shard as _lerobot_shard    # (its name before it moved to shard.py)

__all__ = ["Dataset", "Episode", "FramesView", "PointClouds", "Stream"]

KINDS = ("continuous", "discrete", "image", "pointcloud", "text")
MODES = ("linear", "nearest", "previous", "next", "slerp")
DEFAULT_MODES = {"continuous": "linear", "discrete": "nearest", "image": "nearest",
                 "pointcloud": "nearest", "text": "previous"}
COPY_MODES = ("nearest", "previous", "next")

# q01/q99 come from torch.quantile, which refuses inputs above 2**24 elements; above
# QUANTILE_ROWS rows (samples, or pixels/points for per-channel stats) they are taken on an
# evenly spaced, deterministic subsample of that many rows.
QUANTILE_ROWS = 1_000_000
# mean/std/min/max are exact over all rows, accumulated in float64 chunks of this many elements
# so a uint8 video stream is never converted to float64 whole.
STATS_CHUNK = 1 << 22


def _torch():
    try:
        import torch
    except ModuleNotFoundError as e:
        raise ImportError("robocache.Dataset needs PyTorch: pip install torch") from e
    return torch


def _check_spans(video: dict, counts, ids) -> None:
    """A LeRobot v3.0 episode's span of a shared mp4 must hold one frame per parquet row: else the span and
    the rows describe different things (a wrong from/to_timestamp), and no frame could be trusted."""
    from .readers import ReaderError
    for src, n, rows, e in zip(video["sources"], counts, video["rows"], ids):
        if not src.whole and int(n) != int(rows):
            raise ReaderError(f"{src}, episode {e}: the span [from_timestamp, to_timestamp) holds {int(n)} video "
                              f"frames, the episode has {int(rows)} rows in the data files")


def _check_span_times(where: str, frame_t, parquet_t, fps: float) -> None:
    """Each frame of a v3.0 span within 1/fps of its row's timestamp (the frame LeRobot would pick)."""
    from .readers import ReaderError
    if len(frame_t) != len(parquet_t) or not len(frame_t):
        return
    d = np.abs(np.asarray(frame_t, np.float64) - np.asarray(parquet_t, np.float64))
    k = int(np.argmax(d))
    if d[k] > 1.0 / fps:
        raise ReaderError(f"{where}: frame {k} is at {frame_t[k]:.4f} s from the span's start, its row's "
                          f"timestamp is {parquet_t[k]:.4f} s ({d[k]:.4f} s apart, more than 1/fps = "
                          f"{1.0 / fps:.4f} s)")


def _default_device():
    torch = _torch()
    if torch.cuda.is_available():
        from ._C import _build_info
        if _build_info()["cuda"]:
            return torch.device("cuda")
    return torch.device("cpu")


def _device(device, arg: str = "device"):
    """``device`` as a torch.device (None: the default one; a bare "cuda": the current GPU). A GPU this
    process cannot use is a ValueError naming ``arg``, the value and why (torch's own is an AssertionError
    deep in a copy, "Torch not compiled with CUDA enabled")."""
    torch = _torch()
    if device is None:
        return _default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{arg}={device!r} is not a device ({e}); expected 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type != "cuda":
        return dev
    from ._C import _build_info
    info = _build_info()
    if not info["cuda"]:
        raise ValueError(f"{arg}={device!r}, but this robocache was built without its CUDA kernels "
                         f"(cpu_only_reason {info['cpu_only_reason']!r}: `python -m robocache info`); use "
                         f"{arg}='cpu', or reinstall with a CUDA toolkit (docs/install.md)")
    if not torch.cuda.is_available():
        why = "a CPU-only build" if torch.version.cuda is None else "no CUDA device visible"
        raise ValueError(f"{arg}={device!r}, but torch {torch.__version__} has no GPU ({why}); use {arg}='cpu'")
    if dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise ValueError(f"{arg}={device!r}, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev


class Streams(dict[str, "Stream"]):
    """``ds.streams``: stream name -> :class:`Stream`, a dict whose missing name is a KeyError that names
    the streams there are (and the closest one), not a bare ``KeyError: 'actions'``."""

    def __missing__(self, name):
        near = difflib.get_close_matches(str(name), [str(n) for n in self], n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise KeyError(f"unknown stream {name!r}; the dataset has {sorted(self)}{hint}")


def _progress(iterable, total: int, desc: str):
    """tqdm when it is installed and stderr is a terminal; the bare iterable otherwise."""
    if total < 2 or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return iterable
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]  # no stubs; optional
    except ModuleNotFoundError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])``, int64."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _fmt_seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.2f} s"


def _fmt_rate(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.1f} Hz" if r >= 1 else f"{r:.3g} Hz"


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# ----------------------------------------------------------------------------
# per-stream storage


class _FrameRows:
    """The pixels of a FrameStore as ``[frames * H * W, C]`` rows for statistics, decoded in chunks
    (never all at once: a YUV or host/disk stream may not fit the device decoded)."""

    def __init__(self, store: FrameStore):
        self.store = store
        self.dtype = store.dtype
        self.shape = (len(store) * store.height * store.width, store.channels)

    def chunks(self):
        step = max(1, STATS_CHUNK // max(1, self.store.height * self.store.width * self.store.channels))
        for a in range(0, len(self.store), step):
            yield self.store[a:a + step].reshape(-1, self.store.channels)


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
        self._offsets_host = offsets.cpu().numpy()
        self._frame_offsets_host = frame_offsets.cpu().numpy() if frame_offsets is not None else None
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
        return len(self._offsets_host) - 1

    @property
    def num_samples(self) -> int:
        """Samples (frames for point clouds) over all episodes."""
        return int(self.times.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """Samples (frames) per episode, int64 numpy ``[E]`` (host mirror of ``offsets``)."""
        return np.diff(self._offsets_host)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stream: values (an image stream's frames in their tier), times, offsets."""
        tensors = (self.times, self.offsets, self.frame_offsets)
        n = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        v = self.values
        return n + (v.nbytes if isinstance(v, FrameStore) else v.numel() * v.element_size())

    # --- time ----------------------------------------------------------------------------

    def _ends(self):
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
        first, last = self._ends()
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
                starts = torch.from_numpy(self._offsets_host[1:-1]).to(self.device)
                starts = starts[(starts >= 1) & (starts <= d.shape[0])]
                inner[starts - 1] = False  # interval ending at an episode's first sample
                d = d[inner & (d > 0)]
                if d.numel():
                    rate = 1.0 / float(d.median())
            self._cache["rate"] = rate if rate is not None else self.nominal_rate
        return self._cache["rate"]

    # --- statistics ----------------------------------------------------------------------

    def _stat_rows(self):
        """values as ``[rows, features]`` for statistics, and the shape to give the results."""
        v = self.values
        if isinstance(v, FrameStore):
            if v.format == "rgb" and v.tier in ("device", "cpu") and v.rows is None:
                v = v.data
            elif v.dtype == _torch().uint8:
                return _FrameRows(v), (v.channels,)   # decoded chunk by chunk (YUV, host, disk)
            else:
                v = v[:]
        if self.kind in ("image", "pointcloud"):
            c = v.shape[-1] if v.dim() > 1 else 1
            return v.reshape(v.numel() // max(c, 1), c), (c,)
        return v.reshape(v.shape[0], math.prod(v.shape[1:])), tuple(v.shape[1:])

    @property
    def stats(self) -> dict:
        """min, max, mean, std, q01, q99 as float64 tensors on the device.

        Reduced over samples, keeping the per-sample shape (``[D]`` for a state vector);
        images and point clouds are reduced per channel (last dim: ``[C]``). std is the
        population std (ddof=0, as numpy and LeRobot). min/max/mean/std use every row;
        q01/q99 use ``torch.quantile`` (linear interpolation, numpy's default) on all rows up
        to ``QUANTILE_ROWS`` rows, else on that many evenly spaced rows (deterministic).
        8-bit values (uint8 images, int8, bool) use per-feature 256-bin histograms instead:
        exact over all rows, quantiles included. Text streams have no statistics (``{}``);
        empty streams give NaN.
        """
        if "stats" not in self._cache:
            if self._stats_of is not None:
                self._cache["stats"] = {k: v.to(self.device) for k, v in self._stats_of.stats.items()}
                self._stats_of = None
            else:
                self._cache["stats"] = {} if self.kind == "text" else self._compute_stats()
        return self._cache["stats"]

    def _share_stats(self, other: "Stream") -> None:
        """``other`` (a subset or a copy of this stream) takes this stream's statistics: now when they are
        computed, else when first asked for."""
        if "stats" in self._cache:
            other._cache["stats"] = {k: v.to(other.device) for k, v in self._cache["stats"].items()}
        else:
            other._stats_of = self._stats_of if self._stats_of is not None else self

    def _compute_stats(self) -> dict:
        torch = _torch()
        rows, shape = self._stat_rows()
        m, c = rows.shape
        f64 = dict(dtype=torch.float64, device=self.device)
        if m == 0:
            nan = torch.full(shape, math.nan, **f64)
            return {k: nan.clone() for k in ("min", "max", "mean", "std", "q01", "q99")}
        if rows.dtype in (torch.uint8, torch.int8, torch.bool):
            out = self._histogram_stats(rows if not isinstance(rows, _FrameRows) else rows.chunks(), m, c)
            return {k: v.reshape(shape) for k, v in out.items()}
        # Chan et al. pairwise combination of (count, mean, M2) over float64 chunks
        step = max(1, STATS_CHUNK // max(c, 1))
        n_acc, mean, m2 = 0, torch.zeros(c, **f64), torch.zeros(c, **f64)
        lo = torch.full((c,), math.inf, **f64)
        hi = torch.full((c,), -math.inf, **f64)
        for a in range(0, m, step):
            x = rows[a:a + step].to(torch.float64)
            k = x.shape[0]
            cm = x.mean(0)
            cm2 = ((x - cm) ** 2).sum(0)
            delta = cm - mean
            tot = n_acc + k
            mean = mean + delta * (k / tot)
            m2 = m2 + cm2 + delta ** 2 * (n_acc * k / tot)
            n_acc = tot
            lo = torch.minimum(lo, x.amin(0))
            hi = torch.maximum(hi, x.amax(0))
        std = (m2 / n_acc).sqrt()
        if m > QUANTILE_ROWS:
            pick = torch.linspace(0, m - 1, QUANTILE_ROWS, dtype=torch.float64, device=self.device).round().long()
            sample = rows[pick]
        else:
            sample = rows
        sample = sample.to(torch.float64)
        q = torch.quantile(sample, torch.tensor([0.01, 0.99], **f64), dim=0)
        out = {"min": lo, "max": hi, "mean": mean, "std": std, "q01": q[0], "q99": q[1]}
        return {k: v.reshape(shape) for k, v in out.items()}

    def _histogram_stats(self, rows, m: int, c: int) -> dict:
        """8-bit values (images): one 256-bin histogram per feature, so every statistic,
        q01/q99 included, is exact over all rows; ~10x faster than float64 reductions.
        ``rows``: ``[m, c]``, or an iterable of ``[k, c]`` chunks (frames decoded in turn)."""
        torch = _torch()
        dev = self.device
        base = (torch.arange(c, dtype=torch.int32, device=dev) * 256)
        counts = torch.zeros(256 * c, dtype=torch.int64, device=dev)
        if isinstance(rows, torch.Tensor):
            shift = 128 if rows.dtype == torch.int8 else 0
            step = max(1, STATS_CHUNK // max(c, 1))
            flat = rows
            rows = (flat[a:a + step] for a in range(0, m, step))
        else:
            shift = 0                                  # decoded frames are uint8
        for chunk in rows:
            x = chunk.reshape(-1, c).to(torch.int32).add_(base + shift)
            counts += torch.bincount(x.reshape(-1), minlength=256 * c)
        counts = counts.reshape(c, 256)
        levels = torch.arange(256, dtype=torch.float64, device=dev) - shift
        w = counts.to(torch.float64)
        mean = (w * levels).sum(1) / m
        std = ((w * (levels - mean[:, None]) ** 2).sum(1) / m).sqrt()
        seen = counts > 0
        lo = levels[seen.to(torch.uint8).argmax(1)]
        hi = levels[255 - seen.flip(1).to(torch.uint8).argmax(1)]
        cum = counts.cumsum(1)

        def quantile(q):  # numpy's linear interpolation between the order statistics around q*(m-1)
            pos = q * (m - 1)
            k = math.floor(pos)
            ranks = torch.tensor([k, min(k + 1, m - 1)], dtype=torch.int64, device=dev).expand(c, 2).contiguous()
            v = levels[torch.searchsorted(cum, ranks, right=True)]
            return v[:, 0] + (v[:, 1] - v[:, 0]) * (pos - k)

        return {"min": lo, "max": hi, "mean": mean, "std": std, "q01": quantile(0.01), "q99": quantile(0.99)}

    # --- access --------------------------------------------------------------------------

    def episode(self, e: int):
        """``(values, times)`` of episode e as views of the storage (no copy). Point clouds
        give ``(PointClouds(points, offsets), times)`` with episode-local frame offsets."""
        a, b = int(self._offsets_host[e]), int(self._offsets_host[e + 1])
        if self.kind != "pointcloud":
            return self.values[a:b], self.times[a:b]
        fo = self.frame_offsets
        p0, p1 = int(self._frame_offsets_host[a]), int(self._frame_offsets_host[b])
        return PointClouds(self.values[p0:p1], fo[a:b + 1] - p0), self.times[a:b]

    def to(self, device) -> "Stream":
        """A copy of the stream on ``device`` (self when it is there already)."""
        device = _device(device)
        if device == self.device:
            return self
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

    def subset(self, episodes: Sequence[int]) -> "Stream":
        """The stream with only ``episodes`` (in that order), copied on the same device.
        Statistics and the measured rate are the full stream's, so a shard normalizes
        exactly as the whole dataset does (the statistics computed when first asked for: the
        subset holds the full stream until then)."""
        torch = _torch()
        eps = np.asarray(episodes, dtype=np.int64).reshape(-1)
        off = self._offsets_host
        lengths = off[eps + 1] - off[eps]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        rows = _ranges(off[eps], lengths)                            # sample (frame) indices kept
        put = lambda a: torch.from_numpy(a).to(self.device)
        times = self.times[put(rows)]
        frame_offsets, values = None, None
        if self.kind == "pointcloud":
            fo = self._frame_offsets_host
            sizes = fo[rows + 1] - fo[rows]
            frame_offsets = put(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
            values = self.values[put(_ranges(fo[rows], sizes))]
        elif isinstance(self.values, FrameStore):
            values = self.values.subset(rows)
        else:
            values = self.values[put(rows)]
        s = Stream(self.name, self.kind, self.mode, values, times, put(offsets), frame_offsets=frame_offsets,
                   feature_names=self.feature_names, file_stats=self.file_stats,
                   nominal_rate=self.nominal_rate, vocab=self.vocab)
        self._share_stats(s)
        s._cache["rate"] = self.rate
        return s

    def _frame_index(self):
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

    def _summary(self) -> dict:
        return {"name": self.name, "kind": self.kind, "dtype": _dtype_name(self.dtype), "shape": self._shape_text(),
                "mode": self.mode, "rate": _fmt_rate(self.rate), "samples": self.num_samples,
                "episodes": f"{int((self.lengths > 0).sum())}/{self.num_episodes} ep",
                "duration": _fmt_seconds(self.duration),
                "memory": _fmt_bytes(self.nbytes), "storage": self._storage_text()}

    def _storage_text(self) -> str:
        """Where the values live: the device type, or an image stream's tier and frame format."""
        f = self.frames
        if f is None:
            return self.device.type
        tier = "host (pinned)" if f.tier == "host" and f.data.is_pinned() else f.tier
        return f"{tier}, {f.format}"

    def __repr__(self) -> str:
        s = self._summary()
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


# ----------------------------------------------------------------------------
# loading: one episode's (values, times) for one stream, checked and described


@dataclass
class _Piece:
    values: Any          # torch tensor (host or device); pointcloud: points [P, C]
    times: Any           # torch tensor, float or int64
    n: int               # samples (frames)
    shape: tuple         # per-sample (per-point) shape
    dtype: Any           # torch dtype of values
    hint: str | None     # "text" (strings), "pointcloud" (ragged frames) or None
    frame_sizes: Any = None  # pointcloud: points per frame, int64 numpy [n]
    words: Any = None    # text from strings: the strings, numpy str [n]


def _as_tensor(a):
    torch = _torch()
    if isinstance(a, torch.Tensor):
        return a
    a = np.ascontiguousarray(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only arrays (memory-mapped files) are only read from
        return torch.from_numpy(a)


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside robocache, for a warning raised at load: a reader
    reaches _Loader through one to four robocache frames, and the warning belongs to the user's call."""
    import os
    pkg = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(pkg):
        frame, level = frame.f_back, level + 1
    return level


class _Loader:
    """Turns a list of episode dicts into Streams (see Dataset.from_episodes)."""

    def __init__(self, episodes, kinds, modes, rates, stats, feature_names, device, source, validate, frames=None):
        self.torch = _torch()
        self.episodes = list(episodes)
        self.frames = dict(frames or {})
        self.kinds, self.modes, self.rates = dict(kinds or {}), dict(modes or {}), dict(rates or {})
        self.stats, self.feature_names = dict(stats or {}), dict(feature_names or {})
        self.device = _device(device)
        self.source = source if source is not None else "Dataset.from_episodes"
        self.validate = validate
        self.episode_ids = None   # the source's episode numbers (from_episodes(episode_index=)), for messages
        for opt, d in (("kinds", self.kinds), ("modes", self.modes), ("rates", self.rates), ("stats", self.stats),
                       ("feature_names", self.feature_names)):
            if not isinstance(d, dict):
                raise TypeError(f"{opt} must be a dict stream name -> value, got {type(d).__name__}")

    def where(self, e, name) -> str:
        e = self.episode_ids[e] if self.episode_ids is not None else e
        return f"{self.source}: episode {e}, stream {name!r}"

    # --- parse -------------------------------------------------------------------------

    def piece(self, e, name, entry) -> _Piece:
        torch = self.torch
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
            raise TypeError(f"{self.where(e, name)}: expected a (values, times) pair, got {type(entry).__name__}")
        values, times = entry
        try:
            t = _as_tensor(times)
        except (TypeError, ValueError) as ex:
            raise TypeError(f"{self.where(e, name)}: times must be an array of numbers ({ex})") from None
        if t.dim() != 1:
            raise ValueError(f"{self.where(e, name)}: times must be 1-D, got shape {tuple(t.shape)}")
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{self.where(e, name)}: times must be float seconds or int64 nanoseconds, "
                            f"got {_dtype_name(t.dtype)}")
        if not t.is_floating_point():
            t = t.to(torch.int64)
        n = int(t.shape[0])
        kind = self.kinds.get(name)

        # point clouds: a list of [P_i, C] frames, or {"points": [P, C], "frame_offsets": [n+1]}
        if isinstance(values, Mapping) or (
                kind in (None, "pointcloud") and isinstance(values, (list, tuple)) and len(values)
                and all(isinstance(f, (np.ndarray, torch.Tensor)) and f.ndim == 2 for f in values)):
            return self.cloud_piece(e, name, values, t, n)
        if kind == "pointcloud":
            v = _as_tensor(values)
            if v.dim() != 3:
                raise ValueError(f"{self.where(e, name)}: point-cloud values must be a list of [P, C] frames, "
                                 f"{{'points', 'frame_offsets'}} or a dense [M, P, C] array; got shape "
                                 f"{tuple(v.shape)}")
            sizes = np.full(v.shape[0], v.shape[1], np.int64)
            return self.cloud_piece(e, name, {"points": v.reshape(-1, v.shape[2]),
                                              "frame_offsets": np.concatenate([[0], np.cumsum(sizes)])}, t, n)

        # text from strings
        if not isinstance(values, torch.Tensor):
            arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
            if arr.dtype.kind in "UOS" and (arr.size == 0 or isinstance(arr.reshape(-1)[0], (str, bytes))):
                if arr.ndim != 1:
                    raise ValueError(f"{self.where(e, name)}: text values must be 1-D, got shape {arr.shape}")
                if arr.shape[0] != n:
                    raise ValueError(f"{self.where(e, name)}: {arr.shape[0]} values but {n} times")
                words = np.array([w.decode() if isinstance(w, bytes) else str(w) for w in arr], dtype=object)
                return _Piece(None, t, n, (), torch.int64, "text", words=words)
            if arr.dtype.kind == "O":
                raise TypeError(f"{self.where(e, name)}: values of dtype object are neither strings nor "
                                f"point-cloud frames")
            values = arr
        v = _as_tensor(values)
        if v.dim() == 0:
            raise ValueError(f"{self.where(e, name)}: values must have a sample axis, got a scalar")
        if v.shape[0] != n:
            raise ValueError(f"{self.where(e, name)}: {v.shape[0]} values but {n} times")
        return _Piece(v, t, n, tuple(v.shape[1:]), v.dtype, None)

    def cloud_piece(self, e, name, values, t, n) -> _Piece:
        torch = self.torch
        if isinstance(values, Mapping):
            if set(values) != {"points", "frame_offsets"}:
                raise ValueError(f"{self.where(e, name)}: a point-cloud dict has keys 'points' and "
                                 f"'frame_offsets', got {sorted(values)}")
            pts = _as_tensor(values["points"])
            fo = np.asarray(_as_tensor(values["frame_offsets"]).cpu(), dtype=np.int64)
            if pts.dim() != 2:
                raise ValueError(f"{self.where(e, name)}: points must be [P, C], got shape {tuple(pts.shape)}")
            if fo.ndim != 1 or fo.shape[0] != n + 1:
                raise ValueError(f"{self.where(e, name)}: frame_offsets must be [M+1] = [{n + 1}] for {n} "
                                 f"times, got shape {fo.shape}")
            sizes = np.diff(fo)
            if fo[0] != 0 or fo[-1] != pts.shape[0] or (sizes < 0).any():
                raise ValueError(f"{self.where(e, name)}: frame_offsets must rise from 0 to {pts.shape[0]} "
                                 f"(the number of points)")
        else:
            frames = [_as_tensor(f) for f in values]
            if len(frames) != n:
                raise ValueError(f"{self.where(e, name)}: {len(frames)} point-cloud frames but {n} times")
            for m, f in enumerate(frames):
                if f.dim() != 2 or f.shape[1:] != frames[0].shape[1:] or f.dtype != frames[0].dtype:
                    raise ValueError(f"{self.where(e, name)}: frame {m} is {_dtype_name(f.dtype)} "
                                     f"{tuple(f.shape)}; frames must be [P, C] with the same C and dtype "
                                     f"(frame 0: {_dtype_name(frames[0].dtype)} {tuple(frames[0].shape)})")
            sizes = np.array([f.shape[0] for f in frames], np.int64)
            pts = torch.cat(frames) if frames else torch.zeros((0, 3), dtype=torch.float32)
        return _Piece(pts, t, n, tuple(pts.shape[1:]), pts.dtype, "pointcloud", frame_sizes=sizes)

    # --- build -------------------------------------------------------------------------

    def run(self):
        torch = self.torch
        E = len(self.episodes)
        names: list[str] = []
        for e, ep in enumerate(self.episodes):
            if not isinstance(ep, Mapping):
                raise TypeError(f"{self.source}: episode {e} must be a dict stream name -> (values, times), "
                                f"got {type(ep).__name__}")
            names += [k for k in ep if k not in names]
        stored = [k for k in self.frames if k not in names]
        for opt in (self.kinds, self.modes, self.rates, self.stats, self.feature_names):
            unknown = [k for k in opt if k not in names and k not in stored]
            if unknown:
                raise ValueError(f"{self.source}: options name streams that no episode has: {unknown}")

        pieces = {name: [None] * E for name in names}
        for e, ep in enumerate(self.episodes):
            for name in names:
                if name in ep:
                    pieces[name][e] = self.piece(e, name, ep[name])

        # one time base: float seconds as given, or int64 ns relative to the smallest timestamp
        int_t = [(e, n) for n in names for e, p in enumerate(pieces[n]) if p is not None and p.n
                 and not p.times.is_floating_point()]
        flt_t = [(e, n) for n in names for e, p in enumerate(pieces[n]) if p is not None and p.n
                 and p.times.is_floating_point()]
        if int_t and flt_t:
            (ei, ni), (ef, nf) = int_t[0], flt_t[0]
            raise ValueError(f"{self.source}: times mix int64 nanoseconds (episode {ei}, stream {ni!r}) with float "
                             f"seconds (episode {ef}, stream {nf!r}); give every stream the same time base")
        origin = min(int(pieces[n][e].times.min()) for e, n in int_t) if int_t else None

        if stored and origin is not None:
            raise ValueError(f"{self.source}: frame streams {stored} have float-second times but other streams "
                             f"int64 nanoseconds")
        streams = {}
        for name in names:
            streams[name] = self.build(name, pieces[name], origin)
        for name in stored:
            streams[name] = self.build_frames(name, *self.frames[name])
        return streams, origin

    def build_frames(self, name, store: FrameStore, times) -> Stream:
        """An image stream over frames already in their store (robocache.frames), one times array per
        episode (float seconds)."""
        torch = self.torch
        if len(times) != len(self.episodes):
            raise ValueError(f"{self.source}: stream {name!r} has times for {len(times)} episodes, not "
                             f"{len(self.episodes)}")
        lengths = np.array([len(t) for t in times], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        if int(offsets[-1]) != len(store):
            raise ValueError(f"{self.source}: stream {name!r}: {int(offsets[-1])} frame times for {len(store)} "
                             f"stored frames")
        host = np.concatenate([np.asarray(t, np.float64) for t in times]) if len(times) else np.zeros(0)
        times_t = torch.from_numpy(host).to(self.device)
        if self.validate:
            self.check_times(name, times_t, offsets)
        mode = self.modes.get(name, DEFAULT_MODES["image"])
        if mode not in COPY_MODES:
            raise ValueError(f"{self.source}: stream {name!r} (image): mode must be one of {COPY_MODES}, got {mode!r}")
        fstats = self.stats.get(name)
        if fstats is not None:
            fstats = {k: self.stat_tensor(v) for k, v in fstats.items()}
        return Stream(name, "image", mode, store.to(self.device), times_t, torch.from_numpy(offsets).to(self.device),
                      feature_names=self.feature_names.get(name), file_stats=fstats,
                      nominal_rate=self.rates.get(name))

    def describe(self, name, ps):
        """kind, mode, dtype, per-sample shape of a stream, checked across its episodes."""
        torch = self.torch
        ref = next(((e, p) for e, p in enumerate(ps) if p is not None and p.n), None)
        hint = ref[1].hint if ref is not None else None
        for e, p in enumerate(ps):
            if p is not None and p.n and p.hint != hint:
                what = lambda h: {"text": "strings", "pointcloud": "point-cloud frames"}.get(h, "arrays")
                raise ValueError(f"{self.where(e, name)}: values are {what(p.hint)} but {what(hint)} in episode "
                                 f"{ref[0]}")
        if ref is None:  # empty everywhere: shape and dtype of the first given piece
            ref = next(((e, p) for e, p in enumerate(ps) if p is not None), (0, None))
        e0, p0 = ref
        dtype = p0.dtype if p0 is not None else torch.float32
        shape = p0.shape if p0 is not None else ()
        for e, p in enumerate(ps):
            if p is None or not p.n:
                continue  # empty episodes carry no samples: their dtype/shape do not matter
            if p.shape != shape:
                what = "point shape" if hint == "pointcloud" else "sample shape"
                raise ValueError(f"{self.where(e, name)}: {what} {p.shape} differs from {shape} in episode {e0}")
            if p.dtype != dtype:
                raise ValueError(f"{self.where(e, name)}: dtype {_dtype_name(p.dtype)} differs from "
                                 f"{_dtype_name(dtype)} in episode {e0}")
        kind = self.kinds.get(name)
        if kind is not None and kind not in KINDS:
            raise ValueError(f"{self.source}: stream {name!r}: kind {kind!r} is not one of {KINDS}")
        if hint == "text" and kind not in (None, "text"):
            raise ValueError(f"{self.source}: stream {name!r} holds strings but kinds says {kind!r}")
        if hint == "pointcloud" and kind not in (None, "pointcloud"):
            raise ValueError(f"{self.source}: stream {name!r} holds point-cloud frames but kinds says {kind!r}")
        if kind is None:
            if hint:
                kind = hint
            elif dtype == torch.uint8 and len(shape) == 3:
                kind = "image"
            elif dtype.is_floating_point:
                kind = "continuous"
            else:
                kind = "discrete"
        mode = self.modes.get(name, DEFAULT_MODES[kind])
        if mode not in MODES:
            raise ValueError(f"{self.source}: stream {name!r}: mode {mode!r} is not one of {MODES}")
        if kind in ("pointcloud", "text") and mode not in COPY_MODES:
            raise ValueError(f"{self.source}: stream {name!r} ({kind}): mode must be one of {COPY_MODES}, got {mode!r}")
        if kind not in ("pointcloud", "text") and not dtype.is_floating_point and mode not in COPY_MODES:
            raise ValueError(f"{self.source}: stream {name!r} ({_dtype_name(dtype)} values): mode must be one of "
                             f"{COPY_MODES}, got {mode!r}")
        if mode == "slerp" and (not shape or shape[-1] != 4):
            raise ValueError(f"{self.source}: stream {name!r}: slerp needs quaternions (last dim 4), got sample "
                             f"shape {shape}")
        return kind, mode, dtype, shape, hint

    def build(self, name, ps, origin) -> Stream:
        torch = self.torch
        kind, mode, dtype, shape, hint = self.describe(name, ps)
        dev = self.device
        lengths = np.array([p.n if p is not None else 0 for p in ps], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        N = int(offsets[-1])

        vocab = None
        if hint == "text":
            vocab, lookup = [], {}
            for p in ps:
                if p is not None and p.n:
                    idx = np.empty(p.n, np.int64)
                    for i, w in enumerate(p.words):
                        idx[i] = lookup.setdefault(w, len(lookup))
                    p.values = torch.from_numpy(idx)
            vocab = list(lookup)

        frame_offsets = None
        if hint == "pointcloud":
            sizes = np.concatenate([p.frame_sizes if p is not None and p.n else np.zeros(0, np.int64) for p in ps])
            fo = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            frame_offsets = torch.from_numpy(fo).to(dev)
            rows = int(fo[-1])
            point_starts = fo[offsets]
        else:
            rows = N
            point_starts = offsets

        values = torch.empty((rows,) + tuple(shape), dtype=dtype, device=dev)
        times = torch.empty(N, dtype=torch.float64, device=dev)
        for e in _progress(range(len(ps)), len(ps), f"loading {name}"):
            p = ps[e]
            if p is None or not p.n:
                continue
            a, b = int(offsets[e]), int(offsets[e + 1])
            pa, pb = int(point_starts[e]), int(point_starts[e + 1])
            values[pa:pb].copy_(p.values.reshape((pb - pa,) + tuple(shape)))
            t = p.times
            if not t.is_floating_point():
                # exact in int64, then < 2**53 ns for spans under 104 days: no nanosecond is lost
                t = (t.to(dev) - origin).to(torch.float64) / 1e9
            times[a:b].copy_(t)
        offsets_t = torch.from_numpy(offsets).to(dev)
        if self.validate:
            self.check_times(name, times, offsets)
            if dtype.is_floating_point and kind not in ("image", "pointcloud") and rows:
                self.warn_nonfinite(name, values, offsets)

        fstats = self.stats.get(name)
        if fstats is not None:
            fstats = {k: self.stat_tensor(v) for k, v in fstats.items()}
        return Stream(name, kind, mode, values, times, offsets_t, frame_offsets=frame_offsets,
                      feature_names=self.feature_names.get(name), file_stats=fstats,
                      nominal_rate=self.rates.get(name), vocab=vocab)

    def stat_tensor(self, v):
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return v.to(self.device)
        try:
            a = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            return v
        return torch.from_numpy(a).to(self.device)

    def warn_nonfinite(self, name, values, offsets):
        """Warns when float values hold NaN or inf, naming the first such sample: one vectorized check and
        one sync, at load only. A warning, not an error: a source may mark missing readings so (rosbag
        joint_fill="nan", a sensor dropout), but a policy trained on them quietly diverges."""
        torch = self.torch
        bad = ~torch.isfinite(values.reshape(values.shape[0], -1)).all(dim=1)
        if not bool(bad.any()):
            return
        i = int(torch.nonzero(bad)[0, 0])
        e = int(np.searchsorted(offsets, i, side="right") - 1)
        warnings.warn(f"{self.where(e, name)}: {int(bad.sum())} of {len(bad)} samples hold NaN or inf values, the "
                      f"first at index {i - int(offsets[e])} ({values[i].flatten()[:8].tolist()}); batches that "
                      f"sample them carry them into the model (python -m robocache doctor lists them)",
                      stacklevel=_user_stacklevel())

    def check_times(self, name, times, offsets):
        """Finite and non-decreasing within every episode: vectorized on the device, one sync."""
        torch = self.torch
        N = times.shape[0]
        if N == 0:
            return
        bad = ~torch.isfinite(times)
        dec = torch.zeros(N, dtype=torch.bool, device=times.device)
        dec[1:] = times[1:] < times[:-1]
        starts = torch.from_numpy(offsets[:-1][offsets[:-1] < N]).to(times.device)
        dec[starts] = False  # a new episode may start earlier than the last one ended
        flags = torch.stack([bad.any(), dec.any()]).tolist()
        if not any(flags):
            return
        # report the earliest problem of either kind
        first = [int(torch.nonzero(x)[0, 0]) if f else N for f, x in zip(flags, (bad, dec))]
        i = min(first)
        e = int(np.searchsorted(offsets, i, side="right") - 1)
        j = i - int(offsets[e])
        if first[0] == i:
            raise ValueError(f"{self.where(e, name)}: time at index {j} is not finite ({float(times[i])})")
        raise ValueError(f"{self.where(e, name)}: times decrease at index {j} "
                         f"({float(times[i - 1]):.9g} -> {float(times[i]):.9g})")


# ----------------------------------------------------------------------------
# the dataset


class Dataset:
    """Episodes of named, timestamped streams, held ragged on one device.

    Build one with :meth:`from_episodes` (or a reader). ``len(ds)`` is the number of episodes;
    ``ds.streams[name]`` is a :class:`Stream`; ``ds.episode(e)`` returns views of one episode;
    ``ds.resample(...)`` is the loader's one call per stream and batch.

    Attributes
    ----------
    streams : dict[str, Stream]
        In the order they first appear; the first is the ``anchor``.
    episodes : list[Episode]
    tasks : list[str]
        The distinct task strings over all episodes, in first-seen order; a LeRobot dataset's are its
        task table in ``task_index`` order (``meta/tasks``), so an index into ``ds.tasks`` is LeRobot's
        ``task_index``. ``subset`` and ``to`` keep the list whole: a task's index is the same in every
        subset and shard (a sample's ``task_index`` in batches and ``ds[i]``).
    device : torch.device
    time_origin_ns : int or None
        When times were given as int64 nanoseconds, the smallest of them: stored times are
        ``(t_ns - time_origin_ns) / 1e9`` seconds. None for float-second input.
    source : str or None
    """

    def __init__(self, streams: Mapping[str, Stream], episodes: Sequence[Episode], *, device,
                 time_origin_ns: int | None = None, source: str | None = None, tasks: Sequence[str] | None = None):
        self.streams = Streams(streams)
        self.episodes = list(episodes)
        self.device = device
        self.time_origin_ns = time_origin_ns
        self.source = source
        # `tasks` given: the source's task table or a parent's list (subset, to), so a task's index stays
        # the same in every subset and shard; the episodes' own tasks follow in first-seen order
        self.tasks = list(dict.fromkeys([*(tasks or ()), *(t for ep in self.episodes for t in ep.tasks)]))
        # (rank, world_size, samples per rank) when loaded as one rank's episodes (from_lerobot's
        # shard_episodes): the DataLoader then takes it as this rank's shard as it is
        self.shard = None

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_episodes(cls, episodes: Iterable[Mapping[str, tuple]], *, kinds: Mapping[str, str] | None = None,
                      modes: Mapping[str, str] | None = None, rates: Mapping[str, float] | None = None,
                      tasks: Sequence | None = None, stats: Mapping[str, Mapping] | None = None,
                      feature_names: Mapping[str, Sequence[str]] | None = None, device=None,
                      source: str | None = None, validate: bool = True,
                      frames: Mapping[str, tuple] | None = None,
                      episode_index: Sequence[int] | None = None) -> "Dataset":
        """Build a Dataset from in-memory episodes.

        Parameters
        ----------
        episodes : list of dict
            One dict per episode, stream name -> ``(values, times)``; numpy arrays or torch
            tensors. ``times`` are float seconds (any float dtype, stored as float64) or int64
            nanoseconds (stored as float64 seconds since ``time_origin_ns``, the smallest
            timestamp of the dataset). ``values [n, ...]`` of any numeric dtype; a 1-D array or
            list of strings makes a text stream (int64 indices into ``stream.vocab``); a list of
            ``[P_i, C]`` arrays, or ``{"points": [P, C], "frame_offsets": [n+1]}``, makes a
            point-cloud stream (one time per frame). A stream missing from an episode is empty
            there.
        kinds, modes, rates, stats, feature_names : dict, optional
            Per stream: kind (else inferred: uint8 ``[H,W,C]`` image, float continuous, other
            numbers discrete), default resample mode (else by kind), nominal rate in Hz,
            statistics from the source (kept as ``stream.file_stats``), feature names.
        tasks : list, optional
            Per episode, a task string or a list of them.
        device : str or torch.device, optional
            Default ``"cuda"`` when torch sees a GPU and robocache was built with CUDA, else CPU.
        source : str, optional
            Named in error messages (a path).
        validate : bool
            Check times finite and non-decreasing per episode (default). Only skip it for data
            already validated: resample on the GPU trusts this check.
        frames : dict, optional
            Image streams whose frames are already in a :class:`robocache.frames.FrameStore` (e.g. video
            decoded by ``robocache.frames.load_videos`` into the tier a memory plan chose): stream name ->
            ``(store, [frame times per episode])``, the store's rows being every episode's frames in order.
        episode_index : list of int, optional
            The source's own number of each episode (LeRobot ``episode_index``), kept as ``Episode.index``
            and ``ds.episode_index`` and shown in repr, plots, batches and errors; default ``0 .. E-1``.
            Methods that take an episode (``ds.episode(e)``, ``resample``, ``subset``) take its position
            ``0 .. E-1``; ``ds.position(n)`` maps a source number to it.

        Raises
        ------
        ImportError without torch; TypeError/ValueError naming source, episode, stream and index.
        """
        loader = _Loader(episodes, kinds, modes, rates, stats, feature_names, device, source, validate, frames)
        if episode_index is not None:
            ids = [int(i) for i in episode_index]
            if len(ids) != len(loader.episodes) or any(i != x for i, x in zip(ids, episode_index)):
                raise ValueError(f"{loader.source}: episode_index must hold one integer per episode "
                                 f"({len(loader.episodes)}), got {list(episode_index)[:8]}")
            loader.episode_ids = ids
        streams, origin = loader.run()
        E = len(loader.episodes)
        if tasks is None:
            tasks = [[] for _ in range(E)]
        else:
            tasks = list(tasks)
            if len(tasks) != E:
                raise ValueError(f"{loader.source}: tasks has {len(tasks)} entries for {E} episodes")
            tasks = [[t] if isinstance(t, str) else list(t) for t in tasks]
        anchor = next(iter(streams), None)
        eps = []
        for e in range(E):
            lengths = {n: int(s.lengths[e]) for n, s in streams.items()}
            eps.append(Episode(index=loader.episode_ids[e] if loader.episode_ids is not None else e,
                               length=lengths[anchor] if anchor else 0, lengths=lengths, tasks=tasks[e]))
        return cls(streams, eps, device=loader.device, time_origin_ns=origin, source=source)

    @classmethod
    def _from_read(cls, eps, device, validate: bool) -> "Dataset":
        """A Dataset from a reader's ``Episodes`` (readers return plain episode data)."""
        return cls._with_task_table(cls.from_episodes(eps.episodes, device=device, validate=validate,
                                                      episode_index=eps.extra.get("episode_index"),
                                                      **eps.kwargs()), eps)

    @staticmethod
    def _with_task_table(ds: "Dataset", eps) -> "Dataset":
        """``ds.tasks`` led by the source's task table (LeRobot ``meta/tasks``: task_index -> text) in
        index order, so a task's index is the source's ``task_index`` whatever episodes were loaded."""
        table = eps.extra.get("task_table") or {}
        if table and sorted(table) == list(range(len(table))):
            ds.tasks = list(dict.fromkeys([*(table[k] for k in range(len(table))), *ds.tasks]))
        return ds

    @classmethod
    def from_lerobot(cls, path, *, load_video: bool = True, video_resize=None, video_backend: str = "auto",
                     episodes=None, device=None, modality_subkeys: bool = True, annotations: str = "text",
                     video_timestamps: str = "pts", show_progress: bool | None = None, max_workers: int | None = None,
                     validate: bool = True, frames="auto", device_memory: int | None = None,
                     host_memory: int | None = None, cache: bool = True, missing_files: str = "error",
                     jpeg_qscale: int = 2, shard_episodes=False) -> "Dataset":
        """Load a LeRobot v2.0/v2.1/v3.0 dataset folder (GR00T flavour included) as a Dataset.

        Parameters
        ----------
        path : str or PathLike
            The dataset root (holding ``meta/info.json``).
        load_video : bool
            Decode the video features once, at load, into image streams (default). False leaves
            videos out. Frames are kept as YUV 4:2:0, as the decoder hands them back (1.5 bytes per
            pixel); batches convert them to RGB on the device (docs/frames.md).
        video_resize : (height, width), optional
            Resize frames while decoding.
        video_backend : "auto", "pyav", "opencv" or "torchvision"
            "auto" takes PyAV, else OpenCV, else torchvision.io.
        episodes : list of int, optional
            Episode indices (``episode_index``) to load; default all. They stay the episodes' numbers
            (``Episode.index``, ``ds.episode_index``, repr, plots, batches' ``episode_index``): ``episodes=[1, 2]``
            gives episodes 1 and 2 at positions 0 and 1 (``ds.position(2) == 1``), as ``ds.subset([1, 2])`` does.
        device : optional
            Where the Dataset lives (default: cuda when available).
        modality_subkeys : bool
            With GR00T ``meta/modality.json``, add ``state.<part>`` / ``action.<part>`` streams: the
            ``[start, end)`` slices of their original key, copied, sharing its times.
        annotations : "text" or "index"
            GR00T ``annotation.<key>`` columns hold task indices; "text" turns them into text streams
            of the task strings (GR00T), "index" keeps the integers (LeRobot).
        video_timestamps : "pts" or "parquet"
            Frame times from the video's pts (default; what LeRobot/GR00T's decoders match the
            ``timestamp`` column against), or the parquet ``timestamp`` of the row with the same
            index (needs one frame per row).
        show_progress : bool, optional
            Progress bar for video decoding (default: when stderr is a TTY and tqdm is installed).
        frames : "auto", "device", "host", "disk", "compressed" or dict stream -> tier
            Where video frames live (robocache.frames.plan): GPU memory, pinned host memory the GPU
            reads per batch, or a memory-mapped cache file; batches are identical whatever the tier.
            "compressed" keeps each frame as a JPEG the GPU decodes per batch (lossy: ``jpeg_qscale``).
            "auto" fills the device up to its budget, then host RAM, then disk, and only then compressed
            (with a warning).
        jpeg_qscale : int
            The compressed tier's quality: FFmpeg's MJPEG ``-q:v``, 1 finest .. 31 (default 2).
        shard_episodes : bool or (rank, world_size)
            Read, decode and hold only this rank's episodes (True: the rank of torch.distributed). The
            episodes are split from the metadata before anything is read, heaviest first (rows x the
            pixels of a frame of every camera) to the rank holding the least; pass
            ``shard_episodes=True`` to the DataLoader too, which takes the dataset as this rank's shard.
            Normalization statistics come from the set's meta/stats.json or episodes_stats.jsonl (the
            whole set's); a set without them gets each rank's own.
        device_memory, host_memory : int, optional
            Budgets in bytes for the plan (defaults: 25% of the GPU's free memory, 50% of available RAM).
        missing_files : "error" or "skip"
            Episodes whose data or video files are missing (a set published in part): an error that names
            the present episodes to pass as ``episodes=``, or "skip" them with a warning.
        cache : bool
            Keep decoded frames in the cache (``ROBOCACHE_CACHE_DIR``, ``~/.cache/robocache``) and map
            them on the next load instead of decoding.

        Streams keep LeRobot's keys (``observation.state``, ``action``,
        ``observation.images.ego_view``); times are the ``timestamp`` column (seconds).
        """
        from .readers import read_lerobot
        from .video import check_resize, resolve_backend
        video_resize = check_resize(video_resize)
        if load_video:
            resolve_backend(video_backend)      # a bad name or no decoder: before anything is read
        if video_timestamps not in ("pts", "parquet"):
            raise ValueError(f"video_timestamps must be 'pts' or 'parquet', got {video_timestamps!r}")
        shard = None
        if shard_episodes:
            episodes, shard = _lerobot_shard(path, shard_episodes, episodes, video_resize)
        eps = read_lerobot(path, load_video=load_video, episodes=episodes, modality_subkeys=modality_subkeys,
                           annotations=annotations, max_workers=max_workers, missing_files=missing_files)
        videos = eps.extra.get("videos") or {}
        if not videos:
            ds = cls._from_read(eps, device, validate)
            ds.shard = shard
            return ds
        from .frames.videos import load_videos
        dev = _device(device)
        other = sum(np.asarray(v).nbytes + np.asarray(t).nbytes for ep in eps.episodes for v, t in ep.values()
                    if not isinstance(v, list))
        ids = eps.extra["episode_index"]
        loaded = load_videos({k: v["sources"] for k, v in videos.items()}, device=dev, frames=frames,
                             device_memory=device_memory, host_memory=host_memory, resize=video_resize,
                             backend=video_backend, cache=cache, workers=max_workers, show_progress=show_progress,
                             other_device_bytes=other, source=str(path), jpeg_qscale=jpeg_qscale,
                             check=lambda k, counts: _check_spans(videos[k], counts, ids))
        stored = {}
        for k, (store, times) in loaded.items():
            for i, (t, rows, src) in enumerate(zip(times, videos[k]["rows"], videos[k]["sources"])):
                where = f"{src}, episode {ids[i]}"
                parquet_t = next(iter(eps.episodes[i].values()))[1] if eps.episodes[i] else None
                if not src.whole and parquet_t is not None:
                    _check_span_times(where, t, parquet_t, videos[k]["fps"])
                if video_timestamps == "parquet":
                    if len(t) != rows:
                        raise ValueError(f"{where}: video_timestamps='parquet' needs one frame per row, the video "
                                         f"has {len(t)} frames and the parquet {rows} rows")
                    times[i] = parquet_t
                elif len(t) != rows:
                    warnings.warn(f"{where}: {len(t)} video frames for {rows} parquet rows", stacklevel=2)
            stored[k] = (store, times)
        ds = cls._with_task_table(cls.from_episodes(eps.episodes, device=dev, validate=validate, frames=stored,
                                                    episode_index=eps.extra.get("episode_index"),
                                                    **eps.kwargs()), eps)
        ds.shard = shard
        return ds

    @classmethod
    def from_robomimic(cls, path, obs_keys=None, filter_key: str | None = None, rate: float | None = None, *,
                       include_next_obs: bool = False, device=None, validate: bool = True) -> "Dataset":
        """Load a robomimic HDF5 file as a Dataset.

        Parameters
        ----------
        path : str or PathLike
        obs_keys : list of str, optional
            Keys under ``data/demo_i/obs`` (default: all of the first demo's).
        filter_key : str, optional
            A ``mask/<filter_key>`` demo list (e.g. "train", "valid", "20_percent").
        rate : float, optional
            Control rate in Hz; sample i is at ``i / rate`` seconds. Default: ``control_freq`` from
            ``data.attrs["env_args"]`` when the file has it, else 20 Hz (robosuite's default).
        include_next_obs : bool
            Also load ``next_obs/<key>`` streams.

        Streams: ``obs/<key>``, ``actions``, ``rewards``, ``dones`` (paths inside the demo group);
        demos in numeric order (demo_2 before demo_10).
        """
        from .readers import read_robomimic
        eps = read_robomimic(path, obs_keys=obs_keys, filter_key=filter_key, rate=rate,
                             include_next_obs=include_next_obs)
        return cls._from_read(eps, device, validate)

    @classmethod
    def from_zarr(cls, path, rate: float = 10.0, keys=None, *, device=None, validate: bool = True,
                  show_progress: bool | None = None) -> "Dataset":
        """Load a diffusion-policy ReplayBuffer (``data/<key>``, ``meta/episode_ends``) as a Dataset.

        Parameters
        ----------
        path : str or PathLike
            A zarr directory store (or a ``.zarr.zip``).
        rate : float
            Steps per second: step i of an episode is at ``i / rate`` seconds (PushT: 10 Hz).
        keys : list of str, optional
            Arrays under ``data/`` to load (default all). Dtypes are kept (PushT ``img`` is float32).
        """
        from .readers import read_zarr
        eps = read_zarr(path, rate=rate, keys=keys, show_progress=show_progress)
        return cls._from_read(eps, device, validate)

    @classmethod
    def from_rosbag(cls, path, *, topics: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                    fields: Mapping[str, Sequence[str]] | None = None, rename: Mapping[str, str] | None = None,
                    modes: Mapping[str, str] | None = None, clock: str | Mapping[str, str] = "header",
                    dtype="float32", joint_fill: str = "interp", point_fields=("x", "y", "z"),
                    drop_invalid_points: bool = True, load_images: bool = True, image_size=None,
                    split_gap: float | None = None, split_topic: str | None = None, typestore=None,
                    recover: bool = False, device=None, validate: bool = True,
                    show_progress: bool | None = None) -> "Dataset":
        """Load ROS 1 bags, ROS 2 bags (MCAP or SQLite3 storage) or bare ``.mcap`` files as a Dataset.

        Parameters
        ----------
        path : str, PathLike or list of them
            A ``.bag`` / ``.mcap`` / ``.db3`` file or a ROS 2 bag folder (one episode each), or a
            folder of them (searched recursively) or a list: one episode per bag.
        topics, exclude : list of str, optional
            Topics to read / leave out (names or globs, ``"/fmu/out/*"``). Default: every topic
            except logging ones (``/rosout``, ``/parameter_events``).
        fields : dict, optional
            Per topic (or glob): the parts of a known type to keep (``["position"]`` of a
            JointState) or, for other types, the fields to flatten (``["force", "q"]``).
        rename : dict, optional
            Stream or topic -> new name (``{"/imu/data": "imu"}`` gives ``imu.orientation``...).
        modes : dict, optional
            Stream -> resample mode (defaults: quaternions ``slerp``, integers ``previous``,
            the rest by kind).
        clock : "header" or "log", or dict topic -> clock
            Row times: the header stamp (sensor time; the log time for types without a header)
            or the log (receive) time. Times are int64 ns, kept exact.
        dtype : float dtype or None
            Float streams' dtype (default float32; None keeps ROS's float64).
        joint_fill : "interp", "previous" or "nan"
            JointState joints missing from some messages: from that joint's own samples
            (linear in time), held, or NaN.
        point_fields : list of str or dict topic -> list
            PointCloud2 fields per point (default x, y, z); ``drop_invalid_points`` drops points
            with a non-finite x, y or z.
        load_images : bool
            Decode Image / CompressedImage topics once, here, to ``[n, H, W, C]`` (RGB for
            colour); ``image_size=(H, W)`` resizes them.
        split_gap, split_topic : optional
            Cut each bag into episodes at log-time gaps longer than ``split_gap`` seconds, or at
            every message on ``split_topic``.
        typestore : str or rosbags Typestore, optional
            Types for bags that embed no definitions (default: the bag's ROS distro).
        recover : bool
            Read a truncated MCAP file (a recording that did not stop cleanly) up to the damage.

        Streams are named after their topic (``/md/state``), plus a part for multi-stream types
        (``/joint_states.position``, ``/imu/data.orientation``,
        ``/tf:world->base_link.translation``). See docs/rosbag.md.
        """
        from .readers import read_rosbag
        eps = read_rosbag(path, topics=topics, exclude=exclude, fields=fields, rename=rename, modes=modes,
                          clock=clock, dtype=dtype, joint_fill=joint_fill, point_fields=point_fields,
                          drop_invalid_points=drop_invalid_points, load_images=load_images, image_size=image_size,
                          split_gap=split_gap, split_topic=split_topic, typestore=typestore, recover=recover,
                          show_progress=show_progress)
        return cls._from_read(eps, device, validate)

    # --- inspection ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def anchor(self) -> str | None:
        """The first stream: ``Episode.length`` and the ``frames`` total count its samples."""
        return next(iter(self.streams), None)

    @property
    def num_frames(self) -> int:
        """Samples of the anchor stream over all episodes: what ``ds[i]`` indexes (LeRobotDataset's
        ``num_frames``, its ``len``)."""
        return self.streams[self.anchor].num_samples if self.streams else 0

    @property
    def num_episodes(self) -> int:
        """The number of episodes, ``len(ds)`` (LeRobotDataset's ``num_episodes``)."""
        return len(self.episodes)

    @property
    def episode_index(self) -> np.ndarray:
        """The source's number of each episode by position, int64 numpy ``[E]`` (``Episode.index``):
        ``from_lerobot(path, episodes=[1, 2])`` and ``ds.subset([1, 2])`` both give ``[1, 2]``. Methods
        taking an episode (``episode``, ``resample``, ``subset``, ``robocache.viz``) take positions;
        ``position(n)`` maps a source number back."""
        return np.array([ep.index for ep in self.episodes], dtype=np.int64)

    def position(self, episode_index: int) -> int:
        """The position (``0 .. len(ds)-1``) of the episode the source numbers ``episode_index``."""
        hit = np.flatnonzero(self.episode_index == int(episode_index))
        if not hit.size:
            ids = self.episode_index
            shown = ", ".join(map(str, ids[:10])) + (", ..." if ids.size > 10 else "")
            raise ValueError(f"no episode numbered {episode_index} in this dataset; its episodes are [{shown}] "
                             f"(ds.episode_index)")
        return int(hit[0])

    def _task_index(self) -> np.ndarray:
        """Per episode position, the index in ``ds.tasks`` of its first task, -1 when it has none
        (int64 numpy ``[E]``)."""
        pos = {t: k for k, t in enumerate(self.tasks)}
        return np.array([pos[ep.tasks[0]] if ep.tasks else -1 for ep in self.episodes], dtype=np.int64)

    def frame_task_index(self, episode, time) -> np.ndarray:
        """The ``task_index`` (into ``ds.tasks``) of each sample ``(episode position, time)``, int64 numpy:
        the task of the frame nearest ``time`` where the source gives a task per frame (LeRobot's
        ``task_index`` column: a task may change within an episode), else the episode's first task (-1 when
        it has none). Host work, once per loader: the loader's identity tables are built from it."""
        episode = np.asarray(episode, np.int64).reshape(-1)
        time = np.asarray(time, np.float64).reshape(-1)
        s = self.streams.get("task_index")
        if s is None or s.kind not in ("discrete", "continuous") or s.values.ndim != 1 \
                or s.values.dtype.is_floating_point:
            return self._task_index()[episode]
        off = s._offsets_host
        times, values = s.times.cpu().numpy(), s.values.cpu().numpy().astype(np.int64)
        out = self._task_index()[episode]
        for e in np.unique(episode):
            lo, hi = int(off[e]), int(off[e + 1])
            if hi == lo:
                continue
            at = np.flatnonzero(episode == e)
            t = times[lo:hi]
            k = np.clip(np.searchsorted(t, time[at]), 1, hi - lo - 1) if hi - lo > 1 else np.zeros(len(at), np.int64)
            if hi - lo > 1:
                k = k - (time[at] - t[k - 1] <= t[k] - time[at])  # the nearer row, the earlier one on a tie
            out[at] = values[lo + k]
        return np.where((out >= 0) & (out < len(self.tasks)), out, -1)

    # --- map-style access: one frame, as LeRobotDataset's ds[i] ------------------------------

    def __getitem__(self, i) -> dict:
        """Frame ``i`` of the anchor stream (``0 <= i < ds.num_frames``, LeRobot's global frame index;
        negative counts from the end) as a dict, as ``LeRobotDataset[i]``:

        - every stream's value at that frame's time (``resample`` with the stream's mode): a tensor of the
          per-sample shape on the dataset's device (images ``[H, W, C]`` as stored, uint8), the text of a
          text stream, the ``[P, C]`` points of a point-cloud stream; outside a stream's span its
          first/last value (resample's edge rule);
        - ``episode_index`` (the source's number), ``frame_index`` (within the episode), ``index``
          (``i``), ``task_index`` (into ``ds.tasks``, -1 when none) as 0-d int64 CPU tensors,
          ``timestamp`` (the frame's time, 0-d float64 on the device) and ``task`` (str, "" when none).
          A stream of the same name (LeRobot's own ``task_index`` column) takes precedence.

        For inspection and porting: one small resample launch per stream (text and point-cloud streams
        read their pick back to the host). Training batches come from ``robocache.DataLoader``.
        ``len(ds)`` stays the number of episodes; ``ds.frames_view`` has ``len == num_frames`` for code
        that needs both (``torch.utils.data.DataLoader``).
        """
        torch = _torch()
        if isinstance(i, (bool, np.bool_)) or not hasattr(i, "__index__"):
            raise TypeError(f"ds[i] takes an int frame index (0 <= i < ds.num_frames), got {type(i).__name__}; "
                            f"an episode is ds.episode(e)")
        i = int(i.__index__())
        N = self.num_frames
        if not -N <= i < N:
            raise IndexError(f"frame {i} out of range for the {N} frames of the anchor stream {self.anchor!r} "
                             f"(len(ds) = {len(self)} counts episodes; ds.num_frames counts frames)")
        i %= N
        a = self.streams[self.anchor]
        e = int(np.searchsorted(a._offsets_host, i, side="right") - 1)
        task = int(self.frame_task_index([e], [float(a.times[i])])[0])
        out = {"episode_index": torch.tensor(self.episodes[e].index),
               "frame_index": torch.tensor(i - int(a._offsets_host[e])), "timestamp": a.times[i],
               "index": torch.tensor(i), "task_index": torch.tensor(task),
               "task": self.tasks[task] if task >= 0 else ""}
        idx = torch.tensor([e], dtype=torch.int64, device=self.device)
        t = a.times[i:i + 1].reshape(1, 1)
        for name, s in self.streams.items():
            v = self.resample(name, idx, t)[0, 0]
            if s.kind == "pointcloud":
                fo = s._frame_offsets_host
                m = int(v)
                v = s.values[int(fo[m]):int(fo[m + 1])] if s.lengths[e] else s.values[:0]
            elif s.kind == "text" and s.vocab is not None:
                v = s.vocab[int(v)] if s.lengths[e] else ""
            out[name] = v
        return out

    @property
    def frames_view(self) -> "FramesView":
        """The dataset as a map-style sequence of frames: ``len(view) == ds.num_frames``, ``view[i] == ds[i]``
        (pass it where ``len`` must count frames, e.g. ``torch.utils.data.DataLoader``)."""
        return FramesView(self)

    def __iter__(self):
        # len(ds) counts episodes and ds[i] frames: iterating would be ambiguous, and slow
        raise TypeError("a robocache.Dataset is not iterable: iterate ds.episodes (metadata), "
                        "range(len(ds)) with ds.episode(e) (one episode's storage), or ds.frames_view (frames)")

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.streams.values())

    @property
    def durations(self):
        """Per-episode span over all streams (latest last time - earliest first time), float64
        ``[E]`` on the device; 0 for episodes with no samples."""
        torch = _torch()
        if not self.streams:
            return torch.zeros(len(self), dtype=torch.float64)
        firsts, lasts = zip(*(s._ends() for s in self.streams.values()))
        first = torch.stack(firsts).nan_to_num(math.inf).amin(0)
        last = torch.stack(lasts).nan_to_num(-math.inf).amax(0)
        return torch.where(last >= first, last - first, torch.zeros_like(first))

    @property
    def duration(self) -> float:
        return float(self.durations.sum())

    @property
    def stats(self) -> dict:
        """``{name: stream.stats}`` (computed on first use)."""
        return {n: s.stats for n, s in self.streams.items()}

    def episode(self, e: int) -> dict:
        """``{name: (values, times)}`` for the episode at position e, views of the storage (no copy)."""
        E = len(self)
        if not -E <= e < E:
            renumbered = "" if np.array_equal(self.episode_index, np.arange(E)) else \
                " (positions; ds.position(n) finds the source's episode n)"
            raise IndexError(f"episode {e} out of range for {E} episodes{renumbered}")
        e %= E
        return {n: s.episode(e) for n, s in self.streams.items()}

    def subset(self, episodes: Sequence[int]) -> "Dataset":
        """A Dataset of only ``episodes`` (indices into this one, in that order), copied on the
        same device: ``ds.subset(mine).to("cuda")`` puts just a rank's shard on its GPU.
        ``stats`` stay the full dataset's. ``Episode.index`` keeps the original index."""
        eps = np.asarray(list(episodes), dtype=np.int64).reshape(-1)
        E = len(self)
        if eps.size and (eps.min() < -E or eps.max() >= E):
            raise IndexError(f"episodes: index out of range for {E} episodes")
        eps %= max(E, 1)
        streams = {n: s.subset(eps) for n, s in self.streams.items()}
        return Dataset(streams, [self.episodes[e] for e in eps], device=self.device,
                       time_origin_ns=self.time_origin_ns, source=self.source, tasks=self.tasks)

    # --- the loader's call ---------------------------------------------------------------

    def resample(self, name: str, episode_index, new_times, mode: str | None = None, return_mask: bool = False, *,
                 out=None, tolerance: float = 1e-4):
        """Stream ``name`` at ``new_times [B,T]`` (float64 seconds, the dataset's time base) in
        episodes ``episode_index [B]`` (int64): one ragged ``robocache.resample`` call on the
        storage, ``[B,T,...]`` on the dataset's device (with ``is_pad [B,T]`` when
        ``return_mask``). No host sync on the GPU: the storage was validated at load.

        Point-cloud streams return the global frame index ``[B,T]`` int64 of the chosen frame
        (``mode`` nearest/previous/next); its points are
        ``values[frame_offsets[i]:frame_offsets[i+1]]``.
        """
        torch = _torch()
        s = self.streams[name]
        dev, idx, x = self.device, episode_index, new_times
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64 or idx.device != dev:
            idx = torch.as_tensor(idx, device=dev).to(torch.int64)
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float64 or x.device != dev:
            x = torch.as_tensor(x, device=dev).to(torch.float64)
        if s.kind == "image":
            ids, pad = self.frame_ids(name, idx, x, mode, tolerance=tolerance)
            frames = s.frames.gather(ids)
            if out is not None:
                out.copy_(frames)
                frames = out
            return (frames, pad) if return_mask else frames
        values = s.values
        if s.kind == "pointcloud":
            values = s._frame_index()
        return _resample(values, s.times, x, mode=mode or s.mode, offsets=s.offsets, index=idx, out=out,
                        return_mask=return_mask, tolerance=tolerance,
                        check=False if dev.type == "cuda" else None)

    def frame_ids(self, name: str, episode_index, new_times, mode: str | None = None, *, tolerance: float = 1e-4):
        """Global frame index ``[B,T]`` int64 of image or point-cloud stream ``name`` at ``new_times``
        (mode nearest/previous/next; default the stream's), and ``is_pad [B,T]``: one ragged resample of the
        frame numbers. ``stream.frames.gather(ids)`` then decodes those frames, wherever they live."""
        s = self.streams[name]
        return _resample(s._frame_index(), s.times, new_times, mode=mode or s.mode, offsets=s.offsets,
                         index=episode_index, return_mask=True, tolerance=tolerance,
                         check=False if self.device.type == "cuda" else None)

    def to(self, device) -> "Dataset":
        """A Dataset with every tensor on ``device``; self when it is there already (as
        ``torch.Tensor.to``). The original is left as it was."""
        device = _device(device)
        if all(s.device == device for s in self.streams.values()) and self.device == device:
            return self
        streams = {n: s.to(device) for n, s in self.streams.items()}
        out = Dataset(streams, self.episodes, device=device, time_origin_ns=self.time_origin_ns, source=self.source,
                      tasks=self.tasks)
        out.shard = self.shard
        return out

    def report(self, **kwargs):
        """A doctor's report of this dataset: rates, gaps, clock and value defects per stream
        (``robocache.doctor.diagnose``; ``python -m robocache doctor PATH`` for files)."""
        from .doctor import diagnose
        return diagnose(self, **kwargs)

    # --- display -------------------------------------------------------------------------

    def _header(self) -> str:
        src = f"{self.source!r}, " if self.source else ""
        ids = self.episode_index
        if ids.size and not np.array_equal(ids, np.arange(ids.size)):     # the source's numbers
            src += f"episodes [{', '.join(map(str, ids[:8]))}{', ...' if ids.size > 8 else ''}], "
        return (f"Dataset({src}{_count(len(self), 'episode')}, {_count(len(self.streams), 'stream')}, "
                f"{_count(self.num_frames, 'frame')}, {_fmt_seconds(self.duration)}, {_fmt_bytes(self.nbytes)}, "
                f"device {self.device})")

    def __repr__(self) -> str:
        rows = [s._summary() for s in self.streams.values()]
        if not rows:
            return self._header()
        cols = ("name", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                "storage")
        left = ("name", "kind", "dtype", "shape", "mode", "storage")
        heads = dict(zip(cols, _COLUMN_HEADS))
        width = {c: max(len(str(r[c])) for r in rows + [heads]) for c in cols}
        cell = lambda r, c: str(r[c]).ljust(width[c]) if c in left else str(r[c]).rjust(width[c])
        lines = ["  " + "  ".join(cell(r, c) for c in cols).rstrip() for r in [heads] + rows]
        return "\n".join([self._header()] + lines)

    def _repr_html_(self) -> str:
        esc = lambda x: html.escape(str(x))
        cols = ("name", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                "storage")
        head = "".join(f"<th>{c}</th>" for c in _COLUMN_HEADS)
        body = "".join("<tr>" + "".join(f"<td>{esc(s._summary()[c])}</td>" for c in cols) + "</tr>"
                       for s in self.streams.values())
        totals = (("episode" if len(self) == 1 else "episodes", len(self)),
                  ("frame" if self.num_frames == 1 else "frames", self.num_frames),
                  ("duration", _fmt_seconds(self.duration)), ("memory", _fmt_bytes(self.nbytes)),
                  ("device", self.device))
        tot = " &middot; ".join(f"<b>{esc(v)}</b> {k}" for k, v in totals)
        src = f"<code>{esc(self.source)}</code><br>" if self.source else ""
        tasks = f"<br>{_count(len(self.tasks), 'task')}" if self.tasks else ""
        return (f"<div class='robocache-dataset'><b>robocache.Dataset</b> {src}{tot}{tasks}"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


#: the column titles of Dataset's repr and _repr_html_, in _summary's order
_COLUMN_HEADS = ("stream", "kind", "dtype", "shape", "mode", "rate", "samples", "episodes", "duration", "memory",
                 "storage")


def _count(n: int, noun: str) -> str:
    """'1 episode', '2 episodes'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


class FramesView:
    """A Dataset as a map-style sequence of its anchor stream's frames (``ds.frames_view``):
    ``len(view) == ds.num_frames`` and ``view[i] == ds[i]``."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return self.dataset.num_frames

    def __getitem__(self, i) -> dict:
        return self.dataset[i]

    def __repr__(self) -> str:
        return f"FramesView({_count(len(self), 'frame')} of {self.dataset.anchor!r}, {_count(len(self.dataset), 'episode')})"
