"""Command line: ``python -m robocache info | demo | bench``.

info   build facts (version, CUDA compiled in, archs), whether the kernels are usable here, the CUDA
       devices seen, library versions
demo   the main job: a multi-rate dataset through the DataLoader into a small policy (``demo --help``);
       ``demo --write-lerobot DIR`` writes the same task as a LeRobot v3.0 dataset
bench  the op benchmarks as a table (see robocache/bench/; ``bench --help``)
doctor a source's rates, gaps, clock and file defects: bags, LeRobot, zarr, robomimic (``doctor --help``)
cache  the decoded-frame cache: ``cache list``, ``cache clear (--all | NAME...)``, ``cache dir``
"""
import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _nvjpeg() -> str:
    """The compressed frame tier's GPU decoder on device 0, or why there is none."""
    try:
        from robocache.frames.jpeg import backend
        return "decoded by the " + backend(0)   # "hardware (nvJPEG 13.0.1, <path>)"
    except Exception as e:  # noqa: BLE001 (reported, not fatal: only that tier needs it)
        return f"no GPU decoder ({e})"


def _arch_number(arch: str) -> int:
    return int(arch.rstrip("af"))  # "90a" -> 90


def runs_on(archs: list[str], capability: tuple[int, int]) -> str:
    """How a GPU of ``capability`` runs kernels compiled for ``archs`` (setup.py: cubins for each, PTX
    for the newest): "the sm_86 cubins", "the compute_90 PTX, ...", or "" when it cannot. A cubin
    runs on its own generation at its minor version or a higher one (an "a" cubin on its exact
    version only); the PTX, on any newer GPU, compiled by the driver on first use."""
    major, minor = capability
    dev = major * 10 + minor
    fits = [a for a in archs if (_arch_number(a) == dev if a.endswith("a") else
                                 _arch_number(a) // 10 == major and _arch_number(a) <= dev)]
    if fits:
        return f"the sm_{max(fits, key=_arch_number)} cubins"
    newest = max(archs, key=_arch_number)
    if newest.isdigit() and int(newest) <= dev:  # an "a"/"f" PTX serves its own GPUs only
        return f"the compute_{newest} PTX, compiled by the driver on first use (~/.nv/ComputeCache)"
    return ""


def cuda_usable(b: dict) -> str:
    """Whether this machine runs a CUDA build's kernels: "yes", or "no: why; what to do"."""
    drv, rt = b["cuda_driver"], b["cuda_runtime"]
    if not drv:
        return "no: no NVIDIA driver (no libcuda.so.1); every op runs on the CPU"
    if drv // 1000 < rt // 1000:
        return (f"no: the driver supports CUDA {_cuda_version(drv)}, too old for this build's CUDA "
                f"{_cuda_version(rt)} runtime: CUDA {rt // 1000}.x needs a driver that supports CUDA "
                f"{rt // 1000}.0 or newer (docs/install.md)")
    if not b["devices"]:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        return ("no: no GPU visible" + (f" ({b['device_error']})" if b["device_error"] else "")
                + (f"; CUDA_VISIBLE_DEVICES={hidden!r}" if hidden is not None else ""))
    archs = b["archs"].split(";")
    cannot = [d for d in b["devices"] if not runs_on(archs, tuple(d["capability"]))]
    if not cannot:
        return "yes"
    d = cannot[0]
    cc = f"{d['capability'][0]}{d['capability'][1]}"
    why = (f"device {d['index']} ({d['name']}) is sm_{cc}, which the kernels compiled in do not run on: "
           f"rebuild with ROBOCACHE_CUDA_ARCHS={cc} (docs/install.md)")
    return f"no: {why}" if len(cannot) == len(b["devices"]) else \
        f"yes, on {len(b['devices']) - len(cannot)} of {len(b['devices'])} devices; {why}"


CPU_ONLY_WHY = {"disabled": "built with ROBOCACHE_CUDA=0",
                "no-toolkit": "no CUDA toolkit at build time",
                "no-gpu": "no NVIDIA GPU visible at build time, and the kernels were not asked for"}


def build_report() -> str:
    """The build report setup.py wrote (the build's choice and why, the architectures and why),
    when it is this module's build: "" otherwise (a wheel, a later build elsewhere)."""
    import robocache
    from robocache.frames.cache_folder import cache_dir

    report = cache_dir() / "build.log"
    try:
        with open(report) as f:
            first = f.readline()
    except OSError:
        return ""
    return str(report) if f" build of {Path(robocache._C.__file__).resolve()}," in first else ""


def info() -> int:
    """First line: whether the CUDA kernels are compiled in, for which GPUs (and what to do when
    they are not); then the driver, the devices, whether the kernels are usable here and why not,
    the CPU threads and the library versions."""
    import robocache
    from .machine import driver as nvidia

    b = robocache.build_info()
    drv, rt = b["cuda_driver"], b["cuda_runtime"]
    driver = (f"driver: NVIDIA {b['nvidia_driver'] or '(release unknown)'}, supports CUDA {_cuda_version(drv)}"
              if drv else "driver: none found (no libcuda.so.1)")
    if b["cuda"]:
        archs = b["archs"].split(";")
        newest = max(archs, key=_arch_number)
        print(f"robocache {b['version']}: CUDA kernels compiled in (toolkit {b['cuda_toolkit'] or '?'}, "
              f"runtime {_cuda_version(rt)} linked statically; cubins sm_{', sm_'.join(archs)} + PTX compute_{newest})")
        print(driver)
        for d in b["devices"]:
            cc = tuple(d["capability"])
            how = runs_on(archs, cc)
            print(f"device {d['index']}: {d['name']} (sm_{cc[0]}{cc[1]}): " + (f"runs {how}" if how else
                  "cannot run these kernels"))
        if b["devices"]:
            print(f"compressed frames: {_nvjpeg()}")
        print(f"CUDA kernels usable here: {cuda_usable(b)}")
    else:
        reason = b["cpu_only_reason"]
        todo = ("install a CUDA wheel or rebuild with a toolkit" if reason == "no-toolkit" else
                "rebuild with ROBOCACHE_CUDA=1")
        print(f"robocache {b['version']}: CPU-only build, no CUDA kernels compiled in "
              f"({CPU_ONLY_WHY.get(reason, reason)}); for the GPU kernels {todo}: docs/install.md")
        print(driver + (" -- unused by this CPU-only build" if drv else ""))
        gpus = nvidia.nvidia_gpus()
        print("CUDA kernels usable here: no, none compiled in" + (
            f", though the driver lists {gpus} NVIDIA GPU{'s' if gpus != 1 else ''}: {todo}" if gpus else ""))
    report = build_report()
    if report:
        print(f"build report (what was built, why, how to build otherwise): {report}")
    print(f"cpu threads: {robocache.get_num_threads()}")
    print(f"python {platform.python_version()}, numpy {np.__version__}", end="")
    try:
        import torch

        cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"
        print(f", torch {torch.__version__}{cuda}")
    except ImportError:
        print(", torch not installed")
    print(f"installed at {Path(robocache.__file__).parent}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m robocache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["info", "demo", "bench", "doctor", "cache"])
    # only the command is ours: the rest, --help included, goes to the subcommand's own parser
    args, rest = parser.parse_args(argv[:1]), list(argv[1:])
    if args.command == "info":
        if rest in (["-h"], ["--help"]):
            print(f"usage: python -m robocache info\n\n{info.__doc__}")
            return 0
        if rest:
            parser.error(f"info takes no arguments: {' '.join(rest)}")
        return info()
    if args.command == "doctor":
        from robocache.doctor import main as doctor_main

        return doctor_main(rest)
    if args.command == "cache":
        from robocache.frames.cache import main as cache_main

        return cache_main(rest)
    if args.command == "demo":
        from robocache.demo import main as demo_main

        return demo_main(rest)
    from robocache.bench import main as bench_main

    return bench_main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
