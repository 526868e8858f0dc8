"""Benchmarks of robocache ops: every contender is checked, then timed.

    python -m robocache bench [--op resample] [--quick] [--device auto|cpu|cuda] [--json PATH]
    python benchmarks/bench_resample.py --quick

For each config an op builds a `Case`: input sets, a float64 reference, the
contenders (robocache CUDA, the best plain-PyTorch version, robocache CPU, a NumPy
loop) and the fewest bytes the op must move. The harness then, per contender:

1. checks the output against the float64 reference (relative error norm; an output
   pre-filled with NaN is checked too where the contender takes `out=`) and reports
   FAIL instead of a time when it is wrong;
2. times it. GPU: CUDA events, median of 50-200 single calls, and of 100-call batches
   for small configs, with the GPU kept busy by `torch.cuda._sleep` before the first
   event so the host's launch cost is not on the device timeline; host time per call
   is measured separately, also with the GPU busy so launches only queue. CPU:
   `time.perf_counter`, median.

The floor is the fewest bytes / the copy bandwidth measured in the same run (a large
device-to-device copy, counting bytes read plus written). Input sets are rotated so
that the bytes touched over one rotation exceed the L2 (host: last-level) cache:
otherwise repeated calls read a warm cache and look faster than a training step sees.

New ops register in `OPS` (see `OpBench`); `main` runs them all by default.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import platform
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# ----------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------

DEFAULT_L2_BYTES = 60 * 2**20   # when the device does not report its L2 size
DEFAULT_LLC_BYTES = 32 * 2**20  # when the host does not report its last-level cache
ROTATE_CACHE_MULTIPLE = 3       # bytes touched per rotation >= 3x the cache
MAX_SETS = 64
DEVICE_COPY_CAP = 8 * 2**30     # at most this many bytes of rotated copies on the GPU...
DEVICE_COPY_FRACTION = 0.3      # ...and at most this fraction of its memory
HOST_COPY_CAP = 2 * 2**30

SMALL_CONFIG_US = 1000.0        # below this a 100-call loop is timed too
BATCH_CALLS = 100
HOST_CALLS = 20                 # calls per host-timing round (fewer if the launch queue fills)

# Relative error norm ||out - ref|| / ||ref|| allowed per value dtype. Linear resampling
# is one lerp per element: float32 lands near 1e-7, half types near their rounding.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3, "bfloat16": 1e-2}
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


# ----------------------------------------------------------------------------
# Optional imports: torch is optional for robocache, so also for the benchmark
# ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _torch():
    """The torch module, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _robocache():
    import robocache  # the package this module lives in; imported late so `import robocache.bench` stays cheap
    return robocache


def _torch_dtype(name: str):
    return getattr(_torch(), name)


# ----------------------------------------------------------------------------
# Statistics and formatting
# ----------------------------------------------------------------------------

def _stats(samples_us: list[float]) -> dict:
    a = np.asarray(samples_us, dtype=np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
            "p90": float(np.percentile(a, 90)), "min": float(a.min()), "n": int(a.size)}


def _fmt_us(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if v < 10:
        return f"{v:.2f}"
    if v < 100:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _clamp(x: float, lo: int, hi: int) -> int:
    return int(max(lo, min(hi, x)))


# ----------------------------------------------------------------------------
# Environment: device, versions, caches, copy bandwidth
# ----------------------------------------------------------------------------

@dataclass
class Env:
    device: str                     # "cuda" or "cpu": where the main contenders run
    quick: bool
    seed: int
    torch: Any                      # the torch module or None
    info: dict = field(default_factory=dict)   # printed in the header and written to JSON
    cache_bytes: int = DEFAULT_LLC_BYTES       # cache that rotation must defeat (L2 on GPU)
    host_cache_bytes: int = DEFAULT_LLC_BYTES
    copy_bw: float = float("nan")   # bytes/s, read + write, on `device`
    rc_cuda: bool = False           # robocache was built with CUDA
    timer: "CudaTimer | None" = None

    @property
    def torch_device(self):
        return self.torch.device("cuda", self.torch.cuda.current_device())

    @property
    def budget_s(self) -> float:
        """Seconds of timing per contender on the host."""
        return 0.25 if self.quick else 1.0


def _host_cache_bytes() -> int:
    try:
        n = os.sysconf("SC_LEVEL3_CACHE_SIZE")
        if n and n > 0:
            return int(n)
    except (ValueError, OSError, AttributeError):
        pass
    return DEFAULT_LLC_BYTES


def measure_copy_bandwidth_cuda(torch, nbytes: int) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()  # not zeros
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    samples = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        samples.append(s.elapsed_time(e) * 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (np.median(samples) * 1e-6)


def measure_copy_bandwidth_host(nbytes: int) -> float:
    """Host memory copy bandwidth in bytes/s (read + write). torch's copy_ is
    multi-threaded like robocache's CPU kernels; NumPy's is single-threaded."""
    torch = _torch()
    n = nbytes // 8
    if torch is not None:
        src = torch.arange(n, dtype=torch.float64)
        dst = torch.empty_like(src)
        copy = functools.partial(dst.copy_, src)
    else:
        src = np.arange(n, dtype=np.float64)
        dst = np.empty_like(src)
        copy = functools.partial(np.copyto, dst, src)
    copy()
    samples = []
    for _ in range(7):
        t = time.perf_counter()
        copy()
        samples.append(time.perf_counter() - t)
    return 2 * n * 8 / float(np.median(samples))


def detect_env(device: str, quick: bool, seed: int) -> Env:
    """Pick the device and measure what the timings are compared against.
    Raises RuntimeError with a user-facing message when `device` cannot be used."""
    torch = _torch()
    rc = _robocache()
    build = rc.build_info() if hasattr(rc, "build_info") else {}
    has_gpu = torch is not None and torch.cuda.is_available()
    if device == "auto":
        device = "cuda" if has_gpu else "cpu"
    if device == "cuda" and torch is None:
        raise RuntimeError("--device cuda needs PyTorch with CUDA: pip install torch")
    if device == "cuda" and not has_gpu:
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False (no GPU or CPU-only torch)")

    env = Env(device=device, quick=quick, seed=seed, torch=torch)
    env.rc_cuda = bool(build.get("cuda", False))
    env.host_cache_bytes = _host_cache_bytes()
    info = env.info
    info["python"] = platform.python_version()
    info["numpy"] = np.__version__
    info["torch"] = torch.__version__ if torch is not None else None
    info["torch_cuda"] = getattr(torch.version, "cuda", None) if torch is not None else None
    info["robocache"] = build.get("version", getattr(rc, "__version__", "?"))
    info["robocache_cuda"] = env.rc_cuda
    info["robocache_archs"] = build.get("archs")
    info["cpu_cores"] = os.cpu_count()
    if hasattr(rc, "get_num_threads"):
        info["robocache_threads"] = rc.get_num_threads()
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()

    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.cache_bytes = int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)
        info["gpu"] = props.name
        info["gpu_sm"] = f"sm_{props.major}{props.minor}"
        info["gpu_sms"] = props.multi_processor_count
        info["gpu_memory_bytes"] = props.total_memory
        info["l2_bytes"] = env.cache_bytes
        nbytes = min(2**30, props.total_memory // 16)
        env.copy_bw = measure_copy_bandwidth_cuda(torch, nbytes)
        info["copy_bandwidth"] = {"bytes_per_s": env.copy_bw, "copy_bytes": nbytes,
                                  "what": "device-to-device copy_, read + write"}
        env.timer = CudaTimer(torch)
        info["sleep_cycles_per_us"] = env.timer.cycles_per_us
    else:
        env.cache_bytes = env.host_cache_bytes
        info["gpu"] = None
        nbytes = (64 if quick else 256) * 2**20
        env.copy_bw = measure_copy_bandwidth_host(nbytes)
        info["copy_bandwidth"] = {"bytes_per_s": env.copy_bw, "copy_bytes": nbytes,
                                  "what": "host memory copy, read + write"}
    info["cache_bytes"] = env.cache_bytes
    return env


# ----------------------------------------------------------------------------
# Timers
# ----------------------------------------------------------------------------

def time_host(call: Callable[[int], Any], nsets: int, budget_s: float,
              min_reps: int = 5, max_reps: int = 50) -> dict:
    """perf_counter per call, median of as many calls as fit the budget."""
    t = time.perf_counter()
    call(0)                                  # warm-up, and the estimate for the rep count
    first = time.perf_counter() - t
    reps = _clamp(budget_s / max(first, 1e-9), min_reps, max_reps)
    samples = []
    for i in range(reps):
        t = time.perf_counter()
        call(i % nsets)
        samples.append((time.perf_counter() - t) * 1e6)
    return _stats(samples)


class CudaTimer:
    """CUDA-event timing, with the GPU kept busy where the host must not show.

    For device time and host time a `torch.cuda._sleep` is enqueued first, long enough
    to cover the host's enqueue time, so every measured launch is already queued when
    the GPU reaches it: event pairs then see device time only, and the host clock sees
    launch cost only (launches queue instead of waiting for the GPU). A guard event
    recorded after the sleep tells afterwards whether the sleep ended before the host
    was done; the round is then redone with a longer sleep and fewer calls (too many
    launches fill the driver's launch queue, and the host then waits for the sleep).
    """

    def __init__(self, torch):
        self.torch = torch
        self.cycles_per_us = self._calibrate()

    def _calibrate(self) -> float:
        torch = self.torch
        rates = []
        for cycles in (1_000_000, 4_000_000, 4_000_000, 4_000_000):   # the first warms up
            s, e = self._event(), self._event()
            s.record()
            torch.cuda._sleep(cycles)
            e.record()
            e.synchronize()
            rates.append(cycles / (s.elapsed_time(e) * 1e3))
        return float(np.median(rates[1:]))

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def _behind_sleep(self, enqueue: Callable[[], Any], sleep_us: float,
                      tries: int = 2) -> tuple[Any, bool]:
        """Run `enqueue` (host work that launches GPU work) behind a GPU sleep of about
        `sleep_us`. Returns (enqueue's result, whether the sleep outlasted the enqueue)."""
        torch = self.torch
        for _ in range(tries):
            torch.cuda._sleep(int(max(sleep_us, 50.0) * self.cycles_per_us))
            guard = torch.cuda.Event()
            guard.record()
            result = enqueue()
            busy = not guard.query()
            torch.cuda.synchronize()
            if busy:
                return result, True
            sleep_us *= 4
        return result, False

    def estimate(self, call: Callable[[int], Any], nsets: int) -> tuple[float, float]:
        """Warm every input set, then rough (device µs, host µs) per call."""
        torch = self.torch
        for i in range(nsets):
            call(i)
        torch.cuda.synchronize()
        t = time.perf_counter()
        s, e = self._event(), self._event()
        s.record()
        for i in range(5):
            call(i % nsets)
        e.record()
        host_us = (time.perf_counter() - t) * 1e6 / 5
        e.synchronize()
        return s.elapsed_time(e) * 1e3 / 5, host_us

    def host(self, call, nsets: int, host_us: float, rounds: int = 15,
             calls: int = HOST_CALLS) -> tuple[dict | None, bool]:
        """Host µs per call while the GPU is busy, so launches only queue.
        Returns (None, False) when even one call outlasts the sleep: the call waits
        for the GPU (it synchronizes)."""
        samples = []
        r = 0
        while r < rounds:
            def enqueue(r=r, calls=calls):
                t = time.perf_counter()
                for n in range(calls):
                    call((r * calls + n) % nsets)
                return (time.perf_counter() - t) * 1e6 / calls

            per_call, busy = self._behind_sleep(enqueue, 3 * calls * (host_us + 5) + 500)
            if not busy:
                if calls == 1:
                    return None, False
                calls = max(1, calls // 4)
                continue
            samples.append(per_call)
            r += 1
        return _stats(samples), True

    def single(self, call, nsets: int, reps: int, host_us: float) -> tuple[dict, bool]:
        """Device µs of one call between two events (GPU busy before the first event),
        median over `reps` calls, enqueued `chunk` calls per sleep."""
        samples, all_busy, chunk, start = [], True, 25, 0
        while start < reps:
            k = min(chunk, reps - start)

            def enqueue(start=start, k=k):
                pairs = [(self._event(), self._event()) for _ in range(k)]
                for n, (s, e) in enumerate(pairs):
                    s.record()
                    call((start + n) % nsets)
                    e.record()
                return pairs

            pairs, busy = self._behind_sleep(enqueue, 2 * k * (host_us + 10) + 200)
            if not busy and chunk > 1:
                chunk = max(1, chunk // 4)      # too many launches queued: fewer per sleep
                continue
            all_busy &= busy
            samples += [s.elapsed_time(e) * 1e3 for s, e in pairs]
            start += k
        return _stats(samples), all_busy

    def plain(self, call, nsets: int, reps: int, calls: int = 1) -> dict:
        """µs per call of `calls` back-to-back calls between two events, starting from
        an idle GPU and without a sleep: what a loop of calls sustains, the larger of
        host and device cost per call."""
        torch = self.torch
        samples = []
        for r in range(reps):
            torch.cuda.synchronize()
            s, e = self._event(), self._event()
            s.record()
            for n in range(calls):
                call((r * calls + n) % nsets)
            e.record()
            e.synchronize()
            samples.append(s.elapsed_time(e) * 1e3 / calls)
        return _stats(samples)


# ----------------------------------------------------------------------------
# Correctness
# ----------------------------------------------------------------------------

def to_float64(x) -> np.ndarray:
    """Any output (torch on any device and dtype, NumPy) as a float64 NumPy array."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def rel_err(out, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref||; inf for a wrong shape or any NaN/inf."""
    out = to_float64(out)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape}, expected {ref.shape}")
    num = float(np.linalg.norm((out - ref).ravel()))
    den = float(np.linalg.norm(ref.ravel()))
    err = num / den if den > 0 else num
    return err if math.isfinite(err) else float("inf")


# ----------------------------------------------------------------------------
# The harness: contenders of a case, checked then timed
# ----------------------------------------------------------------------------

@dataclass
class Contender:
    name: str                          # table column: robocache, torch, cpu, numpy
    device: str                        # "cuda": event timers; "cpu": perf_counter
    call: Callable[[int], Any]         # run on input set i (mod nsets), return the output
    verify: Callable[[Any], float]     # relative error of an output of `call`
    tol: float
    nsets: int = 1
    poisoned: Callable[[], Any] | None = None   # call with out= pre-filled with NaN
    scale: float = 1.0                 # multiplies times: a loop timed on a subset of rows
    note: str = ""


@dataclass
class Case:
    op: str
    config: str                        # short name
    shape: str                         # e.g. "B16 S4096 T1024 D32"
    dtype: str
    min_bytes: int = 0                 # fewest bytes the op must move (floor)
    contenders: list[Contender] = field(default_factory=list)
    skipped: str | None = None         # why the whole config was not run
    extra: dict = field(default_factory=dict)   # op-specific facts for JSON


def _check(c: Contender) -> tuple[str, float, str]:
    """(status, worst relative error, message)."""
    try:
        err = c.verify(c.call(0))
        if c.poisoned is not None:
            err = max(err, c.verify(c.poisoned()))
    except Exception as exc:  # a broken contender fails its row, not the run
        return "ERROR", float("inf"), f"{type(exc).__name__}: {exc}"
    if math.isinf(err):
        return "FAIL", err, "NaN/inf in the output (elements left unwritten?)"
    if not err <= c.tol:
        return "FAIL", err, f"rel err {err:.1e} > tol {c.tol:.0e}"
    return "ok", err, ""


def _time_cuda(c: Contender, env: Env) -> dict:
    timer = env.timer
    dev_est, host_est = timer.estimate(c.call, c.nsets)
    r: dict = {}
    reps = _clamp(0.3e6 / max(dev_est, 1.0), 50, 200)
    r["host_us"], no_sync = timer.host(c.call, c.nsets, host_est)
    if not no_sync:
        # A call that waits for the GPU cannot be timed behind a sleep: plain events for
        # the device, and the host clock of calls that each include the wait.
        r["timing_note"] = "the call waits for the GPU (host sync): device time includes host time"
        r["time_us"] = timer.plain(c.call, c.nsets, reps)
        r["host_us"] = time_host(c.call, c.nsets, env.budget_s)
        r["calls_per_s"] = 1e6 / r["host_us"]["median"]
        return r
    r["calls_per_s"] = 1e6 / r["host_us"]["median"]
    host_us = r["host_us"]["median"]
    r["time_us"], busy = timer.single(c.call, c.nsets, reps, host_us)
    if not busy:
        r["timing_note"] = "GPU ran dry during timing: device times include host gaps"
    if r["time_us"]["median"] < SMALL_CONFIG_US:
        breps = _clamp(0.3e6 / max(BATCH_CALLS * max(dev_est, host_us), 1.0), 10, 30)
        r["batch100_us"] = timer.plain(c.call, c.nsets, breps, calls=BATCH_CALLS)
    return r


def run_case(case: Case, env: Env) -> dict:
    res: dict = {"op": case.op, "config": case.config, "shape": case.shape,
                 "dtype": case.dtype, "contenders": {}, **case.extra}
    if case.skipped:
        res["skipped"] = case.skipped
        return res
    floor_us = case.min_bytes / env.copy_bw * 1e6 if case.min_bytes else None
    res["floor"] = {"bytes": case.min_bytes, "us": floor_us, "copy_bytes_per_s": env.copy_bw}
    for c in case.contenders:
        _progress(f"  {case.op} {case.config}: {c.name}")
        r = {"device": c.device, "note": c.note}
        r["status"], r["rel_err"], msg = _check(c)
        r["tol"] = c.tol
        if msg:
            r["error"] = msg
        if r["status"] == "ok":
            try:
                if c.device == "cuda":
                    r.update(_time_cuda(c, env))
                else:
                    r["time_us"] = time_host(c.call, c.nsets, env.budget_s,
                                             min_reps=3 if c.scale != 1.0 else 5)
                if c.scale != 1.0:      # timed on a subset of rows: report the whole batch
                    r["time_us"] = {k: (v if k == "n" else v * c.scale)
                                    for k, v in r["time_us"].items()}
                    r["scaled_by"] = c.scale
            except Exception as exc:
                r["status"], r["error"] = "ERROR", f"timing: {type(exc).__name__}: {exc}"
        res["contenders"][c.name] = r
    _summarize(res)
    return res


def _median(res: dict, name: str) -> float | None:
    r = res["contenders"].get(name)
    if r is None or r.get("status") != "ok":
        return None
    return r["time_us"]["median"]


def _summarize(res: dict) -> None:
    """The two ratios of the table, from this run's numbers."""
    rc, tt = _median(res, "robocache"), _median(res, "torch")
    floor = res.get("floor", {}).get("us")
    res["x_vs_torch"] = tt / rc if rc and tt else None
    res["pct_of_floor"] = 100 * floor / rc if rc and floor else None


# ----------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------

def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def header_lines(env: Env) -> list[str]:
    i = env.info
    if env.device == "cuda":
        dev = (f"GPU: {i['gpu']} ({i['gpu_sm']}, {i['gpu_sms']} SMs, "
               f"L2 {_fmt_bytes(i['l2_bytes'])})")
        bw = f"device-to-device copy bandwidth: {env.copy_bw / 1e9:,.0f} GB/s (read + write)"
    else:
        dev = f"no GPU: CPU contenders only ({i['cpu_cores']} cores)"
        bw = f"host copy bandwidth: {env.copy_bw / 1e9:,.1f} GB/s (read + write)"
    torch_v = f"torch {i['torch']}" + (f" (CUDA {i['torch_cuda']})" if i.get("torch_cuda") else "") \
        if i["torch"] else "torch not installed"
    rc_v = f"robocache {i['robocache']} ({'CUDA' if i['robocache_cuda'] else 'CPU-only'} build"
    rc_v += f", archs {i['robocache_archs']})" if i.get("robocache_archs") else ")"
    threads = f"robocache CPU threads {i.get('robocache_threads', '?')}"
    if i["torch"]:
        threads += f", torch threads {i.get('torch_threads')}"
    return [f"robocache bench | {dev}",
            f"{torch_v} | {rc_v} | numpy {i['numpy']} | python {i['python']}",
            f"{bw} | {threads}"]


def _cell(res: dict, name: str) -> str:
    r = res["contenders"].get(name)
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"]
    return _fmt_us(r["time_us"]["median"]) + ("*" if r.get("scaled_by") else "")


def summary_table(results: list[dict], env: Env) -> list[str]:
    gpu = env.device == "cuda"
    cols = ["op", "shape", "dtype", "robocache", "torch"] + (["cpu"] if gpu else []) + \
           ["numpy", "floor", "x vs torch", "% of floor"]
    rows = []
    for res in results:
        if res.get("skipped"):
            rows.append([res["op"], res["shape"], res["dtype"], f"skipped: {res['skipped']}"] +
                        [""] * (len(cols) - 4))
            continue
        xt, pf = res.get("x_vs_torch"), res.get("pct_of_floor")
        rows.append([res["op"], res["shape"], res["dtype"], _cell(res, "robocache"),
                     _cell(res, "torch")] + ([_cell(res, "cpu")] if gpu else []) +
                    [_cell(res, "numpy"), _fmt_us(res["floor"]["us"]),
                     f"{xt:.2f}x" if xt else "-", f"{pf:.0f}%" if pf else "-"])
    return _markdown(cols, rows)


def detail_table(results: list[dict], gpu: bool) -> list[str]:
    cols = ["config", "contender", "status", "rel err", "median", "p10-p90",
            "x100 /call", "host", "note"]
    rows = []
    for res in results:
        for name, r in res["contenders"].items():
            t, b, h = r.get("time_us"), r.get("batch100_us"), r.get("host_us")
            note = "; ".join(x for x in (r.get("note"), r.get("error"), r.get("timing_note")) if x)
            rows.append([res["config"], f"{name} ({r['device']})", r["status"],
                         f"{r['rel_err']:.1e}",
                         _fmt_us(t["median"]) if t else "-",
                         f"{_fmt_us(t['p10'])}-{_fmt_us(t['p90'])}" if t else "-",
                         _fmt_us(b["median"]) if b else "-",
                         _fmt_us(h["median"]) if h else "-", note])
    if not gpu:
        keep = [i for i, c in enumerate(cols) if c not in ("x100 /call", "host")]
        cols, rows = [cols[i] for i in keep], [[r[i] for i in keep] for r in rows]
    return _markdown(cols, rows)


def _markdown(cols: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    return [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]


def legend_lines(env: Env) -> list[str]:
    if env.device == "cuda":
        timing = ("robocache, torch: device µs per call, median of 50-200 single calls between "
                  "CUDA events with the GPU kept busy before them (host launch cost excluded). "
                  "Details: 'host' = host µs per call with the GPU busy (launches only queue); "
                  "'x100' = 100 back-to-back calls between two events / 100, from an idle GPU "
                  "(what a loop sustains: the larger of host and device cost). "
                  "cpu: robocache on the CPU; numpy: np.interp loop per row and feature; "
                  "both time.perf_counter, median.")
        floor = "floor: fewest bytes the op must move / measured device-to-device copy bandwidth."
    else:
        timing = ("robocache, torch, numpy: time.perf_counter µs per call on the CPU, median "
                  "(torch = the plain batched searchsorted+gather+lerp version on CPU tensors).")
        floor = "floor: fewest bytes the op must move / measured host copy bandwidth."
    lines = [timing, floor, "x vs torch = torch / robocache; % of floor = floor / robocache.",
             "* measured on a subset of rows and scaled to the whole batch (see 'note')."]
    if env.device == "cuda" and not env.rc_cuda:
        lines.append("robocache was built without CUDA: no robocache GPU column "
                     "(rebuild with nvcc on PATH; see `python -m robocache info`).")
    return lines


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)  # torch.device, dtypes, paths: their text is what a reader wants


# ----------------------------------------------------------------------------
# resample
# ----------------------------------------------------------------------------

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


def _window_targets(rng, t_first, t_last, cfg: ResampleConfig) -> np.ndarray:
    """[rows, T] sorted targets inside each row's span, like a data loader's windows."""
    span = t_last - t_first
    dur = np.minimum(span * cfg.window, cfg.window_s)
    start = t_first + rng.uniform(0.0, 1.0, size=span.shape) * (span - dur)
    return start[:, None] + np.linspace(0.0, 1.0, cfg.T)[None, :] * dur[:, None]


def _round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
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
        new_times = _window_targets(rng, times[:, 0], times[:, -1], cfg)
        return ResampleData(_round_to_dtype(values, cfg.dtype), times, None, [(None, new_times)])
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
        new_times = _window_targets(rng, times[offsets[index]], times[offsets[index + 1] - 1], cfg)
        queries.append((index, new_times))
    return ResampleData(_round_to_dtype(values, cfg.dtype), times, offsets, queries)


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
    torch = _torch()
    if v0.dtype in (torch.float16, torch.bfloat16):
        return torch.lerp(v0.float(), v1.float(), w.float().unsqueeze(-1)).to(v0.dtype)
    return torch.lerp(v0, v1, w.to(v0.dtype).unsqueeze(-1))


def torch_resample_dense(values, times, new_times):
    """Linear resample of a padded batch, as a skilled PyTorch user writes it: one
    batched searchsorted, clamp, gather of the two neighbour rows, one lerp.
    values [B,S,D], times [B,S], new_times [B,T] -> [B,T,D]."""
    torch = _torch()
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
    torch = _torch()
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
    torch = _torch()
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

def _nsets(touched: int, per_set: int, cache: int, cap: int) -> int:
    """Input sets to rotate so one rotation touches ROTATE_CACHE_MULTIPLE x the cache,
    within `cap` bytes of copies."""
    want = math.ceil(ROTATE_CACHE_MULTIPLE * cache / max(touched, 1))
    fit = 1 + cap // max(per_set, 1)
    return _clamp(min(want, fit), 1, MAX_SETS)


def rotation_sets(case, per_set: int, env) -> tuple[int, int]:
    """Input sets to rotate on the host and on the device (0 without a GPU) for a case whose
    one set is `per_set` bytes; records the device choice in case.extra["sets"]."""
    host_sets = _nsets(case.min_bytes, per_set, env.host_cache_bytes, HOST_COPY_CAP)
    if env.device != "cuda":
        return host_sets, 0
    mem = env.info["gpu_memory_bytes"]
    dev_sets = _nsets(case.min_bytes, per_set, env.cache_bytes,
                      int(min(DEVICE_COPY_CAP, DEVICE_COPY_FRACTION * mem)))
    case.extra["sets"] = {"cuda": dev_sets, "cpu": host_sets,
                          "touched_per_rotation_bytes": dev_sets * case.min_bytes}
    return host_sets, dev_sets


def _rc_partial(rc, values, times, new_times, offsets=None, index=None):
    kw = {} if offsets is None else {"offsets": offsets, "index": index}
    return functools.partial(rc.resample, values, times, new_times, **kw)


def _dense_tensor_sets(data: ResampleData, cfg, device, n: int) -> list[tuple]:
    """n (values, times, new_times) copies as torch tensors on `device`."""
    torch = _torch()
    v = torch.from_numpy(data.values).to(device).to(_torch_dtype(cfg.dtype))
    t = torch.from_numpy(data.times).to(device)
    nt = torch.from_numpy(data.queries[0][1]).to(device)
    return [(v, t, nt)] + [(v.clone(), t.clone(), nt.clone()) for _ in range(n - 1)]


def _ragged_tensor_sets(data: ResampleData, cfg, device) -> tuple[tuple, list[tuple]]:
    """((values, times, offsets), [(index, new_times) per query set]) on `device`."""
    torch = _torch()
    base = (torch.from_numpy(data.values).to(device).to(_torch_dtype(cfg.dtype)),
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
    torch = _torch()
    rc = _robocache()
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
    out_like = lambda: torch.full(out_shape, float("nan"), dtype=_torch_dtype(cfg.dtype),
                                  device=device)
    return torch_calls, rc_calls, out_like


def _numpy_sets(data, cfg, nsets):
    """robocache CPU on NumPy arrays (used when torch is absent; no bfloat16 in NumPy)."""
    rc = _robocache()
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
    rows = _clamp(budget_s / 3 / max(per_row, 1e-9), 1, cfg.B)
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


# ----------------------------------------------------------------------------
# Registry and command line
# ----------------------------------------------------------------------------

@dataclass
class OpBench:
    """One benchmarked op: its configs and how to build the Case of one config."""
    configs: Callable[[bool], list]            # quick -> configs
    build: Callable[[Any, Env], Case]          # (config, env) -> Case


OPS: dict[str, OpBench] = {
    "resample": OpBench(configs=resample_configs, build=build_resample_case),
    "voxelize": OpBench(*__import__("robocache.bench_voxelize", fromlist=["OP"]).OP),  # robocache/bench_voxelize.py
    "fuse": OpBench(*__import__("robocache.bench_fuse", fromlist=["OP"]).OP),  # robocache/bench_fuse.py
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m robocache bench",
        description="Check, then time robocache ops against plain PyTorch, the CPU path, "
                    "a NumPy loop and the memory-bandwidth floor.")
    p.add_argument("--op", action="append", choices=sorted(OPS),
                   help="op to benchmark (repeatable; default: all)")
    p.add_argument("--json", metavar="PATH", help="write all raw numbers to PATH")
    p.add_argument("--quick", action="store_true",
                   help="fewer, smaller configs (CI and CPU-only machines)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cuda: GPU contenders; cpu: CPU contenders only (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    return p


def _release_device_memory(env: Env) -> None:
    gc.collect()                 # contenders' closures hold the inputs in reference cycles
    if env.device == "cuda":
        env.torch.cuda.synchronize()
        env.torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns 0, 1 when a contender failed its check, 2 on setup errors."""
    args = _parser().parse_args(argv)
    ops = list(dict.fromkeys(args.op or OPS))     # in order, each once
    if _torch() is None:
        _progress("note: PyTorch is not installed; running robocache CPU and the NumPy loop "
                  "only (pip install torch for the PyTorch and GPU contenders).")
    try:
        env = detect_env(args.device, args.quick, args.seed)
    except RuntimeError as exc:
        print(f"robocache bench: {exc}", file=sys.stderr)
        return 2

    results = []
    for name in ops:
        op = OPS[name]
        for cfg in op.configs(args.quick):
            _progress(f"{name} {cfg.shape} {cfg.dtype}: building inputs and reference")
            t = time.perf_counter()
            case = op.build(cfg, env)
            results.append(run_case(case, env))
            results[-1]["wall_s"] = time.perf_counter() - t
            del case
            _release_device_memory(env)

    lines = header_lines(env) + [""] + summary_table(results, env) + [""] + \
        detail_table(results, env.device == "cuda") + [""] + legend_lines(env)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(_jsonable({"env": env.info, "device": env.device, "quick": args.quick,
                                 "seed": args.seed, "results": results}), f, indent=1)
        _progress(f"wrote {args.json}")
    failed = [f"{r['config']}: {n}" for r in results for n, c in r["contenders"].items()
              if c["status"] != "ok"]
    if failed:
        print("FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
