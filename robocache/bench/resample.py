"""Benchmark of robocache.resample, run by the harness in harness.py.

    python -m robocache bench --op resample [--quick] [--device auto|cpu|cuda] [--json PATH]
    python benchmarks/bench_resample.py --quick

Configs: dense [B,S,D] batches (whole episodes, action chunks) and the loader's ragged form
(episodes concatenated, B windows per batch). Contenders on the same tensors, each checked
against a float64 reference (the numpy.interp semantics) first: robocache on CUDA, the best
plain-PyTorch version (batched searchsorted + gather + lerp), robocache on the CPU and a NumPy
np.interp loop; floor = the fewest bytes / the measured copy bandwidth. fuse.py reuses the data,
reference and floor defined here.
"""

from __future__ import annotations

import functools
import math
import time
import zlib
from dataclasses import dataclass

import numpy as np

from .harness import (ITEMSIZE, MAX_SETS, TOLERANCE, Case, Contender, Env, OpBench, clamp, rel_err,
                      robocache_package, rotation_sets, torch_dtype, torch_or_none)


@dataclass(frozen=True)
class ResampleConfig:
    B: int                      # output rows
    T: int                      # targets per row
    D: int                      # features
    dtype: str                  # values dtype
    S: int = 0                  # dense: samples per row
    episodes: int = 0           # ragged: episodes (0 = dense form)
    min_len: int = 0            # ragged: episode lengths drawn from [min_len, max_len]
    max_len: int = 0
    window: float = 1.0         # the targets cover this fraction of the episode span...
    window_s: float = math.inf  # ...but at most this many seconds (a loader's chunk)

    @property
    def ragged(self) -> bool:
        return self.episodes > 0

    @property
    def shape(self) -> str:
        if self.ragged:
            return (f"ragged E{self.episodes} x {self.min_len}-{self.max_len} "
                    f"B{self.B} T{self.T} D{self.D}")
        return f"B{self.B} S{self.S} T{self.T} D{self.D}"


def resample_configs(quick: bool) -> list[ResampleConfig]:
    if quick:   # CPU-sized: the whole quick run stays well under a minute on 2 cores
        return [
            ResampleConfig(B=8, S=1024, T=256, D=16, dtype="float32"),
            ResampleConfig(B=8, S=500, T=250, D=64, dtype="bfloat16"),
            ResampleConfig(B=64, S=1000, T=50, D=16, dtype="float32", window_s=1.0),
            ResampleConfig(B=64, T=16, D=32, dtype="float32", episodes=100,
                           min_len=50, max_len=500, window_s=0.32),
        ]
    return [
        # whole episodes resampled to a quarter of their rate
        ResampleConfig(B=16, S=4096, T=1024, D=32, dtype="float32"),
        ResampleConfig(B=32, S=500, T=250, D=256, dtype="bfloat16"),
        # action chunks: 50 targets within one second of a 1-10 s episode
        ResampleConfig(B=256, S=1000, T=50, D=64, dtype="float32", window_s=1.0),
        ResampleConfig(B=64, S=16384, T=4096, D=128, dtype="float32"),
        ResampleConfig(B=64, S=16384, T=4096, D=128, dtype="bfloat16"),
        # the loader's case: 16 targets at 50 Hz (0.32 s) in a random episode
        ResampleConfig(B=512, T=16, D=32, dtype="float32", episodes=1000,
                       min_len=50, max_len=2000, window_s=0.32),
    ]


# --- data -------------------------------------------------------------------

def _sample_times(rng, rows: int, n: int, t0: np.ndarray) -> np.ndarray:
    """[rows, n] float64 seconds: each row a sensor at 100 Hz-1 kHz with +-20% jitter."""
    rate = rng.uniform(100.0, 1000.0, size=(rows, 1))
    dt = rng.uniform(0.8, 1.2, size=(rows, n)) / rate
    dt[:, 0] = 0.0
    return t0[:, None] + np.cumsum(dt, axis=1)


def window_targets(rng, t_first, t_last, cfg: ResampleConfig) -> np.ndarray:
    """[rows, T] sorted targets inside each row's span, like a data loader's windows."""
    span = t_last - t_first
    dur = np.minimum(span * cfg.window, cfg.window_s)
    start = t_first + rng.uniform(0.0, 1.0, size=span.shape) * (span - dur)
    return start[:, None] + np.linspace(0.0, 1.0, cfg.T)[None, :] * dur[:, None]


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values made exactly representable in `dtype`, so that the float64
    reference sees exactly what the half-precision contenders see. In place."""
    if dtype == "bfloat16":   # round to nearest even on the top 16 bits
        u = x.view(np.uint32)
        u += np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
        u &= np.uint32(0xFFFF0000)
    elif dtype == "float16":
        x[...] = x.astype(np.float16)
    return x


@dataclass
class ResampleData:
    """Host arrays of one config. Dense: values [B,S,D], times [B,S]; ragged: values
    [N,D], times [N], offsets [E+1]. Queries: new_times [B,T] (+ index [B] ragged),
    one per rotation set for ragged (the dataset stays, batches change)."""
    values: np.ndarray          # float32 (float64 for float64), exact in cfg.dtype
    times: np.ndarray
    offsets: np.ndarray | None
    queries: list[tuple[np.ndarray | None, np.ndarray]]   # (index, new_times) per set


def make_resample_data(cfg: ResampleConfig, rng, nqueries: int = 1) -> ResampleData:
    vdt = np.float64 if cfg.dtype == "float64" else np.float32
    if not cfg.ragged:
        times = _sample_times(rng, cfg.B, cfg.S, rng.uniform(0.0, 10.0, size=cfg.B))
        values = rng.standard_normal((cfg.B, cfg.S, cfg.D), dtype=vdt)
        new_times = window_targets(rng, times[:, 0], times[:, -1], cfg)
        return ResampleData(round_to_dtype(values, cfg.dtype), times, None, [(None, new_times)])
    # Ragged: times restart at every episode (each starts within 0.1 s of zero).
    lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=cfg.episodes)
    offsets = np.zeros(cfg.episodes + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    times = np.concatenate([_sample_times(rng, 1, n, rng.uniform(0.0, 0.1, size=1))[0]
                            for n in lengths])
    values = rng.standard_normal((int(offsets[-1]), cfg.D), dtype=vdt)
    queries = []
    for _ in range(nqueries):
        index = rng.integers(0, cfg.episodes, size=cfg.B).astype(np.int64)
        new_times = window_targets(rng, times[offsets[index]], times[offsets[index + 1] - 1], cfg)
        queries.append((index, new_times))
    return ResampleData(round_to_dtype(values, cfg.dtype), times, offsets, queries)


# --- reference and floor ----------------------------------------------------

def resample_brackets(data: ResampleData, q: int = 0):
    """For every target of query set q: global sample rows (r0, r1) and weight w, with
    out = v[r0] + w * (v[r1] - v[r0]) (docs/resample.md: r0 = the last sample at or
    before x, clamped to the row; w = 0 at the edges)."""
    index, new_times = data.queries[q]
    B, T = new_times.shape
    r0 = np.empty((B, T), dtype=np.int64)
    r1 = np.empty((B, T), dtype=np.int64)
    for b in range(B):
        if data.offsets is None:
            lo, n = b * data.times.shape[1], data.times.shape[1]
            t = data.times[b]
        else:
            lo = int(data.offsets[index[b]])
            n = int(data.offsets[index[b] + 1]) - lo
            t = data.times[lo:lo + n]
        j = np.searchsorted(t, new_times[b], side="right") - 1
        r0[b] = lo + np.maximum(j, 0)
        r1[b] = lo + np.minimum(j + 1, n - 1)
    flat_t = data.times.reshape(-1)
    t0, t1 = flat_t[r0], flat_t[r1]
    span = t1 - t0
    w = np.where(span > 0, (new_times - t0) / np.where(span > 0, span, 1.0), 0.0)
    return r0, r1, w


def resample_reference(data: ResampleData, r0, r1, w) -> np.ndarray:
    """float64 [B,T,D] linear resample: the numpy.interp semantics, vectorized."""
    flat_v = data.values.reshape(-1, data.values.shape[-1])
    ref = flat_v[r0].astype(np.float64)
    d = flat_v[r1].astype(np.float64)
    d -= ref
    d *= w[..., None]
    ref += d
    return ref


def resample_min_bytes(cfg: ResampleConfig, data: ResampleData, r0, r1, w) -> dict:
    """Fewest bytes any implementation must move for query set 0:
    output + new_times + each DISTINCT value row that carries weight (r0 always, r1
    where w > 0) + the distinct time samples bracketing the targets (r0 and r1)
    (+ index and the offsets it points at, ragged). Rows shared by several targets
    or batch rows count once; the rest of the times (the search) is not counted,
    so the floor is a true lower bound. Returns the parts in bytes (and row counts)."""
    index, new_times = data.queries[0]
    vrows = np.unique(np.concatenate([r0.ravel(), r1[w > 0]]))
    trows = np.unique(np.concatenate([r0.ravel(), r1.ravel()]))
    isz, tsz = ITEMSIZE[cfg.dtype], data.times.itemsize
    parts = {"output": cfg.B * cfg.T * cfg.D * isz, "new_times": new_times.size * tsz,
             "value_rows": vrows.size * cfg.D * isz, "time_samples": trows.size * tsz,
             "distinct_value_rows": vrows.size, "distinct_time_samples": trows.size}
    if index is not None:
        parts["index_offsets"] = (index.size + np.unique(np.concatenate([index, index + 1])).size) * 8
    parts["total"] = sum(v for k, v in parts.items() if not k.startswith("distinct"))
    return {k: int(v) for k, v in parts.items()}


# --- contenders: plain PyTorch -----------------------------------------------

def _lerp_rows(v0, v1, w):
    """v0 + w * (v1 - v0) over the feature dim, in float32 for half types (as robocache)."""
    torch = torch_or_none()
    if v0.dtype in (torch.float16, torch.bfloat16):
        return torch.lerp(v0.float(), v1.float(), w.float().unsqueeze(-1)).to(v0.dtype)
    return torch.lerp(v0, v1, w.to(v0.dtype).unsqueeze(-1))


def torch_resample_dense(values, times, new_times):
    """Linear resample of a padded batch, as a skilled PyTorch user writes it: one
    batched searchsorted, clamp, gather of the two neighbour rows, one lerp.
    values [B,S,D], times [B,S], new_times [B,T] -> [B,T,D]."""
    torch = torch_or_none()
    S = times.shape[1]
    j = torch.searchsorted(times, new_times, right=True)   # first sample after x
    j0 = (j - 1).clamp_(min=0)        # last sample at or before x; 0 before the start
    j1 = j.clamp_(max=S - 1)          # the one after; S-1 past the end (then j0 == j1)
    t0, t1 = times.gather(1, j0), times.gather(1, j1)
    span = t1 - t0
    w = torch.where(span > 0, (new_times - t0) / span, 0.0)   # weight in the times' precision
    D = values.shape[-1]
    v0 = values.gather(1, j0.unsqueeze(-1).expand(-1, -1, D))
    v1 = values.gather(1, j1.unsqueeze(-1).expand(-1, -1, D))
    return _lerp_rows(v0, v1, w)


def torch_ragged_search_key(times, offsets):
    """Per-dataset precomputation for `torch_resample_ragged` (a loader does this once
    at load, so it is not timed). Times restart at every episode, so one searchsorted
    over the concatenated times is wrong; B separate searches are a Python loop; padding
    to [E, max_len] costs a [B, max_len] gather of times per batch. Instead build a key
    that is sorted across episodes: key = episode * shift + (t - t_first[episode]) with
    shift > the longest span. Relative times keep float64 precision (no epoch seconds
    added to a large shift). Returns (key [N], t_first [E], shift)."""
    torch = torch_or_none()
    E = offsets.numel() - 1
    lengths = offsets[1:] - offsets[:-1]
    episode = torch.repeat_interleave(torch.arange(E, device=times.device), lengths)
    first = offsets[:-1].clamp(max=times.numel() - 1)
    last = (offsets[1:] - 1).clamp(min=0)
    t_first = times[first]
    shift = 2.0 * float((times[last] - t_first).max()) + 1.0
    key = (times - t_first[episode]) + episode.to(times.dtype) * shift
    return key, t_first, shift


def torch_resample_ragged(values, times, offsets, key, t_first, shift, index, new_times):
    """Ragged linear resample in plain PyTorch: one searchsorted over all N samples
    through the precomputed key, clamp into the episode, two row gathers, one lerp.
    values [N,D], times [N], offsets [E+1], index [B], new_times [B,T] -> [B,T,D]."""
    torch = torch_or_none()
    lo = offsets[index].unsqueeze(1)                     # first sample of each row's episode
    hi = offsets[index + 1].unsqueeze(1) - 1             # its last sample
    q = (new_times - t_first[index].unsqueeze(1)) + (index.to(times.dtype) * shift).unsqueeze(1)
    j = torch.searchsorted(key, q, right=True)           # first sample after x, globally
    j0 = torch.clamp(j - 1, lo, hi)                      # last at or before x, inside the episode
    j1 = torch.clamp(j, lo, hi)
    t0, t1 = times[j0], times[j1]
    span = t1 - t0
    w = torch.where(span > 0, (new_times - t0) / span, 0.0)
    B, T = new_times.shape
    v0 = values.index_select(0, j0.reshape(-1)).view(B, T, -1)
    v1 = values.index_select(0, j1.reshape(-1)).view(B, T, -1)
    return _lerp_rows(v0, v1, w)


# --- contenders: NumPy loop --------------------------------------------------

def numpy_interp_loop(data: ResampleData, rows: int, out_dtype) -> np.ndarray:
    """What a NumPy user writes: np.interp per output row and feature. First `rows` rows."""
    index, new_times = data.queries[0]
    D = data.values.shape[-1]
    out = np.empty((rows, new_times.shape[1], D), dtype=out_dtype)
    for b in range(rows):
        if data.offsets is None:
            t, v = data.times[b], data.values[b]
        else:
            lo, hi = data.offsets[index[b]], data.offsets[index[b] + 1]
            t, v = data.times[lo:hi], data.values[lo:hi]
        vt = np.ascontiguousarray(v.T)      # one contiguous series per feature
        for d in range(D):
            out[b, :, d] = np.interp(new_times[b], t, vt[d])
    return out


# --- building the case -------------------------------------------------------

def _rc_partial(rc, values, times, new_times, offsets=None, index=None):
    kw = {} if offsets is None else {"offsets": offsets, "index": index}
    return functools.partial(rc.resample, values, times, new_times, **kw)


def _dense_tensor_sets(data: ResampleData, cfg, device, n: int) -> list[tuple]:
    """n (values, times, new_times) copies as torch tensors on `device`."""
    torch = torch_or_none()
    v = torch.from_numpy(data.values).to(device).to(torch_dtype(cfg.dtype))
    t = torch.from_numpy(data.times).to(device)
    nt = torch.from_numpy(data.queries[0][1]).to(device)
    return [(v, t, nt)] + [(v.clone(), t.clone(), nt.clone()) for _ in range(n - 1)]


def _ragged_tensor_sets(data: ResampleData, cfg, device) -> tuple[tuple, list[tuple]]:
    """((values, times, offsets), [(index, new_times) per query set]) on `device`."""
    torch = torch_or_none()
    base = (torch.from_numpy(data.values).to(device).to(torch_dtype(cfg.dtype)),
            torch.from_numpy(data.times).to(device), torch.from_numpy(data.offsets).to(device))
    queries = [(torch.from_numpy(i).to(device), torch.from_numpy(nt).to(device))
               for i, nt in data.queries]
    return base, queries


def _robocache_contender(name, calls, verify, tol, device, out_like) -> Contender:
    """robocache.resample on prebuilt argument sets (`calls`: partials, one per set);
    the check also runs with out= pre-filled with NaN so that unwritten elements show."""
    return Contender(name=name, device=device, call=lambda i: calls[i % len(calls)](),
                     verify=verify, tol=tol, nsets=len(calls),
                     poisoned=lambda: calls[0](out=out_like()))


def _torch_sets(data, cfg, device, nsets):
    """Partials of the plain-PyTorch version and robocache on the same tensors."""
    torch = torch_or_none()
    rc = robocache_package()
    torch_calls, rc_calls = [], []
    if not cfg.ragged:
        for v, t, nt in _dense_tensor_sets(data, cfg, device, nsets):
            torch_calls.append(functools.partial(torch_resample_dense, v, t, nt))
            rc_calls.append(_rc_partial(rc, v, t, nt))
    else:
        (v, t, off), queries = _ragged_tensor_sets(data, cfg, device)
        key, t_first, shift = torch_ragged_search_key(t, off)
        for idx, nt in queries[:nsets]:
            torch_calls.append(functools.partial(torch_resample_ragged, v, t, off, key,
                                                 t_first, shift, idx, nt))
            rc_calls.append(_rc_partial(rc, v, t, nt, off, idx))
    out_shape = (cfg.B, cfg.T, cfg.D)
    out_like = lambda: torch.full(out_shape, float("nan"), dtype=torch_dtype(cfg.dtype),
                                  device=device)
    return torch_calls, rc_calls, out_like


def _numpy_sets(data, cfg, nsets):
    """robocache CPU on NumPy arrays (used when torch is absent; no bfloat16 in NumPy)."""
    rc = robocache_package()
    dt = {"float32": np.float32, "float64": np.float64, "float16": np.float16}[cfg.dtype]
    values = data.values.astype(dt, copy=False)
    if not cfg.ragged:
        base = [(values, data.times, data.queries[0][1])]
        base += [(values.copy(), data.times.copy(), data.queries[0][1].copy())
                 for _ in range(nsets - 1)]
        calls = [_rc_partial(rc, v, t, nt) for v, t, nt in base]
    else:
        calls = [_rc_partial(rc, values, data.times, nt, data.offsets, idx)
                 for idx, nt in data.queries[:nsets]]
    out_like = lambda: np.full((cfg.B, cfg.T, cfg.D), np.nan, dtype=dt)
    return calls, out_like


def _numpy_loop_contender(data, cfg, ref, tol, budget_s) -> Contender:
    """np.interp loop, on as many rows as fit the budget; times scaled to all B rows."""
    t = time.perf_counter()
    numpy_interp_loop(data, 1, np.float32)
    per_row = time.perf_counter() - t
    rows = clamp(budget_s / 3 / max(per_row, 1e-9), 1, cfg.B)
    out_dtype = np.float64 if cfg.dtype == "float64" else np.float32
    note = "" if rows == cfg.B else f"{rows}/{cfg.B} rows timed, scaled"
    if cfg.dtype in ("bfloat16", "float16"):
        note = ", ".join(x for x in (note, f"float32 arrays (exact {cfg.dtype} values)") if x)
    return Contender(name="numpy", device="cpu",
                     call=lambda i: numpy_interp_loop(data, rows, out_dtype),
                     verify=lambda out: rel_err(out, ref[:rows]), tol=max(tol, 1e-5),
                     scale=cfg.B / rows, note=note)


def build_resample_case(cfg: ResampleConfig, env: Env) -> Case:
    torch = env.torch
    case = Case(op="resample", config=cfg.shape + " " + cfg.dtype, shape=cfg.shape, dtype=cfg.dtype)
    if cfg.dtype == "bfloat16" and torch is None:
        case.skipped = "bfloat16 needs torch (NumPy has no bfloat16)"
        return case
    rng = np.random.default_rng([env.seed, zlib.crc32(case.config.encode())])

    # Ragged: the dataset stays resident and each rotation set is a new batch of
    # queries (index, new_times), as in a loader. Dense: copies of the whole batch.
    data = make_resample_data(cfg, rng, nqueries=MAX_SETS if cfg.ragged else 1)
    r0, r1, w = resample_brackets(data)
    ref = resample_reference(data, r0, r1, w)
    min_bytes = resample_min_bytes(cfg, data, r0, r1, w)
    case.min_bytes = min_bytes["total"]
    tol = TOLERANCE[cfg.dtype]
    verify = lambda out: rel_err(out, ref)

    per_set = (data.values.size * ITEMSIZE[cfg.dtype] + data.times.nbytes
               + data.queries[0][1].nbytes) if not cfg.ragged else data.queries[0][1].nbytes * 2
    case.extra = {"form": "ragged" if cfg.ragged else "dense", "config_params": cfg.__dict__.copy(),
                  "min_bytes_detail": min_bytes}
    if cfg.ragged:
        case.extra["samples_N"] = int(data.offsets[-1])

    host_sets, dev_sets = rotation_sets(case, per_set, env)
    if env.device == "cuda":
        torch_calls, rc_calls, out_like = _torch_sets(data, cfg, env.torch_device, dev_sets)
        if env.rc_cuda:
            case.contenders.append(_robocache_contender("robocache", rc_calls, verify, tol,
                                                        "cuda", out_like))
        else:
            case.extra["robocache_cuda"] = "robocache built without CUDA"
        case.contenders.append(Contender("torch", "cuda", lambda i: torch_calls[i % len(torch_calls)](),
                                         verify, tol, nsets=len(torch_calls)))
        cpu_name = "cpu"
    else:
        case.extra["sets"] = {"cpu": host_sets,
                              "touched_per_rotation_bytes": host_sets * case.min_bytes}
        cpu_name = "robocache"

    # robocache on the CPU (torch CPU tensors when torch is there, else NumPy arrays)
    if torch is not None:
        cpu_torch_calls, cpu_rc_calls, cpu_out_like = _torch_sets(data, cfg, "cpu", host_sets)
    else:
        cpu_torch_calls = None
        cpu_rc_calls, cpu_out_like = _numpy_sets(data, cfg, host_sets)
    case.contenders.append(_robocache_contender(cpu_name, cpu_rc_calls, verify, tol, "cpu",
                                                cpu_out_like))
    if env.device == "cpu":
        if cpu_torch_calls is not None:
            case.contenders.append(Contender("torch", "cpu",
                                             lambda i: cpu_torch_calls[i % len(cpu_torch_calls)](),
                                             verify, tol, nsets=len(cpu_torch_calls)))
        else:
            case.extra["torch"] = "torch not installed"
    case.contenders.append(_numpy_loop_contender(data, cfg, ref, tol, env.budget_s))
    return case


OP = OpBench(configs=resample_configs, build=build_resample_case)
