"""The import graph of robocache/ and the call graph of csrc/ + cuda/ have no cycles.

A cycle between files means neither can be read, tested or replaced without the other, and in
Python it also means import order decides whether a name exists yet. Both graphs are built from
the sources alone (no build, no import of robocache), so this runs in CI on any machine:

- Python: every `import` / `from ... import` under robocache/ (inside functions too, absolute or
  relative) plus `__import__` / `importlib.import_module` of a constant name. `from P import x`
  depends on the module P.x when it exists, else on P; a package is its __init__.py. Importing
  P.m also runs P/__init__.py, so that counts too, except for the importer's own ancestors (a
  module inside P runs P's __init__ whatever it writes). Naming a package explicitly counts even
  for an ancestor: `from . import build_info` inside the package depends on its __init__.
  Imports under `if TYPE_CHECKING:` count too: this is about layers, not only import order.
- C: for every csrc/**/*.c and cuda/*.cu, the functions and data it defines with external
  linkage, and which of those names another file uses. Member accesses (`x.f`, `x->f`: calls
  through function pointers) are not uses; a name in a table (module.c's method table) is.

A failure prints every cycle with the line each edge comes from.

Then the rooms (issue 29): no module takes another module's private names (a short allow-list, each
with its reason), the dataset model imports no tool (doctor, viz, demo, bench), no library file over
800 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# cycles


def find_cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The shortest cycle through each file of every strongly connected component (Tarjan), each
    as [a, b, ..., a], deterministic; [] when the graph is a DAG. graph[a][b]: why a needs b."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)

    cycles = []
    for component in sorted(components):
        members = set(component)
        for start in component:  # the shortest cycle through each member (breadth first)
            cycle = _shortest_cycle(graph, members, start)
            if not any(_same_cycle(cycle, c) for c in cycles):
                cycles.append(cycle)
    return cycles


def _shortest_cycle(graph: dict[str, dict[str, str]], members: set[str], start: str) -> list[str]:
    parent: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        nxt = []
        for v in queue:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while parent[path[0]] is not None:
                        path.insert(0, parent[path[0]])
                    return path + [start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        queue = nxt
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def _same_cycle(a: list[str], b: list[str]) -> bool:
    """The same cycle read from another start."""
    a, b = a[:-1], b[:-1]
    return len(a) == len(b) and any(a == b[i:] + b[:i] for i in range(len(b)))


def describe(cycles: list[list[str]], graph: dict[str, dict[str, str]]) -> str:
    lines = []
    for cycle in cycles:
        lines.append("cycle: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            lines.append(f"    {a} -> {b}: {graph[a][b]}")
    common = set.intersection(*({(a, b) for a, b in zip(c, c[1:])} for c in cycles)) if cycles else set()
    for a, b in sorted(common):  # the one import to remove
        lines.append(f"every cycle above goes through {a} -> {b}: {graph[a][b]}")
    return "\n".join(lines)


def add_edge(graph: dict[str, dict[str, str]], a: str, b: str, why: str) -> None:
    if a != b:
        graph.setdefault(a, {}).setdefault(b, why)  # the first occurrence explains the edge


# ---------------------------------------------------------------------------------------------
# Python: robocache/ import graph


def python_modules(package_dir: Path) -> dict[str, Path]:
    """Module name -> file, for every .py under package_dir (a package's node is its __init__)."""
    base = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    # compiled extensions (robocache._C) are leaves: they import no Python of the package
    for path in package_dir.rglob("*"):
        if path.suffix in (".so", ".pyd", ".pyi") and path.name.split(".")[0] != "__init__":
            parts = list(path.relative_to(base).parts)
            parts[-1] = path.name.split(".")[0]
            modules.setdefault(".".join(parts), path)
    return modules


def _resolve_relative(importer: str, is_package: bool, level: int, name: str | None) -> str | None:
    """The absolute name `from <level dots><name>` means inside module `importer`, or None when
    it climbs above the top-level package (Python raises ImportError there)."""
    package = importer if is_package else importer.rpartition(".")[0]
    parts = package.split(".") if package else []
    if level - 1 > len(parts) - 1:
        return None
    parts = parts[: len(parts) - (level - 1)]
    if name:
        parts += name.split(".")
    return ".".join(parts)


def python_import_graph(package_dir: Path) -> dict[str, dict[str, str]]:
    top = package_dir.name
    modules = python_modules(package_dir)
    graph: dict[str, dict[str, str]] = {name: {} for name in modules}

    for importer, path in modules.items():
        if path.suffix != ".py":
            continue
        is_package = path.name == "__init__.py"
        ancestors = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 1)}
        if is_package:
            ancestors.add(importer)
        rel = path.relative_to(package_dir.parent)

        def depend(target: str, line: int, text: str, fromlist=()) -> None:
            """The module `target` imported (fromlist: names taken from it) at `line`."""
            if target != top and not target.startswith(top + "."):
                return
            why = f"{rel}:{line} {text}"
            parts = target.split(".")
            # parent packages run first; the importer's own ancestors are running already
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent not in ancestors and parent in modules:
                    add_edge(graph, importer, parent, why)
            named = [f"{target}.{x}" for x in fromlist if f"{target}.{x}" in modules]
            for sub in named:
                add_edge(graph, importer, sub, why)
            if len(named) < len(fromlist) or not fromlist:
                add_edge(graph, importer, target, why)  # names defined in target itself

        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):  # first use explains
            if isinstance(node, ast.Import):
                for alias in node.names:
                    depend(alias.name, node.lineno, f"import {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names if a.name != "*"]
                text = f"from {'.' * node.level}{node.module or ''} import {', '.join(names) or '*'}"
                target = (node.module if node.level == 0
                          else _resolve_relative(importer, is_package, node.level, node.module))
                if target:
                    depend(target, node.lineno, text, names)
            elif isinstance(node, ast.Call):
                dynamic = _dynamic_import(node, importer, is_package)
                if dynamic:
                    target, fromlist = dynamic
                    text = f"{ast.unparse(node.func)}({node.args[0].value!r}, ...)"
                    depend(target, node.lineno, text, fromlist)
    return graph


def _dynamic_import(call: ast.Call, importer: str, is_package: bool):
    """(module, fromlist) of `__import__("m", fromlist=[...])` or
    `importlib.import_module("m" or ".m")` with constant arguments, else None."""
    func = ast.unparse(call.func)
    if func not in ("__import__", "importlib.import_module", "import_module"):
        return None
    if not call.args or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
        return None
    name = call.args[0].value
    if func == "__import__":
        fromlist = []
        given = [k.value for k in call.keywords if k.arg == "fromlist"] + call.args[3:4]
        if given and isinstance(given[0], (ast.List, ast.Tuple)):
            fromlist = [e.value for e in given[0].elts
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return name, fromlist
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        target = _resolve_relative(importer, is_package, level, name[level:] or None)
        return (target, []) if target else None
    return name, []


# ---------------------------------------------------------------------------------------------
# C / CUDA: which file calls which


_C_NOISE = re.compile(
    r"//[^\n]*"                      # line comment
    r"|/\*.*?\*/"                    # block comment
    r'|"(?:\\.|[^"\\\n])*"'          # string literal
    r"|'(?:\\.|[^'\\\n])*'"          # char literal
    r"|^[ \t]*#[ \t]*include[^\n]*",  # header names are not uses
    re.S | re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TRANSPARENT = re.compile(r'(?:extern\s*""|namespace\s+[A-Za-z_]\w*)\s*$')  # extern "C" { }, named namespace
_DATA = re.compile(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|$)")


def strip_c(text: str) -> str:
    """Comments, literals and #include lines blanked out; line numbers kept."""
    def blank(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith('"'):
            return '""'
        if s.startswith("'"):
            return "' '"
        return "\n" * s.count("\n") or " "
    return _C_NOISE.sub(blank, text)


def _function_name(header: str) -> str | None:
    """The name a top-level `header {` defines as a function, or None (struct, initializer...)."""
    header = re.sub(r"\b(?:const|noexcept|override)\s*$", "", header.rstrip()).rstrip()
    if not header.endswith(")"):
        return None
    depth = 0
    for i in range(len(header) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(header[i], 0)
        if depth == 0:
            m = re.search(r"([A-Za-z_]\w*)\s*$", header[:i])
            return m.group(1) if m and m.group(1) not in ("if", "while", "for", "switch") else None
    return None


def c_definitions(code: str) -> tuple[set[str], set[str]]:
    """(external, local): names of functions and variables defined at file scope, with external
    linkage or not (static, or inside an anonymous namespace)."""
    external: set[str] = set()
    local: set[str] = set()
    depth = 0         # inside a function body or an initializer / struct
    start = 0         # where the current file-scope declaration began
    blocks = []       # open extern "C" / namespace blocks: True for an anonymous namespace
    open_header = ""  # the header of the brace block just closed, when it was not a function
    for m in re.finditer(r"[{};]", code):
        ch, pos = m.group(0), m.start()
        if depth > 0:
            depth += 1 if ch == "{" else -1 if ch == "}" else 0
            if depth == 0:
                start = pos + 1
            continue
        header = code[start:pos].strip()
        start = pos + 1
        if ch == "}":  # end of an extern "C" / namespace block
            if blocks:
                blocks.pop()
            open_header = ""
            continue
        if ch == "{" and (_TRANSPARENT.search(header) or re.search(r"\bnamespace\s*$", header)):
            blocks.append(header.endswith("namespace"))
            continue
        if ch == ";" and open_header:
            header = open_header + " {} " + header  # `typedef struct {...} name;`
        open_header = ""
        words = set(_IDENT.findall(header))
        if ch == "{":
            depth = 1
            name = _function_name(header)
            if name is None:
                open_header = header
                if header.endswith("="):
                    name = _data_name(header)
                    open_header = ""
        elif ("(" not in header.split("=")[0] and not words & {"typedef", "extern", "struct",
                                                                 "union", "enum", "using"}):
            name = _data_name(header)  # `int x = 1;` `const char rc_doc[] = "...";`
        else:
            name = None  # prototype, typedef, extern declaration, macro call
        if name:
            (local if "static" in words or any(blocks) else external).add(name)
    return external, local


def _data_name(header: str) -> str | None:
    """The variable `int x = 1` / `const char doc[]` (no initializer: a tentative definition)
    defines; None for anything with fewer than a type and a name."""
    m = _DATA.search(header.split("=")[0].rstrip() + ("=" if "=" in header else ""))
    words = _IDENT.findall(header.split("=")[0])
    if not m or len(words) < 2 or words[0] in ("struct", "union", "enum", "using", "template"):
        return None
    return m.group(1)


def c_sources(root: Path) -> list[Path]:
    return sorted((root / "csrc").rglob("*.c")) + sorted((root / "cuda").glob("*.cu"))


def c_name_uses(root: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, name, owner) for every use in one file of a name another file defines with
    external linkage."""
    files = {str(p.relative_to(root)): strip_c(p.read_text(encoding="utf-8")) for p in c_sources(root)}
    defined = {f: c_definitions(code) for f, code in files.items()}
    owner: dict[str, set[str]] = {}
    for f, (external, _) in defined.items():
        for name in external:
            owner.setdefault(name, set()).add(f)
    uses = []
    for f, code in files.items():
        own = defined[f][0] | defined[f][1]
        for m in _IDENT.finditer(code):
            name = m.group(0)
            if name in own or name not in owner:
                continue
            before = code[max(0, m.start() - 2):m.start()].rstrip()
            if before.endswith(".") or before.endswith("->"):
                continue  # a struct member: a call through a function pointer, not a file's function
            line = code.count("\n", 0, m.start()) + 1
            uses += [(f, line, name, g) for g in sorted(owner[name])]
    return uses


def c_call_graph(root: Path) -> dict[str, dict[str, str]]:
    graph: dict[str, dict[str, str]] = {str(p.relative_to(root)): {} for p in c_sources(root)}
    for f, line, name, g in c_name_uses(root):
        add_edge(graph, f, g, f"{f}:{line} uses {name} (defined in {g})")
    return graph


def c_glue_layer_violations(root: Path) -> list[str]:
    """How the CPython glue breaks its layers ([] when it holds). module.c is the top: it reaches
    an op (csrc/py_<op>.c) only through that op's entry of its hook table, `rc_<op>_op`, the one
    name an op file defines with external linkage (no init/clear hook of its own that module.c
    would call); and no file uses a name module.c defines (an op calling back up into it was the
    module.c <-> py_frames.c circle of issue 29)."""
    bad = []
    for path in sorted((root / "csrc").glob("py_*.c")):
        external, _ = c_definitions(strip_c(path.read_text(encoding="utf-8")))
        extra = sorted(n for n in external if not re.fullmatch(r"rc_\w+_op", n))
        if extra or len(external) != 1:
            bad.append(f"{path.relative_to(root)} exposes {sorted(external)}: an op file exposes "
                       "only its hook-table entry rc_<op>_op")
    for f, line, name, g in c_name_uses(root):
        if g == "csrc/module.c":
            bad.append(f"{f}:{line} uses {name} of csrc/module.c: nothing calls up into module.c")
        elif f == "csrc/module.c" and re.fullmatch(r"csrc/py_\w+\.c", g) and not re.fullmatch(r"rc_\w+_op", name):
            bad.append(f"{f}:{line} uses {name} of {g}: module.c reaches an op only through its rc_<op>_op")
    return bad


# ---------------------------------------------------------------------------------------------
# the tests


def test_python_imports_have_no_cycle():
    graph = python_import_graph(ROOT / "robocache")
    assert "robocache" in graph and len(graph) > 5, sorted(graph)  # found the package at all
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in robocache/:\n" + describe(cycles, graph)


def test_c_files_have_no_cycle():
    graph = c_call_graph(ROOT)
    assert any("module.c" in f for f in graph) and any(graph.values()), graph  # found the sources
    cycles = find_cycles(graph)
    assert not cycles, "call cycles between C/CUDA files:\n" + describe(cycles, graph)


# the checkers themselves, on small trees: a checker that finds nothing must fail here


def test_python_checker_finds_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("A = 1\ndef f():\n    from . import b\n")  # inside a function
    (pkg / "b.py").write_text("import pkg.sub.c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")  # `from . import x`: x a module
    (pkg / "d.py").write_text("X = __import__('pkg.e', fromlist=['E'])\n")
    (pkg / "e.py").write_text("from pkg.d import X\n")
    (pkg / "f.py").write_text("def g():\n    from . import A\n")  # a name of __init__: the package
    graph = python_import_graph(pkg)
    cycles = find_cycles(graph)
    assert ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"] in cycles, describe(cycles, graph)
    assert ["pkg.d", "pkg.e", "pkg.d"] in cycles, describe(cycles, graph)
    assert "pkg" in graph["pkg.f"] and "pkg.a" in graph["pkg"]
    assert not any("pkg.f" in c for c in cycles)  # pkg does not import f
    assert "pkg" not in graph["pkg.sub.c"]  # an ancestor's __init__ runs anyway: no edge


def test_c_checker_finds_cycles(tmp_path):
    (tmp_path / "csrc" / "cpu").mkdir(parents=True)
    (tmp_path / "cuda").mkdir()
    (tmp_path / "csrc" / "a.c").write_text(
        '#include "a.h"\n/* b_helper( in a comment */\nint a_api(void) { return b_helper(); }\n'
        "static int a_local(void) { return 0; }\n")
    (tmp_path / "csrc" / "b.c").write_text(
        'int b_helper(void) { const char *s = "a_local"; return a_api(); }\n'
        "int b_uses_pointer(struct t *x) { return x->a_api() + x.a_api(); }\n")
    (tmp_path / "csrc" / "cpu" / "k.c").write_text("int k_kernel(void) { return 0; }\n")
    (tmp_path / "csrc" / "module.c").write_text(
        "static const void *table[] = {a_api, 0};\nconst char doc_text[] = \"x\";\n")
    (tmp_path / "cuda" / "k.cu").write_text(
        'namespace {\n__global__ void a_api(int x) {}\n}\n'
        'extern "C" int k_cuda(void) { return k_kernel(); }\n')
    graph = c_call_graph(tmp_path)
    cycles = find_cycles(graph)
    assert cycles == [["csrc/a.c", "csrc/b.c", "csrc/a.c"]], describe(cycles, graph)
    assert graph["csrc/module.c"] == {"csrc/a.c": graph["csrc/module.c"]["csrc/a.c"]}
    assert graph["cuda/k.cu"] == {"csrc/cpu/k.c": graph["cuda/k.cu"]["csrc/cpu/k.c"]}
    assert c_definitions(strip_c((tmp_path / "csrc" / "module.c").read_text()))[0] == {"doc_text"}


def test_c_glue_reaches_ops_only_through_the_hook_table():
    bad = c_glue_layer_violations(ROOT)
    assert not bad, "the C glue's layers:\n" + "\n".join(bad)


def test_c_glue_checker_finds_the_old_circle(tmp_path):
    """The layout issue 29 removed: module.c called each op's init hook, and the ops called
    rc_get_state in module.c back; an op also exposing its entry point beside its rc_<op>_op."""
    (tmp_path / "csrc").mkdir()
    (tmp_path / "cuda").mkdir()
    (tmp_path / "csrc" / "module.c").write_text(
        "void *rc_get_state(void *m) { return m; }\n"
        "static int exec_module(void *m) { return rc_frames_init_state(rc_get_state(m)) + rc_resample_op.id; }\n")
    (tmp_path / "csrc" / "py_frames.c").write_text(
        "int rc_frames_init_state(void *st) { return 0; }\n"
        "static int gather(void *m) { return rc_get_state(m) != 0; }\n")
    (tmp_path / "csrc" / "py_resample.c").write_text(
        "static int resample(void) { return 0; }\nconst struct op rc_resample_op = {0};\n")
    bad = c_glue_layer_violations(tmp_path)
    assert any(b.startswith("csrc/py_frames.c exposes ['rc_frames_init_state']") for b in bad), bad
    assert any(b.startswith("csrc/py_frames.c:2 uses rc_get_state of csrc/module.c") for b in bad), bad
    assert any(b.startswith("csrc/module.c:2 uses rc_frames_init_state of csrc/py_frames.c") for b in bad), bad
    assert not any("py_resample.c" in b for b in bad), bad  # the hook-table entry alone is fine
    assert find_cycles(c_call_graph(tmp_path)) == [["csrc/module.c", "csrc/py_frames.c", "csrc/module.c"]]


# ---------------------------------------------------------------------------------------------
# the video layer (DESIGN.md §3d): one place opens video files, below readers/ and frames/

# modules outside robocache/video/ allowed to import a video library, and why
VIDEO_LIBRARY_USERS = {"robocache.bench.torch_loader": "the torch DataLoader baseline decodes as users' workers do"}


def _imports_of(package_dir: Path) -> dict[str, set[str]]:
    graph = python_import_graph(package_dir)
    return {m: set(deps) for m, deps in graph.items()}


def test_frames_and_video_do_not_import_readers():
    deps = _imports_of(ROOT / "robocache")
    bad = [(m, d) for m, ds in deps.items() for d in ds
           if (m.startswith("robocache.frames") and d.startswith("robocache.readers"))
           or (m.startswith("robocache.video") and (d.startswith("robocache.readers") or d.startswith("robocache.frames")))]
    assert not bad, f"layers broken (video < frames, video < readers): {bad}"


def test_only_the_video_layer_imports_video_libraries():
    found = []
    for path in sorted((ROOT / "robocache").rglob("*.py")):
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if mod.startswith("robocache.video") or mod in VIDEO_LIBRARY_USERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                names = [node.args[0].value]
            for n in names:
                if n.split(".")[0] in ("av", "cv2") or n.startswith("torchvision.io"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {n}")
    assert not found, "video libraries outside robocache/video/:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------------
# rooms by job (issue 29): no module takes another's private names; no library file too long to read

# (importer, "module.name") allowed to cross a module boundary with a private name, and why
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
# modules whose underscore names are the package's own, not private to the module: the compiled
# extension keeps its user API unprefixed and its package-internal entry points (_build_info,
# _graph_launch, _host_register...) underscored, as CPython extensions do
PACKAGE_INTERNAL_MODULES = {"robocache._C": "the extension's package-internal entry points"}
MAX_LINES = 800


def private_imports(package_dir: Path) -> list[tuple[str, str, str]]:
    """(importer, "module.name", "file:line") for every private name (``_x``, not dunders) a module of
    ``package_dir`` takes from another module of it: ``from M import _x`` (absolute or relative, inside
    functions too) and ``m._x`` where ``m`` names a module imported from the package. Importing a private
    module (``from . import _util``) is fine: a leading underscore on a module means private to the package."""
    top = package_dir.name
    modules = python_modules(package_dir)
    found = []
    private = lambda name: name.startswith("_") and not name.startswith("__")
    for importer, path in modules.items():
        if path.suffix != ".py":
            continue
        is_package = path.name == "__init__.py"
        rel = path.relative_to(package_dir.parent)
        aliases: dict[str, str] = {}      # local name -> module of the package it is bound to
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = (node.module if node.level == 0
                          else _resolve_relative(importer, is_package, node.level, node.module))
                if not target or (target != top and not target.startswith(top + ".")):
                    continue
                for a in node.names:
                    full = f"{target}.{a.name}"
                    if full in modules:
                        aliases[a.asname or a.name] = full
                    elif private(a.name) and target != importer:
                        found.append((importer, full, f"{rel}:{node.lineno}"))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and private(node.attr) and aliases[node.value.id] != importer):
                found.append((importer, f"{aliases[node.value.id]}.{node.attr}", f"{rel}:{node.lineno}"))
    return sorted(set(found))


def test_no_module_imports_another_modules_private_names():
    found = private_imports(ROOT / "robocache")
    assert found, "the checker found nothing at all: robocache._C's names should show"  # it looks
    bad = [f"{where} {imp} takes {name}" for imp, name, where in found
           if (imp, name) not in PRIVATE_IMPORTS_ALLOWED and name.rpartition(".")[0] not in PACKAGE_INTERNAL_MODULES]
    assert not bad, ("private names taken across modules (make them public in a sensible module, or add "
                     "them to PRIVATE_IMPORTS_ALLOWED with the reason):\n" + "\n".join(bad))
    stale = set(PRIVATE_IMPORTS_ALLOWED) - {(imp, name) for imp, name, _ in found}
    assert not stale, f"allowed private imports no longer made (drop them from the list): {sorted(stale)}"
    assert len(PRIVATE_IMPORTS_ALLOWED) <= 5, "a handful at most"


def test_no_library_file_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "robocache").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"library files over {MAX_LINES} lines (split them by job): {long}"


def test_the_model_does_not_import_tools():
    deps = _imports_of(ROOT / "robocache")
    model = ("robocache.data.dataset", "robocache.data.stream", "robocache.data.build", "robocache.data.stats")
    tools = ("robocache.doctor", "robocache.viz", "robocache.demo", "robocache.bench", "robocache.__main__")
    bad = [(m, d) for m in model for d in deps.get(m, ()) if d.startswith(tools)]
    assert not bad, f"the dataset model imports tools (tools import the model, not the other way): {bad}"


def test_private_import_checker(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import _util\n")
    (pkg / "_util.py").write_text("def helper(): pass\n_hidden = 1\n")
    (pkg / "a.py").write_text("_own = 1\ndef f():\n    from .b import _secret, public\n    return _own\n")
    (pkg / "b.py").write_text("_secret = public = 1\nfrom . import a as mod_a\nx = mod_a._own\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from .._util import helper\nfrom pkg._util import _hidden\n")
    found = {(imp, name) for imp, name, _ in private_imports(pkg)}
    assert found == {("pkg.a", "pkg.b._secret"), ("pkg.b", "pkg.a._own"), ("pkg.sub.c", "pkg._util._hidden")}, found


# ---------------------------------------------------------------------------------------------
# tiers (issue 45): a tier is an object of robocache/frames/tiers/, never a name compared elsewhere

TIER_NAMES = {"device", "host", "disk", "cpu", "compressed", "lossless"}


def tier_comparisons(path: Path) -> list[str]:
    """``x == "disk"``, ``tier in ("device", "cpu")``, ``t != "host"``...: comparisons of an expression
    naming a tier (its text says ``tier``) with tier-name literals, as "line: source"."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = set()
        for s in sides:
            items = s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s]
            literals |= {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
        named = any("tier" in ast.unparse(s).lower() for s in sides
                    if not isinstance(s, (ast.Constant, ast.Tuple, ast.List, ast.Set)))
        if named and literals & TIER_NAMES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_tier_names_are_compared_only_in_the_tier_registry():
    """Adding a tier is one file in frames/tiers/ and one registration line: code that branches on a
    tier's name would have to learn every new one, so it asks the tier object instead."""
    registry = ROOT / "robocache" / "frames" / "tiers"
    bad = {str(p.relative_to(ROOT)): found for p in sorted((ROOT / "robocache").rglob("*.py"))
           if registry not in p.parents and (found := tier_comparisons(p))}
    assert not bad, "tier names compared outside robocache/frames/tiers/:\n" + "\n".join(
        f"  {f}:{line}" for f, lines in bad.items() for line in lines)


def test_tier_comparison_checker_sees_the_forms(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('if tier == "disk": pass\nif store.tier in ("device", "cpu"): pass\n'
                 'if dev.type == "cpu": pass\nif kind.on_gpu: pass\nif "lossless" != t_tier: pass\n')
    assert [f.split(":")[0] for f in tier_comparisons(p)] == ["1", "2", "5"]


# ---------------------------------------------------------------------------------------------
# the script folders (issue 45 item 6): benchmarks, tests, tools and examples import their siblings by
# bare name (their folder is first on sys.path); no circle there either


def script_import_graph(folder: Path) -> dict[str, dict[str, str]]:
    """Stem -> {imported sibling stem: why} over every .py under ``folder`` (imports inside functions too)."""
    files = {p.stem: p for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts}
    graph: dict[str, dict[str, str]] = {stem: {} for stem in files}
    for stem, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            for name in names:
                first = name.split(".")[0]
                if first in files and first != stem:
                    add_edge(graph, stem, first, f"{path.relative_to(folder.parent)}:{node.lineno} import {name}")
    return graph


def test_script_folders_have_no_import_cycle():
    for name in ("benchmarks", "tests", "tools", "examples"):
        graph = script_import_graph(ROOT / name)
        cycles = find_cycles(graph)
        assert not cycles, f"import cycles in {name}/:\n" + describe(cycles, graph)


def test_script_checker_finds_cycles(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    import b\n")
    (tmp_path / "b.py").write_text("from a import f\n")
    (tmp_path / "c.py").write_text("import a\n")
    assert find_cycles(script_import_graph(tmp_path))
