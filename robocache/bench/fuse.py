"""Benchmark of robocache.fuse: several streams at their own rates onto one timeline.

    python -m robocache bench --op fuse [--quick] [--device auto|cpu|cuda] [--json PATH]
    python benchmarks/bench_fuse.py

Contenders on the same tensors, each checked against a float64 reference first:
robocache fuse (one launch), the K separate robocache.resample calls + torch.cat it
replaces ("separate"), plain PyTorch per stream (batched searchsorted + gather + lerp,
then torch.cat), robocache on the CPU; floor = fewest bytes / copy bandwidth. The
harness (timers, rotation, tables) is harness.py's; each stream's data, reference and floor are
resample.py's (fuse is K resamples onto one timeline).
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import numpy as np

from .harness import (ITEMSIZE, TOLERANCE, Case, Contender, Env, OpBench, rel_err, robocache_package,
                      rotation_sets, torch_dtype, torch_or_none)
from .resample import (ResampleConfig, ResampleData, round_to_dtype, window_targets,
                       resample_brackets, resample_min_bytes, resample_reference,
                       torch_resample_dense)


@dataclass(frozen=True)
class FuseConfig:
    B: int                                  # output rows
    T: int                                  # targets per row
    streams: tuple                          # ((rate Hz, features), ...)
    dtype: str = "float32"
    duration_s: float = 10.0                # each row (episode) lasts this long...
    window_s: float = 1.0                   # ...and the T targets cover a window this long

    @property
    def shape(self) -> str:
        rates = " + ".join(f"{r}Hz x{d}" for r, d in self.streams)
        return f"B{self.B} T{self.T} {rates}"


def fuse_configs(quick: bool) -> list[FuseConfig]:
    three = ((30, 512), (100, 64), (500, 12))   # camera features, joints, force/torque
    if quick:
        return [FuseConfig(B=16, T=50, streams=three, duration_s=4.0)]
    return [FuseConfig(B=64, T=50, streams=three),
            FuseConfig(B=64, T=50, streams=three, dtype="bfloat16")]


@dataclass
class FuseData:
    streams: list[ResampleData]             # dense, one per stream, sharing new_times
    new_times: np.ndarray                   # [B, T] float64 seconds


def make_fuse_data(cfg: FuseConfig, rng) -> FuseData:
    """Per stream: B rows of rate*duration samples (+-20% jitter) starting within 0.1 s of 0;
    targets: a window_s window at a random place inside every stream's span."""
    vdt = np.float64 if cfg.dtype == "float64" else np.float32
    streams = []
    for rate, D in cfg.streams:
        S = int(rate * cfg.duration_s)
        dt = rng.uniform(0.8, 1.2, size=(cfg.B, S)) / rate
        dt[:, 0] = 0.0
        times = rng.uniform(0.0, 0.1, size=(cfg.B, 1)) + np.cumsum(dt, axis=1)
        values = round_to_dtype(rng.standard_normal((cfg.B, S, D), dtype=vdt), cfg.dtype)
        streams.append(ResampleData(values, times, None, []))
    first = np.max([s.times[:, 0] for s in streams], axis=0)
    last = np.min([s.times[:, -1] for s in streams], axis=0)
    rcfg = ResampleConfig(B=cfg.B, T=cfg.T, D=1, dtype=cfg.dtype, S=1, window_s=cfg.window_s)
    new_times = window_targets(rng, first, last, rcfg)
    for s in streams:
        s.queries.append((None, new_times))
    return FuseData(streams, new_times)


def torch_fuse(streams, new_times):
    """Plain PyTorch: the best per-stream linear resample (resample.torch_resample_dense), then cat."""
    torch = torch_or_none()
    return torch.cat([torch_resample_dense(v, t, new_times) for v, t in streams], dim=-1)


def separate_resamples(rc, streams, new_times):
    """What fuse replaces: one robocache.resample launch per stream, then torch.cat."""
    torch = torch_or_none()
    return torch.cat([rc.resample(v, t, new_times) for v, t in streams], dim=-1)


def _tensor_sets(data: FuseData, cfg: FuseConfig, device, n: int) -> list[tuple]:
    """n ([(values, times) per stream], new_times) copies as torch tensors on `device`."""
    torch = torch_or_none()
    base = ([(torch.from_numpy(s.values).to(device).to(torch_dtype(cfg.dtype)),
              torch.from_numpy(s.times).to(device)) for s in data.streams],
            torch.from_numpy(data.new_times).to(device))
    sets = [base]
    for _ in range(n - 1):
        sets.append(([(v.clone(), t.clone()) for v, t in base[0]], base[1].clone()))
    return sets


def _contenders(data, cfg, device, nsets, verify, tol, names) -> list[Contender]:
    """robocache fuse, separate resamples, plain torch on `device` (names: column names)."""
    torch, rc = torch_or_none(), robocache_package()
    sets = _tensor_sets(data, cfg, device, nsets)
    fused = [functools.partial(rc.fuse, s, x) for s, x in sets]
    F = sum(d for _, d in cfg.streams)
    out_like = lambda: torch.full((cfg.B, cfg.T, F), float("nan"), dtype=torch_dtype(cfg.dtype), device=device)
    pick = lambda calls: (lambda i: calls[i % len(calls)]())
    res = [Contender(names["fuse"], device, pick(fused), verify, tol, nsets=len(fused),
                     poisoned=lambda: fused[0](out=out_like()), note="one launch")]
    if "separate" in names:
        sep = [functools.partial(separate_resamples, rc, s, x) for s, x in sets]
        res.append(Contender(names["separate"], device, pick(sep), verify, tol, nsets=len(sep),
                             note=f"{len(cfg.streams)} robocache.resample + torch.cat"))
    if "torch" in names:
        tc = [functools.partial(torch_fuse, s, x) for s, x in sets]
        res.append(Contender(names["torch"], device, pick(tc), verify, tol, nsets=len(tc),
                             note="searchsorted+gather+lerp per stream + cat"))
    return res


def build_fuse_case(cfg: FuseConfig, env: Env) -> Case:
    case = Case(op="fuse", config=cfg.shape + " " + cfg.dtype, shape=cfg.shape, dtype=cfg.dtype)
    if env.torch is None:
        case.skipped = "the fuse benchmark needs torch (its contenders are torch code)"
        return case
    rng = np.random.default_rng([env.seed, zlib.crc32(case.config.encode())])
    data = make_fuse_data(cfg, rng)

    # reference and floor: per stream as resample.py's, concatenated; new_times once
    refs, parts = [], {}
    for (rate, D), s in zip(cfg.streams, data.streams):
        r0, r1, w = resample_brackets(s)
        refs.append(resample_reference(s, r0, r1, w))
        rcfg = ResampleConfig(B=cfg.B, T=cfg.T, D=D, dtype=cfg.dtype, S=s.times.shape[1])
        for k, v in resample_min_bytes(rcfg, s, r0, r1, w).items():
            parts[k] = parts.get(k, 0) + v
    parts["new_times"] = data.new_times.nbytes
    parts["total"] = sum(v for k, v in parts.items() if k not in ("total",) and not k.startswith("distinct"))
    ref = np.concatenate(refs, axis=-1)
    case.min_bytes = parts["total"]
    tol = TOLERANCE[cfg.dtype]
    verify = lambda out: rel_err(out, ref)

    per_set = sum(s.values.size * ITEMSIZE[cfg.dtype] + s.times.nbytes for s in data.streams) + data.new_times.nbytes
    case.extra = {"form": "dense", "config_params": {**cfg.__dict__, "streams": [list(s) for s in cfg.streams]},
                  "samples_per_stream": [int(s.times.shape[1]) for s in data.streams],
                  "min_bytes_detail": parts}
    host_sets, dev_sets = rotation_sets(case, per_set, env)
    if env.device == "cuda":
        if env.rc_cuda:
            names = {"fuse": "robocache", "separate": "separate", "torch": "torch"}
        else:
            case.extra["robocache_cuda"] = "robocache built without CUDA"
            names = {"torch": "torch"}
        if "fuse" in names:
            case.contenders += _contenders(data, cfg, env.torch_device, dev_sets, verify, tol, names)
        else:
            tc = _tensor_sets(data, cfg, env.torch_device, dev_sets)
            case.contenders.append(Contender("torch", "cuda", lambda i: torch_fuse(*tc[i % len(tc)]),
                                             verify, tol, nsets=len(tc)))
        case.contenders += _contenders(data, cfg, "cpu", host_sets, verify, tol, {"fuse": "cpu"})
    else:
        case.extra["sets"] = {"cpu": host_sets, "touched_per_rotation_bytes": host_sets * case.min_bytes}
        case.contenders += _contenders(data, cfg, "cpu", host_sets, verify, tol,
                                       {"fuse": "robocache", "separate": "separate", "torch": "torch"})
    return case


OP = OpBench(configs=fuse_configs, build=build_fuse_case)

__all__ = ["OP", "FuseConfig", "build_fuse_case", "fuse_configs", "make_fuse_data", "torch_fuse"]
