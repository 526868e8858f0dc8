"""What an install tells its user: build_info() and `python -m robocache info` say whether the CUDA
kernels are compiled in, and a CPU-only build on a machine with a GPU warns once at import,
without importing torch. Runs against whatever robocache is importable (the editable build in the
README's command, the installed wheel under tools/test_installed.py)."""

import os
import subprocess
import sys
import textwrap

import pytest

import robocache


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "ROBOCACHE_NO_CUDA_WARNING"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=120)


def test_build_info_says_what_was_built():
    info = robocache.build_info()
    assert info["version"] == robocache.__version__
    assert isinstance(info["cuda"], bool)
    for key in ("cuda_runtime", "cuda_driver"):
        assert isinstance(info[key], int) and info[key] >= 0, key
    assert isinstance(info["nvidia_driver"], str)
    if info["cuda"]:
        assert info["cpu_only_reason"] == ""
        assert info["cuda_toolkit"] and info["archs"], "a CUDA build names its toolkit and archs"
        assert info["cuda_runtime"] >= 11000, "the runtime linked in"
        assert all(a.rstrip("af").isdigit() for a in info["archs"].split(";"))
    else:
        assert info["cpu_only_reason"] in ("no-toolkit", "no-gpu", "disabled")
        assert info["cuda_toolkit"] == "" and info["archs"] == "" and info["cuda_runtime"] == 0
        assert info["devices"] == []


def test_info_first_line_says_whether_cuda_is_compiled_in():
    r = run_python("import robocache.__main__ as m; raise SystemExit(m.main(['info']))")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"robocache {robocache.__version__}: ")
    if robocache.build_info()["cuda"]:
        assert "CUDA kernels compiled in" in first and "linked statically" in first
    else:
        assert "CPU-only build, no CUDA kernels compiled in" in first and "docs/install.md" in first
    assert r.stdout.splitlines()[1].startswith("driver: ")


# a torch stand-in that "sees" two GPUs, imported before robocache as a training script does
FAKE_CUDA_TORCH = """
import sys, types, warnings
torch = types.ModuleType("torch")
torch.version = types.SimpleNamespace(cuda="12.8")
torch.cuda = types.SimpleNamespace(device_count=lambda: 2)
sys.modules["torch"] = torch
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import robocache
    import robocache  # a second import is the same module: no second warning
hits = [w for w in caught if issubclass(w.category, robocache.CPUOnlyBuildWarning)]
print(len(hits))
for w in hits:
    print(w.message)
"""


def test_cpu_only_build_warns_once_when_torch_sees_a_gpu():
    r = run_python(FAKE_CUDA_TORCH)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    info = robocache.build_info()
    if info["cuda"] or info["cpu_only_reason"] == "disabled":
        assert lines[0] == "0", "a CUDA build, or a CPU-only one built on purpose, stays quiet"
    else:
        assert lines[0] == "1", r.stdout
        assert "built without its CUDA kernels" in lines[1] and "torch sees 2 CUDA devices" in lines[1]
        assert "docs/install.md" in lines[1] and "ROBOCACHE_NO_CUDA_WARNING" in lines[1]


def test_cpu_only_warning_can_be_silenced():
    r = run_python(FAKE_CUDA_TORCH, ROBOCACHE_NO_CUDA_WARNING="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "0"


def test_import_does_not_import_torch():
    r = run_python("""
        import sys, robocache
        print('torch' in sys.modules)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_no_warning_without_a_gpu():
    """torch (a CPU build here, or a CUDA build seeing no device) is asked, and says no GPU."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU")
    r = run_python("""
        import warnings, torch
        warnings.simplefilter("error")
        import robocache
        print("ok")
    """, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# --------------------------------------------------------------------------------------------
# the build says what it does: setup.py's CUDA notice (setup.py is run with setuptools.setup
# replaced, so nothing is built)


def _setup_module(monkeypatch):
    import runpy
    from pathlib import Path

    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    return runpy.run_path(str(Path(__file__).resolve().parents[1] / "setup.py"), run_name="setup_under_test")


def test_cuda_build_says_how_long_and_how_to_skip(monkeypatch):
    pytest.importorskip("setuptools")
    setup = _setup_module(monkeypatch)
    text = setup["cuda_build_notice"](9, ["80", "86", "89", "90", "100", "120"], 0)
    assert "compiling 9 CUDA files for 6 GPU architectures (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120)" in text
    assert "takes minutes" in text and "this machine has no NVIDIA GPU" in text
    assert "ROBOCACHE_CUDA=0 pip install" in text
    with_gpu = setup["cuda_build_notice"](9, ["90"], 1)
    assert "no NVIDIA GPU" not in with_gpu and "ROBOCACHE_CUDA=0" in with_gpu and "ROBOCACHE_CUDA_ARCHS" in with_gpu


def test_cuda_build_reports_each_file(monkeypatch, tmp_path, capsys):
    """compile_cuda with a stand-in nvcc: the notice first, then one line per file as it finishes."""
    pytest.importorskip("setuptools")
    setup = _setup_module(monkeypatch)
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\nwhile [ $# -gt 1 ]; do shift; done; touch \"$1\"\n")   # touches its -o file
    nvcc.chmod(0o755)

    class Toolkit:
        pass

    tk = Toolkit()
    tk.nvcc, tk.home, tk.version_text = nvcc, tmp_path, "fake"
    cmd = setup["BuildExt"].__new__(setup["BuildExt"])
    cmd.build_temp = str(tmp_path / "build")
    monkeypatch.delenv("ROBOCACHE_CUDA_CACHE", raising=False)
    objects = cmd.compile_cuda(tk, ["90"])
    out = capsys.readouterr().out
    n = len(objects)
    assert n >= 1 and out.index("compiling") < out.index(f"[1/{n}]")
    assert all(f"[{k}/{n}]" in out for k in range(1, n + 1))
