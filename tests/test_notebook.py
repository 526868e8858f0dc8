"""examples/explore.ipynb: committed clean, run top to bottom on the demo LeRobot set it writes itself
(in this process, then in a Jupyter kernel as `jupyter nbconvert --execute` runs it), and its rendered
copy docs/explore.md in step with it."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "explore.ipynb"
RENDERED = REPO / "docs" / "explore.md"
#: the whole notebook under Jupyter; it takes 10-20 s on 2 CPU cores. A reply nbclient leaves unread
#: waits forever (jupyter/nbclient#312), so only this bound turns a hang into a failure
JUPYTER_RUN_S = 600
#: docs/explore.md and its PNGs together: small enough to browse and to keep in git
RENDERED_MAX_BYTES = 1_500_000


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def needs_the_demo_writer():
    pytest.importorskip("pyarrow", reason="the notebook reads parquet: pip install -e '.[lerobot]'")
    pytest.importorskip("av", reason="the notebook writes its demo set's mp4 with PyAV")


def _run_cell(src: str, ns: dict, name: str):
    """exec a code cell; a trailing expression is evaluated and rendered as Jupyter would
    (``_repr_html_`` first), so the display path runs too."""
    tree = ast.parse(src, filename=name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), ns)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), name, "eval"), ns)
        if hasattr(value, "_repr_html_"):
            assert isinstance(value._repr_html_(), str)
        else:
            repr(value)


def test_notebook_is_clean():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the notebook has no code cells"
    for c in code:
        assert c.get("outputs") == [] and c.get("execution_count") is None, "commit the notebook with outputs cleared"
        assert not any(line.lstrip().startswith(("%", "!")) for line in c["source"]), \
            "no IPython magics: the test runs the cells as plain Python"


def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    """The notebook as a new user runs it: no data but what its first cell writes."""
    needs_the_demo_writer()
    monkeypatch.delenv("DATASET", raising=False)
    monkeypatch.chdir(tmp_path)                     # where it writes demo_lerobot/
    ns: dict = {"__name__": "__main__"}
    cells = code_cells()
    for i, src in enumerate(cells):
        _run_cell(src, ns, f"{NOTEBOOK.name}[code cell {i}]")
    assert len(cells) >= 12
    # what the notebook claims, checked
    ds = ns["ds"]
    assert len(ds) == 8 and (tmp_path / "demo_lerobot" / "meta" / "info.json").is_file()
    assert ns["frames"].shape == (3, 16, 96, 128, 3)
    pad = ns["is_pad"].sum(1).tolist()
    assert pad[:2] == [0, 0] and pad[2] > 0         # the third window starts 0.4 s before episode 4 ends
    assert ns["batch"]["image"].shape == (16, 8, 3, 96, 128)
    assert isinstance(ns["view"].figure, matplotlib.figure.Figure)
    assert len(plt.get_fignums()) >= 6


def test_notebook_runs_in_jupyter(tmp_path, monkeypatch):
    """What `jupyter nbconvert --execute` does: a kernel of this interpreter, nbclient sending the
    cells and reading the replies, ipywidgets installed (the slider cell draws its widget). It once
    hung there 2 runs in 7: the slider's figure went through an Output widget, which nbclient answers
    on the shell socket it is waiting on for the cell's reply."""
    nbclient = pytest.importorskip("nbclient", reason="runs the notebook in a kernel: pip install nbclient")
    nbformat = pytest.importorskip("nbformat")
    kernelspec = pytest.importorskip("ipykernel.kernelspec", reason="the kernel: pip install ipykernel")
    pytest.importorskip("ipywidgets", reason="the slider cell is the one that hung: pip install ipywidgets")
    needs_the_demo_writer()
    monkeypatch.delenv("DATASET", raising=False)
    # "python3" is this interpreter's kernel, not one a user installed for another environment
    kernelspec.install(kernel_name="python3", prefix=str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter" / "share" / "jupyter"))
    work = tmp_path / "work"                        # where it writes demo_lerobot/
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    started: list[int] = []
    client = nbclient.NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(work)}},
                                     on_cell_start=lambda cell, cell_index: started.append(cell_index))

    async def finished() -> bool:
        """Whether the notebook ran to its end within JUPYTER_RUN_S (a cell's error raises here);
        when not, its kernel is shut down."""
        task = asyncio.ensure_future(client.async_execute())
        await asyncio.wait({task}, timeout=JUPYTER_RUN_S)
        if task.done():
            task.result()
            return True
        task.cancel()
        # nbclient reports its cancelled wait as a dead kernel; it shuts the kernel down either way
        with contextlib.suppress(asyncio.CancelledError, nbclient.exceptions.DeadKernelError):
            await task
        return False

    if not asyncio.run(finished()):
        pytest.fail(f"the notebook did not finish in {JUPYTER_RUN_S} s under nbclient: stuck in its cell {started[-1:]}")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 9   # every plotting cell drew
    models = {s.get("_model_name") for s in client.widget_state.values()}
    assert {"FloatSliderModel", "ImageModel"} <= models and "OutputModel" not in models, models


def test_rendered_copy_matches_the_notebook():
    """docs/explore.md is the notebook's code cells, in order, each followed by what it drew; rerun
    tools/render_notebook.sh after editing the notebook."""
    text = RENDERED.read_text(encoding="utf-8")
    rendered = re.findall(r"^```python\n(.*?)\n```$", text, flags=re.DOTALL | re.MULTILINE)
    cells = code_cells()
    assert len(rendered) == len(cells), \
        f"docs/explore.md has {len(rendered)} code cells, the notebook {len(cells)}: bash tools/render_notebook.sh"
    for i, (r, c) in enumerate(zip(rendered, cells)):
        assert r == c, f"code cell {i} differs from docs/explore.md's: bash tools/render_notebook.sh"


def test_rendered_copy_images():
    """Every picture docs/explore.md shows is there, none is left over, and together they stay small."""
    text = RENDERED.read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert len(links) >= 9, "docs/explore.md shows fewer plots than the notebook draws"
    files = {(RENDERED.parent / link).resolve() for link in links}
    assert all(f.is_file() for f in files), sorted(str(f) for f in files if not f.is_file())
    folder = RENDERED.parent / "images" / "explore"
    assert set(folder.iterdir()) == files, "pictures no page shows: bash tools/render_notebook.sh"
    size = RENDERED.stat().st_size + sum(f.stat().st_size for f in files)
    assert size <= RENDERED_MAX_BYTES, f"docs/explore.md and its pictures take {size} bytes"
