"""Checks built wheels of robocache and prints their facts: tags, size, what the extension links,
the CUDA archs inside. Exit status 1 when a wheel leaves a shared library of the build machine
behind (vendored by auditwheel, or needed and outside the manylinux set), carries an RPATH, lacks
its LICENSE, or is not a manylinux wheel.

    python tools/check_wheel.py DIST_DIR_OR_WHEEL... [--expect-cuda]

--expect-cuda also fails a wheel without CUDA cubins (cuobjdump from the toolkit that built it,
CUDA_HOME/bin or PATH, lists them; without cuobjdump the check is skipped with a note).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# what a manylinux wheel may need from the system (PEP 600's libc, libm, libpthread, libdl, librt,
# the loader; libgcc_s and libstdc++ are allowed too, but robocache needs neither)
ALLOWED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
           "ld-linux-x86-64.so.2", "libgcc_s.so.1", "libstdc++.so.6"}


def readelf(args, so):
    return subprocess.run(["readelf", *args, str(so)], capture_output=True, text=True, check=True).stdout


def cuobjdump():
    for home in (os.environ.get("ROBOCACHE_CUDA_HOME"), os.environ.get("CUDA_HOME")):
        if home and (Path(home) / "bin" / "cuobjdump").exists():
            return str(Path(home) / "bin" / "cuobjdump")
    return shutil.which("cuobjdump")


def check(wheel: Path, expect_cuda: bool) -> list:
    problems = []
    name = wheel.name
    tags = name[:-4].split("-")[-3:]
    print(f"{name}\n  size {wheel.stat().st_size / 2**20:.2f} MiB, tags {'-'.join(tags)}")
    if "manylinux" not in tags[2]:
        problems.append(f"{name}: platform tag {tags[2]} is not manylinux (run auditwheel repair)")
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        vendored = [n for n in names if ".libs/" in n]
        if vendored:
            problems.append(f"{name}: libraries copied in from the build machine: {vendored}")
        if not any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names):
            problems.append(f"{name}: no LICENSE in .dist-info/licenses")
        sos = [n for n in names if n.endswith(".so")]
        if not sos:
            problems.append(f"{name}: no extension module")
        for n in sos:
            so = Path(z.extract(n, tmp))
            dyn = readelf(["-d"], so)
            needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
            rpath = re.findall(r"\((?:RPATH|RUNPATH)\)\s+.*\[(.+?)\]", dyn)
            glibc = sorted(set(re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", readelf(["-V"], so))),
                           key=lambda v: tuple(int(x) for x in v.split(".")))
            print(f"  {n}: {so.stat().st_size / 2**20:.1f} MiB, needs {', '.join(needed)}; "
                  f"newest glibc symbol GLIBC_{glibc[-1] if glibc else '-'}")
            outside = [lib for lib in needed if lib not in ALLOWED]
            if outside:
                problems.append(f"{name}: {n} needs {outside}, outside the manylinux set")
            if rpath:
                problems.append(f"{name}: {n} has an RPATH/RUNPATH {rpath} (a path of the build machine)")
            tool = cuobjdump()
            if tool:
                elf = subprocess.run([tool, "--list-elf", str(so)], capture_output=True, text=True).stdout
                ptx = subprocess.run([tool, "--list-ptx", str(so)], capture_output=True, text=True).stdout
                cubins = sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", elf)), key=lambda a: int(a[3:].rstrip("af")))
                ptxs = sorted(set(re.findall(r"\.(sm_\d+[af]?)\.ptx", ptx)))
                per_arch = len(re.findall(r"\.cubin", elf)) // max(len(cubins), 1)
                print(f"  CUDA: cubins {', '.join(cubins) or 'none'} ({per_arch} files each), "
                      f"PTX {', '.join(p.replace('sm_', 'compute_') for p in ptxs) or 'none'}")
                if expect_cuda and not cubins:
                    problems.append(f"{name}: no CUDA cubins in {n}")
            elif expect_cuda:
                print("  CUDA: cuobjdump not found, archs not checked")
    return problems


def main(argv) -> int:
    expect_cuda = "--expect-cuda" in argv
    wheels = []
    for arg in (a for a in argv if not a.startswith("--")):
        p = Path(arg)
        wheels += sorted(p.glob("*.whl")) if p.is_dir() else [p]
    if not wheels:
        print("check_wheel: no wheels given", file=sys.stderr)
        return 1
    problems = [msg for w in wheels for msg in check(w, expect_cuda)]
    for msg in problems:
        print(f"PROBLEM: {msg}", file=sys.stderr)
    print(f"check_wheel: {len(wheels)} wheel(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
