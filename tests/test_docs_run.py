"""The README and docs/*.md run as written: every fenced ```python block is executed, and the command
line the README points to answers ``--help`` for each subcommand.

How the blocks run (the convention the docs follow):

- Every ```python block of README.md and docs/*.md runs, in the order of its page, in one namespace
  per page (a doctest-like session: a block may use the names an earlier block of the same page
  made), with matplotlib's Agg backend. Other fences (shell, C, plain text) are not run.
- The working directory is a scratch folder laid out like a checkout: ``../shared/data`` next to it
  is the real-data folder (``ROBOCACHE_DATA``, else ``../shared/data`` beside the repository), so
  paths in the docs read as they do from the repository root, and files a block writes (a
  checkpoint) land in the scratch folder.
- An HTML comment on the line before a block's fence says when it cannot run here; it is invisible
  on GitHub:

  ``<!-- docs-test: skip: why -->``        never run (an API signature, a torchrun-only fragment);
                                            the reason is required.
  ``<!-- docs-test: cuda -->``             run only when torch sees a GPU and robocache has CUDA.
  ``<!-- docs-test: data PATH -->``        run only when PATH (relative to the working directory, e.g.
                                            ``../shared/data/groot_picknplace``) exists.

  A block skipped for ``cuda`` or ``data`` skips the later blocks of its page too (they may use its
  names). Everything else must run on the CPU; a failure names the page and the line of the block.
- README.md is what a new user has: its blocks need nothing but the package (no ``data`` marker: data
  comes from ``robocache.demo.write_lerobot``), and a block that uses names an earlier block made
  says so on its first line (``# continues the block above (ds, loader)``). CI runs them in a copy
  of the tree with no ``../shared`` beside it (.ci/run).
- Blocks that pick a device should say ``"cuda" if torch.cuda.is_available() else "cpu"`` (or leave
  it to the Dataset's default) rather than hard-code "cuda", so they run everywhere.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)[^\n]*$")


def blocks(path: Path) -> list[dict]:
    """The fenced blocks of a page: ``{"lang", "line" (1-based, of the fence), "code", "marker"}``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mk = MARKER.search(prev)
        code = textwrap.dedent("\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]))
        out.append({"lang": lang, "line": i + 1, "code": code, "marker": mk.group(1) if mk else None})
        i = j + 1
    return out


def python_blocks():
    for page in PAGES:
        for b in blocks(page):
            if b["lang"] in ("python", "py"):
                yield pytest.param(page, b, id=f"{page.relative_to(REPO)}:{b['line']}")


def _cuda() -> bool:
    try:
        import torch

        import robocache
        return torch.cuda.is_available() and robocache.build_info()["cuda"]
    except Exception:  # noqa: BLE001 - no torch, no build: no GPU here
        return False


def _why_not(marker: str | None, cwd: Path) -> str | None:
    """Why a block with this marker cannot run here (None: it runs); ValueError for an unknown marker."""
    if marker is None:
        return None
    if marker.startswith("skip"):
        reason = marker[4:].lstrip(": ").strip()
        if not reason:
            raise ValueError("<!-- docs-test: skip: ... --> needs a reason")
        return f"not run: {reason}"
    if marker == "cuda":
        return None if _cuda() else "needs a CUDA GPU and a CUDA build of robocache"
    if marker.startswith("data "):
        path = marker[5:].strip()
        return None if (cwd / path).exists() else f"needs {path}, absent here"
    raise ValueError(f"unknown docs-test marker {marker!r}: skip: why / cuda / data PATH")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch checkout-like folder: cwd ``T/repo`` with ``T/shared/data`` -> the real data."""
    root = tmp_path_factory.mktemp("docs")
    data = Path(os.environ.get("ROBOCACHE_DATA") or REPO.parent / "shared" / "data")
    (root / "shared").mkdir()
    if data.is_dir():
        (root / "shared" / "data").symlink_to(data.resolve(), target_is_directory=True)
    (root / "repo").mkdir()
    return root / "repo"


_sessions: dict[Path, dict] = {}

def _marker(page: Path, b: dict) -> str | None:
    return b["marker"]


def _run(page: Path, b: dict, ns: dict, cwd: Path) -> None:
    import matplotlib
    matplotlib.use("Agg", force=True)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = compile(b["code"], f"{page.relative_to(REPO)}:{b['line']}", "exec")
        exec(code, ns)  # noqa: S102 - the docs' own code
    finally:
        os.chdir(old)
        import matplotlib.pyplot as plt
        plt.close("all")


@pytest.mark.filterwarnings("ignore:.*none of its files exist")
@pytest.mark.parametrize("page,block", list(python_blocks()))
def test_code_block_runs(page, block, workdir):
    """Run the page's blocks up to this one (once per page), then this one."""
    s = _sessions.setdefault(page, {"ns": {"__name__": "__docs__"}, "done": [], "skip": None, "failed": None})
    todo = [b for b in blocks(page) if b["lang"] in ("python", "py")]
    for b in todo:
        if b["line"] in s["done"]:
            if b["line"] == block["line"]:
                break
            continue
        marker = _marker(page, b)
        why = _why_not(marker, workdir)
        if s["failed"] is not None and not (marker or "").startswith("skip"):
            s["done"].append(b["line"])
            if b["line"] == block["line"]:
                pytest.fail(f"an earlier block of {page.name} (line {s['failed']}) failed; this one needs its names")
            continue
        if why is None and s["skip"] is not None:
            why = f"an earlier block of the page was skipped ({s['skip']})"
        s["done"].append(b["line"])
        if why is not None:
            if s["skip"] is None and not (marker or "").startswith("skip"):
                s["skip"] = why            # later blocks may need its names
            if b["line"] == block["line"]:
                pytest.skip(why)
            continue
        try:
            _run(page, b, s["ns"], workdir)
        except BaseException:
            s["failed"] = b["line"]
            raise
        if b["line"] == block["line"]:
            break


def test_every_page_has_blocks_parsed():
    """The extractor finds the README's blocks (a broken fence regex must not make the test vacuous)."""
    readme = blocks(REPO / "README.md")
    assert sum(b["lang"] == "python" for b in readme) >= 3
    assert all(b["code"].strip() for b in readme)


def _free_names(code: str) -> set[str]:
    """Names a block reads that it never binds (by assignment, import, def, class, argument,
    loop or comprehension target) and that are not builtins: what it needs from an earlier block."""
    import ast
    import builtins

    tree = ast.parse(code)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def test_readme_blocks_need_only_the_package():
    """Every README block runs for someone with only the README: no block waits for ../shared data,
    and a block that needs an earlier block's names says so on its first line."""
    for b in blocks(REPO / "README.md"):
        if b["lang"] not in ("python", "py"):
            continue
        assert not (b["marker"] or "").startswith("data"), f"README.md:{b['line']} needs data a user lacks"
        assert "../shared" not in b["code"], f"README.md:{b['line']} reads ../shared"
        free = _free_names(b["code"])
        first = b["code"].lstrip().splitlines()[0]
        if free:
            assert first.startswith("# continues the block above"), \
                f"README.md:{b['line']} uses {sorted(free)} from an earlier block without saying so on its first line"
            for name in free:
                assert name in first, f"README.md:{b['line']}: its first line should name {name!r}"


def test_free_names_finds_what_a_block_borrows():
    assert _free_names("import torch\nx = torch.zeros(3)\nprint(x, ds)") == {"ds"}
    assert _free_names("def f(a):\n    return a + b\n[y for y in range(3)]") == {"b"}


def test_readme_documents_the_data_folder():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    # huggingface_hub's current command (huggingface-cli is gone from its current releases)
    assert "ROBOCACHE_DATA" in text and "hf download lerobot/pusht --repo-type dataset" in text


def test_markers_are_known():
    for page in PAGES:
        for b in blocks(page):
            if b["marker"] is not None:
                _why_not(b["marker"], Path("/nonexistent"))   # raises on a typo'd marker


def test_readme_commands_unchanged():
    """The two set-up-and-run commands stay exactly as they are (CI copies them)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "```\npip install torch==2.13.0 -e . && python -m robocache demo\n```" in text
    assert "<!-- test-command -->\n```\npip install torch==2.13.0 -e \".[test]\" && python -m pytest -q\n```" in text


def test_readme_quickstart_near_the_top():
    """A 'train on your own LeRobot dataset' quickstart before the benchmarks, with the loader checkpoint
    and the pointers to robocache.viz and examples/explore.ipynb."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    at = text.lower().find("your own lerobot dataset")
    assert 0 <= at < text.find("## Benchmarks")
    section = text[at:text.find("## Benchmarks")]
    for needle in ("from_lerobot", "state_dict()", "load_state_dict(", "robocache.viz", "examples/explore.ipynb"):
        assert needle in section, needle


# --------------------------------------------------------------------------------------------
# the command line: each subcommand's --help is its own


@pytest.mark.parametrize("command,expect", [
    ("demo", ["--lerobot", "--steps", "--batch-size"]),
    ("bench", ["--op", "--quick"]),
    ("doctor", ["--json", "path"]),
    ("cache", ["list", "clear"]),
    ("info", ["usage: python -m robocache info"]),
])
def test_subcommand_help(command, expect, capsys):
    from robocache.__main__ import main

    try:
        rc = main([command, "--help"])
    except SystemExit as e:      # argparse's --help exits 0
        rc = e.code
    out = capsys.readouterr().out
    assert rc in (0, None), out
    assert f"python -m robocache {command}" in out, out
    for word in expect:
        assert word in out, (word, out)


def test_top_level_help_and_errors(capsys):
    from robocache.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "{info,demo,bench,doctor,cache}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["train"])
    assert e.value.code == 2 and "invalid choice: 'train'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


def test_info_rejects_arguments(capsys):
    from robocache.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["info", "--verbose"])
    assert e.value.code == 2 and "info takes no arguments" in capsys.readouterr().err


def test_python_dash_m_demo_help():
    """The README's ``demo --help`` through the real entry point (a fresh interpreter)."""
    import subprocess

    r = subprocess.run([sys.executable, "-m", "robocache", "demo", "--help"], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--lerobot" in r.stdout and "usage: python -m robocache demo" in r.stdout
