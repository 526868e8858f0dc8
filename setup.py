"""Build of robocache._C: C11 sources with the C compiler, cuda/*.cu with nvcc when present.

ROBOCACHE_CUDA=0 forces a CPU-only build, =1 requires CUDA (error if nvcc is missing); unset:
CUDA when nvcc is found (CUDA_HOME, PATH, /usr/local/cuda). ROBOCACHE_CUDA_ARCHS="80;90"
overrides the compute capabilities (cubins for each, PTX for the newest).
ROBOCACHE_SANITIZE=1 builds the C sources with ASan + UBSan (fatal, float-cast-overflow included);
load it with LD_PRELOAD of gcc's libasan/libubsan (see .ci/run and docs/reliability.md).
"""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
DEFAULT_ARCHS = "80;86;89;90"


def find_nvcc():
    mode = os.environ.get("ROBOCACHE_CUDA", "").strip()
    if mode == "0":
        return None
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
    if shutil.which("nvcc"):
        candidates.append(Path(shutil.which("nvcc")))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for nvcc in candidates:
        if nvcc.exists():
            return nvcc.resolve()
    if mode == "1":
        raise RuntimeError("ROBOCACHE_CUDA=1 but nvcc was not found (set CUDA_HOME or PATH)")
    return None


def cuda_homes(nvcc):
    """Where the toolkit may live: CUDA_HOME, nvcc's own TOP (nvcc may be a wrapper script
    elsewhere on PATH), its parent folder, /usr/local/cuda."""
    homes = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    try:
        dry = subprocess.run([str(nvcc), "--dryrun", "-c", "x.cu"], capture_output=True, text=True).stderr
        top = re.search(r"^#\$ TOP=(.+)$", dry, re.M)
        if top:
            homes.append(Path(top[1].strip()).resolve())
    except OSError:
        pass
    return homes + [nvcc.parent.parent, Path("/usr/local/cuda")]


def cuda_lib_dir(nvcc):
    homes = cuda_homes(nvcc)
    for home in homes:
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            if (home / sub / "libcudart_static.a").exists():
                return home / sub
    raise RuntimeError(f"libcudart_static.a not found under any of {[str(h) for h in homes]}")


def gencode_flags(archs):
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    newest = max(archs, key=int)  # PTX too, so newer GPUs can JIT it
    return flags + ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]


class BuildExt(build_ext):
    def build_extensions(self):
        nvcc = find_nvcc()
        ext = self.extensions[0]
        sanitize = os.environ.get("ROBOCACHE_SANITIZE") == "1"
        if sanitize:
            # every UBSan finding is fatal (no recovery); -fno-wrapv undoes CPython's -fwrapv so
            # signed overflow is reported; float-cast-overflow is not part of "undefined" in gcc
            ext.extra_compile_args += ["-fsanitize=address,undefined,float-cast-overflow",
                                       "-fno-sanitize-recover=all", "-fno-wrapv",
                                       "-fno-omit-frame-pointer", "-O1", "-g"]
            ext.extra_link_args += ["-fsanitize=address,undefined,float-cast-overflow"]
        if nvcc is not None:
            archs = [a.strip() for a in os.environ.get("ROBOCACHE_CUDA_ARCHS", DEFAULT_ARCHS).replace(",", ";").split(";") if a.strip()]
            lib_dir = cuda_lib_dir(nvcc)
            objects = self.compile_cuda(nvcc, archs)
            ext.extra_objects += objects + [str(lib_dir / "libcudart_static.a")]
            ext.extra_link_args += ["-lstdc++", "-lrt", "-ldl", "-lpthread"]
            ext.define_macros += [("RC_WITH_CUDA", "1"), ("RC_CUDA_ARCHS", f'"{";".join(archs)}"')]
            print(f"robocache: CUDA build with {nvcc} for sm_{', sm_'.join(archs)}")
        else:
            print("robocache: CPU-only build (no nvcc, or ROBOCACHE_CUDA=0)")
        super().build_extensions()

    def compile_cuda(self, nvcc, archs):
        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        sources = sorted((ROOT / "cuda").glob("*.cu"))
        flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
                 "-I", str(ROOT / "csrc"), *gencode_flags(archs)]

        def one(src):
            obj = out_dir / (src.stem + ".o")
            cmd = [str(nvcc), *flags, "-c", str(src), "-o", str(obj)]
            print(" ".join(cmd))
            subprocess.run(cmd, check=True)
            return str(obj)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return list(pool.map(one, sources))


c_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.c"))
# a changed header rebuilds every C source (build_ext otherwise compares .c files only)
c_headers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.h"))
setup(
    version=VERSION,
    ext_modules=[
        Extension(
            "robocache._C",
            sources=c_sources,
            depends=c_headers,
            include_dirs=["csrc"],
            define_macros=[("RC_VERSION", f'"{VERSION}"')],
            extra_compile_args=["-std=c11", "-O3", "-ffp-contract=off", "-fvisibility=hidden",
                                "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
            extra_link_args=["-lpthread"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
