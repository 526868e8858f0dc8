"""docs/architecture.md is the map of the tree (issue 45 item 5): its first code block names every file of
the package and of csrc/ and cuda/, by folder and indentation, and names no file that is not there. A file
added, moved or deleted without the map following fails here."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SOURCES = (".py", ".pyi", ".c", ".h", ".cu", ".cuh")


def mapped_files(text: str) -> set[str]:
    """Paths the tree block names: an entry is a name ending in '/' or a source suffix, indented by two
    spaces a level, within the first 20 columns (a name with ``<op>`` in it is a pattern, not a file) (the descriptions start at column 27). ``cpu/x.c``-style
    entries name a file below their folder; ``a.[ch]`` names a.c and a.h."""
    block = text.split("```", 2)[1]
    stack: list[str] = []
    found = set()
    for line in block.splitlines():
        m = re.match(r"( *)(\S+)", line)
        if not m or len(m.group(1)) >= 20:
            continue
        depth, name = len(m.group(1)) // 2, m.group(2)
        if "<" in name or not (name.endswith("/") or name.endswith(SOURCES) or name.endswith(".[ch]")):
            continue        # py_<op>.c: a pattern the lines below it spell out
        del stack[depth:]
        if name.endswith("/"):
            stack.append(name)
            continue
        names = [name[:-5] + ".c", name[:-5] + ".h"] if name.endswith(".[ch]") else [name]
        found |= {"".join(stack) + n for n in names}
    return found


def tree_files() -> set[str]:
    out = set()
    for top in ("robocache", "csrc", "cuda"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and p.suffix in SOURCES and "__pycache__" not in p.parts:
                out.add(p.relative_to(ROOT).as_posix())
    return out


def test_the_map_names_every_library_file_and_no_other():
    named, there = mapped_files(DOC.read_text()), tree_files()
    assert not there - named, f"files docs/architecture.md does not name: {sorted(there - named)}"
    assert not named - there, f"files docs/architecture.md names that are not there: {sorted(named - there)}"


def test_the_readme_links_the_map():
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()


def test_the_map_reader_follows_folders():
    text = "x\n```\nrobocache/     p\n  a.py         d\n  sub/         d\n    b.py       d\n" \
           "                           c.py is a description\n  d.py  d\ncsrc/  d\n  cpu/x.c   d\n  p.[ch]  d\n```\n"
    assert mapped_files(text) == {"robocache/a.py", "robocache/sub/b.py", "robocache/d.py", "csrc/cpu/x.c",
                                  "csrc/p.c", "csrc/p.h"}
