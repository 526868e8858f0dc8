"""mypy on a user's script: the public API (Dataset, DataLoader, Window, resample, voxelize, viz, the demo
writer) type-checks from the user's side, and robocache's own files report no errors.

robocache ships ``py.typed``, so mypy analyses the package's sources when a script imports it (as it
does for a checkout or an editable install, the README's install). Files with known errors are listed
in PENDING: the test fails when any other file has one (a new error), and when a listed file has
become clean (so the list only shrinks). Runs when mypy is installed (the ``test`` extra has it).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
REPO = Path(__file__).resolve().parents[1]

#: files with mypy errors left (issue 33, item 7): none now; a file that gets one fails the test
PENDING: set[str] = set()

USER_SCRIPT = '''
import numpy as np
import torch

import robocache
from robocache import DataLoader, Dataset, Window
from robocache.demo import write_lerobot

path = write_lerobot("demo_lerobot", overwrite=True)
ds: Dataset = Dataset.from_lerobot(path)
print(len(ds), ds.streams["action"].rate, ds.episode(0))
loader = DataLoader(ds, batch_size=8, shuffle=True, seed=0, windows={
    "state": Window("observation.state", normalize="min_max"),
    "action": Window("action", indices=range(16)),
})
loader.set_epoch(1)
for batch in loader:
    x = batch["action"] * 2
    break
loader.load_state_dict(loader.state_dict())
out = robocache.resample(np.zeros((4, 3), np.float32), np.arange(4.0), np.linspace(0, 3, 7))
mode: str = "nearest"                          # a mode from a config file: a str, not a Literal
values, pad = robocache.resample(np.zeros((4, 3), np.float32), np.arange(4.0), np.linspace(0, 3, 7),
                                 mode="previous", return_mask=True)
maybe = robocache.resample(np.zeros(4, np.float32), np.arange(4.0), np.linspace(0, 3, 7), mode=mode,
                           return_mask=bool(len(ds)))
vox = robocache.voxelize(torch.zeros(10, 3), grid=8, voxel_size=0.1, origin=(0.0, 0.0, 0.0))
fig = robocache.viz.plot_episode(ds, 0)
view = robocache.viz.episode_view(ds, 0, interactive=False)
print(robocache.build_info()["cuda"], robocache.viz.rate_table(ds), view.figure)
'''


def test_user_script_type_checks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(USER_SCRIPT))
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                        str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=900,
                       env={"MYPYPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    errors = [ln for ln in r.stdout.splitlines() if ": error:" in ln]
    assert not [e for e in errors if e.startswith(str(script))], "\n".join(errors)   # the user's own lines
    if not (REPO / "robocache").is_dir():
        return   # an installed copy (tools/test_installed.py): mypy reports nothing inside site-packages
    files = {Path(e.split(":")[0]).resolve().relative_to(REPO).as_posix() for e in errors
             if Path(e.split(":")[0]).resolve().is_relative_to(REPO)}
    new = sorted(files - PENDING)
    assert not new, "mypy errors in robocache files that had none:\n" + "\n".join(
        e for e in errors if any(f in e for f in new))
    fixed = sorted(PENDING - files)
    assert not fixed, f"now clean, remove from PENDING: {fixed}"
    assert not re.search(r"robocache/(viz/|demo\.py|doctor\.py|__init__\.py)", "\n".join(errors))
