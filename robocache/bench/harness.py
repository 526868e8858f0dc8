"""The benchmark harness of robocache ops: every contender is checked, then timed.

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

This module knows no op: each op module of this package (resample.py, voxelize.py,
fuse.py) builds its Cases and defines an `OpBench` as `OP`; the package's `OPS` lists them
and `run(OPS)` runs them all by default.
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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

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
def torch_or_none():
    """The torch module, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def robocache_package():
    import robocache  # the package under test (already loaded: it is this package's parent)
    return robocache


def torch_dtype(name: str):
    return getattr(torch_or_none(), name)


# ----------------------------------------------------------------------------
# Statistics and formatting
# ----------------------------------------------------------------------------

def _stats(samples_us: list[float]) -> dict:
    a = np.asarray(samples_us, dtype=np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
            "p90": float(np.percentile(a, 90)), "min": float(a.min()), "n": int(a.size)}


def fmt_us(v: float | None) -> str:
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


def clamp(x: float, lo: int, hi: int) -> int:
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
    smoke: bool = False             # --smoke: every path runs once, the timings mean nothing

    @property
    def torch_device(self):
        return self.torch.device("cuda", self.torch.cuda.current_device())

    @property
    def budget_s(self) -> float:
        """Seconds of timing per contender on the host."""
        return 0.005 if self.smoke else 0.25 if self.quick else 1.0


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
    torch = torch_or_none()
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
    torch = torch_or_none()
    rc = robocache_package()
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
    reps = clamp(budget_s / max(first, 1e-9), min_reps, max_reps)
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
    torch = torch_or_none()
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
# Input rotation: enough copies that one rotation outgrows the cache
# ----------------------------------------------------------------------------

def _nsets(touched: int, per_set: int, cache: int, cap: int) -> int:
    """Input sets to rotate so one rotation touches ROTATE_CACHE_MULTIPLE x the cache,
    within `cap` bytes of copies."""
    want = math.ceil(ROTATE_CACHE_MULTIPLE * cache / max(touched, 1))
    fit = 1 + cap // max(per_set, 1)
    return clamp(min(want, fit), 1, MAX_SETS)


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
    reps = clamp(0.3e6 / max(dev_est, 1.0), 50, 200)
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
        breps = clamp(0.3e6 / max(BATCH_CALLS * max(dev_est, host_us), 1.0), 10, 30)
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
    return fmt_us(r["time_us"]["median"]) + ("*" if r.get("scaled_by") else "")


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
                    [_cell(res, "numpy"), fmt_us(res["floor"]["us"]),
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
                         fmt_us(t["median"]) if t else "-",
                         f"{fmt_us(t['p10'])}-{fmt_us(t['p90'])}" if t else "-",
                         fmt_us(b["median"]) if b else "-",
                         fmt_us(h["median"]) if h else "-", note])
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
# Ops and command line
# ----------------------------------------------------------------------------

@dataclass
class OpBench:
    """One benchmarked op: its configs and how to build the Case of one config. Each op module
    (resample.py, voxelize.py, fuse.py) defines one as `OP`; the package's OPS lists them."""
    configs: Callable[[bool], list]            # quick -> configs
    build: Callable[[Any, Env], Case]          # (config, env) -> Case
    # Op-specific entries added to a result after the table's ratios (voxelize: the cost of
    # determinism); not called for a skipped config.
    summarize: Callable[[dict], None] | None = None


def _parser(ops: Mapping[str, OpBench]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m robocache bench",
        description="Check, then time robocache ops against plain PyTorch, the CPU path, "
                    "a NumPy loop and the memory-bandwidth floor.")
    p.add_argument("--op", action="append", choices=sorted(ops),
                   help="op to benchmark (repeatable; default: all)")
    p.add_argument("--json", metavar="PATH", help="write all raw numbers to PATH")
    p.add_argument("--quick", action="store_true",
                   help="fewer, smaller configs (CI and CPU-only machines)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cuda: GPU contenders; cpu: CPU contenders only (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    p.add_argument("--smoke", action="store_true",
                   help="CI: the first --quick config of each op on the CPU, checked, timed for a few ms; "
                        "exits non-zero on any error (the figures are not measurements)")
    return p


def _release_device_memory(env: Env) -> None:
    gc.collect()                 # contenders' closures hold the inputs in reference cycles
    if env.device == "cuda":
        env.torch.cuda.synchronize()
        env.torch.cuda.empty_cache()


def run(ops: Mapping[str, OpBench], argv: list[str] | None = None) -> int:
    """The command line over `ops` (name -> OpBench): run the chosen ops (default: all), print
    the tables, write --json. Returns 0, 1 when a contender failed its check, 2 on setup errors."""
    args = _parser(ops).parse_args(argv)
    names = list(dict.fromkeys(args.op or ops))   # in order, each once
    if torch_or_none() is None:
        _progress("note: PyTorch is not installed; running robocache CPU and the NumPy loop "
                  "only (pip install torch for the PyTorch and GPU contenders).")
    if args.smoke:
        args.device, args.quick = "cpu", True
    try:
        env = detect_env(args.device, args.quick, args.seed)
    except RuntimeError as exc:
        print(f"robocache bench: {exc}", file=sys.stderr)
        return 2
    env.smoke = args.smoke

    results = []
    for name in names:
        op = ops[name]
        for cfg in op.configs(args.quick)[:1 if args.smoke else None]:
            _progress(f"{name} {cfg.shape} {cfg.dtype}: building inputs and reference")
            t = time.perf_counter()
            case = op.build(cfg, env)
            results.append(run_case(case, env))
            if op.summarize is not None and not results[-1].get("skipped"):
                op.summarize(results[-1])
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
