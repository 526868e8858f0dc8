"""Command line: ``python -m robocache info | demo | bench``.

info   build facts (version, CUDA compiled in, archs), the CUDA devices seen, library versions
demo   the main job: a multi-rate dataset through the DataLoader into a small policy (``demo --help``)
bench  the op benchmarks as a table (see robocache/bench.py; ``bench --help``)
"""
import argparse
import platform
import sys

import numpy as np


def info() -> int:
    import robocache

    b = robocache.build_info()
    print(f"robocache {b['version']}")
    if b["cuda"]:
        rt = b["cuda_runtime"]
        print(f"build: CUDA {rt // 1000}.{rt % 1000 // 10} runtime (static), archs sm_"
              + ", sm_".join(b["archs"].split(";")))
        drv = b["cuda_driver"]
        print(f"driver: CUDA {drv // 1000}.{drv % 1000 // 10}" if drv else "driver: none found")
        for d in b["devices"]:
            print(f"device {d['index']}: {d['name']} (sm_{d['capability'][0]}{d['capability'][1]})")
        if not b["devices"]:
            print("devices: none visible" + (f" ({b['device_error']})" if b["device_error"] else ""))
    else:
        print("build: CPU only (no CUDA compiled in)")
    print(f"cpu threads: {robocache.get_num_threads()}")
    print(f"python {platform.python_version()}, numpy {np.__version__}", end="")
    try:
        import torch

        cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"
        print(f", torch {torch.__version__}{cuda}")
    except ImportError:
        print(", torch not installed")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m robocache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["info", "demo", "bench"])
    args, rest = parser.parse_known_args(argv)
    if args.command == "info":
        if rest:
            parser.error(f"info takes no arguments: {' '.join(rest)}")
        return info()
    if args.command == "demo":
        from robocache.demo import main as demo_main

        return demo_main(rest)
    from robocache.bench import main as bench_main

    return bench_main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
