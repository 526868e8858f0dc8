"""Build of robocache._C: C11 sources with the C compiler, cuda/*.cu with nvcc when a CUDA toolkit
is found. Release wheels: tools/build_wheels.sh; what each option is for: docs/install.md.

Environment:
  ROBOCACHE_CUDA=0|1      0: CPU-only build; 1: CUDA required (error without a toolkit); unset:
                          CUDA when a toolkit is found, else CPU-only with a notice at the end
  ROBOCACHE_CUDA_HOME     the toolkit to build with (its bin/nvcc, include/, lib64/libcudart_static.a).
                          Unset: CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda, first found
  ROBOCACHE_CUDA_ARCHS    "80;90": cubins for these compute capabilities, PTX for the newest.
                          Default 80;86;89;90, plus 100 and 120 when the toolkit knows them
  ROBOCACHE_CUDA_CACHE    a folder: nvcc objects are kept there under a hash of everything that
                          goes into them and reused (they do not depend on the Python version, so
                          one compile serves every wheel, and CI's editable build serves its wheel)
  ROBOCACHE_SANITIZE=1    the C sources with ASan + UBSan (fatal, float-cast-overflow included);
                          load it with LD_PRELOAD of gcc's libasan/libubsan (.ci/run,
                          docs/reliability.md)
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
BASE_ARCHS = ["80", "86", "89", "90"]
BLACKWELL_ARCHS = ["100", "120"]  # cubins too when the toolkit knows them (CUDA >= 12.8)


class Toolkit:
    """A CUDA toolkit: nvcc, its release ("12.4.131") and the static runtime beside it."""

    def __init__(self, nvcc: Path, home: Path):
        self.nvcc = nvcc
        self.home = home
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"release [\d.]+, V([\d.]+)", out)
        self.release = m[1] if m else "unknown"
        self.version_text = out

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
    """(Toolkit or None, why none): ROBOCACHE_CUDA_HOME (must hold nvcc), CUDA_HOME, CUDA_PATH,
    nvcc on PATH, /usr/local/cuda."""
    mode = os.environ.get("ROBOCACHE_CUDA", "").strip()
    if mode == "0":
        return None, "disabled"
    explicit = os.environ.get("ROBOCACHE_CUDA_HOME", "").strip()
    if explicit:
        nvcc = Path(explicit) / "bin" / "nvcc"
        if not nvcc.exists():
            raise RuntimeError(f"robocache: ROBOCACHE_CUDA_HOME={explicit} has no bin/nvcc")
        return Toolkit(nvcc, Path(explicit).resolve()), ""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var, "").strip()
        if home and (Path(home) / "bin" / "nvcc").exists():
            return Toolkit(Path(home) / "bin" / "nvcc", Path(home).resolve()), ""
    for nvcc in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if nvcc and Path(nvcc).exists():
            return Toolkit(Path(nvcc), nvcc_top(Path(nvcc))), ""
    if mode == "1":
        raise RuntimeError("robocache: ROBOCACHE_CUDA=1 but no CUDA toolkit was found "
                           "(set ROBOCACHE_CUDA_HOME or CUDA_HOME, or put nvcc on PATH)")
    return None, "no-toolkit"


def cuda_archs(toolkit: Toolkit) -> list:
    env = os.environ.get("ROBOCACHE_CUDA_ARCHS", "").replace(",", ";")
    if env.strip():
        archs = [a.strip() for a in env.split(";") if a.strip()]
        bad = [a for a in archs if not re.fullmatch(r"\d+[af]?", a)]
        if bad:
            raise RuntimeError(f"robocache: ROBOCACHE_CUDA_ARCHS: expected compute capabilities like 80;90, got {bad}")
        return archs
    known = toolkit.known_archs()
    return BASE_ARCHS + [a for a in BLACKWELL_ARCHS if a in known]


def gencode_flags(archs):
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    newest = max(archs, key=lambda a: int(re.match(r"\d+", a)[0]))  # PTX too: newer GPUs JIT it
    return flags + ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]


CPU_ONLY_NOTICE = """
==========================================================================================
robocache {version}: CPU-ONLY BUILD. No CUDA toolkit was found (nvcc in ROBOCACHE_CUDA_HOME,
CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda), so no CUDA kernels are compiled in: the ops run
on the CPU and CUDA tensors are refused with robocache.CudaError.
For the GPU kernels, install a CUDA wheel of robocache (no compiler needed; docs/install.md),
or rebuild from source with a toolkit:  ROBOCACHE_CUDA_HOME=/usr/local/cuda pip install ...
To build CPU-only on purpose and silence this: ROBOCACHE_CUDA=0.
==========================================================================================
"""


def visible_gpus() -> int:
    """NVIDIA GPUs the driver lists on this machine (0 without a driver): a build without one makes
    kernels for another machine, which is worth saying since it costs minutes."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def cuda_build_notice(n_files: int, archs, gpus: int) -> str:
    """What the CUDA part of the build is about to do, how long it takes and how to skip it."""
    lines = [f"robocache: compiling {n_files} CUDA files for {len(archs)} GPU architectures "
             f"(sm_{', sm_'.join(archs)}): this takes minutes (~10 min for 6 architectures on a few "
             "cores); each file is reported as it finishes."]
    if gpus == 0:
        lines.append("robocache: this machine has no NVIDIA GPU: to build without the CUDA kernels (~30 s), "
                     "ROBOCACHE_CUDA=0 pip install ...; for one GPU generation, ROBOCACHE_CUDA_ARCHS=90.")
    else:
        lines.append("robocache: to build faster for this machine's GPU only: ROBOCACHE_CUDA_ARCHS=<its "
                     "compute capability, e.g. 90>; to skip the CUDA kernels: ROBOCACHE_CUDA=0.")
    return "\n".join(lines)


def say(message: str) -> None:
    """Print a build message. pip hides a build's output unless -v, so a build that takes minutes also
    writes it to the terminal the user is watching, when there is one."""
    print(message, flush=True)
    if not sys.stdout.isatty():
        try:
            with open("/dev/tty", "w") as tty:
                tty.write(message + "\n")
        except OSError:
            pass  # no terminal (CI, a batch job): the log has it


class BuildExt(build_ext):
    def build_extensions(self):
        toolkit, why_not = find_toolkit()
        ext = self.extensions[0]
        if os.environ.get("ROBOCACHE_SANITIZE") == "1":
            # every UBSan finding is fatal (no recovery); -fno-wrapv undoes CPython's -fwrapv so
            # signed overflow is reported; float-cast-overflow is not part of "undefined" in gcc
            ext.extra_compile_args += ["-fsanitize=address,undefined,float-cast-overflow",
                                       "-fno-sanitize-recover=all", "-fno-wrapv",
                                       "-fno-omit-frame-pointer", "-O1", "-g"]
            ext.extra_link_args += ["-fsanitize=address,undefined,float-cast-overflow"]
        if toolkit is not None:
            archs = cuda_archs(toolkit)
            cudart = toolkit.cudart_static()
            objects = self.compile_cuda(toolkit, archs)
            ext.extra_objects += objects + [str(cudart)]
            # cudart_static's own needs; no libstdc++ symbol is left in practice (not NEEDED)
            ext.extra_link_args += ["-lstdc++", "-lrt", "-ldl", "-lpthread"]
            ext.define_macros += [("RC_WITH_CUDA", "1"), ("RC_CUDA_ARCHS", f'"{";".join(archs)}"'),
                                  ("RC_CUDA_TOOLKIT", f'"{toolkit.release}"')]
            print(f"robocache: CUDA {toolkit.release} build with {toolkit.nvcc} for sm_{', sm_'.join(archs)} "
                  f"(PTX {gencode_flags(archs)[-1].split('=')[-1]}), static runtime {cudart}")
        else:
            ext.define_macros += [("RC_CUDA_MISSING", f'"{why_not}"')]
        self.cpu_only_reason = "" if toolkit is not None else why_not
        super().build_extensions()

    def run(self):
        self.cpu_only_reason = ""
        super().run()  # build_extensions, then the copy into the tree of an in-place build
        if self.cpu_only_reason == "disabled":
            print("robocache: CPU-only build (ROBOCACHE_CUDA=0)")
        elif self.cpu_only_reason:
            # the build's last words; pip shows them with -v only, hence the warning at import
            sys.stdout.flush()
            print(CPU_ONLY_NOTICE.format(version=VERSION), file=sys.stderr, flush=True)

    def compile_cuda(self, toolkit: Toolkit, archs):
        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        sources = sorted((ROOT / "cuda").glob("*.cu"))
        say(cuda_build_notice(len(sources), archs, visible_gpus()))
        start = time.monotonic()
        done = []
        flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
                 "-I", str(ROOT / "csrc"), *gencode_flags(archs)]
        cache = os.environ.get("ROBOCACHE_CUDA_CACHE", "").strip()
        if cache:
            Path(cache).mkdir(parents=True, exist_ok=True)
            # every header a .cu can include (ours; the toolkit's through its version text)
            headers = sorted([*(ROOT / "cuda").glob("*.cuh"), *(ROOT / "csrc").glob("*.h")])
            common = hashlib.sha256()
            # flags with the source folder left out: pip builds in a new temporary folder each time
            env_flags = [os.environ.get(v, "") for v in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")]
            for part in [toolkit.version_text, str(toolkit.home), *env_flags,
                         *(f.replace(str(ROOT), "<src>") for f in flags)]:
                common.update(part.encode() + b"\0")
            for h in headers:
                common.update(h.name.encode() + b"\0" + h.read_bytes())

        def one(src):
            obj = out_dir / (src.stem + ".o")
            if cache:
                key = common.copy()
                key.update(src.read_bytes())
                cached = Path(cache) / f"{src.stem}-{key.hexdigest()[:24]}.o"
                if cached.exists():
                    shutil.copyfile(cached, obj)
                    print(f"robocache: {src.name}: cached object {cached}")
                    return str(obj)
            cmd = [str(toolkit.nvcc), *flags, "-c", str(src), "-o", str(obj)]
            print(" ".join(cmd), flush=True)
            t = time.monotonic()
            subprocess.run(cmd, check=True)
            done.append(src)
            say(f"robocache: [{len(done)}/{len(sources)}] {src.name} compiled in {time.monotonic() - t:.0f} s "
                f"({time.monotonic() - start:.0f} s so far)")
            if cache:
                tmp = cached.with_suffix(f".tmp{os.getpid()}")
                shutil.copyfile(obj, tmp)
                os.replace(tmp, cached)  # atomic: parallel builds may share the folder
            return str(obj)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return list(pool.map(one, sources))


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
