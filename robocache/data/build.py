"""The episode builder: episode dicts of ``(values, times)`` checked and laid out as ragged Streams.

``Dataset.from_episodes`` and every reader's ``Dataset.from_<format>`` come through here: each episode's
pieces are parsed (arrays, strings -> text, point-cloud frames), checked across episodes (kind, mode, dtype,
per-sample shape), put on one time base (float seconds, or int64 ns relative to the smallest stamp) and
copied into one buffer per stream; times are validated once (finite, non-decreasing per episode), which is
why the loader can resample with ``check=False`` and never sync. Errors name the source, episode, stream
and index.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .._util import dtype_name, progress, resolve_device
from .._util import torch as _torch
from ..frames.store import FrameStore
from .stream import COPY_MODES, DEFAULT_MODES, KINDS, MODES, Stream
from ..user_warning import warn

__all__ = ["EpisodeBuilder"]


@dataclass
class Piece:
    """One episode's (values, times) of one stream, parsed."""

    values: Any          # torch tensor (host or device); pointcloud: points [P, C]
    times: Any           # torch tensor, float or int64
    n: int               # samples (frames)
    shape: tuple         # per-sample (per-point) shape
    dtype: Any           # torch dtype of values
    hint: str | None     # "text" (strings), "pointcloud" (ragged frames) or None
    frame_sizes: Any = None  # pointcloud: points per frame, int64 numpy [n]
    words: Any = None    # text from strings: the strings, numpy str [n]


def as_tensor(a):
    torch = _torch()
    if isinstance(a, torch.Tensor):
        return a
    a = np.ascontiguousarray(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only arrays (memory-mapped files) are only read from
        return torch.from_numpy(a)


class EpisodeBuilder:
    """Turns a list of episode dicts into Streams (see Dataset.from_episodes)."""

    def __init__(self, episodes, kinds, modes, rates, stats, feature_names, device, source, validate, frames=None):
        self.torch = _torch()
        self.episodes = list(episodes)
        self.frames = dict(frames or {})
        self.kinds, self.modes, self.rates = dict(kinds or {}), dict(modes or {}), dict(rates or {})
        self.stats, self.feature_names = dict(stats or {}), dict(feature_names or {})
        self.device = resolve_device(device)
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

    def piece(self, e, name, entry) -> Piece:
        torch = self.torch
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
            raise TypeError(f"{self.where(e, name)}: expected a (values, times) pair, got {type(entry).__name__}")
        values, times = entry
        try:
            t = as_tensor(times)
        except (TypeError, ValueError) as ex:
            raise TypeError(f"{self.where(e, name)}: times must be an array of numbers ({ex})") from None
        if t.dim() != 1:
            raise ValueError(f"{self.where(e, name)}: times must be 1-D, got shape {tuple(t.shape)}")
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{self.where(e, name)}: times must be float seconds or int64 nanoseconds, "
                            f"got {dtype_name(t.dtype)}")
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
            v = as_tensor(values)
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
                return Piece(None, t, n, (), torch.int64, "text", words=words)
            if arr.dtype.kind == "O":
                raise TypeError(f"{self.where(e, name)}: values of dtype object are neither strings nor "
                                f"point-cloud frames")
            values = arr
        v = as_tensor(values)
        if v.dim() == 0:
            raise ValueError(f"{self.where(e, name)}: values must have a sample axis, got a scalar")
        if v.shape[0] != n:
            raise ValueError(f"{self.where(e, name)}: {v.shape[0]} values but {n} times")
        return Piece(v, t, n, tuple(v.shape[1:]), v.dtype, None)

    def cloud_piece(self, e, name, values, t, n) -> Piece:
        torch = self.torch
        if isinstance(values, Mapping):
            if set(values) != {"points", "frame_offsets"}:
                raise ValueError(f"{self.where(e, name)}: a point-cloud dict has keys 'points' and "
                                 f"'frame_offsets', got {sorted(values)}")
            pts = as_tensor(values["points"])
            fo = np.asarray(as_tensor(values["frame_offsets"]).cpu(), dtype=np.int64)
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
            frames = [as_tensor(f) for f in values]
            if len(frames) != n:
                raise ValueError(f"{self.where(e, name)}: {len(frames)} point-cloud frames but {n} times")
            for m, f in enumerate(frames):
                if f.dim() != 2 or f.shape[1:] != frames[0].shape[1:] or f.dtype != frames[0].dtype:
                    raise ValueError(f"{self.where(e, name)}: frame {m} is {dtype_name(f.dtype)} "
                                     f"{tuple(f.shape)}; frames must be [P, C] with the same C and dtype "
                                     f"(frame 0: {dtype_name(frames[0].dtype)} {tuple(frames[0].shape)})")
            sizes = np.array([f.shape[0] for f in frames], np.int64)
            pts = torch.cat(frames) if frames else torch.zeros((0, 3), dtype=torch.float32)
        return Piece(pts, t, n, tuple(pts.shape[1:]), pts.dtype, "pointcloud", frame_sizes=sizes)

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
                raise ValueError(f"{self.where(e, name)}: dtype {dtype_name(p.dtype)} differs from "
                                 f"{dtype_name(dtype)} in episode {e0}")
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
            raise ValueError(f"{self.source}: stream {name!r} ({dtype_name(dtype)} values): mode must be one of "
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
            lookup: dict[str, int] = {}
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
        for e in progress(range(len(ps)), len(ps), f"loading {name}", enable=None if len(ps) > 1 else False):
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
        warn(f"{self.where(e, name)}: {int(bad.sum())} of {len(bad)} samples hold NaN or inf values, the "
                      f"first at index {i - int(offsets[e])} ({values[i].flatten()[:8].tolist()}); batches that "
                      f"sample them carry them into the model (python -m robocache doctor lists them)")

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
