"""Coverage-guided fuzzing of robocache's argument parsing and DLPack import.

    python tools/fuzz_args.py --seconds 60 [--engine auto|atheris|random] [--json PATH]
    python tools/fuzz_args.py --replay build/fuzz/artifacts/crash-...   # show one input's call

1. Builds robocache._C once more into build/fuzz/ (the normal build is untouched): ASan + UBSan
   (setup.py ROBOCACHE_SANITIZE=1) plus gcc's -fsanitize-coverage=trace-pc, whose callbacks a
   small shim (build/fuzz/libfuzzcov.so) hashes AFL-style into 64 Ki edge counters.
2. Runs this file again as a child under that build (LD_PRELOAD: libasan, the shim). With atheris
   (pip install atheris) libFuzzer mutates the inputs and sees the shim's counters as its
   coverage, so inputs that reach new C code are kept (corpus in build/fuzz/corpus/). Without
   atheris (--engine random) a built-in loop does the same with simpler mutations.
3. Each input (a byte string) decodes into one call of resample, voxelize or fuse: form, sizes,
   dtypes, contents (NaN, inf, unsorted, out-of-range offsets/index/lengths), then a few
   mutations: another dtype or shape, strided/negative/broadcast/misaligned/read-only layouts,
   torch tensors, forged DLPack producers (tests/dlpack_forge.py) with protocol faults, junk
   objects, keyword values (modes, tolerance, grid, voxel_size, origin, dtype=, stream=, objects
   whose __bool__/__index__ raise), out= variants (aliasing, read-only, wrong shape).

Oracles, any of which is a finding (saved under build/fuzz/artifacts/): a crash or sanitizer
report, an exception other than TypeError/ValueError/BufferError/MemoryError/OverflowError/
robocache.CudaError (or the one the input's own objects raise), an empty message, a forged
export whose deleter did not run exactly once, an input modified by the call, an out= aliasing an
input accepted, or a resample result (float64 times, modes with exact answers) that differs from
tests/reference.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "build" / "fuzz"
SHIM = r"""
/* Coverage shim for gcc's -fsanitize-coverage=trace-pc: AFL-style edge hashing into 8-bit
 * counters that the fuzzer registers with libFuzzer (or reads itself). */
#include <stdint.h>
#define RC_COV_N (1 << 16)
__attribute__((visibility("default"))) uint8_t rc_cov_counters[RC_COV_N];
__attribute__((visibility("default"))) uintptr_t rc_cov_pcs[2 * RC_COV_N];
static __thread uintptr_t prev;
void __sanitizer_cov_trace_pc(void) {
    uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    uintptr_t cur = (uintptr_t)((pc ^ (pc >> 12)) * 0x9E3779B97F4A7C15ull >> 48);
    rc_cov_counters[(cur ^ prev) & (RC_COV_N - 1)]++;
    prev = cur >> 1;
}
"""
COV_N = 1 << 16


# ----------------------------------------------------------------------------
# parent: build, run the child, report


def build():
    """build/fuzz/lib/robocache (python files + the instrumented _C) and build/fuzz/libfuzzcov.so."""
    FUZZ.mkdir(parents=True, exist_ok=True)
    shim_c, shim_so = FUZZ / "fuzzcov.c", FUZZ / "libfuzzcov.so"
    old = shim_c.read_text() if shim_c.exists() else ""
    if not shim_so.exists() or old != SHIM:
        shim_c.write_text(SHIM)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", str(shim_c), "-o", str(shim_so)], check=True)
    lib = FUZZ / "lib"
    env = dict(os.environ, ROBOCACHE_SANITIZE="1", ROBOCACHE_CUDA="0", CFLAGS="-fsanitize-coverage=trace-pc")
    t = time.time()
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(lib), "--build-temp",
                        str(FUZZ / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"building the fuzz extension failed:\n{r.stdout}\n{r.stderr}")
    # the package's Python files next to the instrumented extension
    for src in [p for p in (ROOT / "robocache").rglob("*") if p.suffix in (".py", ".pyi") or p.name == "py.typed"]:
        dst = lib / src.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    return lib, shim_so, time.time() - t


def child_env(lib, shim_so):
    rt = [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
          for lib in ("libasan.so", "libubsan.so")]
    # libasan first; libubsan brings libstdc++ in before ASan resolves its __cxa_throw interceptor
    # (loaded later, every C++ throw, atheris' and torch's included, dies on a CHECK)
    return dict(os.environ, LD_PRELOAD=f"{rt[0]}:{rt[1]}:{shim_so}", PYTHONPATH=f"{lib}{os.pathsep}{ROOT / 'tests'}",
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
                UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1",
                RC_FUZZ_SHIM=str(shim_so), ROBOCACHE_NUM_THREADS="2")


def have_atheris():
    try:
        import atheris  # noqa: F401
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--fresh", action="store_true", help="start from an empty corpus")
    ap.add_argument("--replay", help="decode and run one input file, printing the call")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--artifacts", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.child:
        return child(args, rest)
    engine = args.engine if args.engine != "auto" else ("atheris" if have_atheris() else "random")
    lib, shim_so, build_s = build()
    env = child_env(lib, shim_so)
    if args.replay:
        return subprocess.run([sys.executable, __file__, "--child", "--replay", args.replay], env=env).returncode
    corpus, artifacts = FUZZ / "corpus", FUZZ / "artifacts"
    if args.fresh:
        shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.iterdir())
    cmd = [sys.executable, __file__, "--child", "--engine", engine, "--seconds", str(args.seconds)]
    if engine == "atheris":
        cmd += [str(corpus), f"-max_total_time={int(args.seconds)}", "-print_final_stats=1", "-timeout=30",
                "-rss_limit_mb=8192", "-max_len=512", f"-artifact_prefix={artifacts}/"]
    else:
        cmd += ["--corpus", str(corpus), "--artifacts", str(artifacts)]
    t = time.time()
    print(f"fuzz_args: engine {engine}, {args.seconds:g} s; build {build_s:.1f} s", flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t
    log = proc.stdout + proc.stderr
    (FUZZ / "last_run.log").write_text(log)
    stats = {"engine": engine, "seconds": round(wall, 1), "exit": proc.returncode}
    m = re.findall(r"stat::number_of_executed_units: (\d+)", log) or re.findall(r"fuzz_args: (\d+) executions", log)
    stats["executions"] = int(m[-1]) if m else None
    m = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", log)
    if m:
        stats["edges"], stats["features"], stats["corpus"] = map(int, m[-1])
    m = re.findall(r"fuzz_args: edges (\d+) corpus (\d+)", log)
    if m:
        stats["edges"], stats["corpus"] = map(int, m[-1])
    m = re.findall(r"fuzz_args: outcomes (\{.*\})", log)
    if m:
        stats["outcomes"] = json.loads(m[-1])
    new = sorted(set(artifacts.iterdir()) - before)
    stats["findings"] = [str(p.relative_to(ROOT)) for p in new]
    ok = proc.returncode == 0 and not new
    tail = "\n".join(log.strip().splitlines()[-40:])
    print(("" if ok else tail + "\n") + json.dumps(stats, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(stats, indent=1))
    if not ok:
        print(f"fuzz_args: FINDING (full log: {FUZZ / 'last_run.log'}; replay: python {__file__} --replay "
              f"{new[0] if new else '<input>'})")
    return 0 if ok else 1


# ----------------------------------------------------------------------------
# child: decode inputs into calls


class Source:
    """Choices decoded from the fuzzer's bytes. Past the end every byte reads 0: the first option,
    no fault, so short inputs are small plain calls and mutations add trouble."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self):
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def int(self, lo, hi):
        span, v, n = hi - lo + 1, 0, 0
        while 256**n < span:
            v = v * 256 + self.byte()
            n += 1
        return lo + (v % span if span > 1 else 0)

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def chance(self, p):
        """True with probability p/256 for random bytes; False for the zero byte."""
        return self.byte() >= 256 - p


class Injected(Exception):
    """Raised by the fuzzer's own objects (__bool__, __index__, __dlpack__): must propagate."""


class Raises:
    """An object whose conversions raise Injected."""

    def __bool__(self):
        raise Injected("__bool__")

    def __index__(self):
        raise Injected("__index__")

    def __float__(self):
        raise Injected("__float__")

    def __len__(self):
        raise Injected("__len__")

    def __repr__(self):
        return "Raises()"


class DlpackRaises:
    def __dlpack__(self, **kw):
        raise Injected("__dlpack__")

    def __dlpack_device__(self):
        return (1, 0)


SPECIAL_F = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e308, -1e308, 5e-324, 1e-300, 2.0**63, -(2.0**63),
             2.0**53 + 1, 1e18]
SPECIAL_I = [0, -1, 1, 2**31 - 1, 2**31, 2**62, 2**63 - 1, -(2**63), -(2**31)]


class Case:
    """One generated call: logical arrays (numpy), keyword values, what to check afterwards."""

    def __init__(self, src, np, torch, forge_mod):
        self.src, self.np, self.torch, self.forge = src, np, torch, forge_mod
        self.log = []
        self.arrays = {}      # name -> logical numpy array (what robocache must see)
        self.passed = {}      # name -> object given to robocache
        self.kw = {}
        self.forged = []
        self.exotic = False   # an argument robocache may legitimately read differently
        # most arguments come from one framework (mixing is an error path of its own)
        self.framework = src.pick(["numpy", "numpy", "numpy", "torch" if torch is not None else "numpy",
                                   "forged"])

    def note(self, s):
        self.log.append(s)

    # -- arrays

    def sorted_times(self, shape, dtype):
        np = self.np
        n = shape[-1] if shape else 1
        count = int(np.prod(shape))
        if count <= 64:  # each gap from the input: duplicates (gap 0) where the fuzzer wants them
            gaps = np.array([self.src.int(0, 3) for _ in range(count)], np.float64).reshape(shape)
        else:
            gaps = np.random.default_rng(self.src.int(0, 2**32 - 1)).integers(0, 4, shape).astype(np.float64)
        t = np.cumsum(gaps, axis=-1) if len(shape) else gaps
        if dtype == "int64":
            return (t * 10**6 + 1_700_000_000 * 10**9).astype(np.int64)
        return (t / 4 - 1).astype(dtype) if n else t.astype(dtype)

    def values(self, shape, dtype):
        np = self.np
        x = (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 7) - 3
        if dtype == "bool":
            return x > 0
        return x.astype(dtype)

    def corrupt(self, name):
        """One element of an array set to a special value."""
        np, a = self.np, self.arrays[name]
        if a.size == 0:
            return
        a = a.copy()
        i = self.src.int(0, a.size - 1)
        if a.dtype.kind == "f":
            a.flat[i] = self.src.pick(SPECIAL_F)
        elif a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            a.flat[i] = max(min(self.src.pick(SPECIAL_I), info.max), info.min)
        elif a.dtype.kind == "b":
            a.flat[i] = not a.flat[i]
        self.arrays[name] = a
        self.note(f"corrupt {name}[{i}]")

    def reshape(self, name):
        np, a = self.np, self.arrays[name]
        how = self.src.pick(["add-dim", "drop-dim", "slice", "0-d", "empty", "flatten", "grow"])
        if how == "add-dim":
            a = a[..., None] if self.src.chance(128) else a[None]
        elif how == "drop-dim" and a.ndim:
            a = a.reshape(a.shape[:-2] + (-1,)) if a.ndim > 1 else np.asarray(a.flat[0] if a.size else 0, a.dtype)
        elif how == "slice" and a.ndim and a.shape[0]:
            a = a[: self.src.int(0, a.shape[0] - 1)]
        elif how == "0-d":
            a = np.asarray(a.flat[0] if a.size else 0, a.dtype)
        elif how == "empty":
            a = a[:0] if a.ndim else a.reshape(1)[:0]
        elif how == "flatten":
            a = a.ravel()
        elif how == "grow" and a.ndim:
            a = np.concatenate([a, a[:1]]) if a.shape[0] else a
        self.arrays[name] = np.ascontiguousarray(a)
        self.note(f"reshape {name}: {how} -> {a.shape}")

    def astype(self, name):
        dt = self.src.pick(["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "uint64", "bool",
                            "complex64", "uint16", "uint32"])
        with self.np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.arrays[name] = self.arrays[name].astype(dt)
        self.note(f"astype {name} {dt}")

    # -- how an array is passed

    def wrap(self, name):
        """The object passed for arrays[name]: numpy in some layout, torch, a forged producer."""
        np, src, a = self.np, self.src, self.arrays[name]
        kind = src.pick([self.framework] * 4 + ["layout", "torch", "forged", "forged-fault", "junk"])
        if kind == "numpy":
            return a
        if kind == "layout":
            how = src.pick(["fortran", "step", "negative", "misaligned", "read-only", "broadcast"])
            self.note(f"{name}: layout {how}")
            if how == "fortran":
                return np.asfortranarray(a)
            if how == "step" and a.ndim:
                big = np.repeat(a, 2, axis=0)
                return big[::2]
            if how == "negative" and a.ndim:
                r = np.ascontiguousarray(a[::-1])
                return r[::-1]
            if how == "misaligned" and a.size:
                raw = bytearray(a.nbytes + a.itemsize + 1)
                m = np.frombuffer(raw, a.dtype, a.size, offset=1).reshape(a.shape)
                m[...] = a
                return m
            if how == "read-only":
                b = a.copy()
                b.flags.writeable = False
                return b
            if how == "broadcast" and a.ndim and a.size and a.shape[0] > 1:
                # content changes: every row is row 0
                b = np.broadcast_to(a[:1], a.shape)
                self.arrays[name] = np.ascontiguousarray(b)
                return b
            return a
        if kind == "torch" and self.torch is not None and a.dtype.kind != "c" and a.dtype.name not in ("uint16",
                                                                                                         "uint32"):
            self.note(f"{name}: torch")
            t = self.torch.from_numpy(np.ascontiguousarray(a))
            if src.chance(64) and t.ndim > 1:
                t = t.transpose(-1, -2).contiguous().transpose(-1, -2)  # same content, column-major
            return t
        if kind in ("forged", "forged-fault"):
            return self.forged_arg(name, fault=kind == "forged-fault")
        if kind == "junk":
            j = src.pick([None, 0, 1.5, "abc", [1.0, 2.0], (), object(), DlpackRaises(), Raises(), np.float64(1.0),
                          np.bytes_(b"x")])
            self.note(f"{name}: junk {type(j).__name__}")
            self.exotic = True  # None means "not given": the logical arrays no longer describe the call
            return j
        return a

    def forged_arg(self, name, fault):
        F = self.forge
        np, src, a = self.np, self.src, self.arrays[name]
        if a.dtype.kind not in "iufb" and not fault:
            return a
        faults = {}
        if fault:
            what = src.pick(["capsule_name", "version", "dtype", "lanes", "device", "ndim", "shape", "data", "strides",
                             "byte_offset", "dlpack_raises", "dlpack_returns", "device_returns", "null_deleter",
                             "legacy", "legacy_only", "flags", "reuse"])
            if what == "capsule_name":
                faults["capsule_name"] = src.pick([b"foo", None, b"used_dltensor", b"dltensor"])
            elif what == "version":
                faults["version"] = (src.pick([0, 1, 2, 2**32 - 1]), src.pick([0, 3, 2**32 - 1]))
            elif what == "dtype":
                code, bits = src.int(0, 8), src.pick([0, 1, 8, 16, 32, 64, 128, 255])
                if code in (0, 1, 2, 4, 6) and bits in (8, 16, 32, 64) and bits > 8 * a.itemsize:
                    bits = 8 * a.itemsize  # a wider supported dtype would describe memory that is not there
                faults["dtype"] = (code, bits, 1)
            elif what == "lanes":
                faults["dtype"] = F.dl_dtype(a.dtype)[:2] + (src.pick([0, 2, 4, 65535]),)
            elif what == "device":
                faults["device"] = (src.pick([0, 1, 3, 4, 7, 8, 12, 14, 99]), src.pick([0, 1, 7]))
            elif what == "ndim":
                faults.update(ndim=src.pick([-1, 0, 1, 2, 9, 127, 2**31 - 1]), strides=None,
                              shape=None if src.chance(128) else [1] * 9)
                if faults["ndim"] in (1, 2) and faults["shape"] is not None:
                    faults["shape"] = None  # ndim > 0 without a shape array
            elif what == "shape":  # descriptions robocache must reject before touching memory
                faults.update(shape=src.pick([[-1], [2, -5], [2**40, 2**40, 2**40], [2**62, 4], [2**63 - 1, 2]]),
                              strides=src.pick([None, [0, 0, 0], [1, 1, 1]]))
            elif what == "data":
                faults["data"] = 0
            elif what == "strides":
                faults.update(shape=[3, 3], strides=src.pick([[2**62, 1], [1, 2**61], [-(2**58), 1], [2**63 - 1, 0]]))
            elif what == "byte_offset":
                faults["byte_offset"] = src.pick([2**63, 2**64 - 8, 2**64 - 1])
            elif what == "dlpack_raises":
                faults["dlpack_raises"] = src.pick([BufferError("b"), RuntimeError("r"), TypeError("t"), Injected("i"),
                                                    MemoryError("m")])
            elif what == "dlpack_returns":
                faults["dlpack_returns"] = src.pick([None, 7, "x", (1, 2), np.zeros(2)])
            elif what == "device_returns":
                faults["device_returns"] = src.pick([None, (1,), ("cpu", 0), (1.0, 0), (-1, 0), (2**40, 0), [1, 0],
                                                     (2, 0), (3, 0)])
            elif what == "null_deleter":
                faults["null_deleter"] = True
            elif what == "legacy":
                faults["versioned"] = False
            elif what == "legacy_only":
                faults["legacy_only"] = True
            elif what == "flags":
                faults["flags"] = src.pick([1, 2, 3, 2**64 - 1])
            elif what == "reuse":
                faults["reuse_capsule"] = True
            if what in ("dtype", "device", "lanes", "shape", "ndim", "strides", "data", "byte_offset", "version",
                        "capsule_name", "dlpack_raises", "dlpack_returns", "device_returns", "flags"):
                self.exotic = True
        if a.dtype.kind not in "iufb":
            self.exotic = True
            return a
        f = F.Forged(np.ascontiguousarray(a), **faults)
        self.forged.append(f)
        self.note(f"{name}: forged {faults}")
        return f


def gen_resample(c):
    np, src = c.np, c.src
    form = src.pick(["dense", "row", "ragged", "lengths"])
    B, S, T = src.int(0, 4), src.int(0, 6), src.int(0, 5)
    feat = src.pick([(2,), (), (1,), (3,), (2, 2), (4,), (0,)])
    tdt = src.pick(["float64", "float64", "float32", "int64"])
    mode = src.pick(["linear", "nearest", "previous", "next", "slerp"])
    vdt = src.pick(["float32", "float64", "float16", "int32", "uint8", "bool", "int64"])
    if mode in ("linear", "slerp") and vdt not in ("float32", "float64", "float16"):
        vdt = "float32"
    if mode == "slerp":
        feat = (4,)
    c.note(f"resample {form} B={B} S={S} T={T} feat={feat} times {tdt} values {vdt} mode {mode}")
    if form == "row":
        c.arrays["values"] = c.values((S,) + feat, vdt)
        c.arrays["times"] = c.sorted_times((S,), tdt)
        c.arrays["new_times"] = c.sorted_times((T,), tdt)[::-1].copy()
    elif form in ("dense", "lengths"):
        c.arrays["values"] = c.values((B, S) + feat, vdt)
        c.arrays["times"] = c.sorted_times((B, S), tdt)
        c.arrays["new_times"] = c.sorted_times((B, T), tdt)
        if form == "lengths":
            c.arrays["lengths"] = np.array([src.int(0, S) for _ in range(B)], np.int64)
    else:
        E = src.int(0, 4)
        n = [src.int(0, 4) for _ in range(E)]
        N = sum(n)
        c.arrays["values"] = c.values((N,) + feat, vdt)
        c.arrays["times"] = np.concatenate([c.sorted_times((k,), tdt) for k in n]) if E else np.zeros(0, tdt)
        c.arrays["offsets"] = np.concatenate([[0], np.cumsum(n)]).astype(np.int64) if E else np.zeros(1, np.int64)
        c.arrays["index"] = np.array([src.int(0, max(E - 1, 0)) for _ in range(B)], np.int64)
        c.arrays["new_times"] = c.sorted_times((B, T), tdt)
    if mode != "linear" or src.chance(32):
        c.kw["mode"] = mode
    return "resample", ("values", "times", "new_times")


def gen_voxelize(c):
    np, src = c.np, c.src
    form = src.pick(["dense", "single", "ragged", "lengths"])
    mode = src.pick(["occupancy", "count", "sum", "mean", "max"])
    B, N, F = src.int(0, 3), src.int(0, 6), src.int(0, 3)
    pdt = src.pick(["float32", "float64", "float16"])
    c.note(f"voxelize {form} B={B} N={N} F={F} points {pdt} mode {mode}")
    lead = {"dense": (B, N), "lengths": (B, N), "single": (N,), "ragged": (B * N,)}[form]
    pts = (np.arange(int(np.prod(lead)) * 3, dtype=np.float64).reshape(lead + (3,)) * 0.37) % 2.5 - 0.2
    c.arrays["points"] = pts.astype(pdt)
    if mode in ("sum", "mean", "max"):
        c.arrays["features"] = c.values(lead + (F,), src.pick(["float32", "float64"]))
    if form == "ragged":
        cut = sorted(src.int(0, B * N) for _ in range(max(B - 1, 0)))
        c.arrays["offsets"] = np.array([0] + cut + [B * N], np.int64)
    if form == "lengths":
        c.arrays["lengths"] = np.array([src.int(0, N) for _ in range(B)], np.int64)
    c.kw["grid"] = src.pick([(2, 3, 4), 2, (1, 1, 1), (3, 1, 2)])
    c.kw["voxel_size"] = src.pick([0.5, (0.5, 1.0, 0.25), 1.0])
    c.kw["origin"] = src.pick([(0.0, 0.0, 0.0), (-1, -1, -1), (0.1, 0.2, 0.3)])
    if mode != "occupancy" or src.chance(32):
        c.kw["mode"] = mode
    return "voxelize", ("points",)


def gen_fuse(c):
    np, src = c.np, c.src
    form = src.pick(["dense", "row", "ragged"])
    K, B, T = src.int(1, 3), src.int(0, 3), src.int(0, 4)
    tdt = src.pick(["float64", "float32", "int64"])
    vdt = src.pick(["float32", "float64"])
    c.note(f"fuse {form} K={K} B={B} T={T} times {tdt} values {vdt}")
    E = src.int(1, 3)
    for k in range(K):
        S, D = src.int(0, 5), src.int(0, 3)
        if form == "row":
            c.arrays[f"v{k}"], c.arrays[f"t{k}"] = c.values((S, D), vdt), c.sorted_times((S,), tdt)
        elif form == "dense":
            c.arrays[f"v{k}"], c.arrays[f"t{k}"] = c.values((B, S, D), vdt), c.sorted_times((B, S), tdt)
        else:
            n = [src.int(0, 3) for _ in range(E)]
            c.arrays[f"v{k}"] = c.values((sum(n), D), vdt)
            c.arrays[f"t{k}"] = np.concatenate([c.sorted_times((m,), tdt) for m in n])
            c.arrays[f"o{k}"] = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    c.arrays["new_times"] = c.sorted_times((T,) if form == "row" else (B, T), tdt)
    if form == "ragged":
        c.arrays["index"] = np.array([src.int(0, E - 1) for _ in range(B)], np.int64)
    if src.chance(64):
        c.kw["modes"] = src.pick(["nearest", ["previous"] * K, ["linear"] * (K + 1), {"a": "next"}, Raises()])
    c.kw_container = src.pick(["list", "list", "tuple", "dict"])
    c.K, c.fuse_form = K, form
    return "fuse", ()


KW_JUNK = {
    "mode": ["linear", "nearest", "cubic", b"linear", 3, "LINEAR", "slerp"],
    "tolerance": [0.0, -1.0, float("nan"), float("inf"), "1e-4", 2**1100, 1e-4],
    "return_mask": [True, False, 2, "yes", []],
    "check": [True, False, 0, "x"],
    "stream": [0, 1, -1, 2**65, object(), "s"],
    "grid": [(0, 1, 1), (-1, 2, 2), (2**40, 2**40, 2**40), (2**21, 2**21, 2**21), 2.5, True, (2, 2), (2, 2, 2, 2),
             [3, 3, 3], "2", (2**63, 1, 1), -3],
    "voxel_size": [0.0, -1.0, float("nan"), float("inf"), (1, 1), 1e-300, 1e300, "x", (0.5, 0, 0.5)],
    "origin": [(float("nan"), 0, 0), (1e308, 0, 0), (0, 0), 0.0, (float("-inf"), 0, 0), "abc"],
    "dtype": ["uint8", "bool", "int32", "int64", "float64", "bfloat16", "complex64", "float16", "x", 3, bool],
    "deterministic": [False, True],
    "return_dropped": [True, False],
    "modes": ["nearest", ["x"], {"zz": "next"}, 3],
    "lengths": [None], "offsets": [None], "index": [None], "features": [None],
    "bogus_keyword": [1],
}


def mutate(c, op, required):
    src = c.src
    for _ in range(src.int(0, 3)):
        names = sorted(c.arrays)
        what = src.pick(["corrupt", "corrupt", "reshape", "astype", "kw", "out", "drop", "swap"])
        if what == "corrupt" and names:
            c.corrupt(src.pick(names))
        elif what == "reshape" and names:
            c.reshape(src.pick(names))
        elif what == "astype" and names:
            c.astype(src.pick(names))
        elif what == "kw":
            k = src.pick(sorted(KW_JUNK))
            c.kw[k] = src.pick(KW_JUNK[k] + [Raises()])
            c.exotic = True
            c.note(f"kw {k}={c.kw[k]!r}")
        elif what == "out":
            c.out_kind = src.pick(["right", "wrong-dtype", "wrong-shape", "alias", "read-only", "strided", "forged-ro",
                                   "misaligned", "torch", "0-d"])
            c.note(f"out: {c.out_kind}")
        elif what == "drop" and names:
            n = src.pick(names)
            del c.arrays[n]
            c.note(f"drop {n}")
        elif what == "swap" and len(names) > 1:
            a, b = src.pick(names), src.pick(names)
            c.arrays[a], c.arrays[b] = c.arrays[b], c.arrays[a]
            c.note(f"swap {a} {b}")


def make_out(c, np, like_shape_dtype):
    kind = getattr(c, "out_kind", None)
    if kind is None or like_shape_dtype is None:
        return None
    shape, dtype = like_shape_dtype
    if kind == "right":
        return np.full(shape, 7, dtype)
    if kind == "wrong-dtype":
        return np.zeros(shape, np.float64 if np.dtype(dtype) != np.float64 else np.float32)
    if kind == "wrong-shape":
        return np.zeros(tuple(s + 1 for s in shape) or (1,), dtype)
    if kind == "alias":
        for name, obj in c.passed.items():
            a = obj if isinstance(obj, np.ndarray) else None
            if a is not None and a.size and a.flags.writeable and a.flags.c_contiguous:
                view = a.reshape(-1).view(np.uint8)
                need = int(np.prod(shape)) * np.dtype(dtype).itemsize
                if view.size >= need and need and a.ctypes.data % np.dtype(dtype).itemsize == 0:
                    c.alias_of = name
                    return view[:need].view(dtype).reshape(shape)
        return np.zeros(shape, dtype)
    if kind == "read-only":
        o = np.zeros(shape, dtype)
        o.flags.writeable = False
        return o
    if kind == "strided":
        return np.zeros(tuple(shape) + (2,), dtype)[..., 0] if len(shape) else np.zeros(shape, dtype)
    if kind == "forged-ro":
        f = c.forge.Forged(np.zeros(shape, dtype), flags=1)
        c.forged.append(f)
        return f
    if kind == "misaligned":
        n = int(np.prod(shape))
        return np.frombuffer(bytearray(n * np.dtype(dtype).itemsize + 1), dtype, n, offset=1).reshape(shape)
    if kind == "torch" and c.torch is not None:
        return c.torch.zeros(shape, dtype=getattr(c.torch, np.dtype(dtype).name))
    if kind == "0-d":
        return np.zeros((), dtype)
    return None


def expected_out_shape(c, op, np):
    """(shape, dtype) of the result for a well-formed case, or None."""
    a = c.arrays
    try:
        if op == "resample":
            v, x = a["values"], a["new_times"]
            lead = 1 if ("offsets" in a or a["times"].ndim == 1) else 2
            return (tuple(x.shape) + tuple(v.shape[lead:])), v.dtype
        if op == "fuse":
            x = a["new_times"]
            F = sum(int(np.prod(a[f"v{k}"].shape[1 if c.fuse_form != "dense" else 2:])) for k in range(c.K))
            return tuple(x.shape) + (F,), a["v0"].dtype
        if op == "voxelize":
            g = c.kw.get("grid")
            g = (g,) * 3 if isinstance(g, int) else tuple(g)
            p = a["points"]
            B = () if (p.ndim == 2 and "offsets" not in a) else ((len(a["offsets"]) - 1,) if "offsets" in a
                                                                  else (p.shape[0],))
            mode = c.kw.get("mode", "occupancy")
            if mode in ("sum", "mean", "max"):
                fdt = a["features"].dtype
                return B + (a["features"].shape[-1],) + g, (np.float64 if fdt == np.float64 else np.float32)
            return B + g, (np.float32 if mode == "occupancy" else np.int32)
    except Exception:
        return None


def snapshot(obj, np, torch):
    try:
        if isinstance(obj, np.ndarray):
            return obj.tobytes()
        if torch is not None and isinstance(obj, torch.Tensor):
            return obj.numpy().tobytes()
        if hasattr(obj, "array") and hasattr(obj, "exports"):
            return obj.array.tobytes() if obj.array.size < 2**20 else None
    except Exception:
        return None
    return None


class Finding(AssertionError):
    pass


def run_one(data, env):
    np, torch, forge, robocache, reference = env
    src = Source(data)
    c = Case(src, np, torch, forge)
    try:  # the harness's own generation: its failures are counted, not findings
        op, required = src.pick([gen_resample, gen_voxelize, gen_fuse])(c)
        mutate(c, op, required)
        c.passed = {name: c.wrap(name) for name in sorted(c.arrays)}
        out = make_out(c, np, expected_out_shape(c, op, np))
    except Exception:
        return "generation-error"
    if out is not None:
        c.kw["out"] = out
    args = dict(c.passed)
    if op == "resample":
        pos = [args.pop(n, None) for n in ("values", "times", "new_times")]
        while pos and pos[-1] is None:
            pos.pop()
        fn = lambda: robocache.resample(*pos, **args, **c.kw)  # noqa: E731
    elif op == "voxelize":
        pts = args.pop("points", None)
        fn = lambda: robocache.voxelize(pts, **args, **c.kw)  # noqa: E731
    else:
        streams = []
        for k in range(c.K):
            parts = [args.pop(f"{p}{k}") for p in "vto" if f"{p}{k}" in args]
            streams.append(tuple(parts) if src.byte() < 250 else list(parts))
        if c.kw_container == "dict":
            streams = {f"s{k}": s for k, s in enumerate(streams)}
        elif c.kw_container == "tuple":
            streams = tuple(streams)
        nt = args.pop("new_times", None)
        fn = lambda: robocache.fuse(streams, nt, **args, **c.kw)  # noqa: E731
    out_obj = c.kw.get("out")
    before = {n: snapshot(o, np, torch) for n, o in c.passed.items()}
    allowed = (TypeError, ValueError, BufferError, MemoryError, OverflowError, robocache.CudaError, Injected)
    outcome, result = "ok", None
    try:
        result = fn()
    except allowed as e:
        outcome = type(e).__name__
        if not str(e) and not isinstance(e, (Injected, MemoryError)):
            raise Finding(f"{outcome} with an empty message") from e
    except Exception as e:
        raise Finding(f"unexpected {type(e).__name__}: {e}") from e
    fn = None
    for name, o in c.passed.items():
        if o is out_obj or before[name] is None:
            continue
        after = snapshot(o, np, torch)
        if after != before[name]:
            raise Finding(f"{name} was modified by the call")
    args = streams = pos = pts = nt = None  # drop our references: capsules die, deleters run
    c.passed = None
    for f in c.forged:
        f.release()
        counts = f.deleter_counts()
        if any(n != 1 for n in counts):
            raise Finding(f"deleter calls {counts}, each must be 1")
    if outcome == "ok" and getattr(c, "alias_of", None):
        raise Finding(f"out= aliasing {c.alias_of} was accepted")
    if outcome == "ok" and op == "resample" and not c.exotic:
        check_resample(c, result, np, torch, reference)
    return outcome


def check_resample(c, result, np, torch, reference):
    """Differential oracle for the modes whose answer is exact: previous/next/nearest copy samples."""
    a, mode = c.arrays, c.kw.get("mode", "linear")
    if mode not in ("previous", "next", "nearest") or a["times"].dtype != np.float64:
        return
    if a["new_times"].dtype != np.float64 or a["values"].dtype.kind not in "fiub" or a["values"].dtype == np.float16:
        return
    for x in (a["times"], a["new_times"]):
        if not np.isfinite(x).all():
            return
    got = result[0] if isinstance(result, tuple) else result
    got = got.numpy() if torch is not None and isinstance(got, torch.Tensor) else np.asarray(got)
    want, _ = reference.resample_ref(a["values"], a["times"], a["new_times"], mode, lengths=a.get("lengths"),
                                     offsets=a.get("offsets"), index=a.get("index"))
    if got.shape != want.shape or not np.array_equal(got, want, equal_nan=got.dtype.kind == "f"):
        raise Finding(f"resample {mode} differs from tests/reference.py:\n got {got!r}\nwant {want!r}")


def load_env():
    import numpy as np

    try:
        import torch
    except ImportError:
        torch = None
    import dlpack_forge as forge
    import reference

    import robocache

    return np, torch, forge, robocache, reference


def child(args, rest):
    import ctypes
    import warnings

    warnings.simplefilter("ignore")
    env = load_env()
    print(f"fuzz_args: robocache from {env[3]._C.__file__}", flush=True)
    if args.replay:
        data = Path(args.replay).read_bytes()
        print("input:", data.hex())
        _describe(data, env)
        try:
            print("outcome:", run_one(data, env))
        except Finding as e:
            print("FINDING:", e)
            return 1
        return 0
    shim = ctypes.CDLL(os.environ["RC_FUZZ_SHIM"])
    counters = (ctypes.c_uint8 * COV_N).in_dll(shim, "rc_cov_counters")
    pcs = (ctypes.c_size_t * (2 * COV_N)).in_dll(shim, "rc_cov_pcs")
    outcomes = {}
    n = [0]

    def one(data):
        n[0] += 1
        try:
            o = run_one(data, env)
        except Finding:
            print(f"fuzz_args: {n[0]} executions", flush=True)
            print(f"fuzz_args: outcomes {json.dumps(outcomes)}", flush=True)
            _describe(data, env)
            raise
        outcomes[o] = outcomes.get(o, 0) + 1
        if n[0] % 5000 == 0:
            print(f"fuzz_args: {n[0]} executions", flush=True)
            print(f"fuzz_args: outcomes {json.dumps(outcomes)}", flush=True)

    if args.engine == "atheris":
        import atheris

        atheris.Setup([sys.argv[0]] + rest, one)
        core = [p for p in Path(atheris.__file__).parent.glob("core_with_libfuzzer*.so")]
        lib = ctypes.CDLL(str(core[0]))  # the copy atheris loaded: same handle
        for i in range(COV_N):
            pcs[2 * i] = 0x1000 + i  # libFuzzer wants a PC table as long as the counters
        lib.__sanitizer_cov_8bit_counters_init(ctypes.c_void_p(ctypes.addressof(counters)),
                                               ctypes.c_void_p(ctypes.addressof(counters) + COV_N))
        lib.__sanitizer_cov_pcs_init(ctypes.c_void_p(ctypes.addressof(pcs)),
                                     ctypes.c_void_p(ctypes.addressof(pcs) + 2 * COV_N * ctypes.sizeof(ctypes.c_size_t)))
        import atexit

        atexit.register(lambda: print(f"fuzz_args: outcomes {json.dumps(outcomes)}", flush=True))
        atheris.Fuzz()
        return 0
    return random_engine(args, one, counters)


def _describe(data, env):
    np, torch, forge, robocache, reference = env
    c = Case(Source(data), np, torch, forge)
    try:
        op, required = c.src.pick([gen_resample, gen_voxelize, gen_fuse])(c)
        mutate(c, op, required)
        for name in sorted(c.arrays):
            c.wrap(name)
    except Exception as e:  # describing must not hide the finding
        c.note(f"(describe failed: {e!r})")
    print("fuzz_args: call: " + "; ".join(c.log), flush=True)
    for k, v in sorted(c.arrays.items()):
        print(f"fuzz_args:   {k} = np.{v!r}", flush=True)
    print(f"fuzz_args:   kwargs = {c.kw!r}", flush=True)


def random_engine(args, one, counters):
    """A small coverage-guided loop without libFuzzer: keep inputs that light new edge counters,
    mutate kept inputs (byte flips, inserts, erases, splices)."""
    import random

    import numpy as np

    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    corpus_dir, artifacts = Path(args.corpus), Path(args.artifacts)
    corpus = [p.read_bytes() for p in sorted(corpus_dir.iterdir())] or [b""]
    seen = np.zeros(COV_N, bool)
    hits = np.frombuffer(counters, np.uint8)  # a view: the shim writes, we read
    deadline = time.time() + args.seconds
    execs = 0

    def run(data):
        nonlocal execs
        ctypes_memset(counters)
        try:
            one(data)
        except Exception:
            path = artifacts / f"crash-{os.getpid()}-{execs}"
            path.write_bytes(data)
            print(f"fuzz_args: finding saved to {path}", flush=True)
            raise
        execs += 1
        fresh = (hits != 0) & ~seen
        np.logical_or(seen, fresh, out=seen)
        return int(fresh.sum())

    for d in corpus:
        run(d)
    while time.time() < deadline:
        d = bytearray(rnd.choice(corpus))
        for _ in range(rnd.randint(1, 4)):
            r = rnd.random()
            if r < 0.4 and d:
                d[rnd.randrange(len(d))] = rnd.randrange(256)
            elif r < 0.7:
                d.insert(rnd.randrange(len(d) + 1), rnd.randrange(256))
            elif r < 0.85 and d:
                del d[rnd.randrange(len(d))]
            else:
                d += rnd.choice(corpus)[: rnd.randint(0, 16)]
        d = bytes(d[:512])
        if run(d):
            corpus.append(d)
            (corpus_dir / f"r{len(corpus):06d}").write_bytes(d)
    print(f"fuzz_args: {execs} executions", flush=True)
    print(f"fuzz_args: edges {int(seen.sum())} corpus {len(corpus)}", flush=True)
    return 0


def ctypes_memset(arr):
    import ctypes

    ctypes.memset(ctypes.addressof(arr), 0, ctypes.sizeof(arr))


if __name__ == "__main__":
    raise SystemExit(main())
