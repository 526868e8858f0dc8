"""Command line: ``python -m robocache info | demo | bench``.

info   build facts (version, CUDA compiled in, archs), the CUDA devices seen, library versions
demo   the main job: a multi-rate dataset through the DataLoader into a small policy (``demo --help``);
       ``demo --write-lerobot DIR`` writes the same task as a LeRobot v3.0 dataset
bench  the op benchmarks as a table (see robocache/bench/; ``bench --help``)
doctor a source's rates, gaps, clock and file defects: bags, LeRobot, zarr, robomimic (``doctor --help``)
cache  the decoded-frame cache: ``cache list``, ``cache clear (--all | NAME...)``, ``cache dir``
"""
import argparse
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


def info() -> int:
    """First line: whether the CUDA kernels are compiled in (and what to do when they are not);
    then the driver, the devices, the CPU threads and the library versions."""
    import robocache

    b = robocache.build_info()
    drv, rt = b["cuda_driver"], b["cuda_runtime"]
    driver = (f"driver: NVIDIA {b['nvidia_driver'] or '(release unknown)'}, supports CUDA {_cuda_version(drv)}"
              if drv else "driver: none found (no libcuda.so.1)")
    if b["cuda"]:
        archs = b["archs"].split(";")
        newest = max(archs, key=lambda a: int("".join(c for c in a if c.isdigit())))
        print(f"robocache {b['version']}: CUDA kernels compiled in (toolkit {b['cuda_toolkit'] or '?'}, "
              f"runtime {_cuda_version(rt)} linked statically; cubins sm_{', sm_'.join(archs)} + PTX compute_{newest})")
        if drv and drv // 1000 < rt // 1000:
            driver += (f" -- too old for this build's CUDA {_cuda_version(rt)} runtime: CUDA {rt // 1000}.x "
                       f"needs a driver that supports CUDA {rt // 1000}.0 or newer (docs/install.md)")
        print(driver)
        for d in b["devices"]:
            print(f"device {d['index']}: {d['name']} (sm_{d['capability'][0]}{d['capability'][1]})")
        if b["devices"]:
            print(f"compressed frames: {_nvjpeg()}")
        if not b["devices"]:
            print("devices: none visible" + (f" ({b['device_error']})" if b["device_error"] else ""))
    else:
        why = ("built with ROBOCACHE_CUDA=0" if b["cpu_only_reason"] == "disabled"
               else "no CUDA toolkit at build time")
        print(f"robocache {b['version']}: CPU-only build, no CUDA kernels compiled in ({why}); "
              "for the GPU kernels install a CUDA wheel or rebuild with a toolkit: docs/install.md")
        print(driver + (" -- unused by this CPU-only build" if drv else ""))
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
