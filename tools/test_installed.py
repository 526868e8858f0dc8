"""Runs the project's tests against the INSTALLED robocache (a wheel in site-packages), not the
source tree: the repository is copied into a scratch folder WITHOUT its robocache/ package (tests,
examples, docs, README and pyproject stay, for the tests that read them), the data folder is
linked beside the copy as ../shared is beside the repository, and pytest runs there after
checking where `import robocache` resolves.

    python tools/test_installed.py REPO [pytest arguments...]     e.g.  REPO -q -m cuda

Tests that read the source tree (test_layering.py, test_loader_rooms.py and test_architecture_doc.py: they
parse robocache/ and csrc/) are left out.
The data comes from ROBOCACHE_DATA, else REPO/../shared/data, else REPO/shared/data; tests that
need it skip when none exists. Exit status: pytest's.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE_TREE_TESTS = ["test_layering.py", "test_loader_rooms.py", "test_architecture_doc.py"]


def leave_out(repo: Path):
    """copytree's ignore: the package (the point of the exercise), build outputs, hidden folders at
    the top (.git, carried wheels and data), caches."""
    def ignore(folder: str, names: list) -> set:
        top = Path(folder).resolve() == repo
        return {n for n in names
                if n in ("__pycache__", ".pytest_cache", ".hypothesis") or n.endswith((".so", ".pyc"))
                or (top and (n in ("robocache", "build", "dist") or n.startswith(".") or n.endswith(".egg-info")))}
    return ignore


def main(argv) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    repo = Path(argv[0]).resolve()
    with tempfile.TemporaryDirectory(prefix="robocache-installed-") as tmp:
        work = Path(tmp) / "main"
        shutil.copytree(repo, work, ignore=leave_out(repo), symlinks=True)
        env = dict(os.environ)
        data = [Path(p) for p in (env.get("ROBOCACHE_DATA"),) if p] + [repo.parent / "shared" / "data",
                                                                       repo / "shared" / "data"]
        data = next((p for p in data if p.is_dir()), None)
        if data is not None:
            env["ROBOCACHE_DATA"] = str(data)
            (Path(tmp) / "shared").mkdir()
            (Path(tmp) / "shared" / "data").symlink_to(data)  # ../shared/data, as the docs name it
        env.pop("PYTHONPATH", None)  # nothing may point back into the source tree
        where = subprocess.run([sys.executable, "-c", "import robocache; print(robocache.__file__)"],
                               cwd=work, env=env, capture_output=True, text=True)
        if where.returncode != 0:
            print(where.stderr, file=sys.stderr)
            return 1
        location = Path(where.stdout.strip()).resolve()
        print(f"test_installed: robocache from {location.parent}; tests copied to {work}; "
              f"data {data or 'none (tests that need it skip)'}", flush=True)
        if repo in location.parents:
            print(f"test_installed: {location} is in the source tree {repo}, not an installed package",
                  file=sys.stderr)
            return 1
        ignore = [f"--ignore=tests/{name}" for name in SOURCE_TREE_TESTS]
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(work), *ignore,
               "tests", *argv[1:]]
        return subprocess.run(cmd, cwd=work, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
