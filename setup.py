"""Build of robocache._C: C11 sources with the C compiler, and cuda/*.cu with nvcc when this machine
has an NVIDIA GPU or the CUDA kernels are asked for. Release wheels: tools/build_wheels.sh; what
each option is for: docs/install.md.

Environment:
  ROBOCACHE_CUDA=0|1      0: CPU-only (C) build; 1: CUDA kernels required (error without a toolkit).
                          Unset: CUDA kernels when a toolkit is found AND an NVIDIA GPU is visible
                          here, or when ROBOCACHE_CUDA_HOME or ROBOCACHE_CUDA_ARCHS asks for them;
                          else CPU-only. Login node building for GPU nodes:
                          ROBOCACHE_CUDA=1 ROBOCACHE_CUDA_ARCHS=90 pip install -e .
  ROBOCACHE_CUDA_HOME     the toolkit to build with (its bin/nvcc, include/, lib64/libcudart_static.a).
                          Unset: CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda, first found
  ROBOCACHE_CUDA_ARCHS    "80;90": cubins for these compute capabilities, PTX for the newest.
                          Default 80;86;89;90, plus 100 and 120 when the toolkit knows them
  ROBOCACHE_CUDA_CACHE    the folder where nvcc objects are kept under a hash of everything that goes
                          into them and reused (re-installs skip unchanged kernels; one compile serves
                          every Python's wheel). Unset: cuda-objects/ in robocache's per-user cache
                          folder (ROBOCACHE_CACHE_DIR, $XDG_CACHE_HOME/robocache or
                          ~/.cache/robocache); 0: no cache
  ROBOCACHE_SANITIZE=1    the C sources with ASan + UBSan (fatal, float-cast-overflow included);
                          load it with LD_PRELOAD of gcc's libasan/libubsan (.ci/run,
                          docs/reliability.md)

The build's choice (C-only or CUDA, why, the architectures, how to choose otherwise) ends the build as
a warning, which pip 25 and newer show without -v, and is written to build.log in that cache folder.
"""
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Mapping, NamedTuple

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
BASE_ARCHS = ["80", "86", "89", "90"]
BLACKWELL_ARCHS = ["100", "120"]  # cubins too when the toolkit knows them (CUDA >= 12.8)
ASKS_FOR_CUDA = ("ROBOCACHE_CUDA", "ROBOCACHE_CUDA_HOME", "ROBOCACHE_CUDA_ARCHS")
ONE_ARCH_HINT = "ROBOCACHE_CUDA_ARCHS=90 (H100/H200; 80: A100; 89: L40S, RTX 40)"


class BuildReport(UserWarning):
    """The build's choice, raised as a warning at its end: pip 26.3 and newer show a build's warnings
    without -v (older pip shows nothing of a build that works, unless -v)."""


class Toolkit:
    """A CUDA toolkit: nvcc, its release ("12.4.131") and the static runtime beside it."""

    def __init__(self, nvcc: Path, home: Path):
        self.nvcc = nvcc
        self.home = home
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"release [\d.]+, V([\d.]+)", out)
        self.release = m[1] if m else "unknown"
        self.version_text = out

    def __str__(self) -> str:
        return f"nvcc {self.release} ({self.home})"

    def known_archs(self) -> set:
        r = subprocess.run([str(self.nvcc), "--list-gpu-arch"], capture_output=True, text=True)
        return set(re.findall(r"compute_(\d+)", r.stdout)) if r.returncode == 0 else set()

    def cudart_static(self) -> Path:
        # only beside this nvcc: a runtime from another toolkit would not match its objects
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            lib = self.home / sub / "libcudart_static.a"
            if lib.exists():
                return lib
        raise RuntimeError(f"robocache: {self.nvcc} found, but no libcudart_static.a under {self.home} "
                           "(lib64, lib, targets/*/lib); point ROBOCACHE_CUDA_HOME at a complete toolkit")


def nvcc_top(nvcc: Path) -> Path:
    """The toolkit folder of an nvcc found on PATH (it may be a wrapper script elsewhere): the TOP
    that `nvcc --dryrun` reports, else the folder above its bin/."""
    try:
        dry = subprocess.run([str(nvcc), "--dryrun", "-c", "x.cu"], capture_output=True, text=True).stderr
        top = re.search(r"^#\$ TOP=(.+)$", dry, re.M)
        if top:
            return Path(top[1].strip()).resolve()
    except OSError:
        pass
    return nvcc.resolve().parent.parent


def find_toolkit():
    """The Toolkit of ROBOCACHE_CUDA_HOME when set (None when it has no bin/nvcc: a named toolkit is
    never swapped for another), else of CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda."""
    explicit = os.environ.get("ROBOCACHE_CUDA_HOME", "").strip()
    if explicit:
        nvcc = Path(explicit) / "bin" / "nvcc"
        return Toolkit(nvcc, Path(explicit).resolve()) if nvcc.exists() else None
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var, "").strip()
        if home and (Path(home) / "bin" / "nvcc").exists():
            return Toolkit(Path(home) / "bin" / "nvcc", Path(home).resolve())
    for nvcc in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if nvcc and Path(nvcc).exists():
            return Toolkit(Path(nvcc), nvcc_top(Path(nvcc)))
    return None


def visible_gpus(proc: str = "/proc/driver/nvidia/gpus", dev: str = "/dev", smi: str = "nvidia-smi",
                 timeout: float = 10.0) -> str:
    """How this machine shows an NVIDIA GPU ("" when it shows none), asking nothing that starts CUDA:
    the kernel driver's GPU list, else its device nodes (a container may lack /proc/driver/nvidia),
    else `nvidia-smi -L` (WSL2 has neither), which a wedged driver can hang, hence the timeout.
    CUDA_VISIBLE_DEVICES is not asked: the build is for the machine, not for one process."""
    try:
        n = len(os.listdir(proc))
    except OSError:
        n = 0
    if n:
        return f"the NVIDIA driver lists {n} GPU{'s' if n != 1 else ''} ({proc})"
    try:
        nodes = sorted(f for f in os.listdir(dev) if re.fullmatch(r"nvidia\d+", f))
    except OSError:
        nodes = []
    if nodes:
        return f"{len(nodes)} NVIDIA GPU device node{'s' if len(nodes) != 1 else ''} ({dev}/{nodes[0]})"
    exe = shutil.which(smi)
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    n = sum(line.startswith("GPU ") for line in out.splitlines())
    return f"nvidia-smi -L lists {n} GPU{'s' if n != 1 else ''}" if n else ""


class Choice(NamedTuple):
    """What the build makes: ``cuda`` (the CUDA kernels or not), ``reason`` (why not, compiled in as
    build_info()["cpu_only_reason"]: "disabled", "no-toolkit", "no-gpu"; "" for CUDA) and ``why``, for
    the user."""

    cuda: bool
    reason: str
    why: str


def choose_build(env: Mapping[str, str], toolkit: Callable[[], str], gpus: Callable[[], str]) -> Choice:
    """CUDA kernels or a CPU-only build. ``toolkit``: finds the toolkit ("" none); ``gpus``: the GPU
    probe (visible_gpus); each is called only when the answer depends on it (ROBOCACHE_CUDA=0 runs
    no nvcc, a broken one included). The kernels take minutes to compile and are useless on a
    machine without a GPU, so without a GPU they are built only when asked for: ROBOCACHE_CUDA=1,
    or a toolkit or architectures named. A RuntimeError says what is missing when they are asked
    for and cannot be built."""
    mode = env.get("ROBOCACHE_CUDA", "").strip()
    if mode not in ("", "0", "1"):
        raise RuntimeError(f"robocache: ROBOCACHE_CUDA={mode!r}: expected 0 (CPU-only) or 1 (CUDA kernels)")
    if mode == "0":
        return Choice(False, "disabled", "ROBOCACHE_CUDA=0 asks for it")
    asked = [f"{v}={env[v].strip()}" for v in ASKS_FOR_CUDA if env.get(v, "").strip()]
    found = toolkit()
    if asked and not found:
        home = env.get("ROBOCACHE_CUDA_HOME", "").strip()
        where = (f"ROBOCACHE_CUDA_HOME={home} has no bin/nvcc" if home else
                 "no CUDA toolkit was found (ROBOCACHE_CUDA_HOME, CUDA_HOME, CUDA_PATH, nvcc on PATH, "
                 "/usr/local/cuda)")
        raise RuntimeError(f"robocache: {' '.join(asked)} asks for the CUDA kernels, but {where}; "
                           "ROBOCACHE_CUDA=0 builds without them")
    if asked:
        return Choice(True, "", f"{' '.join(asked)} asks for it")
    if not found:
        return Choice(False, "no-toolkit", "no CUDA toolkit was found (nvcc in CUDA_HOME, CUDA_PATH, PATH "
                                           "or /usr/local/cuda)")
    seen = gpus()
    if not seen:
        return Choice(False, "no-gpu", f"{found} is here, but no NVIDIA GPU is visible (no "
                                       "/proc/driver/nvidia/gpus, /dev/nvidia* or nvidia-smi GPU) and the "
                                       "CUDA kernels were not asked for")
    return Choice(True, "", seen)


def other_way(choice: Choice, pip: str) -> str:
    """The one line that builds the other way."""
    if choice.cuda:
        return f"Without them (~30 s): ROBOCACHE_CUDA=0 {pip}"
    if choice.reason == "no-toolkit":
        return (f"With them: ROBOCACHE_CUDA_HOME=/path/to/cuda {pip}, or install a CUDA wheel "
                "(docs/install.md)")
    login_node = " (a login node building for GPU nodes, say)" if choice.reason == "no-gpu" else ""
    return (f"With them{login_node}: ROBOCACHE_CUDA=1 ROBOCACHE_CUDA_ARCHS=90 {pip}  (90: H100/H200; 80: A100; "
            "89: L40S, RTX 40; without ROBOCACHE_CUDA_ARCHS: all of them, minutes longer)")


def cuda_archs(env: Mapping[str, str], known: set) -> tuple:
    """(architectures, why them): ROBOCACHE_CUDA_ARCHS, else the default list (``known``: those the
    toolkit can compile for)."""
    text = env.get("ROBOCACHE_CUDA_ARCHS", "")
    if text.strip():
        archs = [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
        bad = [a for a in archs if not re.fullmatch(r"\d+[af]?", a)]
        if bad:
            raise RuntimeError(f"robocache: ROBOCACHE_CUDA_ARCHS: expected compute capabilities like 80;90, got {bad}")
        return archs, f"ROBOCACHE_CUDA_ARCHS={text.strip()}"
    archs = BASE_ARCHS + [a for a in BLACKWELL_ARCHS if a in known]
    return archs, (f"the default, every GPU generation from sm_80 (A100) on that this toolkit knows, so the "
                   f"build runs on any of them; for one generation, {len(archs)}x less to compile: {ONE_ARCH_HINT}")


def gencode_flags(archs):
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    newest = max(archs, key=lambda a: int(re.match(r"\d+", a)[0]))  # PTX too: newer GPUs JIT it
    return flags + ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]


def cache_root(env: Mapping[str, str]) -> Path:
    """robocache's per-user cache folder, as robocache.frames.cache_folder.cache_dir finds it (the
    package cannot be imported before it is built): ROBOCACHE_CACHE_DIR, $XDG_CACHE_HOME/robocache,
    ~/.cache/robocache."""
    if env.get("ROBOCACHE_CACHE_DIR"):
        return Path(env["ROBOCACHE_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "robocache"


def cuda_cache_dir(env: Mapping[str, str]):
    """Where nvcc objects are kept (None: nowhere): ROBOCACHE_CUDA_CACHE, 0 or empty for no cache;
    unset: cuda-objects/ in the per-user cache folder, so a re-install skips unchanged kernels."""
    if "ROBOCACHE_CUDA_CACHE" not in env:
        return cache_root(env) / "cuda-objects"
    folder = env["ROBOCACHE_CUDA_CACHE"].strip()
    return Path(folder).expanduser() if folder not in ("", "0") else None


def host_compiler(env: Mapping[str, str]) -> str:
    """The host compiler nvcc runs (NVCC_CCBIN, else gcc on PATH) and its --version: its code is
    part of every object (a -ccbin in NVCC_PREPEND_FLAGS is in the key through those flags)."""
    cc = shutil.which(env.get("NVCC_CCBIN", "").strip() or "gcc")
    if cc is None:
        return "no host compiler found"
    r = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return f"{Path(cc).resolve()}\n{r.stdout}"


def headers(root: Path) -> dict:
    """Every header a .cu can include from the tree, by relative path: any change recompiles every
    kernel (simpler than tracking who includes what, and never stale)."""
    return {str(p.relative_to(root)): p.read_bytes() for d in ("cuda", "csrc")
            for p in sorted((root / d).rglob("*")) if p.suffix in (".h", ".cuh")}


def object_key(source: bytes, header_files: Mapping[str, bytes], toolchain, flags) -> str:
    """The cache name of a kernel's object: a hash of all that goes into it: the source, the tree's
    headers, ``toolchain`` (nvcc's --version and folder, the host compiler, NVCC_*_FLAGS) and nvcc's
    ``flags`` (the architectures among them) with the source folder left out, since pip builds in a
    new temporary folder each time."""
    key = hashlib.sha256()
    for part in [*toolchain, *flags]:
        key.update(part.encode() + b"\0")
    for name in sorted(header_files):
        key.update(name.encode() + b"\0" + header_files[name] + b"\0")
    key.update(source)
    return key.hexdigest()[:24]


CACHE_KEEP = 8  # objects kept per kernel file: a few builds' worth, so the folder does not grow forever


def prune(cache: Path, stem: str) -> None:
    """All but the CACHE_KEEP most recently used objects of one kernel file removed (a hit touches its
    object). Another build sharing the folder may remove a file first: that is no error."""
    def last_use(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    mine = [p for p in cache.glob(f"{stem}-*.o") if re.fullmatch(rf"{re.escape(stem)}-[0-9a-f]{{24}}\.o", p.name)]
    for p in sorted(mine, key=last_use, reverse=True)[CACHE_KEEP:]:
        p.unlink(missing_ok=True)


def take(cached: Path, obj: Path) -> bool:
    """A cached object copied to ``obj`` and marked used, so prune keeps it; False when it is not
    there (never compiled, or pruned by a parallel build a moment ago)."""
    try:
        shutil.copyfile(cached, obj)
        os.utime(cached)
    except FileNotFoundError:
        return False
    return True


def cuda_build_notice(n_files: int, archs, gpus) -> str:
    """What the CUDA part of the build is about to do, how long it takes and how to skip it.
    ``gpus``: how this machine shows a GPU (visible_gpus; empty: it has none)."""
    lines = [f"robocache: compiling {n_files} CUDA file{'s' if n_files != 1 else ''} for {len(archs)} GPU "
             f"architecture{'s' if len(archs) != 1 else ''} "
             f"(sm_{', sm_'.join(archs)}): this takes minutes (~10 min for 6 architectures on a few "
             "cores); each file is reported as it finishes."]
    if not gpus:
        lines.append("robocache: this machine has no NVIDIA GPU: to build without the CUDA kernels (~30 s), "
                     f"ROBOCACHE_CUDA=0 pip install ...; for one GPU generation, {ONE_ARCH_HINT}.")
    else:
        lines.append("robocache: to build faster for this machine's GPU only: ROBOCACHE_CUDA_ARCHS=<its "
                     "compute capability, e.g. 90>; to skip the CUDA kernels: ROBOCACHE_CUDA=0.")
    return "\n".join(lines)


def say(message: str, report=None, printed: bool = True) -> None:
    """Print a build message (``printed``: False when the caller shows it otherwise). pip hides a
    build's output unless -v, so it also goes to the terminal the user is watching, when there is
    one, and to the build's report file (``report``)."""
    if printed:
        print(message, flush=True)
    if not sys.stdout.isatty():
        try:
            with open("/dev/tty", "w") as tty:
                tty.write(message + "\n")
        except OSError:
            pass  # no terminal (CI, a batch job): the log and the report have it
    if report is not None:
        try:
            with open(report, "a") as f:
                f.write(message + "\n")
        except OSError:
            pass  # an unwritable cache folder costs the report, not the build


class BuildExt(build_ext):
    report = None   # the build's report file, set by run (None: compile_cuda called alone, by a test)
    cache_line = ""  # what compile_cuda took from its cache, for the summary

    def run(self):
        self.report = cache_root(os.environ) / "build.log"
        target = Path(self.get_ext_fullpath("robocache._C")).resolve()
        try:
            self.report.parent.mkdir(parents=True, exist_ok=True)
            # python -m robocache info names this file when its first line names the module it runs
            self.report.write_text(f"robocache {VERSION} build of {target}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        except OSError:
            self.report = None
        self.summary = []
        super().run()  # build_extensions, then the copy into the tree of an in-place build
        text = "\n  ".join(self.summary)
        if self.report is not None:
            text += f"\n  `python -m robocache info` says what was built; this report is in {self.report}"
        say(text, self.report, printed=False)
        # the build's last words, on stderr; no line number, so no line of this file is shown under them
        warnings.warn_explicit(text, BuildReport, "setup.py", 0)

    def build_extensions(self):
        ext = self.extensions[0]
        if os.environ.get("ROBOCACHE_SANITIZE") == "1":
            # every UBSan finding is fatal (no recovery); -fno-wrapv undoes CPython's -fwrapv so
            # signed overflow is reported; float-cast-overflow is not part of "undefined" in gcc
            ext.extra_compile_args += ["-fsanitize=address,undefined,float-cast-overflow",
                                       "-fno-sanitize-recover=all", "-fno-wrapv",
                                       "-fno-omit-frame-pointer", "-O1", "-g"]
            ext.extra_link_args += ["-fsanitize=address,undefined,float-cast-overflow"]
        # each looked for once at most, and only when the choice depends on it
        toolkit, gpus = functools.lru_cache(find_toolkit), functools.lru_cache(visible_gpus)
        choice = choose_build(os.environ, lambda: str(toolkit() or ""), gpus)
        pip = "pip install -e ." if self.inplace or getattr(self, "editable_mode", False) else "pip install ."
        if choice.cuda:
            toolkit = toolkit()
            archs, why_archs = cuda_archs(os.environ, toolkit.known_archs())
            ptx = gencode_flags(archs)[-1].split("=")[-1]
            cudart = toolkit.cudart_static()
            objects = self.compile_cuda(toolkit, archs, cuda_cache_dir(os.environ), gpus())
            ext.extra_objects += objects + [str(cudart)]
            # cudart_static's own needs; no libstdc++ symbol is left in practice (not NEEDED)
            ext.extra_link_args += ["-lstdc++", "-lrt", "-ldl", "-lpthread"]
            ext.define_macros += [("RC_WITH_CUDA", "1"), ("RC_CUDA_ARCHS", f'"{";".join(archs)}"'),
                                  ("RC_CUDA_TOOLKIT", f'"{toolkit.release}"')]
            self.summary += [f"robocache {VERSION}: CUDA build with {toolkit}, because {choice.why}; "
                             f"static runtime {cudart}",
                             f"Architectures sm_{', sm_'.join(archs)} + PTX {ptx}: {why_archs}"]
            if self.cache_line:
                self.summary.append(self.cache_line)
        else:
            ext.define_macros += [("RC_CUDA_MISSING", f'"{choice.reason}"')]
            self.summary += [f"robocache {VERSION}: CPU-only build, without the CUDA kernels, because {choice.why}"]
        self.summary.append(other_way(choice, pip))
        super().build_extensions()

    def compile_cuda(self, toolkit: Toolkit, archs, cache=None, gpus=""):
        """nvcc objects of cuda/*.cu: taken from the ``cache`` folder when one is given and holds
        them, the others compiled in parallel (and put there)."""
        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        sources = sorted((ROOT / "cuda").glob("*.cu"))
        flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
                 "-I", str(ROOT / "csrc"), *gencode_flags(archs)]
        cached = {}
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            toolchain = [toolkit.version_text, str(toolkit.home), host_compiler(os.environ),
                         *(os.environ.get(v, "") for v in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"))]
            included = headers(ROOT)
            key_flags = [f.replace(str(ROOT), "<src>") for f in flags]
            cached = {src: cache / f"{src.stem}-{object_key(src.read_bytes(), included, toolchain, key_flags)}.o"
                      for src in sources}
        todo = [src for src in sources if not (src in cached and take(cached[src], out_dir / (src.stem + ".o")))]
        if todo:
            say(cuda_build_notice(len(todo), archs, gpus), self.report)
        start = time.monotonic()
        done = []

        def one(src):
            obj = out_dir / (src.stem + ".o")
            cmd = [str(toolkit.nvcc), *flags, "-c", str(src), "-o", str(obj)]
            print(" ".join(cmd), flush=True)
            t = time.monotonic()
            subprocess.run(cmd, check=True)
            done.append(src)
            say(f"robocache: [{len(done)}/{len(todo)}] {src.name} compiled in {time.monotonic() - t:.0f} s "
                f"({time.monotonic() - start:.0f} s so far)", self.report)
            if src in cached:
                tmp = cached[src].with_suffix(f".tmp{os.getpid()}")
                shutil.copyfile(obj, tmp)
                os.replace(tmp, cached[src])  # atomic: parallel builds may share the folder
                prune(cache, src.stem)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(one, todo))
        if cache is not None:
            self.cache_line = (f"nvcc objects: {len(todo)} compiled, {len(sources) - len(todo)} reused from "
                               f"{cache} (ROBOCACHE_CUDA_CACHE=0: no cache)")
            say(f"robocache: {self.cache_line}", self.report)
        return [str(out_dir / (src.stem + ".o")) for src in sources]


c_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.c"))
# a changed header rebuilds every C source (build_ext otherwise compares .c files only)
c_headers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.h"))
# and a changed .cu/.cuh rebuilds the extension (else an in-place rebuild keeps stale CUDA objects)
cuda_files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cuda").glob("*.cu*"))
setup(
    version=VERSION,
    ext_modules=[
        Extension(
            "robocache._C",
            sources=c_sources,
            depends=c_headers + cuda_files,
            include_dirs=["csrc"],
            define_macros=[("RC_VERSION", f'"{VERSION}"')],
            extra_compile_args=["-std=c11", "-O3", "-ffp-contract=off", "-fvisibility=hidden",
                                "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
            # -lm: sinf & co. bind to a versioned libm symbol, not to whatever the process has
            extra_link_args=["-lpthread", "-lm"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
